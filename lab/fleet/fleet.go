// Package fleet runs the lab's emulated Ubuntu GPU servers on one machine,
// each reached over real SSH on 127.0.0.1 so that the unchanged production
// code (the host package, the scripts in scripts/host) drives them as it
// drives real hosts.
//
// Each host has a directory (see machine.Host) holding its persisted
// state, a root laid out like its filesystem, and a bin directory of
// emulated system commands (package emul: links to the executable that runs
// the lab, which plays each command through HostCommandMain). Its SSH
// server runs commands with the real /bin/sh, with that bin directory and a
// directory of harmless real tools as the whole PATH, and with the path
// overrides of the host scripts pointing into the host root. Reboots, GRUB's
// entry choice, kernel panics, hangs and the other faults are played out
// here, driven by the lab, not by the scripts.
//
// The package owns the directory it is given, the SSH listeners it opens
// and the processes started on its hosts (ended by pid; a process belongs
// to a host when its environment carries that host's LAB_HOST_DIR). It must
// not touch anything else of the machine it runs on, and production
// packages must not import it.
package fleet

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

// Options configure a fleet. Zero values take the defaults named per field.
type Options struct {
	// Dir holds everything of the fleet (host directories, keys,
	// inventory, known_hosts). Required; it is created when missing.
	Dir string
	// ControlPlanes, Canary and GPUServers are how many hosts of each kind
	// to run: cp-1.., gpu-canary-1.., gpu-1... At least one host in all.
	ControlPlanes, Canary, GPUServers int
	// RebootDowntime is how long a rebooting host stays unreachable before
	// GRUB picks its entry. 0 means 1s.
	RebootDowntime time.Duration
	// ShutdownDelay is the time between a reboot request and the SSH
	// listener going down (the requesting command returns meanwhile).
	// 0 means 200ms.
	ShutdownDelay time.Duration
	// PanicDelay stands for the kernel's panic timeout: how long a
	// panicked host stays down before it reboots (when its panic timeout
	// is not 0). 0 means 500ms.
	PanicDelay time.Duration
	// InstallStep is how long dpkg spends per package action. 0 means 50ms.
	InstallStep time.Duration
	// TimerScale multiplies systemd-run --on-active delays (0.1 turns the
	// scripts' 5 s reboot timer into 0.5 s). 0 means 1.
	TimerScale float64
	// KernelPanic is kernel.panic as set in /etc/sysctl.d on every host.
	// 0 means 10; negative leaves it unset (the kernel default, 0: a panic
	// hangs the host).
	KernelPanic int
	// GPUModel is "H100" or "H200". "" means H100.
	GPUModel string
	// GPUsPerServer is the number of GPUs per GPU server. 0 means 8.
	GPUsPerServer int
	// Users are the login names the SSH servers accept. nil means root and
	// ubuntu (ubuntu runs scripts through the emulated sudo).
	Users []string
	// AuthorizedKeys are accepted besides the fleet's operator key.
	AuthorizedKeys []ssh.PublicKey
	// ToolBinary is the executable every host's emulated commands link to:
	// one that calls HostCommandMain first in main. "" means the running
	// executable (mcp-patch, or a test binary whose TestMain calls it); no
	// Go toolchain is needed at run time.
	ToolBinary string
	// Parallelism bounds how many hosts are created at once. 0 means 8.
	Parallelism int
	// Logger receives lab events (boots, faults, dropped connections).
	// nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.RebootDowntime == 0 {
		o.RebootDowntime = time.Second
	}
	if o.ShutdownDelay == 0 {
		o.ShutdownDelay = 200 * time.Millisecond
	}
	if o.PanicDelay == 0 {
		o.PanicDelay = 500 * time.Millisecond
	}
	if o.InstallStep == 0 {
		o.InstallStep = 50 * time.Millisecond
	}
	if o.TimerScale == 0 {
		o.TimerScale = 1
	}
	if o.KernelPanic == 0 {
		o.KernelPanic = 10
	}
	if o.GPUModel == "" {
		o.GPUModel = "H100"
	}
	if o.GPUsPerServer == 0 {
		o.GPUsPerServer = 8
	}
	if o.Users == nil {
		o.Users = []string{"root", "ubuntu"}
	}
	if o.Parallelism == 0 {
		o.Parallelism = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("fleet options: Dir is required")
	case o.ControlPlanes < 0 || o.Canary < 0 || o.GPUServers < 0:
		return errors.New("fleet options: host counts must not be negative")
	case o.ControlPlanes+o.Canary+o.GPUServers == 0:
		return errors.New("fleet options: no hosts requested")
	case o.RebootDowntime < 0 || o.ShutdownDelay < 0 || o.PanicDelay < 0 || o.InstallStep < 0:
		return errors.New("fleet options: durations must not be negative")
	case o.TimerScale < 0:
		return errors.New("fleet options: TimerScale must not be negative")
	case o.GPUModel != "" && o.GPUModel != "H100" && o.GPUModel != "H200":
		return fmt.Errorf("fleet options: GPUModel %q: want H100 or H200", o.GPUModel)
	case o.Parallelism < 0 || o.GPUsPerServer < 0:
		return errors.New("fleet options: Parallelism and GPUsPerServer must not be negative")
	}
	return nil
}

// Fleet is a running set of emulated hosts.
type Fleet struct {
	opts   Options
	log    *slog.Logger
	dir    string
	tool   string
	safe   string
	hosts  []*Host
	byName map[string]*Host

	operator     ssh.Signer
	operatorFile string
	authorized   [][]byte
	knownHosts   string
	inventory    string
	sshConfig    string

	control     net.Listener
	controlPath string

	mu     sync.Mutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup

	// commands counts the commands (exec or shell requests) the hosts'
	// SSH servers started.
	commands atomic.Int64
}

// New creates the hosts, boots them (through GRUB's choice, like any later
// boot) and starts their SSH servers. The returned fleet must be closed.
func New(ctx context.Context, opts Options) (*Fleet, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	f := &Fleet{opts: opts, log: opts.Logger, dir: dir, byName: map[string]*Host{}, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	if f.tool, err = hostCommandBinary(opts); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	f.safe = filepath.Join(dir, "safebin")
	if err := makeSafeBin(f.safe); err != nil {
		return nil, fmt.Errorf("start fleet: link safe tools: %w", err)
	}
	if err := f.makeOperatorKey(); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	if err := f.startControl(); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}

	var specs []hostSpec
	for i := 1; i <= opts.ControlPlanes; i++ {
		specs = append(specs, hostSpec{name: fmt.Sprintf("cp-%d", i), role: machine.RoleControlPlane})
	}
	for i := 1; i <= opts.Canary; i++ {
		specs = append(specs, hostSpec{name: fmt.Sprintf("gpu-canary-%d", i), role: machine.RoleGPU, canary: true})
	}
	for i := 1; i <= opts.GPUServers; i++ {
		specs = append(specs, hostSpec{name: fmt.Sprintf("gpu-%d", i), role: machine.RoleGPU})
	}
	ports, err := allocatePorts(len(specs))
	if err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	f.hosts = make([]*Host, len(specs))
	for i, s := range specs {
		f.hosts[i] = &Host{Name: s.name, Role: s.role, Canary: s.canary, fleet: f, listener: ports[i], port: ports[i].Addr().(*net.TCPAddr).Port}
		f.byName[s.name] = f.hosts[i]
	}
	errs := make([]error, len(specs))
	sem := make(chan struct{}, opts.Parallelism)
	var wg sync.WaitGroup
	for i, h := range f.hosts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			errs[i] = h.create(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	if err := f.writeClientFiles(); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	for _, h := range f.hosts {
		h.serve()
	}
	ok = true
	f.log.Info("lab fleet up", "hosts", len(f.hosts), "dir", dir)
	return f, nil
}

type hostSpec struct {
	name   string
	role   machine.Role
	canary bool
}

// allocatePorts binds n loopback listeners on ports below the ephemeral
// range, so that a port freed while its host reboots is not taken as the
// source port of some outgoing connection before the host binds it again.
func allocatePorts(n int) ([]net.Listener, error) {
	const lo, hi = 20000, 32000
	start, _ := rand.Int(rand.Reader, big.NewInt(hi-lo))
	var out []net.Listener
	p := lo + int(start.Int64())
	for tries := 0; len(out) < n && tries < hi-lo; tries++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			out = append(out, l)
		}
		p++
		if p >= hi {
			p = lo
		}
	}
	if len(out) < n {
		for _, l := range out {
			l.Close()
		}
		return nil, fmt.Errorf("could not bind %d loopback ports in %d-%d", n, lo, hi)
	}
	return out, nil
}

func (f *Fleet) makeOperatorKey() error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate operator key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "lab operator")
	if err != nil {
		return fmt.Errorf("encode operator key: %w", err)
	}
	f.operatorFile = filepath.Join(f.dir, "operator_ed25519")
	if err := os.WriteFile(f.operatorFile, pem.EncodeToMemory(block), 0o600); err != nil {
		return fmt.Errorf("write operator key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.operatorFile+".pub", ssh.MarshalAuthorizedKey(sshPub), 0o644); err != nil {
		return fmt.Errorf("write operator key: %w", err)
	}
	f.operator, err = ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	f.authorized = append(f.authorized, sshPub.Marshal())
	for _, k := range f.opts.AuthorizedKeys {
		f.authorized = append(f.authorized, k.Marshal())
	}
	return nil
}

// writeClientFiles writes what a client needs: known_hosts
// ("[127.0.0.1]:port key" lines), the inventory in the host package's
// format, and an OpenSSH client config for people.
func (f *Fleet) writeClientFiles() error {
	var kh, inv, cfg strings.Builder
	fmt.Fprintf(&inv, "defaults:\n  user: root\n  identity_files: [%q]\nnodes:\n", f.operatorFile)
	for _, h := range f.hosts {
		fmt.Fprintf(&kh, "[127.0.0.1]:%d %s", h.port, ssh.MarshalAuthorizedKey(h.origKey.PublicKey()))
		fmt.Fprintf(&inv, "  %s:\n    address: 127.0.0.1\n    port: %d\n", h.Name, h.port)
		fmt.Fprintf(&cfg, "Host %s\n  HostName 127.0.0.1\n  Port %d\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n\n",
			h.Name, h.port, f.operatorFile, filepath.Join(f.dir, "known_hosts"))
	}
	f.knownHosts = filepath.Join(f.dir, "known_hosts")
	f.inventory = filepath.Join(f.dir, "inventory.yaml")
	f.sshConfig = filepath.Join(f.dir, "ssh_config")
	for path, content := range map[string]string{f.knownHosts: kh.String(), f.inventory: inv.String(), f.sshConfig: cfg.String()} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// Commands is how many commands (SSH exec or shell requests, one per
// session) the hosts' SSH servers started so far.
func (f *Fleet) Commands() int64 { return f.commands.Load() }

// Hosts returns every host in creation order: control planes, canaries,
// GPU servers.
func (f *Fleet) Hosts() []*Host { return slices.Clone(f.hosts) }

// Host returns the named host or nil.
func (f *Fleet) Host(name string) *Host { return f.byName[name] }

// Dir is the fleet's directory.
func (f *Fleet) Dir() string { return f.dir }

// KnownHostsFile is the OpenSSH known_hosts file listing every host's key
// as "[127.0.0.1]:port".
func (f *Fleet) KnownHostsFile() string { return f.knownHosts }

// OperatorKeyFile is the unencrypted OpenSSH private key every host
// accepts (its public half is beside it, with ".pub").
func (f *Fleet) OperatorKeyFile() string { return f.operatorFile }

// OperatorSigner is the operator key as an ssh.Signer.
func (f *Fleet) OperatorSigner() ssh.Signer { return f.operator }

// InventoryFile is the inventory in the host package's YAML format
// (defaults: user root, the operator key; nodes: address and port).
func (f *Fleet) InventoryFile() string { return f.inventory }

// SSHConfigFile is an OpenSSH client config naming every host
// (`ssh -F <file> gpu-1`).
func (f *Fleet) SSHConfigFile() string { return f.sshConfig }

// ToolBinary is the executable the hosts' commands link to (Options.ToolBinary).
func (f *Fleet) ToolBinary() string { return f.tool }

// Close stops every host: listeners, connections, sessions and every
// process started on a host. It is safe to call more than once.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.done)
	f.mu.Unlock()
	if f.control != nil {
		f.control.Close()
	}
	for _, h := range f.hosts {
		if h != nil {
			h.shutdown()
		}
	}
	f.wg.Wait()
	if f.controlPath != "" && !strings.HasPrefix(f.controlPath, f.dir) {
		os.Remove(f.controlPath)
	}
	return nil
}

func (f *Fleet) isClosed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// sleep waits d or until the fleet closes (false).
func (f *Fleet) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.done:
		return false
	}
}
