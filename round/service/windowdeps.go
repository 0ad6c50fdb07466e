package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Need says what of the world a window step uses.
type Need int

const (
	NeedHost Need = 1 << iota
	NeedCluster
)

// Window builds the round's window machinery for one call: the journal's
// recorder, and the hosts and the cluster when the step needs them.
func (d *Service) Window(ctx context.Context, s *window.Round, n Need) (*window.Window, error) {
	bounds := window.DefaultBounds(d.drainTimeout(s), d.Config.SSH.RebootTimeout.D())
	if _, wait, err := window.JobWait(s.Settings); err == nil {
		bounds.Drain += wait // a drain may wait that long for jobs before it evicts
	}
	w := &window.Window{Round: s.ID, Rec: s.Rec(),
		Bounds: bounds, Now: d.Clock, Log: d.Log}
	if n&NeedHost != 0 {
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return nil, err
		}
		w.Host, w.Forget = h.Steps, h.Pool.Forget
	}
	if n&NeedCluster != 0 {
		c, err := d.DrainCluster(ctx)
		if err != nil {
			return nil, err
		}
		w.Cluster = c
		if err := d.watchOthers(ctx, s, w); err != nil {
			return nil, err
		}
	}
	k, err := d.LeaseKeeper(ctx)
	if err != nil {
		return nil, err
	}
	if k != nil {
		w.Lease, w.Keeper = k.Lease, k
	}
	if d.Ops != nil {
		w.Silencer = d.Ops
	}
	w.Driver = d.driverProbe(s)
	return w, nil
}

// driverProbe is the wait for a node's driver pod as GPU acceptance runs
// it, for a window that may see a node back on its old kernel (a trial
// boot's fallback, a rollback): nil where the intent names no driver
// container, or no cluster is configured. The cluster is reached when the
// wait runs; one that cannot be reached then is a red check.
func (d *Service) driverProbe(s *window.Round) window.DriverProbe {
	if s.Settings.GPU == nil || s.Settings.GPU.DriverContainer == nil || d.Cluster == nil {
		return nil
	}
	return driverAfterFallback{d: d, gpu: s.Settings.GPU}
}

type driverAfterFallback struct {
	d   *Service
	gpu *intent.GPUSettings
}

func (p driverAfterFallback) DriverPod(ctx context.Context, node string) (gpucheck.DriverPodResult, bool, error) {
	kc, err := p.d.KubeClients(ctx)
	if err != nil {
		return gpucheck.DriverPodResult{}, true, fmt.Errorf("reach the cluster for the driver pod of %s: %w", node, err)
	}
	return GPUProbes{Service: p.d, Kube: kc.Kube, GPU: p.gpu}.DriverPod(ctx, node)
}

// releaseEnded lets go of what the window that rec ended held (the window
// Lease, the node's Alertmanager silence and this server's NodeMaintenance
// request; window.WindowEnded and
// Window.Release), journaled; nothing when rec ended no window. The
// reasons say what happened.
func (d *Service) releaseEnded(ctx context.Context, s *window.Round, rec round.Record) ([]string, error) {
	node := window.WindowEnded(rec, s.Journal.Shared())
	if node == "" {
		return nil, nil
	}
	return d.releaseNode(ctx, s, node)
}

// releaseNode lets go of what node's ended window held, journaled.
func (d *Service) releaseNode(ctx context.Context, s *window.Round, node string) ([]string, error) {
	w, err := d.Window(ctx, s, 0)
	if err != nil {
		// No cluster now: stop renewing the Lease so it lapses, say so,
		// and still remove the silence.
		w = &window.Window{Round: s.ID, Rec: s.Rec(),
			Lease: noClusterLease{err}, Now: d.Clock, Log: d.Log}
		d.CloseLease()
		if d.Ops != nil {
			w.Silencer = d.Ops
		}
	} else if werr := d.watchOthers(ctx, s, w); werr != nil {
		// The NodeMaintenance request cannot be reached now: the rest is
		// let go of, and the reasons say what was not.
		reasons, rerr := w.Release(ctx, node)
		return append(reasons, "the NodeMaintenance request and the driver-upgrade skip label of "+node+" could not be looked at (a person removes them): "+werr.Error()), rerr
	}
	return w.Release(ctx, node)
}

// FromWindow words the window package's answers as tool results. Of
// errors joined together, the first that is an answer (refusal, failure)
// is the answer and the others become reasons, so no error is dropped.
func FromWindow(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var first error
		var rest []string
		for _, e := range j.Unwrap() {
			if e == nil {
				continue
			}
			a := FromWindow(e)
			var ref *answer.Refusal
			var fail *answer.Failure
			if first == nil && (errors.As(a, &ref) || errors.As(a, &fail)) {
				first = a
				continue
			}
			rest = append(rest, e.Error())
		}
		switch a := first.(type) {
		case *answer.Refusal:
			return &answer.Refusal{Reasons: append(append([]string{}, a.Reasons...), rest...), NextAction: a.NextAction}
		case *answer.Failure:
			return &answer.Failure{Reasons: append(append([]string{}, a.Reasons...), rest...), NextAction: a.NextAction}
		}
		if errors.Is(err, window.ErrNeedApproval) {
			return answer.Refuse("Ask a person to sign a fresh request: call again without the approval to get it.", rest...)
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
	var wait *window.Waiting
	switch {
	case err == nil:
		return nil
	case errors.As(err, &wait):
		reasons := []string{"nothing was cordoned: another party holds " + wait.Node + "; the round waits for it, at most until " + wait.Until.UTC().Format(time.RFC3339) + ", then stops for a person"}
		for _, h := range wait.Holders {
			reasons = append(reasons, h.String())
		}
		return &answer.Pending{Reasons: reasons, NextAction: "Call the same tool again in a minute: it looks again and cordons once nobody else holds the node."}
	case errors.As(err, &ref):
		return answer.Refuse(ref.Next, ref.Reasons...)
	case errors.As(err, &stop):
		return answer.Fail(stop.Next, stop.Reasons...)
	case errors.As(err, &unc):
		return answer.Fail(unc.Next, unc.Reasons...)
	case errors.As(err, &he):
		f := HostError(he.Node, he.Action, he.Err)
		var tf *answer.Failure
		if he.Next != "" && errors.As(f, &tf) {
			tf.NextAction = he.Next
		}
		return f
	case errors.As(err, &rule):
		return RuleRefusal(err)
	case errors.As(err, &dstop):
		return answer.Fail(dstop.Next, append(dstop.Reasons, "(not recorded: a decision to stop must go through Recorder.StopWith)")...)
	case errors.Is(err, window.ErrNeedApproval):
		return answer.Refuse("Ask a person to sign a fresh request: call again without the approval to get it.", err.Error())
	}
	return err
}

// RecordStop records a decision that stops the round (a Plan found the
// step unsafe) in the call's round s (nil: the open round, opened now):
// Plan itself writes nothing, the chokepoint records.
func (d *Service) RecordStop(s *window.Round, err error) error {
	var st *window.Stop
	if !errors.As(err, &st) {
		return err
	}
	if s == nil {
		var serr error
		if s, serr = d.OpenRound(); serr != nil {
			return errors.Join(answer.Fail(st.Next, st.Reasons...), serr)
		}
	}
	return s.Rec().StopWith(st.Step, st.Node, st.Next, st.Reasons...)
}

// RetakeWindowLease takes the window Lease again when the open round's
// journal shows a window open: a server calls it as it starts, so the
// Lease of a window a stopped process left open does not lapse until the
// window's next step. It writes nothing: another holder's Lease is
// reported (the window's next step stops under the window_lease rule). A
// read-only server takes no Lease. It answers the node whose window is
// open, "" when none is.
func (d *Service) RetakeWindowLease(ctx context.Context) (string, error) {
	if d.Mode == config.ModeReadOnly || d.Book == nil || d.Book.CurrentID() == "" {
		return "", nil
	}
	// Only the leader holds a window: a follower leaves it to the leader.
	l, err := d.Leadership(ctx)
	if err != nil {
		return "", err
	}
	if err := d.Follower(ctx, l, "taking the window Lease again"); err != nil {
		return "", err
	}
	// Read first: a server that starts with no window open opens no
	// journal for writing (and so writes nothing) until a call needs it.
	v, err := d.ReadRound()
	if err != nil {
		return "", err
	}
	if v.Journal.Shared().Current == "" {
		return "", nil
	}
	s, err := d.OpenRound()
	if err != nil {
		return "", err
	}
	k, err := d.LeaseKeeper(ctx)
	if err != nil {
		return "", err
	}
	w := &window.Window{Round: s.ID, Rec: s.Rec(), Now: d.Clock, Log: d.Log}
	if k != nil {
		w.Lease, w.Keeper = k.Lease, k
	}
	return w.Retake(ctx)
}

// RollbackWindow is the window machinery of round s and the host steps a
// rollback needs. A rollback holds no Lease: the round is stopped at the
// node, and no other window may open.
func (d *Service) RollbackWindow(ctx context.Context, s *window.Round) (*window.Window, window.RollbackHost, error) {
	w := &window.Window{Round: s.ID, Rec: s.Rec(), Bounds: window.DefaultBounds(d.drainTimeout(s), d.Config.SSH.RebootTimeout.D()),
		Now: d.Clock, Log: d.Log}
	h, err := d.OpenHosts(ctx)
	if err != nil {
		return nil, nil, err
	}
	rh, ok := h.Steps.(window.RollbackHost)
	if !ok {
		return nil, nil, answer.Refuse("Run the server with real host steps.", "these host steps cannot roll a node back")
	}
	w.Driver = d.driverProbe(s)
	return w, rh, nil
}

// DrainCluster is the cluster's drain: d.Drainer when set (tests), else
// the API server's.
func (d *Service) DrainCluster(ctx context.Context) (window.Cluster, error) {
	if d.Drainer != nil {
		return d.Drainer, nil
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return nil, err
	}
	return drain.Cluster{Kube: kc.Kube}, nil
}

// AdmitDrain is what must hold before a node's window opens: the standing
// rules (unless the drain is already in flight), the maintenance window, a
// green simulate_upgrade, and etcd's health before a control-plane node.
func (d *Service) AdmitDrain(ctx context.Context, s *window.Round, node string) error {
	if s.InFlightRun(round.StepDrain, node) == nil {
		if err := s.Admit(round.StepDrain, node); err != nil {
			return err
		}
	}
	if err := d.admitMaintenance(s, node); err != nil {
		return err
	}
	if r := s.StepRun(round.StepSimulate, node); r == nil || !r.Green() {
		return answer.Refuse("Run simulate_upgrade (and download_updates, snapshot_node) on this node first.",
			"no green simulate_upgrade for "+node+" this round: a drain without a checked package plan is not sure")
	}
	return d.etcdBeforeControlPlane(ctx, s, node)
}

// drainTimeout is the round's drain timeout: the intent's, else the
// server's.
func (d *Service) drainTimeout(s *window.Round) time.Duration {
	return s.DrainTimeout(d.Config.Kube.DrainTimeout.D())
}

// DrainOptions are the round's drain options over the server's defaults.
func (d *Service) DrainOptions(s *window.Round) window.DrainOptions {
	return s.DrainOptions(window.DrainDefaults{Identity: d.ActorIdentity(), Timeout: d.Config.Kube.DrainTimeout.D(),
		EvictRetry: d.Config.Kube.EvictRetry.D(), Log: d.Log})
}

func DrainProgress(p Progress) func(done, total int, msg string) {
	return func(done, total int, msg string) { p(float64(done), float64(total), msg) }
}

// GPUProbes are GPU acceptance's checks as the intent's gpu settings
// configure them: the host step, the smoke pod and the model endpoint.
type GPUProbes struct {
	Service *Service
	Hosts   *HostAccess
	Kube    kubernetes.Interface
	GPU     *intent.GPUSettings
}

func (g GPUProbes) HostGPU(ctx context.Context, node string) (steps.GPUCheck, error) {
	fm := ""
	if g.GPU.FabricManagerRequired {
		fm = "required"
	}
	return g.Hosts.Steps.GPUCheck(ctx, node, steps.GPUCheckInput{ExpectedGPUs: g.GPU.ExpectedGPUsPerServer, FabricManager: fm})
}

func (g GPUProbes) SmokePod(ctx context.Context, node string) (gpucheck.SmokeResult, error) {
	return gpucheck.SmokePod(ctx, g.Kube, node, gpucheck.SmokeOptions{Image: g.Service.Config.Kube.SmokeImage, Timeout: 5 * time.Minute,
		PollInterval: 250 * time.Millisecond, Logger: g.Service.Log})
}

// DriverPod waits, bounded by gpu.driver_container.ready_timeout_seconds,
// for the node's driver pod on the kernel the node runs now (as its
// kubelet reports it), where the intent says the GPU Operator's driver
// container provides the driver; it does not apply elsewhere.
func (g GPUProbes) DriverPod(ctx context.Context, node string) (gpucheck.DriverPodResult, bool, error) {
	dc := g.GPU.DriverContainer
	if dc == nil {
		return gpucheck.DriverPodResult{}, false, nil
	}
	sel, err := labels.Parse(dc.NodeLabel)
	if err != nil {
		return gpucheck.DriverPodResult{}, true, fmt.Errorf("gpu.driver_container.node_label %q: %w", dc.NodeLabel, err)
	}
	n, err := g.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return gpucheck.DriverPodResult{}, true, fmt.Errorf("read node %s: %w", node, err)
	}
	if !sel.Matches(labels.Set(n.Labels)) {
		return gpucheck.DriverPodResult{}, false, nil
	}
	res, err := gpucheck.WaitDriverPod(ctx, g.Kube, node, gpucheck.DriverPodOptions{Namespace: dc.Namespace, PodLabel: dc.PodLabel,
		ValidatorLabel: dc.ValidatorLabel, Kernel: n.Status.NodeInfo.KernelVersion, Timeout: time.Duration(dc.ReadyTimeoutSeconds) * time.Second})
	return res, true, err
}

func (g GPUProbes) Completion(ctx context.Context) (gpucheck.CompletionResult, error) {
	me := g.GPU.ModelEndpoint
	base, api := gpucheck.SplitModelURL(me.URL)
	return gpucheck.Complete(ctx, gpucheck.CompletionRequest{Endpoint: base, API: api, Model: me.Model, Prompt: me.Prompt,
		MaxTokens: me.MaxTokens, Timeout: time.Duration(max(me.TimeoutSeconds, 1)) * time.Second})
}
