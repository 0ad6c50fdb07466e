package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/scripts"
)

// installViaScripts runs simulate.sh, then install.sh start with the
// digest it gave, then polls install.sh status until the detached
// apt-get finishes; it returns the final status object.
func installViaScripts(t *testing.T, p *host.Pool, node, round string) map[string]any {
	t.Helper()
	sim, out := step(t, p, node, "simulate", nil)
	wantStatus(t, sim, out, "ok")
	start, out := step(t, p, node, "install", map[string]string{"ACTION": "start", "ROUND": round, "EXPECTED_PLAN_DIGEST": sim["plan_digest"].(string)})
	wantStatus(t, start, out, "ok")
	return waitInstall(t, p, node, round)
}

func waitInstall(t *testing.T, p *host.Pool, node, round string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, out := step(t, p, node, "install", map[string]string{"ACTION": "status", "ROUND": round})
		if st["state"] == "finished" || st["state"] == "lost" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("install on %s still %v after 60s: %s", node, st["state"], out.Stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitInstallAcrossDrop is waitInstall for a host whose connection is cut
// once while the install runs: the cut may land on a status call rather
// than on the start, and a status call is safe to repeat on a fresh
// connection.
func waitInstallAcrossDrop(t *testing.T, p *host.Pool, node, round string, script []byte) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := p.RunScript(ctx, node, script, map[string]string{"ACTION": "status", "ROUND": round})
		cancel()
		switch {
		case errors.Is(err, host.ErrConnectionLost):
			p.Forget(node)
		case err != nil:
			t.Fatalf("install.sh status on %s: %v (stderr: %s)", node, err, out.Stderr)
		default:
			var st map[string]any
			if err := json.Unmarshal(out.Stdout, &st); err != nil {
				t.Fatalf("install.sh status on %s printed no JSON object: %v\n%s", node, err, out.Stdout)
			}
			if st["state"] == "finished" || st["state"] == "lost" {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("install on %s not finished after 60s", node)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// entryIDs returns the GRUB id paths of the advanced entries of the old
// and the new kernel.
func entryIDs(t *testing.T, h *Host) (old, new string) {
	t.Helper()
	st, err := h.State()
	if err != nil {
		t.Fatal(err)
	}
	sub := "gnulinux-advanced-" + st.RootUUID
	return sub + ">gnulinux-" + OldKernel + "-advanced-" + st.RootUUID, sub + ">gnulinux-" + NewKernel + "-advanced-" + st.RootUUID
}

// rebootAndWait asks the host to reboot (as `reboot` on it would) and
// waits until it answers again.
func rebootAndWait(t *testing.T, f *Fleet, h *Host) {
	t.Helper()
	sh(t, f, h, "reboot")
	waitDownThenUp(t, h)
}

func waitDownThenUp(t *testing.T, h *Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.WaitPower(ctx, PowerBooting, PowerPanicked, PowerHung); err != nil {
		t.Fatalf("host never went down: %v", err)
	}
	waitUp(t, h, 20*time.Second)
}

func bootRecords(h *Host) []string {
	var out []string
	for _, r := range h.BootHistory() {
		s := string(r.Result) + " " + r.Kernel
		if r.FromNext {
			s += " (next_entry)"
		}
		out = append(out, s)
	}
	return out
}

// TestTrialBootCycle is the GRUB cycle the round relies on, played by the
// real scripts, the real grub-reboot and grub-editenv: the trial boot
// reaches the new kernel once, the next reboot returns to the old default,
// and promote makes the new kernel the default.
func TestTrialBootCycle(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	p := pool(t, f)
	h := f.Host("gpu-1")
	const round = "r2025-01"

	done := installViaScripts(t, p, h.Name, round)
	if done["state"] != "finished" || done["exit_code"] != float64(0) {
		t.Fatalf("install: %v exit %v\nlog: %v", done["state"], done["exit_code"], done["log_tail"])
	}
	if done["launcher"] != "systemd-run --unit=mcp-patch-install-"+round {
		t.Errorf("install launcher = %v, want systemd-run", done["launcher"])
	}
	before, _ := h.State()

	oldID, newID := entryIDs(t, h)
	prep, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "prepare", "ROUND": round, "OLD_ENTRY": oldID, "NEW_ENTRY": newID})
	wantStatus(t, prep, out, "ok")
	if diff := cmp.Diff(map[string]any{"next_entry": newID, "old_kernel": OldKernel, "new_kernel": NewKernel, "grubenv_reliable": true, "panic_seconds": float64(10)},
		map[string]any{"next_entry": prep["next_entry"], "old_kernel": prep["old_kernel"], "new_kernel": prep["new_kernel"], "grubenv_reliable": prep["grubenv_reliable"], "panic_seconds": prep["panic_seconds"]}); diff != "" {
		t.Errorf("trial_boot prepare (-want +got):\n%s", diff)
	}
	cfg := sh(t, f, h, `cat "$GRUB_CFG"`)
	if !strings.Contains(cfg, `set default="`+oldID+`"`) || !strings.Contains(cfg, "panic=10") {
		t.Errorf("grub.cfg after prepare lacks the old default or panic=10")
	}

	rb, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "reboot", "ROUND": round})
	wantStatus(t, rb, out, "ok")
	if rb["method"] != "systemd-run --on-active=5 systemctl reboot" {
		t.Errorf("reboot method = %v", rb["method"])
	}
	waitDownThenUp(t, h)
	p.Forget(h.Name)

	st, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "status", "ROUND": round})
	wantStatus(t, st, out, "ok")
	if diff := cmp.Diff(map[string]any{"outcome": "new_kernel", "kernel": NewKernel, "rebooted": true, "next_entry": ""},
		map[string]any{"outcome": st["outcome"], "kernel": st["kernel"], "rebooted": st["rebooted"], "next_entry": st["next_entry"]}); diff != "" {
		t.Errorf("trial_boot status after the trial boot (-want +got):\n%s", diff)
	}
	if st["boot_id"] == before.BootID {
		t.Error("boot_id did not change across the reboot")
	}
	gc, out := step(t, p, h.Name, "gpu_check", map[string]string{"EXPECTED_GPUS": "8"})
	wantStatus(t, gc, out, "ok")

	// One-shot: without promote, the next reboot goes back to the default.
	rebootAndWait(t, f, h)
	p.Forget(h.Name)
	st, out = step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "status", "ROUND": round})
	wantStatus(t, st, out, "ok")
	if st["outcome"] != "fell_back" || st["kernel"] != OldKernel {
		t.Errorf("second reboot: outcome %v on %v, want fell_back on %s", st["outcome"], st["kernel"], OldKernel)
	}

	// Back on the old kernel, promote refuses and changes nothing.
	promoteRefusedOffTheTrialKernel(t, f, p, h, round, st["boot_id"].(string))

	// A second trial boot reaches the new kernel; promote, held to that
	// boot, makes it the default.
	prep, out = step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "prepare", "ROUND": round, "OLD_ENTRY": oldID, "NEW_ENTRY": newID})
	wantStatus(t, prep, out, "ok")
	rb, out = step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "reboot", "ROUND": round})
	wantStatus(t, rb, out, "ok")
	waitDownThenUp(t, h)
	p.Forget(h.Name)
	st, out = step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "status", "ROUND": round})
	wantStatus(t, st, out, "ok")
	if st["outcome"] != "new_kernel" {
		t.Fatalf("second trial boot: outcome %v on %v", st["outcome"], st["kernel"])
	}
	pr, out := step(t, p, h.Name, "promote", map[string]string{"ROUND": round, "EXPECTED_KERNEL": NewKernel, "EXPECTED_BOOT_ID": st["boot_id"].(string)})
	wantStatus(t, pr, out, "ok")
	if pr["dropin_removed"] != true || pr["next_boot_kernel"] != NewKernel || pr["running_kernel"] != NewKernel {
		t.Errorf("promote: dropin_removed %v, next boot kernel %v, running %v", pr["dropin_removed"], pr["next_boot_kernel"], pr["running_kernel"])
	}
	rebootAndWait(t, f, h)
	if got := sh(t, f, h, "uname -r"); got != NewKernel+"\n" {
		t.Errorf("after promote and reboot: uname -r = %q", got)
	}
	want := []string{"up " + OldKernel, "up " + NewKernel + " (next_entry)", "up " + OldKernel, "up " + NewKernel + " (next_entry)", "up " + NewKernel}
	if diff := cmp.Diff(want, bootRecords(h)); diff != "" {
		t.Errorf("boot history (-want +got):\n%s", diff)
	}
}

// promoteRefusedOffTheTrialKernel runs promote.sh for the new kernel on h,
// which runs the old one (boot bootID): it must refuse (exit 3) before
// touching anything, and the trial-boot drop-in, grub.cfg and grubenv stay
// byte for byte, so GRUB still boots the old kernel by default. A boot id
// that is not the running one is refused the same way.
func promoteRefusedOffTheTrialKernel(t *testing.T, f *Fleet, p *host.Pool, h *Host, round, bootID string) {
	t.Helper()
	grub := func() string {
		return sh(t, f, h, `cat "$GRUB_DROPIN" "$GRUB_CFG"; grub-editenv "$GRUB_DIR/grubenv" list`)
	}
	before := grub()
	for _, env := range []map[string]string{
		{"ROUND": round, "EXPECTED_KERNEL": NewKernel},
		{"ROUND": round, "EXPECTED_KERNEL": NewKernel, "EXPECTED_BOOT_ID": bootID},
		{"ROUND": round, "EXPECTED_KERNEL": OldKernel, "EXPECTED_BOOT_ID": "00000000-0000-0000-0000-000000000000"},
	} {
		pr, out := step(t, p, h.Name, "promote", env)
		wantStatus(t, pr, out, "refused")
		if out.ExitCode != 3 || pr["running_kernel"] != OldKernel || pr["boot_id"] != bootID || pr["dropin_removed"] != nil {
			t.Errorf("promote %v on the old kernel: exit %d, %v", env, out.ExitCode, pr)
		}
	}
	if after := grub(); after != before {
		t.Errorf("a refused promote changed GRUB:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if !strings.Contains(before, "GRUB_DEFAULT=") {
		t.Errorf("the trial-boot drop-in is gone before promote:\n%s", before)
	}
}

// panicTrialBoot installs the update on h through the scripts, makes its
// new kernel panic, runs the trial boot and answers its status once the
// host is back.
func panicTrialBoot(t *testing.T, p *host.Pool, h *Host, round string) map[string]any {
	t.Helper()
	if done := installViaScripts(t, p, h.Name, round); done["exit_code"] != float64(0) {
		t.Fatalf("install failed: %v", done["log_tail"])
	}
	if err := h.Inject(KernelPanic{}); err != nil {
		t.Fatal(err)
	}
	oldID, newID := entryIDs(t, h)
	prep, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "prepare", "ROUND": round, "OLD_ENTRY": oldID, "NEW_ENTRY": newID})
	wantStatus(t, prep, out, "ok")
	rb, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "reboot", "ROUND": round})
	wantStatus(t, rb, out, "ok")
	waitDownThenUp(t, h)
	p.Forget(h.Name)
	st, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "status", "ROUND": round})
	wantStatus(t, st, out, "ok")
	return st
}

// TestPromoteRefusesAFallenBackHost: the trial kernel panics and GRUB
// brings the host back on the old kernel. promote.sh, asked to promote the
// new kernel (as a rewritten journal would have it), reads uname -r and
// refuses: the old kernel stays GRUB's default, and the next reboot boots
// it.
func TestPromoteRefusesAFallenBackHost(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	p := pool(t, f)
	h := f.Host("gpu-1")
	const round = "r-fell-back"
	st := panicTrialBoot(t, p, h, round)
	if st["outcome"] != "fell_back" {
		t.Fatalf("outcome %v on %v, want fell_back", st["outcome"], st["kernel"])
	}

	promoteRefusedOffTheTrialKernel(t, f, p, h, round, st["boot_id"].(string))

	rebootAndWait(t, f, h)
	if got := sh(t, f, h, "uname -r"); got != OldKernel+"\n" {
		t.Errorf("after a refused promote the host booted %q, want the old kernel", got)
	}
}

// TestPanicFallsBackToTheOldKernel: the new kernel panics on its trial
// boot; panic=10 from the drop-in reboots it, and GRUB (next_entry
// consumed) boots the old default.
func TestPanicFallsBackToTheOldKernel(t *testing.T) {
	f := newTestFleet(t, Options{Canary: 1})
	p := pool(t, f)
	h := f.Host("gpu-canary-1")
	const round = "r-panic"
	st := panicTrialBoot(t, p, h, round)
	if st["outcome"] != "fell_back" || st["kernel"] != OldKernel {
		t.Errorf("after a panic: outcome %v on %v, want fell_back on %s", st["outcome"], st["kernel"], OldKernel)
	}
	hist := h.BootHistory()
	want := []string{"up " + OldKernel, "panic " + NewKernel + " (next_entry)", "up " + OldKernel}
	if diff := cmp.Diff(want, bootRecords(h)); diff != "" {
		t.Errorf("boot history (-want +got):\n%s", diff)
	}
	if hist[1].PanicTimeout != 10 {
		t.Errorf("panic timeout of the trial boot = %d, want 10 (panic= from the drop-in)", hist[1].PanicTimeout)
	}
}

// TestPanicWithoutTimeoutStaysDown: neither kernel.panic nor panic=N is
// set, so a panicking kernel never reboots.
func TestPanicWithoutTimeoutStaysDown(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1, KernelPanic: -1})
	h := f.Host("gpu-1")
	sh(t, f, h, "apt-get -y full-upgrade </dev/null >/dev/null")
	if err := h.Inject(KernelPanic{}); err != nil {
		t.Fatal(err)
	}
	_, newID := entryIDs(t, h)
	sh(t, f, h, "grub-reboot '"+newID+"' && reboot")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.WaitPower(ctx, PowerPanicked); err != nil {
		t.Fatal(err)
	}
	assertStaysDown(t, f, h, 10*f.opts.RebootDowntime+5*f.opts.PanicDelay)
	if got := h.Power(); got != PowerPanicked {
		t.Errorf("power = %s, want %s", got, PowerPanicked)
	}
}

// assertStaysDown checks for d that the host's SSH port refuses
// connections.
func assertStaysDown(t *testing.T, f *Fleet, h *Host, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		c, err := net.DialTimeout("tcp", h.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			t.Fatalf("%s answered on %s while it should be down (power %s)", h.Name, h.Addr(), h.Power())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHangOnBootStaysDownUntilCleared(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	h := f.Host("cp-1")
	if err := h.Inject(HangOnBoot{}); err != nil {
		t.Fatal(err)
	}
	before, _ := h.State()
	sh(t, f, h, "systemctl reboot")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.WaitPower(ctx, PowerHung); err != nil {
		t.Fatal(err)
	}
	assertStaysDown(t, f, h, 10*f.opts.RebootDowntime)
	if err := h.Clear("hang-on-boot"); err != nil {
		t.Fatal(err)
	}
	waitUp(t, h, 10*time.Second)
	after, _ := h.State()
	if after.BootID == before.BootID || after.Kernel != OldKernel {
		t.Errorf("after clearing the hang: boot id %s (was %s), kernel %s", after.BootID, before.BootID, after.Kernel)
	}
}

func TestHostKeyChangedIsRefused(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	h := f.Host("cp-1")
	p := pool(t, f)
	if err := h.Inject(HostKeyChanged{}); err != nil {
		t.Fatal(err)
	}
	_, err := dial(t, f, h, "root")
	var keyErr *knownhosts.KeyError
	if !errors.As(err, &keyErr) || len(keyErr.Want) == 0 {
		t.Fatalf("dial with a changed host key: %v, want a knownhosts.KeyError naming the known key", err)
	}
	script := []byte("echo hi\n")
	_, err = p.RunScript(context.Background(), h.Name, script, nil)
	var hkErr *host.HostKeyError
	if !errors.As(err, &hkErr) || !hkErr.Known {
		t.Fatalf("host.Pool with a changed host key: %v, want a HostKeyError for a known host", err)
	}
	if err := h.Clear("host-key-changed"); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, f, h, "echo back"); out != "back\n" {
		t.Errorf("after clearing: %q", out)
	}
}

// TestSSHDropMidInstall: the connection is cut while apt-get runs. The
// install started detached by install.sh finishes; an apt-get run inside
// the session dies with it and leaves dpkg interrupted.
func TestSSHDropMidInstall(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 2, InstallStep: 40 * time.Millisecond})
	p := pool(t, f)

	t.Run("detached install completes", func(t *testing.T) {
		h := f.Host("gpu-1")
		if err := h.Inject(SSHDropMidInstall{}); err != nil {
			t.Fatal(err)
		}
		sim, out := step(t, p, h.Name, "simulate", nil)
		wantStatus(t, sim, out, "ok")
		script, _ := scriptFile("install")
		// The cut lands while dpkg runs; install.sh start may have answered
		// before it or lose its connection to it.
		_, err := p.RunScript(context.Background(), h.Name, script, map[string]string{"ACTION": "start", "ROUND": "r1", "EXPECTED_PLAN_DIGEST": sim["plan_digest"].(string)})
		if err != nil && !errors.Is(err, host.ErrConnectionLost) {
			t.Fatalf("install.sh start: %v", err)
		}
		p.Forget(h.Name)
		done := waitInstallAcrossDrop(t, p, h.Name, "r1", script)
		if done["state"] != "finished" || done["exit_code"] != float64(0) {
			t.Fatalf("detached install after the drop: %v exit %v\n%v", done["state"], done["exit_code"], done["log_tail"])
		}
		rc, err := os.Stat(h.Path("/var/lib/mcp-patch/r1/install.rc"))
		if err != nil {
			t.Fatal(err)
		}
		drops := h.Drops()
		if len(drops) != 1 || !drops[0].Before(rc.ModTime()) {
			t.Fatalf("connections cut at %v, install finished at %v: want one cut while it ran", drops, rc.ModTime())
		}
		st, _ := h.State()
		if st.DpkgInterrupted || st.Packages["linux-image-"+NewKernel].Version == "" {
			t.Errorf("after the detached install: dpkg interrupted %v, new kernel image %q", st.DpkgInterrupted, st.Packages["linux-image-"+NewKernel].Version)
		}
	})

	t.Run("install in the session dies with it", func(t *testing.T) {
		h := f.Host("gpu-2")
		if err := h.Inject(SSHDropMidInstall{}); err != nil {
			t.Fatal(err)
		}
		c, err := dial(t, f, h, "root")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.NewSession()
		err = s.Run("apt-get -y full-upgrade </dev/null")
		c.Close()
		if err == nil {
			t.Fatal("apt-get in a cut session exited cleanly")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			st, _ := h.State()
			r := run(t, f, h, "apt-get -s full-upgrade", "")
			if st.DpkgInterrupted && r.code == 100 && strings.Contains(r.stderr, "dpkg was interrupted") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("after the cut: dpkg interrupted %v, apt-get -s exit %d: %s", st.DpkgInterrupted, r.code, r.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		sh(t, f, h, "dpkg --configure -a")
	})
}

func TestMDRaidBootMakesGrubenvUnreliable(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	p := pool(t, f)
	h := f.Host("gpu-1")
	if err := h.Inject(BootOnMDRaid{}); err != nil {
		t.Fatal(err)
	}
	in, out := step(t, p, h.Name, "inspect", nil)
	wantStatus(t, in, out, "ok")
	if in["boot_source"] != "/dev/md0" || in["grubenv_reliable"] != false || !strings.Contains(in["mdstat"].(string), "md0 : active raid1") {
		t.Errorf("inspect with /boot on md: source %v, reliable %v, mdstat %q", in["boot_source"], in["grubenv_reliable"], in["mdstat"])
	}
	// GRUB cannot clear next_entry: the one-shot entry sticks.
	sh(t, f, h, "apt-get -y full-upgrade </dev/null >/dev/null")
	_, newID := entryIDs(t, h)
	sh(t, f, h, "grub-reboot '"+newID+"'")
	rebootAndWait(t, f, h)
	rebootAndWait(t, f, h)
	want := []string{"up " + OldKernel, "up " + NewKernel + " (next_entry)", "up " + NewKernel + " (next_entry)"}
	if diff := cmp.Diff(want, bootRecords(h)); diff != "" {
		t.Errorf("boot history with grubenv on md (-want +got):\n%s", diff)
	}
}

func TestNvidiaModulesMissing(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	p := pool(t, f)
	h := f.Host("gpu-1")
	if err := h.Inject(NvidiaModulesMissing{}); err != nil {
		t.Fatal(err)
	}
	sim := sh(t, f, h, "apt-get -s full-upgrade")
	if !strings.Contains(sim, "The following packages have been kept back:\n  containerd cri-tools kubeadm kubectl kubelet\n  linux-modules-nvidia-550-server-generic\n") {
		t.Errorf("kept-back block without the NVIDIA modules:\n%s", sim)
	}
	sh(t, f, h, "apt-get -y full-upgrade </dev/null >/dev/null")
	in, out := step(t, p, h.Name, "inspect", map[string]string{"TARGET_KERNEL": NewKernel})
	wantStatus(t, in, out, "ok")
	if in["target_modules_dir"] != true || len(in["target_nvidia_modules"].([]any)) != 0 {
		t.Errorf("inspect for %s: modules dir %v, nvidia modules %v", NewKernel, in["target_modules_dir"], in["target_nvidia_modules"])
	}
	_, newID := entryIDs(t, h)
	sh(t, f, h, "grub-reboot '"+newID+"'")
	rebootAndWait(t, f, h)
	p.Forget(h.Name)
	gc, out := step(t, p, h.Name, "gpu_check", map[string]string{"EXPECTED_GPUS": "8"})
	wantStatus(t, gc, out, "check_failed")
	if gc["driver_loaded"] != false || gc["nvidia_smi_exit"] != float64(9) {
		t.Errorf("gpu_check on a kernel without NVIDIA modules: driver_loaded %v, nvidia-smi exit %v", gc["driver_loaded"], gc["nvidia_smi_exit"])
	}
}

func TestGPUMissingAfterBoot(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	p := pool(t, f)
	h := f.Host("gpu-1")
	if err := h.Inject(GPUMissing{}); err != nil {
		t.Fatal(err)
	}
	rebootAndWait(t, f, h)
	p.Forget(h.Name)
	gc, out := step(t, p, h.Name, "gpu_check", map[string]string{"EXPECTED_GPUS": "8"})
	wantStatus(t, gc, out, "check_failed")
	if gc["gpu_count"] != float64(7) {
		t.Errorf("gpu_count = %v, want 7", gc["gpu_count"])
	}
}

func TestAptFaults(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1, GPUServers: 1})
	p := pool(t, f)
	tests := []struct {
		name  string
		node  string
		fault Fault
		want  string // a plan line simulate.sh must report
	}{
		{"removal on a GPU server", "gpu-1", AptWouldRemove{}, "Remv nvidia-fabricmanager-550 550.127.08-1 - -"},
		{"kubelet not held", "cp-1", PackageNotHeld{}, "Inst kubelet 1.31.4-1.1 1.31.5-1.1 amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := f.Host(tt.node)
			if err := h.Inject(tt.fault); err != nil {
				t.Fatal(err)
			}
			sim, out := step(t, p, tt.node, "simulate", nil)
			wantStatus(t, sim, out, "ok")
			if lines, _ := sim["plan_lines"].([]any); !containsAny(lines, tt.want) {
				t.Errorf("plan lines lack %q:\n%v", tt.want, lines)
			}
			if err := h.Clear(tt.fault.Name()); err != nil {
				t.Fatal(err)
			}
			sim, _ = step(t, p, tt.node, "simulate", nil)
			if lines, _ := sim["plan_lines"].([]any); containsAny(lines, tt.want) {
				t.Errorf("after Clear the plan still has %q", tt.want)
			}
		})
	}
}

func containsAny(xs []any, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func scriptFile(name string) ([]byte, error) {
	return scripts.Host.ReadFile("host/" + name + ".sh")
}
