// Package drain takes a node out of service and gives it back: the eviction
// preview a person approves (with its digest), the cordon that records who
// made it, the eviction itself (Eviction API, PDBs respected, bounded) and
// the uncordon that only undoes our own cordon.
//
// It changes only what it names: spec.unschedulable and the two
// mcp-patch.io/cordoned-* annotations of the node, and evictions of the
// previewed pods. It never uncordons a node someone else cordoned, never
// deletes pods without the Eviction API, and must not know about SSH,
// approvals or the round order.
package drain

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/mcp-patch/mcp-patch/kube"
)

// The annotations that record our cordon. They are written in the same
// update that sets spec.unschedulable, so a cordon never exists without its
// record.
const (
	AnnotationCordonedBy = "mcp-patch.io/cordoned-by"
	AnnotationCordonedAt = "mcp-patch.io/cordoned-at"
)

// Cordon outcomes.
const (
	// OutcomeCordoned: we cordoned the node now and recorded it.
	OutcomeCordoned = "cordoned"
	// OutcomeAlreadyOurs: the node was already cordoned under our identity.
	OutcomeAlreadyOurs = "already-ours"
	// OutcomeForeign: someone else had cordoned the node; it stays theirs
	// and we will not uncordon it.
	OutcomeForeign = "foreign"
)

// ErrRefused is wrapped by every *RefusalError.
var ErrRefused = errors.New("refused")

// Refusal kinds for Uncordon.
const (
	RefuseNotCordoned = "not-cordoned"
	RefuseForeign     = "foreign-cordon"
)

// RefusalError says why Uncordon changed nothing.
type RefusalError struct {
	Node   string
	Kind   string // RefuseNotCordoned or RefuseForeign
	Reason string
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("uncordon node %s: refused: %s", e.Node, e.Reason)
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusalError) Unwrap() error { return ErrRefused }

// Owner is who cordoned a node: the server identity and the round.
type Owner struct {
	Identity string `json:"identity"`
	Round    string `json:"round"`
}

var ownerPart = regexp.MustCompile(`^[A-Za-z0-9._:@/+-]{1,128}$`)

// Validate checks both parts are present and free of the separators the
// annotation uses.
func (o Owner) Validate() error {
	if !ownerPart.MatchString(o.Identity) {
		return fmt.Errorf("identity %q: want 1-128 of [A-Za-z0-9._:@/+-]", o.Identity)
	}
	if !ownerPart.MatchString(o.Round) {
		return fmt.Errorf("round %q: want 1-128 of [A-Za-z0-9._:@/+-]", o.Round)
	}
	return nil
}

// String is the annotation value: "identity=<id>,round=<round>".
func (o Owner) String() string { return "identity=" + o.Identity + ",round=" + o.Round }

// ParseOwner reads an AnnotationCordonedBy value.
func ParseOwner(s string) (Owner, error) {
	var o Owner
	for _, part := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "identity":
			o.Identity = v
		case "round":
			o.Round = v
		}
	}
	if err := o.Validate(); err != nil {
		return Owner{}, fmt.Errorf("parse %s %q: %w", AnnotationCordonedBy, s, err)
	}
	return o, nil
}

// State is a node's cordon as recorded on it.
type State struct {
	Node          string `json:"node"`
	Unschedulable bool   `json:"unschedulable"`
	// Owner is our record; nil when the node carries none (or an
	// unreadable one, kept in RawCordonedBy).
	Owner         *Owner `json:"owner,omitempty"`
	RawCordonedBy string `json:"raw_cordoned_by,omitempty"`
	CordonedAt    string `json:"cordoned_at,omitempty"`
}

// Describe says in words who holds the cordon.
func (s State) Describe() string {
	switch {
	case !s.Unschedulable && s.Owner == nil:
		return "not cordoned"
	case !s.Unschedulable:
		return fmt.Sprintf("not cordoned (stale record: cordoned by %s at %s)", s.Owner, s.CordonedAt)
	case s.Owner != nil:
		return fmt.Sprintf("cordoned by %s at %s", s.Owner, s.CordonedAt)
	case s.RawCordonedBy != "":
		return fmt.Sprintf("cordoned with an unreadable record %q at %s", s.RawCordonedBy, s.CordonedAt)
	default:
		return "cordoned by someone else (no mcp-patch record: a person or another tool)"
	}
}

// StateOf is a node's cordon record as the node object shows it.
func StateOf(n *corev1.Node) State { return stateOf(n) }

func stateOf(n *corev1.Node) State {
	s := State{Node: n.Name, Unschedulable: n.Spec.Unschedulable}
	if raw, ok := n.Annotations[AnnotationCordonedBy]; ok {
		if o, err := ParseOwner(raw); err == nil {
			s.Owner = &o
		} else {
			s.RawCordonedBy = raw
		}
		s.CordonedAt = n.Annotations[AnnotationCordonedAt]
	}
	return s
}

// ReadState reads a node's cordon record.
func ReadState(ctx context.Context, kc kubernetes.Interface, node string) (State, error) {
	n, err := getNode(ctx, kc, node)
	if err != nil {
		return State{}, fmt.Errorf("read cordon of node %s: %w", node, err)
	}
	return stateOf(n), nil
}

// CordonResult says what Cordon found and did.
type CordonResult struct {
	Node    string `json:"node"`
	Outcome string `json:"outcome"`
	// Owner and At are our record when Outcome is cordoned or
	// already-ours.
	Owner *Owner `json:"owner,omitempty"`
	At    string `json:"at,omitempty"`
	// Foreign describes the other party's cordon when Outcome is foreign.
	Foreign string `json:"foreign,omitempty"`
	DryRun  bool   `json:"dry_run,omitempty"`
}

// Cordon marks the node unschedulable and records identity and round in its
// annotations, in one update guarded by the node's resourceVersion. A node
// already cordoned by someone else is left as it is and reported as
// foreign: we never claim it, so Uncordon will refuse it later.
func Cordon(ctx context.Context, kc kubernetes.Interface, node, round, identity string) (CordonResult, error) {
	return cordon(ctx, kc, node, Owner{Identity: identity, Round: round}, false)
}

func cordon(ctx context.Context, kc kubernetes.Interface, node string, owner Owner, dryRun bool) (CordonResult, error) {
	if err := owner.Validate(); err != nil {
		return CordonResult{}, fmt.Errorf("cordon node %s: %w", node, err)
	}
	var res CordonResult
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := getNode(ctx, kc, node)
		if err != nil {
			return err
		}
		st := stateOf(n)
		res = CordonResult{Node: node, DryRun: dryRun}
		if st.Unschedulable {
			if st.Owner != nil && st.Owner.Identity == owner.Identity {
				res.Outcome, res.Owner, res.At = OutcomeAlreadyOurs, st.Owner, st.CordonedAt
			} else {
				res.Outcome, res.Foreign = OutcomeForeign, st.Describe()
			}
			return nil
		}
		at := time.Now().UTC().Format(time.RFC3339)
		n = n.DeepCopy()
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnotationCordonedBy] = owner.String()
		n.Annotations[AnnotationCordonedAt] = at
		n.Spec.Unschedulable = true
		opts := metav1.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := kc.CoreV1().Nodes().Update(ctx, n, opts); err != nil {
			return err
		}
		o := owner
		res.Outcome, res.Owner, res.At = OutcomeCordoned, &o, at
		return nil
	})
	if err != nil {
		return CordonResult{}, fmt.Errorf("cordon node %s: %w", node, err)
	}
	return res, nil
}

// UncordonResult says what Uncordon did.
type UncordonResult struct {
	Node string `json:"node"`
	// WasCordoned is false when someone had already made the node
	// schedulable; only our stale record was removed then.
	WasCordoned bool   `json:"was_cordoned"`
	Owner       Owner  `json:"owner"`
	CordonedAt  string `json:"cordoned_at"`
}

// Uncordon makes the node schedulable and removes our record, only if the
// record names identity. Otherwise it changes nothing and returns a
// *RefusalError: "not cordoned", or who else holds the cordon.
func Uncordon(ctx context.Context, kc kubernetes.Interface, node, identity string) (UncordonResult, error) {
	if !ownerPart.MatchString(identity) {
		return UncordonResult{}, fmt.Errorf("uncordon node %s: identity %q: want 1-128 of [A-Za-z0-9._:@/+-]", node, identity)
	}
	var res UncordonResult
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := getNode(ctx, kc, node)
		if err != nil {
			return err
		}
		st := stateOf(n)
		if st.Owner == nil || st.Owner.Identity != identity {
			kind := RefuseForeign
			if !st.Unschedulable {
				kind = RefuseNotCordoned
			}
			return &RefusalError{Node: node, Kind: kind, Reason: st.Describe()}
		}
		res = UncordonResult{Node: node, WasCordoned: st.Unschedulable, Owner: *st.Owner, CordonedAt: st.CordonedAt}
		n = n.DeepCopy()
		delete(n.Annotations, AnnotationCordonedBy)
		delete(n.Annotations, AnnotationCordonedAt)
		n.Spec.Unschedulable = false
		_, err = kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	var refusal *RefusalError
	if errors.As(err, &refusal) {
		return UncordonResult{}, refusal
	}
	if err != nil {
		return UncordonResult{}, fmt.Errorf("uncordon node %s: %w", node, err)
	}
	return res, nil
}

func getNode(ctx context.Context, kc kubernetes.Interface, node string) (*corev1.Node, error) {
	if node == "" {
		return nil, fmt.Errorf("empty node name: %w", kube.ErrNodeNotFound)
	}
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %q: %w", node, kube.ErrNodeNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get node %q: %w", node, err)
	}
	return n, nil
}

// UncordonIfOurs uncordons node only when identity cordoned it in round
// (its owner record says so); it answers whether it did and says what it
// did in words. Another holder's cordon, an earlier round's or one by hand
// is left in place.
func UncordonIfOurs(ctx context.Context, kc kubernetes.Interface, node, identity, round string) (bool, string) {
	st, err := ReadState(ctx, kc, node)
	if err != nil {
		return false, "left cordoned: read its cordon: " + err.Error()
	}
	if !st.Unschedulable {
		return false, "it was not cordoned"
	}
	if st.Owner == nil || st.Owner.Identity != identity || st.Owner.Round != round {
		return false, "left cordoned: this round did not cordon it (" + st.Describe() + ")"
	}
	if _, err := Uncordon(ctx, kc, node, identity); err != nil {
		return false, "left cordoned: " + err.Error()
	}
	return true, "uncordoned (this round had cordoned it)"
}
