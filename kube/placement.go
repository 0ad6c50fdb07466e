package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// CNPGClusters is the CloudNativePG Cluster resource, read through the
// dynamic client so no operator Go code is needed.
var CNPGClusters = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}

// Defaults for finding the API VIP holder.
const (
	DefaultVIPLeaseNamespace = "kube-system"
	// DefaultVIPLeaseName is the Lease kube-vip's control-plane leader
	// election holds.
	DefaultVIPLeaseName = "plndr-cp-lock"
)

// Where a VIP holder or a canary was found.
const (
	SourceLease    = "lease"
	SourceProbe    = "probe"
	SourceLabel    = "label"
	SourceFewest   = "fewest-gpu-pods"
	SourceUnknown  = "unknown"
	SourceNoCanary = "none"
)

// VIPProbe finds the API VIP holder some other way (the SSH layer looks for
// the configured address on the control-plane hosts). It returns the node
// name, or "" with evidence saying why none holds it.
type VIPProbe func(ctx context.Context, controlPlane []Node) (node string, evidence string, err error)

// PlacementOptions say where to look. The zero value uses the defaults.
type PlacementOptions struct {
	// VIPLeaseNamespace and VIPLeaseName name kube-vip's leader Lease.
	// Empty: kube-system and plndr-cp-lock.
	VIPLeaseNamespace string
	VIPLeaseName      string
	// VIPProbe is asked when the Lease does not name a live node. Nil: the
	// holder stays unknown.
	VIPProbe VIPProbe
	// PostgresNamespaces limits the CNPG search. Empty: all namespaces.
	PostgresNamespaces []string
}

// PostgresPrimary is where one CNPG Cluster's primary runs. Node is empty
// when it could not be found, and Reason says why.
type PostgresPrimary struct {
	Namespace string `json:"namespace"`
	Cluster   string `json:"cluster"`
	Pod       string `json:"pod,omitempty"`
	Node      string `json:"node,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// VIPHolder is the node that answers on the API VIP.
type VIPHolder struct {
	Node     string `json:"node,omitempty"`
	Source   string `json:"source"`
	Evidence string `json:"evidence,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Canary is the GPU server patched first among the GPU servers.
type Canary struct {
	Node   string `json:"node,omitempty"`
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// Placement is where the round-critical things live.
type Placement struct {
	Postgres []PostgresPrimary `json:"postgres"`
	VIP      VIPHolder         `json:"vip"`
	Canary   Canary            `json:"canary"`
}

// Locate finds the Postgres primaries, the VIP holder and the canary.
func Locate(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, inv Inventory, opts PlacementOptions) (Placement, error) {
	pg, err := PostgresPrimaries(ctx, kc, dc, opts.PostgresNamespaces)
	if err != nil {
		return Placement{}, err
	}
	vip, err := LocateVIP(ctx, kc, inv, opts)
	if err != nil {
		return Placement{}, err
	}
	return Placement{Postgres: pg, VIP: vip, Canary: PickCanary(inv.Nodes)}, nil
}

// ListCNPGClusters lists CNPG Clusters in the namespaces (all if empty). A
// cluster without the CRD has none: installed is false and err nil.
func ListCNPGClusters(ctx context.Context, dc dynamic.Interface, namespaces []string) (items []unstructured.Unstructured, installed bool, err error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := dc.Resource(CNPGClusters).Namespace(ns).List(ctx, opts)
			if err != nil {
				if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
					return nil, false, nil
				}
				return nil, false, fmt.Errorf("list CNPG clusters (namespace %q): %w", ns, err)
			}
			items = append(items, l.Items...)
			if l.GetContinue() == "" {
				break
			}
			opts.Continue = l.GetContinue()
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].GetNamespace() != items[j].GetNamespace() {
			return items[i].GetNamespace() < items[j].GetNamespace()
		}
		return items[i].GetName() < items[j].GetName()
	})
	return items, true, nil
}

// PostgresPrimaries follows status.currentPrimary → pod → spec.nodeName for
// every CNPG Cluster.
func PostgresPrimaries(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, namespaces []string) ([]PostgresPrimary, error) {
	clusters, _, err := ListCNPGClusters(ctx, dc, namespaces)
	if err != nil {
		return nil, fmt.Errorf("find Postgres primaries: %w", err)
	}
	out := make([]PostgresPrimary, 0, len(clusters))
	for i := range clusters {
		c := &clusters[i]
		p := PostgresPrimary{Namespace: c.GetNamespace(), Cluster: c.GetName()}
		primary, _, _ := unstructured.NestedString(c.Object, "status", "currentPrimary")
		switch {
		case primary == "":
			p.Reason = "status.currentPrimary is empty"
		default:
			p.Pod = primary
			pod, err := kc.CoreV1().Pods(p.Namespace).Get(ctx, primary, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				p.Reason = fmt.Sprintf("primary pod %s/%s not found", p.Namespace, primary)
			case err != nil:
				return nil, fmt.Errorf("find Postgres primary of %s/%s: get pod %s: %w", p.Namespace, p.Cluster, primary, err)
			case pod.Spec.NodeName == "":
				p.Reason = fmt.Sprintf("primary pod %s/%s is not scheduled", p.Namespace, primary)
			default:
				p.Node = pod.Spec.NodeName
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// LocateVIP reads kube-vip's leader Lease. When it is missing, expired or
// names no node, the probe (if any) is asked; else the holder is unknown
// with the reason.
func LocateVIP(ctx context.Context, kc kubernetes.Interface, inv Inventory, opts PlacementOptions) (VIPHolder, error) {
	ns := orString(opts.VIPLeaseNamespace, DefaultVIPLeaseNamespace)
	name := orString(opts.VIPLeaseName, DefaultVIPLeaseName)
	holder, why, err := vipFromLease(ctx, kc, inv, ns, name)
	if err != nil {
		return VIPHolder{}, err
	}
	if holder.Node != "" {
		return holder, nil
	}
	if opts.VIPProbe == nil {
		return VIPHolder{Source: SourceUnknown, Reason: why}, nil
	}
	var cp []Node
	for _, n := range inv.Nodes {
		if n.ControlPlane {
			cp = append(cp, n)
		}
	}
	node, evidence, err := opts.VIPProbe(ctx, cp)
	if err != nil {
		return VIPHolder{Source: SourceUnknown, Reason: fmt.Sprintf("%s; probe failed: %v", why, err)}, nil
	}
	if node == "" {
		return VIPHolder{Source: SourceUnknown, Evidence: evidence, Reason: why + "; probe found no holder"}, nil
	}
	return VIPHolder{Node: node, Source: SourceProbe, Evidence: evidence, Reason: why}, nil
}

func vipFromLease(ctx context.Context, kc kubernetes.Interface, inv Inventory, ns, name string) (VIPHolder, string, error) {
	lease, err := kc.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return VIPHolder{}, fmt.Sprintf("no Lease %s/%s (kube-vip not in use, or another lease name)", ns, name), nil
	}
	if err != nil {
		return VIPHolder{}, "", fmt.Errorf("locate API VIP holder: get Lease %s/%s: %w", ns, name, err)
	}
	id := ""
	if lease.Spec.HolderIdentity != nil {
		id = *lease.Spec.HolderIdentity
	}
	if id == "" {
		return VIPHolder{}, fmt.Sprintf("Lease %s/%s has no holder", ns, name), nil
	}
	if lease.Spec.RenewTime != nil && lease.Spec.LeaseDurationSeconds != nil {
		expires := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
		if time.Now().After(expires) {
			return VIPHolder{}, fmt.Sprintf("Lease %s/%s held by %q expired at %s", ns, name, id, expires.UTC().Format(time.RFC3339)), nil
		}
	}
	node, ok := matchNode(inv.Nodes, id)
	if !ok {
		return VIPHolder{}, fmt.Sprintf("Lease %s/%s holder %q is not a node in the cluster", ns, name, id), nil
	}
	return VIPHolder{Node: node, Source: SourceLease, Evidence: fmt.Sprintf("Lease %s/%s holderIdentity=%q", ns, name, id)}, "", nil
}

// matchNode maps a holder identity (a node name or host name) to a node:
// exact, then case-insensitive, then by the first DNS label.
func matchNode(nodes []Node, id string) (string, bool) {
	for _, n := range nodes {
		if n.Name == id {
			return n.Name, true
		}
	}
	for _, n := range nodes {
		if strings.EqualFold(n.Name, id) {
			return n.Name, true
		}
	}
	short := func(s string) string { h, _, _ := strings.Cut(strings.ToLower(s), "."); return h }
	var found []string
	for _, n := range nodes {
		if short(n.Name) == short(id) {
			found = append(found, n.Name)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return "", false
}

// PickCanary chooses the canary among the Ready GPU servers: a labelled one
// first, else the one with the fewest running GPU pods (then fewest GPUs
// requested, then by name). Control-plane nodes are chosen only when no other
// GPU server is Ready.
func PickCanary(nodes []Node) Canary {
	var labelled, workers, cp []Node
	for _, n := range nodes {
		if !n.GPUServer {
			continue
		}
		if n.Canary {
			labelled = append(labelled, n)
		}
		if !n.Ready {
			continue
		}
		if n.ControlPlane {
			cp = append(cp, n)
		} else {
			workers = append(workers, n)
		}
	}
	if len(labelled) > 0 {
		c := Canary{Node: labelled[0].Name, Source: SourceLabel, Reason: "carries the canary label"}
		if len(labelled) > 1 {
			names := make([]string, 0, len(labelled)-1)
			for _, n := range labelled[1:] {
				names = append(names, n.Name)
			}
			c.Reason += fmt.Sprintf("; also labelled: %s (first by name taken)", strings.Join(names, ", "))
		}
		if !labelled[0].Ready {
			c.Reason += "; node is not Ready"
		}
		return c
	}
	pool := workers
	if len(pool) == 0 {
		pool = cp
	}
	if len(pool) == 0 {
		return Canary{Source: SourceNoCanary, Reason: "no Ready GPU server"}
	}
	sort.SliceStable(pool, func(i, j int) bool {
		a, b := pool[i], pool[j]
		if a.RunningGPUPods != b.RunningGPUPods {
			return a.RunningGPUPods < b.RunningGPUPods
		}
		if a.GPUsRequested != b.GPUsRequested {
			return a.GPUsRequested < b.GPUsRequested
		}
		return a.Name < b.Name
	})
	return Canary{Node: pool[0].Name, Source: SourceFewest,
		Reason: fmt.Sprintf("no canary label; fewest running GPU pods (%d) among %d Ready GPU servers", pool[0].RunningGPUPods, len(pool))}
}

// ErrNodeNotFound is returned when a named node is not in the cluster.
var ErrNodeNotFound = errors.New("node not found in the cluster")
