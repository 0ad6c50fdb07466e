package tools

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// jobWaits keeps when a node's drain began waiting for its jobs (in this
// server process; a restart starts the bounded wait again).
type jobWaits struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func (w *jobWaits) start(key string, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[string]time.Time{}
	}
	if t, ok := w.since[key]; ok {
		return t
	}
	w.since[key] = now
	return now
}

func (w *jobWaits) clear(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.since, key)
}

// holdForJobs holds a drain while pods matching the intent's
// drain.wait_for_jobs selector run on the node: a refusal to wait (nothing
// changed) until the bound, then a stop for a person's decision.
func (d *Deps) holdForJobs(ctx context.Context, s *session, node string) error {
	ds := s.settings.Drain
	if ds == nil || ds.WaitForJobs == nil {
		return nil
	}
	sel, err := labels.Parse(ds.WaitForJobs.Selector)
	if err != nil {
		return Refuse("Fix drain.wait_for_jobs.selector in os-layer/settings.yaml.", err.Error())
	}
	kc, err := d.cluster(ctx)
	if err != nil {
		return err
	}
	holding, err := drain.HoldingPods(ctx, kc.Kube, node, sel)
	if err != nil {
		return Fail("Check the API server and call again.", err.Error())
	}
	key := s.id + "/" + node
	if len(holding) == 0 {
		d.jobWaits.clear(key)
		return nil
	}
	now := d.now()
	h := drain.DecideHold(holding, d.jobWaits.start(key, now), now, time.Duration(ds.WaitForJobs.MaxWaitMinutes)*time.Minute)
	if h.Stop {
		d.jobWaits.clear(key)
		return &window.Stop{Step: round.StepDrain, Node: node, Reasons: []string{h.Reason, "nothing was cordoned"},
			Next: "Stop: a person decides — let the jobs finish and sign resume, or drain anyway after telling their owners."}
	}
	return Refuse("Wait: call drain_node again in a few minutes; it goes ahead once the jobs finished.", h.Reason, "nothing was cordoned")
}
