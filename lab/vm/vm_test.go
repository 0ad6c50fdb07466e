package vm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/lab/vm"
)

const (
	node  = "canary"
	round = "2026-12"
	// bootBound is how long one reboot may take on a loaded 2-core machine
	// under TCG (50-70 s when quiet, minutes under load).
	bootBound = 15 * time.Minute
)

// rig is one VM driven through the production SSH pool and host steps.
type rig struct {
	t     *testing.T
	fw    vm.Firmware
	vm    *vm.VM
	img   vm.Image
	pool  *host.Pool
	steps *steps.Steps
	boots []string // the boots and timed phases, in order, for the summary
	nBoot int
}

func newRig(t *testing.T, fw vm.Firmware) *rig {
	t.Helper()
	for _, c := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s is not installed (scripts/setup.sh installs it): %v", c, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	start := time.Now()
	img, err := vm.FindImage(ctx, log)
	if err != nil {
		t.Fatalf("VM image: %v", err)
	}
	t.Logf("image %s (kernels %s -> %s) ready after %s", img.Dir, img.OldKernel, img.NewKernel, time.Since(start).Round(time.Second))
	v, err := vm.Boot(ctx, img, vm.Options{Dir: t.TempDir(), Name: node, Firmware: fw, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Stop(); err != nil {
			t.Errorf("stop VM: %v", err)
		}
		if t.Failed() {
			t.Logf("serial log tail:\n%s", v.SerialTail(60))
		}
	})
	inv, err := host.NewMapInventory(host.Target{}, host.Target{Name: node, Address: "127.0.0.1", Port: v.Port})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := host.NewPool(inv, host.Config{
		KnownHostsFiles:   []string{v.KnownHosts},
		IdentityFiles:     []string{img.KeyFile},
		DialTimeout:       20 * time.Second,
		CommandTimeout:    15 * time.Minute,
		KeepaliveInterval: 5 * time.Second,
		KeepaliveTimeout:  10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Close(); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	r := &rig{t: t, fw: fw, vm: v, img: img, pool: pool, steps: steps.New(pool, log)}
	r.steps.LockTimeout = 15 * time.Second
	bctx, bcancel := context.WithTimeout(context.Background(), bootBound)
	defer bcancel()
	bootStart := time.Now()
	if err := v.WaitSSH(bctx); err != nil {
		t.Fatal(err)
	}
	k := r.waitBootID(bctx, "")
	r.logBoot("cold boot", k, time.Since(bootStart))
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (r *rig) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	r.t.Cleanup(cancel)
	return ctx
}

// sh runs a shell snippet on the VM as root through the pool (what a
// person does by hand in this test) and returns its stdout.
func (r *rig) sh(script string) string {
	r.t.Helper()
	out, err := r.pool.RunScript(r.ctx(5*time.Minute), node, []byte("set -eu\n"+script+"\n"), nil)
	if err != nil {
		r.t.Fatalf("on the VM: %v\nscript: %s", err, script)
	}
	if out.ExitCode != 0 {
		r.t.Fatalf("on the VM: exit %d\nscript: %s\nstdout: %s\nstderr: %s", out.ExitCode, script, out.Stdout, out.Stderr)
	}
	return strings.TrimSpace(string(out.Stdout))
}

// waitBootID waits until the VM answers kernel.sh with a boot id other
// than prev, and returns what it says. A guest that panics twice on the
// way (a kernel that panics booted again, not the old one) fails at once
// instead of at the bound.
func (r *rig) waitBootID(ctx context.Context, prev string) steps.KernelInfo {
	r.t.Helper()
	panicsBefore := r.panics()
	var k steps.KernelInfo
	err := r.vm.WaitFor(ctx, "a boot id other than "+prev, func(ctx context.Context) error {
		if n := r.panics() - panicsBefore; n >= 2 {
			return vm.Permanent(fmt.Errorf("the guest panicked %d times since the reboot: GRUB did not come back on a kernel that boots", n))
		}
		got, err := r.steps.Kernel(ctx, node)
		if err != nil {
			return err
		}
		if got.BootID == prev {
			return errors.New("same boot id")
		}
		k = got
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return k
}

// panics counts the kernel panics in the serial log so far.
func (r *rig) panics() int {
	serial, err := r.vm.Serial()
	if err != nil {
		return 0
	}
	return strings.Count(serial, "Kernel panic - not syncing")
}

// phase records a timed part of the test that is not a boot.
func (r *rig) phase(what string, d time.Duration) {
	line := fmt.Sprintf("%s (%s): took %s", what, r.fw, d.Round(time.Second))
	r.boots = append(r.boots, line)
	r.t.Log(line)
}

func (r *rig) logBoot(what string, k steps.KernelInfo, d time.Duration) {
	r.nBoot++
	line := fmt.Sprintf("boot %d (%s, %s): kernel %s, boot id %s, took %s", r.nBoot, r.fw, what, k.Kernel, k.BootID, d.Round(time.Second))
	r.boots = append(r.boots, line)
	r.t.Log(line)
}

// rebootAndWait runs reboot (a function that makes the VM reboot) and
// waits for the next boot.
func (r *rig) rebootAndWait(what string, reboot func()) steps.KernelInfo {
	r.t.Helper()
	before, err := r.steps.Kernel(r.ctx(2*time.Minute), node)
	if err != nil {
		r.t.Fatal(err)
	}
	start := time.Now()
	reboot()
	k := r.waitBootID(r.ctx(bootBound), before.BootID)
	r.logBoot(what, k, time.Since(start))
	return k
}

// entry is the normal (not recovery) GRUB entry of kernel in the live grub.cfg.
func entry(t *testing.T, es []parse.GrubEntry, kernel string, recovery bool) parse.GrubEntry {
	t.Helper()
	for _, e := range es {
		if e.Kernel == kernel && e.Recovery == recovery && e.Submenu != "" {
			return e
		}
	}
	t.Fatalf("no GRUB entry (recovery %v) for %s in %+v", recovery, kernel, es)
	return parse.GrubEntry{}
}

func refusedWith(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	if !errors.Is(err, steps.ErrRefused) {
		t.Fatalf("%s: want a refusal, got %v", what, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: refusal %q lacks %q", what, err, w)
		}
	}
}

// TestRealVM drives the unchanged host steps over the production SSH pool
// against a real Debian 12 VM (QEMU, BIOS, GRUB, systemd, apt, two real
// kernels): the hazards real hosts throw, the detached install across a
// killed SSH session, the fallback drill (a real panic), the trial boot,
// red checks rolled back by a reboot into the default, a GRUB default GRUB
// cannot find, promote and autoremove. One VM, six boots, in order.
func TestRealVM(t *testing.T) {
	t.Parallel()
	testStart := time.Now()
	r := newRig(t, vm.BIOS)
	img := r.img
	defer func() {
		t.Logf("boots and phases:\n  %s", strings.Join(r.boots, "\n  "))
		t.Logf("whole test (%s): %s", r.fw, time.Since(testStart).Round(time.Second))
	}()

	insp, err := r.steps.Inspect(r.ctx(5*time.Minute), node, steps.InspectInput{TargetKernel: img.NewKernel})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if insp.Kernel != img.OldKernel || insp.KernelPanic != 10 {
		t.Fatalf("inspect: kernel %s panic %d, want %s and 10", insp.Kernel, insp.KernelPanic, img.OldKernel)
	}
	for _, p := range []string{"containerd", "kubelet", "kubeadm", "kubectl", "cri-tools"} {
		if !slices.Contains(insp.Holds, p) {
			t.Errorf("inspect: %s not held (holds %v)", p, insp.Holds)
		}
	}
	if !insp.Grub.EnvWritableAtBoot || !insp.Grub.HonoursNextEntry {
		t.Errorf("inspect: grubenv writable %v, next_entry honoured %v, want both (ext4 on a BIOS disk)", insp.Grub.EnvWritableAtBoot, insp.Grub.HonoursNextEntry)
	}

	t.Run("dpkg interrupted: stop with the command to run", func(t *testing.T) {
		// What dpkg leaves behind when it is killed half-way: a journal entry.
		r.sh("dpkg-query -s lab-agent-config >/var/lib/dpkg/updates/0000")
		_, err := r.steps.Simulate(r.ctx(5*time.Minute), node)
		refusedWith(t, "simulate", err, "dpkg was interrupted", "dpkg --configure -a")
		sim, _ := r.steps.Simulate(r.ctx(5*time.Minute), node)
		if !sim.DpkgInterrupted || sim.FixCommand != "dpkg --configure -a" {
			t.Errorf("simulate: interrupted %v, fix %q", sim.DpkgInterrupted, sim.FixCommand)
		}
		st, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStart, round, "sha256:"+strings.Repeat("0", 64))
		refusedWith(t, "install start", err, "dpkg --configure -a")
		if !st.DpkgInterrupted {
			t.Errorf("install start: %+v", st)
		}
		if s, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStatus, round, ""); err != nil || s.State != steps.InstallNotStarted {
			t.Fatalf("after the refusal the install must not have started: %+v, %v", s, err)
		}
		// The person runs the command, then the round goes on.
		r.sh("dpkg --configure -a")
	})

	sim, err := r.steps.Simulate(r.ctx(5*time.Minute), node)
	if err != nil {
		t.Fatalf("simulate: %v", err)
	}
	if sim.Plan.TargetKernel != img.NewKernel || len(sim.Plan.Removals) != 0 || len(sim.Plan.Blockers) != 0 {
		t.Fatalf("simulate: target %q removals %v blockers %v", sim.Plan.TargetKernel, sim.Plan.Removals, sim.Plan.Blockers)
	}
	if !slices.Contains(sim.Plan.Phased, "lab-phased-tool") || slices.Contains(sim.Plan.Removals, "lab-phased-tool") {
		t.Errorf("simulate: lab-phased-tool (Phased-Update-Percentage 0) must be reported as kept back by phasing: phased %v kept back %v", sim.Plan.Phased, sim.Plan.KeptBack)
	}
	if sim.Boot.FreeKB == nil || sim.Boot.Short || !slices.Contains(sim.Boot.NewKernels, img.NewKernel) {
		t.Errorf("simulate: /boot %+v", sim.Boot)
	}

	t.Run("/boot nearly full: a blocker with figures", func(t *testing.T) {
		left := sim.Boot.NeedKB / 2
		r.sh(fmt.Sprintf("avail=$(df -Pk /boot | awk 'NR == 2 { print $4 }'); fallocate -l $(( (avail - %d) * 1024 )) /boot/filler", left))
		defer r.sh("rm -f /boot/filler")
		full, err := r.steps.Simulate(r.ctx(5*time.Minute), node)
		if err != nil {
			t.Fatalf("simulate: %v", err)
		}
		if !full.Boot.Short || len(full.Plan.Blockers) != 1 || !strings.Contains(full.Plan.Blockers[0], "/boot has") || !strings.Contains(full.Plan.Blockers[0], img.NewKernel) {
			t.Fatalf("simulate: boot %+v blockers %v", full.Boot, full.Plan.Blockers)
		}
		t.Logf("blocker: %s", full.Plan.Blockers[0])
		st, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStart, round, sim.Plan.Digest)
		refusedWith(t, "install start", err, "/boot has", "MiB free", "nothing was changed")
		if st.Boot == nil || !st.Boot.Short {
			t.Errorf("install start: boot %+v", st.Boot)
		}
		if s, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStatus, round, ""); err != nil || s.State != steps.InstallNotStarted {
			t.Fatalf("after the refusal the install must not have started: %+v, %v", s, err)
		}
	})

	t.Run("dpkg lock held: bounded wait, refusal naming the holder, holder untouched", func(t *testing.T) {
		// A person's apt-get full-upgrade waiting at its prompt holds the lock.
		r.sh(`mkfifo /run/lab-holder.in
systemd-run --unit=lab-apt-holder --quiet sh -c 'exec apt-get full-upgrade </run/lab-holder.in >/run/lab-holder.log 2>&1'
systemd-run --unit=lab-apt-holder-in --quiet sh -c 'exec sleep 3600 >/run/lab-holder.in'
i=0; until grep -q 'continue' /run/lab-holder.log 2>/dev/null; do i=$((i+1)); [ $i -lt 300 ]; sleep 1; done`)
		holder := r.sh("systemctl show -p MainPID --value lab-apt-holder.service")
		defer r.sh("systemctl stop lab-apt-holder-in.service lab-apt-holder.service || true; rm -f /run/lab-holder.in")
		start := time.Now()
		st, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStart, round, sim.Plan.Digest)
		waited := time.Since(start)
		refusedWith(t, "install start", err, "locked by process "+holder, "apt-get full-upgrade", "left alone")
		if st.Lock == nil || st.Lock.PID == nil || strconv.Itoa(*st.Lock.PID) != holder || st.Lock.WaitedSeconds != 15 {
			t.Errorf("install start: lock %+v, want holder %s after 15 s", st.Lock, holder)
		}
		if waited < 15*time.Second {
			t.Errorf("install start gave up after %s, before the 15 s lock timeout", waited)
		}
		if got := r.sh("systemctl show -p MainPID --value lab-apt-holder.service"); got != holder {
			t.Errorf("the holder %s must be left alone; the unit's pid is now %q", holder, got)
		}
		if s, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStatus, round, ""); err != nil || s.State != steps.InstallNotStarted {
			t.Fatalf("after the refusal the install must not have started: %+v, %v", s, err)
		}
	})

	dl, err := r.steps.Download(r.ctx(10*time.Minute), node)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	if !slices.ContainsFunc(dl.Fetched, func(f parse.AptFetch) bool { return f.Package == "linux-image-"+img.NewKernel }) {
		t.Errorf("download fetched %+v, want linux-image-%s", dl.Fetched, img.NewKernel)
	}
	if _, err := r.steps.Snapshot(r.ctx(5*time.Minute), node, round, "worker", ""); err != nil {
		t.Fatalf("snapshot: %v", err)
	}

	t.Run("install detached by systemd-run survives a killed SSH session", func(t *testing.T) {
		r.install(t, sim.Plan.Digest)
		// The conffile changed in the package and locally: kept, no prompt.
		conf := r.sh("cat /etc/lab-agent/agent.conf; ls /etc/lab-agent/")
		if !strings.Contains(conf, "interval = 15") || !strings.Contains(conf, "agent.conf.dpkg-dist") {
			t.Errorf("the locally edited conffile must be kept and the package's saved beside it:\n%s", conf)
		}
	})
	if t.Failed() {
		return
	}

	insp, oldE, newE := r.entries()

	t.Run("trial_boot.sh refuses recovery entries and ids without their submenu path", func(t *testing.T) {
		_, err := r.prepare(oldE.ID, entry(t, insp.Grub.Entries, img.NewKernel, true).ID)
		refusedWith(t, "new recovery entry", err, "recovery entry")
		_, err = r.prepare(entry(t, insp.Grub.Entries, img.OldKernel, true).ID, newE.ID)
		refusedWith(t, "old recovery entry", err, "recovery entry")
		_, last, _ := strings.Cut(oldE.ID, ">")
		_, err = r.prepare(last, newE.ID)
		refusedWith(t, "old entry without submenu", err, "lacks its submenu path", oldE.ID)
		// A title never reaches the host: the step refuses it as bad input.
		if _, err = r.prepare(oldE.Title, newE.ID); !errors.Is(err, steps.ErrBadInput) || !strings.Contains(err.Error(), "not a GRUB entry id path") {
			t.Errorf("old entry by title: want a bad-input refusal, got %v", err)
		}
		if got := r.sh("test ! -e /etc/default/grub.d/99-trial-boot.cfg && grub-editenv list"); strings.Contains(got, "next_entry=") {
			t.Errorf("a refused prepare must change nothing; grubenv: %s", got)
		}
	})

	t.Run("fallback drill: a real panic after sysctls load comes back on the old kernel", func(t *testing.T) {
		r.drill(t, oldE, newE)
	})

	t.Run("trial boot into the new kernel once, then red checks rolled back by a reboot into the default", func(t *testing.T) {
		r.trialBoot(t, oldE, newE)
		// A check the node fails: the window rolls back to the default.
		red, err := r.steps.Verify(r.ctx(2*time.Minute), node, steps.VerifyInput{TargetKernel: img.NewKernel, ExpectedSysctls: map[string]string{"vm.swappiness": "1"}})
		if red.Passed || len(red.Problems) == 0 {
			t.Fatalf("verify with a red check: %+v %v", red, err)
		}
		t.Logf("red check: %v", red.Problems)
		k := r.rebootAndWait("rollback: reboot into GRUB's default", func() { r.sh("systemd-run --on-active=3 --quiet systemctl reboot") })
		if k.Kernel != img.OldKernel {
			t.Fatalf("the rollback reboot came up on %s, want the default %s", k.Kernel, img.OldKernel)
		}
	})

	t.Run("a GRUB_DEFAULT GRUB cannot find boots entry 0", func(t *testing.T) {
		_, bare, _ := strings.Cut(oldE.ID, ">")
		r.sh(fmt.Sprintf("printf 'GRUB_DEFAULT=\"%s\"\\n' >/etc/default/grub.d/99-trial-boot.cfg && update-grub", bare))
		k := r.rebootAndWait("GRUB_DEFAULT without its submenu path", func() { r.sh("systemd-run --on-active=3 --quiet systemctl reboot") })
		if k.Kernel != img.NewKernel {
			t.Fatalf("GRUB booted %s; entry 0 is %s (the hazard the scripts refuse)", k.Kernel, img.NewKernel)
		}
		t.Logf("GRUB_DEFAULT=%q booted entry 0: %s, not the intended %s", bare, k.Kernel, img.OldKernel)
		// Back to what a trial boot leaves: the drop-in names the old entry
		// by its full path, and grub.cfg is regenerated from it.
		r.sh(fmt.Sprintf("printf 'GRUB_DEFAULT=\"%s\"\\n' >/etc/default/grub.d/99-trial-boot.cfg && update-grub", oldE.ID))
	})

	t.Run("promote: the second boot stays on the new kernel", func(t *testing.T) {
		r.promote(t)
	})

	t.Run("autoremove never the running kernel", func(t *testing.T) {
		r.sh("apt-mark auto linux-image-" + img.OldKernel + " linux-modules-nvidia-550-server-" + img.OldKernel + " >/dev/null")
		res, err := r.steps.Autoremove(r.ctx(10*time.Minute), node, steps.AutoremoveInput{Action: steps.AutoremoveRun, KeepKernel: img.OldKernel, SoakDone: true})
		if err != nil || res.RunningKernel != img.NewKernel {
			t.Fatalf("autoremove after the soak: %+v %v", res, err)
		}
		t.Logf("autoremove removed %v", res.Removals)
		if slices.ContainsFunc(res.Removals, func(p string) bool { return strings.HasSuffix(p, img.NewKernel) }) {
			t.Fatalf("autoremove removed the running kernel: %v", res.Removals)
		}
		if got := r.sh("dpkg-query -W -f='${db:Status-Abbrev}' linux-image-" + img.NewKernel); strings.TrimSpace(got) != "ii" {
			t.Fatalf("running kernel package status %q", got)
		}
	})
}

// install starts the install of the simulated plan, kills every SSH
// session on the VM right after the start (the install runs detached under
// systemd-run and must not notice) and waits for it to finish.
func (r *rig) install(t *testing.T, digest string) {
	t.Helper()
	installStart := time.Now()
	st, err := r.steps.Install(r.ctx(5*time.Minute), node, steps.InstallStart, round, digest)
	if err != nil {
		t.Fatalf("install start: %v", err)
	}
	if !strings.HasPrefix(st.Launcher, "systemd-run") {
		t.Errorf("launcher %q, want systemd-run (systemd is PID 1)", st.Launcher)
	}
	// Kill every SSH session process on the VM, this one included.
	_, err = r.pool.RunScript(r.ctx(time.Minute), node, []byte("pkill -KILL -f '^sshd: root' || true; sleep 30"), nil)
	if !errors.Is(err, host.ErrConnectionLost) {
		t.Logf("the killed session ended with %v", err)
	}
	var last steps.InstallState
	werr := r.vm.WaitFor(r.ctx(40*time.Minute), "the install to finish", func(ctx context.Context) error {
		s, err := r.steps.Install(ctx, node, steps.InstallStatus, round, "")
		last = s
		if err != nil {
			return err
		}
		if s.State != steps.InstallFinished {
			return fmt.Errorf("state %s (%d unpacked, %d set up)", s.State, s.Progress.Unpacked, s.Progress.SetUp)
		}
		return nil
	})
	if werr != nil {
		t.Fatalf("%v\nlog tail: %s", werr, last.LogTail)
	}
	if last.ExitCode == nil || *last.ExitCode != 0 {
		t.Fatalf("install exit %v\n%s", last.ExitCode, last.LogTail)
	}
	r.phase("install (detached, across the killed session)", time.Since(installStart))
	// Where the install's time went: dpkg's own log, one line per package
	// unpacked and configured, with the time.
	t.Logf("dpkg log of the install:\n%s", r.sh("grep -E ' (unpack|configure|trigproc) ' /var/log/dpkg.log | tail -n 40"))
	log := r.sh("cat /var/lib/mcp-patch/" + round + "/install.log")
	for _, want := range []string{"Setting up linux-image-" + r.img.NewKernel, "Generating grub configuration file", "Found linux image: /boot/vmlinuz-" + r.img.NewKernel} {
		if !strings.Contains(log, want) {
			t.Errorf("install log lacks %q (the kernel's postinst runs the real update-grub)", want)
		}
	}
}

// entries inspects the node after the install: the NVIDIA modules of the
// new kernel are there, and GRUB's menu has both kernels' normal entries.
func (r *rig) entries() (steps.Inspection, parse.GrubEntry, parse.GrubEntry) {
	t := r.t
	t.Helper()
	insp, err := r.steps.Inspect(r.ctx(5*time.Minute), node, steps.InspectInput{TargetKernel: r.img.NewKernel})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if !insp.TargetModules.Present {
		t.Errorf("NVIDIA modules for %s: %+v", r.img.NewKernel, insp.TargetModules)
	}
	return insp, entry(t, insp.Grub.Entries, r.img.OldKernel, false), entry(t, insp.Grub.Entries, r.img.NewKernel, false)
}

func (r *rig) prepare(oldID, newID string) (steps.TrialBoot, error) {
	return r.steps.TrialBootPrepare(r.ctx(5*time.Minute), node, steps.TrialBootInput{Round: round, OldEntry: oldID, NewEntry: newID})
}

// drill arms the fallback drill, prepares the trial boot and reboots: the
// new kernel panics for real, and GRUB's default brings the old one back.
func (r *rig) drill(t *testing.T, oldE, newE parse.GrubEntry) {
	t.Helper()
	if _, err := r.steps.FallbackDrill(r.ctx(2*time.Minute), node, steps.DrillArm, round, r.img.NewKernel); err != nil {
		t.Fatalf("arm: %v", err)
	}
	if _, err := r.prepare(oldE.ID, newE.ID); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	k := r.rebootAndWait("fallback drill: new kernel panics, GRUB default", func() {
		if _, err := r.steps.TrialBootReboot(r.ctx(2*time.Minute), node, round); err != nil {
			t.Fatalf("reboot: %v", err)
		}
	})
	st, err := r.steps.TrialBootStatus(r.ctx(2*time.Minute), node, round)
	if err != nil || st.Outcome != steps.OutcomeFellBack || k.Kernel != r.img.OldKernel {
		t.Fatalf("after the drill: outcome %q kernel %s (%v), want fell_back on %s", st.Outcome, k.Kernel, err, r.img.OldKernel)
	}
	ds, err := r.steps.FallbackDrill(r.ctx(2*time.Minute), node, steps.DrillStatus, round, "")
	if err != nil || !ds.Fired || ds.Armed {
		t.Errorf("drill status %+v (%v), want fired and no longer armed", ds, err)
	}
	if r.panics() == 0 {
		t.Errorf("the serial log shows no kernel panic")
	}
	if _, err := r.steps.FallbackDrill(r.ctx(2*time.Minute), node, steps.DrillDisarm, round, ""); err != nil {
		t.Fatalf("disarm: %v", err)
	}
}

// trialBoot prepares the trial boot and reboots once into the new kernel
// (grub-reboot): GRUB consumed the one-shot entry, and the node verifies.
func (r *rig) trialBoot(t *testing.T, oldE, newE parse.GrubEntry) {
	t.Helper()
	if _, err := r.prepare(oldE.ID, newE.ID); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	k := r.rebootAndWait("trial boot: grub-reboot new kernel", func() {
		if _, err := r.steps.TrialBootReboot(r.ctx(2*time.Minute), node, round); err != nil {
			t.Fatalf("reboot: %v", err)
		}
	})
	st, err := r.steps.TrialBootStatus(r.ctx(2*time.Minute), node, round)
	if err != nil || st.Outcome != steps.OutcomeNewKernel || k.Kernel != r.img.NewKernel || st.NextEntry != "" {
		t.Fatalf("after the trial boot: outcome %q kernel %s next_entry %q (%v)", st.Outcome, k.Kernel, st.NextEntry, err)
	}
	v, err := r.steps.Verify(r.ctx(2*time.Minute), node, steps.VerifyInput{TargetKernel: r.img.NewKernel, ExpectedSysctls: map[string]string{"kernel.panic": "10"}})
	if err != nil || !v.KernelOK {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// promote makes the new kernel GRUB's default and reboots: it stays.
func (r *rig) promote(t *testing.T) {
	t.Helper()
	// Held to the boot running now, as the round holds it to its trial boot.
	now, err := r.steps.Kernel(r.ctx(2*time.Minute), node)
	if err != nil {
		t.Fatalf("read the boot before promote: %v", err)
	}
	p, err := r.steps.Promote(r.ctx(5*time.Minute), node, steps.PromoteInput{Round: round, ExpectedKernel: r.img.NewKernel, ExpectedBootID: now.BootID})
	if err != nil || p.NextBootKernel != r.img.NewKernel {
		t.Fatalf("promote: %+v %v", p, err)
	}
	k := r.rebootAndWait("after promote", func() { r.sh("systemd-run --on-active=3 --quiet systemctl reboot") })
	if k.Kernel != r.img.NewKernel {
		t.Fatalf("after promote the node booted %s, want %s", k.Kernel, r.img.NewKernel)
	}
}
