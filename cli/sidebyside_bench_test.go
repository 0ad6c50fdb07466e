package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkSideBySide measures mcp-patch and, when MCP_PATCH_BENCH_PEER
// holds a command line (e.g. a kubernetes-mcp-server binary and its flags),
// that peer server in the same run, their cold starts interleaved so both
// see the same load: fork-exec to the initialize result and to the
// tools/list result (median of 10 cold starts each), the tools/list result's
// bytes, and the official TypeScript SDK's listTools (median of 10 cold
// clients). It prints one table.
//
//	MCP_PATCH_BENCH_PEER='/path/to/kubernetes-mcp-server' \
//	  go test ./cli -run '^$' -bench SideBySide -benchtime 1x
func BenchmarkSideBySide(b *testing.B) {
	repo := exampleRepo(b)
	type server struct {
		name    string
		command []string
		inits   []time.Duration
		lists   []time.Duration
		bytes   int
		tools   int
		sdk     tsListToolsResult
	}
	servers := []*server{{name: "mcp-patch", command: []string{binary, "serve", "--intent-repo", repo, "--state-dir", b.TempDir()}}}
	if peer := strings.Fields(os.Getenv("MCP_PATCH_BENCH_PEER")); len(peer) > 0 {
		servers = append(servers, &server{name: peerName(peer[0]), command: peer})
	}
	const rounds = 10
	for i := 0; i < b.N; i++ {
		for _, s := range servers {
			s.inits, s.lists = nil, nil
		}
		for r := 0; r < rounds; r++ {
			for _, s := range servers {
				run, err := coldStart(exec.Command(s.command[0], s.command[1:]...), time.Minute)
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				s.inits = append(s.inits, run.Initialize)
				s.lists = append(s.lists, run.ToolsList)
				var list struct{ Tools []json.RawMessage }
				if err := json.Unmarshal(run.Result, &list); err != nil {
					b.Fatalf("%s: tools/list: %v", s.name, err)
				}
				s.bytes, s.tools = len(run.Result), len(list.Tools)
			}
		}
		for _, s := range servers {
			s.sdk = tsListTools(b, rounds, "[]", s.command...)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	ours := servers[0]
	b.ReportMetric(ms(median(ours.inits)), "ms/initialize")
	b.ReportMetric(ms(median(ours.lists)), "ms/tools-list")
	b.ReportMetric(float64(ours.bytes), "bytes/tools-list")
	b.ReportMetric(ours.sdk.MedianMS, "ms/ts-listTools")
	var t strings.Builder
	fmt.Fprintf(&t, "\n%-24s %6s %8s %14s %14s %16s\n", "server (median of 10)", "tools", "bytes", "initialize ms", "tools/list ms", "TS listTools ms")
	for _, s := range servers {
		fmt.Fprintf(&t, "%-24s %6d %8d %14.1f %14.1f %16.1f\n", s.name, s.tools, s.bytes, ms(median(s.inits)), ms(median(s.lists)), s.sdk.MedianMS)
	}
	fmt.Print(t.String())
}

func peerName(path string) string {
	if i := strings.LastIndex(path, "/"); i >= 0 {
		return path[i+1:]
	}
	return path
}

// median of a non-empty sample.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
