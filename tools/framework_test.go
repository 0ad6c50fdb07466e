package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/mcpcheck"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// The shared MCP checks (internal/testsupport/mcpcheck).
var (
	call      = mcpcheck.Call
	topKeys   = mcpcheck.TopKeys
	toStrings = mcpcheck.Strings
)

type echoIn struct {
	Node string `json:"node" jsonschema:"a node"`
	Fail string `json:"fail,omitempty" jsonschema:"refuse or fail"`
}
type echoOut struct {
	Result
	Echo string `json:"echo"`
}

func echoTool() Tool {
	return New[echoIn, echoOut](Spec{Name: "echo", Title: "Echo", Description: "echo", Kind: ReadOnly, Idempotent: true},
		func(ctx context.Context, d *Deps, in echoIn, p Progress) (echoOut, error) {
			if err := ValidNode(in.Node); err != nil {
				return echoOut{}, err
			}
			p(1, 2, "half")
			switch in.Fail {
			case "refuse":
				return echoOut{}, Refuse("do something else", "refused on purpose")
			case "fail":
				return echoOut{}, Fail("look at the host", "failed on purpose")
			case "plain":
				return echoOut{}, errors.New("boom")
			}
			return echoOut{Echo: in.Node}, nil
		})
}

type stepIn struct {
	ApprovalArg
	Node string `json:"node"`
}
type stepOut struct {
	Result
	Did string `json:"did,omitempty"`
}

// fakeApprovals accepts an approval equal to "signed:<digest>" once.
type fakeApprovals struct{ used map[string]bool }

func (f *fakeApprovals) Request(tool string, p service.Binding) (string, time.Time, error) {
	return "request " + tool + " " + p.Node + " " + p.Digest, time.Unix(0, 0), nil
}
func (f *fakeApprovals) Verify(_ context.Context, a, tool string, p service.Binding) (service.Approved, error) {
	if a != "signed:"+p.Digest {
		return service.Approved{}, errors.New("signature does not match the plan")
	}
	if f.used[a] {
		return service.Approved{}, errors.New("replayed")
	}
	return service.Approved{ID: a, Text: a}, nil
}
func (f *fakeApprovals) Consume(_ context.Context, a service.Approved) error {
	f.used[a.ID] = true
	return nil
}

// Reverify takes "signed:<digest>", then the signed summary lines, once
// it was used.
func (f *fakeApprovals) Reverify(_ context.Context, a, tool string, p service.Binding) (service.Approved, error) {
	return fakeReverify(f.used, a, p)
}
func (f *fakeApprovals) ConsumePart(_ context.Context, a service.Approved, part string) error {
	if f.used[a.ID+"/"+part] {
		return policy.ErrReplayed
	}
	f.used[a.ID+"/"+part] = true
	return nil
}

func fakeReverify(used map[string]bool, a string, p service.Binding) (service.Approved, error) {
	first, rest, _ := strings.Cut(a, "\n")
	dg, ok := strings.CutPrefix(first, "signed:")
	switch {
	case !ok:
		return service.Approved{}, errors.New("not signed")
	case p.Digest != "" && dg != p.Digest:
		return service.Approved{}, errors.New("signature does not match the plan")
	case !used[first]:
		return service.Approved{}, errors.New("never used")
	}
	var summary []string
	if rest != "" {
		summary = strings.Split(strings.TrimSuffix(rest, "\n"), "\n")
	}
	return service.Approved{ID: first, Digest: dg, Summary: summary, Text: a}, nil
}
func (f *fakeApprovals) Attestation(policy.Kind, policy.AttestationFields, []string) (string, time.Time, error) {
	return "", time.Time{}, errors.New("not in this fake")
}
func (f *fakeApprovals) VerifyAttestation(context.Context, string, policy.Kind, policy.AttestationFields, []string) (service.Approved, policy.Request, error) {
	return service.Approved{}, policy.Request{}, errors.New("not in this fake")
}

func (f *fakeApprovals) ReverifyAttestation(context.Context, string, policy.Kind) (service.Approved, policy.Request, error) {
	return service.Approved{}, policy.Request{}, errors.New("not in this fake")
}
func (f *fakeApprovals) VerifyRecord(context.Context, string, policy.Kind) (service.Approved, policy.Request, error) {
	return service.Approved{}, policy.Request{}, errors.New("not in this fake")
}

func stepTool(executed *int, digest *string) Tool {
	return NewDestructive[stepIn, stepOut, testPlan](Spec{Name: "step", Title: "Step", Description: "a destructive step"},
		Steps[stepIn, stepOut, testPlan]{
			Target: func(in stepIn) string { return in.Node },
			Open:   func(*Deps) (*window.Round, error) { return &window.Round{ID: "r1"}, nil },
			Plan: func(ctx context.Context, d *Deps, r *window.Round, in stepIn) (testPlan, error) {
				return testPlan{Node: in.Node, D: *digest, Sum: []string{"do it"}}, nil
			},
			Do: func(ctx context.Context, d *Deps, r *window.Round, in stepIn, plan testPlan, a service.Approved, p Progress) (stepOut, error) {
				*executed++
				return stepOut{Did: in.Node}, nil
			},
		})
}

func testDeps(t testing.TB, mode config.Mode) *Deps {
	c := config.DefaultConfig()
	c.Mode, c.StateDir = mode, t.TempDir()
	return &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mode: mode,
		Approvals: &fakeApprovals{used: map[string]bool{}}}
}

func connect(t *testing.T, reg *Registry, d *Deps, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return mcpcheck.Connect(t, NewServer(reg, d, "test"), opts)
}

// A node name the schema or ValidNode refuses is a refused result, never
// a protocol error (the framework's own results are tested in mcptool).
func TestNodeNamesRefused(t *testing.T) {
	reg := &Registry{}
	reg.Add(echoTool())
	cs := connect(t, reg, testDeps(t, ModeNormal), nil)
	for _, bad := range []string{"-rf", "GPU_01", "a;b", "../etc", strings.Repeat("a", 300), "a." + strings.Repeat("b", 64)} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"node": bad}})
		if err != nil {
			t.Fatalf("node %q: protocol error %v", bad, err)
		}
		if !res.IsError {
			t.Errorf("node %q accepted", bad)
		}
	}
	_, m := call(t, cs, "echo", map[string]any{"node": "gpu-01", "fail": "plain"})
	if m["status"] != string(StatusFailed) || m["next_call"] != nil {
		t.Errorf("plain error: %v", m)
	}
}

func TestDestructiveChokepoint(t *testing.T) {
	executed := 0
	digest := "sha256:aaa"
	reg := &Registry{}
	reg.Add(stepTool(&executed, &digest))
	cs := connect(t, reg, testDeps(t, ModeNormal), nil)

	res, m := call(t, cs, "step", map[string]any{"node": "cp-1"})
	if res.IsError || m["status"] != string(StatusApprovalRequired) {
		t.Fatalf("without approval: %v", m)
	}
	appr := m["approval"].(map[string]any)
	if !strings.Contains(appr["request"].(string), "sha256:aaa") || appr["command"] == "" {
		t.Fatalf("approval request incomplete: %v", appr)
	}
	if executed != 0 {
		t.Fatal("executed without approval")
	}
	_, m = call(t, cs, "step", map[string]any{"node": "cp-1", "approval": "signed:sha256:bbb"})
	if m["status"] != string(StatusRefused) || executed != 0 {
		t.Fatalf("wrong digest: %v executed=%d", m, executed)
	}
	_, m = call(t, cs, "step", map[string]any{"node": "cp-1", "approval": "signed:sha256:aaa"})
	if m["status"] != string(StatusOK) || executed != 1 {
		t.Fatalf("valid approval: %v executed=%d", m, executed)
	}
	_, m = call(t, cs, "step", map[string]any{"node": "cp-1", "approval": "signed:sha256:aaa"})
	if m["status"] != string(StatusRefused) || executed != 1 {
		t.Fatalf("replay: %v executed=%d", m, executed)
	}
	// The live plan drifted after the person signed: refused.
	digest = "sha256:ccc"
	_, m = call(t, cs, "step", map[string]any{"node": "cp-1", "approval": "signed:sha256:aaa"})
	if m["status"] != string(StatusRefused) || executed != 1 {
		t.Fatalf("drifted plan: %v executed=%d", m, executed)
	}
}

func TestModes(t *testing.T) {
	executed := 0
	digest := "d"
	reg := &Registry{}
	reg.Add(echoTool(), stepTool(&executed, &digest))

	cs := connect(t, reg, testDeps(t, ModeReadOnly), nil)
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	if diff := cmp.Diff([]string{"echo"}, names); diff != "" {
		t.Fatalf("read-only mode offers (-want +got):\n%s", diff)
	}

	cs = connect(t, reg, testDeps(t, ModeDisableDestructive), nil)
	_, m := call(t, cs, "step", map[string]any{"node": "cp-1", "approval": "signed:d"})
	if m["status"] != string(StatusRefused) || executed != 0 {
		t.Fatalf("disable-destructive: %v executed=%d", m, executed)
	}
}

// TestAnnotationsSayTheKind: every built-in tool, as a client reads its
// hints (the framework's mapping is tested in mcptool), is destructive
// exactly when it needs an approval.
func TestAnnotationsSayTheKind(t *testing.T) {
	reg := Builtin()
	cs := connect(t, reg, testDeps(t, ModeNormal), nil)
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		b, _ := json.Marshal(tl.Annotations)
		ro, de, _, _ := readHints(t, b)
		kind := reg.Get(tl.Name).Spec().Kind
		if ro != (kind == ReadOnly) || (!ro && de != (kind == Destructive)) {
			t.Errorf("tool %s (%s): annotations %s", tl.Name, kind, b)
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
