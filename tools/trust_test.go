package tools

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Each test here is a way a hostile agent (which operates the round and
// can write the intent repository's working copy, but holds no signing
// key) broke the promise that nothing destructive runs unless a person
// signed exactly that step.

// handWriteSignatures writes rounds/<id>/plan-signatures.json as the
// agent would: a plan entry for the plan's digest, and a window entry for
// each node in window-signatures/<node>.json, every digest copied from
// the server's own files and answers.
func (f *fleet) handWriteSignatures(drainDigest map[string]string) {
	f.t.Helper()
	fp, ok, err := f.d.FleetPlan(fRound)
	if err != nil || !ok {
		f.t.Fatalf("plan: %v %v", ok, err)
	}
	ps := service.PlanSignatures{Plan: []service.PlanSignature{{Digest: fp.Digest, Revision: fp.Revision, Principal: "alice@example.org",
		ApprovalID: "0123456789abcdef01234567", Time: f.now, Nodes: plan.StepDigests(fp)}}}
	windows := map[string]service.WindowSignature{}
	for _, n := range fp.Nodes {
		windows[n.Node] = service.WindowSignature{Node: n.Node, Window: n.Window, Principal: "alice@example.org",
			ApprovalID: "89abcdef0123456789abcdef", Tools: window.WindowTools(n, drainDigest[n.Node]), Time: f.now}
	}
	b, err := json.MarshalIndent(ps, "", "  ")
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.repo, "rounds", fRound, service.PlanSignedFile), b, 0o644); err != nil {
		f.t.Fatal(err)
	}
	// And each window's own report, where approve_window writes it.
	dir := filepath.Join(f.repo, "rounds", fRound, service.WindowSignaturesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	for node, ws := range windows {
		b, err := json.Marshal(ws)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, node+".json"), b, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

// requestDigest is the plan digest a destructive call's approval request
// binds (the server's own answer).
func requestDigest(t *testing.T, res *Result) string {
	t.Helper()
	if res.Approval == nil {
		t.Fatalf("no approval request: %s %v", res.Status, res.Reasons)
	}
	req, err := policy.ParseRequest([]byte(res.Approval.Request))
	if err != nil {
		t.Fatal(err)
	}
	return req.PlanDigest
}

// Repro 1: plan and window entries written by hand into
// plan-signatures.json made drain_node cordon a control-plane node and
// install_updates start apt with zero signatures (the window path also
// ignored that control-plane nodes are approved per step). Now the
// records are a report: the plan is not signed, and once it is, the
// hand-written window entry covers nothing.
func TestHandWrittenPlanSignaturesRunNothing(t *testing.T) {
	f := newFleet(t)
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	f.preflight("cp-1")
	f.handWriteSignatures(nil)
	_, res := f.call("drain_node", map[string]any{"node": "cp-1"})
	if res.Status != StatusRefused || !strings.Contains(reasons(res), "is not signed") || !strings.Contains(reasons(res), "never a proof") {
		t.Fatalf("drain under a hand-written plan signature: %s %v", res.Status, res.Reasons)
	}
	// A person signs the plan; the agent writes window entries again, with
	// the drain's live preview digest taken from the server's request.
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	_, res = f.call("drain_node", map[string]any{"node": "cp-1"})
	f.handWriteSignatures(map[string]string{"cp-1": requestDigest(t, res)})
	_, res = f.call("drain_node", map[string]any{"node": "cp-1"})
	if res.Status != StatusApprovalRequired || !strings.Contains(reasons(res), "never an approval") {
		t.Fatalf("drain under a hand-written window entry: %s %v", res.Status, res.Reasons)
	}
	if f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 was cordoned without a signature")
	}
	// The drain runs under its own signature; install stays unsigned.
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, res.Reasons)
	}
	_, res = f.call("install_updates", map[string]any{"node": "cp-1"})
	f.handWriteSignatures(nil)
	if _, res = f.call("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusApprovalRequired {
		t.Fatalf("install under a hand-written window entry: %s %v", res.Status, res.Reasons)
	}
	if c := f.host("cp-1").Count("install"); c != 0 {
		t.Fatalf("apt started %d times on cp-1 without a signature", c)
	}
}

// Repro 5: a window approval was never used up: promote_kernel called
// again on the same node ran again with no new signature. Each step of a
// window approval now runs once.
func TestWindowStepRunsOnce(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	f.windowThrough("cp-1", true)
	f.gateAccepted("cp-1")
	f.preflight("gpu-1")
	if _, res := f.approve("approve_window", map[string]any{"node": "gpu-1"}); res.Status != StatusOK {
		t.Fatalf("approve_window: %s %v", res.Status, res.Reasons)
	}
	f.windowThrough("gpu-1", false)
	if c := f.host("gpu-1").Count("promote"); c != 1 {
		t.Fatalf("promote ran %d times", c)
	}
	_, res := f.call("promote_kernel", map[string]any{"node": "gpu-1"})
	if res.Status != StatusApprovalRequired || !strings.Contains(reasons(res), "once already") {
		t.Fatalf("promote_kernel again under the used window approval: %s %v", res.Status, res.Reasons)
	}
	if c := f.host("gpu-1").Count("promote"); c != 1 {
		t.Fatalf("promote ran %d times after a second call without a signature", c)
	}
}

// Repro 4: a drain re-entry ran with no expected digest, so it evicted a
// pod the approved plan did not list (every drain that waits for jobs
// ends on that path). A drain carried on now evicts only what its
// approval listed: a pod that appeared since stops it with drift.
func TestDrainCarriedOnRefusesAPodThatAppeared(t *testing.T) {
	r := newWRig(t)
	pv, err := r.kube.PreviewDrain(t.Context(), wNode, drain.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	dp, err := window.DecideDrain(wNode, pv)
	if err != nil {
		t.Fatal(err)
	}
	// Approved and started (its signed bytes kept), cordoned, then cut
	// short before it evicted: the state a wait for jobs leaves too.
	text := "signed:" + dp.Digest()
	r.d.Approvals.(*syncApprovals).used[text] = true
	if err := r.d.KeepStep(wRound, "drain_node", "drain_node", service.Approved{ID: text, Text: text}, dp); err != nil {
		t.Fatal(err)
	}
	raw, _ := window.Encode(dp)
	if _, err := r.journal(t).StartStep(round.StepDrain, wNode, round.Meta{ApprovalID: text, PlanDigest: dp.Digest(), StepPlan: raw}); err != nil {
		t.Fatal(err)
	}
	r.kube.Cordoned = map[string]string{wNode: "server-a"}
	r.kube.Pods[wNode] = append(r.kube.Pods[wNode], drain.PodRef{Namespace: "ml", Name: "newcomer-0"})
	_, res := r.call(t, "drain_node", map[string]any{"node": wNode})
	if res.Status != StatusFailed || !strings.Contains(reasons(res), "ml/newcomer-0") {
		t.Fatalf("drain carried on over a pod that appeared: %s %v", res.Status, res.Reasons)
	}
	for _, a := range r.kube.Actions {
		if a.What == "drain" {
			t.Fatalf("the drain evicted: %v", r.kube.Actions)
		}
	}
	if len(r.kube.Pods[wNode]) != 2 {
		t.Fatalf("pods left on %s: %v", wNode, r.kube.Pods[wNode])
	}
}

// decisionRig is a round stopped at a failed gate on cp-1, with
// record_decision served over MCP and a person's key signing in process.
type decisionRig struct {
	t      *testing.T
	j      *round.Journal
	sign   func(text string) string
	decide func(args map[string]any) map[string]any
}

func newDecisionRig(t *testing.T) *decisionRig {
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	allowed, err := policy.ParseAllowedSigners([]byte("alice@example.org namespaces=\"mcp-patch\" " +
		strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	book := service.NewRoundBook(t.TempDir(), filepath.Join(t.TempDir(), "journals"), clock)
	t.Cleanup(func() { book.Close() })
	d := &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mode: ModeNormal, Now: clock, Book: book,
		Approvals: &service.PolicyApprovals{Verifier: &policy.Verifier{AllowedSigners: allowed, NonceStore: store, Clock: clock},
			TTL: 30 * time.Minute, Clock: clock}}
	j, err := book.Journal("2026-11", true)
	if err != nil {
		t.Fatal(err)
	}
	order, err := round.PlanOrder([]round.NodeInfo{{Name: "cp-1", ControlPlane: true}, {Name: "gpu-1", GPU: true, Canary: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	reg := &Registry{}
	reg.Add(RecordDecision())
	cs := connect(t, reg, d, nil)
	r := &decisionRig{t: t, j: j}
	r.sign = func(text string) string {
		t.Helper()
		req, err := policy.ParseRequest([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		res, err := policy.Sign(signer, req.Canonical())
		if err != nil {
			t.Fatal(err)
		}
		return policy.FormatApproval(req, res.Signature)
	}
	r.decide = func(args map[string]any) map[string]any {
		t.Helper()
		_, m := call(t, cs, "record_decision", args)
		return m
	}
	r.failGate("etcd has no leader")
	return r
}

func (r *decisionRig) failGate(why string) {
	r.t.Helper()
	if _, err := r.j.StartStep(round.StepGate, "cp-1", round.Meta{}); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.j.FailStep(round.StepGate, "cp-1", round.Meta{Detail: why}); err != nil {
		r.t.Fatal(err)
	}
}

// request asks for the statement of args and answers its text.
func (r *decisionRig) request(args map[string]any) string {
	r.t.Helper()
	m := r.decide(args)
	if m["status"] != string(StatusApprovalRequired) {
		r.t.Fatalf("record_decision %v without a statement: %v", args, m)
	}
	return m["approval"].(map[string]any)["request"].(string)
}

func with(args map[string]any, k, v string) map[string]any {
	out := map[string]any{k: v}
	for a, b := range args {
		out[a] = b
	}
	return out
}

// Repro 2: a resume statement whose summary was rewritten before signing
// was accepted (approvals compared their summary with the server's,
// statements did not).
func TestResumeStatementWithRewrittenSummaryIsRefused(t *testing.T) {
	r := newDecisionRig(t)
	args := map[string]any{"decision": "resume", "reason": "etcd is fine"}
	req, err := policy.ParseRequest([]byte(r.request(args)))
	if err != nil {
		t.Fatal(err)
	}
	// What the person is shown, rewritten by the agent: they sign it.
	req.Summary = []string{req.Summary[0], "the round stopped at gate on cp-1: a cosmetic warning"}
	m := r.decide(with(args, "attestation", r.sign(req.String())))
	if m["status"] != string(StatusRefused) || !strings.Contains(strings.Join(asStrings(m["reasons"]), " "), "summary line 2") {
		t.Fatalf("resume with a rewritten summary: %v", m)
	}
	if st := r.j.State(); st.Stop == nil || len(st.Decisions) != 0 {
		t.Fatalf("the rewritten statement resumed the round: %+v", st.Decisions)
	}
	// The server's own statement, signed as shown, resumes.
	if m := r.decide(with(args, "attestation", r.sign(r.request(args)))); m["status"] != string(StatusOK) {
		t.Fatalf("resume with the server's statement: %v", m)
	}
}

// Repro 3: residual_risk_accepted signed the same text with or without
// the failed check it accepts, so a statement asked for as a note
// accepted a red gate (which closes the window and frees the Lease). Now
// the statement names the step and its failure's journal record, and a
// statement for one failure is refused on any other.
func TestNoteStatementCannotAcceptARedGate(t *testing.T) {
	r := newDecisionRig(t)
	note := map[string]any{"decision": "residual_risk_accepted", "node": "cp-1", "reason": "watched by hand", "review_trigger": "next-round:2026-12"}
	signedNote := r.sign(r.request(note))
	if !strings.Contains(signedNote, "step: none\nstop: none\n") {
		t.Fatalf("a note does not say it accepts no check:\n%s", signedNote)
	}
	gate := with(note, "step", "gate")
	m := r.decide(with(gate, "attestation", signedNote))
	if m["status"] != string(StatusRefused) || r.j.State().Node("cp-1").Steps[round.StepGate].RiskAccepted {
		t.Fatalf("a note accepted the red gate: %v", m)
	}
	text := r.request(gate)
	f := r.j.State().LastFailure(round.StepGate, "cp-1")
	if !strings.Contains(text, "step: gate\nstop: "+f.Binding()+"\n") {
		t.Fatalf("the statement does not name the failed gate %s:\n%s", f.Binding(), text)
	}
	spare := r.sign(text)
	// The gate fails again (a new record): the spare statement is refused.
	if _, err := r.j.StartStep(round.StepGate, "cp-1", round.Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.j.FailStep(round.StepGate, "cp-1", round.Meta{Detail: "etcd has no leader"}); err != nil {
		t.Fatal(err)
	}
	if m := r.decide(with(gate, "attestation", spare)); m["status"] != string(StatusRefused) || r.j.State().Node("cp-1").Steps[round.StepGate].RiskAccepted {
		t.Fatalf("a statement for another failure of the gate was accepted: %v", m)
	}
	if m := r.decide(with(gate, "attestation", r.sign(r.request(gate)))); m["status"] != string(StatusOK) || !r.j.State().Node("cp-1").Steps[round.StepGate].RiskAccepted {
		t.Fatalf("the statement for this failure: %v", m)
	}
}
