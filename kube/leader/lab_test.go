package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// Servers elect their leader on the real API server, whose
// resourceVersion checks decide every race. The timings are short so the
// tests are, in the proportions client-go's defaults keep (15s, 10s, 2s).

func TestMain(m *testing.M) { labkube.Main(m) }

const (
	testLease  = 3 * time.Second
	testRenew  = 2 * time.Second
	testRetry  = 500 * time.Millisecond
	testWindow = "mcp-patch-window"
	// bound is the longest any wait of these tests may take: far beyond
	// a takeover (Lease duration and a retry), so a slow machine is not a
	// failure.
	bound = time.Minute
)

// partition stands between one server and the API server: blocked
// writes are renewals held back; blocked reads as well, a server cut off.
type partition struct{ writes, reads atomic.Bool }

type partitioned struct {
	p    *partition
	next http.RoundTripper
}

func (t partitioned) RoundTrip(r *http.Request) (*http.Response, error) {
	write := r.Method != http.MethodGet
	if (write && t.p.writes.Load()) || (!write && t.p.reads.Load()) {
		return nil, fmt.Errorf("%s %s: partitioned from the API server (test)", r.Method, r.URL.Path)
	}
	return t.next.RoundTrip(r)
}

func clientBehind(t *testing.T, c *cluster.Cluster, p *partition) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return partitioned{p: p, next: rt} })
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func elector(t *testing.T, kc kubernetes.Interface, ns, identity string) *Elector {
	t.Helper()
	e, err := New(kc, Config{Namespace: ns, Name: "mcp-patch-leader", WindowLease: testWindow, Identity: identity,
		LeaseDuration: testLease, RenewDeadline: testRenew, RetryPeriod: testRetry}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	t.Cleanup(cancel)
	return ctx
}

// first waits until one of es leads and returns it.
func first(ctx context.Context, t *testing.T, es ...*Elector) *Elector {
	t.Helper()
	won := make(chan *Elector, len(es))
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	for _, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.Wait(wctx, true) == nil {
				won <- e
			}
		}()
	}
	select {
	case e := <-won:
		return e
	case <-ctx.Done():
		t.Fatalf("no server leads: %v", ctx.Err())
	}
	return nil
}

// Two servers on one Lease: one leads, the other follows and names it;
// the leader let go (shutdown), the other takes over.
func TestOneLeaderThenTakeover(t *testing.T) {
	c := labkube.Cluster(t)
	ns := labkube.Namespace(t, c)
	ctx := bounded(t)
	a, b := elector(t, c.Client(), ns, "ops-1/101"), elector(t, c.Client(), ns, "ops-2/202")
	a.Start(ctx)
	b.Start(ctx)

	lead := first(ctx, t, a, b)
	follow := a
	if lead == a {
		follow = b
	}
	if err := follow.Observed(ctx); err != nil {
		t.Fatal(err)
	}
	if follow.IsLeader() {
		t.Fatalf("both %s and %s lead", lead.Identity(), follow.Identity())
	}
	if got := follow.Leader(); got != lead.Identity() {
		t.Fatalf("the follower names %q as the leader, want %q", got, lead.Identity())
	}
	if _, err := follow.Admit(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the follower admitted a step: %v", err)
	}
	if _, err := lead.Admit(ctx); err != nil {
		t.Fatalf("the leader could not admit a step: %v", err)
	}

	// The leader shuts down: it lets the Lease go, so the other does not
	// wait for it to lapse.
	stopped := time.Now()
	lead.Stop()
	if err := follow.Wait(ctx, true); err != nil {
		t.Fatalf("no takeover after the leader let go: %v", err)
	}
	t.Logf("takeover after the leader let its Lease go: %v (Lease %v, retry %v)", time.Since(stopped).Round(time.Millisecond), testLease, testRetry)
	l, err := ReadLease(ctx, c.Client(), ns, "mcp-patch-leader")
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != follow.Identity() || l.Transitions < 1 {
		t.Fatalf("leader Lease after the takeover: %s", l)
	}
}

// A leader whose renewals are held back while the other takes over never
// starts another destructive action: the step admitted before is fenced
// off, even while this server still believes it leads (a clock held back),
// and so is one admitted after.
func TestHeldBackLeaderIsFenced(t *testing.T) {
	c := labkube.Cluster(t)
	ns := labkube.Namespace(t, c)
	ctx := bounded(t)
	var cut partition
	a := elector(t, clientBehind(t, c, &cut), ns, "ops-1/101")
	b := elector(t, c.Client(), ns, "ops-2/202")
	a.Start(ctx)
	if err := a.Wait(ctx, true); err != nil {
		t.Fatal(err)
	}
	b.Start(ctx)
	if err := b.Observed(ctx); err != nil {
		t.Fatal(err)
	}

	var acted atomic.Int32
	step := func(ctx context.Context, e *Elector, f Fence, leading bool) error {
		if err := e.checkAs(ctx, f, leading); err != nil {
			return err
		}
		acted.Add(1)
		return nil
	}
	f, err := a.Admit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := step(ctx, a, f, a.IsLeader()); err != nil || acted.Load() != 1 {
		t.Fatalf("the leader's first step: %v, acted %d", err, acted.Load())
	}
	admitted := f // a second step, admitted before the partition

	held := time.Now()
	cut.writes.Store(true)
	if err := b.Wait(ctx, true); err != nil {
		t.Fatalf("no takeover while the leader's renewals are held back: %v", err)
	}
	t.Logf("takeover with the leader's renewals held back: %v (Lease %v, renew deadline %v, retry %v)",
		time.Since(held).Round(time.Millisecond), testLease, testRenew, testRetry)

	for _, believes := range []bool{true, a.IsLeader()} {
		err := step(ctx, a, admitted, believes)
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "ops-2/202") && !strings.Contains(err.Error(), "no longer leads") {
			t.Fatalf("step of the held-back leader (believes it leads: %v): %v", believes, err)
		}
		t.Logf("fenced (believes it leads: %v): %v", believes, err)
	}
	if _, err := a.Admit(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the held-back leader admitted a new step: %v", err)
	}
	// Cut off altogether, it cannot read the Leases: not sure, so no step.
	cut.reads.Store(true)
	if err := step(ctx, a, admitted, true); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "partitioned") {
		t.Fatalf("step of a leader cut off from the API server: %v", err)
	}
	if n := acted.Load(); n != 1 {
		t.Fatalf("the held-back leader acted %d times, want only its first step", n)
	}
	if err := a.Wait(ctx, false); err != nil {
		t.Fatalf("the held-back leader's elector never gave up: %v", err)
	}
	f, err = b.Admit(ctx)
	if err != nil {
		t.Fatalf("the new leader cannot admit a step: %v", err)
	}
	if err := step(ctx, b, f, b.IsLeader()); err != nil {
		t.Fatalf("the new leader's step: %v", err)
	}
}

// A leader steps down (before the window of the node it runs on): it lets
// the Lease go, the other server takes the lead, the one that stepped down
// follows it, and it campaigns again after sitting out, taking the lead
// back once the other lets go. A follower has nothing to hand over.
func TestStepDownHandsOver(t *testing.T) {
	c := labkube.Cluster(t)
	ns := labkube.Namespace(t, c)
	ctx := bounded(t)
	a, b := elector(t, c.Client(), ns, "ops-1/101"), elector(t, c.Client(), ns, "ops-2/202")
	a.Start(ctx)
	b.Start(ctx)
	lead := first(ctx, t, a, b)
	follow := a
	if lead == a {
		follow = b
	}
	if err := follow.Observed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := follow.StepDown(ctx, testLease); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("a follower stepped down: %v", err)
	}

	stepped := time.Now()
	l, err := lead.StepDown(ctx, testLease)
	if err != nil {
		t.Fatal(err)
	}
	if lead.IsLeader() {
		t.Fatalf("%s still leads after stepping down (Lease %s)", lead.Identity(), l)
	}
	if l.Holder == lead.Identity() {
		t.Fatalf("the leader Lease after the step-down: %s, want free or the other's", l)
	}
	if _, err := lead.Admit(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the server that stepped down admitted a step: %v", err)
	}
	if err := follow.Wait(ctx, true); err != nil {
		t.Fatalf("no takeover after the step-down: %v", err)
	}
	t.Logf("takeover after the step-down: %v (Lease %v, retry %v)", time.Since(stepped).Round(time.Millisecond), testLease, testRetry)
	if _, err := follow.Admit(ctx); err != nil {
		t.Fatalf("the new leader cannot admit a step: %v", err)
	}

	// It campaigns again: once the new leader lets go, it leads.
	follow.Stop()
	if err := lead.Wait(ctx, true); err != nil {
		t.Fatalf("the server that stepped down never campaigned again: %v", err)
	}
	l, err = ReadLease(ctx, c.Client(), ns, "mcp-patch-leader")
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != lead.Identity() || l.Transitions < 2 {
		t.Fatalf("leader Lease after the second takeover: %s", l)
	}
}
