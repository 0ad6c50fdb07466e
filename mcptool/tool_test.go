package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/mcpcheck"
)

// The shared MCP checks (internal/testsupport/mcpcheck).
var (
	call      = mcpcheck.Call
	topKeys   = mcpcheck.TopKeys
	toStrings = mcpcheck.Strings
)

// server is the value handed to the test tools: the kinds it refuses and
// what its hooks saw.
type server struct {
	readOnly bool
	audited  []string
	order    []string
}

type echoIn struct {
	Node string `json:"node" jsonschema:"a node"`
	Fail string `json:"fail,omitempty" jsonschema:"refuse or fail"`
}

type echoOut struct {
	Result
	Echo string `json:"echo"`
}

// testHooks refuses every tool but a read-only one on a read-only server,
// states a node pattern and records the audit and the call's end.
func testHooks() *Hooks[*server] {
	return &Hooks[*server]{
		Refuse: func(_ context.Context, d *server, spec Spec) error {
			if d.readOnly && spec.Kind != ReadOnly {
				return answer.Refuse("Use a read-only tool.", spec.Name+" is disabled")
			}
			return nil
		},
		Answer: func(spec Spec, err error, res *Result) error {
			if err.Error() != "sign first" {
				return err
			}
			res.Status, res.Approval = StatusApprovalRequired, &ApprovalNeeded{Request: "req"}
			res.Reasons, res.NextAction = []string{"nothing was executed"}, "Sign it."
			return nil
		},
		Audit: func(_ context.Context, d *server, spec Spec, in any, res *Result) {
			d.audited = append(d.audited, spec.Name+" "+string(res.Status))
			d.order = append(d.order, "audit")
		},
		AfterCall: func(_ context.Context, d *server, spec Spec, res *Result) {
			d.order = append(d.order, "after")
			res.Reasons = append(res.Reasons, "after the call")
		},
		Offers: func(d *server, spec Spec) bool { return !d.readOnly || spec.Kind == ReadOnly },
		Constrain: func(tool string, s *jsonschema.Schema) {
			if p := s.Properties["node"]; p != nil {
				p.Pattern = `^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`
			}
		},
		ResultSchemaID: "urn:test:result",
		Next:           NextCalls{StatusTool: "status", DefaultAction: "Call status.", Carried: []string{"node"}, Fresh: []string{"approval"}},
	}
}

func echoTool(h *Hooks[*server]) Tool[*server] {
	return New[*server, echoIn, echoOut](h, Spec{Name: "echo", Title: "Echo", Description: "echo", Kind: ReadOnly, Idempotent: true},
		func(ctx context.Context, d *server, in echoIn, p Progress) (echoOut, error) {
			p(1, 2, "half")
			switch in.Fail {
			case "refuse":
				return echoOut{}, answer.Refuse("do something else", "refused on purpose")
			case "fail":
				return echoOut{}, answer.Fail("look at the host", "failed on purpose")
			case "plain":
				return echoOut{}, errors.New("boom")
			case "cancel":
				return echoOut{}, fmt.Errorf("wait: %w", context.Canceled)
			case "blocker":
				return echoOut{Result: Result{Reasons: []string{answer.Blocker("a held package")}}}, nil
			case "once":
				OnceAudited(ctx, func(_ context.Context, res *Result) {
					d.order = append(d.order, "once")
					res.Reasons = append(res.Reasons, "once audited")
				})
			}
			return echoOut{Echo: in.Node}, nil
		})
}

type stepIn struct {
	Node     string `json:"node"`
	Approval string `json:"approval,omitempty"`
}

// stepTool is a write tool that asks for a signature until given one.
func stepTool(h *Hooks[*server]) Tool[*server] {
	return New[*server, stepIn, echoOut](h, Spec{Name: "step", Title: "Step", Description: "a step", Kind: Write},
		func(ctx context.Context, d *server, in stepIn, p Progress) (echoOut, error) {
			if in.Approval == "" {
				return echoOut{}, errors.New("sign first")
			}
			return echoOut{Echo: in.Node}, nil
		})
}

func connect(t *testing.T, reg *Registry[*server], d *server, opts *mcp.ClientOptions) (*mcp.ClientSession, *[]byte) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	reg.Register(srv, d)
	// What the server puts on the wire, before any client decodes it into
	// a map (which would lose the order).
	var wire []byte
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok {
				wire, _ = json.Marshal(r.StructuredContent)
			}
			return res, err
		}
	})
	cs := mcpcheck.Connect(t, srv, opts)
	return cs, &wire
}

// A handler's error becomes the result: a refusal refused, a failure, a
// plain error and a cut-short call failed, all error results; a blocker
// among an ok result's reasons fails it.
func TestResultsAndErrors(t *testing.T) {
	h := testHooks()
	reg := &Registry[*server]{}
	reg.Add(echoTool(h))
	d := &server{}
	cs, _ := connect(t, reg, d, nil)
	tests := []struct {
		name    string
		args    map[string]any
		status  Status
		isError bool
		reason  string
		next    string
	}{
		{"ok", map[string]any{"node": "gpu-01"}, StatusOK, false, "after the call", "Call status."},
		{"refusal", map[string]any{"node": "gpu-01", "fail": "refuse"}, StatusRefused, true, "refused on purpose", "do something else"},
		{"failure", map[string]any{"node": "gpu-01", "fail": "fail"}, StatusFailed, true, "failed on purpose", "look at the host"},
		{"plain error", map[string]any{"node": "gpu-01", "fail": "plain"}, StatusFailed, true, "echo: boom", "Read the reasons; fix the cause or ask a person, then call again."},
		{"cut short", map[string]any{"node": "gpu-01", "fail": "cancel"}, StatusFailed, true, "echo: wait: context canceled", "The call was cut short; call it again to see where the step stands."},
		{"blocker", map[string]any{"node": "gpu-01", "fail": "blocker"}, StatusFailed, true, "a held package", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, m := call(t, cs, "echo", tc.args)
			if res.IsError != tc.isError || Status(m["status"].(string)) != tc.status {
				t.Fatalf("isError=%v status=%v, want %v %v", res.IsError, m["status"], tc.isError, tc.status)
			}
			if m["next_action"] != tc.next {
				t.Errorf("next_action %q, want %q", m["next_action"], tc.next)
			}
			if !strings.Contains(strings.Join(toStrings(m["reasons"]), ";"), tc.reason) {
				t.Errorf("reasons %v lack %q", m["reasons"], tc.reason)
			}
		})
	}
	want := []string{"echo ok", "echo refused", "echo failed", "echo failed", "echo failed", "echo failed"}
	if diff := cmp.Diff(want, d.audited); diff != "" {
		t.Errorf("audited (-want +got):\n%s", diff)
	}
}

// What a call asks to run once audited runs after the audit and before
// the hook that ends the call; outside a call it runs nowhere.
func TestOnceAudited(t *testing.T) {
	d := &server{}
	_, res := echoTool(testHooks()).CallJSON(context.Background(), d, json.RawMessage(`{"node":"n-1","fail":"once"}`), func(float64, float64, string) {})
	if diff := cmp.Diff([]string{"audit", "once", "after"}, d.order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"once audited", "after the call"}, res.Reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	if OnceAudited(context.Background(), func(context.Context, *Result) {}) {
		t.Error("OnceAudited outside a call reports true")
	}
}

func TestProgressNotifications(t *testing.T) {
	reg := &Registry[*server]{}
	reg.Add(echoTool(testHooks()))
	got := make(chan string, 4)
	cs, _ := connect(t, reg, &server{}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			got <- r.Params.Message
		}})
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"node": "n1"}}
	params.SetProgressToken("tok")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "half" {
			t.Fatalf("progress message %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no progress notification")
	}
}

// Refuse and Offers decide what a server runs and lists.
func TestRefuseAndOffers(t *testing.T) {
	h := testHooks()
	reg := &Registry[*server]{}
	reg.Add(echoTool(h), stepTool(h))
	cs, _ := connect(t, reg, &server{readOnly: true}, nil)
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	if diff := cmp.Diff([]string{"echo"}, names); diff != "" {
		t.Fatalf("a read-only server offers (-want +got):\n%s", diff)
	}
	d := &server{readOnly: true}
	_, res := reg.Get("step").CallJSON(context.Background(), d, json.RawMessage(`{"node":"n-1","approval":"a"}`), func(float64, float64, string) {})
	if res.Status != StatusRefused || !strings.Contains(strings.Join(res.Reasons, ";"), "step is disabled") {
		t.Fatalf("refused kind: %+v", res)
	}
	if diff := cmp.Diff([]string{"step refused"}, d.audited); diff != "" {
		t.Errorf("audited (-want +got):\n%s", diff)
	}
}

// The contract comes first in both the text and the structured content,
// whatever order the payload declares: a client that sorts or cuts long
// results still shows status and next step.
func TestContractFieldsComeFirst(t *testing.T) {
	h := testHooks()
	reg := &Registry[*server]{}
	reg.Add(echoTool(h), stepTool(h))
	cs, wire := connect(t, reg, &server{}, nil)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want []string
	}{
		{"echo", map[string]any{"node": "gpu-01"}, []string{"status", "reasons", "next_action", "next_call", "echo"}},
		{"step", map[string]any{"node": "gpu-01"}, []string{"status", "reasons", "next_action", "next_call", "approval", "echo"}},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		text := []byte(res.Content[0].(*mcp.TextContent).Text)
		if diff := cmp.Diff(tc.want, topKeys(t, text)); diff != "" {
			t.Errorf("%s text keys (-want +got):\n%s", tc.tool, diff)
		}
		if diff := cmp.Diff(tc.want, topKeys(t, *wire)); diff != "" {
			t.Errorf("%s structuredContent keys (-want +got):\n%s", tc.tool, diff)
		}
	}
}

// An approval the Answer hook asks for is not an error result, and its
// next_call is the same call without the Fresh arguments.
func TestApprovalRequiredNextCall(t *testing.T) {
	h := testHooks()
	reg := &Registry[*server]{}
	reg.Add(stepTool(h))
	cs, _ := connect(t, reg, &server{}, nil)
	res, m := call(t, cs, "step", map[string]any{"node": "cp-1", "approval": ""})
	if res.IsError || m["status"] != string(StatusApprovalRequired) {
		t.Fatalf("isError=%v %v", res.IsError, m)
	}
	want := map[string]any{"tool": "step", "arguments": map[string]any{"node": "cp-1"}}
	if diff := cmp.Diff(want, m["next_call"]); diff != "" {
		t.Fatalf("next_call (-want +got):\n%s", diff)
	}
}

// Input that breaks the schema is a refused tool result carrying the
// contract, not the SDK's bare error text, and the handler never runs.
func TestSchemaViolationIsARefusal(t *testing.T) {
	reg := &Registry[*server]{}
	reg.Add(echoTool(testHooks()))
	cs, _ := connect(t, reg, &server{}, nil)
	for name, args := range map[string]map[string]any{
		"bad pattern":   {"node": "GPU_01"},
		"leading dash":  {"node": "-rf"},
		"unknown field": {"node": "gpu-01", "force": true},
		"wrong type":    {"node": 7},
		"missing":       {},
	} {
		t.Run(name, func(t *testing.T) {
			res, m := call(t, cs, "echo", args)
			if !res.IsError || m["status"] != string(StatusRefused) {
				t.Fatalf("isError=%v %v", res.IsError, m)
			}
			if m["echo"] != "" && m["echo"] != nil {
				t.Fatalf("handler ran: %v", m)
			}
			reasons := strings.Join(toStrings(m["reasons"]), "; ")
			if !strings.Contains(reasons, "invalid input") || !strings.Contains(m["next_action"].(string), "input schema") {
				t.Fatalf("reasons %q next_action %q", reasons, m["next_action"])
			}
		})
	}
}

// The schemas: the input schema with the hook's rules and no
// additionalProperties, the output schema the contract under the hook's id.
func TestSchemas(t *testing.T) {
	tl := echoTool(testHooks())
	in, _ := json.Marshal(tl.InputSchema())
	want := `{"type":"object","properties":{"node":{"type":"string","description":"a node","pattern":"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"},"fail":{"type":"string","description":"refuse or fail"}},"required":["node"]}`
	if string(in) != want {
		t.Errorf("input schema\n%s\nwant\n%s", in, want)
	}
	out := tl.OutputSchema()
	if out.ID != "urn:test:result" {
		t.Errorf("output schema id %q", out.ID)
	}
	for _, k := range contractKeys {
		if _, ok := out.Properties[k]; !ok {
			t.Errorf("output schema lacks %s", k)
		}
	}
	if _, ok := tl.NewInput().(*echoIn); !ok {
		t.Errorf("NewInput is %T", tl.NewInput())
	}
}

// TestAnnotationsSayTheKind: what a client reads from a tool's hints,
// with the protocol's defaults for those left out (destructive and
// open-world unless said otherwise), is the tool's kind, and a hint is
// left out only where the default says the same.
func TestAnnotationsSayTheKind(t *testing.T) {
	for _, tc := range []struct {
		spec                                         Spec
		readOnly, destructive, idempotent, openWorld bool
		wire                                         string
	}{
		{Spec{Kind: ReadOnly, Idempotent: true}, true, false, true, false,
			`{"idempotentHint":true,"openWorldHint":false,"readOnlyHint":true}`},
		{Spec{Kind: ReadOnly, OpenWorld: true}, true, false, false, true,
			`{"idempotentHint":false,"readOnlyHint":true}`},
		{Spec{Kind: Write, Idempotent: true, OpenWorld: true}, false, false, true, true,
			`{"destructiveHint":false,"idempotentHint":true,"readOnlyHint":false}`},
		{Spec{Kind: Write}, false, false, false, false,
			`{"destructiveHint":false,"idempotentHint":false,"openWorldHint":false,"readOnlyHint":false}`},
		{Spec{Kind: Destructive, OpenWorld: true}, false, true, false, true,
			`{"idempotentHint":false,"readOnlyHint":false}`},
		{Spec{Kind: Destructive, Idempotent: true}, false, true, true, false,
			`{"idempotentHint":true,"openWorldHint":false,"readOnlyHint":false}`},
	} {
		b, err := json.Marshal(tc.spec.annotations())
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.wire {
			t.Errorf("%+v: annotations %s, want %s", tc.spec, b, tc.wire)
		}
		ro, de, id, ow := readHints(t, b)
		if ro != tc.readOnly || id != tc.idempotent || ow != tc.openWorld || (!ro && de != tc.destructive) {
			t.Errorf("%+v: a client reads readOnly %v destructive %v idempotent %v openWorld %v from %s", tc.spec, ro, de, id, ow, b)
		}
	}
}

// readHints reads annotations as a client does, with the protocol's
// defaults for hints left out.
func readHints(t *testing.T, b []byte) (readOnly, destructive, idempotent, openWorld bool) {
	t.Helper()
	m := map[string]bool{"destructiveHint": true, "openWorldHint": true}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("annotations %s: %v", b, err)
	}
	return m["readOnlyHint"], m["destructiveHint"], m["idempotentHint"], m["openWorldHint"]
}

func TestRegistry(t *testing.T) {
	h := testHooks()
	reg := &Registry[*server]{}
	reg.Add(stepTool(h), echoTool(h))
	var names []string
	for _, tl := range reg.All() {
		names = append(names, tl.Spec().Name)
	}
	if diff := cmp.Diff([]string{"echo", "step"}, names); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
	if reg.Get("none") != nil {
		t.Error("Get of an unknown name is not nil")
	}
	defer func() {
		if recover() == nil {
			t.Error("a duplicate name did not panic")
		}
	}()
	reg.Add(echoTool(h))
}

// A tool built without hooks runs its handler and keeps the contract.
func TestNoHooks(t *testing.T) {
	tl := New[struct{}, struct{}, echoOut](nil, Spec{Name: "bare"},
		func(context.Context, struct{}, struct{}, Progress) (echoOut, error) { return echoOut{Echo: "x"}, nil })
	out, res := tl.CallJSON(context.Background(), struct{}{}, nil, func(float64, float64, string) {})
	if res.Status != StatusOK || res.Reasons == nil || res.NextCall != nil || out.(*echoOut).Echo != "x" {
		t.Fatalf("bare tool: %+v %+v", out, res)
	}
}
