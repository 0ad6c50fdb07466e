package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/answer"
)

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

// After counts a sub-step's progress on from base, out of the caller's
// total (which counts the sub-step's own steps).
func (p Progress) After(base, total float64) Progress {
	return func(done, _ float64, msg string) { p(base+done, total, msg) }
}

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

// Hooks is what the framework asks of the server its tools run in, for
// the value D handed to handlers. Every field may be nil (or zero): the
// framework then does without it.
type Hooks[D any] struct {
	// Refuse, before the handler runs, returns the error that refuses the
	// call outright (a mode that disables the tool's kind, a server that
	// does not lead); nil lets it run.
	Refuse func(ctx context.Context, d D, spec Spec) error
	// Answer takes a handler's error before it becomes the result: it may
	// fill res (an approval to ask for, the approval that let the step
	// act) and returns the error left to render, nil when res is settled.
	Answer func(spec Spec, err error, res *Result) error
	// Audit records a call once its result is final.
	Audit func(ctx context.Context, d D, spec Spec, in any, res *Result)
	// AfterCall runs last, after the audit and what the call asked to run
	// once audited (OnceAudited); it may add reasons.
	AfterCall func(ctx context.Context, d D, spec Spec, res *Result)
	// Offers says whether Register adds a tool to a server for d.
	Offers func(d D, spec Spec) bool
	// Log is where a progress notification that could not be sent is said.
	Log func(d D) *slog.Logger
	// Constrain states in a tool's input schema the rules its handler
	// checks (patterns, enums, bounds), so a client and the model see them.
	Constrain func(tool string, s *jsonschema.Schema)
	// ResultSchemaID names the one output schema every tool shares. A client
	// that caches compiled schemas by $id (the TypeScript SDK's Ajv validator
	// does) compiles it once for the whole tools/list instead of once a tool.
	ResultSchemaID string
	// Next turns a next action into a next call where the tool named none.
	Next NextCalls
}

// Tool is one registered verb, callable over MCP and from a command line.
type Tool[D any] interface {
	Spec() Spec
	// InputSchema and OutputSchema are the JSON Schemas of the tool.
	InputSchema() *jsonschema.Schema
	OutputSchema() *jsonschema.Schema
	// NewInput returns a pointer to a zero input, for command-line flags.
	NewInput() any
	// CallJSON runs the tool on JSON arguments; the returned value is the
	// structured output and its Result.
	CallJSON(ctx context.Context, d D, args json.RawMessage, p Progress) (any, *Result)
	addTo(s *mcp.Server, d D)
	offeredTo(d D) bool
}

// Handler is a tool's typed handler. A returned error becomes the result:
// *answer.Refusal → refused, *answer.Failure → failed, *answer.Pending →
// in_progress, anything else → failed.
type Handler[D, In, Out any] func(ctx context.Context, d D, in In, p Progress) (Out, error)

type typedTool[D, In, Out any, PO interface {
	*Out
	Output
}] struct {
	hooks      *Hooks[D]
	spec       Spec
	handle     Handler[D, In, Out]
	in         *jsonschema.Schema
	inResolved *jsonschema.Resolved
	out        *jsonschema.Schema
}

// New builds a Tool from a spec and a typed handler, run with hooks (nil:
// none). It panics on a schema that cannot be derived (a programming
// error, caught by tests).
func New[D, In, Out any, PO interface {
	*Out
	Output
}](hooks *Hooks[D], spec Spec, h Handler[D, In, Out]) Tool[D] {
	if hooks == nil {
		hooks = &Hooks[D]{}
	}
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", spec.Name, err))
	}
	// additionalProperties is left out: an unknown argument is still
	// refused, by the decoder, with a result naming it; saying so in every
	// schema cost more bytes of tools/list than it taught.
	in.AdditionalProperties = nil
	if hooks.Constrain != nil {
		hooks.Constrain(spec.Name, in)
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: resolve input schema: %v", spec.Name, err))
	}
	// The output schema is the contract alone: no schema of Out is derived
	// (at every start, for nothing).
	return &typedTool[D, In, Out, PO]{hooks: hooks, spec: spec, handle: h, in: in, inResolved: resolved, out: leanOutputSchema(hooks.ResultSchemaID)}
}

var _ Tool[struct{}] = (*typedTool[struct{}, struct{}, Result, *Result])(nil)

func (t *typedTool[D, In, Out, PO]) Spec() Spec                       { return t.spec }
func (t *typedTool[D, In, Out, PO]) InputSchema() *jsonschema.Schema  { return t.in }
func (t *typedTool[D, In, Out, PO]) OutputSchema() *jsonschema.Schema { return t.out }
func (t *typedTool[D, In, Out, PO]) NewInput() any                    { return new(In) }

func (t *typedTool[D, In, Out, PO]) offeredTo(d D) bool {
	return t.hooks.Offers == nil || t.hooks.Offers(d, t.spec)
}

// run calls the handler, turns errors into results and fills defaults.
// args are the call's arguments as sent, for a next call that repeats it.
func (t *typedTool[D, In, Out, PO]) run(ctx context.Context, d D, in In, args map[string]any, p Progress) (Out, *Result) {
	var out Out
	var err error
	last := &afterAudit{}
	ctx = context.WithValue(ctx, afterAuditKey{}, last)
	if t.hooks.Refuse != nil {
		err = t.hooks.Refuse(ctx, d, t.spec)
	}
	if err == nil {
		out, err = t.handle(ctx, d, in, p)
	}
	res := PO(&out).Contract()
	if err != nil && t.hooks.Answer != nil {
		err = t.hooks.Answer(t.spec, err, res)
	}
	if err != nil {
		var ref *answer.Refusal
		var fail *answer.Failure
		var pend *answer.Pending
		switch {
		case errors.As(err, &pend):
			res.Status, res.Reasons, res.NextAction, res.NextCall = StatusInProgress, pend.Reasons, pend.NextAction, pend.NextCall
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
		res.NextAction = t.hooks.Next.DefaultAction
	}
	if res.NextCall == nil {
		res.NextCall = t.hooks.Next.Infer(t.spec.Name, res.Status, res.NextAction, args)
	}
	if res.NextCall != nil && res.NextCall.Arguments == nil {
		res.NextCall.Arguments = map[string]any{} // the schema says object, never null
	}
	if t.hooks.Audit != nil {
		t.hooks.Audit(ctx, d, t.spec, in, res)
	}
	for _, fn := range last.fns {
		fn(ctx, res)
	}
	if t.hooks.AfterCall != nil {
		t.hooks.AfterCall(ctx, d, t.spec, res)
	}
	return out, res
}

// afterAudit is what a call does once its own audit record is written
// (a commit that should hold that record too).
type afterAudit struct {
	fns []func(context.Context, *Result)
}

type afterAuditKey struct{}

// OnceAudited runs fn after the call's audit record is written, with the
// call's final result (fn may add reasons). It reports false outside a
// tool's run, where nothing runs later: the caller acts at once.
func OnceAudited(ctx context.Context, fn func(context.Context, *Result)) bool {
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
func (t *typedTool[D, In, Out, PO]) CallJSON(ctx context.Context, d D, args json.RawMessage, p Progress) (any, *Result) {
	var out Out
	in, m, err := t.decodeInput(args)
	if err != nil {
		res := PO(&out).Contract()
		res.Status, res.Reasons = StatusRefused, []string{"invalid input: " + err.Error(), "nothing was done"}
		res.NextAction = "Fix the arguments to match " + t.spec.Name + "'s input schema and call again."
		return &out, res
	}
	out, res := t.run(ctx, d, in, m, p)
	return &out, res
}

// decodeInput validates arguments against the input schema (defaults
// applied) and decodes them; unknown fields are refused.
func (t *typedTool[D, In, Out, PO]) decodeInput(args json.RawMessage) (In, map[string]any, error) {
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

func (t *typedTool[D, In, Out, PO]) addTo(s *mcp.Server, d D) {
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
					ProgressToken: tok, Progress: done, Total: total, Message: msg}); err != nil && t.hooks.Log != nil {
					if l := t.hooks.Log(d); l != nil {
						l.Debug("progress notification not sent", "tool", t.spec.Name, "err", err)
					}
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

// Registry is the ordered set of tools.
type Registry[D any] struct{ tools []Tool[D] }

// Add appends tools; a duplicate name panics.
func (r *Registry[D]) Add(ts ...Tool[D]) {
	for _, t := range ts {
		if r.Get(t.Spec().Name) != nil {
			panic("duplicate tool " + t.Spec().Name)
		}
		r.tools = append(r.tools, t)
	}
}

// Get returns the named tool or nil.
func (r *Registry[D]) Get(name string) Tool[D] {
	for _, t := range r.tools {
		if t.Spec().Name == name {
			return t
		}
	}
	return nil
}

// All returns the tools sorted by name.
func (r *Registry[D]) All() []Tool[D] {
	ts := slices.Clone(r.tools)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Spec().Name < ts[j].Spec().Name })
	return ts
}

// Register adds to an MCP server the tools offered for d (Hooks.Offers).
func (r *Registry[D]) Register(s *mcp.Server, d D) {
	for _, t := range r.All() {
		if t.offeredTo(d) {
			t.addTo(s, d)
		}
	}
}
