// Package fakes holds the stand-ins of round/window's host, cluster and
// Lease interfaces for unit tests: a host that remembers what was started
// on it, a cluster with a cordon, a Lease with a holder. The real parts
// are tested against their own packages (host/steps on real sshd, kube on
// the real API server); these fakes answer in the same shapes.
package fakes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Action is one thing done on a host or the cluster (not a read).
type Action struct {
	Node, What, Digest string
}

// Host is a node's host side as the window sees it. Zero value: a node
// running Running with Target installed beside it, nothing started.
type Host struct {
	mu sync.Mutex
	// Running and Target kernels; Digest is the package plan's digest.
	Running, Target, Digest string
	// Packages are more packages the upgrade moves beside the target
	// kernel's image (an NVIDIA driver, say).
	Packages []steps.PlannedPackage
	// InstallState is what install status answers ("" = not_started).
	InstallState string
	ExitCode     int
	// Prepared, RebootRequested, Rebooted and Outcome are the trial boot.
	Prepared, RebootRequested, Rebooted bool
	Outcome                             string
	PreparedNew, PreparedOld            string
	// FailStart makes install start answer an error that leaves it unknown.
	FailStart error
	// AnyDigest makes install start take any digest (the real host
	// refuses a drifted one; tests of the server's own binding set it).
	AnyDigest bool
	// Unreachable makes every call fail as if the host were down.
	Unreachable bool
	Actions     []Action
	Autoremoved map[string][]string
	// Drill is the fallback drill's state (fallback_drill.sh status).
	Drill steps.DrillState
	// BootFreeKB, when set, is /boot's free space; the new kernel needs
	// BootNeedKB (150 MiB), and a /boot with less is short, as
	// simulate.sh reports it.
	BootFreeKB int64
	// BootID is the boot running now; "" is "boot-N" after N-1 reboots
	// (Boot). Every read of the host reports it, as the scripts do.
	BootID string
	boots  int
	// DefaultKernel is the kernel GRUB boots by default; "" is the one
	// the host started on. Promote changes it, and only Promote.
	DefaultKernel string
}

// BootNeedKB is what the fake's new kernel and initrd take on /boot.
const BootNeedKB = 150 << 10

var _ window.Host = (*Host)(nil)

func (h *Host) act(node, what, digest string) {
	h.Actions = append(h.Actions, Action{Node: node, What: what, Digest: digest})
}

// Count is how many actions named what were done.
func (h *Host) Count(what string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.Actions {
		if a.What == what {
			n++
		}
	}
	return n
}

// Grub entries as grub.cfg names them, with the submenu path.
func Entry(kernel string) string {
	return "gnulinux-advanced-u>gnulinux-" + kernel + "-advanced-u"
}

// bootID is the boot running now.
func (h *Host) bootID() string {
	if h.BootID != "" {
		return h.BootID
	}
	return fmt.Sprintf("boot-%d", h.boots+1)
}

// CurrentBoot is the boot id the host runs now.
func (h *Host) CurrentBoot() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bootID()
}

// Default is the kernel GRUB boots by default ("" until a promote: the
// kernel the host started on).
func (h *Host) Default() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.DefaultKernel
}

func (h *Host) down() error {
	if h.Unreachable {
		return errors.New("dial tcp: connection refused")
	}
	return nil
}

func (h *Host) Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.Inspection{}, err
	}
	insp := steps.Inspection{Kernel: h.Running, BootID: h.bootID(), KernelPanic: 10}
	insp.Grub.EnvWritableAtBoot = true
	for _, k := range []string{h.Running, h.Target} {
		insp.Grub.Entries = append(insp.Grub.Entries, parse.GrubEntry{ID: Entry(k), Kernel: k, Submenu: "gnulinux-advanced-u"})
	}
	insp.TargetModules.Present = true
	return insp, nil
}

func (h *Host) Simulate(ctx context.Context, node string) (steps.Simulation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.Simulation{}, err
	}
	var sim steps.Simulation
	sim.Plan.Digest, sim.Plan.TargetKernel = h.Digest, h.Target
	sim.Plan.Lines = []string{"Inst linux-image-" + h.Target}
	sim.Plan.Packages = []steps.PlannedPackage{{Name: "linux-image-" + h.Target, Action: "install", NewVersion: "1"}}
	for _, p := range h.Packages {
		sim.Plan.Packages = append(sim.Plan.Packages, p)
		sim.Plan.Lines = append(sim.Plan.Lines, "Inst "+p.Name)
	}
	if h.BootFreeKB > 0 {
		free := h.BootFreeKB
		sim.Boot = steps.BootSpace{Dir: "/boot", FreeKB: &free, NeedKB: BootNeedKB, NewKernels: []string{h.Target}, Short: free < BootNeedKB}
		if sim.Boot.Short {
			sim.Plan.Blockers = append(sim.Plan.Blockers, sim.Boot.ShortReason())
		}
	}
	return sim, nil
}

// Preflight is Simulate and Inspect for the simulated target kernel, as
// preflight.sh reads both in one session.
func (h *Host) Preflight(ctx context.Context, node string) (steps.Simulation, steps.Inspection, error) {
	sim, err := h.Simulate(ctx, node)
	if err != nil {
		return sim, steps.Inspection{}, err
	}
	insp, err := h.Inspect(ctx, node, steps.InspectInput{TargetKernel: sim.Plan.TargetKernel})
	return sim, insp, err
}

func (h *Host) Install(ctx context.Context, node, action, round, digest string) (steps.InstallState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.InstallState{}, err
	}
	switch action {
	case "start":
		if h.FailStart != nil {
			return steps.InstallState{}, h.FailStart
		}
		if h.InstallState != "" && h.InstallState != "not_started" {
			return steps.InstallState{State: h.InstallState}, fmt.Errorf("install: %w: already started", steps.ErrRefused)
		}
		if digest != h.Digest && !h.AnyDigest {
			return steps.InstallState{}, fmt.Errorf("install: %w: plan drifted", steps.ErrRefused)
		}
		h.act(node, "install", digest)
		h.InstallState = "running"
		return steps.InstallState{State: "running", Launcher: "systemd-run"}, nil
	case "status":
		st := steps.InstallState{State: h.InstallState}
		if st.State == "" {
			st.State = "not_started"
		}
		if st.State == "finished" {
			code := h.ExitCode
			st.ExitCode = &code
		}
		return st, nil
	}
	return steps.InstallState{}, fmt.Errorf("install: %w: action %s", steps.ErrBadInput, action)
}

func (h *Host) TrialBootPrepare(ctx context.Context, node string, in steps.TrialBootInput) (steps.TrialBoot, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.TrialBoot{}, err
	}
	h.act(node, "prepare", in.NewEntry)
	h.Prepared, h.PreparedNew, h.PreparedOld = true, in.NewEntry, in.OldEntry
	return steps.TrialBoot{NextEntry: in.NewEntry, OldEntry: in.OldEntry, NewEntry: in.NewEntry, WatchdogArmed: true}, nil
}

func (h *Host) TrialBootReboot(ctx context.Context, node, round string) (steps.TrialBoot, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.TrialBoot{}, err
	}
	if !h.Prepared {
		return steps.TrialBoot{}, fmt.Errorf("trial boot: %w: not prepared", steps.ErrRefused)
	}
	h.act(node, "reboot", h.PreparedNew)
	h.RebootRequested = true
	return steps.TrialBoot{RebootRequestedAt: "now", NextEntry: h.PreparedNew}, nil
}

func (h *Host) TrialBootStatus(ctx context.Context, node, round string) (steps.TrialBoot, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.TrialBoot{}, err
	}
	if !h.Prepared {
		return steps.TrialBoot{}, fmt.Errorf("trial boot: %w: no state for this round", steps.ErrRefused)
	}
	tb := steps.TrialBoot{OldEntry: h.PreparedOld, NewEntry: h.PreparedNew, NextEntry: h.PreparedNew, Kernel: h.Running, NewKernel: h.Target, BootID: h.bootID()}
	if h.RebootRequested {
		tb.RebootRequestedAt = "now"
	}
	if h.Rebooted {
		tb.Rebooted, tb.Outcome, tb.NextEntry = true, h.Outcome, ""
		if h.Outcome == steps.OutcomeNewKernel {
			tb.Kernel = h.Target
		}
	}
	return tb, nil
}

// Promote answers as promote.sh does: a host that does not run the
// expected kernel, or the expected boot, is refused and nothing changes;
// otherwise the expected kernel becomes the default.
func (h *Host) Promote(ctx context.Context, node string, in steps.PromoteInput) (steps.PromoteResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.PromoteResult{}, err
	}
	kernel := in.ExpectedKernel
	res := steps.PromoteResult{Node: node, ExpectedKernel: kernel, ExpectedBootID: in.ExpectedBootID, RunningKernel: h.Running, BootID: h.bootID()}
	refused := func(reason string) (steps.PromoteResult, error) {
		return res, &steps.StepError{Step: "promote", Node: node, Status: steps.StatusRefused, Reason: reason, ExitCode: 3}
	}
	switch {
	case h.Running != kernel:
		return refused("the running kernel is " + h.Running + ", not " + kernel)
	case in.ExpectedBootID != "" && in.ExpectedBootID != h.bootID():
		return refused("the boot id is " + h.bootID() + ", not " + in.ExpectedBootID)
	}
	h.act(node, "promote", kernel)
	h.DefaultKernel = kernel
	res.NextBootKernel, res.Promoted = kernel, kernel == h.Target
	return res, nil
}

// DrillUnit is where fallback_drill.sh writes the drill's unit.
const DrillUnit = "/etc/systemd/system/mcp-patch-fallback-drill.service"

// FallbackDrill arms, disarms or reads the drill as fallback_drill.sh
// does: arming clears an earlier firing; disarming leaves the record of a
// firing; the drill fires only when the armed kernel boots (see Boot).
func (h *Host) FallbackDrill(ctx context.Context, node, action, round, kernel string) (steps.DrillState, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.DrillState{Node: node}, err
	}
	switch action {
	case steps.DrillArm:
		if err := steps.ValidateRound(round); err != nil {
			return steps.DrillState{Node: node}, err
		}
		if err := steps.ValidateKernel("drill kernel", kernel); err != nil {
			return steps.DrillState{Node: node}, err
		}
		h.act(node, "drill-arm", kernel)
		h.Drill = steps.DrillState{Armed: true, DrillKernel: kernel}
	case steps.DrillDisarm:
		h.act(node, "drill-disarm", "")
		h.Drill.Armed, h.Drill.DrillKernel = false, ""
	case steps.DrillStatus:
	default:
		return steps.DrillState{Node: node}, fmt.Errorf("fallback drill on node %s: %w: action %q", node, steps.ErrBadInput, action)
	}
	st := h.Drill
	st.Node, st.Unit = node, DrillUnit
	return st, nil
}

func (h *Host) Autoremove(ctx context.Context, node string, in steps.AutoremoveInput) (steps.AutoremoveResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.down(); err != nil {
		return steps.AutoremoveResult{}, err
	}
	if in.Action == steps.AutoremoveRun {
		h.act(node, "autoremove", "")
	}
	return steps.AutoremoveResult{Node: node, RunningKernel: h.Running, Removals: h.Autoremoved[node]}, nil
}

// Cluster is the drain of a cluster with one cordon per node, answering as
// drain.Cluster does on a real API server (TestWindowFakeClusterContract in
// kube/drain holds it to that): a drain with blockers, or whose pods are no
// longer the approved digest's, changes nothing; a node someone else
// cordoned stays theirs; a dry run changes nothing.
type Cluster struct {
	mu       sync.Mutex
	Pods     map[string][]drain.PodRef
	Blockers map[string][]string
	// Cordoned maps a cordoned node to the identity recorded on it; ""
	// is a cordon without our record (a person's kubectl cordon).
	Cordoned map[string]string
	// Jobs are the pods on each node a drain that waits for jobs sees
	// running (every non-empty selector matches them).
	Jobs    map[string][]drain.PodRef
	Actions []Action
}

var _ window.Cluster = (*Cluster)(nil)

func (c *Cluster) PreviewDrain(ctx context.Context, node string, pol drain.Policy) (drain.Evictions, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preview(node), nil
}

func (c *Cluster) preview(node string) drain.Evictions {
	p := drain.Evictions{Node: node, Evict: append([]drain.PodRef(nil), c.Pods[node]...), Blockers: append([]string(nil), c.Blockers[node]...)}
	parts := []string{node}
	for _, e := range p.Evict {
		parts = append(parts, e.String())
	}
	p.Digest = window.DigestOf(parts...)
	return p
}

func (c *Cluster) Drain(ctx context.Context, node string, o drain.Options, progress func(done, total int, msg string)) (drain.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := drain.Result{Node: node, DryRun: o.DryRun}
	if err := (drain.Owner{Identity: o.Identity, Round: o.Round}).Validate(); err != nil {
		return res, fmt.Errorf("drain node %s: %w", node, err)
	}
	res.Plan = c.preview(node)
	if len(res.Plan.Blockers) > 0 {
		return res, fmt.Errorf("drain node %s: %w", node, drain.ErrBlocked)
	}
	if o.ExpectDigest != "" && o.ExpectDigest != res.Plan.Digest {
		return res, fmt.Errorf("drain node %s: %w: approved %s, now %s", node, drain.ErrPlanDrift, o.ExpectDigest, res.Plan.Digest)
	}
	if o.OnlyPods != nil {
		for _, e := range res.Plan.Evict {
			if !o.OnlyPods[e.Namespace+"/"+e.Name] {
				return res, fmt.Errorf("drain node %s: %w: %s appeared since the approval and is not in it", node, drain.ErrPlanDrift, e.Namespace+"/"+e.Name)
			}
		}
	}
	if o.DryRun {
		// The API server's dry run: every pod would go, nothing is persisted.
		c.Actions = append(c.Actions, Action{Node: node, What: "drain-dry-run"})
		res.Evicted = res.Plan.Evict
		return res, nil
	}
	c.cordon(node, o.Identity)
	c.Actions = append(c.Actions, Action{Node: node, What: "drain", Digest: o.ExpectDigest})
	res.Evicted = res.Plan.Evict
	// Evicted, the node's pods are gone, its jobs with them.
	delete(c.Pods, node)
	delete(c.Jobs, node)
	return res, nil
}

// cordon cordons node as identity's, unless it is cordoned already (then
// it stays whoever's it is).
func (c *Cluster) cordon(node, identity string) {
	if c.Cordoned == nil {
		c.Cordoned = map[string]string{}
	}
	if _, ok := c.Cordoned[node]; ok {
		return
	}
	c.Actions = append(c.Actions, Action{Node: node, What: "cordon"})
	c.Cordoned[node] = identity
}

func (c *Cluster) Cordon(ctx context.Context, node, round, identity string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := (drain.Owner{Identity: identity, Round: round}).Validate(); err != nil {
		return fmt.Errorf("cordon node %s: %w", node, err)
	}
	c.cordon(node, identity)
	return nil
}

func (c *Cluster) HoldingPods(ctx context.Context, node string, sel labels.Selector) ([]drain.PodRef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sel == nil || sel.Empty() {
		return nil, nil
	}
	return append([]drain.PodRef(nil), c.Jobs[node]...), nil
}

func (c *Cluster) CordonState(ctx context.Context, node string) (drain.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.Cordoned[node]
	st := drain.State{Node: node, Unschedulable: ok}
	if ok && id != "" {
		st.Owner = &drain.Owner{Identity: id}
	}
	return st, nil
}

// Lease is a window Lease with one holder.
type Lease struct {
	mu sync.Mutex
	// Identity is who this server is; Holder who holds the Lease now.
	Identity, Holder, Round, Node string
	Holds, Releases               int
}

var _ window.Lease = (*Lease)(nil)

func (l *Lease) Hold(ctx context.Context, round, node string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Holder != "" && (l.Holder != l.Identity || l.Round != round || l.Node != node) {
		return fmt.Errorf("%w: held by %s for round %s node %s", window.ErrLeaseHeld, l.Holder, l.Round, l.Node)
	}
	l.Holder, l.Round, l.Node = l.Identity, round, node
	l.Holds++
	return nil
}

func (l *Lease) Release(ctx context.Context, round, node string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Holder == l.Identity && l.Round == round && l.Node == node {
		l.Holder, l.Round, l.Node = "", "", ""
		l.Releases++
	}
	return nil
}

// Steal makes another server the holder (a lost Lease).
func (l *Lease) Steal(by string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Holder = by
}

// Kernel answers the running kernel.
func (h *Host) Kernel(ctx context.Context, node string) (steps.KernelInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return steps.KernelInfo{Kernel: h.Running, BootID: h.bootID()}, h.down()
}

// Download fetches nothing.
func (h *Host) Download(ctx context.Context, node string) (steps.DownloadResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.act(node, "download", "")
	return steps.DownloadResult{}, h.down()
}

// Snapshot backs up nothing.
func (h *Host) Snapshot(ctx context.Context, node, round, role, etcd string) (steps.SnapshotResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.act(node, "snapshot", "")
	return steps.SnapshotResult{Dir: "/var/backups/mcp-patch/" + round}, h.down()
}

// Verify passes when the node runs the target kernel.
func (h *Host) Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := steps.NodeVerification{Kernel: h.Running, BootID: h.bootID(), Passed: h.Running == in.TargetKernel}
	if !v.Passed {
		v.Problems = []string{"kernel " + h.Running + ", want " + in.TargetKernel}
	}
	return v, h.down()
}

// GPUCheck passes.
func (h *Host) GPUCheck(ctx context.Context, node string, in steps.GPUCheckInput) (steps.GPUCheck, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return steps.GPUCheck{Kernel: h.Running, BootID: h.bootID(), Passed: true, GPUCount: in.ExpectedGPUs}, nil
}

// Boot finishes the trial reboot: the node comes back on the target kernel
// (fellBack false) or on the old one. A fallback drill armed for the
// target kernel fires when that kernel boots: it crashes it, and GRUB
// brings the host back on the old kernel; a host that fell back before
// the new kernel reached its units (fellBack true) leaves the drill
// unfired.
func (h *Host) Boot(fellBack bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Rebooted = true
	h.boots, h.BootID = h.boots+1, ""
	if !fellBack && h.Drill.Armed && h.Drill.DrillKernel == h.Target {
		h.Drill.Armed, h.Drill.DrillKernel, h.Drill.Fired, h.Drill.FiredAt = false, "", true, "2026-11-03T08:00:00Z"
		fellBack = true
	}
	if fellBack {
		h.Outcome = steps.OutcomeFellBack
		return
	}
	h.Outcome, h.Running = steps.OutcomeNewKernel, h.Target
}
