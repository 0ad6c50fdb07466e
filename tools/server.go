package tools

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Instructions tell the agent how a round works and how approvals reach a
// person. They are sent at initialize.
const Instructions = `mcp-patch runs the OS and kernel patch round of a Kubernetes GPU cluster, one node at a time.

Work from the intent documents (read_intent; also MCP resources intent://<component>/<file>): they say what each platform component must keep true. Then:
1. plan_round: the order (control-plane nodes first, the one holding the Postgres primary and the API VIP last among them; a canary GPU server; then the other GPU servers) and a baseline of stack health.
2. For each node, one window at a time: inspect_node, simulate_upgrade (any package removal or a missing hold stops the round), download_updates, snapshot_node, drain_node, install_updates, trial_boot (the new kernel boots once; the old one stays default), verify_node, uncordon_node, gpu_acceptance (GPU servers), promote_kernel, check_gate. check_gate must be green before the next node's drain.
Each check comes twice: read-only, changing and stopping nothing (inspect_node, simulate_upgrade, verify_node, check_gate, fleet_check), and recorded in the round, where green counts for its standing rules and red stops the round (record_inspection, record_simulation, record_verification, close_window, record_fleet_check).
3. Close: fleet_check (every node on the target kernel), the soak, autoremove, then record_lesson for what you learned and round_status for the report.

Every result starts with the same fields: status (ok, in_progress, approval_required, refused, failed; only refused and failed are error results), reasons (facts, blockers and red checks included), next_action (plain words) and, where the next step is a tool call, next_call {tool, arguments}: make exactly that call. approval (when approval_required) holds request and command. The tool's own payload follows. Destructive tools (drain_node, install_updates, trial_boot, promote_kernel, autoremove, fallback_drill, rollback_node) first answer approval_required with a request text: give that text to a person unchanged together with the command shown; they sign it with their SSH key (mcp-patch approve, or ssh-keygen -Y sign -n mcp-patch) and hand back the approval, which you add as the "approval" argument to next_call (the same call again). You cannot approve your own request. An approval is bound to the exact plan: if the host changed, the call is refused and a new approval is needed. A failed check stops the round until a person records a signed resume or abort (record_decision). Steps that wait (drain_node, install_updates, fallback_drill, trial_boot, rollback_node; close_window at a red gate) answer in_progress: call them again with the same arguments to see where they stand. When the live system contradicts an intent document, do not work around it: flag it with record_lesson kind=open_question against the property.`

// NewServer builds the MCP server with every tool the mode offers, the
// prompts and, where d has them, the intent resources. Its capabilities
// are declared, not inferred: the lists are fixed when the server starts
// (the mode decides the tools), so none of them announces listChanged,
// and no client waits on a subscription for a change that never comes.
func NewServer(reg *Registry, d *Deps, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-patch", Title: "mcp-patch", Version: version},
		&mcp.ServerOptions{Instructions: Instructions, Logger: d.Log, Capabilities: capabilities(d.Resources != nil)})
	reg.Register(s, d)
	addPrompts(s)
	if d.Resources != nil {
		d.Resources(s)
	}
	return s
}

// capabilities is what the server declares at initialize and in
// server/discover: logging, tools and prompts, and resources when it
// serves the intent documents; no list changes, no subscriptions, no
// completions.
func capabilities(resources bool) *mcp.ServerCapabilities {
	c := &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, Tools: &mcp.ToolCapabilities{}, Prompts: &mcp.PromptCapabilities{}}
	if resources {
		c.Resources = &mcp.ResourceCapabilities{}
	}
	return c
}
