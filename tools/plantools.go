package tools

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// PlanStatus is the reviewed plan at a glance: its digest, whether a
// person signed it, and how many signatures the round needs.
type PlanStatus struct {
	Digest   string `json:"digest"`
	Revision int    `json:"revision"`
	Signed   bool   `json:"signed"`
	SignedBy string `json:"signed_by,omitempty"`
	// Signatures is what the round needs as the intent sizes approvals;
	// PerStepSignatures the same with one signature per destructive step.
	Signatures        int       `json:"signatures"`
	PerStepSignatures int       `json:"per_step_signatures"`
	WindowsApproved   []string  `json:"windows_approved,omitempty"`
	Blockers          []string  `json:"blockers,omitempty"`
	Summary           []string  `json:"summary"`
	Files             []string  `json:"files"`
	signedAt          time.Time `json:"-"`
}

func (d *Deps) planStatus(id string) (*PlanStatus, error) {
	f, ok, err := d.fleetPlan(id)
	if err != nil || !ok {
		return nil, err
	}
	ps, err := d.planSignatures(id)
	if err != nil {
		return nil, err
	}
	st := &PlanStatus{Digest: f.Digest, Revision: f.Revision, Signatures: f.Signatures, PerStepSignatures: f.PerStepSignatures,
		Summary: f.Summary, Files: []string{"rounds/" + id + "/" + fleetPlanMD, "rounds/" + id + "/" + fleetPlanFile}}
	if sig, ok := ps.signedFor(f.Digest); ok {
		st.Signed, st.SignedBy, st.signedAt = true, sig.Principal, sig.Time
	}
	for _, n := range f.Nodes {
		if w, ok := ps.Windows[n.Node]; ok && w.Window == n.Window {
			st.WindowsApproved = append(st.WindowsApproved, n.Node)
		}
	}
	for _, b := range f.Blockers {
		st.Blockers = append(st.Blockers, b.String())
	}
	return st, nil
}

// ---- show_plan ----

// ShowPlanIn optionally names a round.
type ShowPlanIn struct {
	Round string `json:"round,omitempty" jsonschema:"a round id; default the open round"`
}

// ShowPlanOut is the reviewed plan.
type ShowPlanOut struct {
	Result
	Plan   *PlanStatus `json:"plan,omitempty"`
	Nodes  []plan.Node `json:"nodes"`
	Table  string      `json:"table" jsonschema:"the plan as a readable table"`
	Detail string      `json:"markdown" jsonschema:"plan.md as committed"`
}

// ShowPlan is the show_plan tool.
func ShowPlan() Tool {
	return New[ShowPlanIn, ShowPlanOut](Spec{
		Name:  "show_plan",
		Title: "Show the round's plan",
		Description: "Show the plan people review (rounds/<id>/plan.md and plan.json, written by plan_round): the order with " +
			"reasons, per node the running and target kernel, the packages that move (kernel, NVIDIA, Kubernetes, other), the GRUB " +
			"entries of the trial boot, what its drain evicts, what runs there, risks and blockers; whether a person signed it and " +
			"how many signatures the round needs. Changes nothing.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in ShowPlanIn, p Progress) (ShowPlanOut, error) {
		if d.Book == nil {
			return ShowPlanOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		id := in.Round
		if id == "" {
			if id = d.Book.CurrentID(); id == "" {
				return ShowPlanOut{}, Refuse("Name the round, or plan one first (plan_round).", "no round is open")
			}
		} else if !round.ValidRoundID(id) {
			return ShowPlanOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", id))
		}
		f, ok, err := d.fleetPlan(id)
		if err != nil {
			return ShowPlanOut{}, Refuse("Call plan_round again: it writes the plan afresh.", err.Error())
		}
		if !ok {
			return ShowPlanOut{}, Refuse("Call plan_round: it runs the fleet-wide preflight and writes the plan.", "round "+id+" has no plan document")
		}
		st, err := d.planStatus(id)
		if err != nil {
			return ShowPlanOut{}, err
		}
		var tb, md bytes.Buffer
		if err := plan.Text(&tb, f); err != nil {
			return ShowPlanOut{}, err
		}
		if err := plan.Markdown(&md, f); err != nil {
			return ShowPlanOut{}, err
		}
		out := ShowPlanOut{Plan: st, Nodes: f.Nodes, Table: tb.String(), Detail: md.String()}
		out.Reasons = append(out.Reasons, f.Summary...)
		switch {
		case !f.Ready():
			out.NextAction = "Fix the blockers, then call plan_round again."
		case !st.Signed:
			out.NextAction = "A person reads plan.md and signs the plan: call sign_plan."
		default:
			out.NextAction = "The plan is signed (" + st.SignedBy + "): call round_status for the next step."
		}
		return out, nil
	})
}

// ---- sign_plan ----

// SignPlanIn carries the person's signature of the plan digest.
type SignPlanIn struct {
	ApprovalArg
}

// SignPlanOut is the recorded signature.
type SignPlanOut struct {
	Result
	Plan *PlanStatus `json:"plan,omitempty"`
}

// SignPlan is the sign_plan tool.
func SignPlan() Tool {
	return New[SignPlanIn, SignPlanOut](Spec{
		Name:  "sign_plan",
		Title: "Sign the round's plan",
		Description: "Record a person's signature of the plan digest (rounds/<id>/plan.json), which the first cordon needs. Without " +
			"approval it answers approval_required with the plan summary in plain words; `mcp-patch approve` shows it. After a " +
			"re-plan the request lists only what changed since the last signature. Writes the signature beside the plan and commits it.",
		Kind: Write, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in SignPlanIn, p Progress) (SignPlanOut, error) {
		s, err := d.openSession()
		if err != nil {
			return SignPlanOut{}, err
		}
		f, ok, err := d.fleetPlan(s.id)
		if err != nil {
			return SignPlanOut{}, Refuse("Call plan_round again: it writes the plan afresh.", err.Error())
		}
		if !ok {
			return SignPlanOut{}, Refuse("Call plan_round first: it writes the plan to sign.", "round "+s.id+" has no plan document")
		}
		if !f.Ready() {
			var why []string
			for _, b := range f.Blockers {
				why = append(why, b.String())
			}
			return SignPlanOut{}, Refuse("Fix the blockers and call plan_round again; a plan with blockers cannot be signed.", why...)
		}
		ps, err := d.planSignatures(s.id)
		if err != nil {
			return SignPlanOut{}, err
		}
		if sig, ok := ps.signedFor(f.Digest); ok {
			st, err := d.planStatus(s.id)
			if err != nil {
				return SignPlanOut{}, err
			}
			return SignPlanOut{Plan: st, Result: Result{Reasons: []string{"the plan " + f.Digest + " is already signed by " + sig.Principal}}}, nil
		}
		var changed []string
		if n := len(ps.Plan); n > 0 {
			changed = planChanges(ps.Plan[n-1].Nodes, f)
		}
		bind := Plan{Node: window.FleetTarget, Round: s.id, Digest: f.Digest, Summary: planSummary(f, changed)}
		if d.Approvals == nil {
			return SignPlanOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		if in.Approval == "" {
			return SignPlanOut{}, d.requestApproval("sign_plan", bind)
		}
		a, err := d.Approvals.Verify(ctx, in.Approval, "sign_plan", bind)
		if err != nil {
			return SignPlanOut{}, Refuse("Ask a person to sign a new request: call sign_plan without the approval to get it.", "approval refused: "+err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return SignPlanOut{}, Refuse("Ask a person to sign a new request.", "approval could not be used: "+err.Error(), "nothing was recorded")
		}
		sig := planSignature{Digest: f.Digest, Revision: f.Revision, Principal: a.Principal, ApprovalID: a.ID,
			Time: d.now().UTC(), Nodes: stepDigests(f), Changed: changed}
		ps.Plan = append(ps.Plan, sig)
		carryWindows(&ps, f, sig)
		if err := d.savePlanSignatures(s.id, ps); err != nil {
			return SignPlanOut{}, fmt.Errorf("record the plan signature: %w", err)
		}
		out := SignPlanOut{Result: Result{Reasons: []string{fmt.Sprintf("plan %s (revision %d) signed by %s", f.Digest, f.Revision, a.Principal)}}}
		out.approvalID = a.ID
		if c, err := d.commitRound(ctx, s, "plan signed"); err == nil {
			out.Reasons = append(out.Reasons, "signature committed ("+short(c)+")")
		} else {
			out.Reasons = append(out.Reasons, "signature not committed: "+err.Error())
		}
		if out.Plan, err = d.planStatus(s.id); err != nil {
			return out, err
		}
		out.NextAction = "Call round_status: the first window may start."
		return out, nil
	})
}

// requestApproval answers approval_required for a request that binds p.
func (d *Deps) requestApproval(tool string, p Plan) error {
	text, exp, err := d.Approvals.Request(tool, p)
	if err != nil {
		return fmt.Errorf("build approval request: %w", err)
	}
	return &needApproval{ApprovalNeeded{Request: text, Summary: p.Summary,
		Command:    "mcp-patch approve request.txt   (save the request text as request.txt; prints the approval to hand back)",
		AltCommand: "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 request.txt && cat request.txt request.txt.sig   (hand back the whole output)",
		ExpiresAt:  exp.UTC().Format(time.RFC3339)}}
}

// ---- approve_window ----

// ApproveWindowIn is the node whose whole window a person approves.
type ApproveWindowIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"a GPU server whose window the intent lets one signature approve (approvals.gpu_servers: per_window)"`
}

// ApproveWindowOut is the recorded window approval.
type ApproveWindowOut struct {
	Result
	Tools map[string]string `json:"tools,omitempty" jsonschema:"each covered tool and the plan digest it must show live"`
}

// ApproveWindow is the approve_window tool.
func ApproveWindow() Tool {
	return New[ApproveWindowIn, ApproveWindowOut](Spec{
		Name:  "approve_window",
		Title: "Approve a node's whole window",
		Description: "Where the intent sizes approvals per window (approvals.gpu_servers: per_window), record one signature for a GPU " +
			"server's whole window, bound to every step digest of that node in the signed plan (drain preview, package plan, GRUB " +
			"entries, promote target). Each step then runs without its own signature as long as its live plan equals those digests, " +
			"and is refused the moment any of them drifts. Control-plane nodes always need a signature per step.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in ApproveWindowIn, p Progress) (ApproveWindowOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return ApproveWindowOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return ApproveWindowOut{}, err
		}
		f, ok, err := d.fleetPlan(s.id)
		if err != nil || !ok {
			return ApproveWindowOut{}, Refuse("Call plan_round first: it writes the plan.", "round "+s.id+" has no usable plan document")
		}
		n, ok := f.Node(in.Node)
		if !ok {
			return ApproveWindowOut{}, Refuse("Name a node of the round's plan.", in.Node+" is not in the plan of round "+s.id)
		}
		if n.Approval != plan.PerWindow {
			return ApproveWindowOut{}, Refuse("Approve each step of this node on its own (the intent sizes it per step).",
				in.Node+" is approved per step: "+n.Role+" nodes, or the intent's approvals.gpu_servers is per_step")
		}
		if _, _, err := d.signedPlan(s.id); err != nil {
			return ApproveWindowOut{}, err
		}
		ps, err := d.planSignatures(s.id)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		if w, ok := ps.Windows[in.Node]; ok && w.Window == n.Window {
			return ApproveWindowOut{Tools: w.Tools, Result: Result{Reasons: []string{"the window of " + in.Node + " is already approved by " + w.Principal}}}, nil
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		pv, err := drain.Preview(ctx, kc.Kube, in.Node, drainPolicyOf(s.settings))
		if err != nil {
			return ApproveWindowOut{}, Fail("Check the node name and the API server.", "preview drain: "+err.Error())
		}
		dp := window.DrainPlan{Node: in.Node, PreviewDigest: pv.Digest}
		for _, e := range pv.Evict {
			dp.Evict = append(dp.Evict, "evict "+e.String()+" ("+strings.ToLower(e.OwnerKind)+" "+e.OwnerName+")")
		}
		live, _, _ := liveNode(n, dp)
		if cs := f.DriftInFleet(live, plan.StepDrain); len(cs) > 0 {
			return ApproveWindowOut{}, Refuse("Call replan_node for "+in.Node+" first.", plan.FormatDrift(in.Node, cs)...)
		}
		tools := windowTools(n, pv.Digest)
		summary := []string{fmt.Sprintf("one signature for the whole window of %s (%s -> %s) in round %s, plan revision %d", in.Node,
			orDash(n.Running), orDash(n.Target), s.id, f.Revision)}
		for _, t := range []string{"drain_node", "install_updates", "fallback_drill", "trial_boot", "promote_kernel"} {
			if dg, ok := tools[t]; ok {
				summary = append(summary, t+" bound to "+dg)
			}
		}
		summary = append(summary, fmt.Sprintf("drain evicts %d pods of %d workloads; %d packages move; trial boot %s, default stays %s",
			len(pv.Evict), len(n.Drain.Workloads), n.Packages.Count(), orDash(n.Grub.New), orDash(n.Grub.Old)),
			"any step whose live plan differs from these digests is refused", "window digest "+n.Window)
		bind := Plan{Node: in.Node, Round: s.id, Digest: n.Window, Summary: summary}
		if d.Approvals == nil {
			return ApproveWindowOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		if in.Approval == "" {
			return ApproveWindowOut{}, d.requestApproval("approve_window", bind)
		}
		a, err := d.Approvals.Verify(ctx, in.Approval, "approve_window", bind)
		if err != nil {
			return ApproveWindowOut{}, Refuse("Ask a person to sign a new request: call approve_window without the approval to get it.", "approval refused: "+err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return ApproveWindowOut{}, Refuse("Ask a person to sign a new request.", "approval could not be used: "+err.Error(), "nothing was recorded")
		}
		ps.Windows[in.Node] = windowSignature{Node: in.Node, Window: n.Window, Principal: a.Principal, ApprovalID: a.ID, Tools: tools, Time: d.now().UTC()}
		if err := d.savePlanSignatures(s.id, ps); err != nil {
			return ApproveWindowOut{}, fmt.Errorf("record the window approval: %w", err)
		}
		out := ApproveWindowOut{Tools: tools, Result: Result{Reasons: []string{"the window of " + in.Node + " is approved by " + a.Principal},
			NextAction: "drain_node " + in.Node + " (no further signature while its live plan matches)."}}
		out.approvalID = a.ID
		return out, nil
	})
}

// ---- replan_node ----

// ReplanIn is the node to plan again.
type ReplanIn struct {
	Node string `json:"node" jsonschema:"the node whose live state differs from the reviewed plan"`
}

// ReplanOut is the new plan revision.
type ReplanOut struct {
	Result
	Changed []plan.Step `json:"changed" jsonschema:"the steps whose digest changed: only they need signing again"`
	Plan    *PlanStatus `json:"plan,omitempty"`
}

// ReplanNode is the replan_node tool.
func ReplanNode() Tool {
	return New[ReplanIn, ReplanOut](Spec{
		Name:  "replan_node",
		Title: "Plan one node again",
		Description: "Read one node again (simulate, inspect, drain preview) and replace its part of the reviewed plan: plan.md and " +
			"plan.json get a new revision, committed on the round's working branch. Only the steps whose digest changed need a new " +
			"signature: sign_plan lists just those. A node whose window has started is not re-planned.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in ReplanIn, p Progress) (ReplanOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return ReplanOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return ReplanOut{}, err
		}
		f, ok, err := d.fleetPlan(s.id)
		if err != nil || !ok {
			return ReplanOut{}, Refuse("Call plan_round: it writes the whole plan.", "round "+s.id+" has no usable plan document")
		}
		reviewed, ok := f.Node(in.Node)
		if !ok {
			return ReplanOut{}, Refuse("Name a node of the round's plan.", in.Node+" is not in the plan of round "+s.id)
		}
		st := s.j.State()
		if n := st.Node(in.Node); n != nil && n.Window != round.WindowPending {
			return ReplanOut{}, Refuse("Finish this node's window as approved, or ask a person to abort.", "the window of "+in.Node+" is "+string(n.Window)+": its plan is fixed")
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return ReplanOut{}, err
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return ReplanOut{}, err
		}
		p(0, 2, "preflight "+in.Node)
		facts := preflightFacts(ctx, h.Steps, in.Node)
		p(1, 2, "drain preview "+in.Node)
		df, evicted := drainFacts(ctx, kc, in.Node, drainPolicyOf(s.settings))
		facts.Drain = df
		var pos plan.Position
		for _, ps := range positionsOf(st.Plan.Order) {
			if ps.Node == in.Node {
				pos = ps
			}
		}
		pl := plan.Placement{}
		if inv, pla, err := d.inventoryAndPlacement(ctx, kc, s.settings); err == nil {
			pl = placementOf(pla, inv, map[string][]drain.PodRef{in.Node: evicted}, s.settings)
		}
		it := d.planIntent(s.id, s.settings, map[string]plan.Facts{in.Node: facts})
		live := plan.BuildNode(reviewed.Position, pos, facts, pl, it)
		g, changed, err := plan.Replan(f, live)
		if err != nil {
			return ReplanOut{}, err
		}
		out := ReplanOut{Changed: changed}
		if g.Digest == f.Digest {
			out.Reasons = []string{in.Node + " matches its reviewed plan: nothing changed"}
			out.Plan, err = d.planStatus(s.id)
			return out, err
		}
		if err := d.writeFleetPlan(s.id, g); err != nil {
			return out, err
		}
		out.Reasons = append(out.Reasons, fmt.Sprintf("%s re-planned: revision %d, digest %s", in.Node, g.Revision, g.Digest))
		for _, b := range live.Blockers {
			out.Reasons = append(out.Reasons, "blocker: "+b.String())
		}
		if c, err := d.commitRound(ctx, s, "re-plan of "+in.Node); err == nil {
			out.Reasons = append(out.Reasons, "plan committed ("+short(c)+")")
		} else {
			out.Reasons = append(out.Reasons, "plan not committed: "+err.Error())
		}
		if out.Plan, err = d.planStatus(s.id); err != nil {
			return out, err
		}
		out.NextAction = "A person signs only what changed: call sign_plan."
		if !g.Ready() {
			out.NextAction = "Fix the blockers on " + in.Node + ", then call replan_node again."
		}
		return out, nil
	})
}

// planNextCall puts the plan's own calls before a window step that would
// be refused without them: plan_round while the plan has blockers,
// sign_plan while its digest is unsigned, approve_window before the drain
// of a node approved per window.
func (d *Deps) planNextCall(st *round.State, nc *Call) (*Call, string) {
	if nc == nil || st.Stop != nil || st.Closed || st.Aborted || d.Book == nil {
		return nc, ""
	}
	if _, ok := toolStep[nc.Tool]; !ok {
		return nc, ""
	}
	f, ok, err := d.fleetPlan(st.RoundID)
	if err != nil || !ok {
		return nc, ""
	}
	if !f.Ready() {
		return CallTo("plan_round", "round", st.RoundID), "The plan has blockers: run plan_round again once they are fixed."
	}
	ps, err := d.planSignatures(st.RoundID)
	if err != nil {
		return nc, ""
	}
	if _, ok := ps.signedFor(f.Digest); !ok {
		return CallTo("sign_plan"), "A person reads rounds/" + st.RoundID + "/plan.md and signs the plan (sign_plan) before the first cordon."
	}
	if nc.Tool == "drain_node" {
		if n, ok := f.Node(callNode(nc)); ok && n.Approval == plan.PerWindow {
			if w, ok := ps.Windows[n.Node]; !ok || w.Window != n.Window {
				return CallTo("approve_window", "node", n.Node), "A person approves the whole window of " + n.Node + " with one signature (approve_window)."
			}
		}
	}
	return nc, ""
}
