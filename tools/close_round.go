package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// CloseRoundOut is the committed report.
type CloseRoundOut struct {
	Result
	Report   string `json:"report" jsonschema:"repository path of the round report (Markdown)"`
	Timeline string `json:"timeline" jsonschema:"repository path of the timeline picture (SVG)"`
	Commit   string `json:"commit"`
}

// CloseRound is the close_round tool.
func CloseRound() Tool {
	return New[struct{}, CloseRoundOut](Spec{
		Name:  "close_round",
		Title: "Close the round",
		Description: "After autoremove (or an abort): round report (Markdown, SVG timeline), changelog entry, runbook edits from " +
			"lessons, committed with journal and audit log.",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (CloseRoundOut, error) {
		s, err := d.OpenRound()
		if err != nil {
			return CloseRoundOut{}, err
		}
		st := s.Journal.State()
		if s.InFlight(round.StepClose, "") {
			// A close the stopped process began: finish it.
			if err := s.Finish(round.StepClose, "", "", "closed (resumed)"); err != nil {
				return CloseRoundOut{}, err
			}
			c, err := d.CommitRound(ctx, s, "closed")
			if err != nil {
				return CloseRoundOut{}, err
			}
			return CloseRoundOut{Report: "rounds/" + s.ID + "/" + round.ReportFile, Timeline: "rounds/" + s.ID + "/" + round.TimelineFile, Commit: c,
				Result: Result{Reasons: []string{"round " + s.ID + " closed"}, NextAction: "Ask people to review and merge the round's working branch."}}, nil
		}
		if !st.Aborted && !st.RoundSteps[round.StepAutoremove].Green() {
			return CloseRoundOut{}, service.RuleRefusal(st.Admit(round.StepClose, "", d.Clock()))
		}
		// kured's lock goes back before the report, so the report says so;
		// one that cannot go back stops the close (journaled).
		kured, err := d.ReleaseKuredLock(ctx, s)
		if err != nil {
			return CloseRoundOut{}, err
		}
		docs, err := d.CloseDocs(ctx, s)
		if err != nil {
			return CloseRoundOut{}, err
		}
		if _, _, err := s.Journal.WriteReport(); err != nil {
			return CloseRoundOut{}, err
		}
		c, err := d.CommitRound(ctx, s, "report and findings")
		if err != nil {
			return CloseRoundOut{}, Fail("Fix the intent repository (uncommitted edits?) and call again.", "commit the report: "+err.Error())
		}
		if _, err := s.Journal.FindingsCommitted(c); err != nil {
			return CloseRoundOut{}, err
		}
		if err := s.Begin(round.StepClose, ""); err != nil {
			return CloseRoundOut{}, err
		}
		if err := s.Finish(round.StepClose, "", "", "closed"); err != nil {
			return CloseRoundOut{}, err
		}
		if _, _, err := s.Journal.WriteReport(); err != nil {
			return CloseRoundOut{}, err
		}
		c2, err := d.CommitRound(ctx, s, "closed")
		if err != nil {
			return CloseRoundOut{}, Fail("Call close_round's commit again by hand: git add rounds/ and commit.", "commit the closed round: "+err.Error())
		}
		return CloseRoundOut{Report: "rounds/" + s.ID + "/" + round.ReportFile, Timeline: "rounds/" + s.ID + "/" + round.TimelineFile, Commit: c2,
			Result: Result{Reasons: append(append([]string{"round " + s.ID + " closed; report and timeline committed (" + short(c2) + ")"}, docs...), kured...),
				NextAction: "Ask people to review and merge the round's working branch of the intent repository."}}, nil
	})
}
