// Package ops follows the round through its journal and tells the world:
// webhook notifications, Prometheus metrics, Events and annotations on the
// Nodes, and the Alertmanager silence of the window's node. It observes
// records (round.WithObserver) and never writes the round but for the
// outcome of a notification, through the notifier's Record hook. It must
// not import tools or cli, and nothing it does can block or fail a step.
package ops

import (
	"context"
	"errors"
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
	"github.com/mcp-patch/mcp-patch/round/inbox"
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

	// Alerts and Settings, when set, let the worker silence a window's
	// node in Alertmanager (the intent's alerts.silence_node): Alerts is
	// where Alertmanager is (ok false: none configured), Settings the
	// round's alert settings (nil: none).
	Alerts   func() (src alerts.Source, ok bool, err error)
	Settings func(round string) *intent.AlertSettings
	// Environment is the environment this server serves (config
	// environment); every notification names it. Empty: none.
	Environment string

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

// New returns an Ops; Start runs its worker.
func New(n *notify.Notifier, m *metrics.Metrics, nodes func(context.Context) (*nodeevents.Recorder, error), log *slog.Logger) *Ops {
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
	step, notes := Actions(ob.rec, ob.st)
	for _, n := range notes {
		n.Environment = o.Environment
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

// ApprovalNeeded notes a request of tool on node of roundID waiting for
// a signature and, the first time, tells people what it asks (summary).
func (o *Ops) ApprovalNeeded(tool, roundID, node string, summary []string, expires time.Time, now time.Time) {
	if o == nil {
		return
	}
	if !o.Metrics.ApprovalPending(metrics.Pending{Tool: tool, Node: node, Round: roundID, Since: now, Expires: expires}) {
		return
	}
	o.Notifier.Notify(notify.Event{Kind: notify.ApprovalNeeded, Environment: o.Environment, Round: roundID, Node: node, Tool: tool,
		Request:     strings.Join(summary, "; "),
		SignCommand: "mcp-patch approve " + inbox.ID(roundID, node, tool) + " (it waits in the inbox: mcp-patch approvals lists it; or the request text from the tool result as request.txt)",
		Expires:     expires})
}

// ApprovalUsed drops the pending request once a signed approval was used.
func (o *Ops) ApprovalUsed(tool, node string) {
	if o == nil {
		return
	}
	o.Metrics.ApprovalResolved(tool, node)
}

// RolledBack tells people a node went back to its old kernel.
func (o *Ops) RolledBack(roundID, node, why string) {
	if o == nil {
		return
	}
	o.Notifier.Notify(notify.Event{Kind: notify.NodeRolledBack, Environment: o.Environment, Round: roundID, Node: node, Why: why,
		Decide: "the round stays stopped: resume (the node stays on its old kernel), retry the node later, or abort (record_decision)"})
}

// Actions decides, from one journal record and the state it made, the
// node Event to write and the notices to send (pure; table-tested).
func Actions(rec round.Record, st *round.State) (*nodeevents.Step, []notify.Event) {
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

// ExpectedWindow is the median of the round's closed windows (the
// maintenance rule's figure), zero before one closed.
func ExpectedWindow(st *round.State) time.Duration {
	var ds []time.Duration
	for _, d := range st.WindowDurations() {
		ds = append(ds, d)
	}
	return maintenance.ExpectedWindow(ds, 0).Length
}

// silenceWindow silences the node's alerts for its window when the intent
// asks for it; the silence ends by itself at twice the expected window (so
// a crashed server leaves none behind for long) and is expired when the
// window closes.
func (o *Ops) silenceWindow(ctx context.Context, st *round.State, node string) {
	if o.Alerts == nil || o.Settings == nil {
		return
	}
	src, ok, err := o.Alerts()
	if err != nil || !ok || src.AlertmanagerURL == "" {
		return
	}
	set := o.Settings(st.RoundID)
	if set == nil || !set.SilenceNode {
		return
	}
	length := 2 * ExpectedWindow(st)
	if length <= 0 {
		length = 4 * time.Hour
	}
	now := time.Now()
	sil, err := src.SilenceNode(ctx, set.SilenceLabel(), node, WindowComment(st.RoundID, node), now, now.Add(length))
	if err != nil {
		o.log.Warn("no Alertmanager silence for the window", "node", node, "err", err)
		return
	}
	o.mu.Lock()
	o.silenced[node] = sil.ID
	o.mu.Unlock()
	o.log.Info("Alertmanager silence for the window", "node", node, "silence", sil.ID, "ends", now.Add(length))
}

// Unsilence expires the Alertmanager silences the window of node put
// there (window.Silencer): the one this process set, and any other
// active one with the window's comment (set before a restart). Without
// Alertmanager or the intent's alerts.silence_node it does nothing.
func (o *Ops) Unsilence(ctx context.Context, roundID, node string) ([]string, error) {
	o.mu.Lock()
	id, known := o.silenced[node]
	delete(o.silenced, node)
	o.mu.Unlock()
	if o.Alerts == nil {
		return nil, nil
	}
	src, ok, err := o.Alerts()
	if err != nil {
		return nil, err
	}
	if !ok || src.AlertmanagerURL == "" {
		return nil, nil
	}
	ids := []string{id}
	var errs []error
	if !known {
		if o.Settings == nil {
			return nil, nil
		}
		if set := o.Settings(roundID); set == nil || !set.SilenceNode {
			return nil, nil
		}
		list, err := src.Silences(ctx)
		if err != nil {
			return nil, err
		}
		ids = alerts.Ours(list, WindowComment(roundID, node))
	}
	var expired []string
	for _, s := range ids {
		if err := src.Expire(ctx, s); err != nil {
			errs = append(errs, err)
			continue
		}
		expired = append(expired, s)
	}
	return expired, errors.Join(errs...)
}

// WindowComment is the comment of the silence on a window's node; it finds
// the silence again after a restart.
func WindowComment(roundID, node string) string {
	return fmt.Sprintf("mcp-patch round %s: window of %s", roundID, node)
}
