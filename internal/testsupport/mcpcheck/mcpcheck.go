// Package mcpcheck holds the checks the MCP tests of mcptool and tools
// share: a tool call that must answer in exactly one content block equal
// to its structured content, and the order of a result's top-level keys.
//
// Only _test.go files import this package; production code must not.
package mcpcheck

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call calls tool name over cs and fails the test on a protocol error, on
// anything but one content block, or when the text content is not the
// structured content; it returns the result and its decoded output.
func Call(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: protocol error %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("call %s: %d content blocks, want exactly 1", name, len(res.Content))
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &m); err != nil {
		t.Fatalf("call %s: content is not the JSON output: %v", name, err)
	}
	sc, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("call %s: structured content: %v", name, err)
	}
	var sm map[string]any
	if err := json.Unmarshal(sc, &sm); err != nil {
		t.Fatalf("call %s: structured content: %v", name, err)
	}
	if diff := cmp.Diff(sm, m); diff != "" {
		t.Fatalf("call %s: text content differs from structured content (-structured +text):\n%s", name, diff)
	}
	return res, m
}

// TopKeys returns the top-level keys of a JSON object in their order.
func TopKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// Strings is a JSON array of strings as decoded into any.
func Strings(v any) []string {
	xs, _ := v.([]any)
	var out []string
	for _, x := range xs {
		out = append(out, x.(string))
	}
	return out
}

// Connect connects a client to srv over in-memory transports; both ends
// close when the test ends.
func Connect(t *testing.T, srv *mcp.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
