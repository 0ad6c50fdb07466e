package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Claude Code's limits on what an MCP tool call may take and return, as
// its documentation states them and version 2.1.332 implements them: it
// warns when a result exceeds 10,000 tokens, truncates one over
// MAX_MCP_OUTPUT_TOKENS (default 25,000 tokens; it estimates about four
// characters a token), and sets a successful result over 50,000 characters
// aside in a file. mcp-patch keeps every result under the warning and every
// call under a minute (a longer step answers in_progress and is called
// again).
const (
	claudeWarnTokens = 10_000
	// claudeWarnChars is the warning size in characters, counted at three
	// characters a token (JSON packs denser than prose): a margin below
	// Claude Code's own four.
	claudeWarnChars = claudeWarnTokens * 3
	maxCallTime     = 60 * time.Second
)

// TestClaudeCodeFollowsNextCall: without a cluster, the first steps of a
// round through the real Claude Code CLI (claude -p) and the scripted
// model: round_status, loaded through ToolSearch (Claude Code defers MCP
// tools), answers that no round is open as an error result whose next_call
// is plan_round for this month by the server's clock; Claude Code passes it
// on as an error and the model follows it; plan_round then fails (no
// kubeconfig) with nothing to call, and the model stops there.
func TestClaudeCodeFollowsNextCall(t *testing.T) {
	bin, err := filepath.Abs(claudeCLI)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Claude Code is not installed: run scripts/setup.sh (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	token := "0123456789abcdef0123456789abcdef"
	url := startHTTP(t, exampleRepo(t), token)
	const server = "mcp-patch"
	model := newScriptedModel(server, func(string) (string, error) { return "", errors.New("nothing to sign here") }, func(time.Time) {})
	modelURL := model.start(t)
	home := t.TempDir()
	claude(t, home, "mcp", "add", "--transport", "http", server, url, "--header", "Authorization: Bearer "+token)
	before := time.Now()
	run := claudePrint(ctx, t, bin, home, server, modelURL, "Start this month's patch round with the "+server+" tools: call round_status and follow next_call.")
	after := time.Now()

	model.mu.Lock()
	defer model.mu.Unlock()
	t.Logf("Claude Code %s; MCP servers at start: %s", run.version, run.servers)
	report(t, model, run.wall)
	checkLimits(t, model)
	if run.err != nil {
		t.Errorf("claude -p: %v\n%s", run.err, run.stderr)
	}
	if !strings.Contains(run.servers, server+" connected") {
		t.Errorf("%s was not connected when the session started: %s", server, run.servers)
	}
	var got []string
	for _, c := range model.calls {
		got = append(got, fmt.Sprintf("%s %s error=%v", c.Tool, c.Status, c.IsError))
	}
	want := []string{"round_status refused error=true", "plan_round failed error=true"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("calls %q, want %q (stuck: %s)", got, want, model.stuck)
	}
	// The month by the server's clock (the run may straddle a month's end).
	if r := model.calls[1].Args["round"]; r != before.Format("2006-01") && r != after.Format("2006-01") {
		t.Errorf("plan_round round=%v, want this month (%s)", r, before.Format("2006-01"))
	}
	if model.searches < 2 {
		t.Errorf("%d ToolSearch loads, want one for each of the two tools (Claude Code defers MCP tools)", model.searches)
	}
	if !strings.Contains(model.stuck, "plan_round") || !strings.Contains(model.stuck, "kubeconfig") {
		t.Errorf("the model stopped for another reason: %s", model.stuck)
	}
	for _, p := range model.problems {
		t.Error(p)
	}
	for _, o := range model.others {
		t.Errorf("Claude Code asked the model endpoint for %s", o)
	}
}

// report logs the round's figures: calls, time, and the largest and
// slowest result of each tool.
func report(t *testing.T, m *scriptedModel, wall time.Duration) {
	type agg struct {
		n, maxChars int
		maxTook     time.Duration
	}
	by := map[string]*agg{}
	var maxChars int
	var maxTook time.Duration
	var slowest, largest string
	inProgress, errResults := 0, 0
	for _, c := range m.calls {
		a := by[c.Tool]
		if a == nil {
			a = &agg{}
			by[c.Tool] = a
		}
		a.n++
		a.maxChars = max(a.maxChars, c.Chars)
		a.maxTook = max(a.maxTook, c.Took)
		if c.Chars > maxChars {
			maxChars, largest = c.Chars, c.Tool
		}
		if c.Took > maxTook {
			maxTook, slowest = c.Took, c.Tool+" "+c.Node
		}
		if c.Status == "in_progress" {
			inProgress++
		}
		if c.IsError {
			errResults++
		}
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %5s %12s %10s\n", "tool", "calls", "max chars", "max time")
	for _, n := range names {
		a := by[n]
		fmt.Fprintf(&b, "%-22s %5d %12d %10s\n", n, a.n, a.maxChars, a.maxTook.Round(time.Millisecond))
	}
	t.Logf("Claude Code round: %d MCP tool calls (%d in_progress, %d error results, %d with an approval), %d ToolSearch loads, "+
		"%d model requests (+%d side, %d count_tokens), wall time %s; largest result %d characters (%s), slowest call %s (%s)\n%s",
		len(m.calls), inProgress, errResults, m.approvals, m.searches, m.requests, m.sideRequests, m.countTokens,
		wall.Round(time.Second), maxChars, largest, maxTook.Round(time.Millisecond), slowest, b.String())
}

// streamInit reads the first line of Claude Code's stream-json output (its
// init message): its version and the state of each MCP server.
func streamInit(transcript string) (version, servers string, err error) {
	f, err := os.Open(transcript)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	var init struct {
		Type, Subtype     string
		ClaudeCodeVersion string `json:"claude_code_version"`
		MCPServers        []struct {
			Name, Status string
		} `json:"mcp_servers"`
	}
	if err := json.NewDecoder(f).Decode(&init); err != nil {
		return "", "", fmt.Errorf("no init message: %w", err)
	}
	if init.Type != "system" || init.Subtype != "init" {
		return "", "", fmt.Errorf("the first message is %s/%s, not system/init", init.Type, init.Subtype)
	}
	var b strings.Builder
	for _, s := range init.MCPServers {
		fmt.Fprintf(&b, "%s %s; ", s.Name, s.Status)
	}
	return init.ClaudeCodeVersion, strings.TrimSuffix(b.String(), "; "), nil
}

// claudeRun is one `claude -p` session as claudePrint ran it.
type claudeRun struct {
	transcript       string // stream-json output
	stderr           string
	wall             time.Duration
	err              error
	version, servers string // from the stream's init message
}

// claudePrint runs Claude Code headless (claude -p) in home, with the model
// at modelURL and permission for every tool of the MCP server named server.
// MCP_CONNECTION_NONBLOCKING=false makes it wait for the server to connect
// before its first request (by default it may ask the model first, the
// server's tools not yet offered); MCP_TOOL_TIMEOUT bounds every call.
func claudePrint(ctx context.Context, t *testing.T, bin, home, server, modelURL, prompt string) claudeRun {
	t.Helper()
	r := claudeRun{transcript: filepath.Join(t.TempDir(), "claude-stream.jsonl")}
	out, err := os.Create(r.transcript)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, bin, "-p", prompt,
		"--output-format", "stream-json", "--verbose", "--no-session-persistence",
		"--allowedTools", "mcp__"+server+"__*")
	cmd.Dir = home
	cmd.Env = append(claudeEnv(home), "ANTHROPIC_BASE_URL="+modelURL, "ANTHROPIC_API_KEY=sk-ant-lab-dummy",
		fmt.Sprintf("MCP_TOOL_TIMEOUT=%d", maxCallTime.Milliseconds()), "MCP_CONNECTION_NONBLOCKING=false")
	cmd.Stdout, cmd.Stderr = out, &stderr
	start := time.Now()
	r.err = cmd.Run()
	r.wall, r.stderr = time.Since(start), stderr.String()
	if r.version, r.servers, err = streamInit(r.transcript); err != nil {
		t.Errorf("Claude Code's stream: %v", err)
	}
	return r
}

// checkLimits fails the test for each call over Claude Code's limits.
func checkLimits(t *testing.T, m *scriptedModel) {
	t.Helper()
	for i, c := range m.calls {
		if c.Took > maxCallTime {
			t.Errorf("call %d (%s %s) took %s, over %s", i+1, c.Tool, c.Node, c.Took, maxCallTime)
		}
		if c.Chars > claudeWarnChars {
			t.Errorf("call %d (%s %s): %d characters of result, over Claude Code's warning size (%d tokens, %d characters at 3 a token)",
				i+1, c.Tool, c.Node, c.Chars, claudeWarnTokens, claudeWarnChars)
		}
	}
}
