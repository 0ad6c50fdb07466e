package windowlock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Annotations on the Lease carrying the published journal head. They sit
// beside the holder's and outlive it: Acquire, Renew and Release leave
// them as they are.
const (
	AnnotationJournalRound  = "mcp-patch.io/journal-round"
	AnnotationJournalSeq    = "mcp-patch.io/journal-seq"
	AnnotationJournalChain  = "mcp-patch.io/journal-chain"
	AnnotationJournalCommit = "mcp-patch.io/journal-commit"
	AnnotationPublishedBy   = "mcp-patch.io/published-by"
	AnnotationPublishedAt   = "mcp-patch.io/published-at"
)

// ErrStale: the Lease already carries a head of the same round at least
// as far along (a higher seq, or the same seq with another chain): the
// publisher is behind a server that has since led the round further.
var ErrStale = errors.New("published journal head is stale")

// Published is the head of a round's journal as of the git commit that
// last carried it to the remote: what the server leading the round vouches
// for. A server taking the round over fetches the remote and checks the
// journal it finds against this head before adopting a journal it did not
// write. The head lives on the window Lease because only the servers'
// ServiceAccount may write that Lease, and the agent, which can touch the
// git remote, does not hold it: a journal rewritten on the remote will not
// match.
type Published struct {
	// Round is the round id (round.ValidRoundID's shape).
	Round string
	// Seq is the journal's last record number (round.Journal.Head); never 0.
	Seq uint64
	// Chain is the running hash up to Seq, 64 lowercase hex digits.
	Chain string
	// Commit is the git commit (40 lowercase hex digits) pushed with the
	// journal at Seq.
	Commit string
	// By is the publishing server's identity. Empty in Publish: the
	// Config's Identity.
	By string
	// At is when it was published. Zero in Publish: now.
	At time.Time
}

// validate names the first field that cannot be published.
func (p Published) validate() error {
	switch {
	case !validRoundID(p.Round):
		return fmt.Errorf("round %q is not a valid round id", p.Round)
	case p.Seq == 0:
		return errors.New("seq is 0: a journal head has at least one record")
	case !lowerHex(p.Chain, 64):
		return fmt.Errorf("chain %q is not 64 lowercase hex digits", p.Chain)
	case !lowerHex(p.Commit, 40):
		return fmt.Errorf("commit %q is not 40 lowercase hex digits", p.Commit)
	case p.By == "":
		return errors.New("by is empty")
	case p.At.IsZero():
		return errors.New("at is zero")
	}
	return nil
}

// roundIDShape is round.ValidRoundID's rule, repeated because this layer
// may not import round; TestRoundIDShapeMatchesRound holds them together.
var roundIDShape = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func validRoundID(id string) bool { return roundIDShape.MatchString(id) }

func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Publish writes p's head on the window Lease, creating the Lease with no
// holder when it does not exist. Only the head's annotations change: the
// holder, its annotations and every other annotation stay, so publishing
// needs no hold of the window and never disturbs one. Each write is
// guarded by the resourceVersion read; on a conflict the Lease is read
// again and judged again, a bounded number of times.
//
// The head never moves backwards within a round: when the Lease carries
// the same round at a higher seq, or at the same seq with another chain,
// Publish changes nothing and returns an error wrapping ErrStale. The same
// head again (a commit carrying the same journal) is written; another
// round replaces whatever was there. A head on the Lease that cannot be
// read is refused, naming its annotation, rather than overwritten.
func Publish(ctx context.Context, kc kubernetes.Interface, cfg Config, p Published) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("publish journal head: %w", err)
	}
	if p.By == "" {
		p.By = cfg.Identity
	}
	if p.At.IsZero() {
		p.At = time.Now()
	}
	if err := p.validate(); err != nil {
		return fmt.Errorf("publish journal head: %w", err)
	}
	name := cfg.Namespace + "/" + cfg.Name
	leases := kc.CoordinationV1().Leases(cfg.Namespace)
	for range updateAttempts {
		l, err := leases.Get(ctx, cfg.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Namespace: cfg.Namespace}}
			annotatePublished(fresh, p)
			_, err := leases.Create(ctx, fresh, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("publish journal head of round %s at seq %d on %s: create: %w", p.Round, p.Seq, name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("publish journal head of round %s at seq %d on %s: %w", p.Round, p.Seq, name, err)
		}
		cur, found, err := publishedOn(l)
		if err != nil {
			return fmt.Errorf("publish journal head of round %s at seq %d on %s: %w", p.Round, p.Seq, name, err)
		}
		if found && cur.Round == p.Round {
			if cur.Seq > p.Seq || cur.Seq == p.Seq && cur.Chain != p.Chain {
				return fmt.Errorf("publish journal head of round %s at seq %d on %s: %w: %s published seq %d (chain %s) at %s",
					p.Round, p.Seq, name, ErrStale, cur.By, cur.Seq, cur.Chain, cur.At.UTC().Format(time.RFC3339))
			}
		}
		l = l.DeepCopy()
		annotatePublished(l, p)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("publish journal head of round %s at seq %d on %s: update: %w", p.Round, p.Seq, name, err)
		}
		return nil
	}
	return fmt.Errorf("publish journal head of round %s at seq %d on %s: still contended after %d attempts", p.Round, p.Seq, name, updateAttempts)
}

// annotatePublished writes p's annotations into l, touching no other.
func annotatePublished(l *coordinationv1.Lease, p Published) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationJournalRound] = p.Round
	l.Annotations[AnnotationJournalSeq] = strconv.FormatUint(p.Seq, 10)
	l.Annotations[AnnotationJournalChain] = p.Chain
	l.Annotations[AnnotationJournalCommit] = p.Commit
	l.Annotations[AnnotationPublishedBy] = p.By
	l.Annotations[AnnotationPublishedAt] = p.At.UTC().Format(time.RFC3339Nano)
}

// ReadPublished reads the journal head published on the window Lease.
// found is false when the Lease does not exist or carries none of the
// head's annotations; a head present but incomplete or malformed is an
// error naming the annotation.
func ReadPublished(ctx context.Context, kc kubernetes.Interface, cfg Config) (p Published, found bool, err error) {
	if cfg.Identity == "" {
		cfg.Identity = "read" // only the names are used
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return Published{}, false, fmt.Errorf("read published journal head: %w", err)
	}
	l, err := kc.CoordinationV1().Leases(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Published{}, false, nil
	}
	if err != nil {
		return Published{}, false, fmt.Errorf("read published journal head from %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	p, found, err = publishedOn(l)
	if err != nil {
		return Published{}, false, fmt.Errorf("read published journal head from %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	return p, found, nil
}

// publishedOn decodes the head's annotations on l: found is false when
// none is there; one missing or malformed is an error naming it.
func publishedOn(l *coordinationv1.Lease) (p Published, found bool, err error) {
	names := []string{AnnotationJournalRound, AnnotationJournalSeq, AnnotationJournalChain,
		AnnotationJournalCommit, AnnotationPublishedBy, AnnotationPublishedAt}
	var missing []string
	for _, n := range names {
		if _, ok := l.Annotations[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) == len(names) {
		return Published{}, false, nil
	}
	if len(missing) > 0 {
		return Published{}, false, fmt.Errorf("annotation %s is missing beside the other journal head annotations", missing[0])
	}
	a := l.Annotations
	bad := func(name, why string) error {
		return fmt.Errorf("annotation %s %q: %s", name, a[name], why)
	}
	p = Published{Round: a[AnnotationJournalRound], Chain: a[AnnotationJournalChain], Commit: a[AnnotationJournalCommit], By: a[AnnotationPublishedBy]}
	if !validRoundID(p.Round) {
		return Published{}, false, bad(AnnotationJournalRound, "not a valid round id")
	}
	if p.Seq, err = strconv.ParseUint(a[AnnotationJournalSeq], 10, 64); err != nil || p.Seq == 0 {
		return Published{}, false, bad(AnnotationJournalSeq, "not a decimal number above 0")
	}
	if !lowerHex(p.Chain, 64) {
		return Published{}, false, bad(AnnotationJournalChain, "not 64 lowercase hex digits")
	}
	if !lowerHex(p.Commit, 40) {
		return Published{}, false, bad(AnnotationJournalCommit, "not 40 lowercase hex digits")
	}
	if p.By == "" {
		return Published{}, false, bad(AnnotationPublishedBy, "empty")
	}
	if p.At, err = time.Parse(time.RFC3339Nano, a[AnnotationPublishedAt]); err != nil {
		return Published{}, false, bad(AnnotationPublishedAt, "not an RFC 3339 time")
	}
	return p, true, nil
}
