package maintainers

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The embedded objects are the fixtures byte for byte, as crd/SOURCES.md
// says.
func TestEmbeddedAreTheFixtures(t *testing.T) {
	for name, embedded := range map[string][]byte{
		"maintenance-operator-crd-nodemaintenances_v0.3.0.yaml": nodeMaintenanceCRD,
		"gpu-operator-crd-clusterpolicies_v26.7.0.yaml":         clusterPolicyCRD,
		"gpu-operator-sample-clusterpolicy_v26.7.0.yaml":        sampleClusterPolicy,
		"kured-ds_1.23.0.yaml":                                  kuredDaemonSet,
	} {
		t.Run(name, func(t *testing.T) {
			fixture, err := os.ReadFile(filepath.Join("..", "..", "testdata", "fixtures", "k8s", name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fixture, embedded) {
				t.Fatalf("crd/%s differs from testdata/fixtures/k8s/%s", name, name)
			}
		})
	}
}
