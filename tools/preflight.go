package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// The reviewed plan's files in rounds/<id>/.
const (
	fleetPlanFile   = "plan.json"
	fleetPlanMD     = "plan.md"
	planSignedFile  = "plan-signatures.json"
	kubeConcurrency = 8
)

// PreflightSteps is the host step the preflight reads a node with: the
// simulated upgrade and the survey for its target kernel, in one session.
type PreflightSteps interface {
	Preflight(ctx context.Context, node string) (steps.Simulation, steps.Inspection, error)
}

var _ PreflightSteps = (*steps.Steps)(nil)

// PreflightHosts reads every node for the plan with bounded concurrency
// over the SSH pool; done is told after each node. A node that cannot be
// read has its reason in Facts.Err (a blocker, not a skip).
func PreflightHosts(ctx context.Context, st PreflightSteps, nodes []string, concurrency int, done func(node string, f plan.Facts)) map[string]plan.Facts {
	res := host.FanOut(ctx, nodes, concurrency, func(ctx context.Context, node string) (plan.Facts, error) {
		f := preflightFacts(ctx, st, node)
		done(node, f)
		return f, nil
	})
	out := make(map[string]plan.Facts, len(res))
	for _, r := range res {
		out[r.Node] = r.Value
		if r.Err != nil {
			out[r.Node] = unreadFacts(r.Err)
		}
	}
	return out
}

// preflightFacts reads one node for the plan in one SSH session: the
// simulated upgrade and the inspection for its target kernel (NVIDIA
// modules, GRUB entries, /boot, Livepatch, unattended-upgrades). It changes
// nothing.
func preflightFacts(ctx context.Context, st PreflightSteps, node string) plan.Facts {
	sim, insp, err := st.Preflight(ctx, node)
	if errors.Is(err, steps.ErrRefused) {
		return plan.Facts{SimulateRefused: oneLine(err.Error())}
	}
	if err != nil {
		return unreadFacts(err)
	}
	return factsOf(sim, insp)
}

func unreadFacts(err error) plan.Facts {
	var hk *host.HostKeyError
	return plan.Facts{Err: oneLine(err.Error()), HostKeyChanged: errors.As(err, &hk)}
}

var nvidiaBranchRE = regexp.MustCompile(`^(?:linux-modules-nvidia-|nvidia-driver-|nvidia-dkms-)([0-9]+(?:-server|-open)?)`)

// factsOf maps what the host steps found into the plan's facts.
func factsOf(sim steps.Simulation, insp steps.Inspection) plan.Facts {
	f := plan.Facts{
		Running: insp.Kernel, PackageDigest: sim.Plan.Digest, PackageLines: sim.Plan.Lines, Target: sim.Plan.TargetKernel,
		Removals: sim.Plan.Removals, Unheld: sim.Unheld,
		GrubenvWritable: insp.Grub.EnvWritableAtBoot, GrubReasons: insp.Grub.Reasons, KernelPanic: insp.KernelPanic,
		NvidiaInstalled: len(insp.NvidiaPackages) > 0, TargetModules: insp.TargetModules.Present,
		BootFreeBytes:    -1,
		LivepatchEnabled: insp.Livepatch.Present && insp.Livepatch.Status.PatchState != "",
		LivepatchState:   insp.Livepatch.Status.PatchState,
		UnattendedKernel: len(insp.UnattendedBlacklist) > 0 && !insp.BlacklistKernel,
		UnattendedNvidia: len(insp.UnattendedBlacklist) > 0 && len(insp.NvidiaPackages) > 0 && !insp.BlacklistNvidia,
	}
	if sim.Boot.FreeKB != nil {
		f.BootFreeBytes = *sim.Boot.FreeKB << 10
	}
	f.BootNeedBytes = sim.Boot.NeedKB << 10
	// The plan names a short /boot itself, with its figures, when it can
	// (a target kernel to boot, both figures known); else the host's own
	// reason stays a blocker. Either way a short /boot is never dropped.
	planNamesBoot := f.Target != "" && f.Target != f.Running && f.BootFreeBytes >= 0 && f.BootNeedBytes > f.BootFreeBytes
	for _, b := range sim.Plan.Blockers {
		if !sim.Boot.Short || !planNamesBoot || b != sim.Boot.ShortReason() {
			f.AptBlockers = append(f.AptBlockers, b)
		}
	}
	for _, p := range sim.Plan.Packages {
		f.Packages = append(f.Packages, plan.Package{Name: p.Name, Action: p.Action, OldVersion: p.OldVersion, NewVersion: p.NewVersion, Class: p.Class})
	}
	for _, e := range insp.Grub.Entries {
		f.Entries = append(f.Entries, plan.Entry{ID: e.ID, Kernel: e.Kernel, Recovery: e.Recovery})
	}
	for _, p := range insp.NvidiaPackages {
		if strings.HasPrefix(p.Name, "nvidia-dkms-") && p.Installed {
			f.NvidiaDKMS = true
		}
		if m := nvidiaBranchRE.FindStringSubmatch(p.Name); m != nil && f.NvidiaBranch == "" {
			f.NvidiaBranch = m[1]
		}
	}
	return f
}

// drainFacts previews the node's drain and asks the API server, with a
// dry-run eviction of each pod, whether it would be admitted.
func drainFacts(ctx context.Context, kc *kube.Clients, node string, pol drain.Policy, jobs labels.Selector, jobWait time.Duration) (plan.DrainFacts, []drain.PodRef) {
	pv, err := drain.Preview(ctx, kc.Kube, node, pol)
	if err != nil {
		return plan.DrainFacts{Err: oneLine(err.Error())}, nil
	}
	df := plan.DrainFacts{Blockers: pv.Blockers, Warnings: pv.Warnings, JobWaitMinutes: int(jobWait / time.Minute)}
	holding, err := drain.HoldingPods(ctx, kc.Kube, node, jobs)
	if err != nil {
		return plan.DrainFacts{Err: oneLine(err.Error())}, nil
	}
	for _, p := range holding {
		df.WaitsFor = append(df.WaitsFor, p.String())
	}
	checks, err := drain.CheckEvictions(ctx, kc.Kube, pv)
	if err != nil {
		return plan.DrainFacts{Err: oneLine(err.Error())}, nil
	}
	for _, c := range checks {
		df.Pods = append(df.Pods, plan.Pod{Namespace: c.Namespace, Name: c.Name, OwnerKind: c.OwnerKind, OwnerName: c.OwnerName,
			EmptyDir: c.EmptyDir, Refused: oneLine(c.Refused), NeverPDB: c.Never, Switchover: c.Switchover})
	}
	return df, pv.Evict
}

func drainPolicyOf(st intent.Settings) drain.Policy {
	pol := drain.Policy{}
	if ds := st.Drain; ds != nil && ds.EmptyDirPolicy == intent.EmptyDirDelete {
		pol.DeleteEmptyDirData = true
	}
	return pol
}

// preflightInput is what the fleet-wide preflight reads before it builds
// the plan.
type preflightInput struct {
	round     string
	order     round.Order
	inv       kube.Inventory
	placement kube.Placement
	settings  intent.Settings
	revision  int
}

// preflight reads every node of the order (bounded fan-out over the SSH
// pool, progress per node) and every node's drain preview, and builds the
// reviewed plan. It changes nothing on hosts or cluster.
func (d *Deps) preflight(ctx context.Context, kc *kube.Clients, in preflightInput, p Progress) (plan.Fleet, error) {
	h, err := d.hosts(ctx)
	if err != nil {
		return plan.Fleet{}, err
	}
	nodes := make([]string, 0, len(in.order.Positions))
	for _, pos := range in.order.Positions {
		nodes = append(nodes, pos.Node)
	}
	total := float64(2 * len(nodes))
	var done atomic.Int64
	hostFacts := PreflightHosts(ctx, h.Steps, nodes, d.Config.SSH.Concurrency, func(node string, f plan.Facts) {
		p(float64(done.Add(1)), total, "preflight "+node+": "+orDash(f.Err))
	})
	pol := drainPolicyOf(in.settings)
	jobs, jobWait, err := jobWaitOf(in.settings)
	if err != nil {
		return plan.Fleet{}, err
	}
	type drained struct {
		facts plan.DrainFacts
		pods  []drain.PodRef
	}
	kubeRes := host.FanOut(ctx, nodes, kubeConcurrency, func(ctx context.Context, node string) (drained, error) {
		df, pods := drainFacts(ctx, kc, node, pol, jobs, jobWait)
		p(float64(done.Add(1)), total, "drain preview "+node)
		return drained{df, pods}, nil
	})
	if err := ctx.Err(); err != nil {
		return plan.Fleet{}, fmt.Errorf("preflight: %w", err)
	}
	facts := map[string]plan.Facts{}
	evicted := map[string][]drain.PodRef{}
	for _, r := range kubeRes {
		f := hostFacts[r.Node]
		f.Drain = r.Value.facts
		facts[r.Node] = f
		evicted[r.Node] = r.Value.pods
	}
	return plan.Build(plan.Input{Round: in.round, Order: positionsOf(in.order), Facts: facts, Revision: in.revision,
		Placement: placementOf(in.placement, in.inv, evicted, in.settings), Intent: d.planIntent(in.round, in.settings, facts),
		Risks: d.selectorRisks(ctx, kc, in.settings, jobs)}), nil
}

func positionsOf(o round.Order) []plan.Position {
	out := make([]plan.Position, 0, len(o.Positions))
	for _, p := range o.Positions {
		out = append(out, plan.Position{Node: p.Node, ControlPlane: p.Role == round.RoleControlPlane, GPU: p.GPU, Canary: p.Canary, Reason: p.Reason})
	}
	return out
}

// placementOf says what runs where: the Postgres primaries (placement) and
// replicas (CNPG pods the drains evict), the VIP, the webhook's replicas,
// GPU pods and allocations (inventory).
func placementOf(pl kube.Placement, inv kube.Inventory, evicted map[string][]drain.PodRef, st intent.Settings) plan.Placement {
	out := plan.Placement{PostgresPrimary: map[string][]string{}, PostgresReplica: map[string][]string{}, VIPNode: pl.VIP.Node,
		Webhook: map[string]int{}, Model: map[string]int{}, GPUsAllocated: map[string]int{}}
	primaries := map[string]bool{}
	for _, pg := range pl.Postgres {
		if pg.Node != "" {
			out.PostgresPrimary[pg.Node] = append(out.PostgresPrimary[pg.Node], pg.Namespace+"/"+pg.Cluster)
			primaries[pg.Namespace+"/"+pg.Pod] = true
		}
	}
	for node, pods := range evicted {
		for _, pod := range pods {
			switch {
			case pod.OwnerKind == "Cluster" && !primaries[pod.String()]:
				out.PostgresReplica[node] = append(out.PostgresReplica[node], pod.Namespace+"/"+pod.OwnerName)
			case st.Webhook != nil && pod.Namespace == st.Webhook.Namespace && pod.OwnerKind == "ReplicaSet" &&
				strings.HasPrefix(pod.OwnerName, st.Webhook.Deployment+"-"):
				out.Webhook[node]++
			}
		}
	}
	for _, n := range inv.Nodes {
		out.Model[n.Name] = n.RunningGPUPods
		out.GPUsAllocated[n.Name] = int(n.GPUsRequested)
	}
	return out
}

// planIntent is what the intent says that shapes the plan: approval
// sizing, the panic timeout, the driver branch, the test environment and
// the lessons and open questions that bear on this round.
func (d *Deps) planIntent(roundID string, st intent.Settings, facts map[string]plan.Facts) plan.Intent {
	it := plan.Intent{GPUApproval: plan.PerStep, PanicSeconds: 10} // trial_boot's default too
	if a := st.Approvals; a != nil && a.GPUServers == intent.ApprovalPerWindow {
		it.GPUApproval = plan.PerWindow
	}
	if k := st.Kernel; k != nil {
		it.TestEnvironment, it.TestedKernels = k.TestEnvironment, k.TestedKernels
		if k.PanicRebootSeconds > 0 {
			it.PanicSeconds = k.PanicRebootSeconds
		}
	}
	if g := st.GPU; g != nil {
		it.DriverBranch = g.DriverBranch
	}
	r, err := d.intentRepo(roundID)
	if err != nil {
		return it
	}
	var moving []string
	for _, f := range facts {
		for _, p := range f.Packages {
			moving = append(moving, p.Name)
		}
	}
	comps, err := r.Components()
	if err != nil {
		d.Log.Warn("intent components unreadable: the plan lists no lessons", "err", err)
		return it
	}
	for _, cs := range comps {
		c, err := r.Component(cs.Name)
		if err != nil {
			continue
		}
		it.Notes = append(it.Notes, notesOf(c, moving)...)
	}
	return it
}

// notesOf picks a component's lessons and open questions that bear on the
// round: every open question (the round must not work around them), the
// three newest lessons, and any lesson naming a package that moves now.
func notesOf(c *intent.Component, moving []string) []plan.Note {
	var out []plan.Note
	for _, q := range c.Intent.OpenQuestions {
		ref := q.ID
		if q.Property != "" {
			ref = strings.TrimSpace(ref + " against " + q.Property)
		}
		out = append(out, plan.Note{Component: c.Name, Kind: "open_question", Ref: ref, Text: q.Text})
	}
	for i, l := range c.Lessons {
		newest := i >= len(c.Lessons)-3
		names := slices.ContainsFunc(moving, func(p string) bool { return len(p) > 3 && strings.Contains(l.Text, p) })
		if !newest && !names {
			continue
		}
		ref := l.Heading
		out = append(out, plan.Note{Component: c.Name, Kind: "lesson", Ref: ref, Text: l.Text})
	}
	return out
}

// inventoryAndPlacement takes the inventory and finds the Postgres
// primaries, the VIP holder and the canary, as the intent names them.
func (d *Deps) inventoryAndPlacement(ctx context.Context, kc *kube.Clients, settings intent.Settings) (kube.Inventory, kube.Placement, error) {
	invOpts := kube.InventoryOptions{}
	if g := settings.GPU; g != nil && g.CanaryLabel != "" {
		invOpts.CanaryLabel = g.CanaryLabel
	}
	inv, err := kube.TakeInventory(ctx, kc.Kube, invOpts)
	if err != nil {
		return kube.Inventory{}, kube.Placement{}, Fail("Check the API server and call again.", "take inventory: "+err.Error())
	}
	popts := kube.PlacementOptions{}
	if cp := settings.ControlPlane; cp != nil {
		popts.VIPLeaseNamespace, popts.VIPLeaseName = cp.VIPLease.Namespace, cp.VIPLease.Name
	}
	if pg := settings.Postgres; pg != nil {
		popts.PostgresNamespaces = []string{pg.Namespace}
	}
	pl, err := kube.Locate(ctx, kc.Kube, kc.Dynamic, inv, popts)
	if err != nil {
		return kube.Inventory{}, kube.Placement{}, Fail("Check the API server and call again.", "locate the Postgres primary and the VIP: "+err.Error())
	}
	return inv, pl, nil
}

// orderInput is what round.PlanOrder orders: the inventory's nodes and
// where the Postgres primaries, the VIP and the canary are.
func orderInput(inv kube.Inventory, pl kube.Placement) ([]round.NodeInfo, round.Placement) {
	var nodes []round.NodeInfo
	for _, n := range inv.Nodes {
		nodes = append(nodes, round.NodeInfo{Name: n.Name, ControlPlane: n.ControlPlane, GPU: n.GPUServer, Canary: n.Canary,
			RunningGPUPods: n.RunningGPUPods, VM: n.Machine == "vm"})
	}
	rp := round.Placement{VIPNode: pl.VIP.Node, CanaryNode: pl.Canary.Node}
	for _, pg := range pl.Postgres {
		if pg.Node != "" {
			rp.PostgresPrimaryNodes = append(rp.PostgresPrimaryNodes, pg.Node)
		}
	}
	return nodes, rp
}

// writePlanDocument runs the fleet-wide preflight and writes plan.json and
// plan.md. An unchanged plan keeps its revision (and its signature); a
// changed one before any window opened becomes the next revision; once a
// window opened, the plan stays as it is (replan_node changes one node).
func (d *Deps) writePlanDocument(ctx context.Context, kc *kube.Clients, s *session, in preflightInput, p Progress) (plan.Fleet, error) {
	old, had, err := d.fleetPlan(in.round)
	if err != nil {
		d.Log.Warn("the old plan is unreadable: writing a new one", "round", in.round, "err", err)
		had = false
	}
	st := s.j.State()
	for _, n := range st.Nodes {
		if had && n.Window != round.WindowPending {
			return old, nil
		}
	}
	if had {
		in.revision = old.Revision
	}
	f, err := d.preflight(ctx, kc, in, p)
	if err != nil {
		return plan.Fleet{}, err
	}
	if had && f.Digest == old.Digest {
		return old, nil
	}
	if had {
		f.Revision = old.Revision + 1
	}
	if err := d.writeFleetPlan(in.round, f); err != nil {
		return plan.Fleet{}, err
	}
	return f, nil
}

// stopOnBlockers records each node's blockers as its failed preflight
// check (the round stops before anything is cordoned) and answers with
// every blocker, naming node and cause.
func (d *Deps) stopOnBlockers(s *session, f plan.Fleet, reasons []string) error {
	byNode := map[string][]plan.Blocker{}
	var nodes []string
	for _, b := range f.Blockers {
		if _, ok := byNode[b.Node]; !ok {
			nodes = append(nodes, b.Node)
		}
		byNode[b.Node] = append(byNode[b.Node], b)
	}
	var errs []error
	why := []string{fmt.Sprintf("the plan has %d blocker(s): nothing was cordoned, the round stops before its first window", len(f.Blockers))}
	for _, node := range nodes {
		bs := byNode[node]
		var causes []string
		for _, b := range bs {
			causes = append(causes, b.Cause)
			why = append(why, b.String())
		}
		step := round.StepInspect
		if bs[0].Check == plan.CheckSimulate {
			step = round.StepSimulate
		}
		if err := s.check(step, node, false, "", "plan blocker: "+strings.Join(causes, "; ")); err != nil {
			errs = append(errs, fmt.Errorf("record the blocker of %s: %w", node, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return Fail("Stop: a person fixes each blocker (read rounds/"+f.Round+"/plan.md), signs resume, then plan_round runs the preflight again.",
		append(why, reasons...)...)
}
