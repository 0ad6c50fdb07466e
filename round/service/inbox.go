package service

import (
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/inbox"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Inbox is the approvals inbox this server leaves its requests in ("":
// none, a server without a config).
func (d *Service) Inbox() inbox.Dir {
	if d.Config == nil {
		return ""
	}
	return inbox.Dir(d.Config.InboxDir())
}

func (d *Service) environmentName() string {
	if d.Config == nil {
		return ""
	}
	return d.Config.Environment
}

// askApproval answers the NeedApproval for tool's binding: the request a
// person signs, left in the inbox too (with who asked and since when),
// and told to people once.
func (d *Service) askApproval(tool string, bind Binding, notes []string) error {
	text, exp, err := d.Approvals.Request(tool, bind)
	if err != nil {
		return fmt.Errorf("build approval request: %w", err)
	}
	now := d.Clock()
	if in := d.Inbox(); in != "" {
		e := inbox.Entry{Environment: d.environmentName(), Round: bind.Round, Node: bind.Node, Step: tool, Server: d.Identity,
			Since: now, Expires: exp, Summary: bind.Summary, Request: text}
		if err := in.Put(e, now); err != nil {
			// The request still reaches the person through the agent.
			d.Log.Warn("approval request not left in the inbox", "inbox", in, "tool", tool, "node", bind.Node, "err", err)
			notes = append(notes, "the request could not be left in the inbox "+string(in)+": "+err.Error())
		} else {
			notes = append(notes, "also waiting in the inbox as "+inbox.ID(bind.Round, bind.Node, tool)+": a person can sign it there (mcp-patch approvals; mcp-patch approve "+inbox.ID(bind.Round, bind.Node, tool)+") and this call, made again without an approval, uses it")
		}
	}
	d.Ops.ApprovalNeeded(tool, bind.Round, bind.Node, bind.Summary, exp, now)
	return &NeedApproval{Request: text, Summary: bind.Summary, Expires: exp, Notes: notes}
}

// inboxApproval is the approval a person signed from the inbox for tool
// on node in roundID, if one waits there. It counts only once it
// verifies, like any approval.
func (d *Service) inboxApproval(roundID, node, tool string) (string, bool) {
	in := d.Inbox()
	if in == "" {
		return "", false
	}
	text, ok, err := in.Approval(inbox.ID(roundID, node, tool))
	if err != nil {
		d.Log.Warn("the inbox's approval cannot be read; asking again", "inbox", in, "tool", tool, "node", node, "err", err)
		return "", false
	}
	return text, ok
}

// inboxRefused drops an approval from the inbox that did not verify, so
// the next call asks again, and words why.
func (d *Service) inboxRefused(roundID, node, tool string, err error) string {
	id := inbox.ID(roundID, node, tool)
	if derr := d.Inbox().DropApproval(id); derr != nil {
		d.Log.Warn("refused inbox approval not dropped", "id", id, "err", derr)
		return "the approval signed in the inbox for " + id + " was refused (" + err.Error() + ") and could not be removed: " + derr.Error()
	}
	return "the approval signed in the inbox for " + id + " was refused and removed: " + err.Error()
}

// inboxUsed drops the request of tool on node once an approval of it was
// used (handed back through the agent or signed in the inbox).
func (d *Service) inboxUsed(roundID, node, tool string) {
	in := d.Inbox()
	if in == "" {
		return
	}
	if err := in.Resolve(inbox.ID(roundID, node, tool)); err != nil {
		// Left behind, the used approval is refused as replayed at the
		// next call and the request asked again: nothing runs twice.
		d.Log.Warn("used approval request not removed from the inbox", "inbox", in, "tool", tool, "node", node, "err", err)
	}
}

// complianceDays is the round's compliance deadline in days: this
// server's environment's clock, else the intent's internal one (0: none).
func complianceDays(settings intent.Settings, env intent.Environment, inEnv bool) int {
	if inEnv {
		return env.ComplianceDeadlineDays
	}
	if k := settings.Kernel; k != nil {
		return k.ComplianceDeadlineDays.Internal
	}
	return 0
}

// InboxStatus is what this server leaves in the inbox of its round (pure).
func InboxStatus(st *round.State, envName, server string, days int, now time.Time) inbox.Status {
	s := inbox.Status{Environment: envName, Server: server, Updated: now.UTC(), Phase: string(round.PhaseNotPlanned)}
	if st == nil {
		return s
	}
	status := st.Status(now)
	s.Round, s.Phase = st.RoundID, string(status.Phase)
	switch {
	case st.Stop != nil:
		s.Node = st.Stop.Node
	case status.CurrentWindow != "":
		s.Node = status.CurrentWindow
	}
	if days > 0 && !st.Started.IsZero() && !st.Closed && !st.Aborted {
		s.Deadline = st.Started.Add(time.Duration(days) * 24 * time.Hour).UTC()
	}
	return s
}

// leaveStatus leaves this server's round in the inbox, for the view
// across environments (best effort: it is never read to decide).
func (d *Service) leaveStatus(s *window.Round) {
	in := d.Inbox()
	if in == "" || s == nil || s.Journal == nil {
		return
	}
	env, _, inEnv, err := d.Environment()
	if err != nil {
		inEnv = false
	}
	st := InboxStatus(s.Journal.State(), d.environmentName(), d.Identity, complianceDays(s.Settings, env, inEnv), d.Clock())
	if err := in.PutStatus(st); err != nil {
		d.Log.Warn("round status not left in the inbox", "inbox", in, "round", s.ID, "err", err)
	}
}

// EnvironmentsView is each environment's round as its server last left it
// in the inbox, and how many requests wait there for a signature, for a
// server with an environment (none: nil). It is shown, never decided on.
func (d *Service) EnvironmentsView(now time.Time) ([]inbox.Status, int, error) {
	in := d.Inbox()
	if in == "" || d.environmentName() == "" {
		return nil, 0, nil
	}
	ss, err := in.Statuses()
	if err != nil {
		return nil, 0, err
	}
	es, err := in.List(now)
	if err != nil {
		return nil, 0, err
	}
	return ss, len(es), nil
}
