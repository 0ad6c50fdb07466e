// Package usednonces keeps the nonces of used approvals and statements
// where every mcp-patch server of a cluster looks: one ConfigMap in the
// namespace of the window Lease. A server that consumes an approval marks
// its nonce there before it acts, so a second server — with its own state
// directory — refuses the same approval.
//
// The ConfigMap's resourceVersion decides races: of two servers consuming
// one nonce at once, the API server lets exactly one update through. A mark
// is kept until its approval has been expired for Grace (Verify refuses an
// expired approval on its own), so the ConfigMap holds only the approvals
// of about the last day.
//
// It owns that ConfigMap and nothing else; it knows nothing of rounds,
// tools or hosts. The server needs get, create and update on ConfigMaps in
// that namespace.
package usednonces

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

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/policy"
)

// Defaults.
const (
	// DefaultName is the ConfigMap's name.
	DefaultName = "mcp-patch-used-nonces"
	// DefaultGrace is how long a mark outlives its approval's expiry: far
	// more than the clock skew between servers.
	DefaultGrace = time.Hour
	// MaxEntries bounds the marks kept (a ConfigMap holds at most 1 MiB;
	// a mark is about 110 bytes).
	MaxEntries = 8000
	// attempts bounds the retries of a Consume that lost a race.
	attempts = 20
)

var _ policy.NonceStore = (*Store)(nil)

// Store is the nonce store every server of a cluster shares.
type Store struct {
	// Clients returns the cluster clients; it is called on each use, so a
	// server can connect lazily. Required.
	Clients func(ctx context.Context) (*kube.Clients, error)
	// Namespace holds the ConfigMap (the window Lease's namespace). Required.
	Namespace string
	// Name is the ConfigMap's name; empty means DefaultName.
	Name string
	// Grace is how long a mark is kept after its approval expired; zero
	// means DefaultGrace.
	Grace time.Duration
}

var nonceRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (s *Store) name() string {
	if s.Name == "" {
		return DefaultName
	}
	return s.Name
}

func (s *Store) grace() time.Duration {
	if s.Grace <= 0 {
		return DefaultGrace
	}
	return s.Grace
}

func (s *Store) where() string { return "configmap " + s.Namespace + "/" + s.name() }

func (s *Store) client(ctx context.Context) (kubernetes.Interface, error) {
	if s.Clients == nil || s.Namespace == "" {
		return nil, errors.New("used-nonce store needs the cluster clients and a namespace")
	}
	cl, err := s.Clients(ctx)
	if err != nil {
		return nil, fmt.Errorf("reach the cluster: %w", err)
	}
	if cl == nil || cl.Kube == nil {
		return nil, errors.New("no Kubernetes client")
	}
	return cl.Kube, nil
}

// Used reports whether any server of the cluster consumed nonce.
func (s *Store) Used(ctx context.Context, nonce string) (bool, error) {
	kc, err := s.client(ctx)
	if err != nil {
		return false, fmt.Errorf("look up nonce %s in the cluster: %w", nonce, err)
	}
	cm, err := kc.CoreV1().ConfigMaps(s.Namespace).Get(ctx, s.name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up nonce %s in %s: %w", nonce, s.where(), err)
	}
	_, used := cm.Data[nonce]
	return used, nil
}

// Consume marks nonce used in the ConfigMap, creating it when missing. Of
// concurrent calls for one nonce, from any servers, exactly one succeeds;
// the others get an error matching policy.ErrReplayed. It drops marks whose
// approval expired more than Grace before at.
func (s *Store) Consume(ctx context.Context, nonce, approvalID string, at, expires time.Time) error {
	if err := s.consume(ctx, nonce, approvalID, at, expires); err != nil {
		return fmt.Errorf("record nonce %s as used in %s: %w", nonce, s.where(), err)
	}
	return nil
}

func (s *Store) consume(ctx context.Context, nonce, approvalID string, at, expires time.Time) error {
	if !nonceRE.MatchString(nonce) {
		return fmt.Errorf("nonce %q is not 32 lowercase hex digits", nonce)
	}
	if approvalID == "" || strings.ContainsAny(approvalID, " \t\r\n") {
		return fmt.Errorf("approval id %q is empty or has white space", approvalID)
	}
	kc, err := s.client(ctx)
	if err != nil {
		return err
	}
	cms := kc.CoreV1().ConfigMaps(s.Namespace)
	mark := Mark{ApprovalID: approvalID, At: at.UTC(), Expires: expires.UTC()}.String()
	for range attempts {
		cm, err := cms.Get(ctx, s.name(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.name(), Namespace: s.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "mcp-patch"},
				Annotations: map[string]string{"mcp-patch/purpose": "nonces of used approvals and statements; " +
					"every server refuses an approval whose nonce is here"}},
				Data: map[string]string{nonce: mark}}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another server created it first: read it again
			}
			return err
		}
		if err != nil {
			return err
		}
		if prev, used := cm.Data[nonce]; used {
			return &policy.RefusalError{Reason: policy.ReasonReplayed,
				Detail: fmt.Sprintf("nonce %s has already been used (%s)", nonce, describeMark(prev))}
		}
		data := Prune(cm.Data, at.Add(-s.grace()))
		if len(data) >= MaxEntries {
			return fmt.Errorf("%d approvals are live at once, the most the ConfigMap holds is %d", len(data), MaxEntries)
		}
		data[nonce] = mark
		cm.Data = data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another server changed it since we read it
		}
		return err
	}
	return fmt.Errorf("lost the race for the ConfigMap %d times", attempts)
}

// Mark is what the ConfigMap keeps for one nonce.
type Mark struct {
	ApprovalID string
	At         time.Time
	Expires    time.Time
}

// String is the value stored: "<approval id> <used at> <expires>".
func (m Mark) String() string {
	return m.ApprovalID + " " + m.At.Format(time.RFC3339Nano) + " " + m.Expires.Format(time.RFC3339)
}

// ParseMark reads a stored value.
func ParseMark(v string) (Mark, error) {
	f := strings.Split(v, " ")
	if len(f) != 3 || f[0] == "" {
		return Mark{}, fmt.Errorf("mark %q: want <approval id> <used at> <expires>", v)
	}
	at, err := time.Parse(time.RFC3339Nano, f[1])
	if err != nil {
		return Mark{}, fmt.Errorf("mark %q: %w", v, err)
	}
	exp, err := time.Parse(time.RFC3339, f[2])
	if err != nil {
		return Mark{}, fmt.Errorf("mark %q: %w", v, err)
	}
	return Mark{ApprovalID: f[0], At: at, Expires: exp}, nil
}

func describeMark(v string) string {
	m, err := ParseMark(v)
	if err != nil {
		return "mark unreadable"
	}
	return fmt.Sprintf("approval %s, used %s", m.ApprovalID, m.At.Format(time.RFC3339))
}

// Prune returns a copy of data without the marks whose approval expired
// before cutoff. A mark it cannot read is kept: it may only be dropped when
// it is sure to be stale.
func Prune(data map[string]string, cutoff time.Time) map[string]string {
	out := make(map[string]string, len(data)+1)
	for k, v := range data {
		if m, err := ParseMark(v); err == nil && m.Expires.Before(cutoff) {
			continue
		}
		out[k] = v
	}
	return out
}
