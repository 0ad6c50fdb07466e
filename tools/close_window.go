package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// CloseWindowIn names the node whose window the gate closes.
type CloseWindowIn struct {
	Node string `json:"node"`
}

// CloseWindow is the close_window tool: the gate of a node's window, recorded.
func CloseWindow() Tool {
	return New[CloseWindowIn, GateOut](Spec{
		Name:  "close_window",
		Title: "Close a node's window",
		Description: "check_gate after promote_kernel, recorded: green closes the window, frees its Lease; red answers in_progress" +
			" until the settle time, then stops the round.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in CloseWindowIn, p Progress) (GateOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return GateOut{}, err
		}
		s, err := d.OpenRound()
		if err != nil {
			return GateOut{}, err
		}
		if err := s.GatePhase(in.Node); err != nil {
			return GateOut{}, err
		}
		if err := s.Admit(round.StepGate, in.Node); err != nil {
			return GateOut{}, err
		}
		w, err := d.Window(ctx, s, 0)
		if err != nil {
			return GateOut{}, err
		}
		if err := w.HoldLease(ctx, round.StepGate, in.Node); err != nil {
			return GateOut{}, err
		}
		g, err := service.EvaluateGate(ctx, d, s, in.Node)
		if err != nil {
			return GateOut{}, err
		}
		if err := s.KeepAccepted(g.Baseline, g.Accepted); err != nil {
			return GateOut{}, err
		}
		out := GateOut{Gate: &g.Report}
		if g.Report.OK {
			if err := s.Check(round.StepGate, in.Node, true, "", "gate green"); err != nil {
				return out, err
			}
			out.Reasons = append([]string{"gate green"}, g.Reasons...)
			out.NextAction = "The next node may start (round_status names it)."
			if st := s.Journal.Shared().Node(in.Node); st != nil && st.Window == round.WindowClosed {
				rel, err := d.ReleaseWindow(ctx, s, in.Node)
				out.Reasons = append(out.Reasons, rel...)
				if err != nil {
					return out, err
				}
				if c, err := d.CommitRound(ctx, s, "window of "+in.Node+" closed"); err != nil {
					out.Reasons = append(out.Reasons, "the round record was not committed: "+err.Error())
				} else {
					out.Reasons = append(out.Reasons, fmt.Sprintf("window of %s closed; round record committed (%s)", in.Node, short(c)))
				}
			}
			return out, nil
		}
		// Red: wait within the settle time, then stop the round.
		np, _ := s.NodePlan(in.Node)
		red := window.DecideRedGate(np.GateRedSince, d.Clock(), d.Config.Kube.GateSettle.D())
		if red.First {
			np.Node, np.GateRedSince = in.Node, red.Since
			if err := s.SaveNodePlan(np); err != nil {
				return out, errors.Join(Fail("Call close_window again.", "record when the gate turned red"), err)
			}
		}
		if red.Settling {
			out.Result = Result{Status: StatusInProgress, Reasons: g.Reasons, NextAction: red.Next()}
			return out, nil
		}
		if err := s.Check(round.StepGate, in.Node, false, "", strings.Join(g.Reasons, "; ")); err != nil {
			return out, err
		}
		out.Result = Result{Status: StatusFailed, Reasons: g.Reasons, NextAction: red.Next()}
		return out, nil
	})
}
