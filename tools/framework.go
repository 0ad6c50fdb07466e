// Package tools is mcp-patch's MCP surface: one file per tool with typed
// input and output, annotations and a handler, registered both on the MCP
// server and as a CLI subcommand (`mcp-patch tool NAME`). Handlers decide
// and act through the small interfaces declared in deps.go; this package
// must not import client-go, x/crypto/ssh or go-git directly.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/answer"
)

// Status is the outcome every tool reports.
type Status string

// The statuses. refused and failed are error results (isError); ok,
// in_progress and approval_required are not: approval_required is the
// expected first answer of every destructive call (nothing ran, and
// next_call is the same call to make again with the person's approval), and
// a client shows an error result as a failed call.
const (
	StatusOK               Status = "ok"
	StatusRefused          Status = "refused"
	StatusFailed           Status = "failed"
	StatusApprovalRequired Status = "approval_required"
	StatusInProgress       Status = "in_progress"
)

// IsError reports whether a result with this status is an error result.
func (s Status) IsError() bool { return s == StatusRefused || s == StatusFailed }

// Result is embedded in every tool's output.
type Result struct {
	Status     Status   `json:"status" jsonschema:"ok, refused, failed, approval_required or in_progress"`
	Reasons    []string `json:"reasons" jsonschema:"why the status is what it is, one fact per entry"`
	NextAction string   `json:"next_action" jsonschema:"what to do next, in plain words"`
	// Approval is set when Status is approval_required.
	Approval *ApprovalNeeded `json:"approval,omitempty" jsonschema:"the request a person must sign, when status is approval_required"`
	// NextCall is next_action as a call, where it is one.
	NextCall *Call `json:"next_call,omitempty" jsonschema:"next_action as a tool call, when it is one"`

	approvalID string // the approval that let the call act, for the audit
}

func (r *Result) result() *Result { return r }

type output interface{ result() *Result }

// Call is a tool call the agent can make next (answer.Call).
type Call = answer.Call

// CallTo builds a Call (answer.CallTo).
func CallTo(tool string, kv ...any) *Call { return answer.CallTo(tool, kv...) }

// ApprovalNeeded tells the agent exactly what a person must sign.
type ApprovalNeeded struct {
	Request    string   `json:"request" jsonschema:"the exact request text to be signed; pass it to a person unchanged"`
	Summary    []string `json:"summary" jsonschema:"the request in plain words"`
	Command    string   `json:"command" jsonschema:"the command a person runs to sign it"`
	AltCommand string   `json:"alt_command" jsonschema:"the same with plain ssh-keygen"`
	ExpiresAt  string   `json:"expires_at" jsonschema:"RFC 3339 time after which the request is void"`
}

// The error vocabulary handlers and the round below them return
// (package answer): a Refusal (nothing done) or a Failure (a step ran and
// failed).
type (
	Refusal = answer.Refusal
	Failure = answer.Failure
)

// Refuse builds a Refusal.
func Refuse(next string, reasons ...string) error { return answer.Refuse(next, reasons...) }

// RefuseWith builds a Refusal whose next step is a call.
func RefuseWith(call *Call, next string, reasons ...string) error {
	return answer.RefuseWith(call, next, reasons...)
}

// Fail builds a Failure.
func Fail(next string, reasons ...string) error { return answer.Fail(next, reasons...) }

// Kind sorts tools by what they may change.
type Kind int

// Kinds.
const (
	ReadOnly    Kind = iota // changes nothing anywhere
	Write                   // changes something, not destructively; no approval
	Destructive             // needs a person's signed approval bound to the plan
)

func (k Kind) String() string {
	return [...]string{"read-only", "write", "destructive"}[k]
}

// Spec describes a tool: its name, words for the agent and annotations.
type Spec struct {
	Name        string
	Title       string
	Description string
	Kind        Kind
	Idempotent  bool
	OpenWorld   bool
}

func (s Spec) annotations() *mcp.ToolAnnotations {
	// The title is the tool's own Title field; said once is enough.
	// A hint equal to the protocol's default is left out (destructive and
	// open-world unless said otherwise; destructive means nothing for a
	// read-only tool): every byte is paid once a tool in tools/list.
	a := &mcp.ToolAnnotations{ReadOnlyHint: s.Kind == ReadOnly, IdempotentHint: s.Idempotent}
	if s.Kind == Write {
		a.DestructiveHint = ptr(false)
	}
	if !s.OpenWorld {
		a.OpenWorldHint = ptr(false)
	}
	return a
}

func ptr[T any](v T) *T { return &v }

// Progress reports progress of a long step; total 0 means unknown. done
// only grows within a call: a report at or below the last one sent is not
// sent (MCP wants each progress notification above the last).
type Progress func(done, total float64, message string)

// progressGuard keeps a call's progress notifications increasing.
type progressGuard struct {
	mu   sync.Mutex
	sent bool
	last float64
}

// next says whether a report of done may be sent, and takes it as sent.
func (g *progressGuard) next(done float64) bool {
	if g.sent && done <= g.last {
		return false
	}
	g.sent, g.last = true, done
	return true
}

// after counts a sub-step's progress on from base, out of the caller's
// total (which counts the sub-step's own steps).
func (p Progress) after(base, total float64) Progress {
	return func(done, _ float64, msg string) { p(base+done, total, msg) }
}

// Tool is one registered verb, callable over MCP and from the CLI.
type Tool interface {
	Spec() Spec
	// InputSchema and OutputSchema are the JSON Schemas of the tool.
	InputSchema() *jsonschema.Schema
	OutputSchema() *jsonschema.Schema
	// NewInput returns a pointer to a zero input, for CLI flags.
	NewInput() any
	// CallJSON runs the tool on JSON arguments; the returned value is the
	// structured output and its Result.
	CallJSON(ctx context.Context, d *Deps, args json.RawMessage, p Progress) (any, *Result)
	addTo(s *mcp.Server, d *Deps)
}

// Handler is a tool's typed handler. A returned error becomes the result:
// *Refusal → refused, *Failure → failed, anything else → failed.
type Handler[In any, Out any] func(ctx context.Context, d *Deps, in In, p Progress) (Out, error)

type typedTool[In any, Out any, PO interface {
	*Out
	output
}] struct {
	spec       Spec
	handle     Handler[In, Out]
	in         *jsonschema.Schema
	inResolved *jsonschema.Resolved
	out        *jsonschema.Schema
}

// New builds a Tool from a spec and a typed handler. It panics on a schema
// that cannot be derived (a programming error, caught by tests).
func New[In any, Out any, PO interface {
	*Out
	output
}](spec Spec, h Handler[In, Out]) Tool {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", spec.Name, err))
	}
	constrainInput(spec.Name, in)
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: resolve input schema: %v", spec.Name, err))
	}
	// The output schema is the contract alone: no schema of Out is derived
	// (at every start, for nothing).
	return &typedTool[In, Out, PO]{spec: spec, handle: h, in: in, inResolved: resolved, out: leanOutputSchema()}
}

func (t *typedTool[In, Out, PO]) Spec() Spec                       { return t.spec }
func (t *typedTool[In, Out, PO]) InputSchema() *jsonschema.Schema  { return t.in }
func (t *typedTool[In, Out, PO]) OutputSchema() *jsonschema.Schema { return t.out }
func (t *typedTool[In, Out, PO]) NewInput() any                    { return new(In) }

// run calls the handler, turns errors into results and fills defaults.
// args are the call's arguments as sent, for a next call that repeats it.
func (t *typedTool[In, Out, PO]) run(ctx context.Context, d *Deps, in In, args map[string]any, p Progress) (Out, *Result) {
	var out Out
	var err error
	last := &afterAudit{}
	ctx = context.WithValue(ctx, afterAuditKey{}, last)
	if modeRefuses(d.Mode, t.spec.Kind) {
		err = Refuse("Use a read-only tool, or ask the operator to restart the server without this mode.",
			fmt.Sprintf("the server runs in %s mode: %s tool %s is disabled", d.Mode, t.spec.Kind, t.spec.Name))
	} else {
		out, err = t.handle(ctx, d, in, p)
	}
	err = fromWindow(err)
	res := PO(&out).result()
	var ae *approvedErr
	if errors.As(err, &ae) {
		res.approvalID = ae.id
	}
	if err != nil {
		var ref *Refusal
		var fail *Failure
		if n, ok := isNeedApproval(err); ok {
			a := n.ApprovalNeeded
			res.Status, res.Approval = StatusApprovalRequired, &a
			res.Reasons = append(append([]string{}, n.notes...), t.spec.Name+" is destructive: a person must sign the request before anything runs", "nothing was executed")
			res.NextAction = "Give approval.request to a person unchanged with approval.command; when they hand back the signed approval, " +
				"make next_call with approval set to it (next_call is this call again)."
			err = nil
		}
		switch {
		case err == nil:
		case errors.As(err, &ref):
			res.Status, res.Reasons, res.NextAction, res.NextCall = StatusRefused, ref.Reasons, ref.NextAction, ref.NextCall
		case errors.As(err, &fail):
			res.Status, res.Reasons, res.NextAction, res.NextCall = StatusFailed, fail.Reasons, fail.NextAction, fail.NextCall
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			res.Status, res.Reasons = StatusFailed, []string{t.spec.Name + ": " + err.Error()}
			res.NextAction = "The call was cut short; call it again to see where the step stands."
		default:
			res.Status, res.Reasons = StatusFailed, []string{t.spec.Name + ": " + err.Error()}
			res.NextAction = "Read the reasons; fix the cause or ask a person, then call again."
		}
	}
	res.Status = StatusRule(res.Status, res.Reasons)
	if res.Status == "" {
		res.Status = StatusOK
	}
	if res.Reasons == nil {
		res.Reasons = []string{}
	}
	if res.NextAction == "" && res.Status == StatusOK {
		res.NextAction = defaultNextAction
	}
	if res.NextCall == nil {
		res.NextCall = inferNextCall(t.spec.Name, res.Status, res.NextAction, args)
	}
	if res.NextCall != nil && res.NextCall.Arguments == nil {
		res.NextCall.Arguments = map[string]any{} // the schema says object, never null
	}
	audit(ctx, d, t.spec, in, res)
	for _, fn := range last.fns {
		fn(ctx, res)
	}
	commitAfterCall(ctx, d, t.spec, res)
	return out, res
}

// afterAudit is what a call does once its own audit record is written:
// the round's commit, so that the commit holds that record too.
type afterAudit struct {
	fns []func(context.Context, *Result)
}

type afterAuditKey struct{}

// onceAudited runs fn after the call's audit record is written, with the
// call's final result (fn may add reasons). It reports false outside a
// tool's run, where nothing runs later: the caller acts at once.
func onceAudited(ctx context.Context, fn func(context.Context, *Result)) bool {
	last, ok := ctx.Value(afterAuditKey{}).(*afterAudit)
	if !ok {
		return false
	}
	last.fns = append(last.fns, fn)
	return true
}

// CallJSON runs the tool on JSON arguments as a client sent them: input
// that breaks the schema is a refused result (with the contract fields),
// never a protocol error.
func (t *typedTool[In, Out, PO]) CallJSON(ctx context.Context, d *Deps, args json.RawMessage, p Progress) (any, *Result) {
	var out Out
	in, m, err := t.decodeInput(args)
	if err != nil {
		res := PO(&out).result()
		res.Status, res.Reasons = StatusRefused, []string{"invalid input: " + err.Error(), "nothing was done"}
		res.NextAction = "Fix the arguments to match " + t.spec.Name + "'s input schema and call again."
		return &out, res
	}
	out, res := t.run(ctx, d, in, m, p)
	return &out, res
}

// decodeInput validates arguments against the input schema (defaults
// applied) and decodes them; unknown fields are refused.
func (t *typedTool[In, Out, PO]) decodeInput(args json.RawMessage) (In, map[string]any, error) {
	var in In
	m := map[string]any{}
	if len(args) > 0 && string(args) != "null" {
		if err := json.Unmarshal(args, &m); err != nil {
			return in, nil, fmt.Errorf("arguments are not a JSON object: %w", err)
		}
		if m == nil {
			m = map[string]any{}
		}
	}
	// An empty string for an optional string is taken as absent: clients
	// (and models) send "" for arguments they mean to leave out.
	for k, v := range m {
		if str, ok := v.(string); ok && str == "" && !slices.Contains(t.in.Required, k) {
			delete(m, k)
		}
	}
	if err := t.inResolved.ApplyDefaults(&m); err != nil {
		return in, nil, err
	}
	if err := t.inResolved.Validate(m); err != nil {
		return in, nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return in, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, nil, err
	}
	return in, m, nil
}

func (t *typedTool[In, Out, PO]) addTo(s *mcp.Server, d *Deps) {
	tool := &mcp.Tool{
		Name:         t.spec.Name,
		Title:        t.spec.Title,
		Description:  t.spec.Description,
		Annotations:  t.spec.annotations(),
		InputSchema:  t.in,
		OutputSchema: t.out,
	}
	s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p := func(done, total float64, msg string) {}
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			var g progressGuard
			p = func(done, total float64, msg string) {
				// Steps report from several goroutines; the protocol wants
				// each notification's progress above the last one's.
				g.mu.Lock()
				defer g.mu.Unlock()
				if !g.next(done) {
					return
				}
				// A progress notification that cannot be sent changes
				// nothing for the call: the result still comes back.
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: tok, Progress: done, Total: total, Message: msg}); err != nil {
					d.Log.Debug("progress notification not sent", "tool", t.spec.Name, "err", err)
				}
			}
		}
		out, res := t.CallJSON(ctx, d, req.Params.Arguments, p)
		b, err := EncodeResult(out)
		if err != nil {
			return nil, fmt.Errorf("encode %s output: %w", t.spec.Name, err)
		}
		return &mcp.CallToolResult{
			IsError:           res.Status.IsError(),
			Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
			StructuredContent: json.RawMessage(b),
		}, nil
	})
}

// nodeName is a DNS-1123 label or subdomain without a leading dash: what
// Kubernetes accepts as a node name, and nothing a shell would interpret.
var nodeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// NodePattern is the JSON Schema pattern for node names: the characters
// and the ends of a DNS-1123 name, so nothing a shell would read as an
// option or a path matches; ValidNode adds the label rules (dot-separated
// labels of at most 63), which cost tools/list bytes in every node argument.
const NodePattern = `^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`

// ValidNode checks a node name.
func ValidNode(name string) error {
	if name == "" {
		return Refuse("Name a node from plan_round's order.", "node is required")
	}
	if len(name) > 253 || !nodeName.MatchString(name) {
		return Refuse("Use the node's Kubernetes name (lower-case letters, digits, '-' and '.').",
			fmt.Sprintf("node %q is not a valid node name (DNS-1123, no leading dash)", name))
	}
	return nil
}

// Registry is the ordered set of tools.
type Registry struct{ tools []Tool }

// Add appends tools; a duplicate name panics.
func (r *Registry) Add(ts ...Tool) {
	for _, t := range ts {
		if r.Get(t.Spec().Name) != nil {
			panic("duplicate tool " + t.Spec().Name)
		}
		r.tools = append(r.tools, t)
	}
}

// Get returns the named tool or nil.
func (r *Registry) Get(name string) Tool {
	for _, t := range r.tools {
		if t.Spec().Name == name {
			return t
		}
	}
	return nil
}

// All returns the tools sorted by name.
func (r *Registry) All() []Tool {
	ts := slices.Clone(r.tools)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Spec().Name < ts[j].Spec().Name })
	return ts
}

// Register adds the tools a mode offers to an MCP server.
func (r *Registry) Register(s *mcp.Server, d *Deps) {
	for _, t := range r.All() {
		if d.Mode == ModeReadOnly && t.Spec().Kind != ReadOnly {
			continue
		}
		t.addTo(s, d)
	}
}
