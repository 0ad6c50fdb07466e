package round

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// base is the start of every scripted round in the tests.
var base = time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)

// fleetNodes is the test fleet: three control-plane nodes (cp-2 holds the
// Postgres primary and the VIP), two GPU servers (gpu-a labelled canary) and
// a VM.
func fleetNodes() ([]NodeInfo, Placement) {
	return []NodeInfo{
		{Name: "cp-1", ControlPlane: true},
		{Name: "cp-2", ControlPlane: true},
		{Name: "cp-3", ControlPlane: true},
		{Name: "gpu-a", GPU: true, Canary: true, RunningGPUPods: 2},
		{Name: "gpu-b", GPU: true, RunningGPUPods: 1},
		{Name: "vm-1", VM: true},
	}, Placement{PostgresPrimaryNodes: []string{"cp-2"}, VIPNode: "cp-2"}
}

func fleetOrder(t testing.TB) Order {
	t.Helper()
	o, err := PlanOrder(fleetNodes())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Order of the test fleet: cp-1, cp-3, cp-2, gpu-a, gpu-b, vm-1.

// testClock is an injected clock that tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *testClock { return &testClock{t: base} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// builder folds records into a State without any file, for rule tests.
type builder struct {
	t   *testing.T
	s   *State
	now time.Time
}

func newBuilder(t *testing.T) *builder {
	b := &builder{t: t, s: NewState("2026-11"), now: base}
	b.rec(Record{Kind: KindSessionOpened, Round: "2026-11"})
	return b
}

// planned is a builder with the fleet planned and the baseline taken.
func planned(t *testing.T, soak time.Duration) *builder {
	b := newBuilder(t)
	b.rec(Record{Kind: KindPlan, Plan: &Schedule{Order: fleetOrder(t), Soak: Duration(soak)}})
	b.ok(StepBaseline, "")
	return b
}

func (b *builder) rec(r Record) {
	b.t.Helper()
	b.now = b.now.Add(time.Minute)
	r.Seq, r.Time = b.s.LastSeq+1, b.now
	if err := b.s.Apply(r); err != nil {
		b.t.Fatalf("apply %+v: %v", r, err)
	}
}

func (b *builder) start(step Step, node string) {
	b.t.Helper()
	if err := b.s.Admit(step, node, b.now); err != nil {
		b.t.Fatalf("admit %s %s: %v", step, node, err)
	}
	b.rec(Record{Kind: KindStepStarted, Step: step, Node: node})
}

func (b *builder) ok(step Step, node string) {
	b.t.Helper()
	b.start(step, node)
	b.rec(Record{Kind: KindStepFinished, Step: step, Node: node, Outcome: OutcomeDone})
}

func (b *builder) fail(step Step, node, why string) {
	b.t.Helper()
	b.start(step, node)
	b.rec(Record{Kind: KindStepFailed, Step: step, Node: node, Outcome: OutcomeFailed, Detail: why})
}

func (b *builder) decide(d DecisionName, node string, step Step) {
	b.t.Helper()
	if err := b.s.AdmitDecision(d, node, step); err != nil {
		b.t.Fatalf("admit decision %s: %v", d, err)
	}
	b.rec(Record{Kind: KindDecision, Decision: d, Node: node, Step: step, Detail: "by a person"})
}

// window runs node's whole window green, preflight included.
func (b *builder) window(node string) {
	b.t.Helper()
	n := b.s.Node(node)
	for _, st := range PreflightSteps {
		b.ok(st, node)
	}
	b.ok(StepDrain, node)
	if n.VM {
		b.decide(DecisionHypervisorSnapshotTaken, node, "")
	}
	for _, st := range []Step{StepInstall, StepTrialBoot, StepVerify, StepUncordon} {
		b.ok(st, node)
	}
	if n.GPU {
		b.ok(StepGPUAcceptance, node)
	}
	b.ok(StepPromote, node)
	b.ok(StepGate, node)
	if n.Window != WindowClosed {
		b.t.Fatalf("window of %s did not close", node)
	}
}

// allWindows runs every window in order.
func (b *builder) allWindows() {
	b.t.Helper()
	for _, n := range b.s.Nodes {
		b.window(n.Node)
	}
}

func ruleOf(err error) Rule {
	var re *RuleError
	if errors.As(err, &re) {
		return re.Rule
	}
	if err != nil {
		return Rule("not a rule error: " + err.Error())
	}
	return ""
}
