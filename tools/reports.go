package tools

import (
	"encoding/json"
	"fmt"

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
func (d *Deps) guardedFiles(id string) (RoundFiles, reportNames, error) {
	planJSON, ok, err := d.fleetPlanBytes(id)
	switch {
	case err != nil:
		planJSON = []byte{} // unreadable: as one that does not decode, no render of it is committed
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
		r.PlanSignatures = append(r.PlanSignatures, renderPlanSignatures(planSignatures{Plan: sigs.Plan[:i+1]}))
	}
	r.WindowSignatures = map[string][][]byte{}
	for node, ws := range windowsApproved(proofs) {
		for _, w := range ws {
			r.WindowSignatures[node] = append(r.WindowSignatures[node], renderWindowSignature(w))
		}
	}
	files, names, err := d.Book.GuardedFiles(id, planJSON, r, d.Log)
	return files, reportNames{names}, err
}

// planMarkdown renders plan.md from the plan.
func planMarkdown(f plan.Fleet) ([]byte, error) { return book.PlanMarkdown(f) }

// checkPlanMD is sign_plan's rule that what people read is what they
// sign (book.CheckPlanMD).
func (d *Deps) checkPlanMD(id string, f plan.Fleet) error {
	return bookRefusal(d.Book.CheckPlanMD(id, f))
}

// plansSigned are the plan signatures this server kept, in the order it
// kept them: each sign_plan proof carries the signature it recorded.
func plansSigned(ps []proof) planSignatures {
	var out planSignatures
	for _, p := range ps {
		if p.Tool != "sign_plan" || p.Step != "" || len(p.Plan) == 0 {
			continue
		}
		var sig planSignature
		if err := json.Unmarshal(p.Plan, &sig); err != nil {
			continue
		}
		out.Plan = append(out.Plan, sig)
	}
	return out
}

// windowsApproved are, per node, the window approvals this server kept,
// in the order it kept them.
func windowsApproved(ps []proof) map[string][]windowSignature {
	out := map[string][]windowSignature{}
	for _, p := range ps {
		if p.Tool != "approve_window" || p.Step != "" || len(p.Plan) == 0 {
			continue
		}
		var ws windowSignature
		if err := json.Unmarshal(p.Plan, &ws); err != nil || ws.Node != p.Node {
			continue
		}
		out[p.Node] = append(out[p.Node], ws)
	}
	return out
}

// renderPlanSignatures is plan-signatures.json's bytes.
func renderPlanSignatures(ps planSignatures) []byte {
	b, err := json.MarshalIndent(ps, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("encode plan signatures: %v", err)) // strings, ints and times only
	}
	return append(b, '\n')
}

// renderWindowSignature is window-signatures/<node>.json's bytes.
func renderWindowSignature(ws windowSignature) []byte {
	b, err := json.MarshalIndent(ws, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("encode window signature: %v", err)) // strings and times only
	}
	return append(b, '\n')
}
