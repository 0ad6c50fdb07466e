package window_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestDecideEtcdBeforeWindow(t *testing.T) {
	sick := &gate.Check{Name: gate.NameEtcd, Reason: "member etcd-2 unreachable"}
	warned := &gate.Check{Name: gate.NameEtcd, OK: true, Warnings: []string{"etcd-3 is learner"}}
	healthy := &gate.Check{Name: gate.NameEtcd, OK: true}
	for _, tc := range []struct {
		name string
		role round.Role
		etcd *gate.Check
		stop string // a reason that must be named; "" = no stop
	}{
		{name: "control plane, etcd down", role: round.RoleControlPlane, etcd: sick, stop: "etcd-2 unreachable"},
		{name: "control plane, etcd warns", role: round.RoleControlPlane, etcd: warned, stop: "etcd-3 is learner"},
		{name: "control plane, etcd healthy", role: round.RoleControlPlane, etcd: healthy},
		{name: "control plane, no etcd check", role: round.RoleControlPlane},
		{name: "GPU server, etcd down", role: round.RoleGPU, etcd: sick},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := window.DecideEtcdBeforeWindow("cp-1", tc.role, tc.etcd)
			if tc.stop == "" {
				if err != nil {
					t.Fatalf("want no stop, got %v", err)
				}
				return
			}
			var st *window.Stop
			if !errors.As(err, &st) || st.Step != round.StepDrain || st.Node != "cp-1" ||
				!strings.Contains(st.Error(), tc.stop) || !strings.Contains(st.Error(), "nothing was cordoned") {
				t.Fatalf("got %v, want a stop at the drain naming %q", err, tc.stop)
			}
		})
	}
}

// A dry-run drain evicts nothing for real, cordons nothing, records
// nothing and leaves the Lease alone.
func TestDryRunDrainChangesNothing(t *testing.T) {
	r := newRig(t)
	r.kube.Pods[node] = []drain.PodRef{{Namespace: "ml", Name: "trainer-0"}, {Namespace: "ml", Name: "trainer-1"}}
	o, err := window.DryRunDrain(context.Background(), r.kube, r.j.RoundID(), node, window.DrainOptions{Identity: "server-a"}, nil)
	if err != nil || o.Drain == nil || len(o.Drain.Evicted) != 2 || !strings.Contains(o.Reasons[0], "2 pods would be evicted") {
		t.Fatalf("dry run: %+v %v", o, err)
	}
	if len(r.kube.Pods[node]) != 2 || r.kube.Cordoned[node] != "" {
		t.Fatalf("the dry run changed the cluster: pods %v, cordoned %v", r.kube.Pods[node], r.kube.Cordoned)
	}
	if d := r.j.State().Node(node).Steps[round.StepDrain]; (d != nil && (d.State != round.Pending || len(d.Attempts) != 0)) || r.lease.Holds != 0 {
		t.Fatalf("the dry run recorded or held: drain %+v, holds %d", d, r.lease.Holds)
	}
	if st, _ := r.kube.CordonState(context.Background(), node); st.Unschedulable {
		t.Fatal("the dry run cordoned the node")
	}
}

// The jobs a drain waits for are what a person reads: listed with the
// wait's bound, outside the digest.
func TestDrainPlanWaitFor(t *testing.T) {
	p := window.DrainPlan{Node: node, PreviewDigest: "sha256:pods", Evict: []string{"evict ml/trainer-0 (replicaset trainer)"}}
	w := p.WaitFor([]drain.PodRef{{Namespace: "batch", Name: "train-a"}, {Namespace: "batch", Name: "train-b"}}, 90*time.Minute)
	if w.JobWaitMinutes != 90 || len(w.WaitsFor) != 2 || w.WaitsFor[1] != "batch/train-b" || w.Digest() != p.Digest() {
		t.Fatalf("plan %+v (digest %s, was %s)", w, w.Digest(), p.Digest())
	}
	if !strings.Contains(strings.Join(w.Summary(), "\n"), "wait for batch/train-a") {
		t.Fatalf("summary does not list the jobs: %q", w.Summary())
	}
	if none := p.WaitFor(nil, 30*time.Minute); len(none.WaitsFor) != 0 || none.JobWaitMinutes != 30 || len(p.WaitsFor) != 0 {
		t.Fatalf("no job running: %+v (the plan it came from: %+v)", none, p)
	}
}
