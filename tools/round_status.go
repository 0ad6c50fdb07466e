package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// RoundStatusIn optionally names a round.
type RoundStatusIn struct {
	Round string `json:"round,omitempty" jsonschema:"default: the open round"`
}

// RoundStatusOut is where the round stands.
type RoundStatusOut struct {
	Result
	Round *round.Status   `json:"round,omitempty"`
	ETA   *round.Estimate `json:"eta,omitempty"`
	Table string          `json:"table" jsonschema:"the per-node step table as text"`
	// Maintenance is set when the intent declares maintenance windows.
	Maintenance *MaintenanceView `json:"maintenance,omitempty" jsonschema:"where the round stands against the intent's maintenance windows"`
	// Plan is the reviewed plan: its digest, signature and signature count.
	Plan *PlanStatus `json:"plan,omitempty"`
}

// RoundStatus is the round_status tool.
func RoundStatus() Tool {
	return New[RoundStatusIn, RoundStatusOut](Spec{
		Name:  "round_status",
		Title: "Round status",
		Description: "Where the round stands, from its journal: phase, open window, each node's steps, a stop and why, steps a " +
			"crash left in flight, the soak's end, ETA; the next step as next_call.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in RoundStatusIn, p Progress) (RoundStatusOut, error) {
		if d.Book == nil {
			return RoundStatusOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		var st *round.State
		var sess *session
		if in.Round != "" {
			if !round.ValidRoundID(in.Round) {
				return RoundStatusOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", in.Round))
			}
			s, _, err := round.ReadState(d.Book.dir(in.Round))
			if err != nil {
				return RoundStatusOut{}, Refuse("Name a round that exists under rounds/ in the intent repository.", "round "+in.Round+": "+err.Error())
			}
			st = s
		} else {
			s, err := d.readSession()
			if err != nil {
				return RoundStatusOut{}, err
			}
			st, sess = s.j.State(), s
		}
		status := st.Status(d.now())
		_, mv, restricted, merr := sess.maintenance(d.now())
		if merr != nil {
			return RoundStatusOut{}, Refuse("Fix the maintenance section of os-layer/settings.yaml.", merr.Error())
		}
		if restricted {
			applyMaintenance(&status, mv)
		}
		var tb strings.Builder
		_ = round.RenderStatusText(&tb, status)
		out := RoundStatusOut{Round: &status, Table: tb.String(), Result: Result{NextAction: status.NextAction, NextCall: toCall(window.NextCall(st, status))}}
		if restricted {
			out.Maintenance = &mv
		}
		if nc, why := d.planNextCall(ctx, st, out.NextCall); why != "" {
			out.NextCall, out.NextAction = nc, why
		}
		if ps, err := d.planStatus(ctx, st.RoundID); err == nil && ps != nil {
			out.Plan = ps
			out.Reasons = append(out.Reasons, fmt.Sprintf("the plan (revision %d) needs %d signatures (%d with one per step); signed: %v", ps.Revision, ps.Signatures, ps.PerStepSignatures, ps.Signed))
			out.Reasons = append(out.Reasons, ps.Risks...)
		}
		if st.Plan != nil {
			if est, err := round.ETA(st, st.WindowDurations(), d.now(), time.Time{}, etaConfig(sess.settingsOrZero())); err == nil {
				out.ETA = &est
			}
		}
		out.Reasons = append(out.Reasons, window.StatusReasons(status)...)
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
