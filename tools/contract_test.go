package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The contract comes first in both the text and the structured content,
// whatever order the payload declares: a client that sorts or cuts long
// results still shows status and next step.
func TestContractFieldsComeFirst(t *testing.T) {
	executed, digest := 0, "sha256:aaa"
	reg := &Registry{}
	reg.Add(echoTool(), stepTool(&executed, &digest))
	// What the server puts on the wire, before any client decodes it into
	// a map (which would lose the order).
	var wire []byte
	srv := NewServer(reg, testDeps(t, ModeNormal), "test")
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok {
				wire, _ = json.Marshal(r.StructuredContent)
			}
			return res, err
		}
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want []string
	}{
		{"echo", map[string]any{"node": "gpu-01"}, []string{"status", "reasons", "next_action", "next_call", "echo"}},
		{"step", map[string]any{"node": "gpu-01"}, []string{"status", "reasons", "next_action", "next_call", "approval"}},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		text := []byte(res.Content[0].(*mcp.TextContent).Text)
		if diff := cmp.Diff(tc.want, topKeys(t, text)); diff != "" {
			t.Errorf("%s text keys (-want +got):\n%s", tc.tool, diff)
		}
		if diff := cmp.Diff(tc.want, topKeys(t, wire)); diff != "" {
			t.Errorf("%s structuredContent keys (-want +got):\n%s", tc.tool, diff)
		}
	}
}

// approval_required is not an error result, and its next_call is the same
// call with the same arguments (the approval is added by the caller).
func TestApprovalRequiredNextCall(t *testing.T) {
	executed, digest := 0, "sha256:aaa"
	reg := &Registry{}
	reg.Add(stepTool(&executed, &digest))
	cs := connect(t, reg, testDeps(t, ModeNormal), nil)
	res, m := call(t, cs, "step", map[string]any{"node": "cp-1"})
	if res.IsError || m["status"] != string(StatusApprovalRequired) {
		t.Fatalf("isError=%v %v", res.IsError, m)
	}
	want := map[string]any{"tool": "step", "arguments": map[string]any{"node": "cp-1"}}
	if diff := cmp.Diff(want, m["next_call"]); diff != "" {
		t.Fatalf("next_call (-want +got):\n%s", diff)
	}
}

// TestInferNextCall: the round's next calls (roundHooks), with the
// built-in tools' names; the rules themselves are tested in mcptool.
func TestInferNextCall(t *testing.T) {
	node := map[string]any{"node": "gpu-02", "approval": "signed"}
	tests := []struct {
		name   string
		tool   string
		status Status
		next   string
		want   *Call
	}{
		{"in progress repeats the call", "trial_boot", StatusInProgress, "Wait.", &Call{Tool: "trial_boot", Arguments: map[string]any{"node": "gpu-02"}}},
		{"approval repeats without the approval", "drain_node", StatusApprovalRequired, "Sign.", &Call{Tool: "drain_node", Arguments: map[string]any{"node": "gpu-02"}}},
		{"call again", "install_updates", StatusFailed, "Call install_updates again: it reads the state.", &Call{Tool: "install_updates", Arguments: map[string]any{"node": "gpu-02"}}},
		{"same tool again", "drain_node", StatusRefused, "Call the same tool again: it re-checks.", &Call{Tool: "drain_node", Arguments: map[string]any{"node": "gpu-02"}}},
		{"another tool first, node carried", "install_updates", StatusRefused, "Run simulate_upgrade on the node first.", &Call{Tool: "simulate_upgrade", Arguments: map[string]any{"node": "gpu-02"}}},
		{"round_status takes no node", "record_decision", StatusOK, "Call round_status: it says what comes next.", &Call{Tool: "round_status", Arguments: map[string]any{}}},
		{"ok default", "verify_node", StatusOK, defaultNextAction, &Call{Tool: "round_status", Arguments: map[string]any{}}},
		{"a person first", "install_updates", StatusFailed, "Check that the node is reachable over SSH; then call again.", nil},
		{"not a tool", "fallback_drill", StatusRefused, "Run the drill on the round's canary GPU server.", nil},
		{"own tool named first", "close_round", StatusFailed, "Call close_round's commit again by hand.", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := roundHooks().Next.Infer(tc.tool, tc.status, tc.next, node)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The built-in tools state their rules in the input schemas and keep the
// output schemas to the contract.
func TestBuiltinSchemas(t *testing.T) {
	reg := Builtin()
	total := 0
	for _, tl := range reg.All() {
		in, _ := json.Marshal(tl.InputSchema())
		out, _ := json.Marshal(tl.OutputSchema())
		total += len(in) + len(out) + len(tl.Spec().Description)
		if strings.Contains(string(out), `"null"`) || strings.Contains(string(in), `"null"`) {
			t.Errorf("%s: a nullable type in its schemas", tl.Spec().Name)
		}
		for _, k := range []string{"status", "reasons", "next_action", "next_call", "approval"} {
			if _, ok := tl.OutputSchema().Properties[k]; !ok {
				t.Errorf("%s: output schema lacks %s", tl.Spec().Name, k)
			}
		}
	}
	for _, tc := range []struct{ tool, prop, want string }{
		{"record_decision", "decision", `"enum":["resume","abort","hypervisor_snapshot_taken","residual_risk_accepted","outcome_certified","kernel_promoted"]`},
		{"record_lesson", "kind", `"enum":["lesson","open_question"]`},
		{"record_lesson", "text", `"maxLength":16384`},
		{"plan_round", "round", `"pattern":"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"`},
		{"run_verify", "timeout_seconds", `"maximum":600`},
		{"drain_node", "node", `"pattern":"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"`},
	} {
		b, _ := json.Marshal(reg.Get(tc.tool).InputSchema().Properties[tc.prop])
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%s.%s: %s lacks %s", tc.tool, tc.prop, b, tc.want)
		}
	}
	t.Logf("schemas and descriptions of %d tools: %d bytes", len(reg.All()), total)
}
