package policy

import "fmt"

// Mode limits what the server may do, whatever approvals it is given.
type Mode string

// Modes. The zero Mode is not valid; use ParseMode or a constant.
const (
	ModeNormal             Mode = "normal"              // every tool; destructive ones need a signed approval
	ModeReadOnly           Mode = "read-only"           // only tools that change nothing
	ModeDisableDestructive Mode = "disable-destructive" // no destructive tool, even with an approval
)

// ToolClass sorts tools by what they may change.
type ToolClass string

// Tool classes.
const (
	ClassReadOnly    ToolClass = "read-only"   // changes nothing anywhere
	ClassWrite       ToolClass = "write"       // changes something, not destructively
	ClassDestructive ToolClass = "destructive" // needs a person's signed approval
)

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeNormal, ModeReadOnly, ModeDisableDestructive:
		return m, nil
	}
	return "", fmt.Errorf("mode %q is not normal, read-only or disable-destructive", s)
}

// Allows reports whether a tool of class c may run in mode m. An unknown
// mode or class allows nothing.
func (m Mode) Allows(c ToolClass) bool {
	switch c {
	case ClassReadOnly:
		return m == ModeNormal || m == ModeReadOnly || m == ModeDisableDestructive
	case ClassWrite:
		return m == ModeNormal || m == ModeDisableDestructive
	case ClassDestructive:
		return m == ModeNormal
	}
	return false
}

// toolClasses is the class of every tool of the MCP surface.
var toolClasses = map[string]ToolClass{
	"read_intent": ClassReadOnly, "run_verify": ClassReadOnly, "plan_round": ClassReadOnly,
	"inspect_node": ClassReadOnly, "simulate_upgrade": ClassReadOnly, "verify_node": ClassReadOnly,
	"check_gate": ClassReadOnly, "fleet_check": ClassReadOnly, "round_status": ClassReadOnly,

	"record_lesson": ClassWrite, "snapshot_node": ClassWrite, "download_updates": ClassWrite,
	"gpu_acceptance": ClassWrite, "uncordon_node": ClassWrite,

	"drain_node": ClassDestructive, "install_updates": ClassDestructive, "trial_boot": ClassDestructive,
	"promote_kernel": ClassDestructive, "autoremove": ClassDestructive, "fallback_drill": ClassDestructive,
	"rollback_node": ClassDestructive,
}

// ClassOf returns the class of a known tool. Unknown tools are reported as
// not found; callers should treat them as destructive.
func ClassOf(tool string) (ToolClass, bool) {
	c, ok := toolClasses[tool]
	return c, ok
}

// RequiresApproval reports whether calling tool needs a person's signed
// approval. Unknown tools do.
func RequiresApproval(tool string) bool {
	c, ok := ClassOf(tool)
	return !ok || c == ClassDestructive
}
