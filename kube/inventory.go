package kube

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Labels and resources the inventory reads.
const (
	LabelControlPlane       = "node-role.kubernetes.io/control-plane"
	LabelControlPlaneLegacy = "node-role.kubernetes.io/master"
	// ResourceGPU is the extended resource the NVIDIA device plugin
	// advertises.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// LabelGPUPresent and LabelGPUCount are set by the GPU operator's
	// feature discovery; they mark a GPU server even while its device plugin
	// is down (after a driver upgrade, say).
	LabelGPUPresent = "nvidia.com/gpu.present"
	LabelGPUCount   = "nvidia.com/gpu.count"

	DefaultCanaryLabel  = "mcp-patch.io/canary=true"
	DefaultMachineLabel = "mcp-patch.io/machine"
)

// Machine kinds reported in Node.Machine.
const (
	MachineBareMetal = "bare-metal"
	MachineVM        = "vm"
	MachineUnknown   = "unknown"
)

// Address sources reported in Node.AddressSource.
const (
	AddressFromOverride   = "override"
	AddressFromInternalIP = "InternalIP"
)

// InventoryOptions tune how nodes are classified. The zero value uses the
// defaults documented on each field.
type InventoryOptions struct {
	// CanaryLabel marks the canary: "key=value" matches that value, a bare
	// "key" matches any value. Empty: DefaultCanaryLabel.
	CanaryLabel string
	// MachineLabel is the label key whose value says what the node is:
	// "bare-metal", "baremetal", "metal" or "physical" → bare metal; "vm",
	// "virtual" or "virtual-machine" → VM; anything else or absent →
	// unknown. Empty: DefaultMachineLabel.
	MachineLabel string
	// AddressOverrides maps node name → SSH address, replacing the node's
	// InternalIP. A name that is not a node is reported in
	// Inventory.Warnings.
	AddressOverrides map[string]string
}

// Node is one cluster node as the round sees it.
type Node struct {
	Name         string `json:"name"`
	ControlPlane bool   `json:"control_plane"`
	// GPUServer is true when the node advertises nvidia.com/gpu capacity or
	// carries the GPU operator's nvidia.com/gpu.present=true label.
	GPUServer bool `json:"gpu_server"`
	// GPUs is the nvidia.com/gpu capacity, or the nvidia.com/gpu.count label
	// when the device plugin advertises none.
	GPUs            int64 `json:"gpus"`
	GPUsAllocatable int64 `json:"gpus_allocatable"`
	// GPUsRequested sums the nvidia.com/gpu requests of the pods bound to
	// the node that have not finished.
	GPUsRequested  int64 `json:"gpus_requested"`
	RunningGPUPods int   `json:"running_gpu_pods"`
	// Address is where SSH goes: the override if one is given, else the
	// first InternalIP; empty when neither exists.
	Address       string `json:"address"`
	AddressSource string `json:"address_source,omitempty"`
	Machine       string `json:"machine"`
	Canary        bool   `json:"canary"`
	Ready         bool   `json:"ready"`
	Unschedulable bool   `json:"unschedulable"`
	KernelVersion string `json:"kernel_version,omitempty"`
	OSImage       string `json:"os_image,omitempty"`
	Kubelet       string `json:"kubelet_version,omitempty"`
}

// Inventory is the node list, sorted by name, with what did not fit.
type Inventory struct {
	Nodes    []Node   `json:"nodes"`
	Warnings []string `json:"warnings,omitempty"`
}

// Node returns the named node.
func (inv Inventory) Node(name string) (Node, bool) {
	i := sort.Search(len(inv.Nodes), func(i int) bool { return inv.Nodes[i].Name >= name })
	if i < len(inv.Nodes) && inv.Nodes[i].Name == name {
		return inv.Nodes[i], true
	}
	return Node{}, false
}

// TakeInventory lists the nodes and the pods bound to them and classifies
// each node. It makes one paged node list and one paged pod list.
func TakeInventory(ctx context.Context, kc kubernetes.Interface, opts InventoryOptions) (Inventory, error) {
	canaryKey, canaryValue, canaryAny, err := parseLabelMatch(orString(opts.CanaryLabel, DefaultCanaryLabel))
	if err != nil {
		return Inventory{}, fmt.Errorf("take inventory: canary label: %w", err)
	}
	machineLabel := orString(opts.MachineLabel, DefaultMachineLabel)

	nodes, err := ListNodes(ctx, kc)
	if err != nil {
		return Inventory{}, fmt.Errorf("take inventory: %w", err)
	}
	usage, err := GPUUsage(ctx, kc)
	if err != nil {
		return Inventory{}, fmt.Errorf("take inventory: %w", err)
	}

	inv := Inventory{Nodes: make([]Node, 0, len(nodes))}
	known := make(map[string]bool, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		known[n.Name] = true
		out := classifyNode(n, opts.AddressOverrides, machineLabel)
		v, has := n.Labels[canaryKey]
		out.Canary = has && (canaryAny || v == canaryValue)
		u := usage[n.Name]
		out.GPUsRequested = u.Requested
		out.RunningGPUPods = u.RunningPods
		inv.Nodes = append(inv.Nodes, out)
	}
	sort.Slice(inv.Nodes, func(i, j int) bool { return inv.Nodes[i].Name < inv.Nodes[j].Name })
	for _, name := range sortedKeys(opts.AddressOverrides) {
		if !known[name] {
			inv.Warnings = append(inv.Warnings, fmt.Sprintf("address override for %q names no node in the cluster", name))
		}
	}
	return inv, nil
}

func classifyNode(n *corev1.Node, overrides map[string]string, machineLabel string) Node {
	out := Node{
		Name:          n.Name,
		Unschedulable: n.Spec.Unschedulable,
		KernelVersion: n.Status.NodeInfo.KernelVersion,
		OSImage:       n.Status.NodeInfo.OSImage,
		Kubelet:       n.Status.NodeInfo.KubeletVersion,
		Machine:       MachineUnknown,
	}
	_, cp := n.Labels[LabelControlPlane]
	_, legacy := n.Labels[LabelControlPlaneLegacy]
	out.ControlPlane = cp || legacy

	if q, ok := n.Status.Capacity[ResourceGPU]; ok {
		out.GPUs = q.Value()
	}
	if q, ok := n.Status.Allocatable[ResourceGPU]; ok {
		out.GPUsAllocatable = q.Value()
	}
	if out.GPUs == 0 {
		if c, err := strconv.ParseInt(n.Labels[LabelGPUCount], 10, 64); err == nil && c > 0 {
			out.GPUs = c
		}
	}
	out.GPUServer = out.GPUs > 0 || n.Labels[LabelGPUPresent] == "true"

	if a, ok := overrides[n.Name]; ok && a != "" {
		out.Address, out.AddressSource = a, AddressFromOverride
	} else {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				out.Address, out.AddressSource = a.Address, AddressFromInternalIP
				break
			}
		}
	}

	switch strings.ToLower(n.Labels[machineLabel]) {
	case "bare-metal", "baremetal", "metal", "physical":
		out.Machine = MachineBareMetal
	case "vm", "virtual", "virtual-machine":
		out.Machine = MachineVM
	}
	out.Ready = NodeReady(n)
	return out
}

// NodeReady reports whether the node's kubelet posts Ready=True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ListNodes lists every node, 500 per page.
func ListNodes(ctx context.Context, kc kubernetes.Interface) ([]corev1.Node, error) {
	var out []corev1.Node
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := kc.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// ListPods lists pods in namespace ("" for all) matching the field
// selector, 500 per page.
func ListPods(ctx context.Context, kc kubernetes.Interface, namespace, fieldSelector string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	opts := metav1.ListOptions{Limit: 500, FieldSelector: fieldSelector}
	for {
		l, err := kc.CoreV1().Pods(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods (namespace %q, fields %q): %w", namespace, fieldSelector, err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// NodeGPUUsage is what the pods bound to one node take of its GPUs.
type NodeGPUUsage struct {
	Requested   int64
	RunningPods int
}

// GPUUsage sums nvidia.com/gpu requests per node over the bound pods that
// have not finished, the way the scheduler counts them.
func GPUUsage(ctx context.Context, kc kubernetes.Interface) (map[string]NodeGPUUsage, error) {
	pods, err := ListPods(ctx, kc, "", "spec.nodeName!=")
	if err != nil {
		return nil, err
	}
	usage := map[string]NodeGPUUsage{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := PodRequest(p, ResourceGPU)
		if req == 0 {
			continue
		}
		u := usage[p.Spec.NodeName]
		u.Requested += req
		if p.Status.Phase == corev1.PodRunning {
			u.RunningPods++
		}
		usage[p.Spec.NodeName] = u
	}
	return usage, nil
}

// GPUUsageOn returns the GPU usage of one node, listing only its pods.
func GPUUsageOn(ctx context.Context, kc kubernetes.Interface, node string) (NodeGPUUsage, error) {
	pods, err := ListPods(ctx, kc, "", "spec.nodeName="+node)
	if err != nil {
		return NodeGPUUsage{}, err
	}
	var u NodeGPUUsage
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if req := PodRequest(p, ResourceGPU); req > 0 {
			u.Requested += req
			if p.Status.Phase == corev1.PodRunning {
				u.RunningPods++
			}
		}
	}
	return u, nil
}

// PodRequest is the pod's effective request of an extended resource:
// app containers plus sidecars, or the largest init container with the
// sidecars started before it, whichever is more. For extended resources a
// limit without a request counts as the request.
func PodRequest(p *corev1.Pod, res corev1.ResourceName) int64 {
	amount := func(r corev1.ResourceRequirements) int64 {
		if q, ok := r.Requests[res]; ok {
			return q.Value()
		}
		if q, ok := r.Limits[res]; ok {
			return q.Value()
		}
		return 0
	}
	var apps int64
	for _, c := range p.Spec.Containers {
		apps += amount(c.Resources)
	}
	var sidecars, initPeak int64
	for _, c := range p.Spec.InitContainers {
		a := amount(c.Resources)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars += a
			continue
		}
		initPeak = max(initPeak, sidecars+a)
	}
	return max(apps+sidecars, initPeak)
}

// parseLabelMatch splits "key=value" or "key" (any value).
func parseLabelMatch(s string) (key, value string, anyValue bool, err error) {
	key, value, hasValue := strings.Cut(s, "=")
	key = strings.TrimSpace(key)
	if key == "" {
		return "", "", false, fmt.Errorf("%q has no label key", s)
	}
	return key, strings.TrimSpace(value), !hasValue, nil
}

func orString(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
