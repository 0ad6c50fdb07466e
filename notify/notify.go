// Package notify tells people what the round needs from them: an approval
// waiting for a signature, a stopped round, a closed window, a node rolled
// back, a closed round. It posts webhooks (a generic JSON body or a
// Slack-compatible one, optionally HMAC-signed) with bounded retries and
// backoff, in the background: a send never blocks the round and never fails
// it. Every delivery's outcome is handed to a Recorder (the journal). It
// must not touch the hosts, the cluster or the intent repository.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is what happened.
type Kind string

// Event kinds.
const (
	ApprovalNeeded Kind = "approval_needed"
	RoundStopped   Kind = "round_stopped"
	WindowClosed   Kind = "window_closed"
	NodeRolledBack Kind = "node_rolled_back"
	RoundClosed    Kind = "round_closed"
)

// Kinds lists every kind, for validation.
var Kinds = []Kind{ApprovalNeeded, RoundStopped, WindowClosed, NodeRolledBack, RoundClosed}

// Event is one notice. Fields a kind does not use stay empty.
type Event struct {
	Kind Kind `json:"kind"`
	// Environment is the environment of the round (environments.yaml),
	// when the server serves one.
	Environment string    `json:"environment,omitempty"`
	Round       string    `json:"round"`
	Node        string    `json:"node,omitempty"`
	Step        string    `json:"step,omitempty"`
	Time        time.Time `json:"time"`
	// Tool and Request describe an approval needed: the tool, the request
	// in plain words, the command a person runs to sign, and its expiry.
	Tool        string    `json:"tool,omitempty"`
	Request     string    `json:"request,omitempty"`
	SignCommand string    `json:"sign_command,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	// Why is what happened (a stop's reason, a rollback's cause).
	Why string `json:"why,omitempty"`
	// Decide is what a person decides now (resume, abort, ...).
	Decide string `json:"decide,omitempty"`
}

// Text is the event in one or two plain sentences.
func (e Event) Text() string {
	var b strings.Builder
	where := e.Round
	if e.Environment != "" {
		where += " (" + e.Environment + ")"
	}
	if e.Node != "" {
		where += " node " + e.Node
	}
	switch e.Kind {
	case ApprovalNeeded:
		fmt.Fprintf(&b, "mcp-patch round %s: %s waits for your signature", where, e.Tool)
		if e.Request != "" {
			fmt.Fprintf(&b, " — %s", e.Request)
		}
		if !e.Expires.IsZero() {
			fmt.Fprintf(&b, " (request expires %s)", e.Expires.UTC().Format(time.RFC3339))
		}
		if e.SignCommand != "" {
			fmt.Fprintf(&b, ". Sign with: %s", e.SignCommand)
		}
	case RoundStopped:
		fmt.Fprintf(&b, "mcp-patch round %s stopped", where)
		if e.Step != "" {
			fmt.Fprintf(&b, " at %s", e.Step)
		}
		if e.Why != "" {
			fmt.Fprintf(&b, ": %s", e.Why)
		}
		if e.Decide != "" {
			fmt.Fprintf(&b, ". A person decides: %s", e.Decide)
		}
	case WindowClosed:
		fmt.Fprintf(&b, "mcp-patch round %s: window closed", where)
		if e.Why != "" {
			fmt.Fprintf(&b, " (%s)", e.Why)
		}
	case NodeRolledBack:
		fmt.Fprintf(&b, "mcp-patch round %s rolled back to the old kernel", where)
		if e.Why != "" {
			fmt.Fprintf(&b, ": %s", e.Why)
		}
		if e.Decide != "" {
			fmt.Fprintf(&b, ". A person decides: %s", e.Decide)
		}
	case RoundClosed:
		fmt.Fprintf(&b, "mcp-patch round %s closed", where)
		if e.Why != "" {
			fmt.Fprintf(&b, ": %s", e.Why)
		}
	default:
		fmt.Fprintf(&b, "mcp-patch round %s: %s", where, e.Kind)
	}
	return b.String()
}

// Formats of a webhook body.
const (
	FormatJSON  = "json"  // the Event as JSON, with "text" added
	FormatSlack = "slack" // {"text": ...}: Slack, Mattermost and Rocket.Chat incoming webhooks
)

// Hook is one configured receiver, its secrets already read.
type Hook struct {
	Name   string
	URL    string
	Format string
	// Secret, when set, signs each body (see SignatureHeader).
	Secret []byte
	// Kinds it wants; empty means every kind.
	Kinds []Kind
	// Timeout bounds one attempt; Attempts bounds the tries (at least 1);
	// Backoff is the pause after the first failed try, doubled each time.
	Timeout  time.Duration
	Attempts int
	Backoff  time.Duration
}

// Headers set on every delivery. The signature is
// "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)), with the
// timestamp (Unix seconds) in TimestampHeader, so a receiver can refuse a
// replay; DeliveryHeader stays the same across retries of one delivery.
const (
	SignatureHeader = "X-Mcp-Patch-Signature"
	TimestampHeader = "X-Mcp-Patch-Timestamp"
	DeliveryHeader  = "X-Mcp-Patch-Delivery"
	EventHeader     = "X-Mcp-Patch-Event"
)

// Sign returns the signature header value for body at timestamp ts.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Delivery is the outcome of one event at one hook, as recorded.
type Delivery struct {
	ID       string    `json:"id"`
	Hook     string    `json:"hook"`
	Kind     Kind      `json:"kind"`
	Round    string    `json:"round"`
	Node     string    `json:"node,omitempty"`
	Sent     bool      `json:"sent"`
	Attempts int       `json:"attempts"`
	Status   int       `json:"status,omitempty"` // last HTTP status, 0 when none came back
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at"`
}

// Detail is the delivery in one line, for the journal.
func (d Delivery) Detail() string {
	if d.Sent {
		return fmt.Sprintf("notification %s to %s sent (attempt %d, HTTP %d, delivery %s)", d.Kind, d.Hook, d.Attempts, d.Status, d.ID)
	}
	return fmt.Sprintf("notification %s to %s failed after %d attempts: %s (delivery %s)", d.Kind, d.Hook, d.Attempts, d.Error, d.ID)
}

// Recorder keeps each delivery's outcome (the round's journal).
type Recorder func(Delivery) error

// Observer is told each delivery's outcome (metrics); may be nil.
type Observer func(Delivery)

// Notifier sends events to its hooks in the background.
type Notifier struct {
	hooks  []Hook
	client *http.Client
	record Recorder
	seen   Observer
	log    *slog.Logger
	now    func() time.Time

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed when inflight drops to zero; nil while zero
	limit    int
	closed   bool
	wg       sync.WaitGroup
	stop     chan struct{}
}

// Options for New. Zero values: http.DefaultTransport's dialer, time.Now,
// slog.Default, at most 64 deliveries in flight.
type Options struct {
	Client   *http.Client
	Record   Recorder
	Observe  Observer
	Log      *slog.Logger
	Now      func() time.Time
	InFlight int
}

// New returns a Notifier for hooks. With no hooks it sends nothing.
func New(hooks []Hook, o Options) *Notifier {
	n := &Notifier{hooks: hooks, client: o.Client, record: o.Record, seen: o.Observe, log: o.Log, now: o.Now,
		limit: o.InFlight, stop: make(chan struct{})}
	if n.client == nil {
		n.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.now == nil {
		n.now = time.Now
	}
	if n.limit <= 0 {
		n.limit = 64
	}
	return n
}

// Notify queues ev for every hook that wants its kind and returns at once.
// When too many deliveries are already in flight the event is dropped and
// the drop recorded, so the round never waits on a receiver.
func (n *Notifier) Notify(ev Event) {
	if n == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = n.now().UTC()
	}
	for _, h := range n.hooks {
		if len(h.Kinds) > 0 && !slices.Contains(h.Kinds, ev.Kind) {
			continue
		}
		d := Delivery{ID: newID(), Hook: h.Name, Kind: ev.Kind, Round: ev.Round, Node: ev.Node}
		n.mu.Lock()
		if n.closed || n.inflight >= n.limit {
			n.mu.Unlock()
			d.Error, d.At = "dropped: too many notifications in flight or the notifier is closed", n.now().UTC()
			n.finish(d)
			continue
		}
		if n.inflight == 0 {
			n.idle = make(chan struct{})
		}
		n.inflight++
		n.wg.Add(1)
		n.mu.Unlock()
		go func() {
			defer n.wg.Done()
			n.finish(n.deliver(h, ev, d))
			n.mu.Lock()
			n.inflight--
			if n.inflight == 0 {
				close(n.idle)
				n.idle = nil
			}
			n.mu.Unlock()
		}()
	}
}

// Idle reports whether no delivery is in flight.
func (n *Notifier) Idle() bool {
	if n == nil {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inflight == 0
}

// Settle waits (bounded by ctx) until no delivery is in flight: every
// notification queued before it has been sent or has failed, and its
// outcome has been recorded. It does not stop new ones.
func (n *Notifier) Settle(ctx context.Context) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	idle, count := n.idle, n.inflight
	n.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d notification(s) still in flight: %w", count, ctx.Err())
	}
}

// Close stops retries that are waiting, waits (bounded by ctx) for the
// deliveries in flight, and refuses new ones.
func (n *Notifier) Close(ctx context.Context) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.stop)
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close notifier: deliveries still in flight: %w", ctx.Err())
	}
}

func (n *Notifier) finish(d Delivery) {
	if n.seen != nil {
		n.seen(d)
	}
	if d.Sent {
		n.log.Info("notification sent", "hook", d.Hook, "kind", d.Kind, "round", d.Round, "node", d.Node, "attempts", d.Attempts)
	} else {
		n.log.Warn("notification failed", "hook", d.Hook, "kind", d.Kind, "round", d.Round, "node", d.Node, "attempts", d.Attempts, "err", d.Error)
	}
	if n.record != nil {
		if err := n.record(d); err != nil {
			n.log.Error("record notification outcome", "hook", d.Hook, "kind", d.Kind, "round", d.Round, "err", err)
		}
	}
}

// deliver posts ev to h, retrying a network error, a 5xx or a 429 with
// doubling backoff (a Retry-After no longer than the backoff cap is
// honoured); any other status is final.
func (n *Notifier) deliver(h Hook, ev Event, d Delivery) Delivery {
	body, err := Body(h.Format, ev)
	if err != nil {
		d.Error, d.At = err.Error(), n.now().UTC()
		return d
	}
	attempts := max(h.Attempts, 1)
	backoff := h.Backoff
	for d.Attempts = 1; ; d.Attempts++ {
		var retryAfter time.Duration
		d.Status, retryAfter, err = n.post(h, ev, d.ID, body)
		if err == nil {
			d.Sent, d.Error, d.At = true, "", n.now().UTC()
			return d
		}
		d.Error = err.Error()
		if d.Attempts >= attempts || errors.As(err, new(finalError)) {
			d.At = n.now().UTC()
			return d
		}
		wait := backoff
		if retryAfter > wait && retryAfter <= 8*h.Backoff {
			wait = retryAfter
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-n.stop:
			t.Stop()
			d.Error += "; retries stopped: the server is shutting down"
			d.At = n.now().UTC()
			return d
		}
		backoff *= 2
	}
}

// finalError is a failure that retrying cannot fix.
type finalError struct{ error }

func final(format string, a ...any) error { return finalError{fmt.Errorf(format, a...)} }

func (n *Notifier) post(h Hook, ev Event, id string, body []byte) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, final("build request: %v", redact(err, h.URL))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mcp-patch")
	req.Header.Set(DeliveryHeader, id)
	req.Header.Set(EventHeader, string(ev.Kind))
	if len(h.Secret) > 0 {
		ts := strconv.FormatInt(n.now().Unix(), 10)
		req.Header.Set(TimestampHeader, ts)
		req.Header.Set(SignatureHeader, Sign(h.Secret, ts, body))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("post: %v", redact(err, h.URL))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // drained so the connection is reused; its content is not needed
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, 0, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		var ra time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			ra = time.Duration(s) * time.Second
		}
		return resp.StatusCode, ra, fmt.Errorf("receiver answered HTTP %d", resp.StatusCode)
	default:
		return resp.StatusCode, 0, final("receiver answered HTTP %d (not retried)", resp.StatusCode)
	}
}

// redact keeps a webhook URL (which often carries its token in the path)
// out of error text.
func redact(err error, raw string) string {
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil {
		safe := u.Scheme + "://" + u.Host + "/…"
		msg = strings.ReplaceAll(msg, raw, safe)
		msg = strings.ReplaceAll(msg, strconv.Quote(raw), strconv.Quote(safe))
	}
	return msg
}

// Body renders ev in format.
func Body(format string, ev Event) ([]byte, error) {
	switch format {
	case FormatSlack:
		return json.Marshal(struct {
			Text string `json:"text"`
		}{ev.Text()})
	case FormatJSON, "":
		return json.Marshal(struct {
			Event
			Text string `json:"text"`
		}{ev, ev.Text()})
	default:
		return nil, final("unknown webhook format %q", format)
	}
}

// ReadSecret returns a value given inline, from a file (trailing newline
// trimmed) or from an environment variable: exactly one of them.
func ReadSecret(field, inline, file, env string, getenv func(string) string) (string, error) {
	set := 0
	for _, v := range []string{inline, file, env} {
		if v != "" {
			set++
		}
	}
	switch {
	case set > 1:
		return "", fmt.Errorf("%s: set only one of the value, its file or its environment variable", field)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("%s: file %s is empty", field, file)
		}
		return v, nil
	case env != "":
		v := strings.TrimSpace(getenv(env))
		if v == "" {
			return "", fmt.Errorf("%s: environment variable %s is not set", field, env)
		}
		return v, nil
	}
	return inline, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return hex.EncodeToString(b[:])
}
