package cli

import (
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

// rbacOptions are the namespaces and names the configuration grants the
// rules on.
func rbacOptions(c *config.Config) rbac.Options {
	return rbac.Options{LeaseNamespace: c.Kube.LeaseNamespace, NonceConfigMap: c.Approvals.NonceConfigMap, LeaderLease: c.LeaderElection.LeaseName}
}

// permissionChecks ask the API server, with a SelfSubjectAccessReview per
// verb, whether the configured credentials may make every request of
// kube/rbac.Rules, and name each one they may not with the rule that
// grants it. Nothing is changed.
func permissionChecks(ctx context.Context, cl *kube.Clients, clErr error, c *config.Config) []check {
	if clErr != nil {
		return []check{failf("permissions", "not checked: the API server did not answer")}
	}
	o := rbacOptions(c)
	missing, err := rbac.Check(ctx, cl.Kube, rbac.Rules, o)
	if err != nil {
		return []check{failf("permissions", "%v", err)}
	}
	if len(missing) == 0 {
		n := 0
		for _, r := range rbac.Rules {
			n += len(r.Verbs)
		}
		return []check{okf("permissions", "all %d requests of deploy/kubernetes/rbac.yaml allowed (SelfSubjectAccessReview)", n)}
	}
	out := make([]check, 0, len(missing))
	for _, m := range missing {
		where := "every namespace"
		if m.Namespace != "" {
			where = "namespace " + m.Namespace
		}
		// Two rules on one resource differ by the object they name
		// (the window Lease and the leader Lease): each has its line.
		name := "permission " + m.Verb + " " + m.Rule.Resource
		if m.Name != "" {
			name += " " + m.Name
		}
		out = append(out, failf(name, "not allowed in %s (needed for %s); grant %s: kubectl apply -f deploy/kubernetes/rbac.yaml, or `mcp-patch rbac` for this configuration",
			where, m.Rule.Why, m.Grant))
	}
	return out
}

// rbacManifests renders the RBAC objects for the configuration.
func rbacManifests(c *config.Config) ([]byte, error) {
	b, err := rbac.Manifests(rbac.Rules, rbacOptions(c))
	if err != nil {
		return nil, fmt.Errorf("rbac: %w", err)
	}
	return b, nil
}
