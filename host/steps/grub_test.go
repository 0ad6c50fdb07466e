package steps

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/parse"
)

// TestTrialBootCycle runs prepare → reboot → (GRUB boots) → status →
// promote on a temp root with the real grub-reboot and grub-editenv and a
// real Ubuntu grub.cfg sample. update-grub and reboot are stand-ins (they
// would act on this machine).
func TestTrialBootCycle(t *testing.T) {
	r := newGrubRoot(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
	rebootLog := filepath.Join(t.TempDir(), "reboot.log")
	stubs := stubDir(t, map[string]string{
		"update-grub": updateGrubStub,
		"reboot":      "echo reboot >>" + rebootLog + "\n",
	})
	paths := merge(r.paths(), Paths{SystemdDir: filepath.Join(r.dir, "no-systemd")})
	s := newSteps(t, paths, stubs)
	ctx := ctxT(t)

	// The ids the Go parser computes are what the trial boot is given.
	menu := parse.ParseGrubCfg(mustRead(t, r.cfg))
	if _, ok := menu.Entry(r.oldEntry); !ok {
		t.Fatalf("parser has no %s", r.oldEntry)
	}
	if e, ok := menu.Entry(r.newEntry); !ok || e.Kernel != r.newKernel {
		t.Fatalf("parser: %+v", e)
	}

	tb, err := s.TrialBootPrepare(ctx, testNode, TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry})
	if err != nil {
		t.Fatal(err)
	}
	if tb.NextEntry != r.newEntry || tb.OldKernel != r.oldKernel || tb.NewKernel != r.newKernel || tb.PanicSeconds != 10 || !tb.GrubenvReliable {
		t.Errorf("prepare: %+v", tb)
	}
	// grub-reboot really wrote next_entry into the 1024-byte block.
	if got := r.grubenvList(t)["next_entry"]; got != r.newEntry {
		t.Errorf("grub-editenv list: next_entry=%q", got)
	}
	raw, _ := os.ReadFile(filepath.Join(r.grubDir, "grubenv"))
	env, err := parse.ParseGrubEnv(raw)
	if err != nil || env.Get("next_entry") != r.newEntry {
		t.Fatalf("parsed grubenv: %v %+v", err, env)
	}
	dropin := mustRead(t, r.dropin)
	for _, want := range []string{"GRUB_DEFAULT=\"" + r.oldEntry + "\"\n", "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT panic=10\"\n"} {
		if !strings.Contains(dropin, want) {
			t.Errorf("drop-in lacks %q:\n%s", want, dropin)
		}
	}
	// What GRUB boots: next_entry once (the new kernel), then the default,
	// which the drop-in made the old kernel.
	menu = parse.ParseGrubCfg(mustRead(t, r.cfg))
	if nb, err := parse.NextBoot(menu, env); err != nil || nb.Source != "next_entry" || nb.Entry.Kernel != r.newKernel {
		t.Errorf("next boot %+v %v", nb, err)
	}
	env.Vars["next_entry"] = ""
	if nb, err := parse.NextBoot(menu, env); err != nil || nb.Entry.Kernel != r.oldKernel {
		t.Errorf("fallback boot %+v %v", nb, err)
	}
	// Prepare is idempotent.
	if _, err := s.TrialBootPrepare(ctx, testNode, TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}); err != nil {
		t.Fatalf("prepare again: %v", err)
	}

	st, err := s.TrialBootStatus(ctx, testNode, "r1")
	if err != nil || st.Outcome != OutcomeNotRebooted || st.Rebooted {
		t.Fatalf("status before reboot: %v %+v", err, st)
	}
	rb, err := s.TrialBootReboot(ctx, testNode, "r1")
	if err != nil || rb.AlreadyRequested || !strings.Contains(rb.Method, "setsid") {
		t.Fatalf("reboot: %v %+v", err, rb)
	}
	waitFor(t, func() bool { b, _ := os.ReadFile(rebootLog); return string(b) == "reboot\n" })
	if rb, err = s.TrialBootReboot(ctx, testNode, "r1"); err != nil || !rb.AlreadyRequested {
		t.Fatalf("second reboot call: %v %+v", err, rb)
	}

	// GRUB boots next_entry and clears it; the kernel panics, panic=10
	// reboots, GRUB boots the default: the old kernel (the one running
	// here) with a new boot id.
	r.bootAs(t, "22222222-2222-2222-2222-222222222222")
	st, err = s.TrialBootStatus(ctx, testNode, "r1")
	if err != nil || st.Outcome != OutcomeFellBack || !st.Rebooted || st.NextEntry != "" {
		t.Fatalf("status after fallback: %v %+v", err, st)
	}
	if _, err := s.TrialBootReboot(ctx, testNode, "r1"); !errors.Is(err, ErrRefused) {
		t.Fatalf("reboot after a reboot: %v", err)
	}

	// A trial boot that worked: uname is a stand-in naming the new kernel.
	unameNew := stubDir(t, map[string]string{"uname": `if [ "${1:-}" = -r ]; then echo ` + r.newKernel + `; else exec /usr/bin/uname "$@"; fi` + "\n"})
	sNew := newSteps(t, paths, unameNew+":"+stubs)
	st, err = sNew.TrialBootStatus(ctx, testNode, "r1")
	if err != nil || st.Outcome != OutcomeNewKernel {
		t.Fatalf("status on the new kernel: %v %+v", err, st)
	}

	// Promote: the drop-in goes, update-grub restores GRUB_DEFAULT=0, whose
	// first entry boots the newest kernel.
	pr, err := sNew.Promote(ctx, testNode, PromoteInput{Round: "r1", ExpectedKernel: r.newKernel, ExpectedBootID: "22222222-2222-2222-2222-222222222222"})
	if err != nil || !pr.Promoted || !pr.DropinRemoved || pr.NextBootKernel != r.newKernel || pr.CfgDefault != "0" {
		t.Fatalf("promote: %v %+v", err, pr)
	}
	if _, err := os.Stat(r.dropin); !os.IsNotExist(err) {
		t.Error("drop-in still there")
	}
	// Promote again only re-checks.
	if pr, err = sNew.Promote(ctx, testNode, PromoteInput{Round: "r1", ExpectedKernel: r.newKernel}); err != nil || pr.DropinRemoved || !pr.Promoted {
		t.Fatalf("promote again: %v %+v", err, pr)
	}
	// Promoting a kernel GRUB would not boot is a check failure.
	pr, err = s.Promote(ctx, testNode, PromoteInput{Round: "r1", ExpectedKernel: r.oldKernel})
	var se *StepError
	if !errors.As(err, &se) || se.Status != StatusCheckFailed || pr.Promoted || pr.NextBootKernel != r.newKernel {
		t.Fatalf("promote old kernel: %v %+v", err, pr)
	}
}

// TestPromoteRefusesAnotherBoot: promote.sh reads the host before it
// changes anything. A host that fell back to the old kernel after its
// trial boot (whatever a record says of it), or that booted again since
// the boot it was checked on, is refused: the drop-in, grub.cfg and
// grubenv stay byte for byte, so the old kernel stays the default.
func TestPromoteRefusesAnotherBoot(t *testing.T) {
	const trialBoot = "22222222-2222-2222-2222-222222222222"
	unameNew := func(r *grubRoot) string {
		return `if [ "${1:-}" = -r ]; then echo ` + r.newKernel + `; else exec /usr/bin/uname "$@"; fi` + "\n"
	}
	tests := []struct {
		name string
		// onNew: uname -r names the trial kernel; bootID is the boot
		// running when promote is called.
		onNew  bool
		bootID string
		in     func(r *grubRoot) PromoteInput
		want   string
	}{
		{name: "fell back to the old kernel", bootID: trialBoot,
			in: func(r *grubRoot) PromoteInput {
				return PromoteInput{Round: "r1", ExpectedKernel: r.newKernel, ExpectedBootID: trialBoot}
			},
			want: "the running kernel is "},
		{name: "fell back, no boot id given", bootID: trialBoot,
			in:   func(r *grubRoot) PromoteInput { return PromoteInput{Round: "r1", ExpectedKernel: r.newKernel} },
			want: "the running kernel is "},
		{name: "booted again since its checks", onNew: true, bootID: "33333333-3333-3333-3333-333333333333",
			in: func(r *grubRoot) PromoteInput {
				return PromoteInput{Round: "r1", ExpectedKernel: r.newKernel, ExpectedBootID: trialBoot}
			},
			want: "the boot id is 33333333-3333-3333-3333-333333333333, not " + trialBoot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newGrubRoot(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
			stubs := stubDir(t, map[string]string{"update-grub": updateGrubStub, "reboot": "true\n"})
			paths := merge(r.paths(), Paths{SystemdDir: filepath.Join(r.dir, "no-systemd")})
			ctx := ctxT(t)
			if _, err := newSteps(t, paths, stubs).TrialBootPrepare(ctx, testNode, TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}); err != nil {
				t.Fatal(err)
			}
			r.bootAs(t, tc.bootID)
			path := stubs
			if tc.onNew {
				path = stubDir(t, map[string]string{"uname": unameNew(r)}) + ":" + stubs
			}
			before := map[string]string{"drop-in": mustRead(t, r.dropin), "grub.cfg": mustRead(t, r.cfg), "grubenv": mustRead(t, filepath.Join(r.grubDir, "grubenv"))}

			pr, err := newSteps(t, paths, path).Promote(ctx, testNode, tc.in(r))
			var se *StepError
			if !errors.Is(err, ErrRefused) || !errors.As(err, &se) || se.ExitCode != 3 || !strings.Contains(se.Reason, tc.want) {
				t.Fatalf("promote: %v, want refused with %q", err, tc.want)
			}
			if pr.Promoted || pr.DropinRemoved || pr.BootID != tc.bootID {
				t.Errorf("promote result: %+v", pr)
			}
			after := map[string]string{"drop-in": mustRead(t, r.dropin), "grub.cfg": mustRead(t, r.cfg), "grubenv": mustRead(t, filepath.Join(r.grubDir, "grubenv"))}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("a refused promote changed the host (-before +after):\n%s", diff)
			}
			if nb := nextBootKernel(t, r); nb != r.oldKernel {
				t.Errorf("GRUB boots %s next, want the old kernel %s", nb, r.oldKernel)
			}
		})
	}
}

// nextBootKernel is the kernel GRUB boots next on r, as the Go parser
// reads grub.cfg and grubenv.
func nextBootKernel(t *testing.T, r *grubRoot) string {
	t.Helper()
	env, err := parse.ParseGrubEnv([]byte(mustRead(t, filepath.Join(r.grubDir, "grubenv"))))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := parse.NextBoot(parse.ParseGrubCfg(mustRead(t, r.cfg)), env)
	if err != nil {
		t.Fatal(err)
	}
	return nb.Entry.Kernel
}

func TestTrialBootRefusals(t *testing.T) {
	mdraid := stubDir(t, map[string]string{"findmnt": "echo '/dev/md0 ext4'\n", "update-grub": updateGrubStub})
	btrfs := stubDir(t, map[string]string{"findmnt": "echo '/dev/sda2 btrfs'\n", "update-grub": updateGrubStub})
	lvm := stubDir(t, map[string]string{"findmnt": "echo '/dev/mapper/vg-boot ext4'\n", "update-grub": updateGrubStub})
	plain := stubDir(t, map[string]string{"update-grub": updateGrubStub})
	tests := []struct {
		name    string
		setup   func(r *grubRoot) TrialBootInput
		stubs   string
		wantErr error
		reason  string
	}{
		{"kernel.panic is 0", func(r *grubRoot) TrialBootInput {
			writeFile(t, filepath.Join(r.procSys, "kernel", "panic"), "0\n", 0o644)
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}
		}, plain, ErrRefused, "kernel.panic is '0'"},
		{"/boot/grub on mdraid", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}
		}, mdraid, ErrRefused, "is on mdraid (/dev/md0)"},
		{"/boot/grub on btrfs", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}
		}, btrfs, ErrRefused, "is on btrfs"},
		{"/boot/grub on LVM", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}
		}, lvm, ErrRefused, "device-mapper"},
		{"mdraid allowed explicitly", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry, AllowUnreliableGrubenv: true}
		}, mdraid, nil, ""},
		{"new entry not in grub.cfg", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: strings.Replace(r.newEntry, "1028", "1099", 1)}
		}, plain, ErrRefused, "is not an entry of"},
		{"entry without submenu path", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry[strings.Index(r.newEntry, ">")+1:]}
		}, plain, ErrRefused, "is not an entry of"},
		{"old entry is not the running kernel", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.newEntry, NewEntry: r.oldEntry}
		}, plain, ErrRefused, "not the running kernel"},
		{"new entry is a recovery entry", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: replaceLast(r.newEntry, "-advanced-", "-recovery-")}
		}, plain, ErrRefused, "is a recovery entry"},
		{"old entry is a recovery entry", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: replaceLast(r.oldEntry, "-advanced-", "-recovery-"), NewEntry: r.newEntry}
		}, plain, ErrRefused, "is a recovery entry"},
		{"old entry by its title", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: "Ubuntu", NewEntry: r.newEntry}
		}, plain, ErrRefused, "is not an entry of"},
		{"a later drop-in sets GRUB_DEFAULT", func(r *grubRoot) TrialBootInput {
			writeFile(t, filepath.Join(filepath.Dir(r.dropin), "99-zz-local.cfg"), "GRUB_DEFAULT=0\n", 0o644)
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}
		}, plain, ErrRefused, "sets GRUB_DEFAULT and is read after"},
		{"shell in an entry id", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: "x';reboot;'"}
		}, plain, ErrBadInput, ""},
		{"same entry twice", func(r *grubRoot) TrialBootInput {
			return TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.oldEntry}
		}, plain, ErrBadInput, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newGrubRoot(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
			before := mustRead(t, filepath.Join(r.grubDir, "grubenv"))
			cfgBefore := mustRead(t, r.cfg)
			s := newSteps(t, merge(r.paths(), Paths{SystemdDir: filepath.Join(r.dir, "none")}), tc.stubs)
			_, err := s.TrialBootPrepare(ctxT(t), testNode, tc.setup(r))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("reason %q lacks %q", err, tc.reason)
			}
			if err != nil {
				// A refusal changes nothing.
				if mustRead(t, filepath.Join(r.grubDir, "grubenv")) != before || mustRead(t, r.cfg) != cfgBefore {
					t.Error("grubenv or grub.cfg changed")
				}
				if _, serr := os.Stat(r.dropin); !os.IsNotExist(serr) {
					t.Error("drop-in written")
				}
			}
		})
	}
}

// TestTrialBootRefusesLVMSample: the real Ubuntu 14.04 grub.cfg with /boot
// on LVM carries grub-mkconfig's own "GRUB lacks write support" note.
func TestTrialBootRefusesLVMSample(t *testing.T) {
	r := newGrubRoot(t, "grub/grub.cfg_ubuntu1404_root-and-boot-on-LVM_recordfail-disabled_forum-bootinfo.cfg")
	s := newSteps(t, merge(r.paths(), Paths{SystemdDir: "/nonexistent"}), stubDir(t, map[string]string{"update-grub": updateGrubStub}))
	old := "gnulinux-advanced-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5>gnulinux-4.2.0-35-generic-advanced-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5"
	// The sample's only kernel plays the running one; its recovery entry is
	// edited to boot another kernel so the pair is a valid trial.
	cfg := strings.ReplaceAll(mustRead(t, r.cfg), "vmlinuz-4.2.0-35-generic root=/dev/mapper/root-root ro recovery", "vmlinuz-4.2.0-36-generic root=/dev/mapper/root-root ro recovery")
	cfg = strings.ReplaceAll(cfg, "4.2.0-35-generic", r.oldKernel)
	cfg = strings.ReplaceAll(cfg, " (recovery mode)", "")
	writeFile(t, r.cfg, cfg, 0o644)
	old = strings.ReplaceAll(old, "4.2.0-35-generic", r.oldKernel)
	_, err := s.TrialBootPrepare(ctxT(t), testNode, TrialBootInput{Round: "r1", OldEntry: old, NewEntry: replaceLast(old, "-advanced-", "-recovery-")})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "GRUB lacks write support for lvm") {
		t.Fatalf("got %v", err)
	}
}

// TestInspectOnFixtures runs inspect.sh against a temp root built from the
// real samples, with the real apt-get/dpkg-query on the apt lab.
// inspectFixtureSteps builds a temp root from the real samples (GRUB,
// reboot-required, the NVIDIA driver's version, DKMS modules for the
// target kernel) with the real apt-get/dpkg-query on the apt lab.
func inspectFixtureSteps(t *testing.T) (*Steps, *grubRoot) {
	r := newGrubRoot(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
	lab := newAptLab(t, `Unattended-Upgrade::Package-Blacklist { "linux-"; "nvidia-"; };`)
	// grub-reboot (the real one) sets a one-shot entry to read back.
	if out, err := execOut("grub-reboot", "--boot-directory="+filepath.Dir(r.grubDir), r.newEntry); err != nil {
		t.Fatalf("grub-reboot: %v\n%s", err, out)
	}
	root := r.dir
	writeFile(t, filepath.Join(root, "proc", "uptime"), "12345.67 99999.00\n", 0o644)
	writeFile(t, filepath.Join(root, "run", "reboot-required"), "*** System restart required ***\n", 0o644)
	writeFile(t, filepath.Join(root, "run", "reboot-required.pkgs"), readFixture(t, "livepatch/reboot-required.pkgs_ubuntu1604_kernel-dup-linux-base_UNATTRIBUTED.txt"), 0o644)
	writeFile(t, filepath.Join(root, "proc", "driver", "nvidia", "version"),
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:59 UTC 2024\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n", 0o644)
	writeFile(t, filepath.Join(root, "lib", "modules", "9.9.9-1-generic", "updates", "dkms", "nvidia.ko.zst"), "", 0o644)
	writeFile(t, filepath.Join(root, "lib", "modules", "9.9.9-1-generic", "updates", "dkms", "nvidia-uvm.ko.zst"), "", 0o644)
	paths := merge(r.paths(), lab.paths(), Paths{
		ProcUptime: filepath.Join(root, "proc", "uptime"), RebootRequired: filepath.Join(root, "run", "reboot-required"),
		ProcDriverNvidia: filepath.Join(root, "proc", "driver", "nvidia"), ModulesDir: filepath.Join(root, "lib", "modules"),
		ProcMdstat: filepath.Join(root, "proc", "mdstat"),
	})
	return newSteps(t, paths, ""), r
}

// TestPreflightIsSimulateAndInspect: preflight.sh, in one session, finds
// what simulate.sh and inspect.sh (for the plan's target kernel) find.
func TestPreflightIsSimulateAndInspect(t *testing.T) {
	s, _ := inspectFixtureSteps(t)
	sim, ins, err := s.Preflight(ctxT(t), testNode)
	if err != nil {
		t.Fatal(err)
	}
	wantSim, err := s.Simulate(ctxT(t), testNode)
	if err != nil {
		t.Fatal(err)
	}
	if sim.Boot.FreeKB == nil || wantSim.Boot.FreeKB == nil {
		t.Fatalf("free space on /boot unknown: %+v %+v", sim.Boot, wantSim.Boot)
	}
	sim.Boot.FreeKB = wantSim.Boot.FreeKB // the disk of this machine moves between the two runs
	if d := cmp.Diff(wantSim, sim); d != "" {
		t.Errorf("simulation (-simulate.sh +preflight.sh)\n%s", d)
	}
	if sim.Plan.TargetKernel != "9.9.9-1-generic" {
		t.Fatalf("target kernel %q", sim.Plan.TargetKernel)
	}
	wantIns, err := s.Inspect(ctxT(t), testNode, InspectInput{TargetKernel: sim.Plan.TargetKernel})
	if err != nil {
		t.Fatal(err)
	}
	ins.Boot.FreeKB = wantIns.Boot.FreeKB // the disk of this machine moves between the two runs
	if d := cmp.Diff(wantIns, ins); d != "" {
		t.Errorf("inspection (-inspect.sh +preflight.sh)\n%s", d)
	}
	if !ins.TargetModules.Present || !ins.TargetModules.DKMS {
		t.Errorf("target modules %+v", ins.TargetModules)
	}
}

// TestInspectReadsKernelPanicFromProcfs: kernel.panic comes from the
// kernel's own integer sysctl file, which answers only a read at offset 0
// (a shell's read builtin, one byte per read, got the first digit). The
// fixture's kernel/panic is a link to a real integer sysctl of this machine
// with more than one digit.
func TestInspectReadsKernelPanicFromProcfs(t *testing.T) {
	const procFile = "/proc/sys/kernel/pid_max"
	b, err := os.ReadFile(procFile)
	if err != nil {
		t.Fatalf("this test needs procfs: %v", err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || want < 10 {
		t.Fatalf("%s is %q: need an integer of two digits or more", procFile, b)
	}
	s, r := inspectFixtureSteps(t)
	link := filepath.Join(r.procSys, "kernel", "panic")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(procFile, link); err != nil {
		t.Fatal(err)
	}
	ins, err := s.Inspect(ctxT(t), testNode, InspectInput{TargetKernel: "9.9.9-1-generic"})
	if err != nil {
		t.Fatal(err)
	}
	if ins.KernelPanic != want {
		t.Errorf("kernel.panic read from %s as %d, want %d", procFile, ins.KernelPanic, want)
	}
}

func TestInspectOnFixtures(t *testing.T) {
	s, r := inspectFixtureSteps(t)
	ins, err := s.Inspect(ctxT(t), testNode, InspectInput{TargetKernel: "9.9.9-1-generic"})
	if err != nil {
		t.Fatal(err)
	}
	running := runningKernel(t)
	if ins.Kernel != running || ins.BootID != "11111111-1111-1111-1111-111111111111" || ins.UptimeSeconds != 12345 || ins.KernelPanic != 10 {
		t.Errorf("basics: %+v", ins)
	}
	if d := cmp.Diff([]InstalledKernel{{Release: running, Package: "linux-image-" + running, Version: "1.0", Status: "ii", Running: true}}, ins.InstalledKernels); d != "" {
		t.Errorf("installed kernels (-want +got)\n%s", d)
	}
	if d := cmp.Diff([]string{"kubelet"}, ins.Holds); d != "" {
		t.Errorf("holds (-want +got)\n%s", d)
	}
	if ins.Pending.TargetKernel != "9.9.9-1-generic" || len(ins.Pending.Removals) != 1 {
		t.Errorf("pending %+v", ins.Pending)
	}
	g := ins.Grub
	if len(g.Entries) != 5 || g.CfgDefault != "0" || !g.HonoursNextEntry || !g.EnvWritableAtBoot || g.Env["next_entry"] != r.newEntry {
		t.Errorf("grub %+v", g)
	}
	if g.NextBoot.Source != "next_entry" || g.NextBoot.Entry.Kernel != r.newKernel || g.NextBootError != "" {
		t.Errorf("next boot %+v %s", g.NextBoot, g.NextBootError)
	}
	if g.Defaults.Default != "0" || !strings.Contains(g.Defaults.CmdlineDefault, "console=ttyS0") {
		t.Errorf("defaults %+v", g.Defaults)
	}
	if d := cmp.Diff([]string{"linux-", "nvidia-"}, ins.UnattendedBlacklist); d != "" || !ins.BlacklistKernel || !ins.BlacklistNvidia {
		t.Errorf("blacklist %v (-want +got)\n%s", ins.UnattendedBlacklist, d)
	}
	if !ins.RebootRequired || len(ins.RebootRequiredPkgs) != 2 {
		t.Errorf("reboot required %v %v", ins.RebootRequired, ins.RebootRequiredPkgs)
	}
	if ins.NvidiaDriverVersion != "535.161.08" {
		t.Errorf("driver %q", ins.NvidiaDriverVersion)
	}
	want := NvidiaModules{Kernel: "9.9.9-1-generic", Packages: []string{}, Files: []string{"updates/dkms/nvidia-uvm.ko.zst", "updates/dkms/nvidia.ko.zst"}, DKMS: true, Present: true}
	if d := cmp.Diff(want, ins.TargetModules); d != "" {
		t.Errorf("modules (-want +got)\n%s", d)
	}
	if ins.Livepatch.Present {
		t.Error("livepatch present on this machine?")
	}
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func replaceLast(s, old, repl string) string {
	i := strings.LastIndex(s, old)
	if i < 0 {
		return s
	}
	return s[:i] + repl + s[i+len(old):]
}

// TestGrubRebootTakesParsedIDs: for every entry of every real grub.cfg
// sample, the id path the parser computes goes through the real
// grub-reboot into a real grubenv block unchanged (grub-editenv list and
// parse.ParseGrubEnv read it back), and the parser resolves it to the same
// entry, as GRUB's header would when it boots next_entry.
func TestGrubRebootTakesParsedIDs(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixturesDir, "grub", "grub.cfg_*"))
	if len(files) < 5 {
		t.Fatalf("samples: %v", files)
	}
	boot := t.TempDir()
	grubenv := filepath.Join(boot, "grub", "grubenv")
	writeFile(t, grubenv, readFixture(t, "grub/grubenv_empty-ubuntu2204-aws"), 0o644)
	n := 0
	for _, f := range files {
		menu := parse.ParseGrubCfg(mustRead(t, f))
		for _, e := range menu.Entries {
			if out, err := execOut("grub-reboot", "--boot-directory="+boot, e.ID); err != nil {
				t.Fatalf("grub-reboot %q: %v\n%s", e.ID, err, out)
			}
			out, err := execOut("grub-editenv", grubenv, "list")
			if err != nil || !strings.Contains(out, "next_entry="+e.ID+"\n") {
				t.Fatalf("grub-editenv list after %q: %v\n%s", e.ID, err, out)
			}
			env, err := parse.ParseGrubEnv([]byte(mustRead(t, grubenv)))
			if err != nil || env.Get("next_entry") != e.ID {
				t.Fatalf("parsed next_entry %q: %v", env.Get("next_entry"), err)
			}
			nb, err := parse.NextBoot(menu, env)
			if err != nil || nb.Entry.IndexPath != e.IndexPath {
				// os-prober samples repeat ids; GRUB then takes the first.
				if first, _ := menu.Entry(e.ID); err != nil || nb.Entry.IndexPath != first.IndexPath {
					t.Fatalf("%s: next boot %+v %v, want %s", filepath.Base(f), nb.Entry, err, e.IndexPath)
				}
			}
			n++
		}
	}
	if out, err := execOut("grub-editenv", grubenv, "unset", "next_entry"); err != nil {
		t.Fatal(out)
	}
	if env, _ := parse.ParseGrubEnv([]byte(mustRead(t, grubenv))); env.Get("next_entry") != "" || env.Size != parse.GrubEnvSize {
		t.Errorf("after unset: %+v", env)
	}
	t.Logf("%d entry ids through grub-reboot", n)
}

// TestRollbackCycle: a trial kernel that booted but is red goes back to the
// old kernel (drop-in kept, no one-shot entry, a new boot id and the old
// uname); a promoted node gets its default set back to the old entry first.
// Real grub-editenv and a real Ubuntu grub.cfg; update-grub and reboot are
// stand-ins.
func TestRollbackCycle(t *testing.T) {
	r := newGrubRoot(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
	rebootLog := filepath.Join(t.TempDir(), "reboot.log")
	stubs := stubDir(t, map[string]string{
		"update-grub": updateGrubStub,
		"reboot":      "echo reboot >>" + rebootLog + "\n",
	})
	paths := merge(r.paths(), Paths{SystemdDir: filepath.Join(r.dir, "no-systemd")})
	s := newSteps(t, paths, stubs)
	unameNew := stubDir(t, map[string]string{"uname": `if [ "${1:-}" = -r ]; then echo ` + r.newKernel + `; else exec /usr/bin/uname "$@"; fi` + "\n"})
	onNew := newSteps(t, paths, unameNew+":"+stubs)
	ctx := ctxT(t)
	in := RollbackInput{Round: "r1", OldEntry: r.oldEntry, OldKernel: r.oldKernel}

	// The trial boot of the new kernel worked (it runs), then verify was red.
	if _, err := s.TrialBootPrepare(ctx, testNode, TrialBootInput{Round: "r1", OldEntry: r.oldEntry, NewEntry: r.newEntry}); err != nil {
		t.Fatal(err)
	}
	// Still on the old kernel: nothing to roll back.
	if _, err := s.RollbackPrepare(ctx, testNode, in); !errors.Is(err, ErrRefused) {
		t.Fatalf("rollback on the old kernel: %v", err)
	}
	// GRUB took the one-shot entry; suppose it was still set (a second
	// grub-reboot): prepare clears it so the default (old) boots.
	rb, err := onNew.RollbackPrepare(ctx, testNode, in)
	if err != nil || rb.From != "trial" || rb.DropinWritten || rb.NextEntry != "" {
		t.Fatalf("prepare on the trial kernel: %v %+v", err, rb)
	}
	if got := r.grubenvList(t)["next_entry"]; got != "" {
		t.Errorf("next_entry %q left in grubenv", got)
	}
	if !strings.Contains(mustRead(t, r.dropin), `GRUB_DEFAULT="`+r.oldEntry+`"`) {
		t.Error("the trial-boot drop-in must stay")
	}
	if !strings.Contains(mustRead(t, r.cfg), `set default="`+r.oldEntry+`"`) {
		t.Error("grub.cfg does not default to the old entry")
	}
	st, err := onNew.RollbackStatus(ctx, testNode, "r1")
	if err != nil || st.Outcome != OutcomeNotRebooted {
		t.Fatalf("status before reboot: %v %+v", err, st)
	}
	if rb, err = onNew.RollbackReboot(ctx, testNode, "r1"); err != nil || rb.AlreadyRequested {
		t.Fatalf("reboot: %v %+v", err, rb)
	}
	waitFor(t, func() bool { b, _ := os.ReadFile(rebootLog); return string(b) == "reboot\n" })
	// Booted the default: the old kernel (the real uname here), a new boot id.
	r.bootAs(t, "33333333-3333-3333-3333-333333333333")
	st, err = s.RollbackStatus(ctx, testNode, "r1")
	if err != nil || st.Outcome != OutcomeRolledBack || !st.Rebooted || !st.DropinPresent || st.FromKernel != r.newKernel {
		t.Fatalf("status after the rollback: %v %+v", err, st)
	}

	// A promoted node whose gate turned red: the drop-in is gone and GRUB
	// defaults to the new kernel; rollback sets the default back first.
	if _, err := onNew.Promote(ctx, testNode, PromoteInput{Round: "r2", ExpectedKernel: r.newKernel}); err != nil {
		t.Fatal(err)
	}
	rb, err = onNew.RollbackPrepare(ctx, testNode, RollbackInput{Round: "r2", OldEntry: r.oldEntry, OldKernel: r.oldKernel})
	if err != nil || rb.From != "promoted" || !rb.DropinWritten {
		t.Fatalf("prepare on a promoted node: %v %+v", err, rb)
	}
	if !strings.Contains(mustRead(t, r.cfg), `set default="`+r.oldEntry+`"`) {
		t.Error("grub.cfg does not default to the old entry after the rollback of a promoted node")
	}
	menu := parse.ParseGrubCfg(mustRead(t, r.cfg))
	raw, _ := os.ReadFile(filepath.Join(r.grubDir, "grubenv"))
	env, err := parse.ParseGrubEnv(raw)
	if err != nil {
		t.Fatal(err)
	}
	if nb, err := parse.NextBoot(menu, env); err != nil || nb.Entry.Kernel != r.oldKernel {
		t.Fatalf("next boot after rollback prepare: %+v %v", nb, err)
	}
	// Bad input changes nothing.
	if _, err := s.RollbackPrepare(ctx, testNode, RollbackInput{Round: "r3", OldEntry: "a'b", OldKernel: r.oldKernel}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("bad entry: %v", err)
	}
}
