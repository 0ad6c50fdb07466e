package window_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// A drain that waits for jobs cordons first (no new job lands), answers
// in progress while they run, and evicts once they finished; the bound
// counts from the drain's journaled start, so a server restart does not
// reset it: past it, the round stops with the node cordoned and nothing
// evicted.
func TestDrainWaitsForJobs(t *testing.T) {
	jobs := map[string][]drain.PodRef{node: {{Namespace: "ml", Name: "llama-ft-0", OwnerKind: "Job", OwnerName: "llama-ft"}}}
	opts := window.DrainOptions{Identity: "server-a", JobSelector: labels.SelectorFromSet(labels.Set{"workload-class": "training"}), JobWait: time.Hour}
	start := func(t *testing.T, r *rig) {
		t.Helper()
		pv, _ := r.kube.PreviewDrain(context.Background(), node, opts.Policy)
		p, err := window.DecideDrain(node, pv)
		if err != nil {
			t.Fatal(err)
		}
		o, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), opts, nil)
		if err != nil || !o.InProgress || !strings.Contains(strings.Join(o.Reasons, " "), "ml/llama-ft-0") ||
			!strings.Contains(strings.Join(o.Reasons, " "), "cordoned") {
			t.Fatalf("start with a job running: %+v, %v", o, err)
		}
		if r.kube.Cordoned[node] != "server-a" {
			t.Fatalf("the node is not cordoned by us while the drain waits: %v", r.kube.Cordoned)
		}
		for _, a := range r.kube.Actions {
			if a.What == "drain" {
				t.Fatalf("evicted while the job runs: %+v", r.kube.Actions)
			}
		}
	}

	t.Run("the job finishes", func(t *testing.T) {
		r := newRig(t)
		r.w.Bounds.Drain += opts.JobWait
		r.kube.Jobs = jobs
		start(t, r)
		r.clk.Add(20 * time.Minute)
		if o, err := r.w.FollowDrain(context.Background(), node, opts, nil); err != nil || !o.InProgress {
			t.Fatalf("still running: %+v, %v", o, err)
		}
		r.kube.Jobs = nil
		o, err := r.w.FollowDrain(context.Background(), node, opts, nil)
		if err != nil || o.InProgress || !r.run(round.StepDrain).Green() {
			t.Fatalf("after the job finished: %+v, %v, %+v", o, err, r.run(round.StepDrain))
		}
	})

	t.Run("a restart does not reset the bound", func(t *testing.T) {
		r := newRig(t)
		r.w.Bounds.Drain += opts.JobWait
		r.kube.Jobs = jobs
		start(t, r)
		r.clk.Add(40 * time.Minute)
		r.crash(t) // a new server process: nothing of the wait is kept in memory
		r.w.Bounds.Drain += opts.JobWait
		if o, err := r.w.FollowDrain(context.Background(), node, opts, nil); err != nil || !o.InProgress ||
			!strings.Contains(strings.Join(o.Reasons, " "), "until 2026-11-03T09:00:00Z") {
			t.Fatalf("after the restart, within the bound from the journaled start: %+v, %v", o, err)
		}
		r.clk.Add(21 * time.Minute)
		r.crash(t)
		r.w.Bounds.Drain += opts.JobWait
		_, err := r.w.FollowDrain(context.Background(), node, opts, nil)
		var st *window.Stopped
		if !errors.As(err, &st) || !strings.Contains(err.Error(), "after waiting 1h0m0s") {
			t.Fatalf("past the bound: %v", err)
		}
		if run := r.run(round.StepDrain); run.State != round.Failed || r.j.State().Stop == nil {
			t.Fatalf("the stop is not journaled: %+v", run)
		}
		if r.kube.Cordoned[node] != "server-a" {
			t.Fatal("the node must stay cordoned for the person's decision")
		}
		for _, a := range r.kube.Actions {
			if a.What == "drain" {
				t.Fatalf("evicted although the jobs still run: %+v", r.kube.Actions)
			}
		}
	})
}
