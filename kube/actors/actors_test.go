package actors

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)

func TestParseKuredLock(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []KuredLock
		err      bool
	}{
		{"no lock", "", nil, false},
		{"kured 1.7 form, no created or TTL", `{"nodeID":"aks-linuxnp-26998637-vmss001nli","metadata":{"unschedulable":false}}`,
			[]KuredLock{{NodeID: "aks-linuxnp-26998637-vmss001nli"}}, false},
		{"single holder with TTL", `{"nodeID":"gpu-02","metadata":{"unschedulable":false},"created":"2026-12-07T02:00:00.123456789Z","TTL":3600000000000}`,
			[]KuredLock{{NodeID: "gpu-02", Created: time.Date(2026, 12, 7, 2, 0, 0, 123456789, time.UTC), TTL: time.Hour}}, false},
		{"the docs' manual lock", `{"nodeID":"manual"}`, []KuredLock{{NodeID: "manual"}}, false},
		{"several holders", `{"maxOwners":2,"locks":[{"nodeID":"gpu-01","metadata":{"unschedulable":true},"created":"2026-12-07T02:00:00Z","TTL":0},{"nodeID":"gpu-03","metadata":{"unschedulable":false},"created":"2026-12-07T02:05:00Z","TTL":0}]}`,
			[]KuredLock{{NodeID: "gpu-01", Created: time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)}, {NodeID: "gpu-03", Created: time.Date(2026, 12, 7, 2, 5, 0, 0, time.UTC)}}, false},
		{"several holders, none now", `{"maxOwners":2,"locks":[]}`, []KuredLock{}, false},
		{"not JSON", `gpu-02`, nil, true},
		{"no node", `{"metadata":{}}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKuredLock(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i].NodeID != tc.want[i].NodeID || !got[i].Created.Equal(tc.want[i].Created) || got[i].TTL != tc.want[i].TTL {
					t.Fatalf("lock %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestDecide(t *testing.T) {
	self := Self{RequestorID: "mcp-patch.example.com", KuredLockID: "mcp-patch:srv-a"}
	base := func() Observation { return Observation{Node: "gpu-02", Labels: map[string]string{}} }
	type want struct {
		actor   Actor
		verdict Verdict
		has     string
	}
	for _, tc := range []struct {
		name string
		obs  func(o *Observation)
		want []want
	}{
		{"nobody", func(*Observation) {}, nil},
		{"driver upgrade at rest", func(o *Observation) { o.Labels[LabelGPUDriverUpgradeState] = "upgrade-done" }, nil},
		{"driver upgrade not processed yet", func(o *Observation) { o.Labels[LabelGPUDriverUpgradeState] = "" }, nil},
		{"driver upgrade draining the node", func(o *Observation) {
			o.Labels[LabelGPUDriverUpgradeState] = "drain-required"
			o.Unschedulable = true // the operator's cordon, not a person's
		}, []want{{GPUOperator, Wait, "drain-required"}}},
		{"driver upgrade failed", func(o *Observation) { o.Labels[LabelGPUDriverUpgradeState] = "upgrade-failed" },
			[]want{{GPUOperator, Stop, "failed"}}},
		{"another requestor's NodeMaintenance", func(o *Observation) {
			o.Maintenances = []Maintenance{{Namespace: "nvidia-network-operator", Name: "nvidia-operator-gpu-02", RequestorID: "network-operator.nvidia.com", Created: t0, Phase: "Draining"}}
			o.Unschedulable = true
		}, []want{{NodeMaintenance, Wait, "phase Draining"}}},
		{"our own NodeMaintenance", func(o *Observation) {
			o.Maintenances = []Maintenance{{Namespace: "mcp-patch", Name: "mcp-patch-gpu-02", RequestorID: "mcp-patch.example.com"}}
		}, nil},
		{"kured rebooting this node", func(o *Observation) {
			o.KuredDaemonSet, o.KuredLocks = "kube-system/kured", []KuredLock{{NodeID: "gpu-02", Created: t0.Add(-time.Minute)}}
			o.Unschedulable = true
		}, []want{{Kured, Wait, "for this node"}}},
		{"kured rebooting another node", func(o *Observation) {
			o.KuredDaemonSet, o.KuredLocks = "kube-system/kured", []KuredLock{{NodeID: "gpu-07"}}
		}, []want{{Kured, Wait, "node gpu-07"}}},
		{"kured's lock expired", func(o *Observation) {
			o.KuredDaemonSet, o.KuredLocks = "kube-system/kured", []KuredLock{{NodeID: "gpu-07", Created: t0.Add(-2 * time.Hour), TTL: time.Hour}}
		}, nil},
		{"kured's lock is the round's", func(o *Observation) {
			o.KuredDaemonSet, o.KuredLocks = "kube-system/kured", []KuredLock{{NodeID: "mcp-patch:srv-a", Created: t0}}
		}, nil},
		{"a person's cordon with a reason", func(o *Observation) {
			o.Unschedulable = true
			o.Annotations = map[string]string{"example.com/cordon-reason": "DIMM errors, ticket OPS-1234"}
		}, []want{{Person, Stop, "DIMM errors, ticket OPS-1234"}}},
		{"a person's cordon without a reason", func(o *Observation) { o.Unschedulable = true },
			[]want{{Person, Stop, "a person cordoned the node; the round"}}},
		{"our own cordon", func(o *Observation) { o.Unschedulable, o.CordonIsOurs = true, true }, nil},
		{"a person's taint", func(o *Observation) {
			o.Taints = []corev1.Taint{{Key: "maintenance", Value: "disk", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: t0}}}
		}, []want{{Person, Stop, "maintenance=disk:NoSchedule"}}},
		{"standing and system taints", func(o *Observation) {
			o.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/prefer-not", Effect: corev1.TaintEffectPreferNoSchedule}}
		}, nil},
		{"kured and a person's taint both seen", func(o *Observation) {
			o.KuredDaemonSet, o.KuredLocks = "kube-system/kured", []KuredLock{{NodeID: "gpu-02"}}
			o.Unschedulable = true
			o.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}}
		}, []want{{Kured, Wait, "for this node"}, {Person, Stop, "maintenance=:NoExecute"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.obs(&o)
			got := Decide(o, self, t0)
			if len(got) != len(tc.want) {
				t.Fatalf("holders %v, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if got[i].Actor != w.actor || got[i].Verdict != w.verdict || !strings.Contains(got[i].String(), w.has) {
					t.Fatalf("holder %d = %q (%s, %s), want %s, %s, naming %q", i, got[i], got[i].Actor, got[i].Verdict, w.actor, w.verdict, w.has)
				}
			}
			if AnyStop(got) != func() bool {
				for _, w := range tc.want {
					if w.verdict == Stop {
						return true
					}
				}
				return false
			}() {
				t.Fatalf("AnyStop(%v) wrong", got)
			}
		})
	}
}
