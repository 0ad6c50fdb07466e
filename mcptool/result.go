package mcptool

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"

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
	NextCall *answer.Call `json:"next_call,omitempty" jsonschema:"next_action as a tool call, when it is one"`

	// ApprovalID is the approval that let the call act, for the audit;
	// never sent.
	ApprovalID string `json:"-"`
}

// Contract returns the contract fields of an output that embeds Result.
func (r *Result) Contract() *Result { return r }

// Then makes c the next call of an ok result (one in progress calls the
// same tool again).
func (r Result) Then(c *answer.Call) Result {
	if r.Status == "" || r.Status == StatusOK {
		r.NextCall = c
	}
	return r
}

// Output is what a tool's output type must be: a struct embedding Result
// (its pointer has Contract).
type Output interface{ Contract() *Result }

// ApprovalNeeded tells the agent exactly what a person must sign.
type ApprovalNeeded struct {
	Request    string   `json:"request" jsonschema:"the exact request text to be signed; pass it to a person unchanged"`
	Summary    []string `json:"summary" jsonschema:"the request in plain words"`
	Command    string   `json:"command" jsonschema:"the command a person runs to sign it"`
	AltCommand string   `json:"alt_command" jsonschema:"the same with plain ssh-keygen"`
	ExpiresAt  string   `json:"expires_at" jsonschema:"RFC 3339 time after which the request is void"`
}

// StatusRule is the one rule every result keeps between its status and its
// reasons: a blocker among the reasons means the status is not ok. An ok
// (or unset) status with a blocker becomes failed: the check ran and found
// something that stops the round. Every other status stands. The framework
// applies it to every tool's result once the handler returned.
func StatusRule(status Status, reasons []string) Status {
	if status != "" && status != StatusOK {
		return status
	}
	for _, r := range reasons {
		if answer.IsBlocker(r) {
			return StatusFailed
		}
	}
	return status
}

// The contract every result keeps: these fields come first in the JSON the
// agent reads (content text and structuredContent alike), the tool's
// payload after them, so a client that shows only the start of a long
// result still shows what happened and what to do next.
var contractKeys = []string{"status", "reasons", "next_action", "next_call", "approval"}

// EncodeResult writes a tool's output as JSON with the contract fields
// first, in contractKeys order, and the payload fields after them in their
// declared order.
func EncodeResult(out any) ([]byte, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("tool output is not a JSON object")
	}
	type field struct {
		key string
		raw json.RawMessage
	}
	var fields []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		fields = append(fields, field{tok.(string), raw})
	}
	rank := func(k string) int {
		for i, c := range contractKeys {
			if c == k {
				return i
			}
		}
		return len(contractKeys)
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	write := func(f field) {
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		k, _ := json.Marshal(f.key)
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(f.raw)
	}
	for i := range contractKeys {
		for _, f := range fields {
			if rank(f.key) == i {
				write(f)
			}
		}
	}
	for _, f := range fields {
		if rank(f.key) == len(contractKeys) {
			write(f)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// leanOutputSchema is every tool's output schema: the contract, typed, and
// nothing of the payload (each tool's description says what it returns, the
// server's instructions say what the contract fields mean). A schema of every
// nested payload field made tools/list several times larger and slow for
// clients to compile, for no gain to the agent. It is the same document for
// every tool, under id (Hooks.ResultSchemaID).
func leanOutputSchema(id string) *jsonschema.Schema {
	// Each contract field with its JSON type, the statuses and next_call's
	// tool; next_call's arguments, what lies inside approval, that reasons
	// are strings and what each field means the instructions say. Every
	// byte here is paid once a tool in tools/list.
	str := &jsonschema.Schema{Type: "string"}
	return &jsonschema.Schema{
		ID:       id,
		Type:     "object",
		Required: []string{"status", "reasons", "next_action"},
		Properties: map[string]*jsonschema.Schema{
			"status": {Type: "string",
				Enum: []any{string(StatusOK), string(StatusInProgress), string(StatusApprovalRequired), string(StatusRefused), string(StatusFailed)}},
			"reasons":     {Type: "array"},
			"next_action": str,
			"next_call":   {Type: "object", Required: []string{"tool"}, Properties: map[string]*jsonschema.Schema{"tool": str}},
			"approval":    {Type: "object"},
		},
	}
}
