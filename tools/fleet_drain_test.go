package tools

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/round"
)

// drain_node's dry run on the fleet rig asks no approval, evicts nothing
// and journals nothing; a drain of a node without a green simulation is
// refused before anything runs.
func TestFleetDrainDryRunAndRefusal(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	journal := filepath.Join(f.repo, "rounds", fRound, round.JournalFile)
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	m := f.must(StatusOK, "drain_node", map[string]any{"node": "cp-1", "dry_run": true})
	if !strings.Contains(strings.Join(f.lastReasons(m), " "), "dry run: 0 pods would be evicted") {
		t.Fatalf("dry run: %v", m["reasons"])
	}
	if after, _ := os.ReadFile(journal); !bytes.Equal(before, after) {
		t.Fatal("a dry-run drain wrote the journal")
	}
	if st := f.state(); st.Node("cp-1").Window != round.WindowPending {
		t.Fatalf("a dry-run drain opened the window: %s", st.Node("cp-1").Window)
	}

	// gpu-2 is not simulated this round: refused, nothing cordoned.
	if _, res := f.call("drain_node", map[string]any{"node": "gpu-2"}); res.Status != StatusRefused {
		t.Fatalf("drain of a node out of order and unsimulated: %s %v", res.Status, res.Reasons)
	}
	if f.node("gpu-2").Spec.Unschedulable {
		t.Fatal("a refused drain cordoned gpu-2")
	}
	if _, err := f.kube.CoreV1().Pods("inference").Get(t.Context(), "model-5c-b", metav1.GetOptions{}); err != nil {
		t.Fatalf("a refused drain evicted gpu-2's pod: %v", err)
	}
}
