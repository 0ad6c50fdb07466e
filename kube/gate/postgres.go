package gate

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/mcp-patch/mcp-patch/kube"
)

// CNPGHealthyPhase is the phase CloudNativePG reports for a cluster with
// nothing in progress.
const CNPGHealthyPhase = "Cluster in healthy state"

// PostgresConfig limits and tightens the Postgres check.
type PostgresConfig struct {
	// Namespaces to look in. Empty: all.
	Namespaces []string
	// RequireClusters fails the check when there is no CNPG CRD or no
	// cluster (the intent says Postgres runs here). False: nothing found
	// passes with that as evidence.
	RequireClusters bool
}

// CheckPostgres requires every CNPG Cluster to have readyInstances equal to
// spec.instances, the healthy phase, and currentPrimary equal to
// targetPrimary (no switchover or failover in progress).
func CheckPostgres(ctx context.Context, dc dynamic.Interface, cfg PostgresConfig) Check {
	return timed(func() Check {
		c := Check{Name: NamePostgres}
		items, installed, err := kube.ListCNPGClusters(ctx, dc, cfg.Namespaces)
		if err != nil {
			c.Reason = err.Error()
			return c
		}
		if !installed || len(items) == 0 {
			what := "no CloudNativePG clusters"
			if !installed {
				what = "CloudNativePG CRD (clusters.postgresql.cnpg.io) not installed"
			}
			c.Evidence = append(c.Evidence, what)
			if cfg.RequireClusters {
				c.Reason = what + ", but Postgres clusters are required"
				return c
			}
			c.OK = true
			return c
		}
		var bad []string
		for i := range items {
			line, problem := judgeCNPG(&items[i])
			c.Evidence = append(c.Evidence, line)
			if problem != "" {
				bad = append(bad, problem)
			}
		}
		if len(bad) > 0 {
			c.Reason = strings.Join(bad, "; ")
			return c
		}
		c.OK = true
		return c
	})
}

// judgeCNPG returns one evidence line and, if the cluster is not ready, the
// problem.
func judgeCNPG(u *unstructured.Unstructured) (evidence, problem string) {
	name := u.GetNamespace() + "/" + u.GetName()
	instances := nestedInt(u, "spec", "instances")
	ready := nestedInt(u, "status", "readyInstances")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	current, _, _ := unstructured.NestedString(u.Object, "status", "currentPrimary")
	target, _, _ := unstructured.NestedString(u.Object, "status", "targetPrimary")
	evidence = fmt.Sprintf("%s: ready %d/%d, phase %q, primary %q, target primary %q", name, ready, instances, phase, current, target)

	var why []string
	if instances == 0 || ready != instances {
		why = append(why, fmt.Sprintf("%d of %d instances ready", ready, instances))
	}
	if phase != CNPGHealthyPhase {
		why = append(why, fmt.Sprintf("phase %q", phase))
	}
	switch {
	case current == "":
		why = append(why, "no current primary")
	case current != target:
		why = append(why, fmt.Sprintf("switchover in progress (%s → %s)", current, target))
	}
	if len(why) > 0 {
		problem = name + ": " + strings.Join(why, ", ")
	}
	return evidence, problem
}

// nestedInt reads a number whatever way it was decoded: int64 from the API
// server's JSON, float64 from YAML or encoding/json.
func nestedInt(u *unstructured.Unstructured, path ...string) int64 {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !found || err != nil {
		return 0
	}
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}
