package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// Position is one node's place in the round's order.
type Position struct {
	Node         string
	ControlPlane bool
	GPU          bool
	Canary       bool
	Reason       string
}

// Package is one package the upgrade moves.
type Package struct {
	Name       string
	Action     string // install, upgrade, remove, purge
	OldVersion string
	NewVersion string
	// Class is kernel, nvidia, kubernetes or other.
	Class string
}

// Entry is one GRUB menu entry as the host's grub.cfg has it.
type Entry struct {
	ID       string
	Kernel   string
	Recovery bool
}

// Facts are what the preflight read from one node. Err set means the
// node could not be inspected (HostKeyChanged says why when it is the host
// key); the rest is then ignored.
type Facts struct {
	Err            string
	HostKeyChanged bool
	// SimulateRefused is the node's refusal to simulate (dpkg interrupted,
	// …): reachable, but its package plan cannot be known.
	SimulateRefused string

	Running string
	// Packages, PackageDigest, PackageLines, Target and Removals come from
	// `apt-get -s full-upgrade`.
	Packages      []Package
	PackageDigest string
	PackageLines  []string
	Target        string
	Removals      []string
	// AptBlockers are the simulation's own blockers (held packages that
	// would move, Kubernetes packages not held …), in words.
	AptBlockers []string
	Unheld      []string

	Entries []Entry
	// GrubenvWritable is false when GRUB cannot write grubenv at boot;
	// GrubReasons say why.
	GrubenvWritable bool
	GrubReasons     []string
	KernelPanic     int

	// NvidiaInstalled is true when the node has NVIDIA driver packages;
	// TargetModules when modules for the target kernel already exist.
	NvidiaInstalled bool
	NvidiaBranch    string
	TargetModules   bool
	// NvidiaDKMS: the node builds its NVIDIA modules with DKMS at kernel
	// install (nvidia-dkms-* installed).
	NvidiaDKMS bool

	// BootFreeBytes is the free space on /boot (-1: unknown);
	// BootNeedBytes what the new kernel and its initrd take (0: unknown).
	BootFreeBytes int64
	BootNeedBytes int64

	// LivepatchEnabled and UnattendedKernel (unattended-upgrades may
	// install kernel packages) are read so they can be held against the
	// intent.
	LivepatchEnabled bool
	LivepatchState   string
	UnattendedKernel bool
	UnattendedNvidia bool

	Drain DrainFacts

	// DriverContainer is set on a GPU server whose NVIDIA driver is the
	// GPU Operator's driver container (the intent's gpu.driver_container
	// selects it); nil: the driver comes from host packages.
	DriverContainer *DriverContainerFacts

	// Others are who else maintained the node when the preflight looked
	// (kube/actors' holders); OthersErr says why it could not tell.
	Others    []OtherHolder
	OthersErr string
}

// OtherHolder is another party that held a node at plan time.
type OtherHolder struct {
	Actor, Who, What string
	// Stop: the round would stop for a person at the node's cordon if the
	// hold is still there (a person's cordon or taint, a failed driver
	// upgrade); otherwise it waits for the holder.
	Stop bool
}

// DriverContainerFacts say whether the driver container can get a driver
// for the target kernel.
type DriverContainerFacts struct {
	// Precompiled: the pod pulls an image made for exactly the kernel;
	// otherwise it builds the driver at boot from the kernel's headers.
	Precompiled bool
	// Image is the precompiled image's reference for the target kernel;
	// ImageVerdict what its registry's tag list said (present, absent,
	// could_not_check) and ImageReason why.
	Image, ImageVerdict, ImageReason string
}

// Image verdicts (kube/driverimage's words).
const (
	ImagePresent = "present"
	ImageAbsent  = "absent"
)

// DriverContainerPlan is what a driver-container GPU server's plan says
// about its driver for the target kernel.
type DriverContainerPlan struct {
	Precompiled bool   `json:"precompiled"`
	Image       string `json:"image,omitempty"`
	// Source says where the new kernel's driver comes from, in words.
	Source string `json:"source"`
}

// DrainFacts are the node's drain preview and its dry-run evictions.
type DrainFacts struct {
	Err      string
	Pods     []Pod
	Blockers []string
	Warnings []string
	// WaitsFor are the running jobs the drain waits for ("ns/pod"), up to
	// JobWaitMinutes.
	WaitsFor       []string
	JobWaitMinutes int
}

// Pod is one pod the drain would evict.
type Pod struct {
	Namespace string
	Name      string
	OwnerKind string
	OwnerName string
	EmptyDir  bool
	GPUs      int
	// Refused is the API server's answer when a dry-run eviction of the
	// pod is refused now ("" when it would be admitted).
	Refused string
	// NeverPDB names a PDB that can never allow this eviction
	// (minAvailable equal to the pods it selects, maxUnavailable 0), with
	// why.
	NeverPDB string
	// Switchover: a Postgres primary whose budget waits for the operator
	// to switch it over, which the cordon starts.
	Switchover bool
}

// Placement is where the round-critical things run.
type Placement struct {
	// PostgresPrimary maps node → "namespace/cluster" of each primary.
	PostgresPrimary map[string][]string
	// PostgresReplica maps node → "namespace/cluster" of each replica.
	PostgresReplica map[string][]string
	// SingleInstance are "namespace/cluster" CNPG clusters with one
	// instance: their primary has nowhere to go.
	SingleInstance []string
	VIPNode        string
	// Webhook maps node → webhook replicas running there.
	Webhook map[string]int
	// Model maps node → GPU pods running there (the model's among them).
	Model map[string]int
	// GPUsAllocated maps node → GPUs requested by running pods.
	GPUsAllocated map[string]int
}

// Intent is what the intent says that shapes the plan.
type Intent struct {
	// GPUApproval is PerStep or PerWindow for GPU servers; control-plane
	// nodes are always PerStep.
	GPUApproval  string
	PanicSeconds int
	DriverBranch string
	// LivepatchExpected: the intent counts on Livepatch; false means it
	// does not (so an enabled Livepatch is only a note).
	LivepatchExpected bool
	// TestEnvironment names the environment whose rounds a kernel must
	// close before production ("" when the intent names none);
	// TestedKernels are the kernels that closed a round there.
	TestEnvironment string
	TestedKernels   []string
	Notes           []Note
	// Promotion is set when the round's environment has an upstream one:
	// a target kernel is planned only with a proven verdict.
	Promotion *Promotion
}

// Promotion is the promotion gate's verdicts on the round's target
// kernels (round/promotion judges them from the upstream environment's
// signed outcome records and people's signed promotions).
type Promotion struct {
	Environment string `json:"environment"`
	Upstream    string `json:"upstream"`
	// Verdicts maps a target kernel with the NVIDIA packages moved with
	// it (promotion.Key) to its verdict; one without a verdict is a
	// blocker.
	Verdicts map[string]promotion.Verdict `json:"-"`
}

// Input is everything Build needs.
type Input struct {
	Round     string
	Order     []Position
	Facts     map[string]Facts
	Placement Placement
	Intent    Intent
	// Revision of the plan (re-plans count up).
	Revision int
	// Risks are fleet-wide risks the preflight found (a selector of the
	// intent that picks nothing, say).
	Risks []string
}

// Build turns the preflight's facts into the reviewed plan. A node without
// facts is a blocker: a node that was not read is not a skip.
func Build(in Input) Fleet {
	f := Fleet{Round: in.Round, Revision: in.Revision, Nodes: []Node{}, Placement: placementLines(in.Placement),
		Notes: slices.Clone(in.Intent.Notes), Blockers: []Blocker{}, Risks: slices.Clone(in.Risks)}
	if f.Risks == nil {
		f.Risks = []string{}
	}
	if f.Notes == nil {
		f.Notes = []Note{}
	}
	targets := map[string]bool{}
	// promoted are the kernels with the NVIDIA packages moved with them,
	// as the promotion gate judged them (promotion.Key).
	promoted := map[string]bool{}
	for i, pos := range in.Order {
		facts, ok := in.Facts[pos.Node]
		if !ok {
			facts = Facts{Err: "the preflight did not read this node"}
		}
		n := BuildNode(i+1, pos, facts, in.Placement, in.Intent)
		if n.Target != "" {
			targets[n.Target] = true
			promoted[promotion.Key(n.Target, NvidiaMoves(facts.Packages))] = true
		}
		f.Blockers = append(f.Blockers, n.Blockers...)
		f.Nodes = append(f.Nodes, n)
	}
	f.TestEnvironment = testEnvironment(in.Intent, targets)
	if p := in.Intent.Promotion; p != nil {
		f.Promotion = &FleetPromotion{Environment: p.Environment, Upstream: p.Upstream, Kernels: []promotion.Verdict{}}
		for _, k := range sortedKeys(promoted) {
			f.Promotion.Kernels = append(f.Promotion.Kernels, promotionVerdict(p, k))
		}
	}
	f.seal()
	f.Summary = summary(&f)
	return f
}

// BuildNode is one node's plan from its facts. It is what a re-plan of a
// single node recomputes.
func BuildNode(position int, pos Position, facts Facts, pl Placement, it Intent) Node {
	n := Node{Node: pos.Node, Position: position, Role: RoleOther, GPU: pos.GPU, Canary: pos.Canary, Reason: pos.Reason,
		Runs: []string{}, Risks: []string{}, Blockers: []Blocker{}, Approval: PerStep,
		Packages: Packages{Kernel: []string{}, Nvidia: []string{}, Kubernetes: []string{}, Other: []string{}},
		Drain:    Drain{Workloads: []Workload{}}}
	switch {
	case pos.ControlPlane:
		n.Role = RoleControlPlane
	case pos.GPU:
		n.Role = RoleGPU
		if it.GPUApproval == PerWindow {
			n.Approval = PerWindow
		}
	}
	block := func(cause, fix string) {
		n.Blockers = append(n.Blockers, Blocker{Node: pos.Node, Cause: cause, Fix: fix, Check: CheckInspect})
	}
	apt := func(cause, fix string) {
		n.Blockers = append(n.Blockers, Blocker{Node: pos.Node, Cause: cause, Fix: fix, Check: CheckSimulate})
	}
	n.Runs = runs(pos.Node, pl)
	if facts.Err != "" {
		if facts.HostKeyChanged {
			block("its SSH host key changed: "+facts.Err, "check the key out of band (console, provisioning records), then update known_hosts; never skip the check")
		} else {
			block("not reachable: "+facts.Err, "bring the node back (or take it out of the cluster), then plan again; an unread node is not skipped")
		}
		return n
	}
	if facts.SimulateRefused != "" {
		apt("the upgrade cannot be simulated: "+facts.SimulateRefused, "repair the node's package state as the reason says, then plan this node again")
		return n
	}
	n.Running, n.Target = facts.Running, facts.Target
	n.PackageDigest, n.PackageLines = facts.PackageDigest, slices.Clone(facts.PackageLines)
	for _, p := range facts.Packages {
		line := packageLine(p)
		switch p.Class {
		case "kernel":
			n.Packages.Kernel = append(n.Packages.Kernel, line)
		case "nvidia":
			n.Packages.Nvidia = append(n.Packages.Nvidia, line)
		case "kubernetes":
			n.Packages.Kubernetes = append(n.Packages.Kubernetes, line)
		default:
			n.Packages.Other = append(n.Packages.Other, line)
		}
	}
	if len(facts.Removals) > 0 {
		apt("apt would remove "+strings.Join(facts.Removals, ", "), "find what pulls them out (apt-get -s full-upgrade on the node), pin or install the replacement, then plan this node again")
	}
	for _, b := range facts.AptBlockers {
		if strings.Contains(b, "would remove") && len(facts.Removals) > 0 {
			continue
		}
		apt(b, "fix the holds or the package set on the node, then plan this node again")
	}
	for _, u := range facts.Unheld {
		apt("package "+u+" is installed but not held", "apt-mark hold "+u)
	}
	n.Grub = Grub{PanicSeconds: it.PanicSeconds}
	if n.Target != "" && n.Target != n.Running {
		old, okOld := pickEntry(facts.Entries, n.Running)
		if !okOld {
			block("no GRUB entry boots the running kernel "+n.Running, "run update-grub on the node and check /boot/grub/grub.cfg")
		} else {
			n.Grub.Old = old.ID
			if e, ok := pickEntry(facts.Entries, n.Target); ok {
				n.Grub.New = e.ID
			} else if id, ok := PredictEntry(old.ID, n.Running, n.Target); ok {
				n.Grub.New, n.Grub.NewPredicted = id, true
			} else {
				block("cannot tell the GRUB entry id the new kernel "+n.Target+" will get from "+old.ID, "check grub.cfg's menuentry ids")
			}
		}
		if p := it.Promotion; p != nil {
			if v := promotionVerdict(p, promotion.Key(n.Target, NvidiaMoves(facts.Packages))); !v.Proven {
				n.Blockers = append(n.Blockers, Blocker{Node: pos.Node, Cause: v.Why, Fix: v.Fix, Check: CheckPromotion})
			} else if v.Risk != "" {
				n.Risks = append(n.Risks, v.Risk)
			}
		}
		if !facts.GrubenvWritable {
			block("grubenv is not writable at boot ("+strings.Join(facts.GrubReasons, "; ")+"): a one-shot trial boot is not reliable", "move /boot/grub off mdraid/LVM/btrfs/zfs, or decide with a person how to boot the new kernel")
		}
		if it.PanicSeconds > 0 && facts.KernelPanic <= 0 {
			block("kernel.panic is 0: a panicking trial kernel would hang instead of falling back", fmt.Sprintf("sysctl -w kernel.panic=%d and persist it in /etc/sysctl.d", it.PanicSeconds))
		}
		if facts.BootNeedBytes > 0 && facts.BootFreeBytes >= 0 && facts.BootFreeBytes < facts.BootNeedBytes {
			apt(fmt.Sprintf("/boot has %s free, the new kernel and its initrd need %s", mib(facts.BootFreeBytes), mib(facts.BootNeedBytes)),
				"remove old kernels (apt autoremove --purge on the node, never the running one) or grow /boot, then plan this node again")
		}
		if dc := facts.DriverContainer; pos.GPU && dc != nil {
			n.DriverContainer = driverContainer(n.Target, dc, facts.Packages, block, apt)
		}
		dkms := facts.NvidiaDKMS && slices.ContainsFunc(facts.Packages, func(p Package) bool { return p.Name == "linux-headers-"+n.Target })
		if pos.GPU && dkms && !facts.TargetModules && !nvidiaModulesIn(facts.Packages, n.Target) {
			n.Risks = append(n.Risks, "the NVIDIA modules for "+n.Target+" are built by DKMS during the install: the trial boot proves them")
		}
		if pos.GPU && facts.DriverContainer == nil && facts.NvidiaInstalled && !dkms && !facts.TargetModules && !nvidiaModulesIn(facts.Packages, n.Target) {
			pkg := "linux-modules-nvidia-" + orBranch(facts.NvidiaBranch, it.DriverBranch) + "-" + n.Target
			block("no NVIDIA kernel modules for the target kernel "+n.Target+": the plan does not bring them and none are installed",
				"add "+pkg+" to the node's upgrade (the archive must publish it; else hold the kernel back on this node), then plan this node again")
		}
	}
	if n.Target == "" {
		n.Risks = append(n.Risks, "no new kernel in this plan: the window installs packages and reboots into the running kernel")
	}
	if facts.UnattendedKernel {
		block("unattended-upgrades may install kernel packages on its own, behind the round's back", "add the kernel packages to Unattended-Upgrade::Package-Blacklist, or record an open question against the intent")
	}
	if pos.GPU && facts.UnattendedNvidia {
		block("unattended-upgrades may upgrade NVIDIA packages on its own", "add the NVIDIA packages to Unattended-Upgrade::Package-Blacklist, or record an open question against the intent")
	}
	if facts.LivepatchEnabled && !it.LivepatchExpected {
		n.Risks = append(n.Risks, "Livepatch is enabled ("+orDash(facts.LivepatchState)+") but the intent does not count on it: an open question, not a reason to skip the reboot")
	}
	n.Drain = drainOf(pos.Node, facts.Drain, &n)
	if pos.GPU && pl.GPUsAllocated[pos.Node] > 0 {
		n.Risks = append(n.Risks, fmt.Sprintf("%d GPUs are allocated to running pods: their jobs stop at the drain", pl.GPUsAllocated[pos.Node]))
	}
	if len(pl.PostgresPrimary[pos.Node]) > 0 {
		n.Risks = append(n.Risks, "a Postgres primary runs here: the drain switches it over")
	}
	n.Others = othersOf(facts, &n)
	return n
}

// othersOf words who else held the node at plan time: information, since
// the round looks again before each cordon, not a blocker; a hold that
// would stop the round at the cordon is a risk as well.
func othersOf(facts Facts, n *Node) []string {
	var out []string
	if facts.OthersErr != "" {
		out = append(out, "could not tell who else maintains the node: "+facts.OthersErr)
	}
	for _, h := range facts.Others {
		line := fmt.Sprintf("%s (%s): %s", h.Actor, h.Who, h.What)
		out = append(out, line)
		if h.Stop {
			n.Risks = append(n.Risks, "another party holds the node now and a person must look if it still does at the cordon: "+line)
		}
	}
	return out
}

func drainOf(node string, df DrainFacts, n *Node) Drain {
	block := func(cause, fix string) {
		n.Blockers = append(n.Blockers, Blocker{Node: node, Cause: cause, Fix: fix, Check: CheckInspect})
	}
	d := Drain{Workloads: []Workload{}, WaitsFor: df.WaitsFor}
	if len(df.WaitsFor) > 0 {
		d.JobWaitMinutes = df.JobWaitMinutes
	}
	if df.Err != "" {
		block("the drain preview failed: "+df.Err, "check the API server and the node, then plan again")
		return d
	}
	for _, b := range df.Blockers {
		block("the drain would be refused: "+b, "deal with these pods (or change the intent's drain policy), then plan again")
	}
	idx := map[string]int{}
	for _, p := range df.Pods {
		d.Pods++
		if p.EmptyDir {
			d.EmptyDirData++
		}
		w := Workload{Namespace: p.Namespace, Kind: orDash(p.OwnerKind), Name: orDash(p.OwnerName)}
		if i, ok := idx[w.Key()]; ok {
			d.Workloads[i].Pods++
		} else {
			w.Pods = 1
			idx[w.Key()] = len(d.Workloads)
			d.Workloads = append(d.Workloads, w)
		}
		switch {
		case p.NeverPDB != "":
			block("the drain can never evict "+p.Namespace+"/"+p.Name+": "+p.NeverPDB, "change the PodDisruptionBudget (or add a replica) so one pod may go, then plan again")
		case p.Switchover:
			n.Risks = append(n.Risks, "the Postgres primary "+p.Namespace+"/"+p.Name+" switches over when the node is cordoned; its eviction waits for that")
		case p.Refused != "":
			d.Refused = append(d.Refused, p.Namespace+"/"+p.Name+": "+p.Refused)
		}
	}
	sort.Slice(d.Workloads, func(i, j int) bool { return d.Workloads[i].Key() < d.Workloads[j].Key() })
	sort.Strings(d.Refused)
	for _, r := range d.Refused {
		n.Risks = append(n.Risks, "a dry-run eviction is refused now (a PDB with no disruption left?): "+r)
	}
	for _, w := range df.Warnings {
		n.Risks = append(n.Risks, "drain: "+w)
	}
	if d.EmptyDirData > 0 {
		n.Risks = append(n.Risks, fmt.Sprintf("%d evicted pods lose their emptyDir data", d.EmptyDirData))
	}
	return d
}

func runs(node string, pl Placement) []string {
	out := []string{}
	for _, c := range pl.PostgresPrimary[node] {
		out = append(out, "Postgres primary "+c)
	}
	for _, c := range pl.PostgresReplica[node] {
		out = append(out, "Postgres replica "+c)
	}
	if pl.VIPNode == node && node != "" {
		out = append(out, "the API VIP")
	}
	if n := pl.Webhook[node]; n > 0 {
		out = append(out, fmt.Sprintf("%d admission webhook replica(s)", n))
	}
	if n := pl.Model[node]; n > 0 {
		out = append(out, fmt.Sprintf("%d GPU pod(s) running", n))
	}
	if n := pl.GPUsAllocated[node]; n > 0 {
		out = append(out, fmt.Sprintf("%d GPU(s) allocated", n))
	}
	return out
}

func placementLines(pl Placement) []string {
	out := []string{}
	for _, n := range sortedKeys(pl.PostgresPrimary) {
		for _, c := range pl.PostgresPrimary[n] {
			out = append(out, "Postgres primary of "+c+" on "+n)
		}
	}
	for _, n := range sortedKeys(pl.PostgresReplica) {
		for _, c := range pl.PostgresReplica[n] {
			out = append(out, "Postgres replica of "+c+" on "+n)
		}
	}
	for _, c := range pl.SingleInstance {
		out = append(out, "Postgres cluster "+c+" has a single instance: its primary cannot move")
	}
	if pl.VIPNode != "" {
		out = append(out, "the API VIP on "+pl.VIPNode)
	} else {
		out = append(out, "the API VIP holder is unknown")
	}
	if s := countLine(pl.Webhook); s != "" {
		out = append(out, "admission webhook replicas: "+s)
	}
	if s := countLine(pl.Model); s != "" {
		out = append(out, "GPU pods: "+s)
	}
	if s := countLine(pl.GPUsAllocated); s != "" {
		out = append(out, "GPUs allocated: "+s)
	}
	return out
}

func countLine(m map[string]int) string {
	var parts []string
	for _, n := range sortedKeys(m) {
		if m[n] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", n, m[n]))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// promotionVerdict is the gate's verdict on a kernel with the NVIDIA
// packages moved with it (promotion.Key); one the gate did not judge is
// not proven.
func promotionVerdict(p *Promotion, key string) promotion.Verdict {
	if v, ok := p.Verdicts[key]; ok {
		return v
	}
	kernel, _, _ := strings.Cut(key, " with ")
	return promotion.Verdict{Kernel: kernel, Why: "kernel " + key + " was not judged against " + p.Upstream + "'s records",
		Fix: "plan the round again"}
}

// NvidiaMoves are the NVIDIA packages a node's upgrade installs or
// upgrades, "name version", sorted: what the promotion gate judges with
// the kernel (pure).
func NvidiaMoves(pkgs []Package) []string {
	var out []string
	for _, p := range pkgs {
		if p.Class == "nvidia" && p.NewVersion != "" && (p.Action == "install" || p.Action == "upgrade") {
			out = append(out, p.Name+" "+p.NewVersion)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func testEnvironment(it Intent, targets map[string]bool) string {
	if it.TestEnvironment == "" {
		return ""
	}
	var ok, missing []string
	for _, k := range sortedKeys(targets) {
		if slices.Contains(it.TestedKernels, k) {
			ok = append(ok, k)
		} else {
			missing = append(missing, k)
		}
	}
	switch {
	case len(targets) == 0:
		return "no node gets a new kernel this round"
	case len(missing) == 0:
		return "every target kernel (" + strings.Join(ok, ", ") + ") already closed a round in " + it.TestEnvironment
	}
	return "not yet closed a round in " + it.TestEnvironment + ": " + strings.Join(missing, ", ")
}

func summary(f *Fleet) []string {
	var cp, gpu, other, moving int
	targets := map[string][]string{}
	for _, n := range f.Nodes {
		switch n.Role {
		case RoleControlPlane:
			cp++
		case RoleGPU:
			gpu++
		default:
			other++
		}
		moving += n.Packages.Count()
		if n.Target != "" {
			targets[n.Running+" -> "+n.Target] = append(targets[n.Running+" -> "+n.Target], n.Node)
		}
	}
	out := []string{fmt.Sprintf("round %s: %d nodes (%d control plane, %d GPU servers, %d other), %d package moves in all",
		f.Round, len(f.Nodes), cp, gpu, other, moving)}
	for _, k := range sortedKeys(targets) {
		out = append(out, fmt.Sprintf("kernel %s on %s", k, nameSome(targets[k])))
	}
	if f.TestEnvironment != "" {
		out = append(out, "test environment: "+f.TestEnvironment)
	}
	if p := f.Promotion; p != nil {
		for _, v := range p.Kernels {
			word := "NOT proven"
			if v.Proven {
				word = "proven"
			}
			out = append(out, fmt.Sprintf("promotion from %s: %s: %s", p.Upstream, word, v.Why))
		}
	}
	out = append(out, fmt.Sprintf("this round needs %d signatures (%d with one signature per step)", f.Signatures, f.PerStepSignatures))
	if len(f.Risks) > 0 {
		out = append(out, fmt.Sprintf("%d fleet-wide risk(s): read Risks in plan.md", len(f.Risks)))
	}
	if len(f.Blockers) > 0 {
		out = append(out, fmt.Sprintf("%d blocker(s): nothing may be cordoned until they are fixed and the plan is made again", len(f.Blockers)))
	} else {
		out = append(out, "no blockers: a person signs the plan digest, then the first drain may start")
	}
	return out
}

// summaryNames is how many node names a summary line lists before it
// counts them instead: a line stays readable (and within what a signed
// request allows) at a thousand nodes.
const summaryNames = 8

// nameSome lists names, or for a long list its count, its first and its
// last names: plan.md lists every one.
func nameSome(names []string) string {
	if len(names) <= summaryNames {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%d nodes (%s, ... %s; each one in plan.md)", len(names),
		strings.Join(names[:summaryNames/2], ", "), strings.Join(names[len(names)-2:], ", "))
}

// PredictEntry derives the GRUB entry id update-grub gives a new kernel
// from the running kernel's entry id: 10_linux names entries
// gnulinux-<release>-<type>-<device id>, so the release is the only part
// that changes.
func PredictEntry(oldID, running, target string) (string, bool) {
	if running == "" || target == "" || !strings.Contains(oldID, running) {
		return "", false
	}
	return strings.ReplaceAll(oldID, running, target), true
}

// pickEntry finds the non-recovery entry booting kernel, preferring the
// one inside a submenu (the id the trial boot uses).
func pickEntry(entries []Entry, kernel string) (Entry, bool) {
	var found []Entry
	for _, e := range entries {
		if e.Kernel == kernel && !e.Recovery {
			found = append(found, e)
		}
	}
	if len(found) == 0 {
		return Entry{}, false
	}
	for _, e := range found {
		if strings.Contains(e.ID, ">") {
			return e, true
		}
	}
	return found[0], true
}

func nvidiaModulesIn(pkgs []Package, target string) bool {
	for _, p := range pkgs {
		if strings.HasPrefix(p.Name, "linux-modules-nvidia-") && strings.HasSuffix(p.Name, "-"+target) && p.Action != "remove" && p.Action != "purge" {
			return true
		}
	}
	return false
}

func packageLine(p Package) string {
	switch p.Action {
	case "remove", "purge":
		return p.Name + " " + orDash(p.OldVersion) + " -> (" + p.Action + ")"
	case "install":
		return p.Name + " (new) -> " + p.NewVersion
	}
	return p.Name + " " + orDash(p.OldVersion) + " -> " + p.NewVersion
}

// NvidiaInstalled reads back what a node's plan lines of NVIDIA packages
// (Packages.Nvidia, as packageLine words them) install: "name version",
// sorted; removals are not installs (pure; NvidiaMoves of the same
// packages).
func NvidiaInstalled(lines []string) []string {
	var out []string
	for _, l := range lines {
		name, _, _ := strings.Cut(l, " ")
		i := strings.LastIndex(l, " -> ")
		if name == "" || i < 0 || strings.HasPrefix(l[i+4:], "(") || l[i+4:] == "" {
			continue
		}
		out = append(out, name+" "+l[i+4:])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func orBranch(a, b string) string {
	if a != "" {
		return a
	}
	if b != "" {
		return b
	}
	return "<branch>"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// mib words a size in bytes: whole MiB from 1 MiB up, KiB below it.
func mib(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d MiB", b/(1<<20))
}

// driverContainer decides whether a driver-container GPU server can get a
// driver for target: a precompiled image its registry lists, or the
// kernel's headers in the package plan for a build at boot. A registry
// that could not be asked is a blocker too: never a pass unseen.
func driverContainer(target string, dc *DriverContainerFacts, pkgs []Package, block, apt func(cause, fix string)) *DriverContainerPlan {
	p := &DriverContainerPlan{Precompiled: dc.Precompiled, Image: dc.Image}
	if dc.Precompiled {
		switch dc.ImageVerdict {
		case ImagePresent:
			p.Source = "the precompiled driver image " + dc.Image + " (its registry lists it)"
		case ImageAbsent:
			block("no precompiled driver image for the target kernel "+target+": "+dc.Image+" ("+dc.ImageReason+")",
				"wait until NVIDIA publishes "+dc.Image+" (or build and push it), or hold the kernel back on the driver-container servers, then plan again")
		default:
			block("could not check the precompiled driver image "+dc.Image+" for the target kernel "+target+": "+orDash(dc.ImageReason),
				"make the registry reachable from this server (address, login), then plan again; an unchecked image is never taken as present")
		}
		return p
	}
	headers := "linux-headers-" + target
	if slices.ContainsFunc(pkgs, func(pk Package) bool { return pk.Name == headers && pk.Action != "remove" && pk.Action != "purge" }) {
		p.Source = "built at boot by the driver container from " + headers + " (in this plan): the trial boot proves it"
		return p
	}
	apt("the driver container builds its driver at boot and needs "+headers+", which the package plan does not bring",
		"add "+headers+" to the node's upgrade (or switch the servers to precompiled images), then plan this node again")
	return p
}
