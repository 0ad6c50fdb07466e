// Package preflight is the fleet-wide preflight that plan_round and
// replan_node run: it reads every node of the round over the hosts it is
// handed (the simulated upgrade and the survey for the target kernel) and
// every node's drain over the cluster it is handed, maps what they found
// into the plan's facts and builds the reviewed plan (round/plan). It
// changes nothing on hosts or cluster, and writes no file: the caller
// keeps the plan.
package preflight

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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// Hosts reads one node for the plan: the simulated upgrade and the survey
// for its target kernel, in one session.
type Hosts interface {
	Preflight(ctx context.Context, node string) (steps.Simulation, steps.Inspection, error)
}

var _ Hosts = (*steps.Steps)(nil)

// Drains previews one node's drain for the plan: what it would evict and
// whether the API server would admit each eviction, and the pods it would
// evict (for the placement). A preview that fails has its reason in
// DrainFacts.Err (a blocker, not a skip).
type Drains interface {
	DrainFacts(ctx context.Context, node string) (plan.DrainFacts, []drain.PodRef)
}

// ClusterDrains is Drains over the API server: drain.Preview, the pods
// that hold the drain (Jobs) and a dry-run eviction of each pod.
type ClusterDrains struct {
	Client kubernetes.Interface
	// Policy is the drain's policy (DrainPolicy of the intent).
	Policy drain.Policy
	// Jobs selects the pods the drain waits for rather than evicts; nil
	// selects none.
	Jobs labels.Selector
	// JobWait is how long the drain waits for them; 0 is no wait.
	JobWait time.Duration
}

var _ Drains = ClusterDrains{}

// DrainFacts previews the node's drain and asks the API server, with a
// dry-run eviction of each pod, whether it would be admitted.
func (c ClusterDrains) DrainFacts(ctx context.Context, node string) (plan.DrainFacts, []drain.PodRef) {
	pv, err := drain.Preview(ctx, c.Client, node, c.Policy)
	if err != nil {
		return plan.DrainFacts{Err: oneLine(err.Error())}, nil
	}
	df := plan.DrainFacts{Blockers: pv.Blockers, Warnings: pv.Warnings, JobWaitMinutes: int(c.JobWait / time.Minute)}
	holding, err := drain.HoldingPods(ctx, c.Client, node, c.Jobs)
	if err != nil {
		return plan.DrainFacts{Err: oneLine(err.Error())}, nil
	}
	for _, p := range holding {
		df.WaitsFor = append(df.WaitsFor, p.String())
	}
	checks, err := drain.CheckEvictions(ctx, c.Client, pv)
	if err != nil {
		return plan.DrainFacts{Err: oneLine(err.Error())}, nil
	}
	for _, c := range checks {
		df.Pods = append(df.Pods, plan.Pod{Namespace: c.Namespace, Name: c.Name, OwnerKind: c.OwnerKind, OwnerName: c.OwnerName,
			EmptyDir: c.EmptyDir, Refused: oneLine(c.Refused), NeverPDB: c.Never, Switchover: c.Switchover})
	}
	return df, pv.Evict
}

// DrainPolicy is the drain's policy as the intent sets it.
func DrainPolicy(st intent.Settings) drain.Policy {
	pol := drain.Policy{}
	if ds := st.Drain; ds != nil && ds.EmptyDirPolicy == intent.EmptyDirDelete {
		pol.DeleteEmptyDirData = true
	}
	return pol
}

// ReadHosts reads every node for the plan with bounded concurrency; done
// is told after each node. A node that cannot be read has its reason in
// Facts.Err (a blocker, not a skip).
func ReadHosts(ctx context.Context, h Hosts, nodes []string, concurrency int, done func(node string, f plan.Facts)) map[string]plan.Facts {
	res := host.FanOut(ctx, nodes, concurrency, func(ctx context.Context, node string) (plan.Facts, error) {
		f := ReadNode(ctx, h, node)
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

// ReadNode reads one node for the plan in one SSH session: the simulated
// upgrade and the inspection for its target kernel (NVIDIA modules, GRUB
// entries, /boot, Livepatch, unattended-upgrades). It changes nothing.
func ReadNode(ctx context.Context, h Hosts, node string) plan.Facts {
	sim, insp, err := h.Preflight(ctx, node)
	if errors.Is(err, steps.ErrRefused) {
		return plan.Facts{SimulateRefused: oneLine(err.Error())}
	}
	if err != nil {
		return unreadFacts(err)
	}
	return FactsOf(sim, insp)
}

func unreadFacts(err error) plan.Facts {
	var hk *host.HostKeyError
	return plan.Facts{Err: oneLine(err.Error()), HostKeyChanged: errors.As(err, &hk)}
}

var nvidiaBranchRE = regexp.MustCompile(`^(?:linux-modules-nvidia-|nvidia-driver-|nvidia-dkms-)([0-9]+(?:-server|-open)?)`)

// FactsOf maps what the host steps found into the plan's facts. Pure.
func FactsOf(sim steps.Simulation, insp steps.Inspection) plan.Facts {
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

// Input is what the fleet-wide preflight reads before it builds the plan.
type Input struct {
	Round     string
	Order     round.Order
	Inventory kube.Inventory
	Placement kube.Placement
	Settings  intent.Settings
	// Revision is the plan's revision to build.
	Revision int
	// Components are the intent's components whose lessons and open
	// questions bear on the plan (NotesOf); nil lists none.
	Components []*intent.Component
	// Risks are the plan's fleet-wide risks (selectors of the intent that
	// pick nothing).
	Risks []string
	// HostConcurrency and DrainConcurrency bound the fan-out over the
	// hosts and over the API server; below 1 is 1.
	HostConcurrency, DrainConcurrency int
	// DriverContainer names the GPU servers whose driver is the GPU
	// Operator's driver container (the intent's gpu.driver_container
	// selects them); DriverImage answers, per target kernel, whether its
	// precompiled image exists (nil where the driver is built at boot).
	DriverContainer map[string]bool
	DriverImage     func(ctx context.Context, kernel string) driverimage.Result
	// Others says who else maintains a node now (kube/actors' Watch); nil
	// looks for nobody. It reads only.
	Others Others
	// Promotion is the promotion gate of a round whose environment has an
	// upstream one; nil: none.
	Promotion *promotion.Gate
}

// Others is who else maintains a node (round/window's Others).
type Others interface {
	Holders(ctx context.Context, node string) ([]actors.Holder, error)
}

// OthersFacts are the holders of node as the plan words them; an error
// is the plan's information too, never a blocker: the round looks again
// before each cordon. Pure.
func OthersFacts(hs []actors.Holder, err error) ([]plan.OtherHolder, string) {
	if err != nil {
		return nil, oneLine(err.Error())
	}
	out := make([]plan.OtherHolder, 0, len(hs))
	for _, h := range hs {
		out = append(out, plan.OtherHolder{Actor: string(h.Actor), Who: h.Who, What: h.What, Stop: h.Verdict == actors.Stop})
	}
	return out, ""
}

// Progress is told after each node read and each drain previewed.
type Progress func(done, total float64, message string)

// Run reads every node of the order over hosts (bounded fan-out, progress
// per node) and every node's drain preview over drains, and builds the
// reviewed plan. It changes nothing on hosts or cluster.
func Run(ctx context.Context, in Input, hosts Hosts, drains Drains, p Progress) (plan.Fleet, error) {
	nodes := make([]string, 0, len(in.Order.Positions))
	for _, pos := range in.Order.Positions {
		nodes = append(nodes, pos.Node)
	}
	total := float64(2 * len(nodes))
	var done atomic.Int64
	hostFacts := ReadHosts(ctx, hosts, nodes, in.HostConcurrency, func(node string, f plan.Facts) {
		p(float64(done.Add(1)), total, "preflight "+node+": "+orDash(f.Err))
	})
	type drained struct {
		facts     plan.DrainFacts
		pods      []drain.PodRef
		others    []plan.OtherHolder
		othersErr string
	}
	kubeRes := host.FanOut(ctx, nodes, in.DrainConcurrency, func(ctx context.Context, node string) (drained, error) {
		df, pods := drains.DrainFacts(ctx, node)
		d := drained{facts: df, pods: pods}
		if in.Others != nil {
			d.others, d.othersErr = OthersFacts(in.Others.Holders(ctx, node))
		}
		p(float64(done.Add(1)), total, "drain preview "+node)
		return d, nil
	})
	if err := ctx.Err(); err != nil {
		return plan.Fleet{}, fmt.Errorf("preflight: %w", err)
	}
	facts := map[string]plan.Facts{}
	evicted := map[string][]drain.PodRef{}
	images := map[string]driverimage.Result{}
	for _, r := range kubeRes {
		f := hostFacts[r.Node]
		f.Drain = r.Value.facts
		f.Others, f.OthersErr = r.Value.others, r.Value.othersErr
		if in.DriverContainer[r.Node] && f.Target != "" {
			f.DriverContainer = &plan.DriverContainerFacts{Precompiled: in.DriverImage != nil}
			if in.DriverImage != nil {
				res, ok := images[f.Target]
				if !ok {
					res = in.DriverImage(ctx, f.Target)
					images[f.Target] = res
				}
				f.DriverContainer.Image, f.DriverContainer.ImageVerdict, f.DriverContainer.ImageReason = res.Ref, string(res.Verdict), res.Reason
			}
		}
		facts[r.Node] = f
		evicted[r.Node] = r.Value.pods
	}
	return plan.Build(plan.Input{Round: in.Round, Order: Positions(in.Order), Facts: facts, Revision: in.Revision,
		Placement: PlacementOf(in.Placement, in.Inventory, evicted, in.Settings), Intent: CarryLessons(WithPromotion(IntentOf(in.Settings, in.Components, facts), in.Promotion, facts), in.Promotion, in.Components),
		Risks: in.Risks}), nil
}

// WithPromotion adds the promotion gate's verdict on every target kernel
// of facts to it (gate nil: it unchanged). The gate supersedes the
// intent's hand-kept kernel.test_environment and tested_kernels, which
// the plan then leaves out. Pure.
func WithPromotion(it plan.Intent, gate *promotion.Gate, facts map[string]plan.Facts) plan.Intent {
	if gate == nil {
		return it
	}
	it.TestEnvironment, it.TestedKernels = "", nil
	p := &plan.Promotion{Environment: gate.Environment, Upstream: gate.Upstream, Verdicts: map[string]promotion.Verdict{}}
	for _, f := range facts {
		if f.Target != "" && f.Target != f.Running {
			nv := plan.NvidiaMoves(f.Packages)
			if k := promotion.Key(f.Target, nv); !hasVerdict(p, k) {
				p.Verdicts[k] = gate.JudgeWith(f.Target, nv)
			}
		}
	}
	it.Promotion = p
	return it
}

func hasVerdict(p *plan.Promotion, key string) bool { _, ok := p.Verdicts[key]; return ok }

// CarryLessons marks or adds the lessons written upstream (gate nil: it
// unchanged): every lesson of an upstream round whose outcome record the
// gate verified, and of the newest upstream round that wrote any, each
// with its source environment and round. Pure.
func CarryLessons(it plan.Intent, gate *promotion.Gate, comps []*intent.Component) plan.Intent {
	if gate == nil || gate.Upstream == "" {
		return it
	}
	prefix := gate.Upstream + "-"
	carried := map[string]bool{}
	for _, p := range gate.Proofs {
		carried[p.Outcome.Round] = true
	}
	newest := ""
	for _, c := range comps {
		for _, l := range c.Lessons {
			if strings.HasPrefix(l.Round, prefix) && l.Round > newest {
				newest = l.Round
			}
		}
	}
	if newest != "" {
		carried[newest] = true
	}
	notes := slices.Clone(it.Notes)
	for _, c := range comps {
		for _, l := range c.Lessons {
			if !strings.HasPrefix(l.Round, prefix) || !carried[l.Round] {
				continue
			}
			source := gate.Upstream + ", round " + l.Round
			i := slices.IndexFunc(notes, func(n plan.Note) bool { return n.Component == c.Name && n.Kind == "lesson" && n.Ref == l.Heading })
			if i >= 0 {
				notes[i].Source = source
				continue
			}
			notes = append(notes, plan.Note{Component: c.Name, Kind: "lesson", Ref: l.Heading, Text: l.Text, Source: source})
		}
	}
	it.Notes = notes
	return it
}

// Positions is the round's order as the plan lists it.
func Positions(o round.Order) []plan.Position {
	out := make([]plan.Position, 0, len(o.Positions))
	for _, p := range o.Positions {
		out = append(out, plan.Position{Node: p.Node, ControlPlane: p.Role == round.RoleControlPlane, GPU: p.GPU, Canary: p.Canary, Reason: p.Reason})
	}
	return out
}

// PlacementOf says what runs where: the Postgres primaries (placement) and
// replicas (CNPG pods the drains evict), the VIP, the webhook's replicas,
// GPU pods and allocations (inventory). Pure.
func PlacementOf(pl kube.Placement, inv kube.Inventory, evicted map[string][]drain.PodRef, st intent.Settings) plan.Placement {
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

// IntentOf is what the intent says that shapes the plan: approval sizing,
// the panic timeout, the driver branch, the test environment and the
// lessons and open questions of comps that bear on this round. Pure.
func IntentOf(st intent.Settings, comps []*intent.Component, facts map[string]plan.Facts) plan.Intent {
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
	var moving []string
	for _, f := range facts {
		for _, p := range f.Packages {
			moving = append(moving, p.Name)
		}
	}
	for _, c := range comps {
		it.Notes = append(it.Notes, NotesOf(c, moving)...)
	}
	return it
}

// NotesOf picks a component's lessons and open questions that bear on the
// round: every open question (the round must not work around them), the
// three newest lessons, and any lesson naming a package that moves now.
// Pure.
func NotesOf(c *intent.Component, moving []string) []plan.Note {
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
		out = append(out, plan.Note{Component: c.Name, Kind: "lesson", Ref: l.Heading, Text: l.Text})
	}
	return out
}

// Locate takes the inventory and finds the Postgres primaries, the VIP
// holder and the canary as the intent st names them (the canary label,
// the VIP's Lease, the Postgres namespace). It changes nothing.
func Locate(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, st intent.Settings) (kube.Inventory, kube.Placement, error) {
	invOpts := kube.InventoryOptions{}
	if g := st.GPU; g != nil && g.CanaryLabel != "" {
		invOpts.CanaryLabel = g.CanaryLabel
	}
	inv, err := kube.TakeInventory(ctx, kc, invOpts)
	if err != nil {
		return kube.Inventory{}, kube.Placement{}, fmt.Errorf("take inventory: %w", err)
	}
	popts := kube.PlacementOptions{}
	if cp := st.ControlPlane; cp != nil {
		popts.VIPLeaseNamespace, popts.VIPLeaseName = cp.VIPLease.Namespace, cp.VIPLease.Name
	}
	if pg := st.Postgres; pg != nil {
		popts.PostgresNamespaces = []string{pg.Namespace}
	}
	pl, err := kube.Locate(ctx, kc, dc, inv, popts)
	if err != nil {
		return kube.Inventory{}, kube.Placement{}, fmt.Errorf("locate the Postgres primary and the VIP: %w", err)
	}
	return inv, pl, nil
}

// OrderInput is what round.PlanOrder orders: the inventory's nodes and
// where the Postgres primaries, the VIP and the canary are. Pure.
func OrderInput(inv kube.Inventory, pl kube.Placement) ([]round.NodeInfo, round.Placement) {
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

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
