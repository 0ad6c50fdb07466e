package lab

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round"
)

// demoState is a round in the middle of cp-1's window: its preflight done,
// drain and trial boot done, the gate failed once.
func demoState() *round.State {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := func(from, to int, o round.Outcome) *round.StepRun {
		return &round.StepRun{State: round.Done, Attempts: []round.Attempt{{Started: at(from), Ended: at(to), Outcome: o}}}
	}
	st := round.NewState("2026-12")
	st.Plan = &round.Schedule{Soak: round.Duration(48 * time.Hour)}
	st.Nodes = []*round.NodeState{{Position: round.Position{Node: "cp-1"}, Steps: map[round.Step]*round.StepRun{
		round.StepInspect:   run(0, 400, round.OutcomeDone),
		round.StepSimulate:  run(400, 1000, round.OutcomeDone),
		round.StepDownload:  run(1000, 1500, round.OutcomeDone),
		round.StepSnapshot:  run(1500, 2000, round.OutcomeDone),
		round.StepDrain:     run(3000, 5400, round.OutcomeDone),
		round.StepTrialBoot: run(6000, 66000+6000, round.OutcomeDone),
		round.StepGate:      run(80000, 80300, round.OutcomeFailed),
	}}}
	return st
}

func TestStepLine(t *testing.T) {
	st := demoState()
	for _, tc := range []struct {
		name string
		rec  round.Record
		want string
	}{
		{"a window step", round.Record{Kind: round.KindStepFinished, Node: "cp-1", Step: round.StepDrain},
			"   0:41  cp-1           drain           done     2.4s"},
		{"the trial boot names the kernel it booted", round.Record{Kind: round.KindStepFinished, Node: "cp-1", Step: round.StepTrialBoot, Kernel: "6.8.0-51-generic"},
			"   0:41  cp-1           trial_boot      done     1m6s  (runs 6.8.0-51-generic)"},
		{"a failure says why", round.Record{Kind: round.KindStepFailed, Node: "cp-1", Step: round.StepGate, Detail: "new failure vs baseline:\n dcgm-exporter"},
			"   0:41  cp-1           gate            FAILED   0.3s    new failure vs baseline: dcgm-exporter"},
		{"preflight is one line, at its snapshot", round.Record{Kind: round.KindStepFinished, Node: "cp-1", Step: round.StepSnapshot},
			"   0:41  cp-1           preflight       done     2.0s    inspect, simulate, download, snapshot"},
		{"the other preflight steps pass silently", round.Record{Kind: round.KindStepFinished, Node: "cp-1", Step: round.StepSimulate}, ""},
		{"a step start is silent", round.Record{Kind: round.KindStepStarted, Node: "cp-1", Step: round.StepDrain}, ""},
		{"the soak's start is shown", round.Record{Kind: round.KindStepStarted, Step: round.StepSoak},
			"   0:41  round          soak            started  (48h0m0s on the lab clock)"},
		{"a decision", round.Record{Kind: round.KindDecision, Node: "gpu-2", Decision: round.DecisionResidualRiskAccepted, Detail: "known upstream"},
			"   0:41  gpu-2          decision        residual_risk_accepted  known upstream"},
		{"a lesson", round.Record{Kind: round.KindLesson, Detail: "fallback drill on gpu-canary-1 passed"},
			"   0:41  round          lesson          fallback drill on gpu-canary-1 passed"},
		{"the plan names the order", round.Record{Kind: round.KindPlan},
			"   0:41  round          plan            done     1 nodes in order: cp-1"},
		{"a notification is silent", round.Record{Kind: round.KindNotification, Detail: "sent"}, ""},
		{"a step the state does not know", round.Record{Kind: round.KindStepFinished, Node: "cp-9", Step: round.StepDrain}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StepLine(tc.rec, st, 41*time.Second); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestKernelChangesAndReportSummary(t *testing.T) {
	st := round.NewState("2026-12")
	for _, n := range []struct{ node, before, after string }{
		{"cp-1", "6.8.0-48-generic", "6.8.0-51-generic"}, {"cp-2", "6.8.0-48-generic", "6.8.0-51-generic"},
		{"gpu-1", "6.8.0-45-generic", "6.8.0-51-generic"}, {"gpu-2", "", ""},
	} {
		st.Nodes = append(st.Nodes, &round.NodeState{Position: round.Position{Node: n.node}, KernelBefore: n.before, KernelAfter: n.after})
	}
	want := []string{
		"2 of 4 nodes 6.8.0-48-generic -> 6.8.0-51-generic (cp-1, cp-2)",
		"1 of 4 nodes 6.8.0-45-generic -> 6.8.0-51-generic (gpu-1)",
		"1 of 4 nodes unknown -> unchanged (gpu-2)",
	}
	if d := cmp.Diff(want, kernelChanges(st)); d != "" {
		t.Errorf("kernel changes (-want +got):\n%s", d)
	}
	report := "# Patch round 2026-12\n\n- Phase: closed\n- Windows closed: 4 of 4\n\n![Timeline](timeline.svg)\n\n## Order\n\n- not this\n"
	if d := cmp.Diff([]string{"- Phase: closed", "- Windows closed: 4 of 4"}, reportSummary(report)); d != "" {
		t.Errorf("report summary (-want +got):\n%s", d)
	}
}

// checkDemoOutput checks what a demo round printed, as a person follows it:
// short enough to read (at most about 120 lines), and every step of every
// window named on a line of its own as it ended.
func checkDemoOutput(t *testing.T, out string, st *round.State) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > 120 {
		t.Errorf("the demo printed %d lines, want at most about 120", len(lines))
	}
	if st == nil {
		t.Fatal("no round state kept from the journal")
	}
	named := 0
	for _, n := range st.Nodes {
		for _, step := range round.WindowSteps {
			if r := n.Steps[step]; r == nil || len(r.Attempts) == 0 {
				continue
			}
			if !slices.ContainsFunc(lines, func(l string) bool {
				f := strings.Fields(l)
				return len(f) >= 3 && f[1] == n.Node && f[2] == string(step)
			}) {
				t.Errorf("no line names %s of %s", step, n.Node)
			}
			named++
		}
	}
	if named == 0 {
		t.Error("no window step ran")
	}
	t.Logf("the demo printed %d lines naming %d window steps", len(lines), named)
}
