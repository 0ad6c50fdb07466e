package lab

import (
	"context"
	"fmt"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

// rbacOptions are the namespaces and names the lab's configuration grants
// the rules on (the configuration's defaults, as in production).
func rbacOptions() rbac.Options {
	c := config.DefaultConfig()
	return rbac.Options{LeaseNamespace: c.Kube.LeaseNamespace, NonceConfigMap: c.Approvals.NonceConfigMap, LeaderLease: c.LeaderElection.LeaseName}
}

// bindServiceAccount applies the roles the project ships (kube/rbac, the
// objects of deploy/kubernetes/rbac.yaml; rules instead when not nil) and
// writes the kubeconfig of their ServiceAccount, which mcp-patch in the
// lab runs with: the round has only those permissions.
func (l *Lab) bindServiceAccount(ctx context.Context, rules []rbac.Rule) error {
	if rules == nil {
		rules = rbac.Rules
	}
	if err := l.ApplyRBAC(ctx, rules); err != nil {
		return err
	}
	o := rbacOptions().WithDefaults()
	l.ServiceAccountKubeconfig = filepath.Join(l.Dir, "mcp-patch.kubeconfig")
	return l.Cluster.ServiceAccountKubeconfig(ctx, o.ServiceAccountNamespace, o.Name, l.ServiceAccountKubeconfig)
}

// ApplyRBAC creates or replaces the ServiceAccount's roles and bindings
// with rules (a test takes a verb away mid-round with it).
func (l *Lab) ApplyRBAC(ctx context.Context, rules []rbac.Rule) error {
	objs := rbac.Build(rules, rbacOptions())
	kc := l.Cluster.Client()
	sa := objs.ServiceAccount
	if _, err := kc.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab RBAC: ServiceAccount: %w", err)
	}
	crs := kc.RbacV1().ClusterRoles()
	if cur, err := crs.Get(ctx, objs.ClusterRole.Name, metav1.GetOptions{}); err == nil {
		cur.Rules = objs.ClusterRole.Rules
		if _, err := crs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("lab RBAC: ClusterRole: %w", err)
		}
	} else if _, err := crs.Create(ctx, objs.ClusterRole, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lab RBAC: ClusterRole: %w", err)
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, objs.ClusterRoleBinding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab RBAC: ClusterRoleBinding: %w", err)
	}
	for i, r := range objs.Roles {
		roles := kc.RbacV1().Roles(r.Namespace)
		if cur, err := roles.Get(ctx, r.Name, metav1.GetOptions{}); err == nil {
			cur.Rules = r.Rules
			if _, err := roles.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("lab RBAC: Role %s/%s: %w", r.Namespace, r.Name, err)
			}
		} else if _, err := roles.Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("lab RBAC: Role %s/%s: %w", r.Namespace, r.Name, err)
		}
		rb := objs.RoleBindings[i]
		if _, err := kc.RbacV1().RoleBindings(rb.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("lab RBAC: RoleBinding %s/%s: %w", rb.Namespace, rb.Name, err)
		}
	}
	return nil
}
