package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/aptlab"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

// hostOnlyRig is one host, no cluster, no round: real sshds on 127.0.0.1
// whose root logins see an apt lab (the real apt-get and dpkg of this
// Debian machine over a private package state, named by sshd's SetEnv), a
// small /boot of its own, and a config with only an SSH inventory.
type hostOnlyRig struct {
	clean, removal *aptlab.Lab
	bootDir        string
	backups        string
	config         string
}

// hostOnlyServer starts an sshd whose logins see lab, with bootDir as /boot.
func hostOnlyServer(t *testing.T, key ssh.PublicKey, lab *aptlab.Lab, bootDir, backups string) *sshdtest.Server {
	t.Helper()
	sys := t.TempDir()
	aptlab.WriteFile(t, filepath.Join(sys, "kernel", "panic"), "10\n", 0o644)
	grub := t.TempDir()
	aptlab.WriteFile(t, filepath.Join(grub, "grubenv"), "# GRUB Environment Block\n"+strings.Repeat("#", 1024-25), 0o644)
	env := fmt.Sprintf("SetEnv APT_CONFIG=%s DPKG_ADMINDIR=%s BOOT_DIR=%s PROC_SYS=%s GRUB_DIR=%s BACKUP_DIR=%s",
		lab.AptConf, lab.Admin, bootDir, sys, grub, backups)
	return sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{key}, ExtraConfig: []string{env}})
}

func newHostOnlyRig(t *testing.T) *hostOnlyRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the host-only tests log in as root over a real sshd and mount a small /boot: run the cli tests as root")
	}
	r := &hostOnlyRig{clean: aptlab.New(t, aptlab.Options{NoRemoval: true, Copy: true}), removal: aptlab.New(t, aptlab.Options{})}
	// /boot of its own: a 66 MiB tmpfs (the new kernel needs 64 MiB),
	// mounted before the sshds start so their mount namespaces see it.
	r.bootDir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=66m", "tmpfs", r.bootDir).CombinedOutput(); err != nil {
		t.Fatalf("mount a small /boot: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", r.bootDir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", r.bootDir, err, out)
		}
	})
	r.backups = t.TempDir()
	dir := t.TempDir()
	signer, keyFile := sshdtest.NewKey(t, dir, "id_ed25519", "ed25519")
	a := hostOnlyServer(t, signer.PublicKey(), r.clean, r.bootDir, r.backups)
	b := hostOnlyServer(t, signer.PublicKey(), r.removal, r.bootDir, r.backups)

	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	c.Kubeconfig = filepath.Join(dir, "no-kubeconfig") // no cluster at all
	c.SSH.KnownHosts = []string{filepath.Join(dir, "known_hosts")}
	c.SSH.KeyFiles = []string{keyFile}
	c.SSH.DpkgLockTimeout = config.Duration(3 * time.Second)
	c.SSH.Inventory = filepath.Join(dir, "inventory.yaml")
	// solo-key reaches a's sshd under a name whose known key is b's: a
	// changed host key.
	changed := strings.ReplaceAll(b.KnownHostsLines(), fmt.Sprintf("[%s]:%d", b.Host, b.Port), fmt.Sprintf("[solo-key.example.internal]:%d", a.Port))
	aptlab.WriteFile(t, c.SSH.KnownHosts[0], a.KnownHostsLines()+b.KnownHostsLines()+changed, 0o600)
	closed := sshdtest.FreePorts(t, 1)[0]
	inv := fmt.Sprintf(`defaults: {user: root}
nodes:
  solo-1: {address: %[1]s, port: %[2]d}
  solo-rm: {address: %[1]s, port: %[3]d}
  solo-key: {address: %[1]s, port: %[2]d, host_key_alias: solo-key.example.internal}
  solo-gone: {address: %[1]s, port: %[4]d}
`, a.Host, a.Port, b.Port, closed)
	aptlab.WriteFile(t, c.SSH.Inventory, inv, 0o600)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r.config = writeConfigJSON(t, c)
	return r
}

// tool runs `mcp-patch tool NAME ARGS --config …` and decodes its JSON.
func (r *hostOnlyRig) tool(t *testing.T, name string, args ...string) (int, map[string]any, string) {
	t.Helper()
	code, out, errs := run(t, "", nil, append(append([]string{"tool", name}, args...), "--config", r.config)...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%s %v: not JSON (%v):\n%s\nstderr:\n%s", name, args, err, out, errs)
	}
	return code, m, errs
}

// want checks a result's status, that its reasons hold each of reasons and
// that its next action holds next (and not notNext).
func want(t *testing.T, what string, code int, m map[string]any, status string, reasons []string, next, notNext string) {
	t.Helper()
	rs, _ := json.Marshal(m["reasons"])
	na, _ := m["next_action"].(string)
	if m["status"] != status {
		t.Errorf("%s: status %v, want %s; reasons %s; next %q", what, m["status"], status, rs, na)
	}
	if (status == "ok") != (code == ExitOK) {
		t.Errorf("%s: exit %d for status %v", what, code, m["status"])
	}
	for _, w := range reasons {
		if !strings.Contains(string(rs), w) {
			t.Errorf("%s: reasons %s lack %q", what, rs, w)
		}
	}
	if !strings.Contains(na, next) {
		t.Errorf("%s: next %q lacks %q", what, na, next)
	}
	if notNext != "" && strings.Contains(na, notNext) {
		t.Errorf("%s: next %q speaks of %q", what, na, notNext)
	}
	if strings.Contains(string(rs), `"blocker: `) && m["status"] == "ok" {
		t.Errorf("%s: ok with a blocker: %s", what, rs)
	}
}

// One host, no cluster, no round: each hazard through the CLI twins ends
// in the right status, reason and next step; download_updates pre-fetches
// (and only that); the lock holder is still alive afterwards.
func TestHostOnlyHazardsThroughTheCLI(t *testing.T) {
	r := newHostOnlyRig(t)

	t.Run("clean host", func(t *testing.T) {
		code, m, errs := r.tool(t, "inspect_node", "--node", "solo-1")
		want(t, "inspect", code, m, "ok", []string{"3 package(s) pending", "new kernel 9.9.9-1-generic", "nothing was recorded"}, "simulate_upgrade", "")
		if strings.Contains(errs, "level=") {
			t.Errorf("a clean call logs on stderr at the default level:\n%s", errs)
		}
		code, m, _ = r.tool(t, "simulate_upgrade", "--node", "solo-1")
		want(t, "simulate", code, m, "ok", []string{"target kernel \\\"9.9.9-1-generic\\\"", "nothing was recorded"}, "download_updates", "")
		code, m, _ = r.tool(t, "download_updates", "--node", "solo-1")
		want(t, "download", code, m, "ok", []string{"fetched into apt's cache", "nothing was installed and nothing was recorded"}, "apt's cache", "")
		debs, _ := filepath.Glob(filepath.Join(r.clean.Dir, "cache", "archives", "*.deb"))
		if len(debs) != 3 {
			t.Errorf("download_updates left %d packages in the lab's apt cache, want the plan's 3: %v", len(debs), debs)
		}
		if out, _ := r.clean.Command("dpkg-query", "-W", "-f=${Version}", "tinyapp").Output(); string(out) != "1.0" {
			t.Errorf("download_updates changed the installed tinyapp: %q, want 1.0", out)
		}
		code, m, _ = r.tool(t, "snapshot_node", "--node", "solo-1")
		want(t, "snapshot", code, m, "ok", []string{"host part only", "nothing was recorded"}, r.backups, "")
		_, _, errs = r.tool(t, "fleet_check", "--log-level", "info")
		if !strings.Contains(errs, "level=INFO") {
			t.Errorf("--log-level info shows no info line:\n%s", errs)
		}
	})

	t.Run("removal", func(t *testing.T) {
		code, m, _ := r.tool(t, "inspect_node", "--node", "solo-rm")
		want(t, "inspect", code, m, "failed", []string{"blocker: the pending upgrade would stop the round: the upgrade would remove 1 package(s): oldlib"}, "Never run an upgrade that removes packages", "reachable")
		code, m, _ = r.tool(t, "simulate_upgrade", "--node", "solo-rm")
		want(t, "simulate", code, m, "failed", []string{"would remove 1 package(s): oldlib", "nothing was recorded"}, "Never run an upgrade that removes packages", "resume")
	})

	t.Run("interrupted dpkg", func(t *testing.T) {
		r.clean.Interrupt(t)
		defer r.clean.Repair(t)
		code, m, _ := r.tool(t, "inspect_node", "--node", "solo-1")
		want(t, "inspect", code, m, "failed", []string{"blocker: dpkg was interrupted"}, "'dpkg --configure -a' as root on solo-1", "reachable")
		code, m, _ = r.tool(t, "simulate_upgrade", "--node", "solo-1")
		want(t, "simulate", code, m, "failed", []string{"dpkg was interrupted"}, "'dpkg --configure -a' as root on solo-1", "reachable")
		code, m, _ = r.tool(t, "download_updates", "--node", "solo-1")
		want(t, "download", code, m, "failed", []string{"dpkg was interrupted", "nothing was recorded"}, "dpkg --configure -a", "reachable")
	})

	t.Run("/boot nearly full", func(t *testing.T) {
		filler := filepath.Join(r.bootDir, "filler")
		free := bootFreeKB(t, r.bootDir)
		if out, err := exec.Command("fallocate", "-l", strconv.FormatInt((free-336)*1024, 10), filler).CombinedOutput(); err != nil {
			t.Fatalf("fallocate: %v\n%s", err, out)
		}
		defer os.Remove(filler)
		left := bootFreeKB(t, r.bootDir)
		code, m, _ := r.tool(t, "inspect_node", "--node", "solo-1")
		want(t, "inspect", code, m, "failed", []string{fmt.Sprintf("has %d KiB free", left), "need about 64 MiB"}, "Free space on /boot of solo-1", "reachable")
		code, m, _ = r.tool(t, "simulate_upgrade", "--node", "solo-1")
		want(t, "simulate", code, m, "failed", []string{fmt.Sprintf("has %d KiB free", left)}, "Free space on /boot of solo-1", "reachable")
	})

	t.Run("lock held by another process", func(t *testing.T) {
		pid, release := holdDpkgLock(t, r.clean)
		defer release()
		code, m, _ := r.tool(t, "inspect_node", "--node", "solo-1")
		want(t, "inspect", code, m, "failed", []string{fmt.Sprintf("dpkg's lock is held now by process %d (apt-get full-upgrade)", pid)}, "let it finish", "reachable")
		code, m, _ = r.tool(t, "download_updates", "--node", "solo-1")
		want(t, "download", code, m, "failed", []string{fmt.Sprintf("locked by process %d", pid), "waited 3 s", "left it alone", "nothing was recorded"}, "never kill it", "reachable")
		if !sshdtest.ProcessAlive(pid) {
			t.Errorf("the lock holder %d is gone: it must be left alone", pid)
		}
	})

	t.Run("host key changed", func(t *testing.T) {
		code, m, _ := r.tool(t, "inspect_node", "--node", "solo-key")
		want(t, "inspect", code, m, "failed", []string{"inspect on solo-key", "host key"}, "out of band", "reachable")
	})

	t.Run("unreachable", func(t *testing.T) {
		code, m, _ := r.tool(t, "simulate_upgrade", "--node", "solo-gone")
		want(t, "simulate", code, m, "failed", []string{"simulate upgrade on solo-gone"}, "solo-gone is reachable over SSH", "dpkg")
	})

	t.Run("the whole inventory", func(t *testing.T) {
		code, out, _ := run(t, "", nil, "tool", "inspect_node", "--all", "-o", "table", "--config", r.config)
		if code != ExitNotOK {
			t.Errorf("inspect_node --all: exit %d, want 1 (three nodes have blockers):\n%s", code, out)
		}
		rows := tableRows(out)
		for node, status := range map[string]string{"solo-1": "ok", "solo-rm": "failed", "solo-key": "failed", "solo-gone": "failed"} {
			if !strings.Contains(rows[node], " "+status+" ") {
				t.Errorf("row of %s %q, want %s:\n%s", node, rows[node], status, out)
			}
		}
		for _, w := range []string{"1 of 4 inventory nodes ready, 3 with blockers", "would remove", "nothing was recorded"} {
			if !strings.Contains(out, w) {
				t.Errorf("inspect_node --all lacks %q:\n%s", w, out)
			}
		}
		code, m, _ := r.tool(t, "fleet_check")
		want(t, "fleet_check", code, m, "failed", []string{"2 of 4 inventory nodes read", "nothing was recorded"}, "", "")
	})
}

// tableRows are the rows of -o table's nodes list by their first cell.
func tableRows(out string) map[string]string {
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for _, c := range f {
			if strings.HasPrefix(c, "solo-") && len(f) > 3 {
				rows[c] = " " + strings.Join(f, " ") + " "
				break
			}
		}
	}
	return rows
}

func bootFreeKB(t *testing.T, dir string) int64 {
	t.Helper()
	out, err := exec.Command("df", "-Pk", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	n, err := strconv.ParseInt(strings.Fields(lines[len(lines)-1])[3], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holdDpkgLock starts what a person's upgrade is while it waits at its
// prompt: the real `apt-get full-upgrade` against the lab, holding dpkg's
// lock. release answers its prompt with "n" and waits for it to end.
func holdDpkgLock(t *testing.T, lab *aptlab.Lab) (int, func()) {
	t.Helper()
	cmd := lab.Command("apt-get", "full-upgrade")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	prompt := make(chan struct{})
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Split(bufio.ScanRunes)
		var seen strings.Builder
		for sc.Scan() {
			seen.WriteString(sc.Text())
			if strings.Contains(seen.String(), "continue?") {
				once.Do(func() { close(prompt) })
			}
		}
	}()
	select {
	case <-prompt:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("apt-get full-upgrade did not reach its prompt")
	}
	pid := cmd.Process.Pid
	return pid, func() {
		fmt.Fprintln(stdin, "n")
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Errorf("apt-get full-upgrade %d did not end after its prompt was answered", pid)
			_ = cmd.Process.Kill()
			<-done
		}
		pw.Close()
	}
}
