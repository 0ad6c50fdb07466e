package tools

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
