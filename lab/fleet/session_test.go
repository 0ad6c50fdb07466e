package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/lab/fleet/emul"
	"github.com/mcp-patch/mcp-patch/scripts"
)

// hostProcesses lists the pids whose environment names h.
func hostProcesses(h *Host) []int {
	marker := []byte(emul.EnvHostDir + "=" + h.Dir() + "\x00")
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append(env, 0), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitNoProcesses(t *testing.T, h *Host, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		pids := hostProcesses(h)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s still runs processes %v after %s", h.Name, pids, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelledScriptEndsItsProcesses: the production client cancels a
// running script; the signal it sends ends the whole process group.
func TestCancelledScriptEndsItsProcesses(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	p := pool(t, f)
	h := f.Host("cp-1")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := p.RunScript(ctx, h.Name, []byte("sleep 30 & sleep 31\n"), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RunScript = %v, want the deadline", err)
	}
	waitNoProcesses(t, h, 5*time.Second)
}

// TestRebootEndsEveryProcess: a detached job survives its session but not
// a reboot.
func TestRebootEndsEveryProcess(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	h := f.Host("cp-1")
	sh(t, f, h, "setsid nohup sleep 60 >/dev/null 2>&1 </dev/null & systemd-run --unit=long --quiet sleep 61")
	time.Sleep(200 * time.Millisecond)
	if n := len(hostProcesses(h)); n < 2 {
		t.Fatalf("detached jobs not running: %d processes", n)
	}
	if out := sh(t, f, h, "systemctl is-active long"); out != "active\n" {
		t.Errorf("systemctl is-active long = %q", out)
	}
	rebootAndWait(t, f, h)
	waitNoProcesses(t, h, 2*time.Second)
	if r := run(t, f, h, "systemctl is-active long", ""); r.stdout != "inactive\n" || r.code != 3 {
		t.Errorf("after reboot: systemctl is-active long = %q exit %d", r.stdout, r.code)
	}
}

// TestNonRootLoginUsesSudo: the production client logs in as a user other
// than root and runs the script through `sudo -n`.
func TestNonRootLoginUsesSudo(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	inv, err := host.NewMapInventory(host.Target{}, host.Target{Name: "gpu-1", Address: "127.0.0.1", Port: f.Host("gpu-1").Port(), User: "ubuntu",
		IdentityFiles: []string{f.OperatorKeyFile()}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := host.NewPool(inv, host.Config{KnownHostsFiles: []string{f.KnownHostsFile()}, KeepaliveInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	obj, out := step(t, p, "gpu-1", "kernel", nil)
	wantStatus(t, obj, out, "ok")
	if obj["kernel"] != OldKernel {
		t.Errorf("kernel = %v", obj["kernel"])
	}
}

// TestDirectTCPIPReachesTheForwardedAddress: the client tunnels through a
// control-plane host to what the host calls 127.0.0.1:2379.
func TestDirectTCPIPReachesTheForwardedAddress(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	h := f.Host("cp-1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "etcd says "+line)
			}()
		}
	}()
	h.SetForward("127.0.0.1:2379", l.Addr().String())
	p := pool(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.Dial(ctx, h.Name, "tcp", "127.0.0.1:2379")
	if err != nil {
		t.Fatalf("dial through %s: %v", h.Name, err)
	}
	defer c.Close()
	io.WriteString(c, "hello\n")
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "etcd says hello\n" {
		t.Errorf("through the tunnel: %q, %v", got, err)
	}
	if _, err := p.Dial(ctx, h.Name, "tcp", "192.0.2.1:80"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("dial to a non-loopback address: %v, want a refusal", err)
	}
}

// TestSnapshotAutoremoveAndDownloadScripts runs the remaining steps: the
// control-plane snapshot (with etcdctl), download, and autoremove after the
// new kernel is in (it removes the oldest kernel only, and refuses the
// running one).
func TestSnapshotAutoremoveAndDownloadScripts(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	p := pool(t, f)
	h := f.Host("cp-1")
	snap, out := step(t, p, h.Name, "snapshot", map[string]string{"ROUND": "r1", "ROLE": "control-plane"})
	wantStatus(t, snap, out, "ok")
	if snap["etcd_method"] != "etcdctl" || len(snap["files"].([]any)) != 3 {
		t.Errorf("snapshot: method %v, files %v", snap["etcd_method"], snap["files"])
	}
	again, out := step(t, p, h.Name, "snapshot", map[string]string{"ROUND": "r1", "ROLE": "control-plane"})
	wantStatus(t, again, out, "ok")
	if again["reused"] != true {
		t.Errorf("second snapshot not reused: %v", again["reason"])
	}

	dl, out := step(t, p, h.Name, "download", nil)
	wantStatus(t, dl, out, "ok")

	ar, out := step(t, p, h.Name, "autoremove", map[string]string{"ACTION": "simulate"})
	wantStatus(t, ar, out, "ok")
	if rm := ar["removals"].([]any); len(rm) != 0 {
		t.Errorf("autoremove before the upgrade: %v", rm)
	}
	sh(t, f, h, "apt-get -y full-upgrade </dev/null >/dev/null")
	ar, out = step(t, p, h.Name, "autoremove", map[string]string{"ACTION": "run", "KEEP_KERNEL": OldKernel})
	wantStatus(t, ar, out, "ok")
	want := "linux-headers-6.8.0-45 linux-headers-6.8.0-45-generic linux-image-6.8.0-45-generic linux-modules-6.8.0-45-generic"
	if got := joinAny(ar["removals"].([]any)); got != want {
		t.Errorf("autoremove removals = %s, want %s", got, want)
	}
	if _, err := os.Stat(h.Path("/boot/vmlinuz-6.8.0-45-generic")); !os.IsNotExist(err) {
		t.Errorf("the removed kernel's image is still in /boot: %v", err)
	}
	if cfg := sh(t, f, h, `cat "$GRUB_CFG"`); strings.Contains(cfg, "6.8.0-45") {
		t.Error("grub.cfg still lists the removed kernel")
	}
}

func joinAny(xs []any) string {
	var s []string
	for _, x := range xs {
		s = append(s, x.(string))
	}
	return strings.Join(s, " ")
}

// TestSystemdRunDoesNotHoldTheSession: a transient unit belongs to the
// service manager, so the caller's session ends at once even when the
// caller's output descriptors were open (install.sh keeps its stdout on
// fd 3).
func TestSystemdRunDoesNotHoldTheSession(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	h := f.Host("cp-1")
	start := time.Now()
	sh(t, f, h, "exec 3>&1 4>&2; systemd-run --unit=slow --quiet sleep 5; echo started >&3")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the session lasted %s: the unit held it open", d)
	}
	if out := sh(t, f, h, "systemctl show -p ActiveState,SubState --value slow"); out != "active\nrunning\n" {
		t.Errorf("unit state = %q", out)
	}
}

// TestOpenSSHClient: the real OpenSSH client, with the fleet's ssh_config
// (strict host key checking against the lab known_hosts), runs a host
// script the way a person would: ssh node 'sudo sh -s' < kernel.sh.
func TestOpenSSHClient(t *testing.T) {
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatalf("the OpenSSH client is needed: %v", err)
	}
	f := newTestFleet(t, Options{GPUServers: 1})
	script, err := scripts.Host.ReadFile("host/kernel.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, login := range []string{"root", "ubuntu"} {
		cmd := exec.Command(sshBin, "-F", f.SSHConfigFile(), "-o", "BatchMode=yes", "-l", login, "gpu-1", "sudo sh -s")
		cmd.Stdin = bytes.NewReader(script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ssh as %s: %v: %s", login, err, stderr.String())
		}
		var obj map[string]any
		if err := json.Unmarshal(out, &obj); err != nil || obj["kernel"] != OldKernel {
			t.Errorf("ssh as %s: %s (%v)", login, out, err)
		}
	}
	if err := f.Host("gpu-1").Inject(HostKeyChanged{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sshBin, "-F", f.SSHConfigFile(), "-o", "BatchMode=yes", "gpu-1", "true")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "REMOTE HOST IDENTIFICATION HAS CHANGED") {
		t.Errorf("ssh to a host with a changed key: %v\n%s", err, out)
	}
}

// TestBackgroundJobHoldingOutputKeepsTheSession: as with sshd, a session
// ends when its command has exited and every holder of its output has
// closed it; a detached job that kept the output open holds the session.
func TestBackgroundJobHoldingOutputKeepsTheSession(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	h := f.Host("cp-1")
	tests := []struct {
		name     string
		command  string
		min, max time.Duration
	}{
		{"job keeps stdout", "exec 3>&1; setsid nohup sleep 1 >/dev/null 2>&1 </dev/null & echo started", time.Second, 5 * time.Second},
		{"job closes it", "exec 3>&1; setsid nohup sleep 1 >/dev/null 2>&1 </dev/null 3>&- & echo started", 0, 900 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			if out := sh(t, f, h, tt.command); out != "started\n" {
				t.Errorf("output %q", out)
			}
			if d := time.Since(start); d < tt.min || d > tt.max {
				t.Errorf("session lasted %s, want %s..%s", d, tt.min, tt.max)
			}
		})
	}
}
