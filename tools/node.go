package tools

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// ---- inspect_node ----

// InspectOut is what inspect_node found.
type InspectOut struct {
	Result
	Inspection *steps.Inspection `json:"inspection,omitempty"`
}

// InspectNode is the inspect_node tool.
func InspectNode() Tool { return inspectNode(false) }

// RecordInspection is the record_inspection tool: inspect_node, recorded in the round.
func RecordInspection() Tool { return inspectNode(true) }

func inspectNode(record bool) Tool {
	return New[NodeIn, InspectOut](checkSpec(record, "record_inspection", Spec{
		Name:  "inspect_node",
		Title: "Inspect a node",
		Description: "Read a node over SSH (inspect.sh): running and installed kernels, boot_id, uptime, apt holds, pending upgrades, " +
			"GRUB entries (full ids with submenu path) and grubenv, kernel.panic, what /boot/grub sits on (mdraid/LVM/btrfs/zfs make " +
			"one-shot boot unreliable), Livepatch, unattended-upgrades exclusions, reboot-required, NVIDIA driver and whether NVIDIA " +
			"modules exist for the target kernel. Changes nothing on the node.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in NodeIn, p Progress) (InspectOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return InspectOut{}, err
		}
		s := d.maybeSession()
		rec := recording(s, record)
		if err := rec.admit(d, round.StepInspect, in.Node); err != nil {
			return InspectOut{}, err
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return InspectOut{}, err
		}
		var target string
		if np, ok := s.nodePlan(d, in.Node); ok {
			target = np.TargetKernel
		}
		insp, err := h.Steps.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: target})
		if err != nil {
			return InspectOut{}, rec.hostFailure(round.StepInspect, in.Node, hostError(in.Node, "inspect", err))
		}
		var reasons []string
		if !insp.Grub.EnvWritableAtBoot {
			reasons = append(reasons, "grubenv is not writable at boot here ("+strings.Join(insp.Grub.Reasons, "; ")+"): a one-shot trial boot is unreliable")
		}
		if insp.KernelPanic <= 0 {
			reasons = append(reasons, "kernel.panic is 0: a panicking kernel would hang instead of falling back")
		}
		if target != "" && !insp.TargetModules.Present && len(insp.NvidiaPackages) > 0 {
			reasons = append(reasons, "no NVIDIA kernel modules for the target kernel "+target)
		}
		for _, b := range insp.Pending.Blockers {
			reasons = append(reasons, "the pending upgrade would stop the round: "+b)
		}
		if insp.PendingError != "" {
			reasons = append(reasons, "the pending upgrade could not be simulated: "+insp.PendingError)
		}
		if err := rec.check(round.StepInspect, in.Node, true, insp.Kernel, strings.Join(reasons, "; ")); err != nil {
			return InspectOut{}, err
		}
		next, call := "Run simulate_upgrade on this node next.", CallTo("simulate_upgrade", "node", in.Node)
		if len(reasons) > 0 {
			next, call = "Read the reasons: each is something the window would trip over. Tell a person; fix or flag it (record_lesson open_question) before the window.", nil
		}
		return InspectOut{Inspection: &insp, Result: Result{Reasons: reasons, NextAction: next, NextCall: call}}, nil
	})
}

// ---- simulate_upgrade ----

// SimulateOut is the package plan.
type SimulateOut struct {
	Result
	Simulation *steps.Simulation `json:"simulation,omitempty"`
}

// SimulateUpgrade is the simulate_upgrade tool.
func SimulateUpgrade() Tool { return simulateUpgrade(false) }

// RecordSimulation is the record_simulation tool: simulate_upgrade, recorded in the round (the package plan install_updates binds).
func RecordSimulation() Tool { return simulateUpgrade(true) }

func simulateUpgrade(record bool) Tool {
	return New[NodeIn, SimulateOut](checkSpec(record, "record_simulation", Spec{
		Name:  "simulate_upgrade",
		Title: "Simulate the upgrade",
		Description: "Check the holds on containerd, kubelet, kubeadm, kubectl and cri-tools and run `apt-get -s full-upgrade` on the node. " +
			"Returns the package plan with its digest (what a person approves for install_updates), the target kernel and the kernel, " +
			"NVIDIA and Kubernetes packages that move. Any removal, a missing hold or a held package that would move fails the check " +
			"and stops the round. Changes nothing on the node.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in NodeIn, p Progress) (SimulateOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return SimulateOut{}, err
		}
		s := d.maybeSession()
		rec := recording(s, record)
		if err := rec.admit(d, round.StepSimulate, in.Node); err != nil {
			return SimulateOut{}, err
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return SimulateOut{}, err
		}
		sim, err := h.Steps.Simulate(ctx, in.Node)
		if err != nil {
			return SimulateOut{}, rec.hostFailure(round.StepSimulate, in.Node, hostError(in.Node, "simulate upgrade", err))
		}
		kern, _ := h.Steps.Kernel(ctx, in.Node)
		var problems []string
		problems = append(problems, sim.Plan.Blockers...)
		for _, u := range sim.Unheld {
			problems = append(problems, "package "+u+" is installed but not held (apt-mark hold "+u+")")
		}
		out := SimulateOut{Simulation: &sim}
		detail := fmt.Sprintf("plan %s: %d packages, target kernel %q", sim.Plan.Digest, len(sim.Plan.Packages), sim.Plan.TargetKernel)
		if len(sim.Plan.Phased) > 0 {
			detail += "; kept back by phasing (not a removal, a later round gets them): " + strings.Join(sim.Plan.Phased, ", ")
		}
		if len(problems) > 0 {
			if err := rec.check(round.StepSimulate, in.Node, false, kern.Kernel, strings.Join(problems, "; ")); err != nil {
				return out, err
			}
			out.Result = Result{Status: StatusFailed, Reasons: problems,
				NextAction: "Stop: the round cannot go on with this plan. Tell a person; they fix the host (holds, conflicting packages) and sign a resume or abort."}
			return out, nil
		}
		if rec != nil {
			np, _ := s.nodePlan(d, in.Node)
			np.Node, np.TargetKernel, np.RunningKernel = in.Node, sim.Plan.TargetKernel, kern.Kernel
			np.PackageDigest, np.PackageLines, np.Kernel, np.Nvidia = sim.Plan.Digest, sim.Plan.Lines, sim.Plan.Kernel, sim.Plan.Nvidia
			if err := rec.saveNodePlan(d, np); err != nil {
				return out, fmt.Errorf("record the node plan: %w", err)
			}
		}
		if err := rec.check(round.StepSimulate, in.Node, true, kern.Kernel, detail); err != nil {
			return out, err
		}
		out.Reasons = []string{detail}
		out.NextAction = "download_updates, then snapshot_node, then drain_node on this node when its turn comes."
		if sim.Plan.TargetKernel == "" {
			out.Reasons = append(out.Reasons, "no new kernel in this plan: the trial boot will reboot into the running kernel's successor only if one is installed")
		}
		return out, nil
	})
}

// ---- download_updates ----

// DownloadOut is what was fetched.
type DownloadOut struct {
	Result
	Download *steps.DownloadResult `json:"download,omitempty"`
}

// DownloadUpdates is the download_updates tool.
func DownloadUpdates() Tool {
	return New[NodeIn, DownloadOut](Spec{
		Name:  "download_updates",
		Title: "Download the updates",
		Description: "Run `apt-get -d full-upgrade` on the node: fetch the packages into apt's cache while the workloads still run, " +
			"so the window itself is short. Installs nothing.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (DownloadOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return DownloadOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return DownloadOut{}, err
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return DownloadOut{}, err
		}
		if err := s.begin(round.StepDownload, in.Node, ""); err != nil {
			return DownloadOut{}, err
		}
		dl, err := h.Steps.Download(ctx, in.Node)
		if err != nil {
			return DownloadOut{Download: &dl}, errors.Join(hostError(in.Node, "download updates", err), s.fail(round.StepDownload, in.Node, err.Error()))
		}
		if err := s.finish(round.StepDownload, in.Node, "", ""); err != nil {
			return DownloadOut{}, err
		}
		return DownloadOut{Download: &dl, Result: Result{NextAction: "snapshot_node on this node next."}}, nil
	})
}

// ---- snapshot_node ----

// SnapshotOut lists the backup.
type SnapshotOut struct {
	Result
	Snapshot *steps.SnapshotResult `json:"snapshot,omitempty"`
}

// SnapshotNode is the snapshot_node tool.
func SnapshotNode() Tool {
	return New[NodeIn, SnapshotOut](Spec{
		Name:  "snapshot_node",
		Title: "Snapshot a node",
		Description: "Back up what install could break, on the node under a per-round backup directory with sha256 recorded: " +
			"an etcd snapshot on control-plane nodes (with kubeadm's certs), a tar of /etc/kubernetes and of host configuration " +
			"(netplan, GRUB defaults, sysctl.d, modprobe.d, apt sources and preferences). Required before install_updates.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (SnapshotOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return SnapshotOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return SnapshotOut{}, err
		}
		n := s.j.State().Node(in.Node)
		if n == nil {
			return SnapshotOut{}, Refuse("Use a node from the round's order.", in.Node+" is not in this round's order")
		}
		role := steps.RoleWorker
		if n.Role == round.RoleControlPlane {
			role = steps.RoleControlPlane
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return SnapshotOut{}, err
		}
		if err := s.begin(round.StepSnapshot, in.Node, ""); err != nil {
			return SnapshotOut{}, err
		}
		snap, err := h.Steps.Snapshot(ctx, in.Node, s.id, role, "")
		if err != nil {
			return SnapshotOut{Snapshot: &snap}, errors.Join(hostError(in.Node, "snapshot", err), s.fail(round.StepSnapshot, in.Node, err.Error()))
		}
		if err := s.finish(round.StepSnapshot, in.Node, "", fmt.Sprintf("%d files in %s", len(snap.Files), snap.Dir)); err != nil {
			return SnapshotOut{}, err
		}
		return SnapshotOut{Snapshot: &snap, Result: Result{
			Reasons:    []string{fmt.Sprintf("%d files in %s (etcd: %s)", len(snap.Files), snap.Dir, snap.EtcdMethod)},
			NextAction: "When check_gate of the previous node is green, drain_node this node."}}, nil
	})
}

// ---- verify_node ----

// VerifyOut is the node's health after its trial boot.
type VerifyOut struct {
	Result
	Verification *steps.NodeVerification `json:"verification,omitempty"`
}

// VerifyNode is the verify_node tool.
func VerifyNode() Tool { return verifyNode(false) }

// RecordVerification is the record_verification tool: verify_node, recorded in the round.
func RecordVerification() Tool { return verifyNode(true) }

func verifyNode(record bool) Tool {
	return New[NodeIn, VerifyOut](checkSpec(record, "record_verification", Spec{
		Name:  "verify_node",
		Title: "Verify a node",
		Description: "Check a node after its trial boot: the kernel is the target, every bond is up with all its slaves, the RDMA " +
			"ports are ACTIVE/LinkUp and as many as the intent says, the sysctls equal the intent's values; identity lookups " +
			"(getent) are reported separately. Changes nothing on the node.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in NodeIn, p Progress) (VerifyOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return VerifyOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return VerifyOut{}, err
		}
		rec := recording(s, record)
		if err := rec.admit(d, round.StepVerify, in.Node); err != nil {
			return VerifyOut{}, err
		}
		np, ok := s.nodePlan(d, in.Node)
		if !ok || np.TargetKernel == "" {
			return VerifyOut{}, Refuse("Run simulate_upgrade on the node first: it names the target kernel.", "no target kernel is recorded for "+in.Node)
		}
		n := s.j.State().Node(in.Node)
		vin := steps.VerifyInput{TargetKernel: np.TargetKernel}
		if ns := s.settings.Node; ns != nil {
			vin.ExpectedSysctls = ns.Sysctls
			for b := range ns.Bonds {
				vin.ExpectedBonds = append(vin.ExpectedBonds, b)
			}
			sort.Strings(vin.ExpectedBonds)
		}
		if g := s.settings.GPU; g != nil && n != nil && n.GPU {
			vin.ExpectedRDMAPorts = g.RDMADevices
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return VerifyOut{}, err
		}
		v, err := h.Steps.Verify(ctx, in.Node, vin)
		if err != nil {
			return VerifyOut{Verification: &v}, rec.hostFailure(round.StepVerify, in.Node, hostError(in.Node, "verify", err))
		}
		out := VerifyOut{Verification: &v}
		if !v.Passed {
			if err := rec.check(round.StepVerify, in.Node, false, v.Kernel, strings.Join(v.Problems, "; ")); err != nil {
				return out, err
			}
			out.Result = Result{Status: StatusFailed, Reasons: v.Problems,
				NextAction: "Stop: the node is not healthy on the new kernel. Tell a person; the old kernel is still the default, so a reboot returns to it. They sign resume or abort."}
			return out, nil
		}
		if err := rec.check(round.StepVerify, in.Node, true, v.Kernel, "verify green on "+v.Kernel); err != nil {
			return out, err
		}
		out.Reasons = append([]string{"kernel " + v.Kernel + ", bonds, RDMA and sysctls as the intent says"}, v.IdentityProblems...)
		out.NextAction = "uncordon_node this node next."
		return out, nil
	})
}

// ---- fleet_check ----

// FleetNode is one node's kernel.
type FleetNode struct {
	Node   string `json:"node"`
	Kernel string `json:"kernel,omitempty"`
	Target string `json:"target,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

// FleetCheckOut is the fleet-wide kernel check.
type FleetCheckOut struct {
	Result
	Nodes []FleetNode `json:"nodes"`
}

// fleetPhase refuses the fleet check before its phase: every window of
// the round must be closed. "Not yet" is a refusal, never a failure.
func fleetPhase(s *session) error {
	st := s.j.State()
	if st.Plan == nil {
		return Refuse("Plan the round first (plan_round).", "not yet: the round has no order")
	}
	var open []string
	for _, n := range st.Nodes {
		if n.Window != round.WindowClosed {
			open = append(open, fmt.Sprintf("%s (%s)", n.Node, n.Window))
		}
	}
	if len(open) > 0 {
		return Refuse("Not yet: finish every node's window first (round_status names the next step).",
			"not yet: the fleet check runs after every window closed; not closed: "+strings.Join(open, ", "), "nothing was checked or recorded")
	}
	return nil
}

// fleetKernels reads every node's running kernel and compares it with the
// kernel the round installed there. It writes nothing.
func fleetKernels(ctx context.Context, d *Deps, s *session, p Progress) (FleetCheckOut, []string, error) {
	h, err := d.hosts(ctx)
	if err != nil {
		return FleetCheckOut{}, nil, err
	}
	plans := s.nodePlans(d)
	nodes := roundNodes(s)
	var done atomic.Int64
	results := host.FanOut(ctx, nodes, d.Config.SSH.Concurrency, func(ctx context.Context, node string) (steps.KernelInfo, error) {
		k, err := h.Steps.Kernel(ctx, node)
		p(float64(done.Add(1)), float64(len(nodes)), node)
		return k, err
	})
	out := FleetCheckOut{Nodes: []FleetNode{}}
	var bad []string
	for _, r := range results {
		fn := FleetNode{Node: r.Node, Target: plans[r.Node].TargetKernel}
		if r.Err != nil {
			fn.Error = r.Err.Error()
			bad = append(bad, fmt.Sprintf("%s: not reachable (%v)", r.Node, r.Err))
		} else {
			fn.Kernel = r.Value.Kernel
			fn.OK = fn.Target == "" || fn.Kernel == fn.Target
			if !fn.OK {
				bad = append(bad, fmt.Sprintf("%s runs %s, the round installed %s", r.Node, fn.Kernel, fn.Target))
			}
		}
		out.Nodes = append(out.Nodes, fn)
	}
	return out, bad, nil
}

// FleetCheck is the fleet_check tool.
func FleetCheck() Tool {
	return New[struct{}, FleetCheckOut](Spec{
		Name:  "fleet_check",
		Title: "Fleet kernel check",
		Description: "After every window closed: read the running kernel of every node of the round over SSH (bounded fan-out) " +
			"and compare it with the kernel the round installed there; a node left behind is named. Writes nothing and stops " +
			"nothing (record_fleet_check records it). Before its phase it answers not yet.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (FleetCheckOut, error) {
		s, err := d.openSession()
		if err != nil {
			return FleetCheckOut{}, err
		}
		if err := fleetPhase(s); err != nil {
			return FleetCheckOut{}, err
		}
		out, bad, err := fleetKernels(ctx, d, s, p)
		if err != nil {
			return out, err
		}
		if len(bad) > 0 {
			out.Result = Result{Status: StatusFailed, Reasons: bad, NextAction: "The fleet is not consistent: tell a person (nothing was recorded)."}
			return out, nil
		}
		out.Reasons = []string{fmt.Sprintf("all %d nodes run the round's kernels", len(out.Nodes))}
		out.NextAction = "record_fleet_check records it and starts the soak."
		return out, nil
	})
}

// RecordFleetCheck is the record_fleet_check tool.
func RecordFleetCheck() Tool {
	return New[struct{}, FleetCheckOut](Spec{
		Name:  "record_fleet_check",
		Title: "Record the fleet kernel check",
		Description: "The fleet kernel check (as fleet_check), recorded in the round: green closes the windows phase and starts " +
			"the soak; a node left behind fails the check, which stops the round. Before its phase it answers not yet and records nothing.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (FleetCheckOut, error) {
		s, err := d.openSession()
		if err != nil {
			return FleetCheckOut{}, err
		}
		if err := fleetPhase(s); err != nil {
			return FleetCheckOut{}, err
		}
		if err := s.admit(d, round.StepFleetCheck, ""); err != nil {
			return FleetCheckOut{}, err
		}
		out, bad, err := fleetKernels(ctx, d, s, p)
		if err != nil {
			return out, err
		}
		if err := s.check(round.StepFleetCheck, "", len(bad) == 0, "", strings.Join(bad, "; ")); err != nil {
			return out, err
		}
		if len(bad) > 0 {
			out.Result = Result{Status: StatusFailed, Reasons: bad,
				NextAction: "Stop: the fleet is not consistent. Tell a person; they decide (resume after fixing, or abort)."}
			return out, nil
		}
		out.Reasons = []string{fmt.Sprintf("all %d nodes run the round's kernels", len(out.Nodes))}
		out.NextAction = "Call round_status: it says what remains before close."
		st := s.j.State()
		if st.Admit(round.StepSoak, "", d.now()) == nil && st.SoakStarted.IsZero() {
			if err := s.start(round.StepSoak, "", ""); err != nil {
				return out, err
			}
			out.Reasons = append(out.Reasons, fmt.Sprintf("the soak of %s starts now", time.Duration(st.Plan.Soak)))
			out.NextAction = "Wait for the soak to end (round_status says when), then autoremove."
		}
		return out, nil
	})
}

// recording is the round a check records into: the open round for the
// recording twin, none for the read-only tool (which writes nothing).
func recording(s *session, record bool) *session {
	if !record {
		return nil
	}
	return s
}

// checkSpec is a check's spec as the read-only tool or as its recording
// twin, which is a write and says so.
func checkSpec(record bool, recordName string, spec Spec) Spec {
	if !record {
		spec.Kind = ReadOnly
		spec.Description += " Writes nothing anywhere and stops nothing; " + recordName + " records it in the round."
		return spec
	}
	readName := spec.Name
	spec.Name, spec.Kind = recordName, Write
	spec.Title = "Record: " + strings.ToLower(spec.Title[:1]) + spec.Title[1:]
	spec.Description = "As " + readName + ", and recorded in the open round's journal (a write): green counts for the round's standing rules, red fails the step and stops the round. " + spec.Description
	return spec
}
