package window_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestDecideOthers(t *testing.T) {
	now := t0.Add(time.Hour)
	wait := func(since time.Time) actors.Holder {
		return actors.Holder{Actor: actors.Kured, Who: "gpu-07", Since: since, Verdict: actors.Wait, What: "kured reboots gpu-07"}
	}
	for _, tc := range []struct {
		name  string
		hs    []actors.Holder
		want  window.OthersVerdict
		until time.Time
	}{
		{"nobody", nil, window.OthersNone, time.Time{}},
		{"a person", []actors.Holder{{Actor: actors.Person, Who: "cordon", Verdict: actors.Stop}}, window.OthersStop, time.Time{}},
		{"kured since ten minutes", []actors.Holder{wait(now.Add(-10 * time.Minute))}, window.OthersWait, now.Add(20 * time.Minute)},
		{"kured since the bound", []actors.Holder{wait(now.Add(-30 * time.Minute))}, window.OthersStop, now},
		{"the earliest hold counts", []actors.Holder{wait(now.Add(-5 * time.Minute)), wait(now.Add(-29 * time.Minute))}, window.OthersWait, now.Add(time.Minute)},
		{"a hold without a time starts now", []actors.Holder{wait(time.Time{})}, window.OthersWait, now.Add(30 * time.Minute)},
		{"a wait and a person", []actors.Holder{wait(now), {Actor: actors.Person, Verdict: actors.Stop}}, window.OthersStop, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, until, _ := window.DecideOthers(tc.hs, now, 30*time.Minute)
			if v != tc.want || !until.Equal(tc.until) {
				t.Fatalf("%v until %v, want %v until %v", v, until, tc.want, tc.until)
			}
		})
	}
}

type others struct {
	hs  []actors.Holder
	err error
}

func (o *others) Holders(context.Context, string) ([]actors.Holder, error) { return o.hs, o.err }

// Before the cordon: a holder that lets go by itself is waited for
// (nothing recorded, nothing cordoned), past the bound or when a person
// must look the round stops under rule other_actor, and once nobody
// holds the node the drain goes ahead.
func TestTheDrainWaitsForOthersOrStops(t *testing.T) {
	r := newRig(t)
	o := &others{hs: []actors.Holder{{Actor: actors.NodeMaintenance, Who: "network-operator.nvidia.com", Since: t0, Verdict: actors.Wait, What: "NodeMaintenance x asks for the node"}}}
	r.w.Others, r.w.OthersWait = o, time.Hour
	pv, _ := r.kube.PreviewDrain(context.Background(), node, window.DrainOptions{}.Policy)
	p, err := window.DecideDrain(node, pv)
	if err != nil {
		t.Fatal(err)
	}
	start := func() error {
		_, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
		return err
	}
	var waiting *window.Waiting
	if err := start(); !errors.As(err, &waiting) || !strings.Contains(err.Error(), "network-operator.nvidia.com") || !waiting.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("drain while another requestor holds the node: %v", err)
	}
	if run := r.j.StepRun(round.StepDrain, node); (run != nil && len(run.Attempts) != 0) || len(r.kube.Cordoned) != 0 || r.lease.Holder != "" {
		t.Fatalf("while waiting: drain %+v, cordoned %v, Lease held by %q; want nothing", run, r.kube.Cordoned, r.lease.Holder)
	}

	// The wait runs out: the round stops for a person.
	r.clk.t = t0.Add(time.Hour)
	var stopped *window.Stopped
	if err := start(); !errors.As(err, &stopped) {
		t.Fatalf("drain past the wait's bound: %v", err)
	}
	st := r.j.State().Stop
	if st == nil || st.Step != round.StepDrain || !strings.Contains(st.Reason, "rule "+string(round.RuleOtherActor)) || !strings.Contains(st.Reason, "longer than the round waits (1h0m0s)") {
		t.Fatalf("stop: %+v", st)
	}
	if len(r.kube.Cordoned) != 0 {
		t.Fatalf("cordoned %v after the stop", r.kube.Cordoned)
	}
	if _, err := r.j.Decide(round.DecisionResume, node, round.StepDrain, round.Meta{}); err != nil {
		t.Fatal(err)
	}

	// The cluster cannot say: a stop, never a pass.
	o.hs, o.err = nil, errors.New("nodemaintenances: connection refused")
	if err := start(); !errors.As(err, &stopped) || !strings.Contains(err.Error(), "could not tell who else maintains") {
		t.Fatalf("drain when the others cannot be read: %v", err)
	}
	if _, err := r.j.Decide(round.DecisionResume, node, round.StepDrain, round.Meta{}); err != nil {
		t.Fatal(err)
	}

	// Nobody else: the drain goes ahead.
	o.err = nil
	if err := start(); err != nil {
		t.Fatalf("drain with nobody else on the node: %v", err)
	}
	if r.kube.Cordoned[node] == "" {
		t.Fatal("the node was not cordoned")
	}
}

type requestor struct {
	served, ready bool
	err           error
	asked         []string
	released      []string
}

func (q *requestor) Request(_ context.Context, node string) (bool, bool, string, error) {
	q.asked = append(q.asked, node)
	return q.served, q.ready, "Scheduled", q.err
}

func (q *requestor) Release(_ context.Context, node string) (bool, error) {
	q.released = append(q.released, node)
	return q.served, nil
}

// Where the maintenance operator runs, the round asks for the node first
// and cordons only once its request is Ready; it waits, bounded, while
// the operator lets other maintenance finish; the window's end removes
// the request, and the journal says so.
func TestTheDrainAsksTheMaintenanceOperatorFirst(t *testing.T) {
	r := newRig(t)
	q := &requestor{served: true}
	asked := t0
	r.w.Requestor, r.w.OthersWait, r.w.Asked = q, time.Hour, func(string) time.Time { return asked }
	pv, _ := r.kube.PreviewDrain(context.Background(), node, window.DrainOptions{}.Policy)
	p, err := window.DecideDrain(node, pv)
	if err != nil {
		t.Fatal(err)
	}
	start := func() error {
		_, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
		return err
	}
	var waiting *window.Waiting
	if err := start(); !errors.As(err, &waiting) || !strings.Contains(err.Error(), "phase Scheduled") || len(r.kube.Cordoned) != 0 {
		t.Fatalf("drain while the request is not Ready: %v (cordoned %v)", err, r.kube.Cordoned)
	}
	q.ready = true
	if err := start(); err != nil || r.kube.Cordoned[node] == "" {
		t.Fatalf("drain once the request is Ready: %v (cordoned %v)", err, r.kube.Cordoned)
	}
	reasons, err := r.w.Release(context.Background(), node)
	if err != nil || len(q.released) != 1 || !strings.Contains(strings.Join(reasons, "; "), "NodeMaintenance request for "+node+" removed") {
		t.Fatalf("release: %v %v (released %v)", reasons, err, q.released)
	}

	// No maintenance operator: nothing to wait for.
	r2 := newRig(t)
	r2.w.Requestor = &requestor{served: false}
	if _, err := r2.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil); err != nil {
		t.Fatalf("drain without a maintenance operator: %v", err)
	}
}
