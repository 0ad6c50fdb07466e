package round

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// NodeInfo is what the order needs to know about one node. The tool layer
// fills it from the inventory and the cluster.
type NodeInfo struct {
	Name         string `json:"name"`
	ControlPlane bool   `json:"control_plane"`
	// GPU marks a GPU server (gpu_acceptance applies).
	GPU bool `json:"gpu"`
	// Canary is true when the node carries the canary label.
	Canary bool `json:"canary,omitempty"`
	// RunningGPUPods counts pods holding GPUs now; the canary is the GPU
	// server with the fewest when none is labelled.
	RunningGPUPods int `json:"running_gpu_pods,omitempty"`
	// VM marks a virtual machine: install needs a person's attestation
	// that a hypervisor snapshot was taken.
	VM bool `json:"vm,omitempty"`
}

// Placement is where the critical singletons run now.
type Placement struct {
	// PostgresPrimaryNodes are the nodes holding a Postgres primary (one per
	// CloudNativePG cluster).
	PostgresPrimaryNodes []string `json:"postgres_primary_nodes,omitempty"`
	// VIPNode holds the API server VIP; "" when unknown or none.
	VIPNode string `json:"vip_node,omitempty"`
	// CanaryNode, when set, is the canary the intent names; it overrides
	// the label and the pod count.
	CanaryNode string `json:"canary_node,omitempty"`
}

// Position is one node's place in the order and why it is there.
type Position struct {
	Node   string `json:"node"`
	Role   Role   `json:"role"`
	GPU    bool   `json:"gpu,omitempty"`
	Canary bool   `json:"canary,omitempty"`
	VM     bool   `json:"vm,omitempty"`
	Reason string `json:"reason"`
}

// Order is the sequence in which the round patches nodes.
type Order struct {
	Positions []Position `json:"positions"`
	// Notes say what the order had to work around (placement on nodes
	// outside the control plane, several labelled canaries).
	Notes []string `json:"notes,omitempty"`
}

// Index returns the position of node in the order, or -1.
func (o Order) Index(node string) int {
	return slices.IndexFunc(o.Positions, func(p Position) bool { return p.Node == node })
}

// PlanOrder decides the order of the round: control-plane nodes one at a
// time, those holding a Postgres primary and the API VIP last among them
// (the VIP holder at the very end); then the canary GPU server (named in
// the placement, else labelled, else the one running the fewest GPU pods,
// ties by name); then the remaining GPU servers; then the rest. Within each
// group nodes go by name. The result is deterministic for its input.
func PlanOrder(nodes []NodeInfo, p Placement) (Order, error) {
	if len(nodes) == 0 {
		return Order{}, errors.New("plan order: no nodes in the inventory")
	}
	byName := make(map[string]NodeInfo, len(nodes))
	for _, n := range nodes {
		if strings.TrimSpace(n.Name) == "" || n.Name != strings.TrimSpace(n.Name) || n.Name == FleetWide {
			return Order{}, fmt.Errorf("plan order: bad node name %q", n.Name)
		}
		if _, dup := byName[n.Name]; dup {
			return Order{}, fmt.Errorf("plan order: node %s listed twice", n.Name)
		}
		if n.RunningGPUPods < 0 {
			return Order{}, fmt.Errorf("plan order: node %s: negative GPU pod count %d", n.Name, n.RunningGPUPods)
		}
		byName[n.Name] = n
	}
	var notes []string
	primary := map[string]int{}
	for _, name := range p.PostgresPrimaryNodes {
		n, ok := byName[name]
		if !ok {
			return Order{}, fmt.Errorf("plan order: placement puts a Postgres primary on node %s, which is not in the inventory", name)
		}
		primary[name]++
		if !n.ControlPlane {
			notes = append(notes, fmt.Sprintf("Postgres primary runs on %s, which is not a control-plane node; it does not move the control-plane order", name))
		}
	}
	if p.VIPNode != "" {
		n, ok := byName[p.VIPNode]
		if !ok {
			return Order{}, fmt.Errorf("plan order: placement puts the API VIP on node %s, which is not in the inventory", p.VIPNode)
		}
		if !n.ControlPlane {
			notes = append(notes, fmt.Sprintf("API VIP is on %s, which is not a control-plane node; it does not move the control-plane order", p.VIPNode))
		}
	}
	if p.CanaryNode != "" {
		n, ok := byName[p.CanaryNode]
		if !ok {
			return Order{}, fmt.Errorf("plan order: canary %s is not in the inventory", p.CanaryNode)
		}
		if !n.GPU || n.ControlPlane {
			return Order{}, fmt.Errorf("plan order: canary %s is not a GPU server outside the control plane", p.CanaryNode)
		}
	}

	var cp, gpu, other []NodeInfo
	for _, n := range nodes {
		switch {
		case n.ControlPlane:
			cp = append(cp, n)
		case n.GPU:
			gpu = append(gpu, n)
		default:
			other = append(other, n)
		}
	}
	byNameCmp := func(a, b NodeInfo) int { return strings.Compare(a.Name, b.Name) }

	// Control plane: weight 0 plain, 1 holds a Postgres primary, 2 holds the
	// VIP, 3 both; ascending weight, then name.
	weight := func(n NodeInfo) int {
		w := 0
		if primary[n.Name] > 0 {
			w++
		}
		if p.VIPNode != "" && n.Name == p.VIPNode {
			w += 2
		}
		return w
	}
	slices.SortFunc(cp, func(a, b NodeInfo) int {
		return cmp.Or(cmp.Compare(weight(a), weight(b)), byNameCmp(a, b))
	})
	vipOnCP := p.VIPNode != "" && byName[p.VIPNode].ControlPlane
	var primaryCP []string
	for _, n := range cp {
		if primary[n.Name] > 0 {
			primaryCP = append(primaryCP, n.Name)
		}
	}
	split := vipOnCP && len(primaryCP) > 0 && !slices.Contains(primaryCP, p.VIPNode)

	var out []Position
	add := func(n NodeInfo, role Role, canary bool, reason string) {
		out = append(out, Position{Node: n.Name, Role: role, GPU: n.GPU, Canary: canary, VM: n.VM, Reason: reason})
	}
	for _, n := range cp {
		var reason string
		switch weight(n) {
		case 0:
			reason = "control-plane node without the Postgres primary or the API VIP: patched first, one at a time"
		case 1:
			reason = fmt.Sprintf("control-plane node holding the Postgres primary (%d cluster(s)): goes last among the control plane so the primary switches over once", primary[n.Name])
			if split {
				reason += fmt.Sprintf("; the API VIP is on %s, a different node, so both go at the end: the primary's node first, the VIP's node last, so the API endpoint moves only once, at the very end", p.VIPNode)
			}
		case 2:
			reason = "control-plane node holding the API VIP: goes last so the API endpoint moves only once"
			if split {
				reason = fmt.Sprintf("control-plane node holding the API VIP: goes last; the Postgres primary is on %s, a different node, so both go at the end and the VIP's node is the very last so the API endpoint moves only once", strings.Join(primaryCP, ", "))
			}
		case 3:
			reason = "control-plane node holding both the Postgres primary and the API VIP: goes last among the control plane"
		}
		add(n, RoleControlPlane, false, reason)
	}

	if len(gpu) > 0 {
		canaryIdx, reason := pickCanary(gpu, p.CanaryNode, &notes)
		c := gpu[canaryIdx]
		add(c, RoleGPU, true, reason)
		rest := slices.Delete(slices.Clone(gpu), canaryIdx, canaryIdx+1)
		slices.SortFunc(rest, byNameCmp)
		for _, n := range rest {
			add(n, RoleGPU, false, fmt.Sprintf("GPU server after the canary %s proved the kernel and driver: one at a time, by name", c.Name))
		}
	}
	slices.SortFunc(other, byNameCmp)
	for _, n := range other {
		add(n, RoleOther, false, "neither control plane nor GPU server: patched after the GPU servers, by name")
	}
	return Order{Positions: out, Notes: notes}, nil
}

// pickCanary returns the index in gpu of the canary and why it was chosen.
func pickCanary(gpu []NodeInfo, named string, notes *[]string) (int, string) {
	if named != "" {
		return slices.IndexFunc(gpu, func(n NodeInfo) bool { return n.Name == named }),
			"canary GPU server named by the intent: proves the kernel boots on bare metal and the NVIDIA driver builds for it before any other GPU server moves"
	}
	fewest := func(cands []int) int {
		return slices.MinFunc(cands, func(a, b int) int {
			return cmp.Or(cmp.Compare(gpu[a].RunningGPUPods, gpu[b].RunningGPUPods), strings.Compare(gpu[a].Name, gpu[b].Name))
		})
	}
	var labelled []int
	for i, n := range gpu {
		if n.Canary {
			labelled = append(labelled, i)
		}
	}
	if len(labelled) > 0 {
		i := fewest(labelled)
		if len(labelled) > 1 {
			names := make([]string, len(labelled))
			for k, j := range labelled {
				names[k] = gpu[j].Name
			}
			slices.Sort(names)
			*notes = append(*notes, fmt.Sprintf("several GPU servers carry the canary label (%s); %s runs the fewest GPU pods", strings.Join(names, ", "), gpu[i].Name))
		}
		return i, "labelled canary GPU server: proves the kernel boots on bare metal and the NVIDIA driver builds for it before any other GPU server moves"
	}
	all := make([]int, len(gpu))
	for i := range gpu {
		all[i] = i
	}
	i := fewest(all)
	return i, fmt.Sprintf("canary: no GPU server is labelled, and %s runs the fewest GPU pods (%d, ties by name), so it is the least critical; it proves the kernel and driver before the rest",
		gpu[i].Name, gpu[i].RunningGPUPods)
}
