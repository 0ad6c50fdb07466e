package mcptool

import (
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcp-patch/mcp-patch/answer"
)

// NextCalls is how the framework turns a result's next step into a call
// when the tool named none: what it knows of the server's tools.
type NextCalls struct {
	// StatusTool is the tool that says what comes next: an ok result with
	// DefaultAction as its next step, or one whose next action names
	// StatusTool, leads to it; "" leads nowhere.
	StatusTool string
	// DefaultAction is an ok result's next action when the tool names none;
	// "" leaves it empty.
	DefaultAction string
	// Carried are the arguments a call names that the next call to another
	// tool keeps where that tool takes them (not StatusTool: its arguments
	// only narrow what it shows).
	Carried []string
	// Fresh are the arguments a repeated call leaves out: the caller adds
	// them anew (a signature is good for one call).
	Fresh []string
	// Input returns the input schema of a tool a next action may name;
	// nil for a name that is no tool. A nil Input names no tool.
	Input func(tool string) *jsonschema.Schema
}

// callAgain matches a next action that is the same call again.
var callAgain = regexp.MustCompile(`^Call ([a-z_]+|the same tool) again\b`)

// runFirst matches a next action that names another tool to run first.
var runFirst = regexp.MustCompile(`^(?:Run|Call) ([a-z_]+)\b`)

// Infer turns a result's next step into a call where it is one and the
// tool did not name it: a step in progress or an approval is the same call
// again (without the Fresh arguments); an ok result without a next step of
// its own, and a next action naming StatusTool, lead to StatusTool; a next
// action that starts by naming a tool leads to that tool, with the Carried
// arguments that tool takes. args are the call's arguments as sent.
func (n NextCalls) Infer(tool string, status Status, next string, args map[string]any) *answer.Call {
	again := func() *answer.Call {
		c := &answer.Call{Tool: tool, Arguments: map[string]any{}}
		for k, v := range args {
			if !slices.Contains(n.Fresh, k) {
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
	if m := runFirst.FindStringSubmatch(next); m != nil && m[1] != tool && n.input(m[1]) != nil {
		c := answer.CallTo(m[1])
		if m[1] != n.StatusTool {
			for _, k := range n.Carried {
				if v, ok := args[k].(string); ok && n.takes(m[1], k) {
					c.Arguments[k] = v
				}
			}
		}
		return c
	}
	if n.StatusTool != "" && status == StatusOK && tool != n.StatusTool &&
		(next == n.DefaultAction || strings.Contains(next, n.StatusTool)) {
		return answer.CallTo(n.StatusTool)
	}
	return nil
}

func (n NextCalls) input(tool string) *jsonschema.Schema {
	if n.Input == nil {
		return nil
	}
	return n.Input(tool)
}

// takes says whether tool takes the argument arg.
func (n NextCalls) takes(tool, arg string) bool {
	s := n.input(tool)
	if s == nil {
		return false
	}
	_, ok := s.Properties[arg]
	return ok
}
