package drain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Policy is what a drain may do to the pods it finds. The zero value is the
// cautious one: pods with emptyDir data and pods without a controller block
// the drain, and each pod gets its own termination grace period.
type Policy struct {
	// DeleteEmptyDirData allows evicting pods whose emptyDir volumes are
	// lost with them.
	DeleteEmptyDirData bool `json:"delete_emptydir_data"`
	// DeleteUnmanagedPods allows evicting pods no controller will recreate.
	DeleteUnmanagedPods bool `json:"delete_unmanaged_pods"`
	// GracePeriodSeconds overrides the pods' terminationGracePeriodSeconds
	// when > 0. Zero: each pod's own.
	GracePeriodSeconds int `json:"grace_period_seconds,omitempty"`
}

// PodRef names a pod and what owns it.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	OwnerKind string `json:"owner_kind,omitempty"`
	OwnerName string `json:"owner_name,omitempty"`
	// EmptyDir is true when the pod's emptyDir data goes with it.
	EmptyDir bool `json:"emptydir,omitempty"`
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// Reasons a pod on the node is not evicted.
const (
	SkipDaemonSet   = "daemonset"   // recreated on the node anyway
	SkipMirror      = "static-pod"  // the kubelet's mirror of a manifest
	SkipTerminating = "terminating" // already being deleted for long
	SkipBlocked     = "blocked"     // listed in Evictions.Blockers
)

// SkippedPod is a pod on the node that the drain leaves alone.
type SkippedPod struct {
	PodRef
	Reason string `json:"reason"`
}

// Evictions is the decided, not yet done, drain of a node: the pods to evict,
// what stays, what blocks, and a digest over the decision.
type Evictions struct {
	Node   string `json:"node"`
	Policy Policy `json:"policy"`
	// Evict is sorted by namespace and name.
	Evict   []PodRef     `json:"evict"`
	Skipped []SkippedPod `json:"skipped,omitempty"`
	// Blockers are pods the policy does not allow evicting; a drain with
	// blockers is refused before anything changes.
	Blockers []string `json:"blockers,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Digest is "sha256:<hex>" over the node, the policy, the sorted pods
	// to evict (namespace, name, owner) and the blockers. It is what an
	// approval binds; skipped pods do not enter it.
	Digest string `json:"digest"`

	pods []corev1.Pod
}

// Preview lists what draining node would evict under policy, judged as
// `kubectl drain --ignore-daemonsets` judges each pod (judgePod). It
// changes nothing.
func Preview(ctx context.Context, kc kubernetes.Interface, node string, policy Policy) (Evictions, error) {
	if _, err := getNode(ctx, kc, node); err != nil {
		return Evictions{}, fmt.Errorf("preview drain of node %s: %w", node, err)
	}
	sel, err := selectPods(ctx, kc, node, policy)
	if err != nil {
		return Evictions{}, fmt.Errorf("preview drain of node %s: %w", node, err)
	}
	p := Evictions{Node: node, Policy: policy, pods: sel.evict, Blockers: sel.blockers, Warnings: sel.warnings}
	evicted := map[string]bool{}
	for i := range p.pods {
		ref := podRef(&p.pods[i])
		evicted[ref.String()] = true
		p.Evict = append(p.Evict, ref)
	}
	sortRefs(p.Evict)
	for i := range sel.all {
		ref := podRef(&sel.all[i])
		if evicted[ref.String()] {
			continue
		}
		p.Skipped = append(p.Skipped, SkippedPod{PodRef: ref, Reason: skipReason(&sel.all[i])})
	}
	sort.Slice(p.Skipped, func(i, j int) bool { return p.Skipped[i].String() < p.Skipped[j].String() })
	p.Digest = Digest(p.Node, p.Policy, p.Evict, p.Blockers)
	return p, nil
}

// Digest is the plan digest; exported so a caller can recompute it from a
// stored preview.
func Digest(node string, policy Policy, evict []PodRef, blockers []string) string {
	refs := append([]PodRef(nil), evict...)
	sortRefs(refs)
	bl := append([]string(nil), blockers...)
	sort.Strings(bl)
	h := sha256.New()
	line := func(parts ...string) { io.WriteString(h, strings.Join(parts, "\t")+"\n") }
	line("mcp-patch drain preview v1")
	line("node", node)
	line("policy", "delete-emptydir-data="+strconv.FormatBool(policy.DeleteEmptyDirData),
		"delete-unmanaged-pods="+strconv.FormatBool(policy.DeleteUnmanagedPods),
		"grace-period-seconds="+strconv.Itoa(policy.GracePeriodSeconds))
	for _, r := range refs {
		line("evict", r.Namespace, r.Name, r.OwnerKind, r.OwnerName, strconv.FormatBool(r.EmptyDir))
	}
	for _, b := range bl {
		line("blocker", b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func podRef(p *corev1.Pod) PodRef {
	r := PodRef{Namespace: p.Namespace, Name: p.Name}
	if c := metav1.GetControllerOf(p); c != nil {
		r.OwnerKind, r.OwnerName = c.Kind, c.Name
	}
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			r.EmptyDir = true
		}
	}
	return r
}

func skipReason(p *corev1.Pod) string {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return SkipMirror
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return SkipDaemonSet
	}
	if p.DeletionTimestamp != nil {
		return SkipTerminating
	}
	return SkipBlocked
}

func sortRefs(r []PodRef) {
	sort.Slice(r, func(i, j int) bool {
		if r[i].Namespace != r[j].Namespace {
			return r[i].Namespace < r[j].Namespace
		}
		return r[i].Name < r[j].Name
	})
}
