package round

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Following next_action alone takes a round from plan to close in the
// right order, with the VM attestation and GPU acceptance where they belong.
func TestStatusNextActionWalksTheRound(t *testing.T) {
	clk := newClock()
	j := openJournal(t, roundDir(t), clk)
	st := j.Status()
	if st.Phase != PhaseNotPlanned || st.Next == nil || st.Next.Step != StepPlan {
		t.Fatalf("fresh round: %+v", st)
	}
	if _, err := j.Plan(fleetOrder(t), soak48, Meta{}); err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, j: j, advance: clk.Advance}
	end := d.until(phaseIs(PhaseClosed))
	if end.NextAction != "Round 2026-11 is closed; nothing is left to do." {
		t.Errorf("closed next_action = %q", end.NextAction)
	}

	var drains, gpuAcceptance, attested []string
	for i, nx := range d.seen {
		switch {
		case nx.Step == StepDrain:
			drains = append(drains, nx.Node)
			if !nx.NeedsApproval || nx.Tool != "drain_node" {
				t.Errorf("drain next step %+v lacks its tool or approval", nx)
			}
		case nx.Step == StepGPUAcceptance:
			gpuAcceptance = append(gpuAcceptance, nx.Node)
		case nx.Decision == DecisionHypervisorSnapshotTaken:
			attested = append(attested, nx.Node)
			if next := d.seen[i+1]; next.Step != StepInstall || next.Node != nx.Node {
				t.Errorf("after the attestation came %+v, want install on %s", next, nx.Node)
			}
		}
	}
	if diff := cmp.Diff([]string{"cp-1", "cp-3", "cp-2", "gpu-a", "gpu-b", "vm-1"}, drains); diff != "" {
		t.Errorf("drain order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"gpu-a", "gpu-b"}, gpuAcceptance); diff != "" {
		t.Errorf("gpu_acceptance on (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"vm-1"}, attested); diff != "" {
		t.Errorf("attestation asked for (-want +got):\n%s", diff)
	}
	tail := func(n int) []Step {
		var out []Step
		for _, nx := range d.seen[len(d.seen)-n:] {
			out = append(out, nx.Step)
		}
		return out
	}
	if diff := cmp.Diff([]Step{StepFleetCheck, StepSoak, StepAutoremove, StepAutoremove, StepClose, StepClose}, tail(6)); diff != "" {
		t.Errorf("closing steps (-want +got):\n%s", diff)
	}
	checkConsistent(t, j)
}

func TestStatusWhenStopped(t *testing.T) {
	clk := newClock()
	j := openJournal(t, roundDir(t), clk)
	if _, err := j.Plan(fleetOrder(t), soak48, Meta{}); err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, j: j, advance: clk.Advance, fail: canaryPanics}
	st := d.until(phaseIs(PhaseStopped))
	if st.Stop == nil || st.Stop.Node != "gpu-a" || st.Stop.Step != StepTrialBoot {
		t.Fatalf("stop = %+v", st.Stop)
	}
	if st.Next == nil || st.Next.Decision != DecisionResume {
		t.Fatalf("next = %+v", st.Next)
	}
	if !strings.Contains(st.NextAction, "a person records a signed resume") {
		t.Errorf("next_action = %q", st.NextAction)
	}
	var b bytes.Buffer
	if err := RenderStatusText(&b, st); err != nil {
		t.Fatal(err)
	}
	golden(t, "status_stopped.txt", b.Bytes())
}

// canaryPanics fails the canary's first trial boot.
func canaryPanics(step Step, node string, attempt int) string {
	if step == StepTrialBoot && node == "gpu-a" && attempt == 1 {
		return "booted 6.8.0-45-generic again: the trial kernel panicked and GRUB fell back to the old entry"
	}
	return ""
}

func TestStatusSoakWaitsAndSaysUntilWhen(t *testing.T) {
	clk := newClock()
	j := openJournal(t, roundDir(t), clk)
	if _, err := j.Plan(fleetOrder(t), soak48, Meta{}); err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, j: j, advance: clk.Advance}
	st := d.until(func(st Status) bool { return st.Next != nil && !st.Next.WaitUntil.IsZero() })
	if !strings.HasPrefix(st.NextAction, "Soak until ") || !strings.Contains(st.NextAction, "(48h0m0s left)") {
		t.Errorf("next_action = %q", st.NextAction)
	}
	if !slices.ContainsFunc(st.RoundSteps, func(s StepStatus) bool { return s.Step == StepSoak && s.State == InFlight }) {
		t.Errorf("soak not shown in flight: %+v", st.RoundSteps)
	}
	if st.SoakEndsAt.IsZero() || st.Next.WaitUntil != st.SoakEndsAt {
		t.Errorf("soak end %v, wait until %v", st.SoakEndsAt, st.Next.WaitUntil)
	}
}

// A node's row lists the steps that started; a pending node has none, so
// a fleet's status grows by a line per node, not one per step. The text
// table still shows every step: "-" for a step to come, "n/a" for GPU
// acceptance on a node without GPUs.
func TestStatusListsStartedStepsOnly(t *testing.T) {
	clk := newClock()
	j := openJournal(t, roundDir(t), clk)
	if _, err := j.Plan(fleetOrder(t), soak48, Meta{}); err != nil {
		t.Fatal(err)
	}
	noErr(t)(j.StartStep(StepInspect, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepInspect, "cp-1", Meta{Kernel: "6.8.0-40-generic"}))
	noErr(t)(j.StartStep(StepSimulate, "cp-1", Meta{}))
	st := j.Status()
	rows := map[string][]Step{}
	for _, n := range st.Nodes {
		var steps []Step
		for _, ss := range n.Steps {
			steps = append(steps, ss.Step)
		}
		rows[n.Node] = steps
	}
	if diff := cmp.Diff([]Step{StepInspect, StepSimulate}, rows["cp-1"]); diff != "" {
		t.Errorf("cp-1's steps (-want +got):\n%s", diff)
	}
	if len(rows["gpu-a"]) != 0 || len(rows["cp-2"]) != 0 {
		t.Errorf("pending nodes list steps: gpu-a %v, cp-2 %v", rows["gpu-a"], rows["cp-2"])
	}
	var b bytes.Buffer
	if err := RenderStatusText(&b, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cp-1", "gpu-a"} {
		var line string
		for _, l := range strings.Split(b.String(), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == want {
				line = l
			}
		}
		// The step cells follow the window's: "#", node, a role of one
		// or two words ("gpu (canary)"), window.
		f := strings.Fields(line)
		at := 3
		if len(f) > at && strings.HasPrefix(f[at], "(") {
			at++
		}
		if len(f) < at+1+len(NodeSteps) {
			t.Fatalf("no full row for %s in:\n%s", want, b.String())
		}
		cells := f[at-3:]
		gpuCell := cells[4+slices.Index(NodeSteps, StepGPUAcceptance)]
		switch want {
		case "cp-1":
			if cells[4] != "ok" || cells[5] == "-" || gpuCell != "n/a" || cells[6] != "-" {
				t.Errorf("cp-1's row: %q", line)
			}
		case "gpu-a":
			if gpuCell != "-" || cells[4] != "-" {
				t.Errorf("gpu-a's row: %q", line)
			}
		}
	}
}

// A thousand-node round's status is a summary and a page: at the start,
// in the middle and at the end it stays within 16 KB as JSON and as the
// text table, names the open window, and pages on by cursor; a filter by
// node or window state picks those rows alone. A small round shows
// every node.
func TestStatusPagesALargeRound(t *testing.T) {
	st := NewState("2026-11")
	seq := uint64(0)
	now := base
	add := func(r Record) {
		t.Helper()
		seq++
		now = now.Add(time.Second)
		r.Seq, r.Time = seq, now
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	o, err := PlanOrder(bigFleet(1000), Placement{})
	if err != nil {
		t.Fatal(err)
	}
	add(Record{Kind: KindSessionOpened, Round: "2026-11"})
	add(Record{Kind: KindPlan, Plan: &Schedule{Order: o}})
	add(Record{Kind: KindStepStarted, Step: StepBaseline})
	add(Record{Kind: KindStepFinished, Step: StepBaseline, Outcome: OutcomeDone})
	window := func(node string, gpu bool, through Step) {
		for _, s := range NodeSteps {
			if s == StepGPUAcceptance && !gpu {
				continue
			}
			add(Record{Kind: KindStepStarted, Step: s, Node: node, Detail: "a detail of some length, as a step leaves"})
			if s == through {
				return
			}
			add(Record{Kind: KindStepFinished, Step: s, Node: node, Outcome: OutcomeDone, Detail: "finished with a detail of some length"})
		}
	}
	check := func(when string, wantOpen string) Status {
		t.Helper()
		s := st.Status(now).Page(NodeQuery{})
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var txt strings.Builder
		if err := RenderStatusText(&txt, s); err != nil {
			t.Fatal(err)
		}
		if len(b) > 16<<10 || txt.Len() > 16<<10 {
			t.Errorf("%s: status is %d bytes of JSON and %d of text, want at most 16 KiB each", when, len(b), txt.Len())
		}
		if s.WindowsTotal != 1000 || s.NodesShown != len(s.Nodes) || s.NodesShown > PageNodes {
			t.Errorf("%s: %d of %d nodes shown in %d rows", when, s.NodesShown, s.WindowsTotal, len(s.Nodes))
		}
		if wantOpen != "" && (s.CurrentWindow != wantOpen || len(s.Nodes) == 0 || s.Nodes[0].Node != wantOpen) {
			t.Errorf("%s: the page starts at %+v, want the open window %s first", when, s.Nodes[:min(1, len(s.Nodes))], wantOpen)
		}
		if !strings.Contains(txt.String(), "node(s) shown") {
			t.Errorf("%s: the text does not say it is a page:\n%s", when, txt.String())
		}
		return s
	}
	check("planned", "")
	for i, p := range o.Positions {
		if i == 500 {
			window(p.Node, p.GPU, StepInstall)
			s := check("window 501 open", p.Node)
			if s.Windows[WindowClosed] != 500 || s.Windows[WindowOpen] != 1 || s.Windows[WindowPending] != 499 {
				t.Errorf("windows by state: %v", s.Windows)
			}
			next := st.Status(now).Page(NodeQuery{Cursor: s.NextCursor})
			if s.NextCursor != i+1+PageNodes || len(next.Nodes) != PageNodes || next.Nodes[0].Index != s.NextCursor {
				t.Errorf("next page from cursor %d: %d rows from %+v", s.NextCursor, len(next.Nodes), next.Nodes[:1])
			}
			one := st.Status(now).Page(NodeQuery{Node: "gpu-0002"})
			if len(one.Nodes) != 1 || one.Nodes[0].Node != "gpu-0002" || one.Nodes[0].Window != WindowClosed || len(one.Nodes[0].Steps) == 0 {
				t.Errorf("node gpu-0002 alone: %+v", one.Nodes)
			}
			closed := st.Status(now).Page(NodeQuery{Window: WindowClosed, Limit: MaxPageNodes + 5})
			if len(closed.Nodes) != MaxPageNodes || closed.Nodes[0].Index != 1 || closed.NextCursor != MaxPageNodes+1 {
				t.Errorf("closed windows: %d rows from %d, next %d", len(closed.Nodes), closed.Nodes[0].Index, closed.NextCursor)
			}
			add(Record{Kind: KindStepFinished, Step: StepInstall, Node: p.Node, Outcome: OutcomeDone})
			for _, s := range NodeSteps[slices.Index(NodeSteps, StepInstall)+1:] {
				if s != StepGPUAcceptance || p.GPU {
					add(Record{Kind: KindStepStarted, Step: s, Node: p.Node})
					add(Record{Kind: KindStepFinished, Step: s, Node: p.Node, Outcome: OutcomeDone})
				}
			}
			continue
		}
		window(p.Node, p.GPU, "")
	}
	check("every window closed", "")

	small := NewState("2026-11")
	st = small
	seq = 0
	o10, err := PlanOrder(bigFleet(10), Placement{})
	if err != nil {
		t.Fatal(err)
	}
	add(Record{Kind: KindSessionOpened, Round: "2026-11"})
	add(Record{Kind: KindPlan, Plan: &Schedule{Order: o10}})
	if s := small.Status(now).Page(NodeQuery{}); len(s.Nodes) != 10 || s.NodesShown != 10 || s.NextCursor != 0 {
		t.Errorf("a 10-node round shows %d rows (shown %d, next %d), want every node", len(s.Nodes), s.NodesShown, s.NextCursor)
	}
}
