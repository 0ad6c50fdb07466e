package notify

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/config"
)

// receiver is a webhook endpoint on loopback that keeps what it got.
type receiver struct {
	mu      sync.Mutex
	got     []http.Header
	bodies  [][]byte
	answers []int // status per request; the last repeats
	srv     *httptest.Server
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req.Header.Clone())
		r.bodies = append(r.bodies, b)
		code := http.StatusOK
		if len(r.answers) > 0 {
			code = r.answers[min(len(r.got), len(r.answers))-1]
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }

// outcomes collects recorded deliveries.
type outcomes struct {
	mu   sync.Mutex
	all  []Delivery
	more chan struct{}
}

func newOutcomes() *outcomes { return &outcomes{more: make(chan struct{}, 100)} }

func (o *outcomes) record(d Delivery) error {
	o.mu.Lock()
	o.all = append(o.all, d)
	o.mu.Unlock()
	o.more <- struct{}{}
	return nil
}

func (o *outcomes) wait(t *testing.T, n int) []Delivery {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-o.more:
		case <-time.After(60 * time.Second):
			t.Fatalf("only %d of %d deliveries recorded", i, n)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.all)
}

func approval() Event {
	return Event{Kind: ApprovalNeeded, Round: "2026-11", Node: "gpu-03", Tool: "drain_node",
		Request: "cordon gpu-03 and evict 4 pods (training/llama-ft-0 waits)", SignCommand: "mcp-patch approve --request req.json",
		Expires: time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC), Time: time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)}
}

func hook(name, url, format string) Hook {
	return Hook{Name: name, URL: url, Format: format, Timeout: 5 * time.Second, Attempts: 3, Backoff: time.Millisecond}
}

func TestJSONAndSlackBodies(t *testing.T) {
	rj, rs := newReceiver(t), newReceiver(t)
	o := newOutcomes()
	n := New([]Hook{hook("ops", rj.srv.URL, FormatJSON), hook("chat", rs.srv.URL, FormatSlack)}, Options{Record: o.record})
	n.Notify(approval())
	got := o.wait(t, 2)
	for _, d := range got {
		if !d.Sent || d.Attempts != 1 || d.Status != 200 || d.ID == "" {
			t.Errorf("delivery %+v", d)
		}
	}
	var ev struct {
		Event
		Text string `json:"text"`
	}
	if err := json.Unmarshal(rj.bodies[0], &ev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(approval(), ev.Event); diff != "" {
		t.Errorf("json body (-want +got):\n%s", diff)
	}
	var slack map[string]string
	if err := json.Unmarshal(rs.bodies[0], &slack); err != nil {
		t.Fatal(err)
	}
	want := "mcp-patch round 2026-11 node gpu-03: drain_node waits for your signature — cordon gpu-03 and evict 4 pods (training/llama-ft-0 waits) (request expires 2026-11-03T09:30:00Z). Sign with: mcp-patch approve --request req.json"
	if diff := cmp.Diff(map[string]string{"text": want}, slack); diff != "" {
		t.Errorf("slack body (-want +got):\n%s", diff)
	}
	if ev.Text != want || rj.got[0].Get(EventHeader) != "approval_needed" || rj.got[0].Get(SignatureHeader) != "" {
		t.Errorf("text %q headers %v", ev.Text, rj.got[0])
	}
}

func TestHMACSignature(t *testing.T) {
	r := newReceiver(t)
	o := newOutcomes()
	h := hook("signed", r.srv.URL, FormatJSON)
	h.Secret = []byte("s3cret")
	New([]Hook{h}, Options{Record: o.record}).Notify(Event{Kind: RoundStopped, Round: "2026-11", Node: "cp-1", Step: "gate", Why: "etcd member cp-2 does not answer", Decide: "resume or abort"})
	o.wait(t, 1)
	hdr := r.got[0]
	if got, want := hdr.Get(SignatureHeader), Sign([]byte("s3cret"), hdr.Get(TimestampHeader), r.bodies[0]); got != want || !strings.HasPrefix(got, "sha256=") {
		t.Errorf("signature %q, want %q", got, want)
	}
	if Sign([]byte("other"), hdr.Get(TimestampHeader), r.bodies[0]) == hdr.Get(SignatureHeader) {
		t.Error("a different secret gives the same signature")
	}
}

func TestRetriesThenSuccess(t *testing.T) {
	r := newReceiver(t, 503, 429, 200)
	o := newOutcomes()
	New([]Hook{hook("flaky", r.srv.URL, FormatJSON)}, Options{Record: o.record}).Notify(approval())
	d := o.wait(t, 1)[0]
	if !d.Sent || d.Attempts != 3 || r.count() != 3 {
		t.Fatalf("delivery %+v after %d requests", d, r.count())
	}
	ids := map[string]bool{}
	for _, h := range r.got {
		ids[h.Get(DeliveryHeader)] = true
	}
	if len(ids) != 1 || !ids[d.ID] {
		t.Errorf("retries must carry one delivery id: %v (recorded %s)", ids, d.ID)
	}
}

func TestBoundedRetriesAndFinalStatus(t *testing.T) {
	down := newReceiver(t, 500)
	refused := newReceiver(t, 404)
	o := newOutcomes()
	New([]Hook{hook("down", down.srv.URL, FormatJSON), hook("refused", refused.srv.URL, FormatSlack)}, Options{Record: o.record}).Notify(approval())
	got := o.wait(t, 2)
	byHook := map[string]Delivery{}
	for _, d := range got {
		byHook[d.Hook] = d
	}
	if d := byHook["down"]; d.Sent || d.Attempts != 3 || d.Status != 500 || !strings.Contains(d.Detail(), "failed after 3 attempts: receiver answered HTTP 500") {
		t.Errorf("down: %+v %s", d, d.Detail())
	}
	if d := byHook["refused"]; d.Sent || d.Attempts != 1 || !strings.Contains(d.Error, "HTTP 404 (not retried)") {
		t.Errorf("refused: %+v", d)
	}
}

// A receiver that is down (nothing listens) fails after the bounded tries,
// and its URL's secret path never shows in the recorded error.
func TestReceiverDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	o := newOutcomes()
	url := "http://" + addr + "/services/T000/B000/XXXXsecrettoken"
	New([]Hook{hook("down", url, FormatSlack)}, Options{Record: o.record}).Notify(approval())
	d := o.wait(t, 1)[0]
	if d.Sent || d.Attempts != 3 || d.Status != 0 || strings.Contains(d.Error, "secrettoken") || !strings.Contains(d.Error, "post:") {
		t.Fatalf("delivery %+v", d)
	}
}

// A slow receiver never holds up the caller: Notify returns while the
// receiver still holds the request; the attempt times out and is retried.
func TestSlowReceiverDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	o := newOutcomes()
	h := hook("slow", srv.URL, FormatJSON)
	h.Timeout, h.Attempts = 200*time.Millisecond, 2
	n := New([]Hook{h}, Options{Record: o.record})
	n.Notify(approval()) // returns although the receiver holds the request
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the receiver never saw the request")
	}
	d := o.wait(t, 1)[0]
	if d.Sent || d.Attempts != 2 || !strings.Contains(d.Error, "deadline exceeded") {
		t.Fatalf("delivery %+v", d)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestKindsFilterAndInFlightLimit(t *testing.T) {
	r := newReceiver(t)
	o := newOutcomes()
	h := hook("stops-only", r.srv.URL, FormatJSON)
	h.Kinds = []Kind{RoundStopped}
	n := New([]Hook{h}, Options{Record: o.record})
	n.Notify(approval())
	n.Notify(Event{Kind: RoundStopped, Round: "2026-11"})
	d := o.wait(t, 1)[0]
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d.Kind != RoundStopped || r.count() != 1 {
		t.Fatalf("delivery %+v, %d requests", d, r.count())
	}
	// After Close a notice is dropped, and the drop is recorded.
	n.Notify(Event{Kind: RoundStopped, Round: "2026-11"})
	if d := o.wait(t, 1)[1]; d.Sent || !strings.Contains(d.Error, "dropped") {
		t.Fatalf("after close: %+v", d)
	}
}

func TestRetryStopsOnClose(t *testing.T) {
	r := newReceiver(t, 500)
	o := newOutcomes()
	h := hook("down", r.srv.URL, FormatJSON)
	h.Attempts, h.Backoff = 5, time.Hour
	n := New([]Hook{h}, Options{Record: o.record})
	n.Notify(approval())
	for r.count() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := o.wait(t, 1)[0]; d.Sent || d.Attempts != 1 || !strings.Contains(d.Error, "retries stopped") {
		t.Fatalf("delivery %+v", d)
	}
}

func TestHooksFromConfig(t *testing.T) {
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	if err := os.WriteFile(urlFile, []byte("https://hooks.example/T/B/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOOK_SECRET": "k"}
	hooks, err := Hooks(config.Notify{Webhooks: []config.Webhook{
		{Name: "chat", Format: "slack", URLFile: urlFile, HMACSecretEnv: "HOOK_SECRET", Events: []string{"approval_needed"}},
		{Name: "ops", URL: "http://127.0.0.1:9/x"},
	}}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []Hook{
		{Name: "chat", URL: "https://hooks.example/T/B/x", Format: "slack", Secret: []byte("k"), Kinds: []Kind{ApprovalNeeded}, Timeout: 10 * time.Second, Attempts: 4, Backoff: 2 * time.Second},
		{Name: "ops", URL: "http://127.0.0.1:9/x", Format: "json", Timeout: 10 * time.Second, Attempts: 4, Backoff: 2 * time.Second},
	}
	if diff := cmp.Diff(want, hooks); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		w    config.Webhook
		want string
	}{
		{"unset env", config.Webhook{Name: "a", URLEnv: "NOPE"}, "environment variable NOPE is not set"},
		{"missing file", config.Webhook{Name: "a", URLFile: filepath.Join(dir, "nope")}, "no such file"},
		{"secret env unset", config.Webhook{Name: "a", URL: "http://x/", HMACSecretEnv: "NOPE"}, "hmac_secret: environment variable NOPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Hooks(config.Notify{Webhooks: []config.Webhook{tc.w}}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	if diff := cmp.Diff(config.NotifyEvents, func() []string {
		var s []string
		for _, k := range Kinds {
			s = append(s, string(k))
		}
		return s
	}()); diff != "" {
		t.Fatalf("config's event names and notify's kinds differ:\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		w    []config.Webhook
		want string
	}{
		{"no url", []config.Webhook{{Name: "a"}}, "notify.webhooks[0].url: set exactly one"},
		{"two urls", []config.Webhook{{Name: "a", URL: "http://x/", URLEnv: "X"}}, "set exactly one"},
		{"not http", []config.Webhook{{Name: "a", URL: "ftp://x/"}}, "is not an http or https URL"},
		{"format", []config.Webhook{{Name: "a", URL: "http://x/", Format: "teams"}}, `"teams" is not json or slack`},
		{"event", []config.Webhook{{Name: "a", URL: "http://x/", Events: []string{"drained"}}}, `"drained" is not one of`},
		{"duplicate name", []config.Webhook{{Name: "a", URL: "http://x/"}, {Name: "a", URL: "http://y/"}}, `"a" is used twice`},
		{"attempts", []config.Webhook{{Name: "a", URL: "http://x/", Attempts: 50}}, "50 is not 1-20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.DefaultConfig()
			c.Notify.Webhooks = tc.w
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	c := config.DefaultConfig()
	c.Notify.Webhooks = []config.Webhook{{Name: "a", URLEnv: "X", Format: "slack"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Settle returns once every queued delivery has been sent and its outcome
// recorded; while the receiver holds a request it waits, bounded by its
// context, and says how many are in flight.
func TestSettleWaitsForRecordedOutcomes(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	var mu sync.Mutex
	var recorded []Delivery
	n := New([]Hook{hook("held", srv.URL, FormatJSON)}, Options{Record: func(d Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		recorded = append(recorded, d)
		return nil
	}})
	if err := n.Settle(context.Background()); err != nil {
		t.Fatalf("settle with nothing queued: %v", err)
	}
	n.Notify(approval())
	<-arrived
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Settle(short); err == nil || !strings.Contains(err.Error(), "1 notification(s) still in flight") {
		t.Fatalf("settle while the receiver holds the request: %v", err)
	}
	close(release)
	if err := n.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := len(recorded)
	mu.Unlock()
	if got != 1 {
		t.Fatalf("settle returned with %d outcomes recorded, want 1", got)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A server of one environment names it in every notification: the JSON
// field and the words of the text.
func TestEventNamesItsEnvironment(t *testing.T) {
	e := approval()
	e.Environment = "production"
	want := "mcp-patch round 2026-11 (production) node gpu-03: drain_node waits for your signature"
	if got := e.Text(); !strings.HasPrefix(got, want) {
		t.Errorf("text %q, want it to start %q", got, want)
	}
	b, err := json.Marshal(e)
	if err != nil || !strings.Contains(string(b), `"environment":"production"`) {
		t.Errorf("json %s %v", b, err)
	}
	if b, _ := json.Marshal(approval()); strings.Contains(string(b), "environment") {
		t.Errorf("an event of no environment names one: %s", b)
	}
}
