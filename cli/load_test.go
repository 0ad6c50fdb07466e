package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/config"
)

// loadFigures is what one load run measured.
type loadFigures struct {
	calls, failed, vanished int64
	p50, p99, max           time.Duration
	peakSessions, cap       int
	peakRSSKiB              int64
	elapsed                 time.Duration
}

func (f loadFigures) String() string {
	return fmt.Sprintf("%d read-only calls in %s (%.0f/s), %d failed; p50 %s, p99 %s, max %s; %d vanishing clients; live sessions peak %d (cap %d); peak RSS %.1f MiB",
		f.calls, f.elapsed.Round(time.Millisecond), float64(f.calls)/f.elapsed.Seconds(), f.failed, f.p50.Round(time.Microsecond),
		f.p99.Round(time.Microsecond), f.max.Round(time.Microsecond), f.vanished, f.peakSessions, f.cap, float64(f.peakRSSKiB)/1024)
}

// runLoad runs sessions concurrent MCP sessions (the Go SDK's streamable
// client, each with its standalone SSE stream) calling read-only tools
// (round_status, read_intent) in turn for d, beside two clients that open
// a session and vanish, over and over, against the HTTP server as serve
// runs it, on loopback.
func runLoad(t testing.TB, sessions int, d time.Duration) loadFigures {
	t.Helper()
	rig := newHTTPRig(t, plannedRepo(t), nil)
	hc := &http.Client{Transport: bearerTransport{token: rig.token}}
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	clients := make([]*mcp.ClientSession, sessions)
	for i := range clients {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "load", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: rig.url, HTTPClient: hc, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		clients[i] = cs
		defer cs.Close()
	}
	var (
		f         loadFigures
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
		failed    atomic.Int64
		vanished  atomic.Int64
	)
	deadline := time.Now().Add(d)
	begin := time.Now()
	calls := []mcp.CallToolParams{
		{Name: "round_status", Arguments: map[string]any{}},
		{Name: "read_intent", Arguments: map[string]any{"component": "os-layer"}},
	}
	// The vanishing clients start once every session has answered its
	// first call: a session opened but not yet used is as idle as a
	// vanished one, and the oldest idle session is the one closed for room.
	var warm sync.WaitGroup
	warm.Add(len(clients))
	for i, cs := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for n := i; time.Now().Before(deadline) || n == i; n++ {
				p := calls[n%len(calls)]
				start := time.Now()
				res, err := cs.CallTool(ctx, &p)
				mine = append(mine, time.Since(start))
				if n == i {
					warm.Done()
				}
				if err != nil || res.IsError {
					if failed.Add(1) <= 3 {
						t.Errorf("session %d %s: %v %+v", i, p.Name, err, res)
					}
					if err != nil {
						break // a closed session fails every later call at once
					}
				}
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
	}
	vc := &http.Client{Timeout: time.Minute}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			warm.Wait()
			// Paced (4 a second between the two): the session closed for
			// room is the one idle longest, so a vanished session must be
			// older than the longest pause a starved load session takes
			// between two calls; at this pace the oldest vanished one is
			// about 7 s old when the cap is reached (28 above 100).
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for time.Now().Before(deadline) {
				if _, err := rig.initialize(vc); err != nil {
					t.Errorf("a vanishing client: %v", err)
					return
				}
				vanished.Add(1)
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	peak := 0
	for done := false; !done; {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			done = true
		}
		peak = max(peak, rig.srvSessions())
		if time.Now().After(deadline) {
			done = true
		}
	}
	wg.Wait()
	f.elapsed = time.Since(begin)
	slices.Sort(latencies)
	f.calls, f.failed, f.vanished = int64(len(latencies)), failed.Load(), vanished.Load()
	if len(latencies) > 0 {
		f.p50, f.p99, f.max = latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1]
	}
	f.peakSessions, f.cap = peak, config.DefaultConfig().Serve.MaxSessionsPerToken
	f.peakRSSKiB = peakRSS(t)
	return f
}

// peakRSS is this process's peak resident set (VmHWM), in KiB.
func peakRSS(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// TestHTTPLoad: 100 concurrent MCP sessions calling read-only tools for
// 10 s (MCP_PATCH_LOAD_SECONDS for longer), beside clients that open a
// session and vanish: no call fails and the live sessions stay at the
// per-token cap, the vanished ones closed for room.
func TestHTTPLoad(t *testing.T) {
	d := 10 * time.Second
	if s := os.Getenv("MCP_PATCH_LOAD_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MCP_PATCH_LOAD_SECONDS=%q: a number of seconds", s)
		}
		d = time.Duration(n) * time.Second
	}
	f := runLoad(t, 100, d)
	t.Log(f)
	if f.failed > 0 || f.calls == 0 {
		t.Fatalf("%d of %d calls failed", f.failed, f.calls)
	}
	if f.peakSessions > f.cap+4 {
		t.Fatalf("live sessions peaked at %d, cap %d", f.peakSessions, f.cap)
	}
}

// BenchmarkHTTPLoad prints the load test's figures for 60 s (or
// MCP_PATCH_LOAD_SECONDS): go test ./cli -run '^$' -bench HTTPLoad -benchtime 1x.
func BenchmarkHTTPLoad(b *testing.B) {
	d := 60 * time.Second
	if s := os.Getenv("MCP_PATCH_LOAD_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("MCP_PATCH_LOAD_SECONDS=%q: a number of seconds", s)
		}
		d = time.Duration(n) * time.Second
	}
	for range b.N {
		f := runLoad(b, 100, d)
		fmt.Println("HTTP load:", f)
		if f.failed > 0 {
			b.Fatalf("%d calls failed", f.failed)
		}
		b.ReportMetric(float64(f.p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(f.p99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(f.peakRSSKiB)/1024, "peak-rss-MiB")
	}
}
