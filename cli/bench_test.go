package cli

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkServeColdStart measures fork-exec of the real binary until its
// answer to initialize.
func BenchmarkServeColdStart(b *testing.B) {
	repo := exampleRepo(b)
	state := b.TempDir()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(binary, "serve", "--intent-repo", repo, "--state-dir", state)
		start := time.Now()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms/initialize")
		cs.Close()
	}
}

// BenchmarkReadIntentStdio measures read_intent tools/call latency over
// stdio against the real binary and reports p50 and p99.
func BenchmarkReadIntentStdio(b *testing.B) {
	repo := exampleRepo(b)
	cmd := exec.Command(binary, "serve", "--intent-repo", repo, "--state-dir", b.TempDir())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_intent", Arguments: map[string]any{"component": "os-layer"}})
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
