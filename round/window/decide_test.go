package window_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func inspection(mod func(*steps.Inspection)) steps.Inspection {
	insp := steps.Inspection{Kernel: running, BootID: "b1", KernelPanic: 10}
	insp.Grub.EnvWritableAtBoot = true
	insp.Grub.Entries = []parse.GrubEntry{
		{ID: "gnulinux-" + running + "-top", Kernel: running},
		{ID: fakes.Entry(running), Kernel: running, Submenu: "gnulinux-advanced-u"},
		{ID: fakes.Entry(running) + "-rec", Kernel: running, Submenu: "gnulinux-advanced-u", Recovery: true},
		{ID: fakes.Entry(target), Kernel: target, Submenu: "gnulinux-advanced-u"},
	}
	insp.TargetModules.Present = true
	if mod != nil {
		mod(&insp)
	}
	return insp
}

func TestDecideTrialBoot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*steps.Inspection)
		gpu   bool
		stop  string // a reason that must be named; "" = a plan
		entry string
	}{
		{name: "submenu entries picked", gpu: true, entry: fakes.Entry(target)},
		{name: "no new entry", mod: func(i *steps.Inspection) { i.Grub.Entries = i.Grub.Entries[:3] }, stop: "no GRUB entry boots the new kernel"},
		{name: "grubenv on mdraid", mod: func(i *steps.Inspection) { i.Grub.EnvWritableAtBoot = false; i.Grub.Reasons = []string{"/boot on md0"} }, stop: "md0"},
		{name: "kernel.panic 0", mod: func(i *steps.Inspection) { i.KernelPanic = 0 }, stop: "kernel.panic is 0"},
		{name: "gpu without modules", gpu: true, mod: func(i *steps.Inspection) { i.TargetModules.Present = false }, stop: "NVIDIA kernel modules"},
		{name: "cpu node without modules is fine", mod: func(i *steps.Inspection) { i.TargetModules.Present = false }, entry: fakes.Entry(target)},
		{name: "already on target", mod: func(i *steps.Inspection) { i.Kernel = target }, stop: "already runs the target kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := window.DecideTrialBoot(node, inspection(tc.mod), target, tc.gpu, 10)
			if tc.stop != "" {
				var st *window.Stop
				if !errors.As(err, &st) || st.Step != round.StepTrialBoot || !strings.Contains(st.Error(), tc.stop) {
					t.Fatalf("got %v, want a stop naming %q", err, tc.stop)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := window.TrialBootPlan{Node: node, RunningKernel: running, TargetKernel: target, OldEntry: fakes.Entry(running),
				NewEntry: tc.entry, PanicSeconds: 10, BootID: "b1"}
			if diff := cmp.Diff(want, p); diff != "" {
				t.Fatal(diff)
			}
		})
	}
	if _, err := window.DecideTrialBoot(node, inspection(nil), "", false, 10); !isRefusal(err) {
		t.Fatalf("no target: %v", err)
	}
}

func TestTrialBootDone(t *testing.T) {
	done := &round.StepRun{State: round.Done}
	for _, tc := range []struct {
		name    string
		run     *round.StepRun
		running string
		refused bool
	}{
		{"never started", nil, running, false},
		{"done, on the new kernel: called again", done, target, true},
		{"done, back on the old kernel (a rollback)", done, running, false},
		{"in flight", &round.StepRun{State: round.InFlight}, target, false},
		{"failed", &round.StepRun{State: round.Failed}, target, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := window.TrialBootDone(node, tc.run, tc.running, target)
			if got := isRefusal(err); got != tc.refused || (!tc.refused && err != nil) {
				t.Fatalf("TrialBootDone = %v, want refused %v", err, tc.refused)
			}
		})
	}
}

func isRefusal(err error) bool {
	var r *window.Refusal
	return errors.As(err, &r)
}

func TestDecidePackage(t *testing.T) {
	sim := func(d string, blockers ...string) steps.Simulation {
		var s steps.Simulation
		s.Plan.Digest, s.Plan.Blockers, s.Plan.TargetKernel = d, blockers, target
		s.Plan.Packages = []steps.PlannedPackage{{Name: "linux-image-" + target, Action: "install", NewVersion: "51", Class: "kernel"}}
		return s
	}
	rec := window.Simulated{PackageDigest: digest, RunningKernel: running}
	for _, tc := range []struct {
		name   string
		sim    steps.Simulation
		rec    window.Simulated
		refuse string
	}{
		{name: "bound", sim: sim(digest), rec: rec},
		{name: "never simulated", sim: sim(digest), rec: window.Simulated{}, refuse: "no simulated package plan"},
		{name: "drifted", sim: sim("sha256:new"), rec: rec, refuse: "differs from the simulated plan"},
		{name: "unsafe now", sim: sim(digest, "would remove kubelet"), rec: rec, refuse: "would remove kubelet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := window.DecidePackage(node, tc.sim, tc.rec)
			if tc.refuse != "" {
				if !isRefusal(err) || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("got %v, want refusal %q", err, tc.refuse)
				}
				return
			}
			if err != nil || p.Digest() != digest || p.Lines[0] != "install linux-image-"+target+" - -> 51 [kernel]" {
				t.Fatalf("%+v %v", p, err)
			}
		})
	}
}

func TestDecideDrain(t *testing.T) {
	pv := drain.Evictions{Node: node, Digest: "sha256:pv", Evict: []drain.PodRef{{Namespace: "ml", Name: "t-0", OwnerKind: "StatefulSet", OwnerName: "t"}}}
	p, err := window.DecideDrain(node, pv)
	if err != nil || p.Digest() != "sha256:pv" || !strings.Contains(strings.Join(p.Summary(), "\n"), "evict ml/t-0 (statefulset t)") {
		t.Fatalf("%+v %v", p, err)
	}
	pv.Blockers = []string{"ml/t-0: no controller"}
	var st *window.Stop
	if _, err := window.DecideDrain(node, pv); !errors.As(err, &st) || st.Step != round.StepDrain {
		t.Fatalf("blocked drain: %v", err)
	}
}

func TestDecideFallbackDrill(t *testing.T) {
	if _, err := window.DecideFallbackDrill(node, inspection(nil), target, false, false, 10); !isRefusal(err) {
		t.Fatal("drill on a non-canary")
	}
	if _, err := window.DecideFallbackDrill(node, inspection(nil), target, true, true, 10); !isRefusal(err) {
		t.Fatal("drill again after it passed")
	}
	if _, err := window.DecideFallbackDrill(node, inspection(func(i *steps.Inspection) { i.KernelPanic = 0 }), target, true, false, 10); !isRefusal(err) {
		t.Fatal("drill with kernel.panic 0")
	}
	p, err := window.DecideFallbackDrill(node, inspection(nil), target, true, false, 10)
	if err != nil || p.NewEntry != fakes.Entry(target) || p.Digest() == "" || len(p.Summary()) != 2 {
		t.Fatalf("%+v %v", p, err)
	}
}

func TestDecideAutoremove(t *testing.T) {
	if _, err := window.DecideAutoremove(nil, []string{"gpu-1: unreachable"}); !isRefusal(err) {
		t.Fatal("autoremove with a node down")
	}
	a, err := window.DecideAutoremove([]steps.AutoremoveResult{{Node: "a", RunningKernel: running, Removals: []string{"linux-image-old"}}, {Node: "b", RunningKernel: running}}, nil)
	if err != nil || a.Target() != window.FleetTarget || !strings.Contains(strings.Join(a.Summary(), "\n"), "b (running "+running+"): nothing to remove") {
		t.Fatalf("%+v %v", a, err)
	}
	b, _ := window.DecideAutoremove([]steps.AutoremoveResult{{Node: "a", RunningKernel: running}}, nil)
	if a.Digest() == b.Digest() {
		t.Fatal("different removals, same digest")
	}
}

func TestDecidePromote(t *testing.T) {
	tp := window.TrialBootPlan{Node: node, RunningKernel: running, TargetKernel: target, OldEntry: "o", NewEntry: "n", PanicSeconds: 10}
	raw, _ := json.Marshal(tp)
	const trialBoot = "boot-2"
	onBoot := func(state round.StepState, kernel, id string, plan ...json.RawMessage) *round.StepRun {
		a := round.Attempt{Outcome: round.OutcomeDone, Kernel: kernel, BootID: id}
		if state == round.Failed {
			a.Outcome = round.OutcomeFailed
		}
		if len(plan) > 0 {
			a.PlanDigest, a.Plan = tp.Digest(), plan[0]
		}
		return &round.StepRun{State: state, Attempts: []round.Attempt{a}}
	}
	trial := onBoot(round.Done, target, trialBoot, raw)
	verified := onBoot(round.Done, target, trialBoot)
	green := window.PromoteFacts{Node: node, Trial: trial, Verify: verified, GPU: verified, GPUServer: true, RecordedTarget: "6.8.0-99-generic",
		Now: window.Boot{Kernel: target, ID: trialBoot}}
	with := func(change func(f *window.PromoteFacts)) window.PromoteFacts {
		f := green
		change(&f)
		return f
	}
	for _, tc := range []struct {
		name  string
		facts window.PromoteFacts
		want  window.PromotePlan
		// refuse, when set, is a phrase of the refusal.
		refuse string
	}{
		{name: "from the approved trial boot, on its boot", facts: green, want: window.PromotePlan{Node: node, Kernel: target, NewEntry: "n", BootID: trialBoot}},
		{name: "no trial boot", facts: with(func(f *window.PromoteFacts) { f.Trial = nil }), refuse: "no green trial boot"},
		{name: "trial boot failed", facts: with(func(f *window.PromoteFacts) { f.Trial = onBoot(round.Failed, running, "boot-3", raw) }), refuse: "no green trial boot"},
		{name: "journal without a plan", facts: with(func(f *window.PromoteFacts) {
			f.Trial, f.RecordedTarget = onBoot(round.Done, target, trialBoot), target
		}), want: window.PromotePlan{Node: node, Kernel: target, BootID: trialBoot}},
		{name: "host fell back to the old kernel", facts: with(func(f *window.PromoteFacts) { f.Now = window.Boot{Kernel: running, ID: "boot-3"} }),
			refuse: "runs " + running + " (boot id boot-3) now, not the trial kernel " + target},
		{name: "host booted again since", facts: with(func(f *window.PromoteFacts) { f.Now.ID = "boot-3" }),
			refuse: "runs boot id boot-3 now, not boot-2"},
		{name: "trial boot recorded no boot", facts: with(func(f *window.PromoteFacts) { f.Trial = onBoot(round.Done, "", "", raw) }),
			refuse: "recorded no boot"},
		{name: "verify green on another boot", facts: with(func(f *window.PromoteFacts) { f.Verify = onBoot(round.Done, target, "boot-1") }),
			refuse: "no green verify of " + node + " on its trial boot (boot id boot-2): the green one ran on boot id boot-1"},
		{name: "verify without a boot", facts: with(func(f *window.PromoteFacts) { f.Verify = onBoot(round.Done, target, "") }),
			refuse: "recorded no boot id"},
		{name: "verify red", facts: with(func(f *window.PromoteFacts) { f.Verify = onBoot(round.Failed, target, trialBoot) }),
			refuse: "the last one is failed"},
		{name: "no verify", facts: with(func(f *window.PromoteFacts) { f.Verify = nil }), refuse: "none is recorded"},
		{name: "GPU acceptance on another boot", facts: with(func(f *window.PromoteFacts) { f.GPU = onBoot(round.Done, target, "boot-1") }),
			refuse: "no green gpu_acceptance"},
		{name: "a CPU node needs no GPU acceptance", facts: with(func(f *window.PromoteFacts) { f.GPU, f.GPUServer = nil, false }),
			want: window.PromotePlan{Node: node, Kernel: target, NewEntry: "n", BootID: trialBoot}},
		{name: "trial boot proved another kernel", facts: with(func(f *window.PromoteFacts) {
			f.Trial, f.Now.Kernel = onBoot(round.Done, "6.8.0-98-generic", trialBoot, raw), "6.8.0-98-generic"
		}), refuse: "the kernel to promote is " + target},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := window.DecidePromote(tc.facts)
			if tc.refuse != "" {
				if !isRefusal(err) || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("got %v, want a refusal saying %q", err, tc.refuse)
				}
				return
			}
			if diff := cmp.Diff(tc.want, p); diff != "" || err != nil {
				t.Fatal(diff, err)
			}
		})
	}
}

// TestPromoteDigestBindsTheBoot: a signature over promote binds the boot
// the person saw; a window approval, signed before the boot exists, binds
// the reviewed part only.
func TestPromoteDigestBindsTheBoot(t *testing.T) {
	a := window.PromotePlan{Node: node, Kernel: target, NewEntry: "n", BootID: "boot-2"}
	b := a
	b.BootID = "boot-3"
	if a.Digest() == b.Digest() {
		t.Fatal("two boots, one promote digest")
	}
	if window.WindowBound(a) != window.WindowBound(b) || window.WindowBound(a) != a.ReviewedDigest() {
		t.Fatal("the window approval's promote digest depends on the boot")
	}
	if tp := (window.TrialBootPlan{Node: node}); window.WindowBound(tp) != tp.Digest() {
		t.Fatal("a plan without a reviewed part binds its own digest in a window approval")
	}
}

func TestApprovedPlanMustHashToItsDigest(t *testing.T) {
	tp := window.TrialBootPlan{Node: node, TargetKernel: target, NewEntry: "n"}
	raw, _ := json.Marshal(tp)
	if _, err := window.Approved[window.TrialBootPlan](&round.Attempt{PlanDigest: tp.Digest(), Plan: raw}); err != nil {
		t.Fatal(err)
	}
	tampered := strings.Replace(string(raw), `"n"`, `"evil"`, 1)
	if _, err := window.Approved[window.TrialBootPlan](&round.Attempt{PlanDigest: tp.Digest(), Plan: json.RawMessage(tampered)}); !errors.Is(err, window.ErrNoApprovedPlan) {
		t.Fatalf("tampered plan: %v", err)
	}
	if _, err := window.Approved[window.TrialBootPlan](nil); !errors.Is(err, window.ErrNoApprovedPlan) {
		t.Fatal("nil attempt")
	}
}

func TestDecideReentry(t *testing.T) {
	a := &round.Attempt{Started: t0}
	bound := time.Hour
	for _, tc := range []struct {
		name string
		obs  window.Observation
		at   time.Duration
		want window.Reentry
	}{
		{"ended is recorded even late", window.Ended, 3 * time.Hour, window.Follow},
		{"never began needs approval", window.NotBegun, time.Minute, window.NeedApproval},
		{"never began needs approval also late", window.NotBegun, 3 * time.Hour, window.NeedApproval},
		{"underway within bound", window.Underway, 59 * time.Minute, window.Follow},
		{"underway past bound", window.Underway, 61 * time.Minute, window.Overdue},
		{"unreadable past bound", window.Unreadable, 2 * time.Hour, window.Overdue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := window.DecideReentry(a, tc.obs, t0.Add(tc.at), bound); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPickEntryPrefersSubmenu(t *testing.T) {
	e, ok := window.PickEntry(inspection(nil).Grub.Entries, running)
	if !ok || e.ID != fakes.Entry(running) {
		t.Fatalf("%+v", e)
	}
	if _, ok := window.PickEntry(nil, running); ok {
		t.Fatal("entry from nothing")
	}
}
