package round

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the golden file; got:\n%s", name, got)
	}
}

// stepTimes is how long each step takes in the scripted rounds.
var stepTimes = map[Step]time.Duration{
	StepInspect: time.Minute, StepSimulate: 2 * time.Minute, StepDownload: 4 * time.Minute,
	StepSnapshot: 3 * time.Minute, StepDrain: 6 * time.Minute, StepInstall: 9 * time.Minute,
	StepTrialBoot: 7 * time.Minute, StepVerify: 2 * time.Minute, StepUncordon: time.Minute,
	StepGPUAcceptance: 5 * time.Minute, StepPromote: time.Minute, StepGate: 3 * time.Minute,
	StepBaseline: 2 * time.Minute, StepFleetCheck: 4 * time.Minute, StepAutoremove: 3 * time.Minute,
	StepClose: time.Minute,
}

// driver runs a round the way an agent does: it follows Status's next step.
type driver struct {
	t       *testing.T
	j       *Journal
	advance func(time.Duration)
	// fail, when it returns a reason, makes that attempt fail.
	fail func(step Step, node string, attempt int) string
	// before, when set, runs before each step starts (the journal may be
	// written from it).
	before func(step Step, node string, attempt int)
	// seen records every next step taken, for the walk test.
	seen []Next
}

// until follows next steps until stop says so.
func (d *driver) until(stop func(Status) bool) Status {
	d.t.Helper()
	attempts := map[Target]int{}
	for range 2000 {
		st := d.j.Status()
		if stop(st) {
			return st
		}
		nx := st.Next
		if nx == nil {
			d.t.Fatalf("no next step: %s", st.NextAction)
		}
		d.seen = append(d.seen, *nx)
		switch {
		case nx.Decision != "":
			d.advance(5 * time.Minute)
			if _, err := d.j.Decide(nx.Decision, nx.Node, nx.Step, Meta{ApprovalID: "sig-" + string(nx.Decision), Detail: "a person decided"}); err != nil {
				d.t.Fatal(err)
			}
		case !nx.WaitUntil.IsZero():
			d.advance(nx.WaitUntil.Sub(d.j.now()))
		case nx.Step == StepClose && !d.j.State().FindingsCommitted:
			d.advance(10 * time.Minute)
			if _, err := d.j.Lesson("drain of cp-2 waited 40s for the Postgres switchover; budget it"); err != nil {
				d.t.Fatal(err)
			}
			if _, err := d.j.FindingsCommitted("3f9c2ab"); err != nil {
				d.t.Fatal(err)
			}
		default:
			tg := Target{Node: nx.Node, Step: nx.Step}
			attempts[tg]++
			if d.before != nil {
				d.before(nx.Step, nx.Node, attempts[tg])
			}
			if _, err := d.j.StartStep(nx.Step, nx.Node, Meta{ApprovalID: approvalFor(nx)}); err != nil {
				d.t.Fatalf("start %s %s: %v", nx.Step, nx.Node, err)
			}
			d.advance(stepTimes[nx.Step])
			if nx.Step == StepSoak {
				continue
			}
			if why := d.failReason(nx.Step, nx.Node, attempts[tg]); why != "" {
				if _, err := d.j.FailStep(nx.Step, nx.Node, Meta{Detail: why}); err != nil {
					d.t.Fatal(err)
				}
				continue
			}
			m := Meta{}
			switch nx.Step {
			case StepInspect:
				m.Kernel = "6.8.0-45-generic"
			case StepVerify:
				m.Kernel = "6.8.0-48-generic"
			}
			if _, err := d.j.FinishStep(nx.Step, nx.Node, m); err != nil {
				d.t.Fatal(err)
			}
		}
		d.advance(time.Minute)
	}
	d.t.Fatal("round did not get there in 2000 steps")
	return Status{}
}

func (d *driver) failReason(step Step, node string, attempt int) string {
	if d.fail == nil {
		return ""
	}
	return d.fail(step, node, attempt)
}

func approvalFor(nx *Next) string {
	if nx.NeedsApproval {
		return "sig-" + nx.Tool + "-" + nx.Node
	}
	return ""
}

func phaseIs(p Phase) func(Status) bool { return func(st Status) bool { return st.Phase == p } }
