package cli

import (
	"github.com/spf13/cobra"
)

func (a *app) rbacCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rbac",
		Short: "Print the Kubernetes RBAC objects mcp-patch needs, for this configuration's namespaces",
		Long: `Print, for kubectl apply -f -, the ServiceAccount mcp-patch, a ClusterRole and a
Role per namespace with exactly the API requests mcp-patch makes, and their
bindings: kube.lease_namespace holds the window Lease and the used-nonce
ConfigMap (approvals.nonce_configmap), namespace default the GPU smoke pod.
No wildcard, no secrets, no escalate, bind or impersonate.
deploy/kubernetes/rbac.yaml is this output for the default configuration;
mcp-patch doctor checks the permissions with SelfSubjectAccessReview.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			c, err := a.g.load(a.stdio.Getenv)
			if err != nil {
				return err
			}
			b, err := rbacManifests(&c)
			if err != nil {
				return err
			}
			_, err = a.stdio.Stdout.Write(b)
			return err
		},
	}
}
