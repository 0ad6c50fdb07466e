package tools

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestProgressGuard(t *testing.T) {
	for _, tc := range []struct {
		name string
		done []float64
		sent []bool
	}{
		{"increasing", []float64{0, 1, 2.5, 3}, []bool{true, true, true, true}},
		{"a repeat is not sent", []float64{1, 1, 2}, []bool{true, false, true}},
		{"a late report is not sent", []float64{0, 3, 2, 4}, []bool{true, true, false, true}},
		{"the first may be zero", []float64{0, 0}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g progressGuard
			for i, d := range tc.done {
				if got := g.next(d); got != tc.sent[i] {
					t.Errorf("report %d (%v): sent %v, want %v", i, d, got, tc.sent[i])
				}
			}
		})
	}
}

func TestProgressAfter(t *testing.T) {
	type report struct{ done, total float64 }
	var got []report
	p := Progress(func(done, total float64, _ string) { got = append(got, report{done, total}) })
	sub := p.after(3, 11)
	sub(1, 6, "a")
	sub(6, 6, "b")
	if len(got) != 2 || got[0] != (report{4, 11}) || got[1] != (report{9, 11}) {
		t.Fatalf("after(3, 11): %v", got)
	}
}

// TestPlanRoundProgressOverMCP: a client that sends a progressToken with
// plan_round receives progress notifications with that token while the
// call runs: each stage and, per node, its preflight and drain preview,
// progress rising with each notification against the total, the commit
// last.
func TestPlanRoundProgressOverMCP(t *testing.T) {
	f := newFleet(t)
	got := make(chan *mcp.ProgressNotificationParams, 64)
	cs := connect(t, testTools(), f.d, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			got <- r.Params
		}})
	params := &mcp.CallToolParams{Name: "plan_round", Arguments: map[string]any{"round": fRound}}
	params.SetProgressToken("plan-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("plan_round: %v", res.Content)
	}
	var notes []*mcp.ProgressNotificationParams
	for len(notes) == 0 || notes[len(notes)-1].Message != "commit" {
		select {
		case n := <-got:
			notes = append(notes, n)
		case <-time.After(30 * time.Second):
			t.Fatalf("no commit progress after %d notifications", len(notes))
		}
	}
	nodes := []string{"cp-1", "gpu-1", "gpu-2"}
	wantTotal := float64(5 + 2*len(nodes))
	var msgs []string
	for i, n := range notes {
		msgs = append(msgs, n.Message)
		if n.ProgressToken != "plan-1" {
			t.Errorf("notification %d has token %v", i, n.ProgressToken)
		}
		if i > 0 && n.Progress <= notes[i-1].Progress {
			t.Errorf("notification %d (%s): progress %v after %v", i, n.Message, n.Progress, notes[i-1].Progress)
		}
		if i > 0 && n.Total != wantTotal {
			t.Errorf("notification %d (%s): total %v, want %v", i, n.Message, n.Total, wantTotal)
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"inventory and placement", "baseline", "fleet-wide preflight"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q among the progress messages:\n%s", want, all)
		}
	}
	for _, node := range nodes {
		if !strings.Contains(all, "preflight "+node+":") || !strings.Contains(all, "drain preview "+node) {
			t.Errorf("no preflight and drain preview progress for %s:\n%s", node, all)
		}
	}
	if last := notes[len(notes)-1]; last.Progress != wantTotal-1 {
		t.Errorf("commit at %v of %v", last.Progress, last.Total)
	}
}
