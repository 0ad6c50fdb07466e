package emul

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

func init() {
	register(systemctl, "systemctl")
	register(systemdRun, "systemd-run")
	register(rebootCmd, "reboot", "shutdown", "poweroff", "halt")
	register(journalctl, "journalctl")
}

// unitRunner is the hidden labtool subcommand that supervises a transient
// unit started by systemd-run.
const unitRunner = "__unit"

func unitName(n string) string {
	if strings.Contains(n, ".") {
		return n
	}
	return n + ".service"
}

func systemctl(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-p", "--property", "-t", "--type", "--state", "-n", "--lines", "-o", "--output", "-H", "--host", "-M", "--machine"}, false)
	if err != nil {
		c.errf("systemctl: %v\n", err)
		return 1
	}
	if len(f.operands) == 0 {
		c.errf("systemctl: listing units is not emulated on this lab host\n")
		return 1
	}
	verb, units := f.operands[0], f.operands[1:]
	quiet := f.has("-q", "--quiet")
	switch verb {
	case "reboot", "poweroff", "halt", "kexec":
		return requestPower(c, map[string]string{"reboot": "reboot", "kexec": "reboot"}[verb])
	case "daemon-reload", "reset-failed":
		return 0
	case "is-system-running":
		c.outf("running\n")
		return 0
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("systemctl: %v\n", err)
		return 1
	}
	switch verb {
	case "is-active", "is-failed", "is-enabled":
		rc := 3
		if verb == "is-enabled" {
			rc = 1
		}
		for _, u := range units {
			svc := st.Services[unitName(u)]
			var v string
			switch verb {
			case "is-enabled":
				if svc == nil {
					if !quiet {
						c.errf("Failed to get unit file state for %s: No such file or directory\n", unitName(u))
					}
					continue
				}
				v = svc.UnitFileState
				if v == "enabled" || v == "static" || v == "transient" {
					rc = 0
				}
			case "is-failed":
				v = "inactive"
				if svc != nil {
					v = svc.ActiveState
				}
				if v == "failed" {
					rc = 0
				} else if rc == 3 {
					rc = 1
				}
			default:
				v = "inactive"
				if svc != nil {
					v = svc.ActiveState
				}
				if v == "active" {
					rc = 0
				}
			}
			if !quiet {
				c.outf("%s\n", v)
			}
		}
		return rc
	case "show":
		props := strings.Join(f.all("-p", "--property"), ",")
		value := f.has("--value")
		if len(units) == 0 {
			manager := map[string]string{"RuntimeWatchdogUSec": "0", "RebootWatchdogUSec": "10min", "Version": "255.4-1ubuntu8.4",
				"Architecture": "x86-64", "SystemState": "running", "Virtualization": ""}
			showProps(c, manager, props, value, []string{"Version", "Architecture", "SystemState", "RuntimeWatchdogUSec", "RebootWatchdogUSec"})
			return 0
		}
		for i, u := range units {
			if i > 0 && !value {
				c.outf("\n")
			}
			showProps(c, unitProps(st, unitName(u)), props, value, []string{"Id", "Description", "LoadState", "ActiveState", "SubState", "Result", "UnitFileState", "MainPID", "ExecMainCode", "ExecMainStatus", "InvocationID"})
		}
		return 0
	case "status":
		rc := 0
		for _, u := range units {
			name := unitName(u)
			svc := st.Services[name]
			if svc == nil {
				c.errf("Unit %s could not be found.\n", name)
				rc = 4
				continue
			}
			c.outf("● %s - %s\n     Loaded: loaded (/usr/lib/systemd/system/%s; %s; preset: enabled)\n     Active: %s (%s)\n", name, describe(svc), name, svc.UnitFileState, svc.ActiveState, svc.SubState)
			if svc.ActiveState != "active" {
				rc = 3
			}
		}
		return rc
	case "start", "restart", "try-restart", "reload-or-restart", "stop", "enable", "disable":
		return changeUnits(c, verb, units, f.has("--now"))
	}
	c.errf("systemctl: %s is not emulated on this lab host\n", verb)
	return 1
}

func describe(s *machine.Service) string {
	if s.Description != "" {
		return s.Description
	}
	return strings.TrimSuffix(s.Name, ".service")
}

func unitProps(st *machine.State, name string) map[string]string {
	svc := st.Services[name]
	if svc == nil {
		return map[string]string{"Id": name, "Description": name, "LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
			"Result": "success", "UnitFileState": "", "MainPID": "0", "ExecMainCode": "0", "ExecMainStatus": "0", "InvocationID": ""}
	}
	code := "0"
	switch svc.ExecMainCode {
	case "exited":
		code = "1"
	case "killed":
		code = "2"
	}
	return map[string]string{"Id": name, "Description": describe(svc), "LoadState": "loaded", "ActiveState": svc.ActiveState, "SubState": svc.SubState,
		"Result": svc.Result, "UnitFileState": svc.UnitFileState, "MainPID": strconv.Itoa(svc.MainPID), "ExecMainCode": code,
		"ExecMainStatus": strconv.Itoa(svc.ExecMainStatus), "InvocationID": svc.InvocationID}
}

func showProps(c *ctx, all map[string]string, props string, value bool, order []string) {
	want := order
	if props != "" {
		want = strings.Split(props, ",")
	}
	for _, p := range want {
		v, ok := all[p]
		if !ok {
			if props == "" {
				continue
			}
			v = ""
		}
		if value {
			c.outf("%s\n", v)
		} else {
			c.outf("%s=%s\n", p, v)
		}
	}
}

func changeUnits(c *ctx, verb string, units []string, now bool) int {
	var failed []string
	err := c.host.Update(func(s *machine.State) error {
		for _, u := range units {
			name := unitName(u)
			svc := s.Services[name]
			if svc == nil {
				return fmt.Errorf("Unit %s not found.", name)
			}
			switch verb {
			case "enable":
				svc.UnitFileState = "enabled"
				if !now {
					continue
				}
			case "disable":
				svc.UnitFileState = "disabled"
				if !now {
					continue
				}
				svc.ActiveState, svc.SubState = "inactive", "dead"
				continue
			case "stop":
				svc.ActiveState, svc.SubState, svc.MainPID = "inactive", "dead", 0
				continue
			}
			up := true
			switch name {
			case "nvidia-fabricmanager.service":
				up = s.DriverLoaded && !s.Faults.FabricManagerDown
			case "nvidia-persistenced.service":
				up = s.DriverLoaded
			}
			if up {
				svc.ActiveState, svc.SubState, svc.Result, svc.ExecMainStatus = "active", "running", "success", 0
				svc.Started = c.now
			} else {
				svc.ActiveState, svc.SubState, svc.Result, svc.ExecMainStatus, svc.ExecMainCode = "failed", "failed", "exit-code", 1, "exited"
				failed = append(failed, name)
			}
		}
		return nil
	})
	if err != nil {
		c.errf("Failed to %s %s: %v\n", verb, strings.Join(units, " "), err)
		return 5
	}
	for _, name := range failed {
		c.errf("Job for %s failed because the control process exited with error code.\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details.\n", name, name, name)
	}
	if len(failed) > 0 {
		return 1
	}
	return 0
}

func requestPower(c *ctx, kind string) int {
	if kind == "" {
		kind = "poweroff"
	}
	if err := notify(kind); err != nil {
		c.errf("Failed to %s system: %v\n", kind, err)
		return 1
	}
	return 0
}

func rebootCmd(c *ctx) int {
	switch c.name {
	case "reboot":
		return requestPower(c, "reboot")
	case "poweroff", "halt":
		return requestPower(c, "poweroff")
	}
	f, _ := parseFlags(c.args, nil, false)
	kind := "poweroff"
	if f.has("-r", "--reboot") {
		kind = "reboot"
	}
	if f.has("-c") {
		return 0
	}
	when := "now"
	if len(f.operands) > 0 {
		when = f.operands[0]
	}
	if when != "now" && when != "+0" {
		c.errf("shutdown: scheduling for %q is not emulated on this lab host; use 'now'\n", when)
		return 1
	}
	return requestPower(c, kind)
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// systemdRun starts a transient unit: the command runs detached from the
// caller (its own session, output to the unit's journal), with the
// service manager's environment plus --setenv, as systemd does.
func systemdRun(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-u", "--unit", "-E", "--setenv", "-p", "--property", "--description",
		"--on-active", "--on-boot", "--on-startup", "--on-unit-active", "--on-unit-inactive", "--on-calendar",
		"--service-type", "--working-directory", "--uid", "--gid", "--nice", "--slice"}, true)
	if err != nil {
		c.errf("systemd-run: %v\n", err)
		return 1
	}
	if len(f.operands) == 0 {
		c.errf("Command line to execute required.\n")
		return 1
	}
	for _, bad := range []string{"--scope", "--pty", "-t", "--user", "--on-calendar", "--on-boot", "--on-startup"} {
		if f.has(bad) {
			c.errf("systemd-run: %s is not emulated on this lab host\n", bad)
			return 1
		}
	}
	quiet := f.has("-q", "--quiet")
	var delay time.Duration
	if v, ok := f.get("--on-active"); ok {
		d, err := parseTimespan(v)
		if err != nil {
			c.errf("Failed to parse timer value: %s\n", v)
			return 1
		}
		delay = d
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("systemd-run: %v\n", err)
		return 1
	}
	name, named := f.get("-u", "--unit")
	if named {
		name = strings.TrimSuffix(strings.TrimSuffix(name, ".service"), ".timer")
	} else {
		name = fmt.Sprintf("run-u%d", st.NextUnit+100)
	}
	svcName := name + ".service"
	cmdline := f.operands
	argv0, err := exec.LookPath(cmdline[0])
	if err != nil {
		c.errf("Failed to find executable %s: No such file or directory\n", cmdline[0])
		return 1
	}
	_ = argv0
	logRel := "/var/log/journal/" + svcName + ".log"
	invocation := randomID()
	err = c.host.Update(func(s *machine.State) error {
		if old := s.Services[svcName]; old != nil && (old.ActiveState == "active" || old.ActiveState == "activating" || !old.Transient) {
			return fmt.Errorf("Failed to start transient service unit: Unit %s was already loaded or has a fragment file.", svcName)
		}
		s.NextUnit++
		state := "activating"
		sub := "start"
		if delay > 0 {
			state, sub = "inactive", "dead"
		}
		s.Services[svcName] = &machine.Service{Name: svcName, ActiveState: state, SubState: sub, Result: "success", UnitFileState: "transient",
			Transient: true, RemainAfter: f.has("-r", "--remain-after-exit"), Description: firstOr(f, "--description", strings.Join(cmdline, " ")),
			Command: cmdline, InvocationID: invocation, Log: logRel}
		return nil
	})
	if err != nil {
		c.errf("%v\n", err)
		return 1
	}
	env := unitEnv(c, f.all("-E", "--setenv"))
	logPath := c.host.Path(logRel)
	os.MkdirAll(filepath.Dir(logPath), 0o755)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		c.errf("systemd-run: %v\n", err)
		return 1
	}
	defer logFile.Close()
	self, err := os.Executable()
	if err != nil {
		c.errf("systemd-run: %v\n", err)
		return 1
	}
	collect := "keep"
	if f.has("-G", "--collect") {
		collect = "collect"
	}
	// The unit is a child of the service manager, not of the caller: it
	// must not keep any of the caller's descriptors (a session's output
	// pipe would keep the SSH session open until the unit ends).
	closeInheritedFDs()
	args := append([]string{"labtool", unitRunner, svcName, delay.String(), collect, "--"}, cmdline...)
	cmd := &exec.Cmd{Path: self, Args: args, Env: env, Dir: c.host.Root(), Stdout: logFile, Stderr: logFile,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		c.errf("Failed to start transient service unit: %v\n", err)
		return 1
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	// systemd-run returns once the start job is done: for a simple
	// service, once the process is forked.
	c.host.Update(func(s *machine.State) error {
		if svc := s.Services[svcName]; svc != nil && svc.InvocationID == invocation && svc.ActiveState == "activating" {
			svc.ActiveState, svc.SubState, svc.MainPID = "active", "running", pid
		}
		return nil
	})
	if !quiet {
		if delay > 0 {
			c.errf("Running timer as unit: %s.timer\nWill run service as unit: %s\n", name, svcName)
		} else {
			c.errf("Running as unit: %s; invocation ID: %s\n", svcName, invocation)
		}
	}
	if f.has("--wait", "-W") {
		for {
			st, err := c.host.View()
			if err != nil {
				return 1
			}
			svc := st.Services[svcName]
			if svc == nil || (svc.ActiveState != "active" && svc.ActiveState != "activating" && !(delay > 0 && svc.Exited.IsZero())) {
				if svc == nil {
					return 0
				}
				if !quiet {
					c.errf("Finished with result: %s\nMain processes terminated with: code=exited/status=%d\n", svc.Result, svc.ExecMainStatus)
				}
				return svc.ExecMainStatus
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return 0
}

// closeInheritedFDs marks every descriptor above stderr close-on-exec.
func closeInheritedFDs() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func firstOr(f *flagSet, name, def string) string {
	if v, ok := f.get(name); ok {
		return v
	}
	return def
}

// parseTimespan reads systemd time spans: "5", "5s", "2min", "1h", "500ms".
func parseTimespan(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	r := strings.NewReplacer("min", "m", "sec", "s", "hour", "h", "msec", "ms")
	return time.ParseDuration(strings.ReplaceAll(r.Replace(v), " ", ""))
}

// unitEnv is the environment of a transient unit: the host's base
// environment (what the service manager has) plus --setenv values. A
// caller's exported variables do not reach the unit, as on a real host.
func unitEnv(c *ctx, setenv []string) []string {
	var env []string
	data, err := os.ReadFile(filepath.Join(c.host.Dir, "env"))
	if err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" {
				env = append(env, l)
			}
		}
	} else {
		env = os.Environ()
	}
	for _, kv := range setenv {
		if !strings.Contains(kv, "=") {
			kv += "=" + os.Getenv(kv)
		}
		k, _, _ := strings.Cut(kv, "=")
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env
}

// runUnit is the supervisor of one transient unit: it waits for the timer,
// runs the command, and records the result in the host state.
func runUnit(args []string) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "labtool __unit: bad arguments")
		return 2
	}
	svcName, delayS, collect, cmdline := args[0], args[1], args[2], args[4:]
	h, err := machine.Open(os.Getenv(EnvHostDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	delay, _ := time.ParseDuration(delayS)
	if scale, err := strconv.ParseFloat(os.Getenv(EnvTimerScale), 64); err == nil && scale > 0 {
		delay = time.Duration(float64(delay) * scale)
	}
	time.Sleep(delay)
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Stdin = nil
	startErr := cmd.Start()
	h.Update(func(s *machine.State) error {
		if svc := s.Services[svcName]; svc != nil {
			svc.ActiveState, svc.SubState = "active", "running"
			if startErr == nil {
				svc.MainPID = cmd.Process.Pid
			}
			svc.Started = time.Now()
		}
		return nil
	})
	status, code := 0, "exited"
	if startErr != nil {
		fmt.Fprintf(os.Stderr, "%s: Failed to execute %s: %v\n", svcName, cmdline[0], startErr)
		status = 203
	} else if err := cmd.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status, code = int(ws.Signal()), "killed"
			} else {
				status = ee.ExitCode()
			}
		} else {
			status = 1
		}
	}
	h.Update(func(s *machine.State) error {
		svc := s.Services[svcName]
		if svc == nil {
			return nil
		}
		svc.MainPID = 0
		svc.ExecMainStatus, svc.ExecMainCode = status, code
		svc.Exited = time.Now()
		switch {
		case status == 0 && code == "exited" && svc.RemainAfter:
			svc.ActiveState, svc.SubState, svc.Result = "active", "exited", "success"
		case status == 0 && code == "exited":
			svc.ActiveState, svc.SubState, svc.Result = "inactive", "dead", "success"
		case code == "killed":
			svc.ActiveState, svc.SubState, svc.Result = "failed", "failed", "signal"
		default:
			svc.ActiveState, svc.SubState, svc.Result = "failed", "failed", "exit-code"
		}
		if collect == "collect" && svc.ActiveState != "active" {
			delete(s.Services, svcName)
		}
		return nil
	})
	return 0
}

func journalctl(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-u", "--unit", "-n", "--lines", "-o", "--output", "-b", "--boot", "--since"}, false)
	if err != nil {
		c.errf("journalctl: %v\n", err)
		return 1
	}
	u, ok := f.get("-u", "--unit")
	if !ok {
		c.errf("journalctl: only -u UNIT is emulated on this lab host\n")
		return 1
	}
	data, err := os.ReadFile(c.host.Path("/var/log/journal/" + unitName(u) + ".log"))
	if err != nil {
		c.outf("-- No entries --\n")
		return 0
	}
	lines := strings.SplitAfter(string(data), "\n")
	if n, ok := f.get("-n", "--lines"); ok {
		if k, err := strconv.Atoi(n); err == nil && k < len(lines) {
			lines = lines[len(lines)-k-1:]
		}
	}
	w := bufio.NewWriter(c.stdout)
	for _, l := range lines {
		w.WriteString(l)
	}
	w.Flush()
	return 0
}
