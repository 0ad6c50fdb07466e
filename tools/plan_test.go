package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

const planRound = "2026-11"

func planFacts(target string) plan.Facts {
	running := "6.8.0-48-generic"
	return plan.Facts{Running: running, Target: target, PackageDigest: "sha256:pkgs-" + target,
		PackageLines: []string{"Inst linux-image-" + target},
		Packages: []plan.Package{{Name: "linux-image-" + target, Action: "install", NewVersion: "1", Class: "kernel"},
			{Name: "linux-modules-nvidia-550-server-" + target, Action: "install", NewVersion: "1", Class: "nvidia"}},
		Entries:         []plan.Entry{{ID: "gnulinux-advanced-u>gnulinux-" + running + "-advanced-u", Kernel: running}},
		GrubenvWritable: true, KernelPanic: 10, BootFreeBytes: -1, NvidiaInstalled: true,
		Drain: plan.DrainFacts{Pods: []plan.Pod{{Namespace: "inference", Name: "model-1", OwnerKind: "ReplicaSet", OwnerName: "model-5c"}}},
	}
}

// planDeps is a round with an order, a journal and a plan document in a
// temporary intent working copy, approvals faked.
func planDeps(t *testing.T, approval string) (*Deps, plan.Fleet) {
	t.Helper()
	d := testDeps(t, config.ModeNormal)
	d.Book = service.NewRoundBook(t.TempDir(), filepath.Join(t.TempDir(), "journals"), func() time.Time { return time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC) })
	t.Cleanup(func() { d.Book.Close() })
	j, err := d.Book.Journal(planRound, true)
	if err != nil {
		t.Fatal(err)
	}
	order := round.Order{Positions: []round.Position{
		{Node: "cp-1", Role: round.RoleControlPlane, Reason: "control plane"},
		{Node: "gpu-1", Role: round.RoleGPU, GPU: true, Canary: true, Reason: "canary"},
		{Node: "gpu-2", Role: round.RoleGPU, GPU: true, Reason: "GPU server"},
	}}
	if _, err := j.Plan(order, 48*time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	facts := map[string]plan.Facts{}
	for _, p := range order.Positions {
		facts[p.Node] = planFacts("6.8.0-51-generic")
	}
	f := plan.Build(plan.Input{Round: planRound, Order: preflight.Positions(order), Facts: facts,
		Intent: plan.Intent{GPUApproval: approval, PanicSeconds: 10}})
	if err := d.WriteFleetPlan(planRound, f); err != nil {
		t.Fatal(err)
	}
	return d, f
}

func callSign(t *testing.T, d *Deps, approval string) (*SignPlanOut, *Result) {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"approval": approval})
	out, res := SignPlan().CallJSON(context.Background(), d, args, func(float64, float64, string) {})
	return out.(*SignPlanOut), res
}

func TestTheFirstDrainWaitsForTheSignedPlan(t *testing.T) {
	d, f := planDeps(t, plan.PerStep)
	gpu, _ := f.Node("gpu-2")
	drainPlan := window.DrainPlan{Node: "gpu-2", PreviewDigest: "sha256:pods", Evict: []string{"evict inference/model-1 (replicaset model-5c)"}}
	err := d.CheckReviewed(t.Context(), planRound, "drain_node", drainPlan)
	if err == nil || !strings.Contains(err.Error(), "is not signed") {
		t.Fatalf("drain before the plan is signed: %v", err)
	}
	_, res := callSign(t, d, "")
	if res.Status != StatusApprovalRequired || !strings.Contains(strings.Join(res.Approval.Summary, "\n"), "this round needs 15 signatures") {
		t.Fatalf("sign_plan without approval: %s %v", res.Status, res.Approval)
	}
	if _, res := callSign(t, d, "signed:sha256:another"); res.Status != StatusRefused {
		t.Fatalf("a signature of another digest: %s", res.Status)
	}
	out, res := callSign(t, d, "signed:"+f.Digest)
	if res.Status != StatusOK || !out.Plan.Signed || out.Plan.Signatures != 15 {
		t.Fatalf("sign_plan: %s %v %+v", res.Status, res.Reasons, out.Plan)
	}
	if err := d.CheckReviewed(t.Context(), planRound, "drain_node", drainPlan); err != nil {
		t.Fatalf("drain after signing: %v", err)
	}
	// A drain that now evicts a workload the plan did not list is drift.
	more := drainPlan
	more.Evict = append(more.Evict, "evict batch/train-7 (job train)")
	err = d.CheckReviewed(t.Context(), planRound, "drain_node", more)
	if err == nil || !strings.Contains(err.Error(), "+ evict batch/job/train") || !strings.Contains(err.Error(), "nothing was executed") {
		t.Fatalf("drifted drain: %v", err)
	}
	// Another package set is drift, with a diff against the reviewed lines.
	err = d.CheckReviewed(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:other",
		Lines: append([]string{"Inst curl [1] (2)"}, gpu.PackageLines...), TargetKernel: gpu.Target})
	var ref *Refusal
	if err == nil || !strings.Contains(err.Error(), "+ Inst curl [1] (2)") || !asRefusal(err, &ref) || !strings.Contains(ref.NextAction, "replan_node") {
		t.Fatalf("drifted install: %v", err)
	}
	if err := d.CheckReviewed(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "gpu-2", PackageDigest: gpu.PackageDigest, Lines: gpu.PackageLines, TargetKernel: gpu.Target}); err != nil {
		t.Fatalf("install as reviewed: %v", err)
	}
	tb := window.TrialBootPlan{Node: "gpu-2", RunningKernel: gpu.Running, TargetKernel: gpu.Target, OldEntry: gpu.Grub.Old, NewEntry: "gnulinux-advanced-u>gnulinux-6.8.0-51-generic-advanced-OTHER"}
	if err := d.CheckReviewed(t.Context(), planRound, "trial_boot", tb); err == nil || !strings.Contains(err.Error(), "GRUB entry of the target kernel differs") {
		t.Fatalf("another GRUB entry: %v", err)
	}
	// What the plan does not bind is not held to it.
	if err := d.CheckReviewed(t.Context(), planRound, "autoremove", window.AutoremovePlan{}); err != nil {
		t.Fatalf("autoremove: %v", err)
	}
}

func asRefusal(err error, ref **Refusal) bool {
	r, ok := err.(*Refusal)
	*ref = r
	return ok
}

func TestReplanSignsOnlyTheChange(t *testing.T) {
	d, f := planDeps(t, plan.PerStep)
	if _, res := callSign(t, d, "signed:"+f.Digest); res.Status != StatusOK {
		t.Fatalf("sign: %v", res.Reasons)
	}
	facts := planFacts("6.8.0-51-generic")
	facts.PackageDigest, facts.PackageLines = "sha256:more", append(facts.PackageLines, "Inst curl [1] (2)")
	live := plan.BuildNode(0, plan.Position{Node: "gpu-2", GPU: true}, facts, plan.Placement{}, plan.Intent{GPUApproval: plan.PerStep, PanicSeconds: 10})
	g, changed, err := plan.Replan(f, live)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]plan.Step{plan.StepInstall}, changed); diff != "" {
		t.Fatalf("changed (-want +got):\n%s", diff)
	}
	if err := d.WriteFleetPlan(planRound, g); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckReviewed(t.Context(), planRound, "drain_node", window.DrainPlan{Node: "cp-1"}); err == nil || !strings.Contains(err.Error(), "revision 1) is not signed") {
		t.Fatalf("the re-planned plan is not signed yet: %v", err)
	}
	_, res := callSign(t, d, "")
	if res.Status != StatusApprovalRequired {
		t.Fatalf("sign_plan: %s", res.Status)
	}
	want := []string{"re-plan (revision 1): only these changed since the last signature:", "gpu-2: install", "plan digest " + g.Digest}
	if diff := cmp.Diff(want, res.Approval.Summary); diff != "" {
		t.Errorf("re-sign summary (-want +got):\n%s", diff)
	}
	if _, res := callSign(t, d, "signed:"+g.Digest); res.Status != StatusOK {
		t.Fatalf("sign the re-plan: %v", res.Reasons)
	}
	if err := d.CheckReviewed(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:more", TargetKernel: "6.8.0-51-generic"}); err != nil {
		t.Fatalf("install of the re-planned set: %v", err)
	}
}

func TestWindowApprovalCoversTheReviewedDigestsOnly(t *testing.T) {
	d, f := planDeps(t, plan.PerWindow)
	if f.Signatures != 8 || f.PerStepSignatures != 15 {
		t.Errorf("signatures %d (per step %d), want 8 (15)", f.Signatures, f.PerStepSignatures)
	}
	if _, res := callSign(t, d, "signed:"+f.Digest); res.Status != StatusOK {
		t.Fatalf("sign: %v", res.Reasons)
	}
	n, _ := f.Node("gpu-2")
	wid := windowApproved(t, d, n, "sha256:pods")
	tb := window.TrialBootPlan{Node: "gpu-2", RunningKernel: n.Running, TargetKernel: n.Target, OldEntry: n.Grub.Old, NewEntry: n.Grub.New, PanicSeconds: 10, BootID: "b1"}
	for name, p := range map[string]window.Plan{
		"drain_node":      window.DrainPlan{Node: "gpu-2", PreviewDigest: "sha256:pods"},
		"install_updates": window.PackagePlan{Node: "gpu-2", PackageDigest: n.PackageDigest},
		"trial_boot":      tb,
		"promote_kernel":  window.PromotePlan{Node: "gpu-2", Kernel: n.Target, NewEntry: n.Grub.New},
	} {
		a, ok, _, err := d.WindowApproval(t.Context(), planRound, name, p)
		if err != nil || !ok || a.ID != wid {
			t.Errorf("%s as reviewed: covered=%v id=%q err=%v", name, ok, a.ID, err)
		}
	}
	_, ok, _, err := d.WindowApproval(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:drifted"})
	if ok || err == nil || !strings.Contains(err.Error(), "differs from") {
		t.Errorf("drifted install: covered=%v err=%v", ok, err)
	}
	if _, ok, _, err := d.WindowApproval(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "cp-1", PackageDigest: n.PackageDigest}); ok || err != nil {
		t.Errorf("a node without a window approval: covered=%v err=%v", ok, err)
	}
}

// windowApproved keeps, as approve_window does when a person signed,
// a window approval of n (in the fake: its window digest and the tools it
// binds, as the signed summary lists them), used; it answers its id.
func windowApproved(t *testing.T, d *Deps, n plan.Node, pods string) string {
	t.Helper()
	tools := window.WindowTools(n, pods)
	text := "signed:" + n.Window + "\n"
	for _, tl := range []string{"drain_node", "install_updates", "fallback_drill", "trial_boot", "promote_kernel"} {
		if dg, ok := tools[tl]; ok {
			text += tl + " bound to " + dg + "\n"
		}
	}
	d.Approvals.(*fakeApprovals).used["signed:"+n.Window] = true
	if err := d.KeepProof(planRound, service.Proof{Tool: "approve_window", Node: n.Node, ApprovalID: "w1", Approval: text}); err != nil {
		t.Fatal(err)
	}
	return "signed:" + n.Window
}

func TestResignedReplanCarriesTheWindowApproval(t *testing.T) {
	d, f := planDeps(t, plan.PerWindow)
	if _, res := callSign(t, d, "signed:"+f.Digest); res.Status != StatusOK {
		t.Fatalf("sign: %v", res.Reasons)
	}
	n, _ := f.Node("gpu-2")
	windowApproved(t, d, n, "sha256:pods")
	facts := planFacts("6.8.0-51-generic")
	facts.PackageDigest = "sha256:more"
	live := plan.BuildNode(0, plan.Position{Node: "gpu-2", GPU: true}, facts, plan.Placement{}, plan.Intent{GPUApproval: plan.PerWindow, PanicSeconds: 10})
	g, _, err := plan.Replan(f, live)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFleetPlan(planRound, g); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := d.WindowApproval(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:more"}); err == nil {
		t.Fatal("a window approval of the old revision covers the re-planned install")
	}
	if _, res := callSign(t, d, "signed:"+g.Digest); res.Status != StatusOK {
		t.Fatalf("sign the re-plan: %v", res.Reasons)
	}
	for tool, p := range map[string]window.Plan{
		"install_updates": window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:more"},
		"drain_node":      window.DrainPlan{Node: "gpu-2", PreviewDigest: "sha256:pods"},
	} {
		if _, ok, _, err := d.WindowApproval(t.Context(), planRound, tool, p); !ok || err != nil {
			t.Errorf("%s after the re-plan was signed: covered=%v err=%v", tool, ok, err)
		}
	}
	if _, ok, _, err := d.WindowApproval(t.Context(), planRound, "install_updates", window.PackagePlan{Node: "gpu-2", PackageDigest: n.PackageDigest}); ok || err == nil {
		t.Errorf("the old package set is still covered: %v %v", ok, err)
	}
}

// installLike is a destructive tool named like install_updates whose live
// plan is what the test says: the chokepoint holds it to the signed plan.
func installLike(executed *int, live *window.PackagePlan) Tool {
	return NewDestructive[stepIn, stepOut, window.PackagePlan](Spec{Name: "install_updates", Title: "Install", Description: "install"},
		Steps[stepIn, stepOut, window.PackagePlan]{
			Target: func(in stepIn) string { return in.Node },
			Open:   func(*Deps) (*window.Round, error) { return &window.Round{ID: planRound}, nil },
			Plan: func(ctx context.Context, d *Deps, r *window.Round, in stepIn) (window.PackagePlan, error) {
				return *live, nil
			},
			Do: func(ctx context.Context, d *Deps, r *window.Round, in stepIn, plan window.PackagePlan, a service.Approved, p Progress) (stepOut, error) {
				*executed++
				return stepOut{Did: a.ID}, nil
			},
		})
}

func TestChokepointHoldsStepsToTheSignedPlan(t *testing.T) {
	d, f := planDeps(t, plan.PerWindow)
	n, _ := f.Node("gpu-2")
	executed := 0
	live := window.PackagePlan{Node: "gpu-2", PackageDigest: n.PackageDigest, Lines: n.PackageLines, TargetKernel: n.Target}
	tool := installLike(&executed, &live)
	run := func(approval string) *Result {
		args, _ := json.Marshal(map[string]string{"node": "gpu-2", "approval": approval})
		_, res := tool.CallJSON(context.Background(), d, args, func(float64, float64, string) {})
		return res
	}
	if res := run("signed:" + n.PackageDigest); res.Status != StatusRefused || executed != 0 || !strings.Contains(strings.Join(res.Reasons, " "), "is not signed") {
		t.Fatalf("before the plan is signed: %s %v executed=%d", res.Status, res.Reasons, executed)
	}
	if _, res := callSign(t, d, "signed:"+f.Digest); res.Status != StatusOK {
		t.Fatalf("sign: %v", res.Reasons)
	}
	if res := run(""); res.Status != StatusApprovalRequired || executed != 0 {
		t.Fatalf("signed plan, no window approval: %s executed=%d", res.Status, executed)
	}
	windowApproved(t, d, n, "sha256:pods")
	live.PackageDigest, live.Lines = "sha256:drifted", append(live.Lines, "Inst curl [1] (2)")
	if res := run(""); res.Status != StatusRefused || executed != 0 || !strings.Contains(strings.Join(res.Reasons, "\n"), "+ Inst curl [1] (2)") {
		t.Fatalf("drifted under a window approval: %s %v executed=%d", res.Status, res.Reasons, executed)
	}
	live.PackageDigest, live.Lines = n.PackageDigest, n.PackageLines
	if res := run(""); res.Status != StatusOK || executed != 1 {
		t.Fatalf("covered by the window approval: %s %v executed=%d", res.Status, res.Reasons, executed)
	}
}

func gitRun(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestCloseWritesAndCommitsTheComponentDocs(t *testing.T) {
	d, _ := planDeps(t, plan.PerWindow)
	dir := d.Book.Root
	if err := os.MkdirAll(filepath.Join(dir, "os-layer"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "os-layer", "changelog.md"), []byte("# os-layer changelog\n\nNewest first.\n\n## 2025-11-14\n\n- older\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "os-layer", "runbook.md"), []byte("# runbook\n"), 0o644)
	gitRun(t, dir, "init", "-q", "-b", "main")
	gitRun(t, dir, "add", "os-layer")
	gitRun(t, dir, "commit", "-qm", "intent")
	d.Intent = func(id string) (*intent.Repo, error) { return intent.Open(dir, intent.Options{RoundID: id}) }
	s, err := d.OpenRound()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Journal.Lesson("next time check the NVIDIA modules before the window"); err != nil {
		t.Fatal(err)
	}
	notes, err := d.CloseDocs(context.Background(), s)
	if err != nil {
		t.Fatalf("closeDocs: %v", err)
	}
	if len(notes) != 3 {
		t.Errorf("notes = %v", notes)
	}
	branch := "mcp-patch/round-" + planRound
	log := gitRun(t, dir, "show", "--stat", "--format=%s", branch)
	if !strings.Contains(log, "os-layer changelog and runbook") || !strings.Contains(log, "os-layer/changelog.md") || !strings.Contains(log, "os-layer/runbook.md") {
		t.Errorf("commit on %s:\n%s", branch, log)
	}
	cl := gitRun(t, dir, "show", branch+":os-layer/changelog.md")
	if !strings.Contains(cl, "· round "+planRound) || !strings.Contains(cl, "6.8.0-48-generic → 6.8.0-51-generic") {
		t.Errorf("changelog:\n%s", cl)
	}
	if rb := gitRun(t, dir, "show", branch+":os-layer/runbook.md"); !strings.Contains(rb, "- next time check the NVIDIA modules before the window") {
		t.Errorf("runbook:\n%s", rb)
	}
	// Again: nothing new, nothing to commit, no refusal.
	if _, err := d.CloseDocs(context.Background(), s); err != nil {
		t.Fatalf("second closeDocs: %v", err)
	}
}

// planHeader decodes a plan.json once per content: the same bytes give the
// kept header (a copy the caller may change), a plan rewritten with other
// bytes is decoded again, and an edited plan is refused even after its
// unedited bytes were read.
func TestPlanHeaderOncePerContent(t *testing.T) {
	d, f := planDeps(t, plan.PerWindow)
	h, ok, err := d.PlanHeader(planRound)
	if err != nil || !ok || h.Digest != f.Digest {
		t.Fatalf("planHeader = %+v, %v, %v; want digest %s", h, ok, err, f.Digest)
	}
	h.Summary[0], h.Nodes = "changed by the caller", nil
	again, ok, err := d.PlanHeader(planRound)
	if err != nil || !ok || again.Digest != f.Digest || again.Summary[0] == "changed by the caller" || len(again.Nodes) != len(f.Nodes) {
		t.Fatalf("the kept header changed with the caller's copy: %+v, %v", again, err)
	}

	// Another revision of the plan: decoded again.
	g := plan.Build(plan.Input{Round: planRound, Order: preflight.Positions(round.Order{Positions: []round.Position{
		{Node: "cp-1", Role: round.RoleControlPlane, Reason: "control plane"},
	}}), Facts: map[string]plan.Facts{"cp-1": planFacts("6.8.0-51-generic")}, Intent: plan.Intent{GPUApproval: plan.PerWindow, PanicSeconds: 10}})
	if err := d.WriteFleetPlan(planRound, g); err != nil {
		t.Fatal(err)
	}
	if h, _, err := d.PlanHeader(planRound); err != nil || h.Digest != g.Digest || len(h.Nodes) != 1 {
		t.Fatalf("after a new plan: %+v, %v; want digest %s and 1 node", h, err, g.Digest)
	}

	// An edited plan: refused, although its unedited bytes are kept.
	p := filepath.Join(d.Book.Root, "rounds", planRound, service.FleetPlanFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(b, []byte("6.8.0-51-generic"), []byte("6.8.0-99-generic"), 1)
	if bytes.Equal(edited, b) {
		t.Fatal("the plan does not name the target kernel")
	}
	if err := os.WriteFile(p, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	if h, _, err := d.PlanHeader(planRound); err == nil {
		t.Fatalf("an edited plan was read: %+v", h)
	}
}
