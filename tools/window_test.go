package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

const (
	wNode    = "gpu-1"
	wRunning = "6.8.0-48-generic"
	wTarget  = "6.8.0-51-generic"
	wDigest  = "sha256:00000000000000000000000000000000000000000000000000000000000000a1"
	wRound   = "2026-11"
)

// syncApprovals accepts "signed:<digest>" once, from any goroutine, and
// counts the approvals used.
type syncApprovals struct {
	mu   sync.Mutex
	used map[string]bool
}

func (f *syncApprovals) Request(tool string, p service.Binding) (string, time.Time, error) {
	return "request " + tool + " " + p.Node + " " + p.Digest, time.Unix(0, 0), nil
}
func (f *syncApprovals) Verify(_ context.Context, a, tool string, p service.Binding) (service.Approved, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a != "signed:"+p.Digest {
		return service.Approved{}, errors.New("signature does not match the plan")
	}
	if f.used[a] {
		return service.Approved{}, errors.New("replayed")
	}
	return service.Approved{ID: a, Text: a}, nil
}
func (f *syncApprovals) Reverify(_ context.Context, a, tool string, p service.Binding) (service.Approved, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fakeReverify(f.used, a, p)
}
func (f *syncApprovals) ConsumePart(_ context.Context, a service.Approved, part string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used[a.ID+"/"+part] {
		return policy.ErrReplayed
	}
	f.used[a.ID+"/"+part] = true
	return nil
}
func (f *syncApprovals) Consume(_ context.Context, a service.Approved) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used[a.ID] {
		return errors.New("replayed")
	}
	f.used[a.ID] = true
	return nil
}
func (f *syncApprovals) Attestation(policy.Kind, policy.AttestationFields, []string) (string, time.Time, error) {
	return "", time.Time{}, errors.New("not in this fake")
}
func (f *syncApprovals) VerifyAttestation(context.Context, string, policy.Kind, policy.AttestationFields, []string) (service.Approved, policy.Request, error) {
	return service.Approved{}, policy.Request{}, errors.New("not in this fake")
}
func (f *syncApprovals) ReverifyAttestation(context.Context, string, policy.Kind) (service.Approved, policy.Request, error) {
	return service.Approved{}, policy.Request{}, errors.New("not in this fake")
}
func (f *syncApprovals) VerifyRecord(context.Context, string, policy.Kind) (service.Approved, policy.Request, error) {
	return service.Approved{}, policy.Request{}, errors.New("not in this fake")
}

type nopPool struct{}

func (nopPool) Forget(string) {}
func (nopPool) Dial(context.Context, string, string, string) (net.Conn, error) {
	return nil, errors.New("no tunnels in this test")
}

// wrig is the tools over a real journal in a temporary intent directory,
// a fake host, cluster and Lease.
type wrig struct {
	d     *Deps
	root  string
	host  *fakes.Host
	kube  *fakes.Cluster
	lease *fakes.Lease
	now   time.Time
	mu    sync.Mutex
}

func newWRig(t *testing.T) *wrig {
	t.Helper()
	r := &wrig{root: memDir(t), now: time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC),
		host:  &fakes.Host{Running: wRunning, Target: wTarget, Digest: wDigest},
		kube:  &fakes.Cluster{Pods: map[string][]drain.PodRef{wNode: {{Namespace: "ml", Name: "trainer-0", OwnerKind: "StatefulSet", OwnerName: "trainer"}}}},
		lease: &fakes.Lease{Identity: "server-a"}}
	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	clock := func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }
	r.d = &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mode: ModeNormal, Now: clock,
		Approvals: &syncApprovals{used: map[string]bool{}}, Identity: "server-a",
		Book: service.NewRoundBook(r.root, filepath.Join(c.StateDir, service.AnchorsDir), clock), Lease: r.lease, Drainer: r.kube,
		Hosts: func(ctx context.Context) (*service.HostAccess, error) {
			return &service.HostAccess{Steps: r.host, Pool: nopPool{}}, nil
		}}
	t.Cleanup(func() { r.d.Book.Close() })
	j, err := r.d.Book.Journal(wRound, true)
	if err != nil {
		t.Fatal(err)
	}
	order := round.Order{Positions: []round.Position{{Node: wNode, Role: round.RoleGPU, GPU: true, Canary: true, Reason: "canary"}}}
	if _, err := j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	r.green(t, round.StepBaseline, "")
	for _, st := range round.PreflightSteps {
		r.green(t, st, wNode)
	}
	r.writePlan(t, wDigest)
	r.signPlan(t)
	return r
}

func (r *wrig) advance(d time.Duration) { r.mu.Lock(); r.now = r.now.Add(d); r.mu.Unlock() }

func (r *wrig) journal(t *testing.T) *round.Journal {
	t.Helper()
	j, err := r.d.Book.Journal(wRound, false)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (r *wrig) green(t *testing.T, st round.Step, n string) {
	t.Helper()
	j := r.journal(t)
	if _, err := j.StartStep(st, n, round.Meta{}); err != nil {
		t.Fatalf("start %s: %v", st, err)
	}
	if _, err := j.FinishStep(st, n, round.Meta{}); err != nil {
		t.Fatalf("finish %s: %v", st, err)
	}
}

// writePlan writes the node's plan as simulate_upgrade records it.
func (r *wrig) writePlan(t *testing.T, digest string) {
	t.Helper()
	b, err := json.Marshal(window.NodePlan{Node: wNode, TargetKernel: wTarget, RunningKernel: wRunning, PackageDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.d.Book.WriteNodeFile(wRound, window.NodePlansDir, wNode, b); err != nil {
		t.Fatal(err)
	}
}

func (r *wrig) call(t *testing.T, tool string, args map[string]any) (map[string]any, *Result) {
	t.Helper()
	tl := testTools().Get(tool)
	if tl == nil {
		t.Fatalf("no tool %s", tool)
	}
	b, _ := json.Marshal(args)
	out, res := tl.CallJSON(context.Background(), r.d, b, func(float64, float64, string) {})
	ob, _ := json.Marshal(out)
	var m map[string]any
	_ = json.Unmarshal(ob, &m)
	return m, res
}

// approve calls tool, signs the request it answers and calls again.
func (r *wrig) approve(t *testing.T, tool string, args map[string]any) *Result {
	t.Helper()
	_, res := r.call(t, tool, args)
	if res.Status != StatusApprovalRequired {
		t.Fatalf("%s without approval: %s %v", tool, res.Status, res.Reasons)
	}
	with := map[string]any{"approval": "signed:" + digestOfRequest(res.Approval.Request)}
	for k, v := range args {
		with[k] = v
	}
	_, res = r.call(t, tool, with)
	return res
}

func digestOfRequest(req string) string { return req[strings.LastIndex(req, " ")+1:] }

func (r *wrig) journalBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.root, "rounds", wRound, round.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *wrig) drained(t *testing.T) {
	t.Helper()
	if res := r.approve(t, "drain_node", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, res.Reasons)
	}
}

func TestToolsRunAWindowOnFakes(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	if res := r.approve(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("install: %s %v", res.Status, res.Reasons)
	}
	r.host.InstallState = "finished"
	if _, res := r.call(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("install follow: %s %v", res.Status, res.Reasons)
	}
	if res := r.approve(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("trial boot: %s %v", res.Status, res.Reasons)
	}
	if _, res := r.call(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("trial boot before the reboot: %s %v", res.Status, res.Reasons)
	}
	r.host.Boot(false)
	if _, res := r.call(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("trial boot follow: %s %v", res.Status, res.Reasons)
	}
	for _, st := range []round.Step{round.StepVerify, round.StepUncordon, round.StepGPUAcceptance} {
		r.onBoot(t, st, wNode)
	}
	if res := r.approve(t, "promote_kernel", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("promote: %s %v", res.Status, res.Reasons)
	}
	for _, what := range []string{"install", "prepare", "reboot", "promote"} {
		if n := r.host.Count(what); n != 1 {
			t.Errorf("%s ran %d times", what, n)
		}
	}
	run := r.journal(t).State().Node(wNode).Steps[round.StepPromote].Last()
	if run.ApprovalID == "" || run.PlanDigest == "" {
		t.Errorf("promote start journaled without approval or digest: %+v", run)
	}
}

// Bypass: a start that errored "not sure whether it started", then a call
// without approval. Before: re-entry started apt with no approval.
func TestBypassReentryWithoutApprovalAfterFailedStart(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.host.FailStart = errors.New("ssh: handshake failed")
	if res := r.approve(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusFailed {
		t.Fatalf("uncertain start: %s %v", res.Status, res.Reasons)
	}
	r.host.FailStart = nil
	_, res := r.call(t, "install_updates", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired || r.host.Count("install") != 0 {
		t.Fatalf("re-entry without approval: %s %v; installs %d", res.Status, res.Reasons, r.host.Count("install"))
	}
}

// Bypass: simulate_upgrade rewrote plan.json between the approval and the
// re-entry. Before: re-entry started apt with the new digest.
func TestBypassPlanFileRewrittenBeforeReentry(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.host.FailStart = errors.New("ssh: session closed")
	r.approve(t, "install_updates", map[string]any{"node": wNode})
	r.host.FailStart = nil
	r.writePlan(t, "sha256:rewritten")
	r.host.Digest = "sha256:rewritten"
	_, res := r.call(t, "install_updates", map[string]any{"node": wNode})
	if r.host.Count("install") != 0 {
		t.Fatalf("re-entry installed from the rewritten plan: %s %v", res.Status, res.Reasons)
	}
	// A stale approval of the first digest does not start it either.
	_, res = r.call(t, "install_updates", map[string]any{"node": wNode, "approval": "signed:" + wDigest})
	if res.Status == StatusOK || res.Status == StatusInProgress || r.host.Count("install") != 0 {
		t.Fatalf("old approval on a changed plan: %s %v", res.Status, res.Reasons)
	}
	for _, a := range r.host.Actions {
		if a.What == "install" && a.Digest != "sha256:rewritten" {
			t.Fatalf("installed digest %s", a.Digest)
		}
	}
}

// Bypass: 20 concurrent promote_kernel calls with one valid approval.
// Before: the nonce was used once and 17 others ran through re-entry.
func TestBypassConcurrentCallsOneApproval(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.readyToPromote(t)
	_, res := r.call(t, "promote_kernel", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired {
		t.Fatalf("promote: %s %v", res.Status, res.Reasons)
	}
	approval := "signed:" + digestOfRequest(res.Approval.Request)
	var wg sync.WaitGroup
	statuses := make([]Status, 20)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, res := r.call(t, "promote_kernel", map[string]any{"node": wNode, "approval": approval})
			statuses[i] = res.Status
		}()
	}
	wg.Wait()
	if n := r.host.Count("promote"); n != 1 {
		t.Fatalf("20 concurrent calls with one approval promoted %d times (%v)", n, statuses)
	}
}

// Bypass: fleet_check right after plan_round, check_gate before promote.
// Before: a failed fleet check stopped the round.
func TestBypassChecksBeforeTheirPhase(t *testing.T) {
	r := newWRig(t)
	before := r.journalBytes(t)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fleet_check", nil}, {"record_fleet_check", nil},
		{"check_gate", map[string]any{"node": wNode}}, {"close_window", map[string]any{"node": wNode}},
	} {
		_, res := r.call(t, c.tool, c.args)
		if res.Status != StatusRefused || !strings.Contains(strings.Join(res.Reasons, " "), "not yet") {
			t.Errorf("%s before its phase: %s %v", c.tool, res.Status, res.Reasons)
		}
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Fatal("a check before its phase wrote the journal")
	}
	if st := r.journal(t).State(); st.Stop != nil {
		t.Fatalf("round stopped: %+v", st.Stop)
	}
}

// Bypass: the Lease is lost mid-window. Before: only logged; install,
// trial boot and promote never checked it.
func TestBypassLeaseLostMidWindow(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.lease.Steal("server-b")
	res := r.approve(t, "install_updates", map[string]any{"node": wNode})
	if res.Status != StatusFailed || r.host.Count("install") != 0 {
		t.Fatalf("install after the Lease was stolen: %s %v", res.Status, res.Reasons)
	}
	st := r.journal(t).State()
	if st.Stop == nil || !strings.Contains(st.Stop.Reason, string(round.RuleWindowLease)) {
		t.Fatalf("no journaled stop under window_lease: %+v", st.Stop)
	}
}

func TestInstallOverdueFails(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.approve(t, "install_updates", map[string]any{"node": wNode})
	r.advance(3 * time.Hour)
	_, res := r.call(t, "install_updates", map[string]any{"node": wNode})
	if res.Status != StatusFailed || !strings.Contains(strings.Join(res.Reasons, " "), "longer than its bound") {
		t.Fatalf("overdue install: %s %v", res.Status, res.Reasons)
	}
}

func TestDrainReentryAfterCrash(t *testing.T) {
	r := newWRig(t)
	// A drain whose start was journaled under an approval (its signed
	// bytes kept, as the chokepoint keeps them), then the process died
	// before the cordon.
	pv, err := r.kube.PreviewDrain(t.Context(), wNode, drain.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	dp, err := window.DecideDrain(wNode, pv)
	if err != nil {
		t.Fatal(err)
	}
	text := "signed:" + dp.Digest()
	r.d.Approvals.(*syncApprovals).used[text] = true
	if err := r.d.KeepStep(wRound, "drain_node", "drain_node", service.Approved{ID: text, Text: text}, dp); err != nil {
		t.Fatal(err)
	}
	raw, err := window.Encode(dp)
	if err != nil {
		t.Fatal(err)
	}
	j := r.journal(t)
	if _, err := j.StartStep(round.StepDrain, wNode, round.Meta{ApprovalID: text, PlanDigest: dp.Digest(), StepPlan: raw}); err != nil {
		t.Fatal(err)
	}
	_, res := r.call(t, "drain_node", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired || len(r.kube.Actions) != 0 {
		t.Fatalf("re-entry of a drain that never cordoned: %s %v", res.Status, res.Reasons)
	}
	// Cordoned by us before the crash: the re-entry finishes the drain.
	r.kube.Cordoned = map[string]string{wNode: "server-a"}
	if _, res := r.call(t, "drain_node", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("re-entry of a cordoned drain: %s %v", res.Status, res.Reasons)
	}
}

// A drain start written into the journal by hand (no signature kept for
// it) is not carried on, even on a node cordoned as ours: only a fresh
// approval drains it.
func TestHandWrittenDrainStartIsNotCarriedOn(t *testing.T) {
	r := newWRig(t)
	j := r.journal(t)
	if _, err := j.StartStep(round.StepDrain, wNode, round.Meta{ApprovalID: "a", PlanDigest: "sha256:x",
		StepPlan: []byte(`{"node":"` + wNode + `","preview_digest":"sha256:x","evict":["evict ml/trainer-0 (statefulset trainer)"]}`)}); err != nil {
		t.Fatal(err)
	}
	r.kube.Cordoned = map[string]string{wNode: "server-a"}
	if _, res := r.call(t, "drain_node", map[string]any{"node": wNode}); res.Status != StatusApprovalRequired || len(r.kube.Actions) != 0 {
		t.Fatalf("re-entry of a hand-written drain start: %s %v, actions %v", res.Status, res.Reasons, r.kube.Actions)
	}
}

// Read-only tools write nothing anywhere, also with a round open and a
// window in flight; their recording twins do record.
func TestReadOnlyToolsWriteNothing(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	planFile := func() []byte {
		n, err := r.d.Book.ReadNodeFile(wRound, window.NodePlansDir, wNode)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	journal, plan := r.journalBytes(t), planFile()
	holds := r.lease.Holds
	for _, tl := range Builtin().All() {
		if tl.Spec().Kind != ReadOnly {
			continue
		}
		args := map[string]any{}
		if _, ok := tl.InputSchema().Properties["node"]; ok {
			args["node"] = wNode
		}
		r.call(t, tl.Spec().Name, args)
	}
	if !bytes.Equal(journal, r.journalBytes(t)) || !bytes.Equal(plan, planFile()) || r.lease.Holds != holds {
		t.Fatal("a read-only tool wrote the journal, the node plan or the Lease")
	}
	r.host.Digest = "sha256:" + strings.Repeat("b", 64)
	if _, res := r.call(t, "record_simulation", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("record_simulation: %s %v", res.Status, res.Reasons)
	}
	if bytes.Equal(plan, planFile()) || bytes.Equal(journal, r.journalBytes(t)) {
		t.Fatal("record_simulation recorded nothing")
	}
}

type heldBy struct{ hs []actors.Holder }

func (h *heldBy) Holders(context.Context, string) ([]actors.Holder, error) { return h.hs, nil }

// drain_node while kured reboots another node: in progress before any
// signature is asked for, nothing cordoned or recorded, the holder named;
// once kured lets go, the signed call drains; a person's cordon stops the round under
// other_actor.
func TestDrainNodeWaitsForAnotherActor(t *testing.T) {
	r := newWRig(t)
	h := &heldBy{hs: []actors.Holder{{Actor: actors.Kured, Who: "gpu-09", Since: r.now.Add(-time.Minute), Verdict: actors.Wait,
		What: "kured holds its reboot lock for node gpu-09"}}}
	r.d.Others = h
	_, res := r.call(t, "drain_node", map[string]any{"node": wNode})
	if res.Status != StatusInProgress || !strings.Contains(strings.Join(res.Reasons, "\n"), "kured (gpu-09) holds it") ||
		res.NextCall == nil || res.NextCall.Tool != "drain_node" {
		t.Fatalf("drain while kured holds a node: %s %v %+v", res.Status, res.Reasons, res.NextCall)
	}
	if len(r.kube.Cordoned) != 0 || r.journal(t).State().Node(wNode).Steps[round.StepDrain].Last() != nil {
		t.Fatalf("cordoned %v or journaled a drain while waiting", r.kube.Cordoned)
	}
	h.hs = nil
	r.drained(t)

	r2 := newWRig(t)
	r2.d.Others = &heldBy{hs: []actors.Holder{{Actor: actors.Person, Who: "cordon", Verdict: actors.Stop, What: `a person cordoned the node: "PSU swap"`}}}
	_, res = r2.call(t, "drain_node", map[string]any{"node": wNode})
	st := r2.journal(t).State()
	if res.Status != StatusFailed || st.Stop == nil || !strings.Contains(st.Stop.Reason, string(round.RuleOtherActor)) || !strings.Contains(st.Stop.Reason, "PSU swap") {
		t.Fatalf("drain over a person's cordon: %s %v, stop %+v", res.Status, res.Reasons, st.Stop)
	}
}
