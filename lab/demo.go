package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/tools"
)

// Session connects an in-process MCP client to mcp-patch's server built
// from the lab's configuration, with the lab's clock. close ends both.
func (l *Lab) Session(ctx context.Context, log *slog.Logger) (*mcp.ClientSession, *tools.Deps, func(), error) {
	cfg := l.Config
	d, cleanup, err := tools.Build(ctx, &cfg, log, func(string) string { return "" }, l.Clock.Now)
	if err != nil {
		return nil, nil, nil, err
	}
	srv := tools.NewServer(tools.Builtin(), d, "lab")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lab-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		ss.Close()
		cleanup()
		return nil, nil, nil, err
	}
	return cs, d, func() { cs.Close(); ss.Close(); cleanup() }, nil
}

// DemoResult is what a demo round left behind.
type DemoResult struct {
	Outcome  Outcome
	Duration time.Duration
	Branch   string
	Log      string // git log --oneline of the working branch
}

// RunRound runs a whole round on a running lab with the agent client,
// approvals signed by the lab's key and the soak passed by the lab clock.
func (l *Lab) RunRound(ctx context.Context, roundID string, w io.Writer, log *slog.Logger) (DemoResult, error) {
	start := time.Now()
	cs, _, closeSession, err := l.Session(ctx, log)
	if err != nil {
		return DemoResult{}, err
	}
	defer closeSession()
	agent := &Agent{
		Session: cs,
		Sign:    l.Sign,
		Wait:    l.Clock.AdvanceTo,
		Say:     func(s string) { fmt.Fprintln(w, "  "+s) },
		BeforeClose: func(ctx context.Context) error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_lesson", Arguments: map[string]any{
				"component": "os-layer", "kind": "lesson", "round": roundID,
				"text": "Lab round " + roundID + ": every node booted the new kernel on its trial boot; windows closed one at a time behind green gates.",
			}})
			if err != nil || res.IsError {
				return fmt.Errorf("record_lesson before close: %v %v", err, res)
			}
			fmt.Fprintln(w, "  record_lesson    os-layer       ok")
			return nil
		},
	}
	if l.VMCanary != nil {
		// A status call on the VM runs a host step on its one emulated CPU.
		agent.PollNode = map[string]time.Duration{l.VMCanary.Name: vmPoll}
	}
	drilled := false
	agent.BeforeCall = func(ctx context.Context, tool, node string) error {
		if tool != "trial_boot" || drilled || !strings.HasPrefix(node, "gpu-canary") {
			return nil
		}
		drilled = true
		status, reasons, err := agent.Follow(ctx, "fallback_drill", map[string]any{"node": node})
		if err != nil {
			return fmt.Errorf("fallback drill: %w", err)
		}
		fmt.Fprintf(w, "  %-16s %-14s %-12s %s\n", "fallback_drill", node, status, first(reasons))
		if status != "ok" {
			return fmt.Errorf("fallback drill on %s: %s: %v", node, status, reasons)
		}
		return nil
	}
	out, err := agent.Run(ctx, roundID)
	if b, perr := os.ReadFile(filepath.Join(l.IntentRepo, "rounds", roundID, "plan.json")); perr == nil {
		if f, perr := plan.Decode(b); perr == nil {
			fmt.Fprintf(w, "  signatures: the plan needs %d as the intent sizes approvals (GPU servers per window), %d with one per destructive step; the agent asked a person for %d\n",
				f.Signatures, f.PerStepSignatures, out.Approvals)
		}
	}
	res := DemoResult{Outcome: out, Duration: time.Since(start), Branch: "mcp-patch/round-" + roundID}
	if b, gerr := exec.Command("git", "-C", l.IntentRepo, "log", "--oneline", res.Branch).Output(); gerr == nil {
		res.Log = strings.TrimSpace(string(b))
	}
	return res, err
}
