package cli

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// What a client learns from the HTTP surface without the token: a bearer
// challenge (not an OAuth flow), 404 on the discovery and registration
// paths; a foreign Origin is refused; / and /mcp both serve MCP.
func TestHTTPAuthSurface(t *testing.T) {
	token := "0123456789abcdef0123456789abcdef"
	base := startHTTP(t, exampleRepo(t), token)
	base = strings.TrimSuffix(base, "/")
	post := func(path, auth, origin string) *http.Response {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := post("/", "", ""); res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") != `Bearer realm="mcp-patch"` {
		t.Errorf("no token: %d %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	if res := post("/mcp", "Bearer wrong-token-wrong-token", ""); res.StatusCode != 401 || !strings.Contains(res.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("wrong token: %d %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server", "/register"} {
		res, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, res.StatusCode)
		}
	}
	if res := post("/mcp", "Bearer "+token, "https://evil.example"); res.StatusCode != 403 {
		t.Errorf("foreign origin: %d, want 403", res.StatusCode)
	}
	// Every revision the SDK speaks, on / and /mcp; 2026-07-28 statelessly.
	for _, path := range []string{"/", "/mcp"} {
		for _, v := range mcp.SupportedProtocolVersions() {
			t.Run(path+" "+v, func(t *testing.T) {
				c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
				cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: base + path,
					HTTPClient: &http.Client{Transport: bearerTransport{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: v})
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				defer cs.Close()
				if got := cs.InitializeResult().ProtocolVersion; got != v {
					t.Errorf("negotiated %s, want %s", got, v)
				}
				lt, err := cs.ListTools(context.Background(), nil)
				if err != nil || len(lt.Tools) == 0 {
					t.Fatalf("tools/list: %v", err)
				}
			})
		}
	}
}

// Every revision over stdio, against the real binary; a clean session
// writes nothing on stderr.
func TestStdioProtocolRevisions(t *testing.T) {
	repo := exampleRepo(t)
	for _, v := range mcp.SupportedProtocolVersions() {
		t.Run(v, func(t *testing.T) {
			cmd := exec.Command(binary, "serve", "--intent-repo", repo, "--state-dir", t.TempDir())
			var stderr strings.Builder
			cmd.Stderr = &stderr
			c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
			cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Errorf("negotiated %s, want %s", got, v)
			}
			if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "round_status", Arguments: map[string]any{}}); err != nil {
				t.Fatal(err)
			}
			cs.Close()
			if stderr.Len() != 0 {
				t.Errorf("stderr in a clean session: %q", stderr.String())
			}
		})
	}
}
