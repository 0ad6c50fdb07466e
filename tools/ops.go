package tools

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/alerts"
	"github.com/mcp-patch/mcp-patch/kube/nodeevents"
	"github.com/mcp-patch/mcp-patch/metrics"
	"github.com/mcp-patch/mcp-patch/notify"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/maintenance"
)

// Ops follows the round through its journal and tells the world: webhook
// notifications, Prometheus metrics, Events and annotations on the Nodes.
// It watches every record the journal writes (round.WithObserver), so it
// sees each step whichever tool recorded it; none of it can block or fail
// the round: work is queued and done by one background worker, failures
// are logged and, for notifications, recorded in the journal.
type Ops struct {
	Notifier *notify.Notifier
	Metrics  *metrics.Metrics
	// Nodes returns the Event/annotation recorder (connecting on first
	// use); nil writes no Events.
	Nodes func(ctx context.Context) (*nodeevents.Recorder, error)

	// alerts and settings, when set, let the worker silence a window's
	// node in Alertmanager (the intent's alerts.silence_node).
	alerts   func() (alerts.Source, bool, error)
	settings func(round string) *intent.AlertSettings

	log   *slog.Logger
	queue chan observed
	wg    sync.WaitGroup

	mu       sync.Mutex
	silenced map[string]string // node → Alertmanager silence id
}

type observed struct {
	rec round.Record
	st  *round.State
	// barrier, when set, is closed by the worker in place of handling a
	// record: everything queued before it has been handled.
	barrier chan struct{}
}

// opsQueue bounds the records waiting for the worker; beyond it a record's
// Events and notices are dropped (and logged), never the round held up.
const opsQueue = 1024

// newOps returns an Ops; Start runs its worker.
func newOps(n *notify.Notifier, m *metrics.Metrics, nodes func(context.Context) (*nodeevents.Recorder, error), log *slog.Logger) *Ops {
	return &Ops{Notifier: n, Metrics: m, Nodes: nodes, log: log, queue: make(chan observed, opsQueue), silenced: map[string]string{}}
}

// Observe is the journal observer: it queues the record and returns.
func (o *Ops) Observe(rec round.Record, st *round.State) {
	if o == nil {
		return
	}
	select {
	case o.queue <- observed{rec: rec, st: st}:
	default:
		o.log.Warn("operations queue full: this record's Events and notifications are skipped", "round", st.RoundID, "seq", rec.Seq)
	}
}

// Start runs the worker until ctx ends.
func (o *Ops) Start(ctx context.Context) {
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case ob := <-o.queue:
				if ob.barrier != nil {
					close(ob.barrier)
					continue
				}
				o.handle(ctx, ob)
			}
		}
	}()
}

// Settle waits (bounded by ctx) until the worker has handled every record
// queued so far and every notification they started has been delivered
// and its outcome journaled, and again for what those records started,
// until a pass finds nothing in flight. A call settles before it commits
// the round's files, so the commit holds the notices its records caused.
func (o *Ops) Settle(ctx context.Context) error {
	if o == nil {
		return nil
	}
	for {
		b := make(chan struct{})
		select {
		case o.queue <- observed{barrier: b}:
		case <-ctx.Done():
			return fmt.Errorf("operations queue still full: %w", ctx.Err())
		}
		select {
		case <-b:
		case <-ctx.Done():
			return fmt.Errorf("records still waiting for their Events and notifications: %w", ctx.Err())
		}
		if o.Notifier.Idle() {
			return nil
		}
		if err := o.Notifier.Settle(ctx); err != nil {
			return err
		}
	}
}

// Wait waits for the worker to end (after its context ended).
func (o *Ops) Wait() { o.wg.Wait() }

func (o *Ops) handle(ctx context.Context, ob observed) {
	step, notes := opsActions(ob.rec, ob.st)
	for _, n := range notes {
		o.Notifier.Notify(n)
	}
	if ob.rec.Kind == round.KindStepStarted && ob.rec.Step == round.StepDrain {
		o.silenceWindow(ctx, ob.st, ob.rec.Node)
	}
	if step == nil || o.Nodes == nil {
		return
	}
	r, err := o.Nodes(ctx)
	if err != nil {
		o.log.Warn("no Kubernetes Events for this step: cluster unreachable", "node", step.Node, "step", step.Step, "err", err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.Record(cctx, *step); err != nil {
		o.log.Warn("node Event or annotation not written", "node", step.Node, "step", step.Step, "err", err)
	}
}

// approvalNeeded notes a request waiting for a signature and, the first
// time, tells people.
func (o *Ops) approvalNeeded(tool string, p Plan, expires time.Time, now time.Time) {
	if o == nil {
		return
	}
	if !o.Metrics.ApprovalPending(metrics.Pending{Tool: tool, Node: p.Node, Round: p.Round, Since: now, Expires: expires}) {
		return
	}
	o.Notifier.Notify(notify.Event{Kind: notify.ApprovalNeeded, Round: p.Round, Node: p.Node, Tool: tool,
		Request:     strings.Join(p.Summary, "; "),
		SignCommand: "mcp-patch approve request.txt (the request text from the tool result, or from mcp-patch tool " + tool + ")",
		Expires:     expires})
}

// approvalUsed drops the pending request once a signed approval was used.
func (o *Ops) approvalUsed(tool, node string) {
	if o == nil {
		return
	}
	o.Metrics.ApprovalResolved(tool, node)
}

// rolledBack tells people a node went back to its old kernel.
func (o *Ops) rolledBack(roundID, node, why string) {
	if o == nil {
		return
	}
	o.Notifier.Notify(notify.Event{Kind: notify.NodeRolledBack, Round: roundID, Node: node, Why: why,
		Decide: "the round stays stopped: resume (the node stays on its old kernel), retry the node later, or abort (record_decision)"})
}

// opsActions decides, from one journal record and the state it made, the
// node Event to write and the notices to send (pure; table-tested).
func opsActions(rec round.Record, st *round.State) (*nodeevents.Step, []notify.Event) {
	var notes []notify.Event
	var ev *nodeevents.Step
	switch rec.Kind {
	case round.KindStepStarted, round.KindStepFinished, round.KindStepFailed:
	case round.KindDecision:
		// A person's acceptance of a red gate closes the window too.
		if n := st.Node(rec.Node); n != nil && rec.Step == round.StepGate && n.Window == round.WindowClosed && n.ClosedSeq == rec.Seq {
			notes = append(notes, notify.Event{Kind: notify.WindowClosed, Round: st.RoundID, Node: rec.Node, Time: rec.Time,
				Why: fmt.Sprintf("%s on %s after %s; its red gate accepted: %s", kernelState(n), rec.Node, n.ClosedAt.Sub(n.Opened).Round(time.Minute), rec.Detail)})
		}
		return nil, notes
	default:
		return nil, nil
	}
	state := map[round.Kind]string{round.KindStepStarted: "started", round.KindStepFinished: "done", round.KindStepFailed: "failed"}[rec.Kind]
	stopped := rec.Kind == round.KindStepFailed && st.Stop != nil && st.Stop.Seq == rec.Seq
	if stopped {
		notes = append(notes, notify.Event{Kind: notify.RoundStopped, Round: st.RoundID, Node: rec.Node, Step: string(rec.Step), Time: rec.Time,
			Why:    rec.Detail,
			Decide: "resume after fixing it, accept the risk of a red check, roll the node back (rollback_node), or abort; sign it with record_decision"})
	}
	if rec.Node != "" {
		n := st.Node(rec.Node)
		// A green read-only check changes nothing and writes nothing to the
		// cluster; its red result stops the round and is worth an Event.
		if n != nil && (!rec.Step.ReadOnly() || rec.Kind == round.KindStepFailed || (rec.Step == round.StepGate && n.ClosedSeq == rec.Seq)) &&
			(rec.Step.InWindow() || rec.Step.Check() || rec.Step == round.StepSnapshot) {
			msg := fmt.Sprintf("round %s: %s %s", st.RoundID, strings.ReplaceAll(string(rec.Step), "_", " "), state)
			if rec.Detail != "" {
				msg += ": " + rec.Detail
			}
			if n.ClosedSeq == rec.Seq && n.Window == round.WindowClosed {
				msg += " (window closed)"
			}
			ev = &nodeevents.Step{Node: rec.Node, Round: st.RoundID, Step: string(rec.Step), State: state,
				Kernel: kernelState(n), Message: truncate(msg, 1000), Warning: rec.Kind == round.KindStepFailed}
		}
		if n != nil && rec.Kind == round.KindStepFinished && n.Window == round.WindowClosed && n.ClosedSeq == rec.Seq {
			notes = append(notes, notify.Event{Kind: notify.WindowClosed, Round: st.RoundID, Node: rec.Node, Time: rec.Time,
				Why: fmt.Sprintf("%s on %s after %s", kernelState(n), rec.Node, n.ClosedAt.Sub(n.Opened).Round(time.Minute))})
		}
	}
	if rec.Step == round.StepClose && rec.Kind == round.KindStepFinished && st.Closed {
		notes = append(notes, notify.Event{Kind: notify.RoundClosed, Round: st.RoundID, Time: rec.Time, Why: "report committed with the journal"})
	}
	return ev, notes
}

// kernelState says in words which kernel a node runs and is set to boot.
func kernelState(n *round.NodeState) string {
	green := func(s round.Step) bool { r := n.Steps[s]; return r != nil && r.Green() }
	switch {
	case green(round.StepPromote) && n.KernelAfter != "":
		return "promoted " + n.KernelAfter
	case green(round.StepTrialBoot) && n.KernelAfter != "":
		if n.KernelBefore != "" {
			return fmt.Sprintf("trial %s (default still %s)", n.KernelAfter, n.KernelBefore)
		}
		return "trial " + n.KernelAfter
	case n.KernelBefore != "":
		return "old " + n.KernelBefore
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// metricsSource reads the open round's state for a scrape: the journal's
// own state when this server holds it, else the state on disk. Nothing is
// opened for writing.
func (b *RoundBook) metricsSource() (*round.State, error) {
	ids, err := b.OpenRounds()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	id := ids[len(ids)-1]
	b.mu.Lock()
	j, held := b.open[id]
	b.mu.Unlock()
	if held {
		return j.State(), nil
	}
	st, _, err := round.ReadState(b.dir(id))
	return st, err
}

// expectedWindow is the median of the round's closed windows (the
// maintenance rule's figure), zero before one closed.
func expectedWindow(st *round.State) time.Duration {
	var ds []time.Duration
	for _, d := range st.WindowDurations() {
		ds = append(ds, d)
	}
	return maintenance.ExpectedWindow(ds, 0).Length
}

// wireOps builds the notifier (webhooks from the config), the metrics and
// the node Event recorder, hooks them to every journal the book opens, and
// returns what stops them (the worker, then the notifier, bounded).
func wireOps(ctx context.Context, d *Deps) (func(), error) {
	hooks, err := notify.Hooks(d.Config.Notify, d.Getenv)
	if err != nil {
		return nil, err
	}
	var source metrics.Source = func() (*round.State, error) { return nil, nil }
	if d.Book != nil {
		source = d.Book.metricsSource
	}
	m := metrics.New(source, metrics.Options{Expected: expectedWindow, Now: d.Now, Process: true})
	n := notify.New(hooks, notify.Options{
		Log: d.Log, Now: d.Now,
		Observe: func(dl notify.Delivery) { m.Notified(dl.Hook, string(dl.Kind), dl.Sent) },
		Record:  d.recordNotification,
	})
	var (
		mu  sync.Mutex
		rec *nodeevents.Recorder
	)
	nodes := func(ctx context.Context) (*nodeevents.Recorder, error) {
		mu.Lock()
		defer mu.Unlock()
		if rec != nil {
			return rec, nil
		}
		cl, err := d.Cluster(ctx)
		if err != nil {
			return nil, err
		}
		rec = nodeevents.New(cl.Kube, d.Identity, d.Log)
		return rec, nil
	}
	if d.Cluster == nil {
		nodes = nil
	}
	d.Ops = newOps(n, m, nodes, d.Log)
	d.Ops.alerts = d.alertSource
	d.Ops.settings = func(id string) *intent.AlertSettings {
		if d.Intent == nil {
			return nil
		}
		r, err := d.Intent(id)
		if err != nil {
			d.Log.Warn("intent unreadable: no window silence", "round", id, "err", err)
			return nil
		}
		st, err := r.RoundSettings()
		if err != nil {
			d.Log.Warn("intent settings unreadable: no window silence", "round", id, "err", err)
			return nil
		}
		return st.Alerts
	}
	if d.Book != nil {
		d.Book.Observe = d.Ops.Observe
	}
	octx, cancel := context.WithCancel(ctx)
	d.Ops.Start(octx)
	return func() {
		cancel()
		d.Ops.Wait()
		shut, done := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer done()
		if err := n.Close(shut); err != nil {
			d.Log.Warn("notifications still in flight at shutdown", "err", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if rec != nil {
			rec.Shutdown()
		}
	}, nil
}

// recordNotification keeps a delivery's outcome in its round's journal.
func (d *Deps) recordNotification(dl notify.Delivery) error {
	if d.Book == nil || dl.Round == "" {
		return nil
	}
	j, err := d.Book.Journal(dl.Round, false)
	if err != nil {
		return fmt.Errorf("record notification in round %s: %w", dl.Round, err)
	}
	if _, err := j.Notification(dl.Node, dl.Detail()); err != nil {
		return fmt.Errorf("record notification in round %s: %w", dl.Round, err)
	}
	return nil
}
