package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The intent tools over the MCP protocol on the rig's repository: the
// components and their documents (also as resources), a lesson committed
// on the round's working branch and never on main, verify.sh run bounded.
func TestFleetIntentToolsOverMCP(t *testing.T) {
	f := newFleet(t)
	cs := connect(t, Builtin(), f.d, nil)
	ctx := context.Background()

	_, m := call(t, cs, "read_intent", map[string]any{})
	if comps, _ := m["components"].([]any); len(comps) != 5 {
		t.Fatalf("read_intent lists %d components, want the 5 of examples/intent: %v", len(comps), m)
	}
	_, m = call(t, cs, "read_intent", map[string]any{"component": "os-layer"})
	if c, _ := m["component"].(map[string]any); c == nil || c["name"] != "os-layer" {
		t.Fatalf("read_intent os-layer: %v", m)
	}
	if res, m := call(t, cs, "read_intent", map[string]any{"component": "no-such"}); !res.IsError || m["status"] != string(StatusRefused) {
		t.Fatalf("an unknown component: %v", m)
	}

	lr, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	uri := ""
	for _, r := range lr.Resources {
		if strings.HasSuffix(r.URI, "os-layer/intent.md") {
			uri = r.URI
		}
	}
	if uri == "" {
		t.Fatalf("no resource for os-layer/intent.md among %d", len(lr.Resources))
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(f.repo, "os-layer", "intent.md"))
	if len(rr.Contents) != 1 || rr.Contents[0].Text != string(want) {
		t.Fatalf("resource %s differs from the file", uri)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: strings.Replace(uri, "intent.md", "nope.md", 1)}); err == nil {
		t.Fatal("a document that does not exist was served")
	}

	head := gitRun(t, f.repo, "rev-parse", "main")
	if res, m := call(t, cs, "record_lesson", map[string]any{"component": "os-layer", "kind": "gossip", "text": "x"}); !res.IsError || m["status"] != string(StatusRefused) {
		t.Fatalf("a bad kind: %v", m)
	}
	_, m = call(t, cs, "record_lesson", map[string]any{"component": "os-layer", "kind": "lesson", "round": fRound,
		"text": "the canary's initramfs took 40 s longer with the new NVIDIA modules"})
	if m["status"] != string(StatusOK) {
		t.Fatalf("record_lesson: %v", m)
	}
	commit := m["commit"].(map[string]any)
	branch := commit["branch"].(string)
	if branch == "main" || gitRun(t, f.repo, "rev-parse", "main") != head {
		t.Fatalf("the lesson went to %s; main moved", branch)
	}
	if got := gitRun(t, f.repo, "show", branch+":os-layer/lessons.md"); !strings.Contains(got, "initramfs took 40 s longer") {
		t.Fatalf("lessons.md on %s lacks the lesson:\n%s", branch, got)
	}
	_, m = call(t, cs, "record_lesson", map[string]any{"component": "os-layer", "kind": "open_question", "round": fRound,
		"text": "the running kernel is not in the tested list"})
	if m["status"] != string(StatusRefused) {
		t.Fatalf("an open question without a property: %v", m)
	}

	if res, m := call(t, cs, "run_verify", map[string]any{"component": "os-layer", "timeout_seconds": 601}); !res.IsError || m["status"] != string(StatusRefused) {
		t.Fatalf("timeout out of range: %v", m)
	}
	_, m = call(t, cs, "run_verify", map[string]any{"component": "os-layer", "timeout_seconds": 120})
	v, _ := m["verify"].(map[string]any)
	if v == nil || (m["status"] == string(StatusOK)) != (v["passed"] == true) {
		t.Fatalf("run_verify: status %v, verify %v", m["status"], v)
	}
	if res, m := call(t, cs, "run_verify", map[string]any{"component": "../etc"}); !res.IsError {
		t.Fatalf("a path as component: %v", m)
	}
}
