package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/host/steps"
)

// The contract every result keeps: these fields come first in the JSON the
// agent reads (content text and structuredContent alike), the tool's
// payload after them, so a client that shows only the start of a long
// result still shows what happened and what to do next.
var contractKeys = []string{"status", "reasons", "next_action", "next_call", "approval"}

// defaultNextAction is an ok result's next action when the tool names none.
const defaultNextAction = "Call round_status: it names the round's next step as next_call."

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

// ResultSchemaID names the one output schema every tool shares. A client
// that caches compiled schemas by $id (the TypeScript SDK's Ajv validator
// does) compiles it once for the whole tools/list instead of once a tool.
// Change the id whenever the schema changes.
const ResultSchemaID = "urn:mcp-patch:result:2"

// leanOutputSchema is every tool's output schema: the contract, typed, and
// nothing of the payload (each tool's description says what it returns, the
// server's instructions say what the contract fields mean). A schema of every
// nested payload field made tools/list several times larger and slow for
// clients to compile, for no gain to the agent. It is the same document for
// every tool, under ResultSchemaID.
func leanOutputSchema() *jsonschema.Schema {
	// Each contract field with its JSON type, the statuses and next_call's
	// tool; next_call's arguments, what lies inside approval, that reasons
	// are strings and what each field means the instructions say. Every
	// byte here is paid once a tool in tools/list.
	str := &jsonschema.Schema{Type: "string"}
	return &jsonschema.Schema{
		ID:       ResultSchemaID,
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

// roundPattern is round.ValidRoundID as a JSON Schema pattern.
const roundPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`

// constrainInput states in the input schema the rules the handlers check:
// patterns, enums and bounds, so a client (and the model) sees them.
//
// additionalProperties is left out: an unknown argument is still refused,
// by the decoder, with a result naming it; saying so in every schema cost
// more bytes of tools/list than it taught.
func constrainInput(tool string, s *jsonschema.Schema) {
	s.AdditionalProperties = nil
	for name, p := range s.Properties {
		switch name {
		case "node":
			p.Pattern = NodePattern // ValidNode bounds the length
		case "nodes":
			if p.Items != nil {
				p.Items.Pattern = NodePattern
			}
		case "round":
			p.Pattern = roundPattern
			p.MaxLength = ptr(64)
		case "component":
			p.Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
			p.MaxLength = ptr(128)
		case "timeout_seconds":
			p.Minimum, p.Maximum = ptr(1.0), ptr(600.0)
		case "text":
			p.MaxLength = ptr(16 << 10)
		case "reason":
			p.MaxLength = ptr(1024)
		case "approval", "attestation":
			p.MaxLength = ptr(16 << 10)
		}
		if e, ok := inputEnums[tool+"."+name]; ok {
			p.Enum = e
		}
	}
}

// inputEnums are the closed sets of values some inputs take.
var inputEnums = map[string][]any{
	"record_decision.decision": {"resume", "abort", "hypervisor_snapshot_taken", "residual_risk_accepted"},
	"record_decision.step":     {"verify", "gpu_acceptance", "gate", "fleet_check"},
	"record_lesson.kind":       {"lesson", "open_question"},
	"round_status.window":      {"pending", "open", "closed"},
}

// callAgain matches a next action that is the same call again.
var callAgain = regexp.MustCompile(`^Call ([a-z_]+|the same tool) again\b`)

// runFirst matches a next action that names another tool to run first.
var runFirst = regexp.MustCompile(`^(?:Run|Call) ([a-z_]+)\b`)

// inferNextCall turns a result's next step into a call where it is one and
// the tool did not name it: a step in progress or an approval is the same
// call again (the caller adds approval); an ok result without a next step
// of its own, and a next action naming round_status, lead to round_status;
// a next action that starts by naming a tool leads to that tool, with the
// node carried over when it takes one.
func inferNextCall(tool string, status Status, next string, args map[string]any) *Call {
	again := func() *Call {
		c := &Call{Tool: tool, Arguments: map[string]any{}}
		for k, v := range args {
			if k != "approval" && k != "attestation" {
				c.Arguments[k] = v
			}
		}
		return c
	}
	switch status {
	case StatusInProgress, StatusApprovalRequired:
		return again()
	}
	if m := callAgain.FindStringSubmatch(next); m != nil && (m[1] == tool || m[1] == "the same tool") {
		return again()
	}
	if m := runFirst.FindStringSubmatch(next); m != nil && m[1] != tool && knownTool(m[1]) {
		c := CallTo(m[1])
		// round_status's node only narrows its rows: the call that
		// follows a step asks for the whole summary.
		if n, ok := args["node"].(string); ok && takesArg(m[1], "node") && m[1] != "round_status" {
			c.Arguments["node"] = n
		}
		return c
	}
	if status == StatusOK && (next == defaultNextAction || strings.Contains(next, "round_status")) && tool != "round_status" {
		return CallTo("round_status")
	}
	return nil
}

var builtinInputs = sync.OnceValue(func() map[string]*jsonschema.Schema {
	m := map[string]*jsonschema.Schema{}
	for _, t := range Builtin().All() {
		m[t.Spec().Name] = t.InputSchema()
	}
	return m
})

func knownTool(name string) bool { _, ok := builtinInputs()[name]; return ok }

func takesArg(tool, arg string) bool {
	s := builtinInputs()[tool]
	if s == nil {
		return false
	}
	_, ok := s.Properties[arg]
	return ok
}

// callNode is the node a call names, or "".
func callNode(c *Call) string {
	n, _ := c.Arguments["node"].(string)
	return n
}

// BlockerPrefix starts a reason that is a blocker (answer.BlockerPrefix).
const BlockerPrefix = answer.BlockerPrefix

// Blocker words a cause as a blocker reason.
func Blocker(cause string) string { return answer.Blocker(cause) }

// IsBlocker says whether a reason is a blocker.
func IsBlocker(reason string) bool { return answer.IsBlocker(reason) }

// blockerReasons words what a host survey found as blocker reasons.
func blockerReasons(hz []steps.Hazard) []string {
	out := make([]string, 0, len(hz))
	for _, h := range hz {
		out = append(out, Blocker(h.Reason))
	}
	return out
}

// clipText cuts s to n runes, marking the cut.
func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
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
		if IsBlocker(r) {
			return StatusFailed
		}
	}
	return status
}
