package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestClaudeCodeConnects: the README's commands, read from README.md and run
// as written in a throwaway HOME, connect the real Claude Code: `mcp-patch
// init`, then the stdio `claude mcp add`, the copied `.mcp.json` init wrote,
// the HTTP server with its token file and `claude mcp add --transport http`,
// and the README's `.mcp.json` naming ${MCP_PATCH_TOKEN}. `claude mcp list`
// reports each Connected; the same `.mcp.json` with a wrong token gives
// Claude Code's 401 message, not an OAuth registration attempt. Only what the
// README says to substitute is substituted: the intent repository's path and
// the port.
func TestClaudeCodeConnects(t *testing.T) {
	if _, err := os.Stat(claudeCLI); err != nil {
		t.Fatalf("Claude Code is not installed: run scripts/setup.sh (%v)", err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	initCmd := readmeCommand(t, readme, "First configuration", "mcp-patch init ")
	stdioAdd := readmeCommand(t, readme, "Connect Claude Code", "claude mcp add mcp-patch -- ")
	tokenCmd := readmeCommand(t, readme, "Connect Claude Code", "(umask 077 && openssl rand")
	serveCmd := readmeCommand(t, readme, "Connect Claude Code", "mcp-patch serve --http ")
	httpAdd := readmeCommand(t, readme, "Connect Claude Code", "claude mcp add --transport http ")
	envJSON := readmeBlock(t, readme, "Connect Claude Code", "json", "${MCP_PATCH_TOKEN}")

	repo := exampleRepo(t)
	addr := freePort(t)
	subst := strings.NewReplacer("/srv/intent", repo, "127.0.0.1:8765", addr)
	home := t.TempDir()
	claudeBin, err := filepath.Abs(claudeCLI)
	if err != nil {
		t.Fatal(err)
	}
	// The reader's PATH: mcp-patch and claude installed, HOME their own.
	var env []string
	for _, kv := range claudeEnv(home) {
		if strings.HasPrefix(kv, "PATH=") {
			kv = "PATH=" + strings.Join([]string{filepath.Dir(binary), filepath.Dir(claudeBin), os.Getenv("PATH")}, string(os.PathListSeparator))
		}
		env = append(env, kv)
	}
	project := func(name string) string {
		dir := filepath.Join(home, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}

	shell(t, home, env, subst.Replace(initCmd))
	cfgDir := filepath.Join(home, ".config", "mcp-patch")

	// Stdio, `claude mcp add` as written.
	stdio := project("stdio")
	shell(t, stdio, env, subst.Replace(stdioAdd))

	// Stdio, the .mcp.json init wrote copied into a project, and approved
	// as the README says.
	copied := project("copied")
	mcpJSON, err := os.ReadFile(filepath.Join(cfgDir, ".mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, ".mcp.json"), mcpJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), `"enabledMcpjsonServers": ["mcp-patch"]`+"` in `~/.claude/settings.json`") {
		t.Fatal("the README no longer says how a project's .mcp.json server is approved")
	}
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(`{"enabledMcpjsonServers": ["mcp-patch"]}`), 0o600); err != nil {
		t.Fatal(err)
	}

	// Streamable HTTP: the token file, the server, `claude mcp add`.
	shell(t, home, env, subst.Replace(tokenCmd))
	startShell(t, home, env, subst.Replace(serveCmd))
	httpDir := project("http")
	shell(t, httpDir, env, subst.Replace(httpAdd))

	// The README's .mcp.json, the token in the environment.
	tokenDir := project("token-env")
	if err := os.WriteFile(filepath.Join(tokenDir, ".mcp.json"), []byte(subst.Replace(envJSON)), 0o644); err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(cfgDir, "token"))
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, dir, token string }{
		{"stdio", stdio, ""}, {"copied .mcp.json", copied, ""}, {"http", httpDir, ""},
		{"${MCP_PATCH_TOKEN}", tokenDir, strings.TrimSpace(string(token))},
	} {
		e := env
		if c.token != "" {
			e = append(slices.Clip(env), "MCP_PATCH_TOKEN="+c.token)
		}
		line := claudeListed(t, c.dir, e)
		if !strings.Contains(line, "Connected") {
			t.Errorf("%s: mcp-patch is not Connected: %s", c.name, line)
		}
	}
	wrong := claudeListed(t, tokenDir, append(slices.Clip(env), "MCP_PATCH_TOKEN=not-the-token"))
	if strings.Contains(wrong, "Connected") || !strings.Contains(wrong, "401") {
		t.Errorf("a wrong token should fail with HTTP 401: %s", wrong)
	}
	if strings.Contains(strings.ToLower(wrong), "registration") || strings.Contains(wrong, "OAuth fallback is enabled") {
		t.Errorf("a wrong token sent Claude Code down the OAuth path: %s", wrong)
	}
	if _, err := os.Stat(filepath.Join(home, ".claude.json")); err != nil {
		t.Errorf("Claude Code kept no configuration in the throwaway HOME: %v", err)
	}
}

// readmeSection is the text of the README's "## title" section.
func readmeSection(t *testing.T, readme []byte, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(readme), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README has no section %q", title)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// readmeBlock is the first fenced block of language lang in the section
// that contains want.
func readmeBlock(t *testing.T, readme []byte, section, lang, want string) string {
	t.Helper()
	rest := readmeSection(t, readme, section)
	for {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			t.Fatalf("README section %q has no %s block with %q", section, lang, want)
		}
		block, tail, ok := strings.Cut(after, "```")
		if !ok {
			t.Fatalf("README section %q: unterminated block", section)
		}
		if strings.Contains(block, want) {
			return block
		}
		rest = tail
	}
}

// readmeCommand is the shell command line (continuation lines joined) of
// the section's sh blocks that starts with prefix.
func readmeCommand(t *testing.T, readme []byte, section, prefix string) string {
	t.Helper()
	block := readmeBlock(t, readme, section, "sh", prefix)
	var cmds []string
	cur := ""
	for _, l := range strings.Split(block, "\n") {
		if c, ok := strings.CutSuffix(l, "\\"); ok {
			cur += c
			continue
		}
		cmds = append(cmds, cur+l)
		cur = ""
	}
	for _, c := range cmds {
		if strings.HasPrefix(c, prefix) {
			return c
		}
	}
	t.Fatalf("README section %q has no command starting %q", section, prefix)
	return ""
}

// shell runs a command line with sh in dir.
func shell(t *testing.T, dir string, env []string, line string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
}

// startShell starts a server's command line with sh in dir and waits for
// its banner; it is stopped when the test ends.
func startShell(t *testing.T, dir string, env []string, line string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir = dir
	cmd.Env = env
	startServing(t, cmd, 30*time.Second, line+": no banner on stderr")
}

// claudeListed is the mcp-patch line of `claude mcp list` run in dir.
func claudeListed(t *testing.T, dir string, env []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := filepath.Abs(claudeCLI)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "mcp", "list")
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) { // it exits non-zero when a server fails; the line says why
		t.Fatalf("claude mcp list: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "mcp-patch:") {
			return l
		}
	}
	t.Fatalf("claude mcp list in %s lists no mcp-patch:\n%s", dir, out)
	return ""
}
