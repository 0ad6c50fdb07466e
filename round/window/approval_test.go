package window_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// approvalFleet is a reviewed plan of a control-plane node, a canary and a
// GPU server whose drain evicts one model pod; GPU servers are approved
// per window.
func approvalFleet() plan.Fleet {
	facts := plan.Facts{Running: running, Target: target, PackageDigest: "sha256:pkgs",
		PackageLines:    []string{"Inst linux-image-" + target},
		Packages:        []plan.Package{{Name: "linux-image-" + target, Action: "install", NewVersion: "1", Class: "kernel"}},
		Entries:         []plan.Entry{{ID: "gnulinux-advanced-u>gnulinux-" + running + "-advanced-u", Kernel: running}},
		GrubenvWritable: true, KernelPanic: 10, BootFreeBytes: -1,
		Drain: plan.DrainFacts{Pods: []plan.Pod{{Namespace: "inference", Name: "model-1", OwnerKind: "ReplicaSet", OwnerName: "model-5c"}}},
	}
	order := []plan.Position{{Node: "cp-1", ControlPlane: true}, {Node: "gpu-1", GPU: true, Canary: true}, {Node: "gpu-2", GPU: true}}
	fs := map[string]plan.Facts{}
	for _, p := range order {
		fs[p.Node] = facts
	}
	return plan.Build(plan.Input{Round: "2026-11", Revision: 2, Order: order, Facts: fs, Intent: plan.Intent{GPUApproval: plan.PerWindow, PanicSeconds: 10}})
}

func TestAdmitWindowApproval(t *testing.T) {
	f := approvalFleet()
	for _, tc := range []struct{ node, refused, next string }{
		{node: "gpu-9", refused: "gpu-9 is not in the plan of round 2026-11", next: "Name a node"},
		{node: "cp-1", refused: "cp-1 is approved per step", next: "each step"},
		{node: "gpu-2"},
	} {
		n, err := window.AdmitWindowApproval(f, "2026-11", tc.node)
		var ref *window.Refusal
		switch {
		case tc.refused == "" && (err != nil || n.Node != tc.node):
			t.Errorf("%s: %v, %q", tc.node, err, n.Node)
		case tc.refused != "" && (!errors.As(err, &ref) || !strings.Contains(ref.Error(), tc.refused) || !strings.Contains(ref.Next, tc.next)):
			t.Errorf("%s: got %v, want a refusal naming %q", tc.node, err, tc.refused)
		}
	}
}

func TestDecideWindowApproval(t *testing.T) {
	f := approvalFleet()
	n, _ := f.Node("gpu-2")
	asReviewed := drain.Evictions{Node: "gpu-2", Digest: "sha256:pods",
		Evict: []drain.PodRef{{Namespace: "inference", Name: "model-1-x", OwnerKind: "ReplicaSet", OwnerName: "model-5c"}}}
	a, err := window.DecideWindowApproval(f, "2026-11", n, asReviewed)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != n.Window || a.Tools["drain_node"] != "sha256:pods" || a.Tools["install_updates"] != "sha256:pkgs" {
		t.Errorf("binds %s and %v, want the window digest %s and the live preview", a.Digest, a.Tools, n.Window)
	}
	if _, ok := a.Tools["fallback_drill"]; ok {
		t.Error("a GPU server that is no canary has no fallback drill to approve")
	}
	if !strings.HasPrefix(a.Summary[0], "one signature for the whole window of gpu-2 ("+running+" -> "+target+") in round 2026-11, plan revision 2") ||
		a.Summary[1] != "drain_node bound to sha256:pods" || a.Summary[len(a.Summary)-1] != "window digest "+n.Window ||
		!strings.Contains(strings.Join(a.Summary, "\n"), "drain evicts 1 pods of 1 workloads; 1 packages move") {
		t.Errorf("summary %q", a.Summary)
	}
	drifted := asReviewed
	drifted.Evict = append(drifted.Evict, drain.PodRef{Namespace: "batch", Name: "etl-1", OwnerKind: "Job", OwnerName: "etl"})
	_, err = window.DecideWindowApproval(f, "2026-11", n, drifted)
	var ref *window.Refusal
	if !errors.As(err, &ref) || ref.Next != "Call replan_node for gpu-2 first." || !strings.Contains(ref.Error(), "etl") {
		t.Errorf("a drifted drain: %v", err)
	}
	canary, _ := f.Node("gpu-1")
	if tools := window.WindowTools(canary, "sha256:p"); tools["fallback_drill"] == "" || tools["fallback_drill"] == tools["trial_boot"] {
		t.Errorf("the canary's window covers its drill under its own digest: %v", tools)
	}
}

func TestWorkloads(t *testing.T) {
	got := window.Workloads([]string{"evict inference/model-5c-x (replicaset model-5c)", "evict databases/pg-2 (cluster pg)", "junk"})
	want := []plan.Workload{{Namespace: "inference", Kind: "replicaset", Name: "model-5c", Pods: 1}, {Namespace: "databases", Kind: "cluster", Name: "pg", Pods: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLiveNode(t *testing.T) {
	f := approvalFleet()
	n, _ := f.Node("gpu-2")
	for _, tc := range []struct {
		name string
		p    window.Plan
		step plan.Step
		mod  func(*plan.Node)
	}{
		{name: "drain", p: window.DrainPlan{Node: "gpu-2", Evict: []string{"evict batch/etl-1 (job etl)"}}, step: plan.StepDrain,
			mod: func(l *plan.Node) {
				l.Drain = plan.Drain{Workloads: []plan.Workload{{Namespace: "batch", Kind: "job", Name: "etl", Pods: 1}}}
			}},
		{name: "install with apt lines", p: window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:new", AptLines: []string{"Inst a"}, Lines: []string{"install a"}, TargetKernel: "k2"},
			step: plan.StepInstall, mod: func(l *plan.Node) { l.PackageDigest, l.PackageLines, l.Target = "sha256:new", []string{"Inst a"}, "k2" }},
		{name: "install without apt lines", p: window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:new", Lines: []string{"install a"}, TargetKernel: "k2"},
			step: plan.StepInstall, mod: func(l *plan.Node) {
				l.PackageDigest, l.PackageLines, l.Target = "sha256:new", []string{"install a"}, "k2"
			}},
		{name: "trial boot", p: window.TrialBootPlan{Node: "gpu-2", RunningKernel: "k1", TargetKernel: "k2", OldEntry: "o", NewEntry: "n"}, step: plan.StepTrialBoot,
			mod: func(l *plan.Node) { l.Running, l.Target, l.Grub.Old, l.Grub.New = "k1", "k2", "o", "n" }},
		{name: "drill binds the trial boot's facts", p: window.FallbackDrillPlan{Node: "gpu-2", RunningKernel: "k1", TargetKernel: "k2", OldEntry: "o", NewEntry: "n"}, step: plan.StepTrialBoot,
			mod: func(l *plan.Node) { l.Running, l.Target, l.Grub.Old, l.Grub.New = "k1", "k2", "o", "n" }},
		{name: "promote", p: window.PromotePlan{Node: "gpu-2", Kernel: "k2", NewEntry: "n"}, step: plan.StepPromote,
			mod: func(l *plan.Node) { l.Target, l.Grub.New = "k2", "n" }},
		{name: "promote without an entry keeps the reviewed one", p: window.PromotePlan{Node: "gpu-2", Kernel: "k2"}, step: plan.StepPromote,
			mod: func(l *plan.Node) { l.Target = "k2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := plan.Node{Node: n.Node, Grub: n.Grub, Target: n.Target, Running: n.Running, PackageDigest: n.PackageDigest, Drain: n.Drain}
			tc.mod(&want)
			live, step, ok := window.LiveNode(n, tc.p)
			if !ok || step != tc.step {
				t.Fatalf("step %q ok=%v, want %q", step, ok, tc.step)
			}
			if d := cmp.Diff(want, live); d != "" {
				t.Errorf("live node (-want +got):\n%s", d)
			}
		})
	}
	if _, _, ok := window.LiveNode(n, window.AutoremovePlan{}); ok {
		t.Error("autoremove binds nothing of the reviewed plan")
	}
}
