// Package emul implements the system commands of an emulated lab host
// (apt-get, apt-mark, apt-config, dpkg, dpkg-query, uname, systemctl,
// systemd-run, reboot, update-grub, grub-reboot, grub-editenv, nvidia-smi,
// getent, findmnt, lsmod, sysctl, canonical-livepatch, etcdctl, sudo, ...)
// as one multi-call program that dispatches on argv[0]. Each command reads
// and writes the host's state through package machine, prints what the real
// tool prints, and exits as it exits.
//
// The host is named by the environment the lab gives every process on it
// (LAB_HOST_DIR, LAB_HOST, LAB_CONTROL). A command never touches a path
// outside the host directory: where it wraps a real tool (grub-reboot,
// grub-editenv) it refuses paths outside the host root. Production packages
// must not import it.
package emul

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

// Env names the lab sets on every process of a host.
const (
	EnvHostDir    = "LAB_HOST_DIR"
	EnvHost       = "LAB_HOST"
	EnvControl    = "LAB_CONTROL"
	EnvTimerScale = "LAB_TIMER_SCALE"
	EnvStepDelay  = "LAB_INSTALL_STEP"
)

type cmdFunc func(c *ctx) int

// ctx is one command invocation.
type ctx struct {
	name   string
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	host   *machine.Host
	now    time.Time
}

var commands = map[string]cmdFunc{}

func register(f cmdFunc, names ...string) {
	for _, n := range names {
		commands[n] = f
	}
}

// Commands returns the names of the emulated commands (what the lab links
// into each host's bin directory). GPU-only tools are included; the lab
// leaves them out on control-plane hosts.
func Commands() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Serves reports whether Main runs argv[0] as a lab-host command: an
// emulated command's name, or "labtool" (the helper named by itself, with
// the command in argv[1]).
func Serves(argv0 string) bool {
	name := filepath.Base(argv0)
	_, ok := commands[name]
	return ok || name == "labtool"
}

// GPUOnly are the commands a host without GPUs does not have.
var GPUOnly = []string{"nvidia-smi"}

// ControlPlaneOnly are the commands only control-plane hosts have.
var ControlPlaneOnly = []string{"etcdctl"}

// Main runs the command argv[0] names (or, for "labtool", argv[1]) and
// returns its exit status.
func Main(argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "labtool: no command")
		return 2
	}
	name := filepath.Base(argv[0])
	args := argv[1:]
	if name == "labtool" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: labtool COMMAND [ARGS...]\ncommands: "+strings.Join(Commands(), " "))
			return 2
		}
		if args[0] == unitRunner {
			return runUnit(args[1:])
		}
		name, args = args[0], args[1:]
	}
	f, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: command not emulated by the lab\n", name)
		return 127
	}
	dir := os.Getenv(EnvHostDir)
	if dir == "" {
		fmt.Fprintf(os.Stderr, "%s: %s is not set: not running on an emulated lab host\n", name, EnvHostDir)
		return 127
	}
	h, err := machine.Open(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 127
	}
	c := &ctx{name: name, args: args, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, host: h, now: time.Now()}
	return f(c)
}

func (c *ctx) errf(format string, args ...any) {
	fmt.Fprintf(c.stderr, format, args...)
}

func (c *ctx) outf(format string, args ...any) {
	fmt.Fprintf(c.stdout, format, args...)
}

// pathEnv is the PATH of processes on the host.
func pathEnv() string { return os.Getenv("PATH") }

// hostPath maps a path as a script names it to the host root: paths
// already inside the root stay as they are; other absolute paths are taken
// as paths on the host.
func (c *ctx) hostPath(p string) string {
	root := c.host.Root()
	if p == root || strings.HasPrefix(p, root+"/") {
		return p
	}
	return c.host.Path(p)
}

// inRoot reports whether p lies inside the host root.
func (c *ctx) inRoot(p string) bool {
	abs, err := filepath.Abs(p)
	if err != nil {
		return false
	}
	root := c.host.Root()
	return abs == root || strings.HasPrefix(abs, root+"/")
}

// logicalPath is the path on the host of a path inside the host root.
func (c *ctx) logicalPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	root := c.host.Root()
	if abs == root {
		return "/"
	}
	if rest, ok := strings.CutPrefix(abs, root+"/"); ok {
		return "/" + rest
	}
	return abs
}

// notify tells the lab about an event on this host (reboot, poweroff,
// install-started) and waits for its answer.
func notify(event string) error {
	sock := os.Getenv(EnvControl)
	if sock == "" {
		return errors.New("the lab control socket is not set (" + EnvControl + ")")
	}
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return fmt.Errorf("reach the lab: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := json.Marshal(map[string]string{"host": os.Getenv(EnvHost), "event": event})
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("tell the lab: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the lab's answer: %w", err)
	}
	var resp struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &resp); err != nil {
		return fmt.Errorf("read the lab's answer: %w", err)
	}
	if !resp.OK {
		return errors.New(resp.Error)
	}
	return nil
}

// flagSet is a small getopt: it splits args into options (with values for
// the names in withValue) and operands, accepting "--name=value",
// "--name value", "-x value", "-xvalue" and bundled short flags.
type flagSet struct {
	opts     map[string][]string
	order    []string
	operands []string
}

func (f *flagSet) has(names ...string) bool {
	for _, n := range names {
		if _, ok := f.opts[n]; ok {
			return true
		}
	}
	return false
}

func (f *flagSet) get(names ...string) (string, bool) {
	for _, n := range names {
		if v, ok := f.opts[n]; ok && len(v) > 0 {
			return v[len(v)-1], true
		}
	}
	return "", false
}

func (f *flagSet) all(names ...string) []string {
	var out []string
	for _, n := range f.order {
		if slices.Contains(names, n) {
			out = append(out, f.opts[n]...)
		}
	}
	return out
}

func (f *flagSet) count(name string) int { return len(f.opts[name]) }

// parseFlags parses args; stopAtOperand stops option parsing at the first
// operand (commands that run other commands).
func parseFlags(args []string, withValue []string, stopAtOperand bool) (*flagSet, error) {
	f := &flagSet{opts: map[string][]string{}}
	add := func(n, v string) {
		if _, ok := f.opts[n]; !ok {
			f.order = append(f.order, n)
		}
		f.opts[n] = append(f.opts[n], v)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			f.operands = append(f.operands, args[i+1:]...)
			return f, nil
		case strings.HasPrefix(a, "--"):
			n, v, hasV := strings.Cut(a[2:], "=")
			if slices.Contains(withValue, "--"+n) && !hasV {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("option '--%s' requires an argument", n)
				}
				i++
				v = args[i]
			}
			add("--"+n, v)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				n := "-" + a[j:j+1]
				if slices.Contains(withValue, n) {
					v := a[j+1:]
					if v == "" {
						if i+1 >= len(args) {
							return nil, fmt.Errorf("option requires an argument -- '%s'", a[j:j+1])
						}
						i++
						v = args[i]
					}
					add(n, v)
					break
				}
				add(n, "")
			}
		default:
			if stopAtOperand {
				f.operands = append(f.operands, args[i:]...)
				return f, nil
			}
			f.operands = append(f.operands, a)
		}
	}
	return f, nil
}
