package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/inbox"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// RoundStatusIn optionally names a round.
type RoundStatusIn struct {
	Round string `json:"round,omitempty" jsonschema:"default: the open round"`
	// Node, Window, Cursor and Limit pick the node rows; the summary is
	// whole whatever they pick.
	Node   string `json:"node,omitempty" jsonschema:"only this node's row"`
	Window string `json:"window,omitempty" jsonschema:"only nodes whose window is in this state"`
	Cursor int    `json:"cursor,omitempty" jsonschema:"position to page from (next_cursor)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"rows per page, at most 25"`
}

// RoundStatusOut is where the round stands.
type RoundStatusOut struct {
	Result
	Round *round.Status   `json:"round,omitempty"`
	ETA   *round.Estimate `json:"eta,omitempty"`
	Table string          `json:"table" jsonschema:"the per-node step table as text"`
	// Maintenance is set when the intent declares maintenance windows.
	Maintenance *window.MaintenanceView `json:"maintenance,omitempty" jsonschema:"where the round stands against the intent's maintenance windows"`
	// Plan is the reviewed plan: its digest, signature and signature count.
	Plan *service.PlanStatus `json:"plan,omitempty"`
	// Environments is each environment's round as its server last left
	// it in the approvals inbox (a server with an environment only).
	Environments []inbox.Status `json:"environments,omitempty" jsonschema:"each environment's round, phase and compliance deadline, as its server left it in the approvals inbox"`
}

// RoundStatus is the round_status tool.
func RoundStatus() Tool {
	return New[RoundStatusIn, RoundStatusOut](Spec{
		Name:  "round_status",
		Title: "Round status",
		Description: "Where the round stands, from its journal: phase, windows by state, open window, a stop and why, steps a " +
			"crash left in flight, the soak's end, ETA; then each node's steps (a page past 12 nodes: node, window, cursor); the next step as next_call.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in RoundStatusIn, p Progress) (RoundStatusOut, error) {
		if d.Book == nil {
			return RoundStatusOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		if in.Cursor < 0 || in.Limit < 0 || in.Limit > round.MaxPageNodes {
			return RoundStatusOut{}, Refuse(fmt.Sprintf("Use a cursor from next_cursor and a limit from 1 to %d.", round.MaxPageNodes),
				fmt.Sprintf("cursor %d, limit %d are out of range", in.Cursor, in.Limit))
		}
		st, sess, err := d.RoundState(in.Round)
		if err != nil {
			return RoundStatusOut{}, err
		}
		status := st.Status(d.Clock())
		_, mv, restricted, merr := service.RoundMaintenance(sess, d.Clock())
		if merr != nil {
			return RoundStatusOut{}, Refuse("Fix the maintenance section of os-layer/settings.yaml.", merr.Error())
		}
		if restricted {
			window.ApplyMaintenance(&status, mv)
		}
		if in.Node != "" && st.Node(in.Node) == nil {
			return RoundStatusOut{}, Refuse("Name a node of the round (round_status without node lists them).", in.Node+" is not in round "+st.RoundID)
		}
		nextCall := toCall(window.NextCall(st, status))
		if nextCall != nil && nextCall.Tool == "plan_round" && nextCall.Arguments["round"] == nil && sess != nil && sess.ID != "" {
			// A round whose plan_round was cut off before its first record
			// has no id in its state yet; the journal it lives in names it.
			nextCall.Arguments["round"] = sess.ID
		}
		status = status.Page(round.NodeQuery{Node: in.Node, Window: round.WindowState(in.Window), Cursor: in.Cursor, Limit: in.Limit})
		var tb strings.Builder
		_ = round.RenderStatusText(&tb, status)
		out := RoundStatusOut{Round: &status, Table: tb.String(), Result: Result{NextAction: status.NextAction, NextCall: nextCall}}
		if restricted {
			out.Maintenance = &mv
		}
		if nc, why := d.PlanNextCall(ctx, st, out.NextCall); why != "" {
			out.NextCall, out.NextAction = nc, why
		}
		if ps, err := d.PlanStatus(ctx, st.RoundID, st); err == nil && ps != nil {
			out.Plan = ps
			out.Reasons = append(out.Reasons, fmt.Sprintf("the plan (revision %d) needs %d signatures (%d with one per step); signed: %v", ps.Revision, ps.Signatures, ps.PerStepSignatures, ps.Signed))
			out.Reasons = append(out.Reasons, ps.Risks...)
		}
		if st.Plan != nil {
			if est, err := round.ETA(st, st.WindowDurations(), d.Clock(), time.Time{}, window.ETAConfig(service.SettingsOrZero(sess))); err == nil {
				if n := len(est.Remaining); n > round.PageNodes && status.NodesShown < status.WindowsTotal {
					est.Remaining = est.Remaining[:round.PageNodes]
					est.Notes = append(est.Notes, fmt.Sprintf("remaining lists the next %d of %d nodes to patch", round.PageNodes, n))
				}
				out.ETA = &est
			}
		}
		out.Reasons = append(out.Reasons, window.StatusReasons(status)...)
		if envs, waiting, err := d.EnvironmentsView(d.Clock()); err != nil {
			out.Reasons = append(out.Reasons, "the other environments' rounds cannot be read from the inbox: "+err.Error())
		} else if len(envs) > 0 {
			out.Environments = envs
			out.Reasons = append(out.Reasons, fmt.Sprintf("%d request(s) of %d environment(s) wait for a signature in the inbox (mcp-patch approvals)", waiting, len(envs)))
		}
		return out, nil
	})
}

// toCall is the window package's call as the contract's.
func toCall(c *window.Call) *Call {
	if c == nil {
		return nil
	}
	return CallTo(c.Tool, "node", c.Node, "round", c.Round)
}
