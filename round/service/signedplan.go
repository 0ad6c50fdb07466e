package service

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// PlanSignature is a person's signature of one revision of the plan.
type PlanSignature struct {
	Digest     string    `json:"digest"`
	Revision   int       `json:"revision"`
	Principal  string    `json:"principal"`
	ApprovalID string    `json:"approval_id"`
	Time       time.Time `json:"time"`
	// Nodes are the step digests of every node as signed: the next
	// signature after a re-plan covers only what differs from them.
	Nodes map[string]map[plan.Step]string `json:"nodes"`
	// Changed says what this signature covered beyond the previous one
	// ("node: step, step"); empty for the first.
	Changed []string `json:"changed,omitempty"`
}

// WindowSignature is a per-window approval: one signature binding every
// step of one node's window to the digests it lists.
type WindowSignature struct {
	Node       string `json:"node"`
	Window     string `json:"window_digest"`
	Principal  string `json:"principal"`
	ApprovalID string `json:"approval_id"`
	// Tools maps each covered tool to the plan digest it must show live.
	Tools map[string]string `json:"tools"`
	Time  time.Time         `json:"time"`
}

// PlanSignatures is rounds/<id>/plan-signatures.json: the plan's
// signatures, rendered from those the server kept (plansSigned).
type PlanSignatures struct {
	Plan []PlanSignature `json:"plan"`
}

// WindowSignaturesDir holds one report per approved window,
// rounds/<id>/window-signatures/<node>.json: approve_window writes its
// node's file, not a fleet-wide one that grows with every window.
const WindowSignaturesDir = "window-signatures"

// SaveWindowSignature writes the report of a node's window approval, as
// the commit renders it from the kept approval (reports.go).
func (d *Service) SaveWindowSignature(id string, ws WindowSignature) error {
	return d.Book.WriteNodeFile(id, WindowSignaturesDir, ws.Node, renderWindowSignature(ws))
}

// windowListed says whether a report (a file the agent can write) lists a
// window approval of node.
func (d *Service) windowListed(id, node string) bool {
	_, err := d.Book.ReadNodeFile(id, WindowSignaturesDir, node)
	return err == nil
}

// SignedFor returns the signature of the plan with this digest, if any.
func (ps PlanSignatures) SignedFor(digest string) (PlanSignature, bool) {
	for i := len(ps.Plan) - 1; i >= 0; i-- {
		if ps.Plan[i].Digest == digest {
			return ps.Plan[i], true
		}
	}
	return PlanSignature{}, false
}

// FleetPlan reads the reviewed plan of a round; ok is false when plan_round
// has not written one (a round planned before plans were documents).
func (d *Service) FleetPlan(id string) (plan.Fleet, bool, error) {
	b, ok, err := d.fleetPlanBytes(id)
	if err != nil || !ok {
		return plan.Fleet{}, false, err
	}
	f, err := plan.Decode(b)
	if err != nil {
		return plan.Fleet{}, false, err
	}
	return f, true, nil
}

// fleetPlanBytes reads the round's plan.json; ok is false when there is
// none.
func (d *Service) fleetPlanBytes(id string) ([]byte, bool, error) {
	b, err := d.Book.ReadFile(id, FleetPlanFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the plan of round %s: %w", id, err)
	}
	return b, true, nil
}

// FleetPlanShared is fleetPlan decoded (and its digests checked) once per
// content: a plan.json whose bytes hash as the last decoded one's gives
// that plan again, shared, so a step's check does not decode the whole
// fleet's plan. The caller only reads it.
func (d *Service) FleetPlanShared(id string) (plan.Fleet, bool, error) {
	b, ok, err := d.fleetPlanBytes(id)
	if err != nil || !ok {
		return plan.Fleet{}, false, err
	}
	sum := sha256.Sum256(b)
	if f, ok := d.Book.sharedPlan(id, sum); ok {
		return f, true, nil
	}
	f, err := plan.Decode(b)
	if err != nil {
		return plan.Fleet{}, false, err
	}
	d.Book.keepPlan(id, sum, f)
	return f, true, nil
}

// PlanHeader streams the round's plan.json for what a status needs (the
// digests, counts, blockers and each node's approval), never holding the
// whole plan: a 1000-node plan is megabytes. The plan is decoded (and its
// digests checked) once per content: a plan.json whose bytes hash as the
// last decoded one's gives that header again without decoding them.
func (d *Service) PlanHeader(id string) (plan.Header, bool, error) {
	fh, err := d.Book.OpenFile(id, FleetPlanFile)
	if errors.Is(err, os.ErrNotExist) {
		return plan.Header{}, false, nil
	}
	if err != nil {
		return plan.Header{}, false, fmt.Errorf("read the plan of round %s: %w", id, err)
	}
	defer fh.Close()
	readErr := func(err error) error { return fmt.Errorf("read the plan of round %s: %w", id, err) }
	sum := sha256.New()
	if _, err := io.Copy(sum, fh); err != nil {
		return plan.Header{}, false, readErr(err)
	}
	if h, ok := d.Book.cachedHeader(id, [sha256.Size]byte(sum.Sum(nil))); ok {
		return h, true, nil
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		return plan.Header{}, false, readErr(err)
	}
	// The key is the hash of the very bytes decoded (the file may change
	// between the two reads).
	sum.Reset()
	h, err := plan.DecodeHeader(io.TeeReader(fh, sum))
	if err != nil {
		return plan.Header{}, false, err
	}
	if _, err := io.Copy(sum, fh); err != nil {
		return plan.Header{}, false, readErr(err)
	}
	d.Book.keepHeader(id, [sha256.Size]byte(sum.Sum(nil)), h)
	return h, true, nil
}

// WriteFleetPlan writes plan.json and plan.md of the round.
func (d *Service) WriteFleetPlan(id string, f plan.Fleet) error {
	b, err := f.Encode()
	if err != nil {
		return err
	}
	md, err := planMarkdown(f)
	if err != nil {
		return err
	}
	if err := d.Book.WriteFile(id, FleetPlanFile, b); err != nil {
		return fmt.Errorf("write plan.json: %w", err)
	}
	if err := d.Book.WriteFile(id, FleetPlanMD, md); err != nil {
		return fmt.Errorf("write plan.md: %w", err)
	}
	return nil
}

// KeptPlanSignatures are the plan signatures this server kept (in its
// state directory), in the order it kept them.
func (d *Service) KeptPlanSignatures(id string) (PlanSignatures, error) {
	ps, err := d.proofs(id)
	if err != nil {
		return PlanSignatures{}, err
	}
	return plansSigned(ps), nil
}

// listedPlanSignatures reads rounds/<id>/plan-signatures.json as it is in
// the working copy: only to say, in a refusal, that it lists what the
// server holds no signature of.
func (d *Service) listedPlanSignatures(id string) (PlanSignatures, error) {
	var ps PlanSignatures
	b, err := d.Book.ReadFile(id, PlanSignedFile)
	if err != nil {
		return ps, err
	}
	if err := json.Unmarshal(b, &ps); err != nil {
		return ps, fmt.Errorf("read %s: %w", PlanSignedFile, err)
	}
	return ps, nil
}

// WritePlanSignatures writes rounds/<id>/plan-signatures.json, the report
// of the kept plan signatures ps, as the commit renders it.
func (d *Service) WritePlanSignatures(id string, ps PlanSignatures) error {
	return d.Book.WriteFile(id, PlanSignedFile, renderPlanSignatures(ps))
}

// CheckReviewed is the plan's rule before every destructive window step
// (window.CheckReviewed): the round's plan signed before the first cordon
// and the step's live plan its node's reviewed plan. A round without a
// signed plan, or a server without an intent repository to keep one,
// runs no destructive window step.
func (d *Service) CheckReviewed(ctx context.Context, roundID, tool string, p window.Plan) error {
	if _, ok := window.ReviewedStep(tool); !ok {
		return nil
	}
	if d.Book == nil {
		return answer.Refuse("Start the server with --intent-repo: rounds and their signed plans are kept in the intent repository.",
			"no intent repository is configured: a round without a signed plan runs no destructive window step", "nothing was executed")
	}
	return FromWindow(window.CheckReviewed(ctx, planFiles{d}, roundID, tool, p))
}

// planFiles is the round's plan and its kept signatures as the
// signed-plan rule reads them (window.PlanFiles).
type planFiles struct{ d *Service }

var _ window.PlanFiles = planFiles{}

func (pf planFiles) ReviewedPlan(roundID string) (plan.Fleet, bool, error) {
	return pf.d.FleetPlanShared(roundID)
}

func (pf planFiles) LatestPlanSignature(ctx context.Context, roundID string) (window.PlanSignature, bool, error) {
	sp, ok, err := pf.d.PlanProof(ctx, roundID)
	if err != nil || !ok {
		return window.PlanSignature{}, false, err
	}
	return window.PlanSignature{ID: sp.ID, Principal: sp.Principal, Digest: sp.Digest, Index: sp.index}, true, nil
}

func (pf planFiles) ListsPlanSignature(roundID, digest string) bool {
	ps, err := pf.d.listedPlanSignatures(roundID)
	if err != nil {
		return false
	}
	_, listed := ps.SignedFor(digest)
	return listed
}

// PlanProof is the round's latest plan signature that this server kept
// when sign_plan verified it, verified again now.
func (d *Service) PlanProof(ctx context.Context, roundID string) (standing, bool, error) {
	return d.LatestProof(ctx, roundID, "sign_plan", window.FleetTarget)
}

// SignedPlan returns the round's reviewed plan (shared: the caller only
// reads it) and the signature it was acted on under, once the signed-plan
// rule admits it (window.SignedPlan); else the rule's refusal.
// plan-signatures.json is not asked: it is a report.
func (d *Service) SignedPlan(ctx context.Context, roundID string) (plan.Fleet, window.PlanSignature, error) {
	f, sig, err := window.SignedPlan(ctx, planFiles{d}, roundID)
	return f, sig, FromWindow(err)
}

// WindowApproval returns the per-window approval that covers this tool's
// live plan, if the node has one: the signature kept when approve_window
// verified it, verified again now, as window.DecideWindowCover admits it
// under the signed plan. note says why a window approval the node seems
// to have did not cover the step (the call then needs its own signature).
func (d *Service) WindowApproval(ctx context.Context, roundID, tool string, p window.Plan) (a Approved, ok bool, note string, err error) {
	if _, ok := window.ReviewedStep(tool); !ok || d.Book == nil {
		return Approved{}, false, "", nil
	}
	node := p.Target()
	wp, ok, err := d.LatestProof(ctx, roundID, "approve_window", node)
	if err != nil {
		return Approved{}, false, "", answer.Refuse("Call approve_window again: a person signs the window anew.", err.Error(), "nothing was executed")
	}
	if !ok {
		if d.windowListed(roundID, node) {
			note = "rounds/" + roundID + "/" + WindowSignaturesDir + "/" + node + ".json lists a window approval of " + node + ", but the server holds no signature of it that verifies: that file is a report for people, never an approval"
		}
		return Approved{}, false, note, nil
	}
	f, sig, err := d.SignedPlan(ctx, roundID)
	if err != nil {
		return Approved{}, false, "", err
	}
	digest, ok, note, err := window.DecideWindowCover(f, sig, window.KeptWindowApproval{Digest: wp.Digest, Tools: WindowToolsOf(wp.Summary), Index: wp.index}, tool, p)
	if err != nil || !ok {
		return Approved{}, false, note, FromWindow(err)
	}
	a = wp.Approved
	a.Digest = digest
	return a, true, "", nil
}

// osLayer is the component whose changelog and runbook a kernel round
// updates.
const osLayer = "os-layer"

// CloseDocs writes the round's entry into os-layer/changelog.md and
// proposes runbook.md edits for the lessons that change a step, and
// commits both on the round's working branch. close_round refuses while
// they are missing or uncommitted. A round without a plan document has
// no kernels to report and is not held to it.
func (d *Service) CloseDocs(ctx context.Context, s *window.Round) ([]string, error) {
	f, ok, err := d.FleetPlan(s.ID)
	if err != nil || !ok {
		return nil, err
	}
	r, err := d.IntentRepo(s.ID)
	if err != nil {
		return nil, err
	}
	var ownLessons []string
	if comp, err := r.Component(osLayer); err == nil {
		for _, l := range comp.Lessons {
			if l.Round == s.ID {
				ownLessons = append(ownLessons, l.Text)
			}
		}
	}
	c := window.Closing(s.Journal.State(), d.Clock(), ownLessons)
	root, err := os.OpenRoot(r.Root())
	if err != nil {
		return nil, fmt.Errorf("open the intent repository: %w", err)
	}
	defer root.Close()
	read := func(name string) (string, error) {
		b, err := root.ReadFile(osLayer + "/" + name)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		return string(b), nil
	}
	changelog, err := read("changelog.md")
	if err != nil {
		return nil, fmt.Errorf("read %s/changelog.md: %w", osLayer, err)
	}
	paths := []string{osLayer + "/changelog.md"}
	var notes []string
	if !plan.HasEntry(changelog, s.ID) {
		if err := root.WriteFile(osLayer+"/changelog.md", []byte(plan.InsertChangelog(changelog, s.ID, plan.ChangelogEntry(f, c))), 0o644); err != nil {
			return nil, fmt.Errorf("write %s/changelog.md: %w", osLayer, err)
		}
		notes = append(notes, osLayer+"/changelog.md: entry for round "+s.ID)
	}
	runbook, err := read("runbook.md")
	if err != nil {
		return nil, fmt.Errorf("read %s/runbook.md: %w", osLayer, err)
	}
	if doc, changed := plan.RunbookProposal(runbook, c); changed {
		if err := root.WriteFile(osLayer+"/runbook.md", []byte(doc), 0o644); err != nil {
			return nil, fmt.Errorf("write %s/runbook.md: %w", osLayer, err)
		}
		notes = append(notes, osLayer+"/runbook.md: proposed edits for the lessons that change a step")
	}
	if _, err := os.Stat(r.Root() + "/" + osLayer + "/runbook.md"); err == nil {
		paths = append(paths, osLayer+"/runbook.md")
	}
	cm, err := r.CommitFiles(ctx, "round "+s.ID+": os-layer changelog and runbook", paths)
	switch {
	case errors.Is(err, intent.ErrNoChange):
	case err != nil:
		return nil, answer.Fail("Commit or undo the edits to os-layer's changelog.md and runbook.md on the working branch, then call close_round again.",
			"close_round refuses while the component docs are missing or uncommitted: "+err.Error())
	default:
		notes = append(notes, "component docs committed ("+short(cm.Hash)+")")
	}
	return notes, nil
}

// PlanStatus is the reviewed plan at a glance: its digest, whether a
// person signed it, and how many signatures the round needs.
type PlanStatus struct {
	Digest   string `json:"digest"`
	Revision int    `json:"revision"`
	Signed   bool   `json:"signed"`
	SignedBy string `json:"signed_by,omitempty"`
	// Signatures is what the round needs as the intent sizes approvals;
	// PerStepSignatures the same with one signature per destructive step.
	Signatures        int `json:"signatures"`
	PerStepSignatures int `json:"per_step_signatures"`
	// WindowsApproved are the nodes whose window is not closed yet and
	// whose latest window approval verifies now.
	WindowsApproved []string  `json:"windows_approved,omitempty"`
	Blockers        []string  `json:"blockers,omitempty"`
	Risks           []string  `json:"risks,omitempty"`
	Summary         []string  `json:"summary"`
	Files           []string  `json:"files"`
	signedAt        time.Time `json:"-"`
}

func (d *Service) PlanStatus(ctx context.Context, id string, st0 *round.State) (*PlanStatus, error) {
	f, ok, err := d.PlanHeader(id)
	if err != nil || !ok {
		return nil, err
	}
	st := &PlanStatus{Digest: f.Digest, Revision: f.Revision, Signatures: f.Signatures, PerStepSignatures: f.PerStepSignatures,
		Summary: f.Summary, Risks: f.Risks, Files: []string{"rounds/" + id + "/" + FleetPlanMD, "rounds/" + id + "/" + FleetPlanFile}}
	// Signed is what the kept signatures prove, verified again now; the
	// report in plan-signatures.json is not asked.
	if sp, ok, err := d.PlanProof(ctx, id); err == nil && ok && sp.Digest == f.Digest {
		st.Signed, st.SignedBy, st.signedAt = true, sp.Principal, sp.Proof.Time
	}
	// One read of the kept signatures for the whole fleet; each node's
	// latest window approval verified again.
	windows := map[string]Proof{}
	if ps, err := d.proofs(id); err == nil {
		for _, p := range ps {
			if p.Tool == "approve_window" && p.Step == "" {
				windows[p.Node] = p
			}
		}
	}
	closed := map[string]bool{}
	if st0 != nil {
		for _, n := range st0.Nodes {
			closed[n.Node] = n.Window == round.WindowClosed
		}
	}
	for _, n := range f.Nodes {
		p, ok := windows[n.Node]
		if n.Approval != plan.PerWindow || !ok {
			continue
		}
		if closed[n.Node] {
			// A closed window's approval is history (the journal and the
			// report say who signed it); verifying each again made every
			// round_status cost grow with the windows done.
			continue
		}
		if a, err := d.reverify(ctx, id, p, "approve_window", n.Node, ""); err == nil && a.Digest == n.Window {
			st.WindowsApproved = append(st.WindowsApproved, n.Node)
		}
	}
	for _, b := range f.Blockers {
		st.Blockers = append(st.Blockers, b.String())
	}
	return st, nil
}

// RequestApproval answers approval_required for a request that binds p.
// The request is left in the inbox too (askApproval).
func (d *Service) RequestApproval(tool string, p Binding) error {
	return d.askApproval(tool, p, nil)
}

// givenOrInbox is the approval a call hands in, else one a person signed
// in the inbox for tool on node in roundID ("": none; fromInbox says
// which).
func (d *Service) givenOrInbox(approval, roundID, node, tool string) (string, bool) {
	if approval != "" {
		return approval, false
	}
	return d.inboxApproval(roundID, node, tool)
}

// PlanNextCall puts the plan's own calls before a window step that would
// be refused without them (window.DecidePlanNextCall).
func (d *Service) PlanNextCall(ctx context.Context, st *round.State, nc *answer.Call) (*answer.Call, string) {
	if nc == nil || st.Stop != nil || st.Closed || st.Aborted || d.Book == nil {
		return nc, ""
	}
	h, ok, err := d.PlanHeader(st.RoundID)
	if err != nil {
		return nc, ""
	}
	signed := func() string {
		sp, ok, err := d.PlanProof(ctx, st.RoundID)
		if err != nil || !ok {
			return ""
		}
		return sp.Digest
	}
	windowDigest := func(node string) string {
		wp, ok, err := d.LatestProof(ctx, st.RoundID, "approve_window", node)
		if err != nil || !ok {
			return ""
		}
		return wp.Digest
	}
	callNode, _ := nc.Arguments["node"].(string)
	pc, ok := window.DecidePlanNextCall(st.RoundID, h, ok, signed, windowDigest, nc.Tool, callNode)
	switch {
	case !ok:
		return nc, ""
	case pc.Tool == "plan_round":
		return answer.CallTo("plan_round", "round", st.RoundID), pc.Why
	case pc.Node != "":
		return answer.CallTo(pc.Tool, "node", pc.Node), pc.Why
	}
	return answer.CallTo(pc.Tool), pc.Why
}
