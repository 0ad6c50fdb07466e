package plan

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// fleetInput is a fleet of n GPU servers behind 3 control-plane nodes.
func fleetInput(n int) Input {
	in := input(PerWindow)
	in.Order = in.Order[:3]
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("gpu-%04d", i)
		in.Order = append(in.Order, Position{Node: node, GPU: true, Canary: i == 0, Reason: "GPU server"})
		in.Facts[node] = facts(true)
	}
	return in
}

// BenchmarkPlan1000 builds, seals, encodes, decodes and renders the plan of
// a 1000-node fleet: what plan_round and every window step's check cost on
// top of reading the hosts.
func BenchmarkPlan1000(b *testing.B) {
	in := fleetInput(1000)
	var size, mdSize int
	for b.Loop() {
		f := Build(in)
		js, err := f.Encode()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(js); err != nil {
			b.Fatal(err)
		}
		var md bytes.Buffer
		if err := Markdown(&md, f); err != nil {
			b.Fatal(err)
		}
		if err := Text(io.Discard, f); err != nil {
			b.Fatal(err)
		}
		size, mdSize = len(js), md.Len()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(size)/1024, "plan.json-KiB")
	b.ReportMetric(float64(mdSize)/1024, "plan.md-KiB")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}
