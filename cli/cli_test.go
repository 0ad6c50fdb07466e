package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/tools"
)

var update = flag.Bool("update", false, "rewrite golden files")

// binary is the real mcp-patch, built once for the tests that fork-exec it;
// labBinary is the lab's (cmd/mcp-patch-lab) beside it, which `mcp-patch
// lab` runs.
var binary, labBinary string

func TestMain(m *testing.M) {
	// The lab tests start fleets in this process: their hosts' commands
	// link to this test binary, which plays them as mcp-patch does.
	if code, ran := fleet.HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "mcp-patch-bin")
	if err != nil {
		panic(err)
	}
	binary, labBinary = filepath.Join(dir, "mcp-patch"), filepath.Join(dir, "mcp-patch-lab")
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/mcp-patch/mcp-patch/cmd/mcp-patch", "github.com/mcp-patch/mcp-patch/cmd/mcp-patch-lab").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build mcp-patch and mcp-patch-lab: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// exampleRepo copies examples/intent into a fresh git repository.
func exampleRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "intent")
	if err := os.CopyFS(dir, os.DirFS("../examples/intent")); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-qm", "initial intent")
	return dir
}

func run(t *testing.T, stdin string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	// `mcp-patch lab` finds the lab's binary built for the tests unless
	// env says otherwise.
	getenv := func(k string) string {
		if v, ok := env[k]; ok || k != EnvLabBinary {
			return v
		}
		return labBinary
	}
	code := Run(context.Background(), args, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: getenv})
	return code, out.String(), errb.String()
}

func TestToolCLIExitCodesAndInput(t *testing.T) {
	repo := exampleRepo(t)
	state := t.TempDir()
	base := []string{"--intent-repo", repo, "--state-dir", state}
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"list", "", []string{"tool", "--list"}, ExitOK, "read_intent"},
		{"unknown tool", "", []string{"tool", "nope"}, ExitUsage, ""},
		{"bad flag", "", []string{"tool", "read_intent", "--bogus"}, ExitUsage, ""},
		{"bad json", "", []string{"tool", "read_intent", "--json", "{"}, ExitUsage, ""},
		{"ok by flags", "", []string{"tool", "read_intent", "--component", "os-layer"}, ExitOK, `"status": "ok"`},
		{"ok by json", "", []string{"tool", "read_intent", "--json", `{"component":"postgres"}`}, ExitOK, `"name": "postgres"`},
		{"json from stdin", `{"component":"gpu-fleet"}`, []string{"tool", "read_intent", "--json", "-"}, ExitOK, `"name": "gpu-fleet"`},
		{"flags win over json", "", []string{"tool", "read_intent", "--json", `{"component":"postgres"}`, "--component", "os-layer"}, ExitOK, `"name": "os-layer"`},
		{"unknown field", "", []string{"tool", "read_intent", "--json", `{"componnt":"x"}`}, ExitNotOK, "invalid input"},
		{"unknown component", "", []string{"tool", "read_intent", "--component", "nope"}, ExitNotOK, `"status": "refused"`},
		{"traversal", "", []string{"tool", "read_intent", "--component", "../etc"}, ExitNotOK, `"status": "refused"`},
		{"table", "", []string{"tool", "read_intent", "-o", "table"}, ExitOK, "status:"},
		{"bad format", "", []string{"tool", "read_intent", "-o", "yaml"}, ExitUsage, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, base...), tc.args...)
			code, out, errOut := run(t, tc.stdin, nil, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			if tc.want != "" && !strings.Contains(out, tc.want) {
				t.Fatalf("stdout lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestGlobalFlagsBeforeAndAfterAndEnv(t *testing.T) {
	repo := exampleRepo(t)
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"before": {[]string{"--intent-repo", repo, "tool", "read_intent"}, nil},
		"after":  {[]string{"tool", "read_intent", "--intent-repo", repo}, nil},
		"env":    {[]string{"tool", "read_intent"}, map[string]string{"MCP_PATCH_INTENT_REPO": repo}},
		"config": {[]string{"tool", "read_intent", "--config", writeConfig(t, "intent_repo: "+repo+"\n")}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", tc.env, tc.args...)
			if code != ExitOK || !strings.Contains(out, "os-layer") {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
		})
	}
	// A config file with an unknown field is a clear error.
	code, _, errOut := run(t, "", nil, "tool", "read_intent", "--config", writeConfig(t, "intent_repoo: x\n"))
	if code != ExitUsage || !strings.Contains(errOut, "intent_repoo") {
		t.Fatalf("unknown config field: exit %d, %s", code, errOut)
	}
}

func writeConfig(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigSchemaIsJSONSchema(t *testing.T) {
	code, out, _ := run(t, "", nil, "config", "schema")
	if code != ExitOK {
		t.Fatal(code)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	props := s["properties"].(map[string]any)
	for _, k := range []string{"intent_repo", "kubeconfig", "context", "serve", "ssh", "approvals", "git", "kube", "mode"} {
		if _, ok := props[k]; !ok {
			t.Errorf("schema lacks %s", k)
		}
	}
}

// TestToolsListGolden pins names, annotations and schemas of every tool; run
// with -update after a deliberate change.
func TestToolsListGolden(t *testing.T) {
	cs := inMemory(t, exampleRepo(t))
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(lt.Tools, "", "  ")
	golden := filepath.Join("testdata", "tools-list.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./cli -run TestToolsListGolden -update)", err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(string(got))); diff != "" {
		t.Fatalf("tools/list changed (-golden +got); rerun with -update if deliberate:\n%s", diff)
	}
	// Its size on the wire is TestToolsListLean's.
	// No untyped values anywhere in the schemas.
	for _, tl := range lt.Tools {
		for which, sch := range map[string]any{"input": tl.InputSchema, "output": tl.OutputSchema} {
			b, _ := json.Marshal(sch)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			if p := untyped(m, ""); p != "" {
				t.Errorf("tool %s %s schema has an untyped value at %s", tl.Name, which, p)
			}
		}
	}
}

// untyped returns the path of the first schema node with neither a type nor
// a composition, or "".
func untyped(s map[string]any, path string) string {
	_, hasType := s["type"]
	_, hasTypes := s["types"]
	_, hasAny := s["anyOf"]
	_, hasOne := s["oneOf"]
	_, hasRef := s["$ref"]
	if !hasType && !hasTypes && !hasAny && !hasOne && !hasRef {
		return path + "/"
	}
	for _, key := range []string{"properties", "$defs"} {
		if props, ok := s[key].(map[string]any); ok {
			for name, p := range props {
				if pm, ok := p.(map[string]any); ok {
					if r := untyped(pm, path+"/"+name); r != "" {
						return r
					}
				}
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties"} {
		if it, ok := s[key].(map[string]any); ok {
			if r := untyped(it, path+"/"+key); r != "" {
				return r
			}
		}
	}
	return ""
}

func inMemory(t *testing.T, repo string) *mcp.ClientSession {
	t.Helper()
	c := mustConfig(t, repo)
	d, cleanup, err := buildDeps(context.Background(), &c, discardLog(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	srv := tools.NewServer(tools.Builtin(), d, "test")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestStdioBinary runs the real binary over stdio (fork-exec) with the Go
// SDK's command transport.
func TestStdioBinary(t *testing.T) {
	repo := exampleRepo(t)
	cmd := exec.Command(binary, "serve", "--intent-repo", repo, "--state-dir", t.TempDir())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if !strings.Contains(cs.InitializeResult().Instructions, "approval") {
		t.Error("instructions do not explain approvals")
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_intent", Arguments: map[string]any{"component": "os-layer"}})
	if err != nil || res.IsError {
		t.Fatalf("read_intent over stdio: %v %+v", err, res)
	}
	rr, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "intent://os-layer/intent.md"})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "## Properties it must keep") {
		t.Fatalf("resource intent://os-layer/intent.md: %v", err)
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startHTTP starts the real binary serving HTTP and waits for its banner.
// startServing starts a serve command and waits for its "serving MCP"
// banner on stderr (failing the test with what after bound); it is stopped
// when the test ends.
func startServing(t *testing.T, cmd *exec.Cmd, bound time.Duration, what string) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "serving MCP") {
				close(ready)
				once = true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(bound):
		t.Fatal(what)
	}
}

func startHTTP(t *testing.T, repo, token string) string {
	t.Helper()
	addr := freePort(t)
	cmd := exec.Command(binary, "serve", "--http", addr, "--token-env", "T", "--intent-repo", repo, "--state-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "T="+token)
	startServing(t, cmd, 20*time.Second, "server did not start")
	return "http://" + addr + "/"
}

func TestHTTPNeedsToken(t *testing.T) {
	repo := exampleRepo(t)
	token := "0123456789abcdef0123456789abcdef"
	url := startHTTP(t, repo, token)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for name, tc := range map[string]struct {
		auth string
		host string
		want int
	}{
		"no token":    {"", "", http.StatusUnauthorized},
		"wrong token": {"Bearer nope-nope-nope-nope", "", http.StatusUnauthorized},
		"token":       {"Bearer " + token, "", http.StatusOK},
		"rebinding":   {"Bearer " + token, "evil.example.com", http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	// And a whole session with the Go SDK's client over HTTP.
	hc := &http.Client{Transport: bearer{token}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_intent"})
	if err != nil || res.IsError {
		t.Fatalf("read_intent over HTTP: %v %+v", err, res)
	}
	// The capabilities are declared as served: prompts, and no list that
	// announces changes it never makes.
	caps := cs.InitializeResult().Capabilities
	if caps.Prompts == nil || caps.Tools == nil || caps.Tools.ListChanged || caps.Prompts.ListChanged || caps.Resources == nil || caps.Resources.ListChanged || caps.Completions != nil {
		t.Errorf("capabilities %+v, want tools, prompts and resources without listChanged, no completions", caps)
	}
	pl, err := cs.ListPrompts(context.Background(), nil)
	if err != nil || len(pl.Prompts) != 3 {
		t.Fatalf("prompts/list: %v %+v", err, pl)
	}
	gp, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "continue_round", Arguments: map[string]string{"round": "2026-12"}})
	if err != nil || len(gp.Messages) != 1 || !strings.Contains(gp.Messages[0].Content.(*mcp.TextContent).Text, `round_status {"round":"2026-12"}`) {
		t.Fatalf("prompts/get continue_round: %v %+v", err, gp)
	}
	if _, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "continue_round", Arguments: map[string]string{"round": "../x"}}); err == nil || !strings.Contains(err.Error(), "not a round id") {
		t.Errorf("prompts/get with a bad round: %v, want refused", err)
	}
	// /metrics sits behind the same token.
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer " + token: http.StatusOK} {
		req, _ := http.NewRequest("GET", url+"metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusOK && !strings.Contains(string(b), "mcp_patch_approvals_pending 0")) {
			t.Fatalf("GET /metrics with %q: %d, want %d\n%s", auth, resp.StatusCode, want, b)
		}
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestHTTPRefusals(t *testing.T) {
	repo := exampleRepo(t)
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no token":       {[]string{"serve", "--http", "127.0.0.1:0"}, nil, "needs a bearer token"},
		"short token":    {[]string{"serve", "--http", "127.0.0.1:0"}, map[string]string{"MCP_PATCH_TOKEN": "short"}, "shorter than 16"},
		"public, no TLS": {[]string{"serve", "--http", "0.0.0.0:0"}, map[string]string{"MCP_PATCH_TOKEN": strings.Repeat("x", 32)}, "without TLS"},
		"half TLS":       {[]string{"serve", "--http", "0.0.0.0:0", "--tls-cert", "c.pem"}, map[string]string{"MCP_PATCH_TOKEN": strings.Repeat("x", 32)}, "set both or neither"},
		"bad address":    {[]string{"serve", "--http", "nope"}, nil, "not host:port"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--intent-repo", repo, "--state-dir", t.TempDir()}, tc.args...)
			code, _, errOut := run(t, "", tc.env, args...)
			if code == ExitOK || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q, want it to say %q", code, errOut, tc.want)
			}
		})
	}
}

// TestTypeScriptSDKClient drives the real binary with the official TypeScript
// MCP SDK (installed by scripts/setup.sh), over stdio and over HTTP.
func TestTypeScriptSDKClient(t *testing.T) {
	if _, err := os.Stat("../test/interop/node_modules/@modelcontextprotocol/sdk"); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run scripts/setup.sh (%v)", err)
	}
	repo := exampleRepo(t)
	calls := `[{"name":"read_intent","arguments":{"component":"os-layer"}},
	 {"name":"record_lesson","arguments":{"component":"gpu-fleet","kind":"lesson","text":"Fabric Manager took 40 s to come up after the trial boot.","round":"2026-11"}},
	 {"name":"read_intent","arguments":{"component":"../../etc"}}]`
	check := func(t *testing.T, out []byte) {
		var sum struct {
			Tools []struct {
				Name        string         `json:"name"`
				Annotations map[string]any `json:"annotations"`
			} `json:"tools"`
			Results []struct {
				Name       string         `json:"name"`
				IsError    bool           `json:"isError"`
				Structured map[string]any `json:"structured"`
			} `json:"results"`
		}
		if err := json.Unmarshal(out, &sum); err != nil {
			t.Fatalf("client output: %v\n%s", err, out)
		}
		names := map[string]bool{}
		for _, tl := range sum.Tools {
			names[tl.Name] = true
		}
		if !names["read_intent"] || !names["record_lesson"] {
			t.Fatalf("tools listed: %v", names)
		}
		if r := sum.Results[0]; r.IsError || r.Structured["status"] != "ok" {
			t.Fatalf("read_intent: %+v", r)
		}
		if r := sum.Results[1]; r.IsError || r.Structured["status"] != "ok" {
			t.Fatalf("record_lesson: %+v", r)
		}
		if r := sum.Results[2]; !r.IsError || r.Structured["status"] != "refused" {
			t.Fatalf("traversal: %+v", r)
		}
	}
	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command("node", "../test/interop/client.mjs", "stdio", binary, calls, "--intent-repo", repo, "--state-dir", t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node client: %v\n%s", err, out)
		}
		check(t, out)
	})
	t.Run("http", func(t *testing.T) {
		token := "fedcba9876543210fedcba9876543210"
		url := startHTTP(t, repo, token)
		out, err := exec.Command("node", "../test/interop/client.mjs", "http", url, token, calls).Output()
		if err != nil {
			t.Fatalf("node client: %v\n%s", err, out)
		}
		check(t, out)
	})
	// The lessons show up in git log on the round's working branch, twice
	// (one per transport), and main is untouched.
	log := git(t, repo, "log", "--format=%s", "mcp-patch/round-2026-11")
	if strings.Count(log, "intent(gpu-fleet): lesson") != 2 {
		t.Fatalf("git log of the working branch:\n%s", log)
	}
	if strings.TrimSpace(git(t, repo, "log", "--format=%s", "main")) != "initial intent" {
		t.Fatal("main moved")
	}
	git(t, repo, "fsck", "--strict")
}

// `lab fault NAME --node HOST` reaches for a running lab (and says when
// there is none) instead of failing on its own arguments.
func TestLabFaultArguments(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := run(t, "", nil, "lab", "fault", "kernel-panic", "--node", "cp-1", "--dir", dir)
	if code != ExitNotOK || !strings.Contains(errOut, "no running lab") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if code, _, _ := run(t, "", nil, "lab", "fault", "--dir", dir); code != ExitUsage {
		t.Fatalf("no fault named: exit %d", code)
	}
}

// TestReadOnlyDoesNotRunVerify: a --read-only server refuses run_verify and
// the script does not run, unless verify.in_read_only is configured; the
// script sees only the allowlisted environment either way.
func TestReadOnlyDoesNotRunVerify(t *testing.T) {
	repo := exampleRepo(t)
	probe := filepath.Join(repo, "probe")
	if err := os.MkdirAll(probe, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(probe, "intent.md"), []byte("# probe\n\n## Why it exists\n\n## Properties it must keep\n\n- `P1` It answers.\n\n## Out of scope\n\n## Open questions\n"), 0o644)
	os.WriteFile(filepath.Join(probe, "verify.sh"), []byte("echo ran >> \"$MCP_PATCH_INTENT_DIR/../verify-ran\"\necho \"secret=${SECRET_TOKEN:-unset} kube=${KUBECONFIG:-unset}\"\n"), 0o644)
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "probe")
	ran := filepath.Join(repo, "..", "verify-ran")
	env := map[string]string{"SECRET_TOKEN": "do-not-leak", "KUBECONFIG": "/etc/ops/kubeconfig", "PATH": os.Getenv("PATH")}
	base := []string{"--intent-repo", repo, "--state-dir", t.TempDir()}

	code, out, errOut := run(t, "", env, append(base, "--read-only", "tool", "run_verify", "--component", "probe")...)
	if code == ExitOK || !strings.Contains(out, "read-only") {
		t.Fatalf("read-only run_verify: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("verify.sh ran on a read-only server")
	}

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("verify:\n  in_read_only: true\n"), 0o600)
	code, out, errOut = run(t, "", env, append(base, "--config", cfg, "--read-only", "tool", "run_verify", "--component", "probe")...)
	if code != ExitOK || !strings.Contains(out, "secret=unset kube=/etc/ops/kubeconfig") {
		t.Fatalf("read-only run_verify with verify.in_read_only: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("verify.sh did not run with verify.in_read_only")
	}
}
