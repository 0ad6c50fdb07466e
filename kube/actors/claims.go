package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// What the round claims from the others while it works, and gives back:
// kured's reboot lock for the whole round (kured reboots no node while
// the round does), and the GPU Operator's per-node driver-upgrade skip
// for the window (its upgrade controller leaves the node alone while the
// round has it cordoned). Each is taken only where free, remembered as the
// round's, and given back only where it is the round's.

const (
	// LabelGPUDriverUpgradeSkip is the GPU Operator upgrade controller's
	// per-node skip (k8s-operator-libs UpgradeSkipNodeLabelKeyFmt with
	// driver name "gpu"): "true" keeps the driver upgrade off the node.
	LabelGPUDriverUpgradeSkip = "nvidia.com/gpu-driver-upgrade.skip"
	// AnnotationDriverUpgradeSkipBy records on the node, in the same
	// write as the label, that the round set the skip label (its value
	// names the round): any process knows whose it is, and a label a
	// person set carries none.
	AnnotationDriverUpgradeSkipBy = "mcp-patch.io/driver-upgrade-skip-by"
)

// SkipState is what SkipDriverUpgrade found and did.
type SkipState string

// Skip states.
const (
	SkipAdded  SkipState = "added"  // this call set the label (and the record)
	SkipOurs   SkipState = "ours"   // the round set it before
	SkipTheirs SkipState = "theirs" // someone else's label, left as it is
)

// SkipDriverUpgrade sets node's driver-upgrade skip label with the record
// that the round set it, in one write conditioned on the node's version,
// only where the label is absent. A label someone else set is left as it
// is (SkipTheirs).
//
// The node's status changes under it (its kubelet's heartbeats): a
// conflict reads it again and decides again, a few times.
func SkipDriverUpgrade(ctx context.Context, kc kubernetes.Interface, node, round string) (SkipState, error) {
	var s SkipState
	err := retry.OnError(retry.DefaultRetry, conflicted, func() error {
		var err error
		s, err = skipDriverUpgrade(ctx, kc, node, round)
		return err
	})
	return s, err
}

func skipDriverUpgrade(ctx context.Context, kc kubernetes.Interface, node, round string) (SkipState, error) {
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read node %s: %w", node, err)
	}
	_, ours := n.Annotations[AnnotationDriverUpgradeSkipBy]
	if _, set := n.Labels[LabelGPUDriverUpgradeSkip]; set {
		if ours {
			return SkipOurs, nil
		}
		return SkipTheirs, nil
	}
	p, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion,
		"labels":      map[string]any{LabelGPUDriverUpgradeSkip: "true"},
		"annotations": map[string]any{AnnotationDriverUpgradeSkipBy: round}}})
	if err != nil {
		return "", err
	}
	if _, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return "", fmt.Errorf("node %s changed while the round set %s: look again: %w", node, LabelGPUDriverUpgradeSkip, errConflict)
		}
		return "", fmt.Errorf("set %s on node %s: %w", LabelGPUDriverUpgradeSkip, node, err)
	}
	return SkipAdded, nil
}

// UnskipDriverUpgrade removes node's driver-upgrade skip label and its
// record where the record says the round set it; removed says it did. A
// label without the record is someone else's and is never touched; a
// record whose label someone changed from "true" loses the record only.
// A conflict reads the node again.
func UnskipDriverUpgrade(ctx context.Context, kc kubernetes.Interface, node string) (bool, error) {
	var removed bool
	err := retry.OnError(retry.DefaultRetry, conflicted, func() error {
		var err error
		removed, err = unskipDriverUpgrade(ctx, kc, node)
		return err
	})
	return removed, err
}

func unskipDriverUpgrade(ctx context.Context, kc kubernetes.Interface, node string) (bool, error) {
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read node %s: %w", node, err)
	}
	if _, ours := n.Annotations[AnnotationDriverUpgradeSkipBy]; !ours {
		return false, nil
	}
	meta := map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]any{AnnotationDriverUpgradeSkipBy: nil}}
	removed := n.Labels[LabelGPUDriverUpgradeSkip] == "true"
	if removed {
		meta["labels"] = map[string]any{LabelGPUDriverUpgradeSkip: nil}
	}
	p, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return false, err
	}
	if _, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			err = fmt.Errorf("%w: %w", errConflict, err)
		}
		return false, fmt.Errorf("remove %s from node %s: %w", LabelGPUDriverUpgradeSkip, node, err)
	}
	return removed, nil
}

// Claims answers round/window's Claims: kured's lock under LockID and the
// driver-upgrade skip under Round.
type Claims struct {
	Kube kubernetes.Interface
	// Kured is where kured keeps its lock; TakeLock says whether the
	// round takes it (the intent's other_actors.kured.take_lock). A lock
	// the round holds is given back either way.
	Kured    KuredRef
	TakeLock bool
	LockID   string
	Round    string
	Now      func() time.Time
}

// TakeKuredLock takes kured's lock for the round (TakeKuredLock), where
// TakeLock says so.
func (c *Claims) TakeKuredLock(ctx context.Context) (KuredHold, error) {
	if !c.TakeLock || c.Kured.Name == "" {
		return KuredHold{}, nil
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	return TakeKuredLock(ctx, c.Kube, c.Kured, c.LockID, now)
}

// ReleaseKuredLock lets go of the round's lock (ReleaseKuredLock).
func (c *Claims) ReleaseKuredLock(ctx context.Context) (bool, error) {
	if c.Kured.Name == "" {
		return false, nil
	}
	return ReleaseKuredLock(ctx, c.Kube, c.Kured, c.LockID)
}

// SkipDriverUpgrade sets node's skip label for the round.
func (c *Claims) SkipDriverUpgrade(ctx context.Context, node string) (SkipState, error) {
	return SkipDriverUpgrade(ctx, c.Kube, node, c.Round)
}

// UnskipDriverUpgrade removes the round's skip label from node.
func (c *Claims) UnskipDriverUpgrade(ctx context.Context, node string) (bool, error) {
	return UnskipDriverUpgrade(ctx, c.Kube, node)
}
