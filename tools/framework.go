// Package tools is mcp-patch's MCP surface: one file per tool with typed
// input and output, annotations and a handler, registered both on the MCP
// server and as a CLI subcommand (`mcp-patch tool NAME`). Handlers decide
// and act through the small interfaces declared in deps.go; this package
// must not import client-go, x/crypto/ssh or go-git directly. The typed-tool
// framework is package mcptool, run on *Deps through the hooks in
// mcphooks.go; the names below let the tools speak of it as their own.
package tools

import (
	"context"
	"fmt"
	"regexp"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/mcptool"
)

// The framework's vocabulary, on *Deps (package mcptool).
type (
	Status         = mcptool.Status
	Result         = mcptool.Result
	ApprovalNeeded = mcptool.ApprovalNeeded
	Kind           = mcptool.Kind
	Spec           = mcptool.Spec
	Progress       = mcptool.Progress
	Tool           = mcptool.Tool[*Deps]
	Registry       = mcptool.Registry[*Deps]
	output         = mcptool.Output
)

// Handler is a tool's typed handler (mcptool.Handler on *Deps).
type Handler[In any, Out any] = mcptool.Handler[*Deps, In, Out]

// The statuses (mcptool).
const (
	StatusOK               = mcptool.StatusOK
	StatusRefused          = mcptool.StatusRefused
	StatusFailed           = mcptool.StatusFailed
	StatusApprovalRequired = mcptool.StatusApprovalRequired
	StatusInProgress       = mcptool.StatusInProgress
)

// The kinds (mcptool).
const (
	ReadOnly    = mcptool.ReadOnly
	Write       = mcptool.Write
	Destructive = mcptool.Destructive
)

// New builds a Tool from a spec and a typed handler, run on *Deps with the
// round's hooks (mcptool.New).
func New[In any, Out any, PO interface {
	*Out
	output
}](spec Spec, h Handler[In, Out]) Tool {
	return mcptool.New[*Deps, In, Out, PO](roundHooks(), spec, h)
}

// EncodeResult writes a tool's output as JSON, the contract fields first
// (mcptool.EncodeResult).
func EncodeResult(out any) ([]byte, error) { return mcptool.EncodeResult(out) }

// StatusRule is the rule between a result's status and its reasons
// (mcptool.StatusRule).
func StatusRule(status Status, reasons []string) Status { return mcptool.StatusRule(status, reasons) }

// onceAudited runs fn after the call's audit record is written
// (mcptool.OnceAudited).
func onceAudited(ctx context.Context, fn func(context.Context, *Result)) bool {
	return mcptool.OnceAudited(ctx, fn)
}

// Call is a tool call the agent can make next (answer.Call).
type Call = answer.Call

// CallTo builds a Call (answer.CallTo).
func CallTo(tool string, kv ...any) *Call { return answer.CallTo(tool, kv...) }

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
