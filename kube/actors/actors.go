// Package actors sees who else maintains a node before the round cordons
// it: the GPU Operator's driver upgrade (its per-node state label), a
// NodeMaintenance from another requestor (the maintenance operator), kured's
// reboot lock, and a cordon or taint a person made. Decide is the pure rule
// (table-tested); Observe reads what it needs from the API server and
// changes nothing: the round waits for a holder or stops for a person, and
// never uncordons, untaints or edits what it did not make.
package actors

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The other actors' names for things (NVIDIA k8s-operator-libs
// pkg/upgrade/consts.go with driver name "gpu"; kured's defaults).
const (
	// LabelGPUDriverUpgradeState is the GPU Operator's per-node upgrade
	// state; absent or "" (not processed) and upgrade-done are at rest.
	LabelGPUDriverUpgradeState = "nvidia.com/gpu-driver-upgrade-state"
	UpgradeStateDone           = "upgrade-done"
	UpgradeStateFailed         = "upgrade-failed"
	// KuredLockAnnotation is kured's default lock annotation, on its
	// DaemonSet (kube-system/kured by default), not on nodes.
	KuredLockAnnotation = "weave.works/kured-node-lock"
)

// NodeMaintenances is the maintenance operator's resource
// (maintenance.nvidia.com/v1alpha1, namespaced).
var NodeMaintenances = schema.GroupVersionResource{Group: "maintenance.nvidia.com", Version: "v1alpha1", Resource: "nodemaintenances"}

// Actor names another party that maintains nodes.
type Actor string

// The actors.
const (
	GPUOperator     Actor = "gpu-operator"
	NodeMaintenance Actor = "node-maintenance"
	Kured           Actor = "kured"
	Person          Actor = "person"
)

// Verdict is what the round does about a holder.
type Verdict string

// Verdicts: Wait (bounded: the holder lets go by itself) or Stop (a person
// looks: a failed driver upgrade, a person's cordon or taint).
const (
	Wait Verdict = "wait"
	Stop Verdict = "stop"
)

// Holder is another party that holds the node now.
type Holder struct {
	Actor Actor `json:"actor"`
	// Who names the holder as the cluster shows it (a requestor id, the
	// node kured's lock is for, a taint key).
	Who string `json:"who"`
	// Since is when the hold began, where the cluster says; zero otherwise.
	Since   time.Time `json:"since,omitzero"`
	What    string    `json:"what"`
	Verdict Verdict   `json:"verdict"`
}

// String says the hold in words.
func (h Holder) String() string {
	s := fmt.Sprintf("%s (%s) holds it: %s", h.Actor, h.Who, h.What)
	if !h.Since.IsZero() {
		s += ", since " + h.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// Maintenance is one NodeMaintenance object for the node.
type Maintenance struct {
	Namespace, Name string
	RequestorID     string
	Additional      []string
	Created         time.Time
	// Phase is the Ready condition's reason (Pending … Ready), "" before.
	Phase string
}

// KuredLock is one holder of kured's lock (one for --concurrency=1, up to
// maxOwners otherwise).
type KuredLock struct {
	NodeID  string        `json:"nodeID"`
	Created time.Time     `json:"created"`
	TTL     time.Duration `json:"TTL"`
}

// ParseKuredLock reads kured's lock annotation: the single holder's JSON
// ({"nodeID":…,"metadata":{…},"created":…,"TTL":…}) or the multi-holder
// form ({"maxOwners":n,"locks":[…]}); "" is no lock.
func ParseKuredLock(v string) ([]KuredLock, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw struct {
		KuredLock
		Locks *[]KuredLock `json:"locks"`
	}
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("kured lock %q: %w", v, err)
	}
	if raw.Locks != nil {
		return *raw.Locks, nil
	}
	if raw.NodeID == "" {
		return nil, fmt.Errorf("kured lock %q: no nodeID", v)
	}
	return []KuredLock{raw.KuredLock}, nil
}

// Observation is what the cluster shows about a node's other maintainers.
type Observation struct {
	Node          string
	Labels        map[string]string
	Annotations   map[string]string
	Unschedulable bool
	// CordonIsOurs: the node's cordon record names this server (any round).
	CordonIsOurs bool
	Taints       []corev1.Taint
	// Maintenances are the NodeMaintenance objects naming the node (none
	// where the maintenance operator is not installed).
	Maintenances []Maintenance
	// KuredLocks are the holders of kured's lock; KuredDaemonSet names the
	// DaemonSet that carries it ("" where kured is not installed).
	KuredLocks     []KuredLock
	KuredDaemonSet string
}

// Self is how this server shows itself to the others.
type Self struct {
	// RequestorID is this server's NodeMaintenance requestor id.
	RequestorID string
	// KuredLockID is the nodeID this server writes into kured's lock when
	// it takes it for the round.
	KuredLockID string
	// StandingTaints are taint keys that are part of the node's shape
	// (a GPU dedication, the control plane's), never a person's hold.
	StandingTaints []string
}

// DefaultStandingTaints are taint keys no person adds for maintenance.
var DefaultStandingTaints = []string{
	"node-role.kubernetes.io/control-plane",
	"node-role.kubernetes.io/master",
	"nvidia.com/gpu",
}

// reasonKeys are annotation key suffixes a person's cordon reason is read
// from, where a team keeps one.
var reasonKeys = []string{"cordon-reason", "maintenance-reason", "/reason"}

// Decide names who else holds the node, the holders in a stable order. A
// cordon is a person's only when no other actor explains it and it is not
// ours (the others cordon when they take a node); a taint is a person's
// when it is neither a system taint (node.kubernetes.io/…, which a cordon
// adds) nor a standing one.
func Decide(o Observation, self Self, now time.Time) []Holder {
	var hs []Holder
	if st, ok := o.Labels[LabelGPUDriverUpgradeState]; ok && st != "" && st != UpgradeStateDone {
		h := Holder{Actor: GPUOperator, Who: LabelGPUDriverUpgradeState + "=" + st, Verdict: Wait,
			What: "the GPU Operator's driver upgrade is under way on the node (state " + st + ")"}
		if st == UpgradeStateFailed {
			h.Verdict, h.What = Stop, "the GPU Operator's driver upgrade failed on the node: a person looks before the round cordons it"
		}
		hs = append(hs, h)
	}
	for _, m := range o.Maintenances {
		if m.RequestorID == self.RequestorID && self.RequestorID != "" {
			continue
		}
		phase := m.Phase
		if phase == "" {
			phase = "not yet scheduled"
		}
		hs = append(hs, Holder{Actor: NodeMaintenance, Who: m.RequestorID, Since: m.Created, Verdict: Wait,
			What: fmt.Sprintf("NodeMaintenance %s/%s asks for the node (phase %s)", m.Namespace, m.Name, phase)})
	}
	for _, l := range o.KuredLocks {
		if l.NodeID == self.KuredLockID && self.KuredLockID != "" {
			continue
		}
		if l.TTL > 0 && !l.Created.IsZero() && now.After(l.Created.Add(l.TTL)) {
			continue // expired: kured itself takes it over
		}
		what := "kured holds its reboot lock for this node"
		if l.NodeID != o.Node {
			what = "kured holds its reboot lock for node " + l.NodeID + ": it reboots one node at a time and so does the round"
		}
		hs = append(hs, Holder{Actor: Kured, Who: l.NodeID, Since: l.Created, Verdict: Wait,
			What: what + " (" + KuredLockAnnotation + " on " + o.KuredDaemonSet + ")"})
	}
	others := len(hs) > 0
	if o.Unschedulable && !o.CordonIsOurs && !others {
		what := "a person cordoned the node"
		if r := reason(o.Annotations); r != "" {
			what += ": " + r
		}
		hs = append(hs, Holder{Actor: Person, Who: "cordon", Verdict: Stop, What: what + "; the round never lifts a cordon it did not make"})
	}
	for _, t := range o.Taints {
		if !personal(t, self.StandingTaints) {
			continue
		}
		h := Holder{Actor: Person, Who: t.Key, Verdict: Stop,
			What: fmt.Sprintf("a person tainted the node (%s=%s:%s); the round never removes a taint it did not add", t.Key, t.Value, t.Effect)}
		if t.TimeAdded != nil {
			h.Since = t.TimeAdded.Time
		}
		hs = append(hs, h)
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].Actor < hs[j].Actor })
	return hs
}

// AnyStop says whether a holder needs a person.
func AnyStop(hs []Holder) bool {
	return slices.ContainsFunc(hs, func(h Holder) bool { return h.Verdict == Stop })
}

// personal says whether a taint can be a person's maintenance hold.
func personal(t corev1.Taint, standing []string) bool {
	if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
		return false
	}
	if strings.HasPrefix(t.Key, "node.kubernetes.io/") || strings.HasPrefix(t.Key, "node.cloudprovider.kubernetes.io/") {
		return false
	}
	if standing == nil {
		standing = DefaultStandingTaints
	}
	return !slices.Contains(standing, t.Key)
}

// reason is a person's cordon reason from the node's annotations.
func reason(ann map[string]string) string {
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, suf := range reasonKeys {
			if strings.HasSuffix(k, suf) && strings.TrimSpace(ann[k]) != "" {
				return fmt.Sprintf("%q (%s)", strings.TrimSpace(ann[k]), k)
			}
		}
	}
	return ""
}
