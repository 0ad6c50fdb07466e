package round

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func bigFleet(n int) []NodeInfo {
	nodes := []NodeInfo{{Name: "cp-0", ControlPlane: true}, {Name: "cp-1", ControlPlane: true}, {Name: "cp-2", ControlPlane: true}}
	for i := range n - 3 {
		nodes = append(nodes, NodeInfo{Name: fmt.Sprintf("gpu-%04d", i), GPU: true, RunningGPUPods: i % 8})
	}
	return nodes
}

// BenchmarkAppend measures one journaled step (start and finish: two
// fsync'd records, two state-file rewrites) in a round of 1000 nodes,
// unanchored and anchored as the server opens it (each record also
// fsync'd into the anchor first, the live file checked against it).
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		size     int
		anchored bool
	}{{10, false}, {10, true}, {1000, false}, {1000, true}} {
		size := c.size
		b.Run(fmt.Sprintf("nodes=%d/anchored=%v", size, c.anchored), func(b *testing.B) {
			var opts []Option
			if c.anchored {
				opts = append(opts, WithAnchor(b.TempDir()))
			}
			j, err := Open(filepath.Join(b.TempDir(), "bench"), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			o, err := PlanOrder(bigFleet(size), Placement{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := j.Plan(o, time.Hour, Meta{}); err != nil {
				b.Fatal(err)
			}
			node := o.Positions[size/2].Node
			for b.Loop() {
				if _, err := j.StartStep(StepInspect, node, Meta{}); err != nil {
					b.Fatal(err)
				}
				if _, err := j.FinishStep(StepInspect, node, Meta{}); err != nil {
					b.Fatal(err)
				}
			}
			fi, _ := os.Stat(filepath.Join(j.Dir(), StateFile))
			b.ReportMetric(float64(fi.Size()), "state-bytes")
		})
	}
}

// BenchmarkReplay measures rebuilding the state of a whole 1000-node round
// (every window run) from its journal bytes.
func BenchmarkReplay(b *testing.B) {
	st := NewState("bench")
	seq := uint64(0)
	now := base
	var data []byte
	add := func(r Record) {
		seq++
		now = now.Add(time.Second)
		r.Seq, r.Time = seq, now
		if err := st.Apply(r); err != nil {
			b.Fatal(err)
		}
		line, _ := json.Marshal(r)
		data = append(append(data, line...), '\n')
	}
	o, _ := PlanOrder(bigFleet(1000), Placement{})
	add(Record{Kind: KindSessionOpened, Round: "bench"})
	add(Record{Kind: KindPlan, Plan: &Schedule{Order: o}})
	step := func(s Step, node string) {
		add(Record{Kind: KindStepStarted, Step: s, Node: node})
		add(Record{Kind: KindStepFinished, Step: s, Node: node, Outcome: OutcomeDone})
	}
	step(StepBaseline, "")
	for _, p := range o.Positions {
		for _, s := range NodeSteps {
			if s != StepGPUAcceptance || p.GPU {
				step(s, p.Node)
			}
		}
	}
	b.ReportMetric(float64(seq), "records")
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := Replay(data); err != nil {
			b.Fatal(err)
		}
	}
}
