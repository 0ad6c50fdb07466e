package lab

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/lab/maintainers"
	"github.com/mcp-patch/mcp-patch/round"

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
	// The rollback ended the canary's window: its NodeMaintenance request
	// is gone, and the rollback said how the driver came back.
	nms, err := r.lab.Cluster.Dynamic().Resource(maintainers.NodeMaintenances).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, nm := range nms.Items {
		t.Errorf("NodeMaintenance %s/%s is left after the rollback", nm.GetNamespace(), nm.GetName())
	}
}

// heldBy checks, while a drain waits for another party (actor, who): the
// wait shows in round_status (who holds the node), the round started no
// drain on the node, and the other's object is as it made it.
func heldBy(actor, who string) func(t *testing.T, r *faultRun) {
	return func(t *testing.T, r *faultRun) {
		ctx := context.Background()
		st := callTool(t, r.cs, "round_status", map[string]any{})
		b, err := json.Marshal(st["round"])
		if err != nil {
			t.Fatal(err)
		}
		var view struct{ Waits []round.Wait }
		if err := json.Unmarshal(b, &view); err != nil {
			t.Fatal(err)
		}
		shown := false
		for _, w := range view.Waits {
			for _, h := range w.Holders {
				if string(h.Actor) == actor && h.Who == who && !w.Since.IsZero() && w.Until.After(w.Since) &&
					(actor == "kured" || w.Node == "gpu-canary-1") {
					shown = true
				}
			}
		}
		if !shown {
			t.Errorf("round_status does not show the wait for %s (%s), since and until: %s", actor, who, b)
		}
		waiting := "" // a node drained while the holder held it
		for _, rec := range readJournal(t, r.lab, "2026-11") {
			if rec.Kind == round.KindStepFinished && rec.Step == round.StepDrain {
				waiting = rec.Node
			}
		}
		kc, dyn := r.lab.Cluster.Client(), r.lab.Cluster.Dynamic()
		switch actor {
		case "kured":
			ds, err := kc.AppsV1().DaemonSets(maintainers.KuredNamespace).Get(ctx, maintainers.KuredName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			locks, err := actors.ParseKuredLock(ds.Annotations[maintainers.KuredLockAnnotation])
			if err != nil || len(locks) != 1 || locks[0].NodeID != who {
				t.Errorf("kured's lock while the round waits for it: %v %v, want kured's own for %s", locks, err, who)
			}
			if waiting != "" {
				t.Errorf("%s was drained while kured held its lock", waiting)
			}
		case "node-maintenance":
			nm, err := dyn.Resource(maintainers.NodeMaintenances).Namespace(maintainers.NetworkOperator.Namespace).
				Get(ctx, maintainers.NetworkOperator.MaintenanceName("gpu-canary-1"), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the network operator's NodeMaintenance while the round waits for it: %v", err)
			}
			if id, _, _ := unstructured.NestedString(nm.Object, "spec", "requestorID"); id != who || nm.GetDeletionTimestamp() != nil {
				t.Errorf("the network operator's NodeMaintenance was changed: requestor %q, deleting %v", id, nm.GetDeletionTimestamp())
			}
		case "gpu-operator":
			n, err := kc.CoreV1().Nodes().Get(ctx, "gpu-canary-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if maintainers.LabelGPUDriverUpgradeState+"="+n.Labels[maintainers.LabelGPUDriverUpgradeState] != who || !n.Spec.Unschedulable {
				t.Errorf("the GPU Operator's upgrade on gpu-canary-1 was changed: state %q, cordoned %v", n.Labels[maintainers.LabelGPUDriverUpgradeState], n.Spec.Unschedulable)
			}
		}
		if actor != "kured" && waiting == "gpu-canary-1" {
			t.Error("the canary was drained while another party held it")
		}
	}
}

// othersLeftAsTheyWere: after the round closed, it holds nothing of the
// others' any more: kured's lock free, none of its NodeMaintenance
// requests left, no node cordoned or marked by it, and the canary's driver
// pod Ready on the new kernel.
func othersLeftAsTheyWere(t *testing.T, r *faultRun) {
	ctx := context.Background()
	kc, dyn := r.lab.Cluster.Client(), r.lab.Cluster.Dynamic()
	ds, err := kc.AppsV1().DaemonSets(maintainers.KuredNamespace).Get(ctx, maintainers.KuredName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := ds.Annotations[maintainers.KuredLockAnnotation]; v != "" {
		t.Errorf("kured's lock is still held after the round closed: %s", v)
	}
	// The round held kured's lock while it ran, gave it back at its close,
	// and no wait is left open in its journal.
	var taken, released bool
	open := map[string]bool{}
	for _, rec := range readJournal(t, r.lab, "2026-11") {
		if rec.Kind != round.KindOtherActors {
			continue
		}
		switch rec.Event {
		case round.EventKuredLockTaken:
			taken = true
		case round.EventKuredLockReleased:
			released = taken
		case round.EventWaitBegan:
			open[rec.Node] = true
		case round.EventWaitEnded:
			delete(open, rec.Node)
		}
	}
	if !taken || !released {
		t.Errorf("kured's lock in the journal: taken %v, given back after %v; want both", taken, released)
	}
	if len(open) != 0 {
		t.Errorf("waits never ended in the journal: %v", open)
	}
	nms, err := dyn.Resource(maintainers.NodeMaintenances).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, nm := range nms.Items {
		t.Errorf("NodeMaintenance %s/%s is left after the round closed", nm.GetNamespace(), nm.GetName())
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("%s is still cordoned after the round closed", n.Name)
		}
		for k := range n.Labels {
			if strings.HasPrefix(k, "nvidia.com/gpu-driver-upgrade.skip") {
				t.Errorf("%s still carries %s after the round closed", n.Name, k)
			}
		}
	}
	res, err := gpucheck.WaitDriverPod(ctx, kc, "gpu-canary-1", gpucheck.DriverPodOptions{Namespace: DriverNamespace,
		PodLabel: gpuoperator.PodLabel, Kernel: fleet.NewKernel, Timeout: 2 * time.Minute, FailAfter: 30 * time.Second})
	if err != nil || res.State != gpucheck.DriverReady {
		t.Errorf("the canary's driver pod on %s after the round: %+v %v", fleet.NewKernel, res, err)
	}
}

// personsCordonKeptThenResume: the round stopped before the canary's
// cordon and left the person's cordon and its reason; the person lifts
// it and signs resume, and the round closes leaving nothing of the
// others' held.
func personsCordonKeptThenResume(t *testing.T, r *faultRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	kc := r.lab.Cluster.Client()
	n, err := kc.CoreV1().Nodes().Get(ctx, "gpu-canary-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || !strings.Contains(n.Annotations[maintainers.PersonCordonReason], "RMA") {
		t.Errorf("the person's cordon or its reason is gone: cordoned %v, reason %q", n.Spec.Unschedulable, n.Annotations[maintainers.PersonCordonReason])
	}
	if !strings.Contains(r.out.Stopped.Reason, "RMA") {
		t.Errorf("the stop does not say the person's reason: %s", r.out.Stopped.Reason)
	}
	for _, rec := range readJournal(t, r.lab, "2026-11") {
		if rec.Kind == round.KindStepFinished && rec.Step == round.StepDrain && rec.Node == "gpu-canary-1" {
			t.Error("the canary was drained although a person had cordoned it")
		}
	}
	if err := r.lab.Clear(ctx, "cordoned-by-a-person", "gpu-canary-1"); err != nil {
		t.Fatal(err)
	}
	ask := callTool(t, r.cs, "record_decision", map[string]any{"decision": "resume", "reason": "the RMA is done; the person lifted the cordon"})
	req, _ := ask["approval"].(map[string]any)
	if ask["status"] != "approval_required" || req == nil {
		t.Fatalf("record_decision resume: %v", ask)
	}
	att, err := r.lab.Sign(req["request"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if res := callTool(t, r.cs, "record_decision", map[string]any{"decision": "resume", "attestation": att}); res["status"] != "ok" {
		t.Fatalf("resume: %v", res)
	}
	out, err := r.agent.Run(ctx, "2026-11")
	if err != nil || !out.Closed {
		t.Fatalf("after the person's resume the round should close: %v, stopped %+v", err, out.Stopped)
	}
	othersLeftAsTheyWere(t, r)
}

// driverReadyIn: node's last GPU acceptance in the journal passed and
// named its driver pod Ready on the new kernel.
func driverReadyIn(t *testing.T, l *Lab, node string) bool {
	t.Helper()
	ok := false
	for _, rec := range readJournal(t, l, "2026-11") {
		if rec.Step == round.StepGPUAcceptance && rec.Node == node && rec.Kind == round.KindStepFinished {
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			ok = strings.Contains(string(b), "driver pod") && strings.Contains(string(b), "Ready on "+node+" with kernel "+fleet.NewKernel)
		}
	}
	return ok
}
