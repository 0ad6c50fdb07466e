package rbac

import (
	"bytes"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Objects are the RBAC objects of one rendering: the ServiceAccount, the
// ClusterRole and its binding, a Role and binding per namespace.
type Objects struct {
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	Roles              []*rbacv1.Role
	RoleBindings       []*rbacv1.RoleBinding
}

const managedBy = "app.kubernetes.io/name"

// Build turns rules into RBAC objects for o. Rules of one scope, group,
// resource and object name are one PolicyRule; verbs keep their order
// across rules, resources are sorted.
func Build(rules []Rule, o Options) Objects {
	o = o.WithDefaults()
	labels := map[string]string{managedBy: "mcp-patch"}
	meta := func(ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: o.Name, Namespace: ns, Labels: labels}
	}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: o.Name, Namespace: o.ServiceAccountNamespace}
	objs := Objects{
		ServiceAccount: &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(o.ServiceAccountNamespace)},
		ClusterRole: &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: meta(""), Rules: policyRules(rules, Cluster, o)},
		ClusterRoleBinding: &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(""), Subjects: []rbacv1.Subject{subject},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.Name}},
	}
	byNS := map[string][]rbacv1.PolicyRule{}
	var namespaces []string
	for _, s := range []Scope{LeaseNamespace, SmokeNamespace} {
		ns := o.Namespace(s)
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
		byNS[ns] = mergeRules(append(byNS[ns], policyRules(rules, s, o)...))
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		if len(byNS[ns]) == 0 {
			continue
		}
		objs.Roles = append(objs.Roles, &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
			ObjectMeta: meta(ns), Rules: byNS[ns]})
		objs.RoleBindings = append(objs.RoleBindings, &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: meta(ns), Subjects: []rbacv1.Subject{subject},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: o.Name}})
	}
	return objs
}

// policyRules are the rules of one scope as PolicyRules, merged.
func policyRules(rules []Rule, s Scope, o Options) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if r.Scope != s {
			continue
		}
		pr := rbacv1.PolicyRule{APIGroups: []string{r.Group}, Resources: []string{r.Resource}, Verbs: slices.Clone(r.Verbs)}
		if n := o.resourceName(r.ResourceName); n != "" {
			pr.ResourceNames = []string{n}
		}
		out = append(out, pr)
	}
	return mergeRules(out)
}

// mergeRules joins the verbs of rules on the same group, resource and
// names, and sorts by group, resource, names.
func mergeRules(in []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	key := func(r rbacv1.PolicyRule) string {
		return fmt.Sprint(r.APIGroups, r.Resources, r.ResourceNames)
	}
	var out []rbacv1.PolicyRule
	for _, r := range in {
		i := slices.IndexFunc(out, func(o rbacv1.PolicyRule) bool { return key(o) == key(r) })
		if i < 0 {
			out = append(out, r)
			continue
		}
		for _, v := range r.Verbs {
			if !slices.Contains(out[i].Verbs, v) {
				out[i].Verbs = append(out[i].Verbs, v)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b rbacv1.PolicyRule) int {
		for _, c := range [][2]string{{a.APIGroups[0], b.APIGroups[0]}, {a.Resources[0], b.Resources[0]}, {fmt.Sprint(a.ResourceNames), fmt.Sprint(b.ResourceNames)}} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return out
}

// Manifests renders rules for o as one multi-document YAML file, the
// ServiceAccount first, ready for kubectl apply -f.
func Manifests(rules []Rule, o Options) ([]byte, error) {
	o = o.WithDefaults()
	objs := Build(rules, o)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# mcp-patch's Kubernetes permissions: exactly the API requests its code makes\n"+
		"# (no wildcard, no secrets, no escalate/bind/impersonate). Rendered from kube/rbac.Rules\n"+
		"# for kube.lease_namespace %s and the GPU smoke pod's namespace %s;\n"+
		"# `mcp-patch rbac` renders it for another configuration.\n", o.LeaseNamespace, o.SmokeNamespace)
	docs := []any{objs.ServiceAccount, objs.ClusterRole, objs.ClusterRoleBinding}
	for i := range objs.Roles {
		docs = append(docs, objs.Roles[i], objs.RoleBindings[i])
	}
	for _, d := range docs {
		y, err := yaml.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("render RBAC manifests: %w", err)
		}
		b.WriteString("---\n")
		b.Write(bytes.ReplaceAll(y, []byte("  creationTimestamp: null\n"), nil))
	}
	return b.Bytes(), nil
}
