package lab

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// oneCallServer makes each tool call as `mcp-patch tool NAME` does: a
// server built from the lab's configuration (with the lab's clock), one
// call, and the server closed (its rounds' journals closed) before the
// answer returns.
type oneCallServer struct {
	l   *Lab
	log *slog.Logger
}

func (s oneCallServer) CallTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	cs, _, closeSession, err := s.l.Session(ctx, s.log)
	if err != nil {
		return nil, err
	}
	defer closeSession()
	return cs.CallTool(ctx, params)
}

// porcelain is `git status --porcelain --untracked-files=all` of repo.
func porcelain(t *testing.T, repo string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=all").CombinedOutput()
	if err != nil {
		t.Fatalf("git status: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWorkingCopyCleanAfterEveryCall runs a whole lab round through the
// MCP server (one session for the round) and through the CLI's way of
// calling (a server per call, closed after it), and after every call,
// round_status and the calls a person's approval follows included, the
// intent repository's working copy is clean: nothing is written after a
// call's last commit (closing a journal writes its state snapshot into
// the state directory, never into rounds/<id>/), and no commit holds a
// state.json.
func TestWorkingCopyCleanAfterEveryCall(t *testing.T) {
	const roundID = "2026-12"
	for _, via := range []string{"mcp", "cli"} {
		t.Run(via, func(t *testing.T) {
			l := upLab(t, Options{ControlPlanes: 2, Canary: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			var caller Caller = oneCallServer{l, testLog(t)}
			if via == "mcp" {
				cs, _, closeSession, err := l.Session(ctx, testLog(t))
				if err != nil {
					t.Fatal(err)
				}
				defer closeSession()
				caller = cs
			}
			calls, dirty := 0, 0
			agent := &Agent{Session: caller, Sign: l.Sign, Wait: l.Clock.AdvanceTo, Say: func(s string) { t.Log(s) },
				Called: func(_ context.Context, tool, status string) {
					calls++
					if st := porcelain(t, l.IntentRepo); st != "" {
						dirty++
						t.Errorf("after call %d (%s, %s) the working copy is not clean:\n%s", calls, tool, status, st)
					}
				},
				BeforeClose: func(ctx context.Context) error {
					res, err := caller.CallTool(ctx, &mcp.CallToolParams{Name: "record_lesson", Arguments: map[string]any{
						"component": "os-layer", "kind": "lesson", "round": roundID, "text": "clean working copy round"}})
					if err == nil && res.IsError {
						t.Errorf("record_lesson: %+v", res.Content)
					}
					if st := porcelain(t, l.IntentRepo); st != "" {
						t.Errorf("after record_lesson the working copy is not clean:\n%s", st)
					}
					return err
				}}
			out, err := agent.Run(ctx, roundID)
			if err != nil {
				t.Fatalf("round: %v (after %d calls)", err, out.Calls)
			}
			if !out.Closed {
				t.Fatalf("round did not close: %+v", out.Stopped)
			}
			if calls < 20 {
				t.Fatalf("only %d calls checked", calls)
			}
			if log, err := exec.Command("git", "-C", l.IntentRepo, "log", "--all", "--format=%h %s", "--", "rounds/"+roundID+"/state.json").CombinedOutput(); err != nil || len(log) != 0 {
				t.Errorf("commits hold rounds/%s/state.json (%v):\n%s", roundID, err, log)
			}
			t.Logf("%s: %d calls, %d with the working copy not clean", via, calls, dirty)
		})
	}
}
