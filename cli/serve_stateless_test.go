package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// holdServer is an MCP server whose one tool, hold, answers only when the
// test releases it: a request that stays in flight.
type holdServer struct {
	server  *mcp.Server
	entered chan struct{}
	release chan struct{}
}

func newHoldServer() *holdServer {
	h := &holdServer{server: mcp.NewServer(&mcp.Implementation{Name: "hold", Version: "1"}, nil),
		entered: make(chan struct{}, 16), release: make(chan struct{})}
	mcp.AddTool(h.server, &mcp.Tool{Name: "hold", Description: "answers when released"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			h.entered <- struct{}{}
			select {
			case <-h.release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		})
	return h
}

// serveBounded serves server as serve does (bearerHandler, newHTTPServer)
// on a loopback port with lim, and answers the MCP endpoint and token.
func serveBounded(t *testing.T, server *mcp.Server, lim sessionLimits) (endpoint, token string) {
	t.Helper()
	token = "0123456789abcdef0123456789abcdef"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, ln := newHTTPServer(ln, bearerHandler(server, token, lim, discardLog()))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/mcp", token
}

// tryConnect connects an SDK client to endpoint at statelessProtocol.
func tryConnect(endpoint, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	return c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: statelessProtocol})
}

// whileFull calls f again while it is refused for want of room (503), for
// a bound: an answer can reach the client just before the request's place
// is given back, so the client's next request may find it still taken.
func whileFull(f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusServiceUnavailable)) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawPost posts one JSON-RPC message with the token and protocol version
// and answers the status, the Retry-After header and the body.
func rawPost(t *testing.T, endpoint, token, version, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("POST", endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Retry-After"), string(b)
}

// TestStatelessRequestsCountAgainstSessionCaps: a stateless request
// (protocol 2026-07-28) holds a session's place of its token while it is
// in flight, so past the per-token cap, and past the cap in all, another
// is refused as a new session is (503, Retry-After); once one is answered
// its place is free again. A stateless request past a cap closes an idle
// session to make room, as a new session does.
func TestStatelessRequestsCountAgainstSessionCaps(t *testing.T) {
	for _, tt := range []struct {
		name string
		lim  sessionLimits
	}{
		{"per token", sessionLimits{PerToken: 2, Idle: time.Hour}},
		{"in all", sessionLimits{Total: 2, Idle: time.Hour}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHoldServer()
			endpoint, token := serveBounded(t, h.server, tt.lim)
			connect := func() *mcp.ClientSession {
				t.Helper()
				cs, err := tryConnect(endpoint, token)
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				t.Cleanup(func() { cs.Close() })
				return cs
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Connected first: a client whose server/discover is refused
			// falls back to a session (initialize).
			clients := []*mcp.ClientSession{connect(), connect()}
			done := make(chan error, 2)
			for _, cs := range clients {
				go func() {
					done <- whileFull(func() error {
						_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{}})
						return err
					})
				}()
				select {
				case <-h.entered:
				case <-ctx.Done():
					t.Fatal("a stateless call under the cap never reached the tool")
				}
			}

			status, retry, body := rawPost(t, endpoint, token, statelessProtocol, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
			if status != http.StatusServiceUnavailable || retry == "" || !strings.Contains(body, "too many MCP sessions") {
				t.Fatalf("a stateless request past the cap with both places in flight: %d Retry-After %q %q, want 503", status, retry, body)
			}

			close(h.release)
			for range 2 {
				if err := <-done; err != nil {
					t.Fatalf("held call: %v", err)
				}
			}
			err := whileFull(func() error {
				cs, err := tryConnect(endpoint, token)
				if err != nil {
					return err
				}
				defer cs.Close()
				_, err = cs.ListTools(ctx, nil)
				return err
			})
			if err != nil {
				t.Fatalf("a stateless request after the held ones were answered: %v", err)
			}
		})
	}

	t.Run("closes an idle session for room", func(t *testing.T) {
		h := newHoldServer()
		endpoint, token := serveBounded(t, h.server, sessionLimits{PerToken: 1, Idle: time.Hour})
		rig := &httpRig{url: endpoint, token: token}
		id, err := rig.initialize(http.DefaultClient)
		if err != nil || id == "" {
			t.Fatalf("initialize a session: %q %v", id, err)
		}
		// The SDK answers this bare ping 400 (no _meta): what counts is
		// that it was let in, not refused for room.
		err = whileFull(func() error {
			if status, _, body := rawPost(t, endpoint, token, statelessProtocol, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); status == http.StatusServiceUnavailable {
				return errors.New(http.StatusText(status) + ": " + body)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("a stateless request with the one place taken by an idle session: %v", err)
		}
		for ss := range h.server.Sessions() {
			if ss.ID() == id {
				t.Errorf("the idle session %s is still open after a stateless request took its place", id)
			}
		}
	})
}

// TestMalformedProtocolVersionRefused: an Mcp-Protocol-Version that is not
// a date (YYYY-MM-DD) is answered 400 with SEP-2575's
// UnsupportedProtocolVersionError saying so, never compared as text;
// dates are compared as dates.
func TestMalformedProtocolVersionRefused(t *testing.T) {
	endpoint, token := serveBounded(t, newHoldServer().server, sessionLimits{Idle: time.Hour})
	for _, v := range []string{"latest", "2026-7-28", "2026-07-28T00:00:00Z", "2026-02-30", "9999", "20260728"} {
		t.Run(v, func(t *testing.T) {
			status, _, body := rawPost(t, endpoint, token, v, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
			var resp struct {
				ID    int `json:"id"`
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
					Data    struct {
						Supported []string `json:"supported"`
						Requested string   `json:"requested"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &resp); err != nil {
				t.Fatalf("Mcp-Protocol-Version %q: the answer is not JSON-RPC: %v\n%s", v, err, body)
			}
			if status != http.StatusBadRequest || resp.ID != 7 || resp.Error.Code != mcp.CodeUnsupportedProtocolVersion ||
				!strings.Contains(resp.Error.Message, "YYYY-MM-DD") || resp.Error.Data.Requested != v ||
				!slices.Contains(resp.Error.Data.Supported, statelessProtocol) {
				t.Errorf("Mcp-Protocol-Version %q: %d %s, want 400 with UnsupportedProtocolVersionError for id 7 naming the value, YYYY-MM-DD and the versions served", v, status, body)
			}
		})
	}
	for _, tt := range []struct {
		version   string
		stateless bool
	}{
		{"", false}, {"2025-06-18", false}, {"2026-07-27", false}, {"2026-07-28", true}, {"2027-01-01", true},
	} {
		got, err := servedStatelessly(tt.version)
		if err != nil || got != tt.stateless {
			t.Errorf("servedStatelessly(%q) = %v, %v; want %v", tt.version, got, err, tt.stateless)
		}
	}
}
