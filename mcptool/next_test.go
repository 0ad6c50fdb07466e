package mcptool

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcp-patch/mcp-patch/answer"
)

func TestInfer(t *testing.T) {
	inputs := map[string]*jsonschema.Schema{
		"status": {Properties: map[string]*jsonschema.Schema{"node": {}}},
		"check":  {Properties: map[string]*jsonschema.Schema{"node": {}}},
		"step":   {Properties: map[string]*jsonschema.Schema{"node": {}, "approval": {}}},
		"close":  {},
	}
	n := NextCalls{StatusTool: "status", DefaultAction: "Call status.", Carried: []string{"node"}, Fresh: []string{"approval"},
		Input: func(tool string) *jsonschema.Schema { return inputs[tool] }}
	args := map[string]any{"node": "gpu-02", "approval": "signed"}
	call := func(tool string, kv map[string]any) *answer.Call { return &answer.Call{Tool: tool, Arguments: kv} }
	for _, tc := range []struct {
		name   string
		n      NextCalls
		tool   string
		status Status
		next   string
		want   *answer.Call
	}{
		{"in progress repeats the call", n, "step", StatusInProgress, "Wait.", call("step", map[string]any{"node": "gpu-02"})},
		{"approval repeats without the fresh arguments", n, "step", StatusApprovalRequired, "Sign.", call("step", map[string]any{"node": "gpu-02"})},
		{"call again", n, "step", StatusFailed, "Call step again: it reads the state.", call("step", map[string]any{"node": "gpu-02"})},
		{"same tool again", n, "step", StatusRefused, "Call the same tool again: it re-checks.", call("step", map[string]any{"node": "gpu-02"})},
		{"another tool first, node carried", n, "step", StatusRefused, "Run check on the node first.", call("check", map[string]any{"node": "gpu-02"})},
		{"not carried to a tool without it", n, "step", StatusOK, "Call close now.", call("close", map[string]any{})},
		{"not carried to the status tool", n, "step", StatusRefused, "Call status: it says why.", call("status", map[string]any{})},
		{"ok default", n, "check", StatusOK, "Call status.", call("status", map[string]any{})},
		{"ok naming the status tool", n, "check", StatusOK, "Read it, then see status.", call("status", map[string]any{})},
		{"the status tool does not follow itself", n, "status", StatusOK, "Call status.", nil},
		{"a person first", n, "step", StatusFailed, "Check that the node is reachable; then call again.", nil},
		{"not a tool", n, "step", StatusRefused, "Run the drill on the canary.", nil},
		{"own tool named first", n, "close", StatusFailed, "Call close's commit again by hand.", nil},
		{"no tools known", NextCalls{}, "step", StatusOK, "Call check.", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.n.Infer(tc.tool, tc.status, tc.next, args)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}
