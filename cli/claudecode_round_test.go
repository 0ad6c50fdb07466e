package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/lab"
	"github.com/mcp-patch/mcp-patch/round"
)

// TestClaudeCodeRunsLabRound: the real Claude Code CLI (claude -p) runs a
// whole round on a small lab from plan to close: two control-plane nodes
// (with one, the only Postgres instance could never be evicted, and the
// plan rightly stops the round), a canary and one GPU server. The model is scripted (scriptedModel on
// 127.0.0.1: it follows each result's next_call, has the lab's person sign
// what needs approval, and lets the lab's clock pass the soak); everything
// else is Claude Code's own: it loads the deferred MCP tools with
// ToolSearch, runs them over HTTP with the permission --allowedTools
// grants, passes error results on as such, and applies its result size
// limits and tool timeout (MCP_TOOL_TIMEOUT, set to a minute). Connected as
// `mcp-patch lab up` tells a person to.
func TestClaudeCodeRunsLabRound(t *testing.T) {
	bin, err := filepath.Abs(claudeCLI)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Claude Code is not installed: run scripts/setup.sh (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	// A red gate is waited on for 5 minutes (the lab's default is 90 s):
	// on a loaded 2-core machine a rebooted control-plane node's etcd
	// member and Postgres instance can take longer than that to be ready.
	l, err := lab.Up(ctx, lab.Options{Dir: t.TempDir(), ControlPlanes: 2, Canary: 1, GPUServers: 1, GateSettle: 5 * time.Minute,
		Logger: discardLog(), Progress: func(s string) { t.Log("lab: " + s) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("stop the lab: %v", err)
		}
	})
	h, err := ServeHTTP(ctx, l.Config, "127.0.0.1:0", filepath.Join(l.Dir, "http.token"), l.Clock.Now, func(string) string { return "" }, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	t.Logf("lab up in %s", time.Since(start).Round(time.Second))
	// What goes over the wire about progress: the calls Claude Code sends
	// with a progressToken, and the progress notifications it is sent.
	var toolCalls, withToken, progressSent atomic.Int32
	h.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				toolCalls.Add(1)
				if p, ok := req.GetParams().(interface{ GetProgressToken() any }); ok && p.GetProgressToken() != nil {
					withToken.Add(1)
				}
			}
			return next(ctx, method, req)
		}
	})
	h.Server.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "notifications/progress" {
				progressSent.Add(1)
			}
			return next(ctx, method, req)
		}
	})

	const server = "mcp-patch-lab"
	model := newScriptedModel(server, l.Sign, l.Clock.AdvanceTo)
	modelURL := model.start(t)
	home := t.TempDir()
	// As lab up's banner has it.
	claude(t, home, "mcp", "add", "--transport", "http", server, h.URL, "--header", "Authorization: Bearer "+h.Token)

	run := claudePrint(ctx, t, bin, home, server, modelURL,
		"Run this month's OS and kernel patch round of the lab with the "+server+" tools: start with round_status and follow each result's next_call.")
	transcript, wall, runErr := run.transcript, run.wall, run.err

	model.mu.Lock()
	defer model.mu.Unlock()
	t.Logf("Claude Code %s; MCP servers at start: %s", run.version, run.servers)
	if !strings.Contains(run.servers, server+" connected") {
		t.Errorf("%s was not connected when the session started: %s", server, run.servers)
	}
	report(t, model, wall)
	if runErr != nil {
		t.Errorf("claude -p: %v\n%s", runErr, run.stderr)
	}
	if !model.closed {
		var last strings.Builder
		for _, c := range model.calls[max(0, len(model.calls)-15):] {
			fmt.Fprintf(&last, "  %s %s: %s\n", c.Tool, c.Node, c.Status)
		}
		tail, _ := exec.Command("tail", "-c", "3000", transcript).Output()
		t.Fatalf("the round did not close: %s\nlast calls:\n%slast of Claude Code's stream:\n%s", model.stuck, last.String(), tail)
	}
	for _, p := range model.problems {
		t.Error(p)
	}
	for _, o := range model.others {
		t.Errorf("Claude Code asked the model endpoint for %s", o)
	}

	// The round is closed in its journal, and every host runs a new kernel.
	ids, err := filepath.Glob(filepath.Join(l.IntentRepo, "rounds", "*", round.JournalFile))
	if err != nil || len(ids) != 1 {
		t.Fatalf("want one round journal, got %v (%v)", ids, err)
	}
	st, _, err := round.ReadState(filepath.Dir(ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	if ph := st.Status(l.Clock.Now()).Phase; ph != round.PhaseClosed {
		t.Errorf("round %s is %s in its journal, want closed", st.RoundID, ph)
	}
	for _, host := range l.Fleet.Hosts() {
		hs, err := host.State()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(hs.Kernel, "6.8.0-48") {
			t.Errorf("%s still runs %s", host.Name, hs.Kernel)
		}
	}

	// What Claude Code did with the calls.
	if model.searches == 0 {
		t.Error("Claude Code offered every tool up front: deferred loading (ToolSearch) was not exercised")
	}
	checkLimits(t, model)
	sawError, afterError := false, false
	for i, c := range model.calls {
		if c.IsError {
			sawError = true
			afterError = afterError || i+1 < len(model.calls)
		}
	}
	if !sawError || !afterError {
		t.Errorf("no error result was passed on and followed (saw one: %v)", sawError)
	}
	t.Logf("progress: %d of %d tool calls carried a progressToken; %d progress notifications sent", withToken.Load(), toolCalls.Load(), progressSent.Load())
	if withToken.Load() == 0 || withToken.Load() != toolCalls.Load() {
		t.Errorf("Claude Code sent a progressToken with %d of %d tool calls", withToken.Load(), toolCalls.Load())
	}
	if progressSent.Load() == 0 {
		t.Error("no progress notification reached Claude Code (plan_round reports each node's preflight)")
	}
	if model.approvals == 0 || model.waits == 0 {
		t.Errorf("approvals signed %d, soak waits %d: want both", model.approvals, model.waits)
	}
}
