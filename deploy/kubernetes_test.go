package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

func TestMain(m *testing.M) { labkube.Main(m) }

const deploymentFile = "kubernetes/deployment.yaml"

// inCluster is deploy/kubernetes/deployment.yaml, each object decoded
// strictly (a field the API does not have fails).
type inCluster struct {
	configMap  *corev1.ConfigMap
	deployment *appsv1.Deployment
	pdb        *policyv1.PodDisruptionBudget
	service    *corev1.Service
}

func readInCluster(t *testing.T) inCluster {
	t.Helper()
	b, err := os.ReadFile(deploymentFile)
	if err != nil {
		t.Fatal(err)
	}
	var got inCluster
	for i, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s document %d: %v", deploymentFile, i, err)
		}
		var into any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ConfigMap":
			got.configMap = &corev1.ConfigMap{}
			into = got.configMap
		case "apps/v1 Deployment":
			got.deployment = &appsv1.Deployment{}
			into = got.deployment
		case "policy/v1 PodDisruptionBudget":
			got.pdb = &policyv1.PodDisruptionBudget{}
			into = got.pdb
		case "v1 Service":
			got.service = &corev1.Service{}
			into = got.service
		default:
			t.Fatalf("%s document %d: unexpected %s %s", deploymentFile, i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s document %d (%s): %v", deploymentFile, i, meta.Kind, err)
		}
	}
	if got.configMap == nil || got.deployment == nil || got.pdb == nil || got.service == nil {
		t.Fatalf("%s lacks an object: %+v", deploymentFile, got)
	}
	return got
}

// TestInClusterObjectsHoldTheRules: two replicas on two nodes, a PDB that
// lets a drain evict one, the shipped ServiceAccount, the node each runs
// on from the downward API, and a config that loads and elects a leader.
func TestInClusterObjectsHoldTheRules(t *testing.T) {
	o := readInCluster(t)
	d := o.deployment
	sa := rbac.Build(rbac.Rules, rbac.Options{}).ServiceAccount
	for _, m := range []metav1.ObjectMeta{o.configMap.ObjectMeta, d.ObjectMeta, o.pdb.ObjectMeta, o.service.ObjectMeta} {
		if m.Namespace != sa.Namespace {
			t.Errorf("%s is in namespace %q, the ServiceAccount of rbac.yaml in %q", m.Name, m.Namespace, sa.Namespace)
		}
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas: %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want rbac.yaml's %q", pod.ServiceAccountName, sa.Name)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	selects := func(what string, s *metav1.LabelSelector) {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil || sel.Empty() || !sel.Matches(podLabels) {
			t.Errorf("%s selector %v does not select the pods (%v): %v", what, s, podLabels, err)
		}
	}
	selects("the Deployment's", d.Spec.Selector)
	selects("the PodDisruptionBudget's", o.pdb.Spec.Selector)
	if sel := labels.SelectorFromSet(o.service.Spec.Selector); len(o.service.Spec.Selector) == 0 || !sel.Matches(podLabels) {
		t.Errorf("the Service's selector %v does not select the pods", o.service.Spec.Selector)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("no required pod anti-affinity: %+v", pod.Affinity)
	} else {
		term := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
		if term.TopologyKey != "kubernetes.io/hostname" {
			t.Errorf("anti-affinity on %q, want kubernetes.io/hostname", term.TopologyKey)
		}
		selects("the anti-affinity's", term.LabelSelector)
	}
	if m := o.pdb.Spec.MinAvailable; m == nil || m.IntValue() != 1 || o.pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget: minAvailable %v, maxUnavailable %v; want minAvailable 1", m, o.pdb.Spec.MaxUnavailable)
	}

	i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "mcp-patch" })
	if i < 0 {
		t.Fatal("no container mcp-patch")
	}
	c := pod.Containers[i]
	if !slices.Contains(c.Args, "serve") || !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--http=") }) {
		t.Errorf("the container does not run serve --http: %v", c.Args)
	}
	j := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "MCP_PATCH_NODE_NAME" })
	if j < 0 || c.Env[j].ValueFrom == nil || c.Env[j].ValueFrom.FieldRef == nil || c.Env[j].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("MCP_PATCH_NODE_NAME is not spec.nodeName from the downward API: %+v", c.Env)
	}

	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(o.configMap.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ApplyEnv(func(k string) string { return map[string]string{"MCP_PATCH_NODE_NAME": "cp-1"}[k] })
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the ConfigMap's config.yaml: %v", err)
	}
	if !cfg.LeaderElection.Enabled || cfg.NodeName != "cp-1" || cfg.Kube.LeaseNamespace != sa.Namespace {
		t.Errorf("config: leader_election.enabled %v, node_name %q, kube.lease_namespace %q (rbac.yaml's roles are in %q)",
			cfg.LeaderElection.Enabled, cfg.NodeName, cfg.Kube.LeaseNamespace, sa.Namespace)
	}
}

// TestInClusterObjectsDryRun: the lab's kube-apiserver takes every object
// of deployment.yaml in a server-side dry run with strict field
// validation (its admission and defaulting included), and refuses a
// broken one.
func TestInClusterObjectsDryRun(t *testing.T) {
	kc := labkube.Cluster(t).Client()
	o := readInCluster(t)
	if err := dryRun(t, kc, o); err != nil {
		t.Fatal(err)
	}
	broken := o
	broken.deployment = o.deployment.DeepCopy()
	broken.deployment.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = ""
	err := dryRun(t, kc, broken)
	if err == nil || !strings.Contains(err.Error(), "topologyKey") {
		t.Fatalf("a Deployment with an empty anti-affinity topologyKey: %v, want it refused", err)
	}
	t.Logf("refused as it should be: %v", err)
}

func dryRun(t *testing.T, kc kubernetes.Interface, o inCluster) error {
	ctx := t.Context()
	opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	ns := o.deployment.Namespace
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, o.configMap, opts); err != nil {
		return err
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, o.deployment, opts); err != nil {
		return err
	}
	if _, err := kc.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, o.pdb, opts); err != nil {
		return err
	}
	_, err := kc.CoreV1().Services(ns).Create(ctx, o.service, opts)
	return err
}
