package tools

import (
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/host/steps"
)

// defaultNextAction is an ok result's next action when the tool names none.
const defaultNextAction = "Call round_status: it names the round's next step as next_call."

// ResultSchemaID names the one output schema every tool shares. A client
// that caches compiled schemas by $id (the TypeScript SDK's Ajv validator
// does) compiles it once for the whole tools/list instead of once a tool.
// Change the id whenever the schema changes.
const ResultSchemaID = "urn:mcp-patch:result:2"

// roundPattern is round.ValidRoundID as a JSON Schema pattern.
const roundPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`

// constrainInput states in the input schema the rules the handlers check:
// patterns, enums and bounds, so a client (and the model) sees them
// (mcptool.Hooks.Constrain).
func constrainInput(tool string, s *jsonschema.Schema) {
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
	"record_decision.decision": {"resume", "abort", "hypervisor_snapshot_taken", "residual_risk_accepted", "outcome_certified", "kernel_promoted"},
	"record_decision.step":     {"verify", "gpu_acceptance", "gate", "fleet_check"},
	"record_lesson.kind":       {"lesson", "open_question"},
	"round_status.window":      {"pending", "open", "closed"},
}

// builtinInput is the input schema of the built-in tool name, nil when
// there is none: the tools a next call may name. Its map is filled once,
// on first use (a variable initialised with Builtin would make the hooks
// every tool is built with part of their own initialisation).
func builtinInput(name string) *jsonschema.Schema {
	builtinOnce.Do(func() {
		builtinInputs = map[string]*jsonschema.Schema{}
		for _, t := range Builtin().All() {
			builtinInputs[t.Spec().Name] = t.InputSchema()
		}
	})
	return builtinInputs[name]
}

var (
	builtinOnce   sync.Once
	builtinInputs map[string]*jsonschema.Schema
)

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

func ptr[T any](v T) *T { return &v }
