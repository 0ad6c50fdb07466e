package book

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcp-patch/mcp-patch/round/plan"
)

// The reports the server owns in rounds/<id>/ are files for people that
// the server renders from what it holds itself, out of the agent's reach:
//
//   - plan.md, from plan.json (the document whose digest a person signs);
//   - plan-signatures.json, from the plan signatures kept in the state
//     directory (proofs/<round>.jsonl);
//   - window-signatures/<node>.json, from the window approvals kept there.
//
// The agent can write the working copy, so before a commit names them
// (under the journal's lock, GuardedFiles) each is compared with what the
// server holds: a file that is a render the server made is committed as
// it is; any other content is written again from the server's state and
// named in the commit message; a file the server has nothing of its own
// to render from is left out of the commit and named. A server commit so
// never adopts an agent's edit of a report. (The round's state snapshot
// is no report: it lives in the state directory, see round.SnapshotPath.)

// Renders are the server's renders of the signature reports, from the
// signatures it kept.
type Renders struct {
	// PlanSignatures are plan-signatures.json as each kept plan signature
	// rendered it, in order (the last is the render now); none: the
	// round has no kept plan signature.
	PlanSignatures [][]byte
	// WindowSignatures are, per node, window-signatures/<node>.json as
	// each kept window approval rendered it, in order.
	WindowSignatures map[string][][]byte
}

// ReportNames are the files a commit wrote again or left out, for its
// message.
type ReportNames struct {
	// Rewritten were edited behind the server: written again from its
	// state.
	Rewritten []string
	// LeftOut are present but not the server's: not committed.
	LeftOut []string
}

// Message is the body a commit's message carries for n ("" when none).
func (n ReportNames) Message() string {
	var b strings.Builder
	if len(n.Rewritten) > 0 {
		fmt.Fprintf(&b, "Written again from the server's state over edits it did not make: %s.\n", strings.Join(clip(n.Rewritten, 20), ", "))
	}
	if len(n.LeftOut) > 0 {
		fmt.Fprintf(&b, "Left out, not written by the server: %s.\n", strings.Join(clip(n.LeftOut, 20), ", "))
	}
	return b.String()
}

// Reasons are n in the words of a tool's answer.
func (n ReportNames) Reasons(id string) []string {
	var out []string
	for _, f := range n.Rewritten {
		out = append(out, "rounds/"+id+"/"+f+" was not what the server wrote: written again from its own state before the commit")
	}
	for _, f := range n.LeftOut {
		out = append(out, "rounds/"+id+"/"+f+" was not written by the server: left out of the commit")
	}
	return out
}

// clip is the first n of xs, and a count of the rest.
func clip(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(xs[:n:n], fmt.Sprintf("... and %d more", len(xs)-n))
}

// clipText cuts s to n runes, marking the cut.
func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// GuardedFiles is Files for a commit of round id, its reports checked
// first as the package comment says: what the commit is to name, less
// the reports left out, and the names for its message. planJSON is the
// round's plan.json (nil when it has none), r the signature reports'
// renders. It runs under the journal's lock (round.Journal.Hold).
func (b *Book) GuardedFiles(id string, planJSON []byte, r Renders, log *slog.Logger) (RoundFiles, ReportNames, error) {
	var n ReportNames
	var leftOut []string
	leave := func(name, why string) {
		n.LeftOut = append(n.LeftOut, name+why)
		leftOut = append(leftOut, b.RepoPath(id, name))
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
	switch md, err := b.PlanMD(id, planJSON); {
	case err != nil:
		// plan.json does not decode: there is no render of it to commit.
		if b.Exists(id, PlanMDFile) {
			leave(PlanMDFile, " (plan.json does not decode)")
		}
	case md != nil:
		wrote, err := b.guardFile(id, PlanMDFile, [][]byte{md})
		if err := check(PlanMDFile, wrote, err); err != nil {
			return RoundFiles{}, n, err
		}
	case b.Exists(id, PlanMDFile):
		leave(PlanMDFile, "")
	}
	if len(r.PlanSignatures) > 0 {
		wrote, err := b.guardFile(id, PlanSignaturesFile, r.PlanSignatures)
		if err := check(PlanSignaturesFile, wrote, err); err != nil {
			return RoundFiles{}, n, err
		}
	} else if b.Exists(id, PlanSignaturesFile) {
		leave(PlanSignaturesFile, "")
	}
	files, err := b.Files(id)
	if err != nil {
		return RoundFiles{}, n, err
	}
	// The window reports the commit names: those written since the last
	// commit (after a start, every one present).
	prefix := b.RepoPath(id, WindowSignaturesDir) + "/"
	for _, p := range files.Files {
		node, ok := strings.CutSuffix(strings.TrimPrefix(p, prefix), ".json")
		if !ok || !strings.HasPrefix(p, prefix) {
			continue
		}
		name := WindowSignaturesDir + "/" + node + ".json"
		legit := r.WindowSignatures[node]
		if len(legit) == 0 {
			leave(name, "")
			continue
		}
		wrote, err := b.guardNodeFile(id, WindowSignaturesDir, node, legit)
		if err := check(name, wrote, err); err != nil {
			return RoundFiles{}, n, err
		}
	}
	files.Files = slices.DeleteFunc(files.Files, func(p string) bool { return slices.Contains(leftOut, p) })
	if len(leftOut) > 0 && log != nil {
		log.Warn("round files not written by the server are left out of the commit", "round", id, "files", n.LeftOut)
	}
	if len(n.Rewritten) > 0 && log != nil {
		log.Warn("round reports edited behind the server are written again from its state", "round", id, "files", n.Rewritten)
	}
	return files, n, nil
}

// PlanMarkdown renders plan.md from the plan.
func PlanMarkdown(f plan.Fleet) ([]byte, error) {
	var md bytes.Buffer
	if err := plan.Markdown(&md, f); err != nil {
		return nil, fmt.Errorf("render plan.md: %w", err)
	}
	return md.Bytes(), nil
}

// PlanMD is plan.md as the server renders it from planJSON, round id's
// plan.json; nil when planJSON is (the round has no plan). A render is
// kept per round for the bytes it was made from.
func (b *Book) PlanMD(id string, planJSON []byte) ([]byte, error) {
	if planJSON == nil {
		return nil, nil
	}
	sum := sha256.Sum256(planJSON)
	b.planMDMu.Lock()
	md, ok := b.planMD.get(id, sum)
	b.planMDMu.Unlock()
	if ok {
		return md, nil
	}
	f, ok := b.SharedPlan(id, sum)
	if !ok {
		var err error
		if f, err = plan.Decode(planJSON); err != nil {
			return nil, err
		}
		b.KeepPlan(id, sum, f)
	}
	md, err := PlanMarkdown(f)
	if err != nil {
		return nil, err
	}
	b.planMDMu.Lock()
	b.planMD.keep(id, sum, md)
	b.planMDMu.Unlock()
	return md, nil
}

// CheckPlanMD is sign_plan's rule that what people read is what they
// sign: plan.md must be the render of plan.json, whose digest the person
// signs. A plan.md that differs (or is gone) is written again from
// plan.json and the call refused, naming the first line that differed:
// a person who read the other text reads the plan again.
func (b *Book) CheckPlanMD(id string, f plan.Fleet) error {
	want, err := PlanMarkdown(f)
	if err != nil {
		return err
	}
	got, err := b.ReadFile(id, PlanMDFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return refuse("Ask a person to look at rounds/"+id+"/"+PlanMDFile+": the server cannot read it.", err.Error(), "nothing was signed")
	}
	if err == nil && bytes.Equal(got, want) {
		return nil
	}
	why := "rounds/" + id + "/" + PlanMDFile + " is missing"
	if err == nil {
		why = "rounds/" + id + "/" + PlanMDFile + " is not the plan rendered from plan.json: " + FirstDifference(got, want)
	}
	if werr := b.WriteFile(id, PlanMDFile, want); werr != nil {
		return refuse("Ask a person to restore rounds/"+id+"/"+PlanMDFile+" from plan.json (show_plan renders it).", why, "writing it again failed: "+werr.Error(), "nothing was signed")
	}
	return refuse("A person reads the plan again (rounds/"+id+"/"+PlanMDFile+" is written again from plan.json; mcp-patch approve shows it from plan.json), then call sign_plan again.",
		why, "plan.md was written again from plan.json", "nothing was signed")
}

// FirstDifference names the first line where got differs from want.
func FirstDifference(got, want []byte) string {
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

// guardFile keeps rounds/<id>/<name> when it is one of legit (renders
// the server made, the last its render now) and writes the last over
// anything else or a missing file; it says whether it wrote.
func (b *Book) guardFile(id, name string, legit [][]byte) (bool, error) {
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
func (b *Book) guardNodeFile(id, folder, node string, legit [][]byte) (bool, error) {
	got, err := b.ReadNodeFile(id, folder, node)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if err == nil && slices.ContainsFunc(legit, func(l []byte) bool { return bytes.Equal(got, l) }) {
		return false, nil
	}
	return true, b.WriteNodeFile(id, folder, node, legit[len(legit)-1])
}

// Exists says whether rounds/<id>/<name> is there (as anything).
func (b *Book) Exists(id, name string) bool {
	_, err := os.Lstat(filepath.Join(b.Dir(id), name))
	return err == nil
}

// RepoPath is rounds/<id>/<name> as a commit names it.
func (b *Book) RepoPath(id, name string) string { return path.Join("rounds", id, name) }
