package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/book"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// The reports the server owns in rounds/<id>/ (plan.md, plan-signatures.json,
// window-signatures/<node>.json) are guarded by the book before a commit
// names them (book.GuardedFiles); here are the renders of the signature
// reports from the kept signatures.

// reportNames are the files a commit wrote again or left out.
type reportNames struct{ book.ReportNames }

// message is the body a commit's message carries for n ("" when none).
func (n reportNames) message() string { return n.Message() }

// reasons are n in the words of a tool's answer.
func (n reportNames) reasons(id string) []string { return n.Reasons(id) }

// guardedFiles is the book's GuardedFiles for a commit of round id, with
// the round's plan.json and the signature reports rendered from the kept
// signatures. It runs under the journal's lock (Journal.Hold).
func (d *Service) guardedFiles(id string) (RoundFiles, reportNames, error) {
	planJSON, r := d.reportSources(id)
	files, names, err := d.Book.GuardedFiles(id, planJSON, r, d.Log)
	return files, reportNames{names}, err
}

// reportSources are what the reports of round id are rendered from: its
// plan.json (nil when it has none; empty when it cannot be read, as one
// that does not decode: no render of it is committed) and the signature
// reports rendered from the kept signatures.
func (d *Service) reportSources(id string) ([]byte, book.Renders) {
	planJSON, ok, err := d.fleetPlanBytes(id)
	switch {
	case err != nil:
		planJSON = []byte{}
	case !ok:
		planJSON = nil
	}
	proofs, err := d.proofs(id)
	if err != nil {
		// Without the kept signatures there is nothing to render the
		// signature reports from: none is committed.
		d.Log.Warn("the kept signatures cannot be read: the signature reports are left out of the commit", "round", id, "error", err)
		proofs = nil
	}
	var r book.Renders
	// Each signature rewrote the report with every one so far.
	sigs := plansSigned(proofs)
	for i := range sigs.Plan {
		r.PlanSignatures = append(r.PlanSignatures, renderPlanSignatures(PlanSignatures{Plan: sigs.Plan[:i+1]}))
	}
	r.WindowSignatures = map[string][][]byte{}
	for node, ws := range windowsApproved(proofs) {
		for _, w := range ws {
			r.WindowSignatures[node] = append(r.WindowSignatures[node], renderWindowSignature(w))
		}
	}
	return planJSON, r
}

// CommitAfterCall commits the record of every round this server holds
// for writing at the end of a call of a tool that is not read-only,
// after the call's audit record and its own commit: nothing the call
// wrote into the intent repository (a journal record, its audit record, a
// node file) stays uncommitted once it answers. A call that wrote nothing
// finds nothing to commit. why names the call in the commit message; the
// answer says each commit that failed, in the words of a tool's reasons.
func (d *Service) CommitAfterCall(ctx context.Context, why string) []string {
	if d.Mode == config.ModeReadOnly || d.Book == nil || d.Book.ReadOnly {
		return nil
	}
	ids := d.Book.Held()
	if len(ids) == 0 {
		return nil
	}
	// The notices and Events the call's records started land in the
	// journal first (bounded, as every commit of the round).
	sctx, cancel := context.WithTimeout(ctx, commitSettle)
	defer cancel()
	if err := d.Ops.Settle(sctx); err != nil {
		d.Log.Warn("committing the round before its notifications settled; their outcomes go into the next commit", "err", err)
	}
	var reasons []string
	for _, id := range ids {
		if err := d.commitHeld(ctx, id, why); err != nil {
			reasons = append(reasons, "the record of round "+id+" is not committed: "+err.Error())
		}
	}
	if why := d.UnpushedReason(); why != "" {
		reasons = append(reasons, why)
	}
	return reasons
}

// commitHeld commits round id's record, its journal held by this server.
func (d *Service) commitHeld(ctx context.Context, id, why string) error {
	j, err := d.Book.Journal(id, false)
	if err != nil {
		return err
	}
	_, _, err = d.commitRoundFiles(ctx, id, j, why)
	if errors.Is(err, intent.ErrNoChange) {
		return nil
	}
	return err
}

// planMarkdown renders plan.md from the plan.
func planMarkdown(f plan.Fleet) ([]byte, error) { return book.PlanMarkdown(f) }

// CheckPlanMD is sign_plan's rule that what people read is what they
// sign (book.CheckPlanMD).
func (d *Service) CheckPlanMD(id string, f plan.Fleet) error {
	return bookRefusal(d.Book.CheckPlanMD(id, f))
}

// plansSigned are the plan signatures this server kept, in the order it
// kept them: each sign_plan proof carries the signature it recorded.
func plansSigned(ps []Proof) PlanSignatures {
	var out PlanSignatures
	for _, p := range ps {
		if p.Tool != "sign_plan" || p.Step != "" || len(p.Plan) == 0 {
			continue
		}
		var sig PlanSignature
		if err := json.Unmarshal(p.Plan, &sig); err != nil {
			continue
		}
		out.Plan = append(out.Plan, sig)
	}
	return out
}

// windowsApproved are, per node, the window approvals this server kept,
// in the order it kept them.
func windowsApproved(ps []Proof) map[string][]WindowSignature {
	out := map[string][]WindowSignature{}
	for _, p := range ps {
		if p.Tool != "approve_window" || p.Step != "" || len(p.Plan) == 0 {
			continue
		}
		var ws WindowSignature
		if err := json.Unmarshal(p.Plan, &ws); err != nil || ws.Node != p.Node {
			continue
		}
		out[p.Node] = append(out[p.Node], ws)
	}
	return out
}

// renderPlanSignatures is plan-signatures.json's bytes.
func renderPlanSignatures(ps PlanSignatures) []byte {
	b, err := json.MarshalIndent(ps, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("encode plan signatures: %v", err)) // strings, ints and times only
	}
	return append(b, '\n')
}

// renderWindowSignature is window-signatures/<node>.json's bytes.
func renderWindowSignature(ws WindowSignature) []byte {
	b, err := json.MarshalIndent(ws, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("encode window signature: %v", err)) // strings and times only
	}
	return append(b, '\n')
}
