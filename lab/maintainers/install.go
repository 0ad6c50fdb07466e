package maintainers

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

var (
	//go:embed crd/maintenance-operator-crd-nodemaintenances_v0.3.0.yaml
	nodeMaintenanceCRD []byte
	//go:embed crd/gpu-operator-crd-clusterpolicies_v26.7.0.yaml
	clusterPolicyCRD []byte
	//go:embed crd/gpu-operator-sample-clusterpolicy_v26.7.0.yaml
	sampleClusterPolicy []byte
	//go:embed crd/kured-ds_1.23.0.yaml
	kuredDaemonSet []byte
)

// Where kured keeps its lock as upstream ships it (--ds-namespace,
// --ds-name), and the ClusterPolicy's name as the GPU Operator's Helm
// chart creates it.
const (
	KuredNamespace    = "kube-system"
	KuredName         = "kured"
	ClusterPolicyName = "cluster-policy"
)

// Install registers the maintenance operator's NodeMaintenance CRD and
// the GPU Operator's ClusterPolicy CRD (each waited for until Established
// and served), kured's ServiceAccount and DaemonSet as upstream ships
// them (kube-system/kured; under kwok its pods need no image) and the
// sample ClusterPolicy as cluster-policy. A second call changes nothing:
// the CRDs and kured's objects are server-side applied (a lock
// annotation written since stays), the ClusterPolicy created only where
// there is none.
func Install(ctx context.Context, c *cluster.Cluster) error {
	dir, err := os.MkdirTemp("", "mcp-patch-maintainers-")
	if err != nil {
		return fmt.Errorf("install the other maintainers: %w", err)
	}
	defer os.RemoveAll(dir)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"nodemaintenances-crd.yaml", nodeMaintenanceCRD},
		{"clusterpolicies-crd.yaml", clusterPolicyCRD},
		{"kured-ds.yaml", kuredDaemonSet},
	} {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, f.data, 0o600); err != nil {
			return fmt.Errorf("install the other maintainers: %w", err)
		}
		if _, err := c.ApplyFile(ctx, path); err != nil {
			return fmt.Errorf("install the other maintainers: %w", err)
		}
	}
	return createClusterPolicy(ctx, c.Dynamic())
}

// ClusterPolicies is the GPU Operator's resource (cluster-scoped).
var ClusterPolicies = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}

// createClusterPolicy creates the sample as cluster-policy the way a
// person does (kubectl create): the sample has null fields
// (validator.plugin) that the API server prunes on create but refuses in
// a server-side apply. One there already is left as it is.
func createClusterPolicy(ctx context.Context, dyn dynamic.Interface) error {
	var obj map[string]any
	if err := yaml.Unmarshal(sampleClusterPolicy, &obj); err != nil {
		return fmt.Errorf("install the other maintainers: sample ClusterPolicy: %w", err)
	}
	policy := &unstructured.Unstructured{Object: obj}
	policy.SetName(ClusterPolicyName)
	_, err := dyn.Resource(ClusterPolicies).Create(ctx, policy, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install the other maintainers: create ClusterPolicy %s: %w", ClusterPolicyName, err)
	}
	return nil
}
