package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/tools"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The book's decisions: past the per-token cap the token's oldest idle
// session goes, past the total cap the oldest idle of all; a busy session
// is never closed for room (all busy: refused); idle ones expire after
// the idle time.
func TestSessionBookDecisions(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)}
	b := newSessionBook(sessionLimits{Total: 3, PerToken: 2, Idle: 30 * time.Minute}, clk.now)
	open := func(token, id string) []string {
		t.Helper()
		closed, ok := b.reserve(token)
		if !ok {
			t.Fatalf("session %s of %s refused", id, token)
		}
		b.admitted(token, id)
		clk.advance(time.Second)
		return closed
	}
	if c := open("a", "a1"); c != nil {
		t.Fatalf("closed %v", c)
	}
	open("a", "a2")
	if c := open("a", "a3"); !slices.Equal(c, []string{"a1"}) {
		t.Fatalf("per-token cap closed %v, want a1 (its oldest idle)", c)
	}
	b.begin("a2", false) // a GET: touches, not busy
	clk.advance(time.Second)
	open("b", "b1") // 3 live: a2, a3, b1
	if c := open("b", "b2"); !slices.Equal(c, []string{"a3"}) {
		t.Fatalf("total cap closed %v, want a3 (idle the longest: a2 was touched later)", c)
	}
	ends := []func(){b.begin("a2", true), b.begin("b1", true), b.begin("b2", true)}
	if _, ok := b.reserve("c"); ok {
		t.Fatal("a session was admitted while every live one was busy at the cap")
	}
	for _, end := range ends {
		end()
	}
	if b.count() != 3 {
		t.Fatalf("live %d, want 3", b.count())
	}
	clk.advance(29 * time.Minute)
	if e := b.expired(); len(e) != 0 {
		t.Fatalf("expired before the idle time: %v", e)
	}
	clk.advance(time.Minute)
	if e := b.expired(); len(e) != 3 {
		t.Fatalf("expired %v, want all three", e)
	}
	if b.count() != 0 {
		t.Fatalf("live %d after expiry", b.count())
	}
	b.admitted("a", "") // a failed initialize gives its slot back and records nothing
	if b.count() != 0 || len(b.pending) != 0 {
		t.Fatalf("live %d pending %v", b.count(), b.pending)
	}
}

// httpRig is the HTTP server as serve runs it (bearerHandler and
// newHTTPServer) on a loopback port, over the example intent repository.
type httpRig struct {
	url, token  string
	srvSessions func() int
}

func newHTTPRig(t testing.TB, repo string, configure func(*config.Config)) *httpRig {
	t.Helper()
	c := mustConfig(t, repo)
	if configure != nil {
		configure(&c)
	}
	d, cleanup, err := buildDeps(context.Background(), &c, discardLog(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	server := tools.NewServer(tools.Builtin(), d, "test")
	token := "0123456789abcdef0123456789abcdef"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, ln := newHTTPServer(ln, bearerHandler(server, token, sessionLimitsOf(c.Serve), discardLog()))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &httpRig{url: "http://" + ln.Addr().String() + "/mcp", token: token, srvSessions: func() int {
		n := 0
		for range server.Sessions() {
			n++
		}
		return n
	}}
}

// initialize opens a session with a raw initialize POST (a client that
// then vanishes) and answers its id.
func (r *httpRig) initialize(client *http.Client) (string, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"vanishing","version":"1"}}}`
	req, err := http.NewRequest("POST", r.url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+r.token)
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("initialize: HTTP %d", res.StatusCode)
	}
	return res.Header.Get("Mcp-Session-Id"), nil
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHTTPSessionsBounded: 20,000 initialize calls with the valid token
// (clients that open a session and vanish), 8 at a time, against the HTTP
// server with the default caps: every call answers, the live sessions
// stay at the per-token cap (128) and never above it, and the heap after
// the calls stays within the serve.memory_limit_mib default (16 MiB)
// of where it started. Before the caps, 17,000 calls left 17,000 live
// sessions and grew the server from 75 to 197 MB.
func TestHTTPSessionsBounded(t *testing.T) {
	calls, workers := 20000, 8
	if testing.Short() {
		calls = 2000
	}
	rig := newHTTPRig(t, exampleRepo(t), nil)
	def := config.DefaultConfig().Serve
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: time.Minute}
	if _, err := rig.initialize(client); err != nil { // warm: first tools/list schemas and the like
		t.Fatal(err)
	}
	start := liveHeap()
	var next, failed atomic.Int64
	var peakSessions atomic.Int64
	var peakHeap atomic.Uint64
	began := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := next.Add(1); n <= int64(calls); n = next.Add(1) {
				if _, err := rig.initialize(client); err != nil {
					failed.Add(1)
					t.Errorf("initialize %d: %v", n, err)
					return
				}
				if n%500 == 0 {
					if s := int64(rig.srvSessions()); s > peakSessions.Load() {
						peakSessions.Store(s)
					}
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapInuse > peakHeap.Load() {
						peakHeap.Store(m.HeapInuse)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	live := rig.srvSessions()
	end := liveHeap()
	t.Logf("%d initialize calls in %s (%.0f/s), %d failed; live sessions %d (peak sampled %d, cap %d per token, %d in all); "+
		"heap after GC %.1f → %.1f MiB, peak in use %.1f MiB",
		calls, elapsed.Round(time.Millisecond), float64(calls)/elapsed.Seconds(), failed.Load(), live, peakSessions.Load(),
		def.MaxSessionsPerToken, def.MaxSessions, mib(start), mib(end), mib(peakHeap.Load()))
	if failed.Load() > 0 {
		t.Fatalf("%d initialize calls failed", failed.Load())
	}
	// Closing a session finishes in the background: allow the calls in
	// flight at the last sample (workers) beside the cap.
	if live > def.MaxSessionsPerToken || peakSessions.Load() > int64(def.MaxSessionsPerToken+workers) {
		t.Fatalf("live sessions %d (peak %d), cap %d", live, peakSessions.Load(), def.MaxSessionsPerToken)
	}
	if live < def.MaxSessionsPerToken/2 {
		t.Fatalf("live sessions %d: the cap closed more than it had to (cap %d)", live, def.MaxSessionsPerToken)
	}
	if grew := int64(end) - int64(start); grew > int64(def.MemoryLimitMiB)<<20 {
		t.Fatalf("the heap grew by %.1f MiB over %d initialize calls (limit %d MiB)", float64(grew)/(1<<20), calls, def.MemoryLimitMiB)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
