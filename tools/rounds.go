package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
)

// commitRound commits the round's record files to the intent repository's
// working branch and returns the commit hash.
func (d *Deps) commitRound(ctx context.Context, s *session, why string) (string, error) {
	r, err := d.intentRepo(s.id)
	if err != nil {
		return "", err
	}
	c, err := r.CommitFiles(ctx, fmt.Sprintf("round %s: %s", s.id, why), d.Book.Files(s.id))
	if errors.Is(err, intent.ErrNoChange) {
		return "(no change)", nil
	}
	if err != nil {
		return "", err
	}
	return c.Hash, nil
}

// ---- plan_round ----

// PlanRoundIn names the round.
type PlanRoundIn struct {
	Round string `json:"round" jsonschema:"the round id, e.g. 2026-11 (one round a month)"`
}

// PlanRoundOut is the order with its reasons, the placement it rests on,
// the baseline and the compliance clock.
type PlanRoundOut struct {
	Result
	Round     string          `json:"round"`
	Order     *round.Order    `json:"order,omitempty"`
	Placement *kube.Placement `json:"placement,omitempty"`
	Baseline  *gate.Baseline  `json:"baseline,omitempty"`
	ETA       *round.Estimate `json:"eta,omitempty"`
	// Plan is the reviewed plan written to rounds/<id>/plan.md and plan.json.
	Plan *PlanStatus `json:"plan,omitempty"`
}

// PlanRound is the plan_round tool.
func PlanRound() Tool {
	return New[PlanRoundIn, PlanRoundOut](Spec{
		Name:  "plan_round",
		Title: "Plan the round",
		Description: "Take the inventory from the cluster, find where the Postgres primary (CloudNativePG currentPrimary) and the " +
			"API VIP (kube-vip's Lease) run and pick the canary, then fix the round's order with a reason for each position: " +
			"control-plane nodes first, the one holding the primary and VIP last among them, the canary GPU server, then the " +
			"other GPU servers. Takes the stack-health baseline the gates compare against, records the plan in the round's " +
			"journal in the intent repository, and estimates when the round ends against the intent's compliance deadline. " +
			"Then the fleet-wide preflight: every node's package plan (kernel, NVIDIA, Kubernetes, other), target kernel, " +
			"NVIDIA modules for it, GRUB entry ids, /boot space and what its drain would evict now (server-side dry-run " +
			"eviction), written as rounds/<id>/plan.md and plan.json and committed; any blocker stops the round before the " +
			"first cordon, naming node and cause. A person then signs the plan (sign_plan). " +
			"Changes nothing on hosts or cluster; it writes the round's record in the intent repository (a write).",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in PlanRoundIn, p Progress) (PlanRoundOut, error) {
		if d.Book == nil {
			return PlanRoundOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		if !round.ValidRoundID(in.Round) {
			return PlanRoundOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", in.Round))
		}
		if open := d.Book.CurrentID(); open != "" && open != in.Round {
			return PlanRoundOut{}, Refuse("Finish (close or abort) round "+open+" first.", "round "+open+" is still open")
		}
		r, err := d.intentRepo(in.Round)
		if err != nil {
			return PlanRoundOut{}, err
		}
		settings, err := r.RoundSettings()
		if err != nil {
			return PlanRoundOut{}, intentError("read the intent's settings", err)
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return PlanRoundOut{}, err
		}
		p(0, 5, "inventory and placement")
		inv, pl, err := d.inventoryAndPlacement(ctx, kc, settings)
		if err != nil {
			return PlanRoundOut{}, err
		}
		var nodes []round.NodeInfo
		for _, n := range inv.Nodes {
			nodes = append(nodes, round.NodeInfo{Name: n.Name, ControlPlane: n.ControlPlane, GPU: n.GPUServer, Canary: n.Canary,
				RunningGPUPods: n.RunningGPUPods, VM: n.Machine == "vm"})
		}
		rp := round.Placement{VIPNode: pl.VIP.Node, CanaryNode: pl.Canary.Node}
		for _, pg := range pl.Postgres {
			if pg.Node != "" {
				rp.PostgresPrimaryNodes = append(rp.PostgresPrimaryNodes, pg.Node)
			}
		}
		order, err := round.PlanOrder(nodes, rp)
		if err != nil {
			return PlanRoundOut{}, Fail("Read the reason; the inventory may be incomplete.", "plan the order: "+err.Error())
		}
		soak := 48 * time.Hour
		if k := settings.Kernel; k != nil && k.SoakHours > 0 {
			soak = time.Duration(k.SoakHours) * time.Hour
		}
		j, err := d.Book.Journal(in.Round, true)
		if err != nil {
			return PlanRoundOut{}, err
		}
		s := &session{j: j, id: in.Round, settings: settings}
		if st := j.State(); st.Closed || st.Aborted {
			return PlanRoundOut{}, Refuse("Plan a new round with a new id.", "round "+in.Round+" is closed or aborted")
		}
		if j.State().Plan == nil || j.State().Admit(round.StepPlan, "", d.now()) == nil {
			if _, err := j.Plan(order, soak, round.Meta{Detail: fmt.Sprintf("%d nodes", len(order.Positions))}); err != nil {
				return PlanRoundOut{}, ruleRefusal(err)
			}
		}
		out := PlanRoundOut{Round: in.Round, Order: &order, Placement: &pl}
		p(1, 5, "baseline")
		if !j.State().BaselineTaken {
			hc := gate.HealthConfig{}
			if sh := settings.StackHealth; sh != nil {
				hc.CriticalNamespaces = sh.CriticalNamespaces
			}
			if err := s.start(round.StepBaseline, "", ""); err != nil {
				return out, err
			}
			base, err := gate.TakeBaseline(ctx, kc.Kube, hc, d.failingVerify(ctx))
			if err != nil {
				return out, errors.Join(Fail("Check the API server; a person signs resume, then plan_round again.", "take the baseline: "+err.Error()),
					s.fail(round.StepBaseline, "", err.Error()))
			}
			b, _ := json.MarshalIndent(base, "", "  ")
			if err := d.Book.WriteFile(in.Round, baselineFile, append(b, '\n')); err != nil {
				return out, err
			}
			if err := s.finish(round.StepBaseline, "", "", fmt.Sprintf("%d not-ready nodes, %d unhealthy workloads, %d failing verify", len(base.NotReadyNodes), len(base.UnhealthyWorkloads), len(base.FailingVerify))); err != nil {
				return out, err
			}
			out.Baseline = &base
		}
		p(2, 5, "estimate")
		deadline := time.Time{}
		if k := settings.Kernel; k != nil && k.ComplianceDeadlineDays.Internal > 0 {
			deadline = d.now().Add(time.Duration(k.ComplianceDeadlineDays.Internal) * 24 * time.Hour)
		}
		st := j.State()
		if est, err := round.ETA(st, st.WindowDurations(), d.now(), deadline, etaConfig(settings)); err == nil {
			out.ETA = &est
			if !deadline.IsZero() && !est.Meets {
				out.Reasons = append(out.Reasons, "the estimate does not meet the intent's compliance deadline: tell a person (escalate, do not rush)")
			}
		}
		out.Reasons = append(out.Reasons, order.Notes...)
		p(3, 5, "fleet-wide preflight")
		fl, perr := d.writePlanDocument(ctx, kc, s, preflightInput{round: in.Round, order: order, inv: inv, placement: pl, settings: settings}, p)
		if perr == nil {
			out.Plan, perr = d.planStatus(in.Round)
		}
		p(4, 5, "commit")
		if c, err := d.commitRound(ctx, s, "plan"); err == nil {
			out.Reasons = append(out.Reasons, "plan committed to the intent repository ("+short(c)+"): rounds/"+in.Round+"/plan.md")
		} else {
			out.Reasons = append(out.Reasons, "plan not committed: "+err.Error())
		}
		if perr != nil {
			return out, perr
		}
		if !fl.Ready() {
			return out, d.stopOnBlockers(s, fl, out.Reasons)
		}
		out.Reasons = append(out.Reasons, fl.Summary...)
		out.NextAction = "A person reads rounds/" + in.Round + "/plan.md and signs the plan (sign_plan); then start with " + order.Positions[0].Node + "."
		return out, nil
	})
}

// ---- round_status ----

// RoundStatusIn optionally names a round.
type RoundStatusIn struct {
	Round string `json:"round,omitempty" jsonschema:"a round id; default the open round"`
}

// RoundStatusOut is where the round stands.
type RoundStatusOut struct {
	Result
	Round *round.Status   `json:"round,omitempty"`
	ETA   *round.Estimate `json:"eta,omitempty"`
	Table string          `json:"table" jsonschema:"the per-node step table as text"`
	// Maintenance is set when the intent declares maintenance windows.
	Maintenance *MaintenanceView `json:"maintenance,omitempty" jsonschema:"where the round stands against the intent's maintenance windows"`
	// Plan is the reviewed plan: its digest, signature and signature count.
	Plan *PlanStatus `json:"plan,omitempty"`
}

// RoundStatus is the round_status tool.
func RoundStatus() Tool {
	return New[RoundStatusIn, RoundStatusOut](Spec{
		Name:  "round_status",
		Title: "Round status",
		Description: "Say exactly where the round stands, from its journal: the phase, the open window, each node's steps, a stop " +
			"and why, steps left in flight by a crash that must be re-checked, the soak's end, and what to do next. Also the ETA " +
			"against the compliance deadline. Changes nothing.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in RoundStatusIn, p Progress) (RoundStatusOut, error) {
		if d.Book == nil {
			return RoundStatusOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		var st *round.State
		var sess *session
		if in.Round != "" {
			if !round.ValidRoundID(in.Round) {
				return RoundStatusOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", in.Round))
			}
			s, _, err := round.ReadState(d.Book.dir(in.Round))
			if err != nil {
				return RoundStatusOut{}, Refuse("Name a round that exists under rounds/ in the intent repository.", "round "+in.Round+": "+err.Error())
			}
			st = s
		} else {
			s, err := d.openSession()
			if err != nil {
				return RoundStatusOut{}, err
			}
			st, sess = s.j.State(), s
		}
		status := st.Status(d.now())
		_, mv, restricted, merr := sess.maintenance(d.now())
		if merr != nil {
			return RoundStatusOut{}, Refuse("Fix the maintenance section of os-layer/settings.yaml.", merr.Error())
		}
		if restricted {
			applyMaintenance(&status, mv)
		}
		var tb strings.Builder
		_ = round.RenderStatusText(&tb, status)
		out := RoundStatusOut{Round: &status, Table: tb.String(), Result: Result{NextAction: status.NextAction, NextCall: nextCall(st, status)}}
		if restricted {
			out.Maintenance = &mv
		}
		if nc, why := d.planNextCall(st, out.NextCall); why != "" {
			out.NextCall, out.NextAction = nc, why
		}
		if ps, err := d.planStatus(st.RoundID); err == nil && ps != nil {
			out.Plan = ps
			out.Reasons = append(out.Reasons, fmt.Sprintf("the plan (revision %d) needs %d signatures (%d with one per step); signed: %v", ps.Revision, ps.Signatures, ps.PerStepSignatures, ps.Signed))
		}
		if st.Plan != nil {
			if est, err := round.ETA(st, st.WindowDurations(), d.now(), time.Time{}, etaConfig(sess.settingsOrZero())); err == nil {
				out.ETA = &est
			}
		}
		if status.Stop != nil {
			out.Reasons = append(out.Reasons, "stopped at "+where(status.Stop.Step, status.Stop.Node)+": "+status.Stop.Reason)
		}
		for _, t := range status.NeedsRecheck {
			out.Reasons = append(out.Reasons, fmt.Sprintf("%s on %s was in flight when the server stopped: call its tool again to re-check it", t.Step, t.Node))
		}
		return out, nil
	})
}

// ---- record_decision ----

// DecisionIn is a decision that belongs to a person.
type DecisionIn struct {
	Decision      string `json:"decision" jsonschema:"what the person decided"`
	Node          string `json:"node,omitempty" jsonschema:"the node it concerns (default: where the round stopped)"`
	Step          string `json:"step,omitempty" jsonschema:"for residual_risk_accepted: the failed check accepted"`
	Reason        string `json:"reason,omitempty" jsonschema:"the person's reason, plain ASCII"`
	ReviewTrigger string `json:"review_trigger,omitempty" jsonschema:"for residual_risk_accepted: when to review it again, <event>:<value>, e.g. driver-version-change:550.90.07"`
	Attestation   string `json:"attestation,omitempty" jsonschema:"the signed statement a person handed back; omit it to get the statement to sign"`
}

// DecisionOut is the recorded decision.
type DecisionOut struct {
	Result
	Principal string `json:"principal,omitempty"`
}

var decisionKinds = map[string]struct {
	kind policy.Kind
	name round.DecisionName
}{
	"resume":                    {policy.KindRoundResume, round.DecisionResume},
	"abort":                     {policy.KindRoundAbort, round.DecisionAbort},
	"hypervisor_snapshot_taken": {policy.KindHypervisorSnapshotTaken, round.DecisionHypervisorSnapshotTaken},
	"residual_risk_accepted":    {policy.KindResidualRiskAccepted, round.DecisionResidualRiskAccepted},
}

// RecordDecision is the record_decision tool.
func RecordDecision() Tool {
	return New[DecisionIn, DecisionOut](Spec{
		Name:  "record_decision",
		Title: "Record a person's decision",
		Description: "Record a decision that belongs to a person, as a statement they signed with their SSH key: resume or abort a " +
			"stopped round; hypervisor_snapshot_taken for a VM node (needed before install there); residual_risk_accepted with " +
			"a reason and a review trigger (e.g. the NVIDIA driver container's userland, flagged again at every driver version " +
			"change). Without the signed statement it answers approval_required with the text to sign.",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in DecisionIn, p Progress) (DecisionOut, error) {
		dk, ok := decisionKinds[in.Decision]
		if !ok {
			return DecisionOut{}, Refuse("Use resume, abort, hypervisor_snapshot_taken or residual_risk_accepted.", fmt.Sprintf("unknown decision %q", in.Decision))
		}
		s, err := d.openSession()
		if err != nil {
			return DecisionOut{}, err
		}
		st := s.j.State()
		node := in.Node
		if node == "" && st.Stop != nil {
			node = st.Stop.Node
		}
		if node == "" {
			if dk.kind == policy.KindResidualRiskAccepted {
				node = round.FleetWide
			} else if st.Stop != nil || dk.kind != policy.KindHypervisorSnapshotTaken {
				node = firstNode(st)
			}
		}
		if node != round.FleetWide {
			if err := ValidNode(node); err != nil {
				return DecisionOut{}, err
			}
		}
		step := round.Step(in.Step)
		if dk.name == round.DecisionResume && step == "" && st.Stop != nil {
			step = st.Stop.Step
		}
		binding := policy.AttestationFields{Node: node, Round: s.id, Reason: in.Reason, ReviewTrigger: in.ReviewTrigger}
		if dk.kind == policy.KindRoundResume || dk.kind == policy.KindRoundAbort {
			binding.Step, binding.Stop = policy.NoStop, policy.NoStop
			if st.Stop != nil {
				if step != "" && step != st.Stop.Step {
					return DecisionOut{}, Refuse(fmt.Sprintf("Leave step out: a %s answers the stop at %s.", in.Decision, st.Stop.Step),
						fmt.Sprintf("the round stopped at %s, not %s", st.Stop.Step, step))
				}
				binding.Step, binding.Stop = string(st.Stop.Step), st.Stop.Binding()
			}
		}
		if err := st.AdmitDecision(dk.name, node, step); err != nil {
			return DecisionOut{}, ruleRefusal(err)
		}
		if d.Approvals == nil {
			return DecisionOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		if in.Attestation == "" {
			summary := []string{fmt.Sprintf("decision %s on %s in round %s", in.Decision, node, s.id)}
			if st.Stop != nil {
				summary = append(summary, oneLine("the round stopped at "+where(st.Stop.Step, st.Stop.Node)+": "+clipText(st.Stop.Reason, 400)))
			}
			text, exp, err := d.Approvals.Attestation(dk.kind, binding, summary)
			if err != nil {
				return DecisionOut{}, Refuse("Give a reason (plain ASCII) and, for accepted risk, a review trigger like driver-version-change:550.90.07.", "cannot build the statement: "+err.Error())
			}
			return DecisionOut{}, &needApproval{ApprovalNeeded{Request: text, Summary: summary,
				Command:    "mcp-patch approve statement.txt   (save the text as statement.txt)",
				AltCommand: "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 statement.txt && cat statement.txt statement.txt.sig",
				ExpiresAt:  exp.UTC().Format(time.RFC3339)}}
		}
		a, req, err := d.Approvals.VerifyAttestation(ctx, in.Attestation, dk.kind, binding)
		if err != nil {
			return DecisionOut{}, Refuse("Ask the person to sign a fresh statement (call again without attestation).", "statement refused: "+err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return DecisionOut{}, Refuse("Ask the person to sign a fresh statement.", "statement could not be used: "+err.Error(), "nothing was recorded")
		}
		detail := fmt.Sprintf("%s by %s", in.Decision, a.Principal)
		if req.Reason != "" {
			detail += ": " + req.Reason
		}
		if req.ReviewTrigger != "" {
			detail += " (review at " + req.ReviewTrigger + ")"
		}
		if _, err := s.j.Decide(dk.name, node, step, round.Meta{ApprovalID: a.ID, Detail: detail}); err != nil {
			return DecisionOut{}, ruleRefusal(err)
		}
		next := "Call round_status: it says what comes next."
		if dk.name == round.DecisionResume && step != "" {
			next = fmt.Sprintf("Run %s on %s again.", step.Tool(), node)
		}
		return DecisionOut{Principal: a.Principal, Result: Result{Reasons: []string{detail}, NextAction: next}}, nil
	})
}

// nextCall turns the status's next step into a call: the next step's tool,
// or a step left in flight (call it again to follow or re-check it). A
// decision or a wait is not a call: a person or the clock comes first.
func nextCall(st *round.State, status round.Status) *Call {
	if nx := status.Next; nx != nil {
		switch {
		case nx.Decision != "" || !nx.WaitUntil.IsZero():
			return nil
		case nx.Step == round.StepClose:
			return CallTo("close_round")
		case nx.Step == round.StepPlan || nx.Step == round.StepBaseline:
			return CallTo("plan_round", "round", st.RoundID)
		case nx.Tool != "":
			return CallTo(nx.Tool, "node", nx.Node)
		}
		return nil
	}
	for _, n := range st.Nodes {
		for _, step := range round.NodeSteps {
			if r := n.Steps[step]; r != nil && r.State == round.InFlight {
				return CallTo(step.Tool(), "node", n.Node)
			}
		}
	}
	for _, step := range round.RoundSteps {
		if r := st.RoundSteps[step]; r != nil && r.State == round.InFlight && step != round.StepSoak && step.Tool() != "" {
			return CallTo(step.Tool())
		}
	}
	return nil
}

func firstNode(st *round.State) string {
	if st.Current != "" {
		return st.Current
	}
	if len(st.Nodes) > 0 {
		return st.Nodes[0].Node
	}
	return ""
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ---- close_round ----

// CloseRoundOut is the committed report.
type CloseRoundOut struct {
	Result
	Report   string `json:"report" jsonschema:"repository path of the round report (Markdown)"`
	Timeline string `json:"timeline" jsonschema:"repository path of the timeline picture (SVG)"`
	Commit   string `json:"commit"`
}

// CloseRound is the close_round tool.
func CloseRound() Tool {
	return New[struct{}, CloseRoundOut](Spec{
		Name:  "close_round",
		Title: "Close the round",
		Description: "Write the round report (Markdown, with each window's steps and durations, failures, decisions and kernels " +
			"before and after) and its timeline picture (SVG), commit them with the journal and audit log to the intent " +
			"repository's working branch, and close the round. It also writes the components' docs: the round's entry in " +
			"os-layer/changelog.md (date, kernel before and after per role, packages of note, deviations, link to the report) and " +
			"runbook.md edits proposed for the lessons that change a step, committed on the same branch; it refuses while they " +
			"are missing or uncommitted. Only after autoremove (or an abort).",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (CloseRoundOut, error) {
		s, err := d.openSession()
		if err != nil {
			return CloseRoundOut{}, err
		}
		st := s.j.State()
		if s.inFlight(round.StepClose, "") {
			// A close the stopped process began: finish it.
			if err := s.finish(round.StepClose, "", "", "closed (resumed)"); err != nil {
				return CloseRoundOut{}, err
			}
			c, err := d.commitRound(ctx, s, "closed")
			if err != nil {
				return CloseRoundOut{}, err
			}
			return CloseRoundOut{Report: "rounds/" + s.id + "/" + round.ReportFile, Timeline: "rounds/" + s.id + "/" + round.TimelineFile, Commit: c,
				Result: Result{Reasons: []string{"round " + s.id + " closed"}, NextAction: "Ask people to review and merge the round's working branch."}}, nil
		}
		if !st.Aborted && !st.RoundSteps[round.StepAutoremove].Green() {
			return CloseRoundOut{}, ruleRefusal(st.Admit(round.StepClose, "", d.now()))
		}
		docs, err := d.closeDocs(ctx, s)
		if err != nil {
			return CloseRoundOut{}, err
		}
		if _, _, err := s.j.WriteReport(); err != nil {
			return CloseRoundOut{}, err
		}
		c, err := d.commitRound(ctx, s, "report and findings")
		if err != nil {
			return CloseRoundOut{}, Fail("Fix the intent repository (uncommitted edits?) and call again.", "commit the report: "+err.Error())
		}
		if _, err := s.j.FindingsCommitted(c); err != nil {
			return CloseRoundOut{}, err
		}
		if err := s.begin(round.StepClose, "", ""); err != nil {
			return CloseRoundOut{}, err
		}
		if err := s.finish(round.StepClose, "", "", "closed"); err != nil {
			return CloseRoundOut{}, err
		}
		if _, _, err := s.j.WriteReport(); err != nil {
			return CloseRoundOut{}, err
		}
		c2, err := d.commitRound(ctx, s, "closed")
		if err != nil {
			return CloseRoundOut{}, Fail("Call close_round's commit again by hand: git add rounds/ and commit.", "commit the closed round: "+err.Error())
		}
		return CloseRoundOut{Report: "rounds/" + s.id + "/" + round.ReportFile, Timeline: "rounds/" + s.id + "/" + round.TimelineFile, Commit: c2,
			Result: Result{Reasons: append([]string{"round " + s.id + " closed; report and timeline committed (" + short(c2) + ")"}, docs...),
				NextAction: "Ask people to review and merge the round's working branch of the intent repository."}}, nil
	})
}

// where names a step and, for a node step, its node.
func where(step round.Step, node string) string {
	if node == "" {
		return string(step)
	}
	return string(step) + " on " + node
}
