package window_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// roundFiles is a round's plan and kept plan signature as the rule reads
// them.
type roundFiles struct {
	plan    *plan.Fleet
	planErr error
	sig     *window.PlanSignature
	sigErr  error
	listed  string
}

func (r *roundFiles) ReviewedPlan(string) (plan.Fleet, bool, error) {
	if r.planErr != nil {
		return plan.Fleet{}, false, r.planErr
	}
	if r.plan == nil {
		return plan.Fleet{}, false, nil
	}
	return *r.plan, true, nil
}

func (r *roundFiles) LatestPlanSignature(context.Context, string) (window.PlanSignature, bool, error) {
	if r.sigErr != nil {
		return window.PlanSignature{}, false, r.sigErr
	}
	if r.sig == nil {
		return window.PlanSignature{}, false, nil
	}
	return *r.sig, true, nil
}

func (r *roundFiles) ListsPlanSignature(_, digest string) bool { return r.listed == digest }

var _ window.PlanFiles = (*roundFiles)(nil)

// The signed-plan rule, one case per way a destructive window step is
// refused before anything runs: no plan document (a round without a
// signed plan runs no destructive window step), an untrusted plan,
// blockers, no signature or one of another digest (a report listing it is
// named and counts for nothing), a signature that does not verify now,
// another node, drift; and what it admits.
func TestCheckReviewed(t *testing.T) {
	f := approvalFleet()
	gpu, _ := f.Node("gpu-2")
	signed := &window.PlanSignature{ID: "a-1", Principal: "alice@example.org", Digest: f.Digest, Index: 3}
	blocked := f
	blocked.Blockers = []plan.Blocker{{Node: "gpu-1", Cause: "the upgrade would remove 1 package(s): oldlib", Check: plan.CheckSimulate}}
	asReviewed := window.PackagePlan{Node: "gpu-2", PackageDigest: gpu.PackageDigest, Lines: gpu.PackageLines, TargetKernel: gpu.Target}
	drifted := asReviewed
	drifted.PackageDigest, drifted.Lines = "sha256:other", append([]string{"Inst curl [1] (2)"}, gpu.PackageLines...)
	for _, c := range []struct {
		name    string
		files   roundFiles
		tool    string
		p       window.Plan
		refused []string // each in the refusal's reasons; none: admitted
		next    string
	}{
		{name: "no plan document: the drain", files: roundFiles{}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-2"},
			refused: []string{"round 2026-11 has no reviewed plan", "a round without a signed plan runs no destructive window step", "nothing was executed"}, next: "plan_round"},
		{name: "no plan document: the install", files: roundFiles{}, tool: "install_updates", p: asReviewed,
			refused: []string{"has no reviewed plan"}, next: "sign_plan"},
		{name: "no plan document: the trial boot", files: roundFiles{}, tool: "trial_boot", p: window.TrialBootPlan{Node: "gpu-2"},
			refused: []string{"has no reviewed plan"}, next: "plan_round"},
		{name: "no plan document: promote", files: roundFiles{}, tool: "promote_kernel", p: window.PromotePlan{Node: "gpu-2"},
			refused: []string{"has no reviewed plan"}, next: "plan_round"},
		{name: "no plan document: the drill", files: roundFiles{}, tool: "fallback_drill", p: window.FallbackDrillPlan{Node: "gpu-1"},
			refused: []string{"has no reviewed plan"}, next: "plan_round"},
		{name: "a plan that cannot be trusted", files: roundFiles{planErr: errors.New("plan.json: node digest does not match")}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-2"},
			refused: []string{"node digest does not match"}, next: "plan_round"},
		{name: "blockers", files: roundFiles{plan: &blocked, sig: signed}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-2"},
			refused: []string{"the round's plan has blockers", "gpu-1: the upgrade would remove 1 package(s): oldlib"}, next: "Fix the blockers"},
		{name: "not signed", files: roundFiles{plan: &f}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-2"},
			refused: []string{"is not signed"}, next: "sign_plan"},
		{name: "signed, another digest", files: roundFiles{plan: &f, sig: &window.PlanSignature{ID: "a-0", Principal: "bob@example.org", Digest: "sha256:old"}},
			tool: "install_updates", p: asReviewed, refused: []string{"is not signed", "(a-0 by bob@example.org) binds digest sha256:old"}, next: "sign_plan"},
		{name: "listed in the report only", files: roundFiles{plan: &f, listed: f.Digest}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-2"},
			refused: []string{"is not signed", "plan-signatures.json lists a signature of this digest", "never a proof"}, next: "sign_plan"},
		{name: "a kept signature that no longer verifies", files: roundFiles{plan: &f, sigErr: errors.New("key not in allowed_signers")}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-2"},
			refused: []string{"key not in allowed_signers"}, next: "sign_plan"},
		{name: "a node outside the plan", files: roundFiles{plan: &f, sig: signed}, tool: "drain_node", p: window.DrainPlan{Node: "gpu-9"},
			refused: []string{"gpu-9 is not in the reviewed plan of round 2026-11"}, next: "Plan the round again"},
		{name: "drift", files: roundFiles{plan: &f, sig: signed}, tool: "install_updates", p: drifted,
			refused: []string{"+ Inst curl [1] (2)", "nothing was executed"}, next: "replan_node"},
		{name: "as reviewed and signed", files: roundFiles{plan: &f, sig: signed}, tool: "install_updates", p: asReviewed},
		{name: "a step the plan does not bind", files: roundFiles{}, tool: "autoremove", p: window.AutoremovePlan{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := window.CheckReviewed(t.Context(), &c.files, "2026-11", c.tool, c.p)
			if len(c.refused) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ref *window.Refusal
			if !errors.As(err, &ref) {
				t.Fatalf("%T %v, want a refusal", err, err)
			}
			for _, w := range c.refused {
				if !strings.Contains(strings.Join(ref.Reasons, "\n"), w) {
					t.Errorf("reasons %q lack %q", ref.Reasons, w)
				}
			}
			if !strings.Contains(ref.Next, c.next) {
				t.Errorf("next %q, want it to name %q", ref.Next, c.next)
			}
		})
	}
}

// A window approval covers a step only on a node approved per window,
// only for a tool it lists, and only at the digest it binds (or, carried
// over a re-plan by a later plan signature, the re-plan's).
func TestDecideWindowCover(t *testing.T) {
	f := approvalFleet()
	n, _ := f.Node("gpu-2")
	bound := window.WindowTools(n, "sha256:pods")
	asReviewed := window.PackagePlan{Node: "gpu-2", PackageDigest: n.PackageDigest}
	for _, c := range []struct {
		name    string
		w       window.KeptWindowApproval
		sig     window.PlanSignature
		tool    string
		p       window.Plan
		covered bool
		note    string
		refused string
	}{
		{name: "covers the reviewed install", w: window.KeptWindowApproval{Digest: n.Window, Tools: bound, Index: 5}, sig: window.PlanSignature{Index: 2},
			tool: "install_updates", p: asReviewed, covered: true},
		{name: "covers the drain it previewed", w: window.KeptWindowApproval{Digest: n.Window, Tools: bound, Index: 5},
			tool: "drain_node", p: window.DrainPlan{Node: "gpu-2", PreviewDigest: "sha256:pods"}, covered: true},
		{name: "a control-plane node", w: window.KeptWindowApproval{Digest: n.Window, Tools: bound},
			tool: "install_updates", p: window.PackagePlan{Node: "cp-1"}, note: "cp-1 is approved per step"},
		{name: "a tool it does not list", w: window.KeptWindowApproval{Digest: n.Window, Tools: map[string]string{"drain_node": "sha256:pods"}},
			tool: "install_updates", p: asReviewed},
		{name: "another package set", w: window.KeptWindowApproval{Digest: n.Window, Tools: bound},
			tool: "install_updates", p: window.PackagePlan{Node: "gpu-2", PackageDigest: "sha256:drifted"}, refused: "differs from"},
		{name: "re-planned after the window approval", w: window.KeptWindowApproval{Digest: "sha256:old-window", Tools: bound, Index: 5}, sig: window.PlanSignature{Index: 2},
			tool: "install_updates", p: asReviewed, refused: "re-planned after its window was approved"},
		{name: "carried over by a later plan signature", w: window.KeptWindowApproval{Digest: "sha256:old-window", Tools: map[string]string{"install_updates": "sha256:old-pkgs"}, Index: 2},
			sig: window.PlanSignature{Index: 5}, tool: "install_updates", p: asReviewed, covered: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			digest, covered, note, err := window.DecideWindowCover(f, c.sig, c.w, c.tool, c.p)
			var ref *window.Refusal
			switch {
			case c.refused != "":
				if !errors.As(err, &ref) || !strings.Contains(ref.Error()+"; "+ref.Next, c.refused) || covered {
					t.Fatalf("%v %v, want a refusal naming %q", covered, err, c.refused)
				}
			case err != nil:
				t.Fatalf("refused: %v", err)
			case covered != c.covered || !strings.Contains(note, c.note):
				t.Fatalf("covered %v note %q, want %v %q", covered, note, c.covered, c.note)
			case covered && digest != window.WindowBound(c.p):
				t.Errorf("binds %s, want the live %s", digest, window.WindowBound(c.p))
			}
		})
	}
}

// The plan's own calls come before a window step that would be refused
// without them, in the order a person meets them; a step the plan does
// not bind, or one the plan and its signatures admit, keeps its call.
func TestDecidePlanNextCall(t *testing.T) {
	f := approvalFleet()
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	h, err := plan.DecodeHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	blocked := h
	blocked.Blockers = []plan.Blocker{{Node: "gpu-1", Cause: "kernel.panic is 0"}}
	gpu, _ := h.Node("gpu-2")
	for _, c := range []struct {
		name    string
		h       plan.Header
		hasPlan bool
		signed  string
		window  string
		tool    string
		node    string
		want    string // "" keeps the step's call
		names   string
	}{
		{name: "no plan", tool: "drain_node", node: "gpu-2", want: "plan_round", names: "has no reviewed plan"},
		{name: "blockers", h: blocked, hasPlan: true, signed: h.Digest, tool: "install_updates", node: "gpu-2", want: "plan_round", names: "blockers"},
		{name: "unsigned", h: h, hasPlan: true, tool: "drain_node", node: "cp-1", want: "sign_plan", names: "rounds/2026-11/plan.md"},
		{name: "signed another digest", h: h, hasPlan: true, signed: "sha256:old", tool: "trial_boot", node: "cp-1", want: "sign_plan"},
		{name: "a window to approve", h: h, hasPlan: true, signed: h.Digest, tool: "drain_node", node: "gpu-2", want: "approve_window", names: "whole window of gpu-2"},
		{name: "an approved window", h: h, hasPlan: true, signed: h.Digest, window: gpu.Window, tool: "drain_node", node: "gpu-2"},
		{name: "a control-plane drain", h: h, hasPlan: true, signed: h.Digest, tool: "drain_node", node: "cp-1"},
		{name: "not bound by the plan", tool: "autoremove"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc, ok := window.DecidePlanNextCall("2026-11", c.h, c.hasPlan, func() string { return c.signed }, func(string) string { return c.window }, c.tool, c.node)
			if c.want == "" {
				if ok {
					t.Fatalf("the step's call was put off for %+v", pc)
				}
				return
			}
			if !ok || pc.Tool != c.want || !strings.Contains(pc.Why, c.names) {
				t.Fatalf("%v %+v, want %s naming %q", ok, pc, c.want, c.names)
			}
			if c.want == "approve_window" && pc.Node != c.node {
				t.Errorf("approve_window names %q, want %q", pc.Node, c.node)
			}
		})
	}
}

// A plan's blockers fail one preflight check per node, in the plan's
// order: simulate_upgrade's when the node's first blocker is its package
// set, inspect_node's otherwise; the reasons name every blocker.
func TestPlanBlockers(t *testing.T) {
	f := approvalFleet()
	f.Blockers = []plan.Blocker{
		{Node: "gpu-2", Cause: "the upgrade would remove 1 package(s): oldlib", Check: plan.CheckSimulate},
		{Node: "cp-1", Cause: "kernel.panic is 0", Check: plan.CheckInspect},
		{Node: "gpu-2", Cause: "no NVIDIA modules for the target kernel", Check: plan.CheckInspect},
	}
	checks, why := window.PlanBlockers(f)
	want := []window.BlockerCheck{
		{Node: "gpu-2", Step: round.StepSimulate, Detail: "plan blocker: the upgrade would remove 1 package(s): oldlib; no NVIDIA modules for the target kernel"},
		{Node: "cp-1", Step: round.StepInspect, Detail: "plan blocker: kernel.panic is 0"},
	}
	if diff := cmp.Diff(want, checks); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	if len(why) != 4 || !strings.HasPrefix(why[0], "the plan has 3 blocker(s)") || !strings.HasPrefix(why[1], "gpu-2: the upgrade would remove") {
		t.Errorf("reasons %q", why)
	}
	if checks, why := window.PlanBlockers(approvalFleet()); len(checks) != 0 || len(why) != 1 {
		t.Errorf("a plan without blockers: %v %q", checks, why)
	}
}
