package maintainers

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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
// and served), creates the sample ClusterPolicy as cluster-policy and
// kured's ServiceAccount and DaemonSet as upstream ships them
// (kube-system/kured; under kwok its pods need no image). Server-side
// apply makes a second call change nothing: a lock annotation written
// since stays.
func Install(ctx context.Context, c *cluster.Cluster) error {
	policy, err := renamed(sampleClusterPolicy, ClusterPolicyName)
	if err != nil {
		return fmt.Errorf("install the other maintainers: sample ClusterPolicy: %w", err)
	}
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
		{"cluster-policy.json", policy},
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
	return nil
}

// renamed is a one-object YAML document as JSON under another name.
func renamed(doc []byte, name string) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no metadata")
	}
	meta["name"] = name
	return json.Marshal(obj)
}
