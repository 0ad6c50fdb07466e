package ops

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/notify"
	"github.com/mcp-patch/mcp-patch/round"
)

// The journal's records of one window, as the operations worker sees them:
// which become node Events and which notices are sent.
func TestOpsActions(t *testing.T) {
	now := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	type seen struct {
		rec round.Record
		st  *round.State
	}
	var all []seen
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { now = now.Add(time.Minute); return now }),
		round.WithObserver(func(r round.Record, st *round.State) { all = append(all, seen{r, st}) }))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}, {Name: "gpu-b", GPU: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ round.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Plan(o, time.Hour, round.Meta{}))
	must(j.StartStep(round.StepBaseline, "", round.Meta{}))
	must(j.FinishStep(round.StepBaseline, "", round.Meta{}))
	for _, n := range []string{"gpu-a", "gpu-b"} {
		for _, s := range round.PreflightSteps {
			must(j.StartStep(s, n, round.Meta{}))
			must(j.FinishStep(s, n, round.Meta{Kernel: "6.8.0-40-generic"}))
		}
	}
	kernel := "6.8.0-40-generic"
	for _, s := range round.WindowSteps {
		if s == round.StepTrialBoot {
			kernel = "6.8.0-45-generic"
		}
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		must(j.FinishStep(s, "gpu-a", round.Meta{Kernel: kernel}))
	}
	must(j.StartStep(round.StepDrain, "gpu-b", round.Meta{}))
	must(j.FinishStep(round.StepDrain, "gpu-b", round.Meta{}))
	must(j.StartStep(round.StepInstall, "gpu-b", round.Meta{}))
	must(j.FinishStep(round.StepInstall, "gpu-b", round.Meta{}))
	must(j.StartStep(round.StepTrialBoot, "gpu-b", round.Meta{}))
	must(j.FinishStep(round.StepTrialBoot, "gpu-b", round.Meta{Kernel: "6.8.0-45-generic"}))
	must(j.StartStep(round.StepVerify, "gpu-b", round.Meta{}))
	must(j.FailStep(round.StepVerify, "gpu-b", round.Meta{Detail: "bond0 has 1 active slave, want 2"}))

	var events []string
	var notes []notify.Event
	for _, s := range all {
		ev, n := Actions(s.rec, s.st)
		if ev != nil {
			events = append(events, ev.Node+" "+ev.Reason()+" | "+ev.Kernel)
		}
		notes = append(notes, n...)
	}
	joined := strings.Join(events, "\n")
	for _, want := range []string{
		"gpu-a PatchDrainStarted | old 6.8.0-40-generic",
		"gpu-a PatchTrialBootDone | trial 6.8.0-45-generic (default still 6.8.0-40-generic)",
		"gpu-a PatchPromoteDone | promoted 6.8.0-45-generic",
		"gpu-a PatchGateDone | promoted 6.8.0-45-generic",
		"gpu-b PatchVerifyFailed | trial 6.8.0-45-generic (default still 6.8.0-40-generic)",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no event %q among:\n%s", want, joined)
		}
	}
	for _, quiet := range []string{"PatchInspect", "PatchSimulate", "gpu-a PatchVerifyDone", "gpu-a PatchGateStarted"} {
		if strings.Contains(joined, quiet) {
			t.Errorf("a green read-only check wrote an Event (%s):\n%s", quiet, joined)
		}
	}
	if len(notes) != 2 || notes[0].Kind != notify.WindowClosed || notes[0].Node != "gpu-a" ||
		notes[1].Kind != notify.RoundStopped || notes[1].Node != "gpu-b" || notes[1].Step != "verify" || !strings.Contains(notes[1].Why, "bond0") ||
		!strings.Contains(notes[1].Decide, "rollback_node") {
		t.Fatalf("notes %+v", notes)
	}
}

// A person's acceptance of a red gate closes the window: people hear that
// it closed, as after a green gate; other decisions tell nothing.
func TestOpsActionsWindowClosedByAnAcceptedGate(t *testing.T) {
	opened := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	st := &round.State{RoundID: "2026-11", Nodes: []*round.NodeState{{Position: round.Position{Node: "cp-1"},
		Window: round.WindowClosed, Opened: opened, ClosedAt: opened.Add(40 * time.Minute), ClosedSeq: 30,
		KernelBefore: "6.8.0-40-generic", Steps: map[round.Step]*round.StepRun{}}}}
	accept := round.Record{Seq: 30, Kind: round.KindDecision, Decision: round.DecisionResidualRiskAccepted, Step: round.StepGate,
		Node: "cp-1", Detail: "residual_risk_accepted by alice: etcd watched by hand"}
	ev, notes := Actions(accept, st)
	if ev != nil || len(notes) != 1 || notes[0].Kind != notify.WindowClosed || notes[0].Node != "cp-1" ||
		!strings.Contains(notes[0].Why, "after 40m0s; its red gate accepted: residual_risk_accepted by alice") {
		t.Fatalf("accepted gate: event %+v notes %+v", ev, notes)
	}
	for _, rec := range []round.Record{
		{Seq: 31, Kind: round.KindDecision, Decision: round.DecisionResume, Node: "cp-1"},
		{Seq: 29, Kind: round.KindDecision, Decision: round.DecisionResidualRiskAccepted, Step: round.StepVerify, Node: "cp-1"},
	} {
		if ev, notes := Actions(rec, st); ev != nil || len(notes) != 0 {
			t.Errorf("%s %s: event %+v notes %+v", rec.Decision, rec.Step, ev, notes)
		}
	}
}

// The journal observer never holds the round up: with the worker's queue
// full a record's notices are skipped and said so in the log; a server
// without operations observes nothing.
func TestOpsObserveNeverBlocks(t *testing.T) {
	var log bytes.Buffer
	o := New(nil, nil, nil, slog.New(slog.NewTextHandler(&log, nil)))
	st := &round.State{RoundID: "2026-11"}
	for i := range opsQueue + 3 {
		o.Observe(round.Record{Seq: uint64(i)}, st)
	}
	if len(o.queue) != opsQueue {
		t.Fatalf("queue holds %d, want %d", len(o.queue), opsQueue)
	}
	if n := strings.Count(log.String(), "operations queue full"); n != 3 {
		t.Fatalf("%d skipped records logged, want 3:\n%s", n, log.String())
	}
	var none *Ops
	none.Observe(round.Record{}, st)
	none.RolledBack("2026-11", "gpu-1", "x")
	none.ApprovalUsed("drain_node", "gpu-1")
}
