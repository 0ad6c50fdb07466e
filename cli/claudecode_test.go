package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// claudeCLI is the real Claude Code CLI, pinned in test/interop/package.json
// and installed by scripts/setup.sh.
const claudeCLI = "../test/interop/node_modules/.bin/claude"

// claude runs the Claude Code CLI with a throwaway HOME (its settings and
// ~/.claude.json live there) in that HOME as the project directory. No API
// key is needed: `claude mcp add` and `claude mcp list` only talk to the
// MCP servers.
func claude(t *testing.T, home string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := filepath.Abs(claudeCLI)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = home
	cmd.Env = claudeEnv(home)
	out, err := cmd.CombinedOutput()
	if err != nil && args[1] != "list" { // list exits non-zero when a server fails
		t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// claudeEnv is Claude Code's whole environment: the throwaway HOME, and
// nothing that updates it or reports anywhere.
func claudeEnv(home string) []string {
	return []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"}
}

// TestClaudeCodeConnects: the README's `claude mcp add` commands, stdio and
// HTTP with a bearer token, give servers that the real Claude Code reports
// Connected; a wrong token gives Claude Code's 401 message, not an OAuth
// registration attempt.
func TestClaudeCodeConnects(t *testing.T) {
	if _, err := os.Stat(claudeCLI); err != nil {
		t.Fatalf("Claude Code is not installed: run scripts/setup.sh (%v)", err)
	}
	repo := exampleRepo(t)
	home := t.TempDir()

	// Stdio, as the README writes it: the client starts the server.
	claude(t, home, "mcp", "add", "patch-stdio", "--", binary, "serve", "--intent-repo", repo, "--state-dir", t.TempDir())

	// Streamable HTTP with the token in a header, and the same with a wrong one.
	token := "0123456789abcdef0123456789abcdef"
	url := startHTTP(t, repo, token)
	claude(t, home, "mcp", "add", "--transport", "http", "patch-http", url, "--header", "Authorization: Bearer "+token)
	claude(t, home, "mcp", "add", "--transport", "http", "patch-wrong", strings.TrimSuffix(url, "/")+"/mcp", "--header", "Authorization: Bearer not-the-token")

	out := claude(t, home, "mcp", "list")
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok {
			lines[name] = l
		}
	}
	for _, name := range []string{"patch-stdio", "patch-http"} {
		if !strings.Contains(lines[name], "Connected") {
			t.Errorf("%s is not Connected:\n%s", name, out)
		}
	}
	wrong := lines["patch-wrong"]
	if strings.Contains(wrong, "Connected") || !strings.Contains(wrong, "401") {
		t.Errorf("a wrong token should fail with HTTP 401:\n%s", out)
	}
	if strings.Contains(strings.ToLower(wrong), "registration") {
		t.Errorf("a wrong token sent Claude Code down the OAuth path:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(home, ".claude.json")); err != nil {
		t.Errorf("Claude Code kept no configuration in the throwaway HOME: %v", err)
	}
}
