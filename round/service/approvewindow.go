package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// WindowApproved is a node's window approval as approve_window answers it.
type WindowApproved struct {
	// Tools are each covered tool and the plan digest it must show live.
	Tools      map[string]string
	Principal  string
	ApprovalID string
	// Already is set when a kept approval of the same window, by one the
	// intent lets sign the node's steps, verifies now: nothing was signed
	// or recorded.
	Already bool
}

// ApproveWindow approves node's whole window in the open round where the
// plan allows it (window.AdmitWindowApproval): one signature bound to
// each step's digest, decided from the live drain preview. Without an
// approval it answers a NeedApproval with the request to sign; with one
// it verifies it, keeps it, uses it up and writes the window's signature.
func (d *Service) ApproveWindow(ctx context.Context, node, approval string) (WindowApproved, error) {
	if err := ValidNode(node); err != nil {
		return WindowApproved{}, err
	}
	s, err := d.OpenRound()
	if err != nil {
		return WindowApproved{}, err
	}
	f, ok, err := d.FleetPlanShared(s.ID)
	if err != nil || !ok {
		return WindowApproved{}, answer.Refuse("Call plan_round first: it writes the plan.", "round "+s.ID+" has no usable plan document")
	}
	n, err := window.AdmitWindowApproval(f, s.ID, node)
	if err != nil {
		return WindowApproved{}, err
	}
	if _, _, err := d.SignedPlan(ctx, s.ID); err != nil {
		return WindowApproved{}, err
	}
	rule, err := d.StepPrincipals(s.ID, node)
	if err != nil {
		return WindowApproved{}, err
	}
	// Approved means a kept signature of this window verifies now, by
	// one the intent lets sign the node's steps.
	if wp, ok, err := d.LatestProof(ctx, s.ID, "approve_window", node); err == nil && ok && wp.Digest == n.Window && wp.RequirePrincipals(rule.Names) == nil {
		return WindowApproved{Tools: WindowToolsOf(wp.Summary), Principal: wp.Principal, Already: true}, nil
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return WindowApproved{}, err
	}
	pv, err := drain.Preview(ctx, kc.Kube, node, preflight.DrainPolicy(s.Settings))
	if err != nil {
		return WindowApproved{}, answer.Fail("Check the node name and the API server.", "preview drain: "+err.Error())
	}
	wa, err := window.DecideWindowApproval(f, s.ID, n, pv)
	if err != nil {
		return WindowApproved{}, err
	}
	bind := Binding{Node: node, Round: s.ID, Digest: wa.Digest, Summary: wa.Summary, Principals: rule.Names}
	if d.Approvals == nil {
		return WindowApproved{}, answer.Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
	}
	approval, fromInbox := d.givenOrInbox(approval, s.ID, node, "approve_window")
	if approval == "" {
		err := d.RequestApproval("approve_window", bind)
		var n *NeedApproval
		if errors.As(err, &n) && len(rule.Names) > 0 {
			n.Notes = append(n.Notes, "who signs: "+rule.Words())
		}
		return WindowApproved{}, err
	}
	a, err := d.Approvals.Verify(ctx, approval, "approve_window", bind)
	if err != nil && fromInbox {
		return WindowApproved{}, answer.Refuse("Ask a person to sign a new request: call approve_window without the approval to get it.",
			d.inboxRefused(s.ID, node, "approve_window", err), rule.Words(), "nothing was recorded")
	}
	if errors.Is(err, policy.ErrPrincipalNotAllowed) {
		return WindowApproved{}, answer.Refuse("Ask "+strings.Join(rule.Names, " or ")+" to sign the request: call approve_window without the approval to get it.",
			"approval refused: "+err.Error(), rule.Words(), "nothing was recorded")
	}
	if err != nil {
		return WindowApproved{}, answer.Refuse("Ask a person to sign a new request: call approve_window without the approval to get it.", "approval refused: "+err.Error(), "nothing was recorded")
	}
	// The kept approval carries what its report says: the report is
	// rendered from what the server kept.
	ws := WindowSignature{Node: node, Window: n.Window, Principal: a.Principal, ApprovalID: a.ID, Tools: wa.Tools, Time: d.Clock().UTC()}
	kept, err := json.Marshal(ws)
	if err != nil {
		return WindowApproved{}, fmt.Errorf("record the window approval: %w", err)
	}
	if err := d.KeepProof(s.ID, Proof{Tool: "approve_window", Node: node, ApprovalID: a.ID, Approval: a.Text, Plan: kept}); err != nil {
		return WindowApproved{}, answer.Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was recorded")
	}
	if err := d.Approvals.Consume(ctx, a); err != nil {
		why := "approval could not be used: " + err.Error()
		if fromInbox {
			why = d.inboxRefused(s.ID, node, "approve_window", err)
		}
		return WindowApproved{}, answer.Refuse("Ask a person to sign a new request.", why, "nothing was recorded")
	}
	d.inboxUsed(s.ID, node, "approve_window")
	if err := d.SaveWindowSignature(s.ID, ws); err != nil {
		return WindowApproved{}, fmt.Errorf("record the window approval: %w", err)
	}
	return WindowApproved{Tools: wa.Tools, Principal: a.Principal, ApprovalID: a.ID}, nil
}
