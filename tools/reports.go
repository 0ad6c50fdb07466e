package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// The reports the server owns in rounds/<id>/ are files for people that
// the server renders from what it holds itself, out of the agent's reach:
//
//   - plan.md, from plan.json (the document whose digest a person signs);
//   - state.json, from the journal's state (round.Journal writes it as a
//     snapshot, json.MarshalIndent of its state, as of its last_seq);
//   - plan-signatures.json, from the plan signatures kept in the state
//     directory (proofs/<round>.jsonl);
//   - window-signatures/<node>.json, from the window approvals kept there.
//
// The agent can write the working copy, so before a commit names them
// (under the journal's lock, guardedFiles) each is compared with what the
// server holds: a file that is a render the server made is committed as
// it is; any other content is written again from the server's state and
// named in the commit message; a file the server has nothing of its own
// to render from is left out of the commit and named. A server commit so
// never adopts an agent's edit of a report.

// reportNames are the files a commit wrote again or left out, for its
// message.
type reportNames struct {
	// Rewritten were edited behind the server: written again from its
	// state.
	Rewritten []string
	// LeftOut are present but not the server's: not committed.
	LeftOut []string
}

// message is the body a commit's message carries for n ("" when none).
func (n reportNames) message() string {
	var b strings.Builder
	if len(n.Rewritten) > 0 {
		fmt.Fprintf(&b, "Written again from the server's state over edits it did not make: %s.\n", strings.Join(clip(n.Rewritten, 20), ", "))
	}
	if len(n.LeftOut) > 0 {
		fmt.Fprintf(&b, "Left out, not written by the server: %s.\n", strings.Join(clip(n.LeftOut, 20), ", "))
	}
	return b.String()
}

// reasons are n in the words of a tool's answer.
func (n reportNames) reasons(id string) []string {
	var out []string
	for _, f := range n.Rewritten {
		out = append(out, "rounds/"+id+"/"+f+" was not what the server wrote: written again from its own state before the commit")
	}
	for _, f := range n.LeftOut {
		out = append(out, "rounds/"+id+"/"+f+" was not written by the server: left out of the commit")
	}
	return out
}

// guardedFiles is RoundBook.Files for a commit of round id, its reports
// checked first as the package comment says: what the commit is to name,
// less the reports left out, and the names for its message. It runs
// under the journal's lock (Journal.Hold): the journal appends nothing
// meanwhile, so its state is the one the book last observed.
func (d *Deps) guardedFiles(id string) (RoundFiles, reportNames, error) {
	var n reportNames
	var leftOut []string
	leave := func(name, why string) {
		n.LeftOut = append(n.LeftOut, name+why)
		leftOut = append(leftOut, d.Book.repoPath(id, name))
	}
	check := func(name string, wrote bool, err error) error {
		if err != nil {
			return fmt.Errorf("check %s of round %s: %w", name, id, err)
		}
		if wrote {
			n.Rewritten = append(n.Rewritten, name)
		}
		return nil
	}
	wrote, err := d.Book.guardState(id)
	if err := check(round.StateFile, wrote, err); err != nil {
		return RoundFiles{}, n, err
	}
	md, ok, err := d.renderedPlanMD(id)
	switch {
	case err != nil:
		// plan.json does not decode: there is no render of it to commit.
		if d.Book.exists(id, fleetPlanMD) {
			leave(fleetPlanMD, " (plan.json does not decode)")
		}
	case ok:
		wrote, err := d.Book.guardFile(id, fleetPlanMD, [][]byte{md})
		if err := check(fleetPlanMD, wrote, err); err != nil {
			return RoundFiles{}, n, err
		}
	case d.Book.exists(id, fleetPlanMD):
		leave(fleetPlanMD, "")
	}
	proofs, err := d.proofs(id)
	if err != nil {
		// Without the kept signatures there is nothing to render the
		// signature reports from: none is committed.
		d.Log.Warn("the kept signatures cannot be read: the signature reports are left out of the commit", "round", id, "error", err)
		proofs = nil
	}
	if sigs := plansSigned(proofs); len(sigs.Plan) > 0 {
		// Each signature rewrote the report with every one so far.
		var legit [][]byte
		for i := range sigs.Plan {
			legit = append(legit, renderPlanSignatures(planSignatures{Plan: sigs.Plan[:i+1]}))
		}
		wrote, err := d.Book.guardFile(id, planSignedFile, legit)
		if err := check(planSignedFile, wrote, err); err != nil {
			return RoundFiles{}, n, err
		}
	} else if d.Book.exists(id, planSignedFile) {
		leave(planSignedFile, "")
	}
	files, err := d.Book.Files(id)
	if err != nil {
		return RoundFiles{}, n, err
	}
	// The window reports the commit names: those written since the last
	// commit (after a start, every one present).
	windows := windowsApproved(proofs)
	prefix := d.Book.repoPath(id, windowSignaturesDir) + "/"
	for _, p := range files.Files {
		node, ok := strings.CutSuffix(strings.TrimPrefix(p, prefix), ".json")
		if !ok || !strings.HasPrefix(p, prefix) {
			continue
		}
		name := windowSignaturesDir + "/" + node + ".json"
		var legit [][]byte
		for _, ws := range windows[node] {
			legit = append(legit, renderWindowSignature(ws))
		}
		if len(legit) == 0 {
			leave(name, "")
			continue
		}
		wrote, err := d.Book.guardNodeFile(id, windowSignaturesDir, node, legit)
		if err := check(name, wrote, err); err != nil {
			return RoundFiles{}, n, err
		}
	}
	files.Files = slices.DeleteFunc(files.Files, func(p string) bool { return slices.Contains(leftOut, p) })
	if len(leftOut) > 0 {
		d.Log.Warn("round files not written by the server are left out of the commit", "round", id, "files", n.LeftOut)
	}
	if len(n.Rewritten) > 0 {
		d.Log.Warn("round reports edited behind the server are written again from its state", "round", id, "files", n.Rewritten)
	}
	return files, n, nil
}

// planMarkdown renders plan.md from the plan.
func planMarkdown(f plan.Fleet) ([]byte, error) {
	var md bytes.Buffer
	if err := plan.Markdown(&md, f); err != nil {
		return nil, fmt.Errorf("render plan.md: %w", err)
	}
	return md.Bytes(), nil
}

// renderedPlanMD is plan.md as the server renders it from the round's
// plan.json; ok is false when the round has no plan.json.
func (d *Deps) renderedPlanMD(id string) ([]byte, bool, error) {
	b, ok, err := d.fleetPlanBytes(id)
	if err != nil || !ok {
		return nil, false, err
	}
	sum := sha256.Sum256(b)
	r := &d.Book.reports
	r.mu.Lock()
	md, ok := r.planMD.get(id, sum)
	r.mu.Unlock()
	if ok {
		return md, true, nil
	}
	f, ok := d.Book.sharedPlan(id, sum)
	if !ok {
		if f, err = plan.Decode(b); err != nil {
			return nil, false, err
		}
		d.Book.keepPlan(id, sum, f)
	}
	if md, err = planMarkdown(f); err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	r.planMD.keep(id, sum, md)
	r.mu.Unlock()
	return md, true, nil
}

// checkPlanMD is sign_plan's rule that what people read is what they
// sign: plan.md must be the render of plan.json, whose digest the person
// signs. A plan.md that differs (or is gone) is written again from
// plan.json and the call refused, naming the first line that differed:
// a person who read the other text reads the plan again.
func (d *Deps) checkPlanMD(id string, f plan.Fleet) error {
	want, err := planMarkdown(f)
	if err != nil {
		return err
	}
	got, err := d.Book.ReadFile(id, fleetPlanMD)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Refuse("Ask a person to look at rounds/"+id+"/"+fleetPlanMD+": the server cannot read it.", err.Error(), "nothing was signed")
	}
	if err == nil && bytes.Equal(got, want) {
		return nil
	}
	why := "rounds/" + id + "/" + fleetPlanMD + " is missing"
	if err == nil {
		why = "rounds/" + id + "/" + fleetPlanMD + " is not the plan rendered from plan.json: " + firstDifference(got, want)
	}
	if werr := d.Book.WriteFile(id, fleetPlanMD, want); werr != nil {
		return Refuse("Ask a person to restore rounds/"+id+"/"+fleetPlanMD+" from plan.json (show_plan renders it).", why, "writing it again failed: "+werr.Error(), "nothing was signed")
	}
	return Refuse("A person reads the plan again (rounds/"+id+"/"+fleetPlanMD+" is written again from plan.json; mcp-patch approve shows it from plan.json), then call sign_plan again.",
		why, "plan.md was written again from plan.json", "nothing was signed")
}

// firstDifference names the first line where got differs from want.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		gl, wl := "(end of file)", "(end of file)"
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d reads %q, plan.json renders %q", i+1, clipText(gl, 200), clipText(wl, 200))
		}
	}
	return "the files differ"
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

// stateTrail is what the book saw of one round's journal: its state now,
// and the states since state.json was last found to be the server's, by
// last_seq, among which is any snapshot the journal wrote meanwhile.
type stateTrail struct {
	latest *round.State
	since  map[uint64]*round.State
	// known is the sha256 of state.json as the server last found it its
	// own (at open, the journal checked or wrote it; at a commit).
	known    [sha256.Size]byte
	hasKnown bool
}

// maxTrail bounds the states a trail keeps between two commits; a
// snapshot older than those is checked only against the known file.
const maxTrail = 1024

// bookReports is what a RoundBook keeps for its reports, under its own
// lock: a journal's observer runs under the journal's lock, and the
// book's may be held while a journal opens.
type bookReports struct {
	mu     sync.Mutex
	trails map[string]*stateTrail
	// planMD is each round's plan.md rendered from the plan.json bytes
	// whose sha256 is its key (the last).
	planMD byContent[[]byte]
}

// trail is round id's trail, created when needed. The caller holds mu.
func (r *bookReports) trail(id string) *stateTrail {
	if r.trails == nil {
		r.trails = map[string]*stateTrail{}
	}
	tr := r.trails[id]
	if tr == nil {
		tr = &stateTrail{since: map[uint64]*round.State{}}
		r.trails[id] = tr
	}
	return tr
}

// observer is round id's journal observer: it keeps the state the record
// made (shared: never changed after), then calls next, when set.
func (b *RoundBook) observer(id string, next func(round.Record, *round.State)) func(round.Record, *round.State) {
	return func(rec round.Record, st *round.State) {
		b.reports.mu.Lock()
		tr := b.reports.trail(id)
		tr.latest = st
		tr.since[st.LastSeq] = st
		if st.LastSeq > maxTrail {
			delete(tr.since, st.LastSeq-maxTrail) // records are numbered one by one
		}
		b.reports.mu.Unlock()
		if next != nil {
			next(rec, st)
		}
	}
}

// opened notes round id's journal as it opened: its state, and state.json
// as the journal left it (checked against the journal, or written again).
func (b *RoundBook) opened(id string, j *round.Journal) {
	st := j.Shared()
	disk, err := b.ReadFile(id, round.StateFile)
	b.reports.mu.Lock()
	defer b.reports.mu.Unlock()
	tr := b.reports.trail(id)
	tr.latest = st
	tr.since = map[uint64]*round.State{}
	tr.hasKnown = err == nil
	if err == nil {
		tr.known = sha256.Sum256(disk)
	}
}

// guardState checks state.json against the journal's states: the file
// as the server last found it, or a snapshot of a state the journal had
// since, is the server's and stays; anything else (or no file) is
// written again from the journal's state now. It says whether it wrote.
// The journal's lock is held (no record is appended meanwhile).
func (b *RoundBook) guardState(id string) (bool, error) {
	b.reports.mu.Lock()
	defer b.reports.mu.Unlock()
	tr := b.reports.trails[id]
	if tr == nil || tr.latest == nil {
		return false, nil // a journal this book did not open: nothing to render from
	}
	disk, err := b.ReadFile(id, round.StateFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err == nil {
		sum := sha256.Sum256(disk)
		if tr.hasKnown && sum == tr.known {
			clear(tr.since)
			return false, nil
		}
		var head struct {
			LastSeq uint64 `json:"last_seq"`
		}
		if json.Unmarshal(disk, &head) == nil {
			st := tr.since[head.LastSeq]
			if head.LastSeq == tr.latest.LastSeq {
				st = tr.latest
			}
			if st != nil {
				if want, err := snapshotBytes(st); err == nil && bytes.Equal(disk, want) {
					tr.known, tr.hasKnown = sum, true
					clear(tr.since)
					return false, nil
				}
			}
		}
	}
	want, err := snapshotBytes(tr.latest)
	if err != nil {
		return false, err
	}
	if err := b.WriteFile(id, round.StateFile, want); err != nil {
		return false, err
	}
	tr.known, tr.hasKnown = sha256.Sum256(want), true
	clear(tr.since)
	return true, nil
}

// snapshotBytes is state.json as the journal writes it for st.
func snapshotBytes(st *round.State) ([]byte, error) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", round.StateFile, err)
	}
	return append(b, '\n'), nil
}

// guardFile keeps rounds/<id>/<name> when it is one of legit (renders
// the server made, the last its render now) and writes the last over
// anything else or a missing file; it says whether it wrote.
func (b *RoundBook) guardFile(id, name string, legit [][]byte) (bool, error) {
	got, err := b.ReadFile(id, name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err == nil && slices.ContainsFunc(legit, func(l []byte) bool { return bytes.Equal(got, l) }) {
		return false, nil
	}
	return true, b.WriteFile(id, name, legit[len(legit)-1])
}

// guardNodeFile is guardFile for rounds/<id>/<folder>/<node>.json.
func (b *RoundBook) guardNodeFile(id, folder, node string, legit [][]byte) (bool, error) {
	got, err := b.ReadNodeFile(id, folder, node)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err == nil && slices.ContainsFunc(legit, func(l []byte) bool { return bytes.Equal(got, l) }) {
		return false, nil
	}
	return true, b.WriteNodeFile(id, folder, node, legit[len(legit)-1])
}

// exists says whether rounds/<id>/<name> is there (as anything).
func (b *RoundBook) exists(id, name string) bool {
	_, err := os.Lstat(filepath.Join(b.dir(id), name))
	return err == nil
}

// repoPath is rounds/<id>/<name> as a commit names it.
func (b *RoundBook) repoPath(id, name string) string { return path.Join("rounds", id, name) }
