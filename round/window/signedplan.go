package window

import (
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/round/plan"
)

// The signed-plan rule: before every destructive window step the round's
// reviewed plan (rounds/<id>/plan.json) exists, has no blockers and is the
// plan the round's latest kept plan signature binds, and the step's live
// plan is its node's reviewed plan. A round without a signed plan runs no
// destructive window step.

// ReviewedStep is the step of the reviewed plan a destructive tool runs;
// false for a tool the plan does not bind (autoremove, rollback_node).
func ReviewedStep(tool string) (plan.Step, bool) {
	s, ok := reviewedSteps[tool]
	return s, ok
}

var reviewedSteps = map[string]plan.Step{
	"drain_node": plan.StepDrain, "install_updates": plan.StepInstall, "trial_boot": plan.StepTrialBoot,
	"promote_kernel": plan.StepPromote, "fallback_drill": plan.StepDrill,
}

// PlanSignature is a signature of the plan that the server kept when
// sign_plan verified it, verified again now.
type PlanSignature struct {
	ID        string
	Principal string
	// Digest is the plan digest it binds.
	Digest string
	// Index is its place among the round's kept signatures: a window
	// approval kept after it is newer.
	Index int
}

// PlanFiles is what the signed-plan rule reads of a round. The report
// rounds/<id>/plan-signatures.json is read only to name it in a refusal:
// it is never a proof.
type PlanFiles interface {
	// ReviewedPlan is the round's plan.json, decoded and its digests
	// checked; ok is false when the round has none.
	ReviewedPlan(round string) (f plan.Fleet, ok bool, err error)
	// LatestPlanSignature is the round's latest kept plan signature,
	// verified again now; ok is false when there is none.
	LatestPlanSignature(ctx context.Context, round string) (s PlanSignature, ok bool, err error)
	// ListsPlanSignature says whether the report lists a signature of
	// digest.
	ListsPlanSignature(round, digest string) bool
}

// SignedPlan returns the round's reviewed plan once it may be acted on:
// it exists, has no blockers, and its digest is the one the round's latest
// kept plan signature binds, that signature verified again now. Anything
// else is a Refusal that says what a person does first; nothing was
// executed.
func SignedPlan(ctx context.Context, files PlanFiles, roundID string) (plan.Fleet, PlanSignature, error) {
	f, ok, err := files.ReviewedPlan(roundID)
	if err != nil {
		return plan.Fleet{}, PlanSignature{}, refuse("Plan the round again (plan_round): the plan file cannot be trusted.", err.Error(), "nothing was executed")
	}
	if !ok {
		return plan.Fleet{}, PlanSignature{}, refuse("Call plan_round, and have a person sign the plan (sign_plan) before the first cordon.",
			"round "+roundID+" has no reviewed plan (rounds/"+roundID+"/plan.json): a round without a signed plan runs no destructive window step",
			"nothing was executed")
	}
	if !f.Ready() {
		reasons := []string{"the round's plan has blockers: nothing may be cordoned"}
		for _, b := range f.Blockers {
			reasons = append(reasons, b.String())
		}
		return plan.Fleet{}, PlanSignature{}, refuse("Fix the blockers and call plan_round again.", append(reasons, "nothing was executed")...)
	}
	sig, ok, err := files.LatestPlanSignature(ctx, roundID)
	if err != nil {
		return plan.Fleet{}, PlanSignature{}, refuse("Call sign_plan: a person signs the plan again.", err.Error(), "nothing was executed")
	}
	if !ok || sig.Digest != f.Digest {
		reasons := []string{fmt.Sprintf("the plan of round %s (digest %s, revision %d) is not signed", roundID, f.Digest, f.Revision)}
		if ok {
			reasons = append(reasons, "the round's latest plan signature ("+sig.ID+" by "+sig.Principal+") binds digest "+sig.Digest)
		}
		if files.ListsPlanSignature(roundID, f.Digest) {
			reasons = append(reasons, "rounds/"+roundID+"/plan-signatures.json lists a signature of this digest, but the server holds no signature of it that verifies: that file is a report for people, never a proof")
		}
		return plan.Fleet{}, PlanSignature{}, refuse("Call sign_plan: a person signs the plan digest (mcp-patch approve shows its summary) before the first cordon.",
			append(reasons, "nothing was executed")...)
	}
	return f, sig, nil
}

// CheckReviewed is the plan's rule before a destructive window step of
// tool: the round's plan signed (SignedPlan), and the step's live plan p
// equal to its node's reviewed plan; a drift refuses with the diff and
// asks for a re-plan of that node. A tool the plan does not bind is not
// held to it.
func CheckReviewed(ctx context.Context, files PlanFiles, roundID, tool string, p Plan) error {
	if _, ok := ReviewedStep(tool); !ok {
		return nil
	}
	f, _, err := SignedPlan(ctx, files, roundID)
	if err != nil {
		return err
	}
	return DecideReviewed(f, roundID, p)
}

// DecideReviewed holds a step's live plan p to its node's plan in the
// signed plan f of round roundID. Pure.
func DecideReviewed(f plan.Fleet, roundID string, p Plan) error {
	reviewed, ok := f.Node(p.Target())
	if !ok {
		return refuse("Plan the round again: this node is not in its plan.", p.Target()+" is not in the reviewed plan of round "+roundID, "nothing was executed")
	}
	live, step, ok := LiveNode(reviewed, p)
	if !ok {
		return nil
	}
	if cs := f.DriftInFleet(live, step); len(cs) > 0 {
		return refuse("Call replan_node for "+p.Target()+": it reads the node again and writes the new plan; a person signs only what changed (sign_plan).",
			append(plan.FormatDrift(p.Target(), cs), "nothing was executed")...)
	}
	return nil
}

// KeptWindowApproval is a node's latest window approval that the server
// kept when approve_window verified it, verified again now.
type KeptWindowApproval struct {
	// Digest is the window digest it binds.
	Digest string
	// Tools maps each tool it covers to the digest it binds.
	Tools map[string]string
	// Index is its place among the round's kept signatures.
	Index int
}

// DecideWindowCover says whether a node's window approval w covers
// tool's live plan p in the signed plan f, whose latest signature sig may
// have carried w over a re-plan: the node must be approved per window in
// the signed plan (never a control-plane node), and the step's live digest
// the one w binds (or, for a step a signed re-plan changed since, that
// plan's). digest is the digest the covered step binds; note says why w
// does not cover the step (the step then needs its own signature). A
// window approval that binds another digest, or that a re-plan after it
// left behind, is a Refusal. Pure.
func DecideWindowCover(f plan.Fleet, sig PlanSignature, w KeptWindowApproval, tool string, p Plan) (digest string, covered bool, note string, err error) {
	node := p.Target()
	n, inPlan := f.Node(node)
	if !inPlan || n.Approval != plan.PerWindow || n.Role == plan.RoleControlPlane {
		return "", false, node + " is approved per step in the signed plan: a window approval never covers its steps", nil
	}
	want, ok := w.Tools[tool]
	if !ok {
		return "", false, "", nil
	}
	// The window's digest changed since it was approved: only a plan
	// signature kept after the window approval carries it over.
	carried := w.Digest != n.Window
	if carried && sig.Index < w.Index {
		return "", false, "", refuse("Call approve_window again: the node was re-planned after its window was approved.",
			"the window approval of "+node+" binds window digest "+w.Digest+", the plan now has "+n.Window, "nothing was executed")
	}
	if carried && tool != "drain_node" {
		// Carried over, the steps are bound to the signed re-plan's
		// digests. A changed drain is left out: its preview digest is only
		// known at the drain, so it stays bound to the window approval's
		// and asks for its own signature when it differs.
		want = WindowTools(n, "")[tool]
	}
	got := WindowBound(p)
	if got != want {
		return "", false, "", refuse("Call replan_node for "+node+", then approve its window again.",
			fmt.Sprintf("%s on %s: the live plan digest %s differs from %s, which the window approval binds", tool, node, got, want), "nothing was executed")
	}
	return got, true, "", nil
}

// PlanCall is a call the plan needs before a window step: the tool, the
// node it names ("" for a fleet-wide call) and why, in a person's words.
type PlanCall struct {
	Tool string
	Node string
	Why  string
}

// DecidePlanNextCall puts the plan's own calls before a window step of
// tool on node in round roundID that SignedPlan or the window approval
// would refuse without them: plan_round while the round has no plan
// (hasPlan false) or its plan h has blockers, sign_plan while the plan's
// digest is not the one the latest kept plan signature binds (signed: that
// digest, "" for none), approve_window before the drain of a node approved
// per window whose kept window approval is not of the plan's window
// (windowDigest: the window digest it binds, "" for none). ok is false
// when the step's own call stands. Pure but for what signed and
// windowDigest read, each only when the rule needs it.
func DecidePlanNextCall(roundID string, h plan.Header, hasPlan bool, signed func() string, windowDigest func(node string) string, tool, node string) (PlanCall, bool) {
	if _, ok := ReviewedStep(tool); !ok {
		return PlanCall{}, false
	}
	if !hasPlan {
		return PlanCall{Tool: "plan_round", Why: "Round " + roundID + " has no reviewed plan: plan_round writes it, a person signs it (sign_plan), and only then may a window step run."}, true
	}
	if !h.Ready() {
		return PlanCall{Tool: "plan_round", Why: "The plan has blockers: run plan_round again once they are fixed."}, true
	}
	if sig := signed(); sig == "" || sig != h.Digest {
		return PlanCall{Tool: "sign_plan", Why: "A person reads rounds/" + roundID + "/plan.md and signs the plan (sign_plan) before the first cordon."}, true
	}
	if tool == "drain_node" {
		if n, ok := h.Node(node); ok && n.Approval == plan.PerWindow && windowDigest(n.Node) != n.Window {
			return PlanCall{Tool: "approve_window", Node: n.Node, Why: "A person approves the whole window of " + n.Node + " with one signature (approve_window)."}, true
		}
	}
	return PlanCall{}, false
}
