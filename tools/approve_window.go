package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// ApproveWindowIn is the node whose whole window a person approves.
type ApproveWindowIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"a GPU server"`
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
		Title: "Approve a whole window",
		Description: "Where the intent allows it: one signature for a GPU server's whole window, bound to each step's digest; a " +
			"drifted live plan needs signing again.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in ApproveWindowIn, p Progress) (ApproveWindowOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return ApproveWindowOut{}, err
		}
		s, err := d.OpenRound()
		if err != nil {
			return ApproveWindowOut{}, err
		}
		f, ok, err := d.FleetPlanShared(s.ID)
		if err != nil || !ok {
			return ApproveWindowOut{}, Refuse("Call plan_round first: it writes the plan.", "round "+s.ID+" has no usable plan document")
		}
		n, err := window.AdmitWindowApproval(f, s.ID, in.Node)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		if _, _, err := d.SignedPlan(ctx, s.ID); err != nil {
			return ApproveWindowOut{}, err
		}
		rule, err := d.StepPrincipals(s.ID, in.Node)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		// Approved means a kept signature of this window verifies now, by
		// one the intent lets sign the node's steps.
		if wp, ok, err := d.LatestProof(ctx, s.ID, "approve_window", in.Node); err == nil && ok && wp.Digest == n.Window && wp.RequirePrincipals(rule.Names) == nil {
			return ApproveWindowOut{Tools: service.WindowToolsOf(wp.Summary), Result: Result{Reasons: []string{"the window of " + in.Node + " is already approved by " + wp.Principal}}}, nil
		}
		kc, err := d.KubeClients(ctx)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		pv, err := drain.Preview(ctx, kc.Kube, in.Node, preflight.DrainPolicy(s.Settings))
		if err != nil {
			return ApproveWindowOut{}, Fail("Check the node name and the API server.", "preview drain: "+err.Error())
		}
		wa, err := window.DecideWindowApproval(f, s.ID, n, pv)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		bind := service.Binding{Node: in.Node, Round: s.ID, Digest: wa.Digest, Summary: wa.Summary, Principals: rule.Names}
		if d.Approvals == nil {
			return ApproveWindowOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		if in.Approval == "" {
			err := d.RequestApproval("approve_window", bind)
			var n *service.NeedApproval
			if errors.As(err, &n) && len(rule.Names) > 0 {
				n.Notes = append(n.Notes, "who signs: "+rule.Words())
			}
			return ApproveWindowOut{}, err
		}
		a, err := d.Approvals.Verify(ctx, in.Approval, "approve_window", bind)
		if errors.Is(err, policy.ErrPrincipalNotAllowed) {
			return ApproveWindowOut{}, Refuse("Ask "+strings.Join(rule.Names, " or ")+" to sign the request: call approve_window without the approval to get it.",
				"approval refused: "+err.Error(), rule.Words(), "nothing was recorded")
		}
		if err != nil {
			return ApproveWindowOut{}, Refuse("Ask a person to sign a new request: call approve_window without the approval to get it.", "approval refused: "+err.Error(), "nothing was recorded")
		}
		// The kept approval carries what its report says: the report is
		// rendered from what the server kept.
		ws := service.WindowSignature{Node: in.Node, Window: n.Window, Principal: a.Principal, ApprovalID: a.ID, Tools: wa.Tools, Time: d.Clock().UTC()}
		kept, err := json.Marshal(ws)
		if err != nil {
			return ApproveWindowOut{}, fmt.Errorf("record the window approval: %w", err)
		}
		if err := d.KeepProof(s.ID, service.Proof{Tool: "approve_window", Node: in.Node, ApprovalID: a.ID, Approval: a.Text, Plan: kept}); err != nil {
			return ApproveWindowOut{}, Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return ApproveWindowOut{}, Refuse("Ask a person to sign a new request.", "approval could not be used: "+err.Error(), "nothing was recorded")
		}
		if err := d.SaveWindowSignature(s.ID, ws); err != nil {
			return ApproveWindowOut{}, fmt.Errorf("record the window approval: %w", err)
		}
		out := ApproveWindowOut{Tools: wa.Tools, Result: Result{Reasons: []string{"the window of " + in.Node + " is approved by " + a.Principal},
			NextAction: "drain_node " + in.Node + " (no further signature while its live plan matches).", NextCall: CallTo("drain_node", "node", in.Node)}}
		out.approvalID = a.ID
		return out, nil
	})
}
