package lab

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/gpuoperator"
)

// nothingCordoned: a stop at plan time left every node schedulable.
func nothingCordoned(t *testing.T, r *faultRun) {
	nodes, err := r.lab.Cluster.Client().CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("%s is cordoned after a stop at plan time", n.Name)
		}
	}
}

// driverBackAfterRollback: the canary's driver failed to build for the
// new kernel; rolled back to the old kernel, its driver pod is Ready again
// on it, a pod of the rollback's boot.
func driverBackAfterRollback(t *testing.T, r *faultRun) {
	began := time.Now()
	rollBackAndProve(t, r, "gpu-canary-1", false)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := gpucheck.WaitDriverPod(ctx, r.lab.Cluster.Client(), "gpu-canary-1", gpucheck.DriverPodOptions{Namespace: DriverNamespace,
		PodLabel: gpuoperator.PodLabel, Kernel: fleet.OldKernel, BootedAt: began, Timeout: 3 * time.Minute, FailAfter: 30 * time.Second})
	if err != nil || res.State != gpucheck.DriverReady {
		t.Fatalf("the canary's driver pod after the rollback to %s: %+v %v, want Ready", fleet.OldKernel, res, err)
	}
}
