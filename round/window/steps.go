package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/labels"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
)

// HostError is a host step that could not run; the caller words it (host
// key, bad input, unreachable).
type HostError struct {
	Node, Action string
	Err          error
	// Next overrides the caller's advice when set.
	Next string
}

func (e *HostError) Error() string { return e.Action + " on " + e.Node + ": " + e.Err.Error() }
func (e *HostError) Unwrap() error { return e.Err }

// Uncertain is a step whose effect is not known (a start whose answer was
// lost): it stays in flight and the next call observes it.
type Uncertain struct {
	Reasons []string
	Next    string
}

func (u *Uncertain) Error() string { return strings.Join(u.Reasons, "; ") }

// ---- install ----

// InstallOutcome is where an install stands.
type InstallOutcome struct {
	Outcome
	Install *steps.InstallState
}

// StartInstall starts apt-get full-upgrade detached on the node, bound to
// the approved package digest.
func (w *Window) StartInstall(ctx context.Context, p PackagePlan, a Approval) (InstallOutcome, error) {
	ctx, done, err := w.holdStep(ctx, round.StepInstall, p.Node)
	if err != nil {
		return InstallOutcome{}, err
	}
	defer done()
	if err := w.Rec.Start(p, a); err != nil {
		return InstallOutcome{}, err
	}
	if lost := w.LeaseHeld(ctx, p.Node); lost != nil {
		return InstallOutcome{}, w.leaseStop(round.StepInstall, p.Node, lost, "the install was not started")
	}
	st, err := w.Host.Install(ctx, p.Node, "start", w.Round, p.PackageDigest)
	out := InstallOutcome{Install: &st}
	if lost := LostLease(ctx); lost != nil {
		return out, w.leaseInterrupt(round.StepInstall, p.Node, lost, "the install may have started detached on the node: it is left to finish, and the next holder of the Lease observes it")
	}
	if err != nil {
		if errors.Is(err, steps.ErrRefused) {
			return out, w.Rec.FailWith(round.StepInstall, p.Node, "Stop and tell a person: the node refused to start the install and nothing was started (the reason says why: a drifted plan, an install already started, dpkg locked by another process or interrupted, /boot too small).",
				"the node refused to start the install: "+err.Error())
		}
		return out, &Uncertain{Reasons: []string{"starting the install on " + p.Node + ": " + err.Error(), "not sure whether it started; nothing else was done"},
			Next: "Call install_updates again: it reads the install's state on the node instead of starting it again."}
	}
	out.InProgress = true
	out.Reasons = []string{"apt-get full-upgrade started detached on " + p.Node + " (" + st.Launcher + ")"}
	out.Next = "Call install_updates again with the same node to follow it."
	return out, nil
}

// FollowInstall observes an install in flight and records how it ended.
// It never starts apt: a node where nothing started answers
// ErrNeedApproval.
func (w *Window) FollowInstall(ctx context.Context, node string) (InstallOutcome, error) {
	run := w.Rec.InFlight(round.StepInstall, node)
	if run == nil {
		return InstallOutcome{}, fmt.Errorf("install on %s is not in flight", node)
	}
	ctx, done, err := w.holdStep(ctx, round.StepInstall, node)
	if err != nil {
		return InstallOutcome{}, err
	}
	defer done()
	st, err := w.Host.Install(ctx, node, "status", w.Round, "")
	out := InstallOutcome{Install: &st}
	if lost := LostLease(ctx); lost != nil {
		return out, w.leaseInterrupt(round.StepInstall, node, lost, "no further wait: the install runs detached on the node and is left to finish; the next holder of the Lease observes it")
	}
	obs := Underway
	switch {
	case err != nil && st.State == "":
		obs = Unreadable
	case st.State == "not_started":
		obs = NotBegun
	case st.State == "finished" || (st.State != "running" && st.State != ""):
		obs = Ended
	}
	switch DecideReentry(run.Last(), obs, w.now(), w.Bounds.For(round.StepInstall)) {
	case NeedApproval:
		return out, ErrNeedApproval
	case Overdue:
		return out, w.Overdue(round.StepInstall, node, run, "install state "+orUnknown(st.State))
	}
	switch {
	case obs == Unreadable:
		out.InProgress = true
		out.Reasons = []string{"cannot read the install's state on " + node + " now: " + err.Error(), "the install runs detached on the node; a lost connection does not stop it"}
		out.Next = "Call install_updates again in a minute with the same node."
		return out, nil
	case st.State == "running":
		out.InProgress = true
		out.Reasons = []string{fmt.Sprintf("apt is running on %s: %d unpacked, %d set up", node, st.Progress.Unpacked, st.Progress.SetUp)}
		out.Next = "Call install_updates again in a minute with the same node."
		return out, nil
	case st.State == "finished" && st.ExitCode != nil && *st.ExitCode == 0 && len(st.Progress.DpkgErrors) == 0:
		if err := w.Rec.Finish(round.StepInstall, node, "", "apt-get full-upgrade exited 0"); err != nil {
			return out, err
		}
		out.Reasons = []string{"apt-get full-upgrade finished on " + node + " (exit 0)"}
		out.Next = "trial_boot this node next."
		return out, nil
	case st.State == "finished":
		code := "?"
		if st.ExitCode != nil {
			code = fmt.Sprint(*st.ExitCode)
		}
		return out, w.Rec.FailWith(round.StepInstall, node, "Stop: read the log tail; a person repairs dpkg on the node and signs resume or abort. The old kernel is still the default.",
			fmt.Sprintf("apt-get full-upgrade on %s failed (exit %s): %s", node, code, strings.Join(st.Progress.DpkgErrors, "; ")))
	}
	return out, w.Rec.FailWith(round.StepInstall, node, "Stop and tell a person: the node's install state is unexpected.",
		fmt.Sprintf("the install on %s is in state %q, which this round did not start", node, st.State))
}

// ---- trial boot ----

// RebootRefused reports whether a reboot request's error is the host
// step's refusal: the host checked its prepared trial boot, found it not
// as prepared (the GRUB drop-in no longer names the old entry, the
// one-shot entry is gone ...) and rebooted nothing. Asking again cannot
// change that, so the step stops for a person instead of retrying; any
// other error (a lost connection) leaves the step in flight to observe.
func RebootRefused(err error) bool { return errors.Is(err, steps.ErrRefused) }

// refusedRebootNext is the next action when a node refused its trial (or
// drill) reboot.
const refusedRebootNext = "Stop and tell a person: the node refused to reboot and was not rebooted; the reason names what it found. A one-shot entry may still be queued (grub-editenv list): clear it (grub-editenv - unset next_entry) before anything reboots the node, then sign resume or abort."

// TrialBootOutcome is where a trial boot stands.
type TrialBootOutcome struct {
	Outcome
	TrialBoot *steps.TrialBoot
	// Driver is the driver pod's wait on the old kernel after a fallback,
	// on a driver-container node; nil otherwise.
	Driver *DriverOnOldKernel
}

func (p TrialBootPlan) input(roundID string) steps.TrialBootInput {
	return steps.TrialBootInput{Round: roundID, OldEntry: p.OldEntry, NewEntry: p.NewEntry, PanicSeconds: p.PanicSeconds}
}

// StartTrialBoot prepares the one-shot boot of exactly the approved
// entries and requests the reboot.
func (w *Window) StartTrialBoot(ctx context.Context, p TrialBootPlan, a Approval, progress func(done, total float64, msg string)) (TrialBootOutcome, error) {
	ctx, done, err := w.holdStep(ctx, round.StepTrialBoot, p.Node)
	if err != nil {
		return TrialBootOutcome{}, err
	}
	defer done()
	if err := w.Rec.Start(p, a); err != nil {
		return TrialBootOutcome{}, err
	}
	if lost := w.LeaseHeld(ctx, p.Node); lost != nil {
		return TrialBootOutcome{}, w.leaseStop(round.StepTrialBoot, p.Node, lost, "nothing was prepared and the node was not rebooted")
	}
	tb, err := w.Host.TrialBootPrepare(ctx, p.Node, p.input(w.Round))
	if err != nil {
		return TrialBootOutcome{TrialBoot: &tb}, w.Rec.FailWith(round.StepTrialBoot, p.Node, "Stop: the trial boot could not be prepared; the node was not rebooted. Tell a person.",
			"prepare trial boot on "+p.Node+": "+err.Error())
	}
	progress(1, 3, "prepared: next_entry="+tb.NextEntry)
	if lost := w.LeaseHeld(ctx, p.Node); lost != nil {
		return TrialBootOutcome{TrialBoot: &tb}, w.leaseInterrupt(round.StepTrialBoot, p.Node, lost,
			"the trial boot was prepared but the node was not rebooted: its one-shot entry ("+tb.NextEntry+") stays queued for the next reboot, the old kernel the default")
	}
	rb, err := w.Host.TrialBootReboot(ctx, p.Node, w.Round)
	if lost := LostLease(ctx); lost != nil {
		return TrialBootOutcome{TrialBoot: &tb}, w.leaseInterrupt(round.StepTrialBoot, p.Node, lost, "the reboot may have been requested: the node's boot is left as it is, and the next holder of the Lease observes it")
	}
	if RebootRefused(err) {
		return TrialBootOutcome{TrialBoot: &tb}, w.Rec.FailWith(round.StepTrialBoot, p.Node, refusedRebootNext, "the node refused the trial reboot: "+err.Error())
	}
	if err != nil {
		return TrialBootOutcome{TrialBoot: &tb}, &Uncertain{Reasons: []string{"request the reboot of " + p.Node + ": " + err.Error()},
			Next: "Call trial_boot again: it checks whether the node rebooted before doing anything."}
	}
	progress(2, 3, "reboot requested")
	out := TrialBootOutcome{TrialBoot: &rb, Outcome: Outcome{InProgress: true,
		Reasons: []string{fmt.Sprintf("%s will boot %s once (next_entry %s); default stays %s", p.Node, p.TargetKernel, tb.NextEntry, p.OldEntry)},
		Next:    "Call trial_boot again with the same node to follow the reboot."}}
	if !tb.WatchdogArmed {
		out.Reasons = append(out.Reasons, "no hardware watchdog is armed (RuntimeWatchdogSec): a hang at boot is not covered and needs console access")
	}
	return out, nil
}

// FollowTrialBoot observes a trial boot in flight: a prepared boot of the
// approved entries whose reboot request was lost is completed; an
// unprepared one answers ErrNeedApproval; the booted kernel decides.
func (w *Window) FollowTrialBoot(ctx context.Context, node string) (TrialBootOutcome, error) {
	run := w.Rec.InFlight(round.StepTrialBoot, node)
	if run == nil {
		return TrialBootOutcome{}, fmt.Errorf("trial boot on %s is not in flight", node)
	}
	ctx, done, err := w.holdStep(ctx, round.StepTrialBoot, node)
	if err != nil {
		return TrialBootOutcome{}, err
	}
	defer done()
	w.forget(node)
	tb, err := w.Host.TrialBootStatus(ctx, node, w.Round)
	out := TrialBootOutcome{TrialBoot: &tb}
	if lost := LostLease(ctx); lost != nil {
		return out, w.leaseInterrupt(round.StepTrialBoot, node, lost, "no further wait on the reboot: the node's boot is left as it is, and the next holder of the Lease observes it")
	}
	obs := Underway
	switch {
	case errors.Is(err, steps.ErrRefused) && tb.RebootRequestedAt == "":
		obs = NotBegun // nothing prepared for this round
	case err != nil:
		obs = Unreadable
	case !tb.Rebooted && tb.RebootRequestedAt == "" && tb.NextEntry == "":
		obs = NotBegun // state file without a one-shot entry: not prepared
	case tb.Rebooted:
		obs = Ended
	}
	switch DecideReentry(run.Last(), obs, w.now(), w.Bounds.For(round.StepTrialBoot)) {
	case NeedApproval:
		return out, ErrNeedApproval
	case Overdue:
		return out, w.Overdue(round.StepTrialBoot, node, run, "it may hang at boot; the old kernel is the default, so a power cycle boots it")
	}
	if obs == Unreadable {
		out.InProgress = true
		out.Reasons = []string{node + " is rebooting (not reachable yet: " + err.Error() + ")"}
		out.Next = "Call trial_boot again with the same node in a little while."
		return out, nil
	}
	if !tb.Rebooted {
		if tb.RebootRequestedAt == "" {
			// Prepared under the journaled approval, reboot request lost:
			// complete it, but only for exactly the approved entries.
			p, err := Approved[TrialBootPlan](run.Last())
			if err != nil {
				return out, ErrNeedApproval
			}
			if tb.NewEntry != "" && (tb.NewEntry != p.NewEntry || tb.OldEntry != p.OldEntry) {
				return out, w.Rec.FailWith(round.StepTrialBoot, node, "Stop and tell a person: the node's prepared trial boot is not the approved one.",
					fmt.Sprintf("%s is prepared to boot %s with default %s, the approval was for %s with default %s", node, tb.NewEntry, tb.OldEntry, p.NewEntry, p.OldEntry))
			}
			if lost := w.LeaseHeld(ctx, node); lost != nil {
				return out, w.leaseInterrupt(round.StepTrialBoot, node, lost, "the node was not rebooted: its prepared one-shot entry stays queued, the old kernel the default")
			}
			rb, err := w.Host.TrialBootReboot(ctx, node, w.Round)
			if RebootRefused(err) {
				return out, w.Rec.FailWith(round.StepTrialBoot, node, refusedRebootNext, "the node refused the trial reboot: "+err.Error())
			}
			if err != nil {
				return out, &HostError{Node: node, Action: "request the trial reboot", Err: err}
			}
			out.TrialBoot = &rb
		}
		out.InProgress = true
		out.Reasons = []string{node + " has not rebooted yet (same boot_id)"}
		out.Next = "Call trial_boot again with the same node in a little while."
		return out, nil
	}
	switch tb.Outcome {
	case steps.OutcomeNewKernel:
		// The boot proven here is what verify, uncordon and promote are
		// held to.
		if err := w.Rec.FinishOn(round.StepTrialBoot, node, Boot{Kernel: tb.Kernel, ID: tb.BootID}, "booted "+tb.Kernel+" once (old kernel still default), boot id "+tb.BootID); err != nil {
			return out, err
		}
		out.Reasons = []string{fmt.Sprintf("%s rebooted (boot_id %s) into the new kernel %s; the old kernel is still the default", node, tb.BootID, tb.Kernel)}
		out.Next = "record_verification this node next (verify_node, recorded in the round)."
		return out, nil
	case steps.OutcomeFellBack:
		reasons := []string{fmt.Sprintf("%s came back on the OLD kernel %s: the trial kernel %s did not come up and GRUB fell back to the default", node, tb.Kernel, tb.NewKernel)}
		next := "Stop the round: the new kernel does not boot here. The node runs the old kernel; tell a person (kernel logs, pstore) and let them sign abort or resume."
		if out.Driver = w.driverOnOldKernel(ctx, node); out.Driver != nil {
			reasons = append(reasons, out.Driver.Line)
			if out.Driver.Red {
				next += " Its GPU driver is not back on the old kernel either: the node stays cordoned until a person fixes the driver container."
			}
		}
		return out, w.Rec.FailWith(round.StepTrialBoot, node, next, reasons...)
	}
	return out, w.Rec.FailWith(round.StepTrialBoot, node, "Stop and tell a person: the node booted an unexpected kernel.",
		fmt.Sprintf("%s booted %s, which is neither the trial kernel %s nor the old one", node, tb.Kernel, tb.NewKernel))
}

// ---- promote ----

// PromoteOutcome says what GRUB boots next.
type PromoteOutcome struct {
	Outcome
	Promote *steps.PromoteResult
}

// PlanPromote decides the promote of node from the round's records and
// the host observed now (DecidePromote); recordedTarget is the target
// kernel simulate_upgrade recorded. It writes nothing.
func (w *Window) PlanPromote(ctx context.Context, node, recordedTarget string) (PromotePlan, error) {
	f := PromoteFacts{Node: node, Trial: w.Rec.J.StepRun(round.StepTrialBoot, node), Verify: w.Rec.J.StepRun(round.StepVerify, node),
		GPU: w.Rec.J.StepRun(round.StepGPUAcceptance, node), RecordedTarget: recordedTarget}
	if n := w.Rec.J.Shared().Node(node); n != nil {
		f.GPUServer = n.GPU
	}
	if f.Trial.Green() {
		now, err := w.ObserveBoot(ctx, node)
		if err != nil {
			return PromotePlan{}, err
		}
		f.Now = now
	}
	return DecidePromote(f)
}

// Promote makes the approved kernel the default and records it, on the
// approved boot only: promote.sh refuses, changing nothing, unless the
// host runs p.Kernel with boot id p.BootID. A promote in flight cannot be
// observed without acting, so re-entry needs a fresh approval
// (FollowPromote) and this runs again under it (idempotent).
func (w *Window) Promote(ctx context.Context, p PromotePlan, a Approval) (PromoteOutcome, error) {
	if p.BootID == "" {
		return PromoteOutcome{}, refuse("Call promote_kernel again: it decides the plan from the boot the node runs now.",
			"the promote plan of "+p.Node+" names no boot to hold the host to", "nothing was executed")
	}
	ctx, done, err := w.holdStep(ctx, round.StepPromote, p.Node)
	if err != nil {
		return PromoteOutcome{}, err
	}
	defer done()
	if err := w.Rec.Start(p, a); err != nil {
		return PromoteOutcome{}, err
	}
	if lost := w.LeaseHeld(ctx, p.Node); lost != nil {
		return PromoteOutcome{}, w.leaseStop(round.StepPromote, p.Node, lost, "GRUB's default was not changed: the old kernel stays the default")
	}
	res, err := w.Host.Promote(ctx, p.Node, steps.PromoteInput{Round: w.Round, ExpectedKernel: p.Kernel, ExpectedBootID: p.BootID})
	out := PromoteOutcome{Promote: &res}
	if errors.Is(err, steps.ErrRefused) {
		return out, w.Rec.FailWith(round.StepPromote, p.Node,
			"Stop and tell a person: the node no longer runs the boot approved for promotion. GRUB's default was not changed: the old kernel stays the default.",
			fmt.Sprintf("%s refused the promote and changed nothing: it runs %s, the approval was for %s: %v",
				p.Node, Boot{Kernel: res.RunningKernel, ID: res.BootID}, Boot{Kernel: p.Kernel, ID: p.BootID}, err))
	}
	if err != nil || !res.Promoted {
		why := fmt.Sprintf("promote on %s: default is now %q (%s), want %s", p.Node, res.NextBootKernel, res.NextBootEntry, p.Kernel)
		if err != nil {
			why = "promote on " + p.Node + ": " + err.Error()
		}
		return out, w.Rec.FailWith(round.StepPromote, p.Node, "Stop and tell a person: GRUB's default is not what it should be.", why)
	}
	if err := w.Rec.Finish(round.StepPromote, p.Node, "", "default is "+res.NextBootKernel); err != nil {
		return out, err
	}
	out.Reasons = []string{p.Node + " boots " + res.NextBootKernel + " by default now"}
	out.Next = "close_window with this node: its gate (check_gate, recorded) must be green before the next node's drain."
	return out, nil
}

// FollowPromote is re-entry of a promote in flight: past its bound it
// fails; otherwise only a fresh approval runs it again.
func (w *Window) FollowPromote(ctx context.Context, node string) (PromoteOutcome, error) {
	return PromoteOutcome{}, w.FollowUnobservable(round.StepPromote, node, "GRUB's default is not known")
}

// ---- drain ----

// DrainOutcome is what the drain did.
type DrainOutcome struct {
	Outcome
	Drain *drain.Result
}

// DrainOptions are the drain's settings from the intent and config.
type DrainOptions struct {
	Policy   drain.Policy
	Options  drain.Options // Round, Identity, Policy and ExpectDigest are set here
	Identity string
	// JobSelector, when set, picks the pods (batch training jobs) whose work
	// the drain must not cut short: the drain cordons first, so no new job
	// lands, then waits while they run, for at most JobWait counted from
	// the drain's start in the journal (a re-entry or a restarted server
	// does not reset it); then the round stops with the node cordoned.
	JobSelector labels.Selector
	JobWait     time.Duration
	// Approved, when set, is the approved plan of the drain in flight as
	// the server keeps it beside the signature that approved it; nil: the
	// plan the journal holds. A drain carried on evicts only pods it lists.
	Approved *DrainPlan
}

// StartDrain opens the node's window: the Lease, then the journal, then
// cordon and evict exactly the approved preview.
func (w *Window) StartDrain(ctx context.Context, p DrainPlan, a Approval, o DrainOptions, progress func(done, total int, msg string)) (DrainOutcome, error) {
	ctx, done, err := w.holdStep(ctx, round.StepDrain, p.Node)
	if err != nil {
		return DrainOutcome{}, err
	}
	defer done()
	if err := w.othersClear(ctx, p.Node, w.othersBound(), true); err != nil {
		if rerr := w.ReleaseLease(ctx, p.Node); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release the window Lease: %w", rerr))
		}
		return DrainOutcome{}, err
	}
	if err := w.Rec.Start(p, a); err != nil {
		if rerr := w.ReleaseLease(ctx, p.Node); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release the window Lease: %w", rerr))
		}
		return DrainOutcome{}, err
	}
	return w.drain(ctx, p.Node, p.PreviewDigest, nil, o, progress)
}

// FollowDrain carries on a drain in flight: the cordon is ours, so evict
// what is left under the same policy, and only pods the approved plan
// lists (a pod that appeared since the approval stops the drain with
// drift, as the first pass does). A node not cordoned by us shows the
// drain never began, and a drain whose approved plan is not known cannot
// be held to it: ErrNeedApproval.
func (w *Window) FollowDrain(ctx context.Context, node string, o DrainOptions, progress func(done, total int, msg string)) (DrainOutcome, error) {
	run := w.Rec.InFlight(round.StepDrain, node)
	if run == nil {
		return DrainOutcome{}, fmt.Errorf("drain of %s is not in flight", node)
	}
	ctx, done, err := w.holdStep(ctx, round.StepDrain, node)
	if err != nil {
		return DrainOutcome{}, err
	}
	defer done()
	obs := Underway
	st, err := w.Cluster.CordonState(ctx, node)
	switch {
	case err != nil:
		obs = Unreadable
	case !st.Unschedulable || st.Owner == nil || st.Owner.Identity != o.Identity:
		obs = NotBegun
	}
	switch DecideReentry(run.Last(), obs, w.now(), w.Bounds.For(round.StepDrain)) {
	case NeedApproval:
		return DrainOutcome{}, ErrNeedApproval
	case Overdue:
		return DrainOutcome{}, w.Overdue(round.StepDrain, node, run, "pods may still be on the node")
	}
	if obs == Unreadable {
		return DrainOutcome{}, &HostError{Node: node, Action: "read the cordon", Err: err}
	}
	approved := o.Approved
	if approved == nil {
		var p DrainPlan
		if a := run.Last(); a != nil && len(a.Plan) > 0 && json.Unmarshal(a.Plan, &p) == nil {
			approved = &p
		}
	}
	if approved == nil || approved.Node != node || approved.PreviewDigest != run.Last().PlanDigest {
		return DrainOutcome{}, ErrNeedApproval
	}
	return w.drain(ctx, node, "", ApprovedPods(*approved), o, progress)
}

// ApprovedPods are the pods ("namespace/name") a drain plan evicts.
func ApprovedPods(p DrainPlan) map[string]bool {
	out := map[string]bool{}
	for _, e := range p.Evict {
		rest, ok := strings.CutPrefix(e, "evict ")
		if !ok {
			continue
		}
		ref, _, _ := strings.Cut(rest, " (")
		out[ref] = true
	}
	return out
}

func (w *Window) drain(ctx context.Context, node, expect string, only map[string]bool, o DrainOptions, progress func(done, total int, msg string)) (DrainOutcome, error) {
	if lost := w.LeaseHeld(ctx, node); lost != nil {
		return DrainOutcome{}, w.leaseStop(round.StepDrain, node, lost, "nothing was evicted by this call")
	}
	if err := w.skipDriverUpgrade(ctx, node); err != nil {
		return DrainOutcome{}, w.Rec.FailWith(round.StepDrain, node,
			"Stop: a person looks at the node's labels and the API server, then signs resume or abort. Nothing was cordoned or evicted by this call (a cordon from before stays recorded as ours).",
			err.Error(), "the GPU Operator's driver upgrade could start on the node while the round has it cordoned, so the round does not cordon it")
	}
	if o.JobSelector != nil && !o.JobSelector.Empty() {
		if out, held, err := w.waitForJobs(ctx, node, o); held {
			return out, err
		}
	}
	opts := o.Options
	opts.Policy, opts.Round, opts.Identity, opts.ExpectDigest, opts.OnlyPods = o.Policy, w.Round, o.Identity, expect, only
	res, err := w.Cluster.Drain(ctx, node, opts, progress)
	out := DrainOutcome{Drain: &res}
	if lost := LostLease(ctx); lost != nil {
		return out, w.leaseStop(round.StepDrain, node, lost,
			fmt.Sprintf("no further eviction: %d pods evicted before, the node stays cordoned (recorded as ours)", len(res.Evicted)))
	}
	if err != nil {
		why := []string{"drain of " + node + ": " + err.Error()}
		for _, b := range res.Blocked {
			line := b.PodRef.String() + ": " + b.Reason
			for _, pdb := range b.PDBs {
				line += fmt.Sprintf(" (PDB %s allows %d disruptions)", pdb.Name, pdb.DisruptionsAllowed)
			}
			why = append(why, line)
		}
		return out, w.Rec.FailWith(round.StepDrain, node, "Stop: the node stays cordoned and recorded as ours. Tell a person which pods block (and their PDBs); they fix it and sign resume or abort.", why...)
	}
	if err := w.Rec.Finish(round.StepDrain, node, "", fmt.Sprintf("%d pods evicted", len(res.Evicted))); err != nil {
		return out, err
	}
	out.Reasons = []string{fmt.Sprintf("%s cordoned (recorded as ours) and %d pods evicted", node, len(res.Evicted))}
	out.Next = "install_updates on this node next."
	return out, nil
}

// waitForJobs cordons the node (recorded as ours) and holds the drain
// while jobs matching o.JobSelector run there, within the bound counted
// from the drain's journaled start; held is false when the drain may
// evict now.
func (w *Window) waitForJobs(ctx context.Context, node string, o DrainOptions) (out DrainOutcome, held bool, err error) {
	run := w.Rec.InFlight(round.StepDrain, node)
	if run == nil || len(run.Attempts) == 0 {
		return out, true, fmt.Errorf("drain of %s is not in flight", node)
	}
	since := run.Attempts[len(run.Attempts)-1].Started
	if err := w.Cluster.Cordon(ctx, node, w.Round, o.Identity); err != nil {
		return out, true, w.Rec.FailWith(round.StepDrain, node, "Stop: a person looks at the node's cordon, then signs resume or abort.",
			"cordon "+node+" before waiting for its jobs: "+err.Error())
	}
	holding, err := w.Cluster.HoldingPods(ctx, node, o.JobSelector)
	if err != nil {
		// The API server did not answer: the node stays cordoned, the
		// wait goes on; the bound still holds.
		if w.now().Sub(since) < o.JobWait {
			out.InProgress = true
			out.Reasons = []string{node + " is cordoned (recorded as ours); its jobs could not be listed: " + err.Error()}
			out.Next = "Call drain_node again with the same node in a little while."
			return out, true, nil
		}
		return out, true, w.Rec.FailWith(round.StepDrain, node, "Stop: the node stays cordoned and recorded as ours. A person checks the API server, then signs resume or abort.",
			"the jobs on "+node+" could not be listed after the wait's bound: "+err.Error())
	}
	h := drain.DecideHold(holding, since, w.now(), o.JobWait)
	switch {
	case h.Wait:
		out.InProgress = true
		out.Reasons = []string{h.Reason, node + " is cordoned (recorded as ours): no new job lands there; nothing was evicted yet"}
		out.Next = "Call drain_node again with the same node in a little while: it evicts once the jobs finished."
		return out, true, nil
	case h.Stop:
		return out, true, w.Rec.FailWith(round.StepDrain, node,
			"Stop: the node stays cordoned and recorded as ours, nothing was evicted. A person decides: let the jobs finish and sign resume, or tell their owners and drain anyway.",
			h.Reason)
	}
	return out, false, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// FollowUnobservable is re-entry of a step that cannot be observed without
// acting (promote, autoremove): past its bound it fails; otherwise only a
// fresh approval runs it again (it is idempotent).
func (w *Window) FollowUnobservable(step round.Step, node, unknown string) error {
	run := w.Rec.InFlight(step, node)
	if run == nil {
		return fmt.Errorf("%s is not in flight", step)
	}
	if DecideReentry(run.Last(), Unreadable, w.now(), w.Bounds.For(step)) == Overdue {
		return w.Overdue(step, node, run, unknown)
	}
	return ErrNeedApproval
}

// ---- autoremove ----

// AutoremoveOutcome is what each node removed.
type AutoremoveOutcome struct {
	Outcome
	Nodes []steps.AutoremoveResult
}

// SimulateAutoremove runs autoremove's simulation (or, with
// steps.AutoremoveRun, the removal) on every node, keeping each node's
// recorded running kernel; problems name the nodes that failed.
func (w *Window) SimulateAutoremove(ctx context.Context, nodes []string, keep map[string]string, action string, concurrency int) ([]steps.AutoremoveResult, []string) {
	rs := host.FanOut(ctx, nodes, concurrency, func(ctx context.Context, node string) (steps.AutoremoveResult, error) {
		return w.Host.Autoremove(ctx, node, steps.AutoremoveInput{Action: action, KeepKernel: keep[node], SoakDone: true})
	})
	var out []steps.AutoremoveResult
	var problems []string
	for _, r := range rs {
		out = append(out, r.Value)
		if r.Err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", r.Node, r.Err))
		}
	}
	return out, problems
}

// Autoremove runs the approved fleet autoremove and records it.
func (w *Window) Autoremove(ctx context.Context, p AutoremovePlan, a Approval, keep map[string]string, concurrency int) (AutoremoveOutcome, error) {
	if err := w.Rec.Start(p, a); err != nil {
		return AutoremoveOutcome{}, err
	}
	var nodes []string
	for _, n := range p.Nodes {
		nodes = append(nodes, n.Node)
	}
	res, problems := w.SimulateAutoremove(ctx, nodes, keep, steps.AutoremoveRun, concurrency)
	out := AutoremoveOutcome{Nodes: res}
	if len(problems) > 0 {
		return out, w.Rec.FailWith(round.StepAutoremove, "", "Tell a person which nodes failed.", problems...)
	}
	if err := w.Rec.Finish(round.StepAutoremove, "", "", fmt.Sprintf("%d nodes", len(res))); err != nil {
		return out, err
	}
	out.Reasons = []string{fmt.Sprintf("autoremove ran on %d nodes", len(res))}
	out.Next = "record_lesson for what the round taught, then close_round."
	return out, nil
}
