package drain

import (
	"context"
	"fmt"
	"sort"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube"
)

// CloudNativePG's pod labels: the cluster a pod belongs to and its role.
const (
	cnpgClusterLabel = "cnpg.io/cluster"
	cnpgRoleLabel    = "cnpg.io/instanceRole"
)

// EvictionCheck is the API server's answer to a dry-run eviction of one
// pod the drain would evict, with the PDBs that cover it.
type EvictionCheck struct {
	PodRef
	// Refused is the API server's refusal now ("" when it would be
	// admitted). A refusal may pass: a PDB allows the next disruption once
	// the pods it counts are healthy again.
	Refused string `json:"refused,omitempty"`
	// Never says why no eviction of this pod can ever be admitted: a PDB
	// that can never allow a disruption ("" when none).
	Never string `json:"never,omitempty"`
	// PDBs name the budgets that select the pod.
	PDBs []string `json:"pdbs,omitempty"`
	// Switchover is true for the primary of a CloudNativePG cluster with
	// replicas: its budget refuses the eviction until the operator
	// switches the primary over, which the cordon starts.
	Switchover bool `json:"switchover,omitempty"`
}

// CheckEvictions asks the API server, with a server-side dry-run eviction
// of every pod the plan evicts, whether it would be admitted now, and
// finds PDBs that can never allow one (see Unsatisfiable). It changes
// nothing.
func CheckEvictions(ctx context.Context, kc kubernetes.Interface, p Evictions) ([]EvictionCheck, error) {
	type nsInfo struct {
		pdbs []policyv1.PodDisruptionBudget
		pods []labels.Set
	}
	byNS := map[string]*nsInfo{}
	info := func(ns string) (*nsInfo, error) {
		if in, ok := byNS[ns]; ok {
			return in, nil
		}
		l, err := kc.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list PDBs in %s: %w", ns, err)
		}
		in := &nsInfo{pdbs: l.Items}
		if len(l.Items) > 0 {
			pods, err := kube.ListPods(ctx, kc, ns, "")
			if err != nil {
				return nil, fmt.Errorf("list pods in %s: %w", ns, err)
			}
			for i := range pods {
				if pods[i].DeletionTimestamp == nil {
					in.pods = append(in.pods, labels.Set(pods[i].Labels))
				}
			}
		}
		byNS[ns] = in
		return in, nil
	}
	out := make([]EvictionCheck, 0, len(p.pods))
	for i := range p.pods {
		pod := &p.pods[i]
		c := EvictionCheck{PodRef: podRef(pod)}
		v, err := evictionCheck(ctx, kc, pod)
		if err != nil {
			// Not a PDB that may relent: the drain could evict nothing.
			return nil, fmt.Errorf("check evictions on %s: %w", p.Node, err)
		}
		if !admitted(v) {
			c.Refused = v
		}
		in, err := info(pod.Namespace)
		if err != nil {
			return nil, fmt.Errorf("check evictions on %s: %w", p.Node, err)
		}
		instances := 0
		if cl := pod.Labels[cnpgClusterLabel]; cl != "" && pod.Labels[cnpgRoleLabel] == "primary" {
			for _, l := range in.pods {
				if l[cnpgClusterLabel] == cl {
					instances++
				}
			}
		}
		for _, pdb := range in.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if pdb.Spec.Selector == nil || err != nil || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			c.PDBs = append(c.PDBs, pdb.Name)
			selected := 0
			for _, l := range in.pods {
				if sel.Matches(l) {
					selected++
				}
			}
			if why := Unsatisfiable(pdb, selected, instances); why != "" && c.Never == "" {
				c.Never = why
			}
		}
		if instances > 1 {
			c.Switchover, c.Refused = true, ""
		}
		sort.Strings(c.PDBs)
		out = append(out, c)
	}
	return out, nil
}

// admitted reports whether evictionVerdict's answer means admitted.
func admitted(verdict string) bool {
	return verdict == "eviction would be admitted now (it was refused or timed out earlier)"
}

// Unsatisfiable says why pdb can never allow one eviction of the selected
// pods it covers, or "" when it can: maxUnavailable 0, or minAvailable
// equal to (or above) the pods it selects. A CloudNativePG primary is the
// exception: the operator switches it over when its node is cordoned, so
// its budget blocks for ever only when the cluster has a single instance
// (cnpgInstances is the cluster's instance count for a primary, 0 for any
// other pod).
func Unsatisfiable(pdb policyv1.PodDisruptionBudget, selected, cnpgInstances int) string {
	name := pdb.Namespace + "/" + pdb.Name
	switch {
	case cnpgInstances == 1:
		return fmt.Sprintf("it is the primary of a single-instance CloudNativePG cluster, so it has no replica to switch over to, and the pod disruption budget %s keeps it", name)
	case cnpgInstances > 1:
		return ""
	}
	if mu := pdb.Spec.MaxUnavailable; mu != nil && isZero(*mu) {
		return fmt.Sprintf("the pod disruption budget %s has maxUnavailable %s: it never allows an eviction", name, mu.String())
	}
	if ma := pdb.Spec.MinAvailable; ma != nil && selected > 0 {
		want, err := intstr.GetScaledValueFromIntOrPercent(ma, selected, true)
		if err == nil && want >= selected {
			return fmt.Sprintf("the pod disruption budget %s has minAvailable %s for %d pod(s): it never allows an eviction", name, ma.String(), selected)
		}
	}
	return ""
}

func isZero(v intstr.IntOrString) bool {
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, true)
	return err == nil && n == 0
}
