package service

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/mcp-patch/mcp-patch/round/book"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// The proofs of a round (book.Proof) are kept in the server's state
// directory by the book (round/book/proofs.go); every decision that rests
// on an earlier approval verifies its signature again (reverify).

// Proof is one kept approval.
type Proof = book.Proof

// proofStore is where this server keeps its proofs.
func (d *Service) proofStore() book.Proofs {
	s := book.Proofs{Now: d.Clock}
	if d.Config != nil && d.Config.StateDir != "" {
		s.Dir = book.ProofsDir(d.Config.StateDir)
	}
	return s
}

// KeepProof keeps the signed bytes of an approval about to be used,
// before the approval is consumed and the step acts.
func (d *Service) KeepProof(roundID string, p Proof) error { return d.proofStore().Keep(roundID, p) }

// proofs are the round's kept approvals in the order they were kept.
func (d *Service) proofs(roundID string) ([]Proof, error) { return d.proofStore().All(roundID) }

// standing is a kept approval whose signature verified again just now.
type standing struct {
	Approved
	index int // its place among the round's proofs
	Proof Proof
}

// reverify checks a kept approval again: its signature against
// allowed_signers now, its binding to tool, node and round (and digest,
// when not empty: otherwise whatever digest it signed, in the answer's
// Digest), and that it was consumed while valid.
func (d *Service) reverify(ctx context.Context, roundID string, p Proof, tool, node, digest string) (Approved, error) {
	if d.Approvals == nil {
		return Approved{}, errors.New("no allowed_signers file is configured")
	}
	return d.Approvals.Reverify(ctx, p.Approval, tool, Binding{Node: node, Round: roundID, Digest: digest})
}

// reverifier is reverify for round roundID, as the book takes it.
func (d *Service) reverifier(roundID string) book.Reverify[Approved] {
	return func(ctx context.Context, p Proof, tool, node, digest string) (Approved, error) {
		return d.reverify(ctx, roundID, p, tool, node, digest)
	}
}

// LatestProof is the last kept approval of tool on node that verifies
// again (book.Latest).
func (d *Service) LatestProof(ctx context.Context, roundID, tool, node string) (standing, bool, error) {
	ps, err := d.proofs(roundID)
	if err != nil {
		return standing{}, false, err
	}
	s, ok, err := book.Latest(ctx, ps, tool, node, d.reverifier(roundID))
	return standing{Approved: s.Approved, index: s.Index, Proof: s.Proof}, ok, err
}

// WindowToolsOf reads what a window approval binds from the summary the
// person signed ("<tool> bound to <digest>" lines, DecideWindowApproval).
func WindowToolsOf(summary []string) map[string]string {
	out := map[string]string{}
	for _, l := range summary {
		tool, dg, ok := strings.Cut(l, " bound to ")
		if _, reviewed := window.ReviewedStep(tool); ok && reviewed && !strings.ContainsRune(dg, ' ') {
			out[tool] = dg
		}
	}
	return out
}

// ApprovedDrain is the approved plan of the drain in flight on node, from
// the kept signature of its approval (approvalID, as the journal names
// it), verified again; nil when this server keeps none for it.
func (d *Service) ApprovedDrain(ctx context.Context, roundID, node, approvalID string) (*window.DrainPlan, error) {
	ps, err := d.proofs(roundID)
	if err != nil {
		return nil, err
	}
	decode := func(raw json.RawMessage) (window.DrainPlan, bool) {
		var dp window.DrainPlan
		return dp, json.Unmarshal(raw, &dp) == nil && dp.Node == node
	}
	binds := func(p Proof, a Approved, dp window.DrainPlan) bool {
		bound := a.Digest
		if p.Tool == "approve_window" {
			bound = WindowToolsOf(a.Summary)["drain_node"]
		}
		return bound == dp.PreviewDigest
	}
	return book.ApprovedPlan(ctx, ps, "drain", "drain_node", node, approvalID, decode, d.reverifier(roundID), binds)
}
