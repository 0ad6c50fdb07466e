package window

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
)

// Refusal is a decision not to act: nothing was done and the round goes on.
type Refusal struct {
	Reasons []string
	Next    string
}

func (r *Refusal) Error() string { return strings.Join(r.Reasons, "; ") }

func refuse(next string, reasons ...string) error { return &Refusal{Reasons: reasons, Next: next} }

// Stop is a decision that the step must not go on and the round stops: the
// caller records it (Recorder.Stop) before it answers.
type Stop struct {
	Step    round.Step
	Node    string
	Reasons []string
	Next    string
}

func (s *Stop) Error() string { return strings.Join(s.Reasons, "; ") }

// ErrNoApprovedPlan says an attempt in flight carries no approved plan that
// hashes to its journaled digest.
var ErrNoApprovedPlan = errors.New("no approved plan is journaled with this attempt")

// PickEntry finds the non-recovery GRUB entry booting kernel, preferring the
// one inside the "Advanced options" submenu (its id carries the submenu
// path, as grub-reboot needs it).
func PickEntry(entries []parse.GrubEntry, kernel string) (parse.GrubEntry, bool) {
	var found []parse.GrubEntry
	for _, e := range entries {
		if e.Kernel == kernel && !e.Recovery {
			found = append(found, e)
		}
	}
	if len(found) == 0 {
		return parse.GrubEntry{}, false
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].Submenu != "" && found[j].Submenu == "" })
	return found[0], true
}

// DecideDrain turns the eviction preview into the plan a person approves;
// pods the policy cannot evict stop the round before anything is cordoned.
func DecideDrain(node string, pv drain.Evictions) (DrainPlan, error) {
	if len(pv.Blockers) > 0 {
		return DrainPlan{}, &Stop{Step: round.StepDrain, Node: node,
			Reasons: append([]string{"the drain of " + node + " would be blocked before it starts (nothing was cordoned):"}, pv.Blockers...),
			Next:    "Stop: a person must deal with these pods (or change the intent's drain policy), then sign resume or abort."}
	}
	p := DrainPlan{Node: node, PreviewDigest: pv.Digest, Evict: []string{}, Warnings: pv.Warnings}
	for _, e := range pv.Evict {
		p.Evict = append(p.Evict, "evict "+e.String()+" ("+strings.ToLower(e.OwnerKind)+" "+e.OwnerName+")")
	}
	return p, nil
}

// Simulated is what simulate_upgrade found for a node (rounds/<id>/nodes/<node>.json).
type Simulated struct {
	PackageDigest string
	TargetKernel  string
	RunningKernel string
}

// DecidePackage binds the live simulation to the one simulate_upgrade
// recorded: a drifted or unsafe package set is refused.
func DecidePackage(node string, sim steps.Simulation, rec Simulated) (PackagePlan, error) {
	if rec.PackageDigest == "" {
		return PackagePlan{}, refuse("Run simulate_upgrade on the node first.", "no simulated package plan is recorded for "+node)
	}
	if len(sim.Plan.Blockers) > 0 {
		return PackagePlan{}, refuse("Run simulate_upgrade again: it records the failure and stops the round.",
			append([]string{"the live plan is not safe now:"}, sim.Plan.Blockers...)...)
	}
	if sim.Plan.Digest != rec.PackageDigest {
		return PackagePlan{}, refuse("The packages changed since simulate_upgrade: run simulate_upgrade again, then ask for a new approval.",
			fmt.Sprintf("live package plan %s differs from the simulated plan %s", sim.Plan.Digest, rec.PackageDigest), "nothing was executed")
	}
	lines := make([]string, 0, len(sim.Plan.Packages))
	for _, pkg := range sim.Plan.Packages {
		old := pkg.OldVersion
		if old == "" {
			old = "-"
		}
		lines = append(lines, fmt.Sprintf("%s %s %s -> %s [%s]", pkg.Action, pkg.Name, old, pkg.NewVersion, pkg.Class))
	}
	return PackagePlan{Node: node, PackageDigest: sim.Plan.Digest, Lines: lines, AptLines: sim.Plan.Lines,
		TargetKernel: sim.Plan.TargetKernel, RunningKernel: rec.RunningKernel}, nil
}

// TrialBootDone refuses a trial boot called again once the round's own
// trial boot of node finished green and the node runs the target kernel:
// the step is done, and calling it once more is no reason to stop the
// round (DecideTrialBoot would stop it: the node "already runs the target
// kernel"). After a rollback the node runs the old kernel again and the
// trial boot may run anew. nil: decide as usual.
func TrialBootDone(node string, run *round.StepRun, running, target string) error {
	if run == nil || run.State != round.Done || target == "" || running != target {
		return nil
	}
	return refuse("Go on from round_status: the trial boot of "+node+" is done; record_verification comes next.",
		"the trial boot of "+node+" finished green and it runs "+target, "nothing was executed and nothing was recorded")
}

// DecideTrialBoot picks the GRUB entries of the running and the target
// kernel and checks that a one-shot boot is safe here; anything unsafe
// stops the round.
func DecideTrialBoot(node string, insp steps.Inspection, target string, gpu bool, panicSecs int) (TrialBootPlan, error) {
	if target == "" {
		return TrialBootPlan{}, refuse("Run simulate_upgrade first: it names the target kernel.", "no target kernel is recorded for "+node)
	}
	var problems []string
	oldE, okOld := PickEntry(insp.Grub.Entries, insp.Kernel)
	newE, okNew := PickEntry(insp.Grub.Entries, target)
	if !okOld {
		problems = append(problems, "no GRUB entry boots the running kernel "+insp.Kernel)
	}
	if !okNew {
		problems = append(problems, "no GRUB entry boots the new kernel "+target+" (did install finish and update-grub run?)")
	}
	if !insp.Grub.EnvWritableAtBoot {
		problems = append(problems, "grubenv cannot be written at boot ("+strings.Join(insp.Grub.Reasons, "; ")+"): the one-shot boot is not reliable here")
	}
	if insp.KernelPanic <= 0 {
		problems = append(problems, "kernel.panic is 0: a panicking trial kernel would hang instead of falling back")
	}
	if gpu && !insp.TargetModules.Present {
		problems = append(problems, "no NVIDIA kernel modules for "+target+" (linux-modules-nvidia or DKMS): the GPUs would be lost on the new kernel")
	}
	if insp.Kernel == target {
		problems = append(problems, node+" already runs the target kernel "+target)
	}
	if len(problems) > 0 {
		return TrialBootPlan{}, &Stop{Step: round.StepTrialBoot, Node: node, Reasons: problems,
			Next: "Stop: the trial boot is not safe on this node. Tell a person; they fix it and sign resume, or abort."}
	}
	return TrialBootPlan{Node: node, RunningKernel: insp.Kernel, TargetKernel: target, OldEntry: oldE.ID, NewEntry: newE.ID,
		PanicSeconds: panicSecs, BootID: insp.BootID}, nil
}

// DecideFallbackDrill checks the canary can go through the drill.
func DecideFallbackDrill(node string, insp steps.Inspection, target string, canary, passed bool, panicSecs int) (FallbackDrillPlan, error) {
	if !canary {
		return FallbackDrillPlan{}, refuse("Run the drill on the round's canary GPU server.", node+" is not the canary of this round")
	}
	if passed {
		return FallbackDrillPlan{}, refuse("trial_boot this node: the drill already passed this round.", "the fallback drill on "+node+" already passed")
	}
	if target == "" {
		return FallbackDrillPlan{}, refuse("Run simulate_upgrade first: it names the target kernel.", "no target kernel is recorded for "+node)
	}
	oldE, okOld := PickEntry(insp.Grub.Entries, insp.Kernel)
	newE, okNew := PickEntry(insp.Grub.Entries, target)
	var problems []string
	if !okOld || !okNew {
		problems = append(problems, "the GRUB entries of the running and the new kernel are not both there")
	}
	if insp.KernelPanic <= 0 {
		problems = append(problems, "kernel.panic is 0: the drill's panic would hang the host")
	}
	if !insp.Grub.EnvWritableAtBoot {
		problems = append(problems, "grubenv is not writable at boot here")
	}
	if len(problems) > 0 {
		return FallbackDrillPlan{}, refuse("Fix these first; the drill needs a working one-shot boot and kernel.panic.", problems...)
	}
	return FallbackDrillPlan{Node: node, RunningKernel: insp.Kernel, TargetKernel: target, OldEntry: oldE.ID, NewEntry: newE.ID, PanicSeconds: panicSecs}, nil
}

// PromoteFacts are what promote decides from: the round's records of the
// node's trial boot and checks, and the host observed now.
type PromoteFacts struct {
	Node string
	// Trial, Verify and GPU are the node's runs of trial_boot, verify and
	// gpu_acceptance.
	Trial, Verify, GPU *round.StepRun
	// GPUServer: gpu_acceptance must be green on the trial boot too.
	GPUServer bool
	// RecordedTarget is the target kernel simulate_upgrade recorded, for a
	// trial boot journaled without its plan.
	RecordedTarget string
	// Now is the node's running kernel and boot id, read just now.
	Now Boot
}

// DecidePromote takes the kernel and entry to promote from the trial boot
// a person approved and that booted green, and binds the plan to that
// boot: the host must run it now, and verify (and gpu_acceptance on a GPU
// server) must be green on it (DecideOnTrialBoot). Anything else refuses
// and nothing runs.
func DecidePromote(f PromoteFacts) (PromotePlan, error) {
	if !f.Trial.Green() {
		return PromotePlan{}, refuse("trial_boot this node first.", "no green trial boot of "+f.Node+" this round")
	}
	p := PromotePlan{Node: f.Node, Kernel: f.RecordedTarget}
	if tb, err := Approved[TrialBootPlan](f.Trial.Last()); err == nil {
		p.Kernel, p.NewEntry = tb.TargetKernel, tb.NewEntry
	} else if f.RecordedTarget == "" {
		return PromotePlan{}, refuse("Run simulate_upgrade on the node first: it names the target kernel.", "no target kernel is recorded for "+f.Node)
	}
	checks := []Checked{{Step: round.StepVerify, Run: f.Verify, Tool: "record_verification"}}
	if f.GPUServer {
		checks = append(checks, Checked{Step: round.StepGPUAcceptance, Run: f.GPU, Tool: "gpu_acceptance"})
	}
	boot, err := DecideOnTrialBoot(f.Node, f.Trial, f.Now, checks...)
	if err != nil {
		return PromotePlan{}, err
	}
	if boot.Kernel != p.Kernel {
		return PromotePlan{}, refuse("Stop and tell a person: the trial boot did not prove the kernel to promote.",
			fmt.Sprintf("the trial boot of %s proved %s, the kernel to promote is %s", f.Node, boot, p.Kernel), "nothing was executed")
	}
	p.BootID = boot.ID
	return p, nil
}

// DecideAutoremove turns each node's simulated autoremove into the fleet
// plan; a node that could not simulate refuses it.
func DecideAutoremove(res []steps.AutoremoveResult, problems []string) (AutoremovePlan, error) {
	if len(problems) > 0 {
		return AutoremovePlan{}, refuse("Read the reasons: autoremove is not safe on these nodes as they are.", problems...)
	}
	p := AutoremovePlan{Nodes: []NodeRemoval{}}
	for _, r := range res {
		p.Nodes = append(p.Nodes, NodeRemoval{Node: r.Node, RunningKernel: r.RunningKernel, Removals: append([]string{}, r.Removals...)})
	}
	return p, nil
}

// Observation is what a re-entry saw of a step on the host or cluster.
type Observation int

// Observations.
const (
	// NotBegun: the host shows nothing of the step (install not_started,
	// trial boot not prepared, no cordon), or the step cannot be observed
	// without acting (promote, autoremove).
	NotBegun Observation = iota
	// Underway: it began and has not ended.
	Underway
	// Unreadable: the host or cluster could not be read now.
	Unreadable
	// Ended: it ended on the host (green or red; the caller records which).
	Ended
)

// Reentry is what a call on a step in flight may do.
type Reentry int

// Re-entry decisions.
const (
	// Follow: observe and record the outcome, or complete what the
	// journaled approval began; no new approval.
	Follow Reentry = iota
	// NeedApproval: nothing began on the host; only a fresh approval may
	// start it (round.Journal.RestartStep).
	NeedApproval
	// Overdue: in flight longer than its bound; record it as failed.
	Overdue
)

func (r Reentry) String() string {
	return [...]string{"follow", "need_approval", "overdue"}[r]
}

// DecideReentry decides a call on a step in flight from the journal's last
// attempt, what the host shows and the step's bound. A step that ended is
// always followed (its outcome is recorded); one that never began always
// needs an approval; anything else past its bound is overdue.
func DecideReentry(a *round.Attempt, obs Observation, now time.Time, bound time.Duration) Reentry {
	switch obs {
	case Ended:
		return Follow
	case NotBegun:
		return NeedApproval
	}
	if a != nil && bound > 0 && now.Sub(a.Started) > bound {
		return Overdue
	}
	return Follow
}

// OverdueReason says why a step in flight past its bound failed.
func OverdueReason(step round.Step, node string, a *round.Attempt, now time.Time, bound time.Duration, seen string) string {
	since := "?"
	if a != nil {
		since = now.Sub(a.Started).Round(time.Second).String()
	}
	return fmt.Sprintf("%s on %s has been in flight for %s, longer than its bound of %s (%s): it counts as failed; a person checks the node",
		step, node, since, bound, seen)
}
