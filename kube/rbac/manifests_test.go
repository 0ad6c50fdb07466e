package rbac_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/rbac.yaml")

var shipped = filepath.Join("..", "..", "deploy", "kubernetes", "rbac.yaml")

// TestShippedManifests: deploy/kubernetes/rbac.yaml is what kube/rbac.Rules
// renders for the default configuration (-update rewrites it).
func TestShippedManifests(t *testing.T) {
	got, err := rbac.Manifests(rbac.Rules, rbac.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(shipped), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shipped, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is not what kube/rbac.Rules renders: go test ./kube/rbac -run TestShippedManifests -update", shipped)
	}
}

// TestLeastPrivilege reads the shipped file back as RBAC objects: no
// wildcard, no secret, no escalate/bind/impersonate, nothing but the
// resources the rules name, and every rule bound to the ServiceAccount.
func TestLeastPrivilege(t *testing.T) {
	b, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	var all []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(b), "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var obj struct {
			Kind     string              `json:"kind"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
			Subjects []rbacv1.Subject    `json:"subjects"`
		}
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			// Strict decoding of the whole object is the job of the lab's
			// apply; here only what the rules say matters.
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("decode %q: %v", doc, err)
			}
		}
		kinds[obj.Kind]++
		all = append(all, obj.Rules...)
		for _, s := range obj.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Name != "mcp-patch" {
				t.Errorf("%s binds %s %s, not the mcp-patch ServiceAccount", obj.Kind, s.Kind, s.Name)
			}
		}
	}
	if kinds["ClusterRole"] != 1 || kinds["Role"] < 1 || kinds["ClusterRoleBinding"] != 1 || kinds["RoleBinding"] != kinds["Role"] || kinds["ServiceAccount"] != 1 {
		t.Errorf("objects %v: want one ServiceAccount, ClusterRole and ClusterRoleBinding, a RoleBinding per Role", kinds)
	}
	for _, r := range all {
		for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
			if slices.Contains(list, "*") {
				t.Errorf("rule %v has a wildcard", r)
			}
		}
		for _, v := range r.Verbs {
			if v == "escalate" || v == "bind" || v == "impersonate" || v == "*" {
				t.Errorf("rule %v grants %s", r, v)
			}
		}
		for _, res := range r.Resources {
			if res == "secrets" || strings.HasPrefix(res, "secrets/") || strings.HasPrefix(res, "serviceaccounts") || slices.Contains(r.APIGroups, rbacv1.GroupName) {
				t.Errorf("rule %v touches %s", r, res)
			}
			if strings.HasSuffix(res, "/exec") || strings.HasSuffix(res, "/attach") || strings.HasSuffix(res, "/proxy") {
				t.Errorf("rule %v grants %s", r, res)
			}
		}
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %v grants non-resource URLs", r)
		}
	}
	if len(all) < 10 {
		t.Fatalf("%d rules read from %s", len(all), shipped)
	}
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestOptionsPlaceRoles: another lease namespace and names move the
// namespaced rules; one namespace for both gives one Role.
func TestOptionsPlaceRoles(t *testing.T) {
	objs := rbac.Build(rbac.Rules, rbac.Options{LeaseNamespace: "ops", SmokeNamespace: "ops", LeaseName: "w", LeaderLease: "l", NonceConfigMap: "n"})
	if len(objs.Roles) != 1 || objs.Roles[0].Namespace != "ops" {
		t.Fatalf("roles %+v: want one in ops", objs.Roles)
	}
	var names []string
	for _, r := range objs.Roles[0].Rules {
		names = append(names, r.ResourceNames...)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"l", "n", "w"}) {
		t.Errorf("resourceNames %v, want [l n w]", names)
	}
	if objs.ServiceAccount.Namespace != "ops" || objs.RoleBindings[0].Subjects[0].Namespace != "ops" {
		t.Errorf("ServiceAccount in %q", objs.ServiceAccount.Namespace)
	}
	two := rbac.Build(rbac.Rules, rbac.Options{})
	if len(two.Roles) != 2 || two.Roles[0].Namespace != "default" || two.Roles[1].Namespace != "kube-system" {
		t.Errorf("default roles in %v, want default and kube-system", []string{two.Roles[0].Namespace, two.Roles[1].Namespace})
	}
	without := rbac.Without(rbac.Rules, "", "pods/eviction", "create")
	if _, ok := rbac.Lookup(without, "", "pods/eviction", "create"); ok || len(without) != len(rbac.Rules)-1 {
		t.Errorf("Without left create on pods/eviction (%d rules of %d)", len(without), len(rbac.Rules))
	}
}
