package tools

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// need says what of the world a window step uses.
type need int

const (
	needHost need = 1 << iota
	needCluster
)

// window builds the round's window machinery for one call: the journal's
// recorder, and the hosts and the cluster when the step needs them.
func (d *Deps) window(ctx context.Context, s *session, n need) (*window.Window, error) {
	bounds := window.DefaultBounds(d.drainTimeout(s), d.Config.SSH.RebootTimeout.D())
	if _, wait, err := jobWaitOf(s.settings); err == nil {
		bounds.Drain += wait // a drain may wait that long for jobs before it evicts
	}
	w := &window.Window{Round: s.id, Rec: &window.Recorder{J: s.j, Events: d.WindowEvents, Now: d.now},
		Bounds: bounds, Now: d.now, Log: d.Log}
	if n&needHost != 0 {
		h, err := d.hosts(ctx)
		if err != nil {
			return nil, err
		}
		w.Host, w.Forget = h.Steps, h.Pool.Forget
	}
	if n&needCluster != 0 {
		c, err := d.drainCluster(ctx)
		if err != nil {
			return nil, err
		}
		w.Cluster = c
	}
	lease, err := d.windowLease(ctx)
	if err != nil {
		return nil, err
	}
	w.Lease = lease
	if d.Ops != nil {
		w.Silencer = d.Ops
	}
	return w, nil
}

// releaseEnded lets go of what the window that rec ended held (the window
// Lease and the node's Alertmanager silence; window.WindowEnded and
// Window.Release), journaled; nothing when rec ended no window. The
// reasons say what happened.
func (d *Deps) releaseEnded(ctx context.Context, s *session, rec round.Record) ([]string, error) {
	node := window.WindowEnded(rec, s.j.Shared())
	if node == "" {
		return nil, nil
	}
	w, err := d.window(ctx, s, 0)
	if err != nil {
		// No cluster now: stop renewing the Lease so it lapses, say so,
		// and still remove the silence.
		d.stopLease(s.id, node)
		w = &window.Window{Round: s.id, Rec: &window.Recorder{J: s.j, Events: d.WindowEvents, Now: d.now},
			Lease: unreachableLease{err}, Now: d.now, Log: d.Log}
		if d.Ops != nil {
			w.Silencer = d.Ops
		}
	}
	return w.Release(ctx, node)
}

// windowLease is the window Lease on the cluster, kept renewed by this
// process between calls; nil without a cluster (nothing to hold).
func (d *Deps) windowLease(ctx context.Context) (window.Lease, error) {
	if d.Lease != nil {
		return d.Lease, nil
	}
	if d.Cluster == nil {
		return nil, nil
	}
	kc, err := d.cluster(ctx)
	if err != nil {
		return nil, err
	}
	return &serverLease{d: d, inner: &windowlock.Window{Kube: kc.Kube, Config: d.lockConfig()}}, nil
}

func (d *Deps) lockConfig() windowlock.Config {
	return windowlock.Config{Namespace: d.Config.Kube.LeaseNamespace, Identity: d.Identity, Logger: d.Log}
}

// serverLease is the window Lease of a server process: every window step
// holds it (takes, renews, or re-takes it after a restart); while the
// process runs it is renewed between calls too, until the window closes.
// A one-shot CLI call lets it lapse when it exits; the next call of the
// same identity takes it again, unless another holder took it meanwhile:
// then the window stops (window_lease rule).
type serverLease struct {
	d     *Deps
	inner *windowlock.Window
}

func (l *serverLease) Hold(ctx context.Context, roundID, node string) error {
	if err := l.inner.Hold(ctx, roundID, node); err != nil {
		return err
	}
	l.d.keepLease(roundID, node, l.inner)
	return nil
}

func (l *serverLease) Release(ctx context.Context, roundID, node string) error {
	l.d.stopLease(roundID, node)
	return l.inner.Release(ctx, roundID, node)
}

// keepLease renews the Lease in the background (the process's context)
// until stopLease or a loss, which it logs: the next window step records
// the stop.
func (d *Deps) keepLease(roundID, node string, lease *windowlock.Window) {
	key := roundID + "/" + node
	d.locks.mu.Lock()
	defer d.locks.mu.Unlock()
	if d.locks.held == nil {
		d.locks.held = map[string]context.CancelFunc{}
	}
	if _, ok := d.locks.held[key]; ok {
		return
	}
	base := d.Background
	if base == nil {
		base = context.Background()
	}
	kctx, cancel := context.WithCancel(base)
	d.locks.held[key] = cancel
	every := 20 * time.Second
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
				err := lease.Hold(kctx, roundID, node)
				if errors.Is(err, window.ErrLeaseHeld) {
					d.Log.Error("window Lease lost: the next step of the window stops the round", "round", roundID, "node", node, "err", err)
					d.stopLease(roundID, node)
					return
				}
				if err != nil && kctx.Err() == nil {
					d.Log.Warn("window Lease renewal failed", "round", roundID, "node", node, "err", err)
				}
			}
		}
	}()
}

func (d *Deps) stopLease(roundID, node string) {
	key := roundID + "/" + node
	d.locks.mu.Lock()
	defer d.locks.mu.Unlock()
	if cancel, ok := d.locks.held[key]; ok {
		cancel()
		delete(d.locks.held, key)
	}
}

// fromWindow words the window package's answers as tool results. Of
// errors joined together, the first that is an answer (refusal, failure)
// is the answer and the others become reasons, so no error is dropped.
func fromWindow(err error) error {
	if ae, ok := err.(*approvedErr); ok {
		return &approvedErr{err: fromWindow(ae.err), id: ae.id}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var answer error
		var rest []string
		for _, e := range j.Unwrap() {
			if e == nil {
				continue
			}
			a := fromWindow(e)
			var ref *Refusal
			var fail *Failure
			if answer == nil && (errors.As(a, &ref) || errors.As(a, &fail)) {
				answer = a
				continue
			}
			rest = append(rest, e.Error())
		}
		switch a := answer.(type) {
		case *Refusal:
			return &Refusal{Reasons: append(append([]string{}, a.Reasons...), rest...), NextAction: a.NextAction}
		case *Failure:
			return &Failure{Reasons: append(append([]string{}, a.Reasons...), rest...), NextAction: a.NextAction}
		}
		if errors.Is(err, window.ErrNeedApproval) {
			return Refuse("Ask a person to sign a fresh request: call again without the approval to get it.", rest...)
		}
		return err
	}
	return fromOne(err)
}

func fromOne(err error) error {
	var (
		ref   *window.Refusal
		stop  *window.Stopped
		unc   *window.Uncertain
		he    *window.HostError
		rule  *round.RuleError
		dstop *window.Stop
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ref):
		return Refuse(ref.Next, ref.Reasons...)
	case errors.As(err, &stop):
		return Fail(stop.Next, stop.Reasons...)
	case errors.As(err, &unc):
		return Fail(unc.Next, unc.Reasons...)
	case errors.As(err, &he):
		f := hostError(he.Node, he.Action, he.Err)
		var tf *Failure
		if he.Next != "" && errors.As(f, &tf) {
			tf.NextAction = he.Next
		}
		return f
	case errors.As(err, &rule):
		return ruleRefusal(err)
	case errors.As(err, &dstop):
		return Fail(dstop.Next, append(dstop.Reasons, "(not recorded: a decision to stop must go through Recorder.StopWith)")...)
	case errors.Is(err, window.ErrNeedApproval):
		return Refuse("Ask a person to sign a fresh request: call again without the approval to get it.", err.Error())
	}
	return err
}

// recordStop records a decision that stops the round (a Plan found the
// step unsafe): Plan itself writes nothing, the chokepoint records.
func (d *Deps) recordStop(err error) error {
	var st *window.Stop
	if !errors.As(err, &st) {
		return err
	}
	s, serr := d.openSession()
	if serr != nil {
		return errors.Join(Fail(st.Next, st.Reasons...), serr)
	}
	rec := &window.Recorder{J: s.j, Events: d.WindowEvents, Now: d.now}
	return rec.StopWith(st.Step, st.Node, st.Next, st.Reasons...)
}

// inFlightRun is the step's run when it is in flight in the open round.
func (s *session) inFlightRun(step round.Step, node string) *round.StepRun {
	r := s.stepRun(step, node)
	if r == nil || r.State != round.InFlight {
		return nil
	}
	return r
}

// RetakeWindowLease takes the window Lease again when the open round's
// journal shows a window open: a server calls it as it starts, so the
// Lease of a window a stopped process left open does not lapse until the
// window's next step. It writes nothing: another holder's Lease is
// reported (the window's next step stops under the window_lease rule). A
// read-only server takes no Lease. It answers the node whose window is
// open, "" when none is.
func (d *Deps) RetakeWindowLease(ctx context.Context) (string, error) {
	if d.Mode == ModeReadOnly || d.Book == nil || d.Book.CurrentID() == "" {
		return "", nil
	}
	// Read first: a server that starts with no window open opens no
	// journal for writing (and so writes nothing) until a call needs it.
	v, err := d.readSession()
	if err != nil {
		return "", err
	}
	if v.j.Shared().Current == "" {
		return "", nil
	}
	s, err := d.openSession()
	if err != nil {
		return "", err
	}
	lease, err := d.windowLease(ctx)
	if err != nil {
		return "", err
	}
	w := &window.Window{Round: s.id, Rec: s.rec(), Lease: lease, Now: d.now, Log: d.Log}
	return w.Retake(ctx)
}

// rollbackWindow is the open round, its window machinery and the host
// steps a rollback needs. A rollback holds no Lease: the round is stopped
// at the node, and no other window may open.
func (d *Deps) rollbackWindow(ctx context.Context) (*session, *window.Window, window.RollbackHost, error) {
	s, err := d.openSession()
	if err != nil {
		return nil, nil, nil, err
	}
	w := &window.Window{Round: s.id, Rec: s.rec(), Bounds: window.DefaultBounds(d.drainTimeout(s), d.Config.SSH.RebootTimeout.D()),
		Now: d.now, Log: d.Log}
	h, err := d.hosts(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	rh, ok := h.Steps.(window.RollbackHost)
	if !ok {
		return nil, nil, nil, Refuse("Run the server with real host steps.", "these host steps cannot roll a node back")
	}
	return s, w, rh, nil
}

// openWindow is the open round and its window machinery for what the step
// needs.
func (d *Deps) openWindow(ctx context.Context, n need) (*session, *window.Window, error) {
	s, err := d.openSession()
	if err != nil {
		return nil, nil, err
	}
	w, err := d.window(ctx, s, n)
	if err != nil {
		return nil, nil, err
	}
	return s, w, nil
}

// unreachableLease is the Lease of a cluster that cannot be reached: its
// release answers why.
type unreachableLease struct{ err error }

func (l unreachableLease) Hold(context.Context, string, string) error    { return l.err }
func (l unreachableLease) Release(context.Context, string, string) error { return l.err }

// drainCluster is the cluster's drain: d.Drainer when set (tests), else
// the API server's.
func (d *Deps) drainCluster(ctx context.Context) (window.Cluster, error) {
	if d.Drainer != nil {
		return d.Drainer, nil
	}
	kc, err := d.cluster(ctx)
	if err != nil {
		return nil, err
	}
	return drain.Cluster{Kube: kc.Kube}, nil
}

// admitDrain is what must hold before a node's window opens: the standing
// rules (unless the drain is already in flight), the maintenance window, a
// green simulate_upgrade, and etcd's health before a control-plane node.
func (d *Deps) admitDrain(ctx context.Context, s *session, node string) error {
	if s.inFlightRun(round.StepDrain, node) == nil {
		if err := s.admit(d, round.StepDrain, node); err != nil {
			return err
		}
	}
	if err := d.admitMaintenance(s, node); err != nil {
		return err
	}
	if r := s.stepRun(round.StepSimulate, node); r == nil || !r.Green() {
		return Refuse("Run simulate_upgrade (and download_updates, snapshot_node) on this node first.",
			"no green simulate_upgrade for "+node+" this round: a drain without a checked package plan is not sure")
	}
	return d.etcdBeforeControlPlane(ctx, s, node)
}

func (d *Deps) drainPolicy(s *session) drain.Policy {
	pol := drain.Policy{}
	if ds := s.settings.Drain; ds != nil && ds.EmptyDirPolicy == "delete" {
		pol.DeleteEmptyDirData = true
	}
	return pol
}

func (d *Deps) drainTimeout(s *session) time.Duration {
	if ds := s.settings.Drain; ds != nil && ds.TimeoutMinutes > 0 {
		return time.Duration(ds.TimeoutMinutes) * time.Minute
	}
	return d.Config.Kube.DrainTimeout.D()
}

func (d *Deps) drainOptions(s *session) window.DrainOptions {
	o := window.DrainOptions{Policy: d.drainPolicy(s), Identity: d.Identity,
		Options: drain.Options{Timeout: d.drainTimeout(s), EvictRetryDelay: d.Config.Kube.EvictRetry.D(), Logger: d.Log}}
	// A selector that does not parse was refused by the drain's Plan.
	if sel, wait, err := jobWaitOf(s.settings); err == nil {
		o.JobSelector, o.JobWait = sel, wait
	}
	return o
}

func drainProgress(p Progress) func(done, total int, msg string) {
	return func(done, total int, msg string) { p(float64(done), float64(total), msg) }
}

// gpuProbes are GPU acceptance's checks as the intent's gpu settings
// configure them: the host step, the smoke pod and the model endpoint.
type gpuProbes struct {
	d     *Deps
	hosts *HostAccess
	kube  kubernetes.Interface
	gpu   *intent.GPUSettings
}

func (g gpuProbes) HostGPU(ctx context.Context, node string) (steps.GPUCheck, error) {
	fm := ""
	if g.gpu.FabricManagerRequired {
		fm = "required"
	}
	return g.hosts.Steps.GPUCheck(ctx, node, steps.GPUCheckInput{ExpectedGPUs: g.gpu.ExpectedGPUsPerServer, FabricManager: fm})
}

func (g gpuProbes) SmokePod(ctx context.Context, node string) (gpucheck.SmokeResult, error) {
	return gpucheck.SmokePod(ctx, g.kube, node, gpucheck.SmokeOptions{Image: g.d.Config.Kube.SmokeImage, Timeout: 5 * time.Minute,
		PollInterval: 250 * time.Millisecond, Logger: g.d.Log})
}

func (g gpuProbes) Completion(ctx context.Context) (gpucheck.CompletionResult, error) {
	me := g.gpu.ModelEndpoint
	base, api := splitModelURL(me.URL)
	return gpucheck.Complete(ctx, gpucheck.CompletionRequest{Endpoint: base, API: api, Model: me.Model, Prompt: me.Prompt,
		MaxTokens: me.MaxTokens, Timeout: time.Duration(max(me.TimeoutSeconds, 1)) * time.Second})
}

// splitModelURL accepts the intent's model URL with or without its route:
// ".../v1/completions" and ".../v1/chat/completions" name the API to use,
// a base URL leaves the choice to the check.
func splitModelURL(u string) (base, api string) {
	u = strings.TrimSuffix(u, "/")
	switch {
	case strings.HasSuffix(u, "/"+gpucheck.APIChat):
		return strings.TrimSuffix(u, "/"+gpucheck.APIChat), gpucheck.APIChat
	case strings.HasSuffix(u, "/"+gpucheck.APICompletions):
		return strings.TrimSuffix(u, "/"+gpucheck.APICompletions), gpucheck.APICompletions
	}
	return u, ""
}
