package tools

import (
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// A crash right after a step's start was journaled under an approval, and
// before anything reached the host: the call that follows has no approval
// and must start nothing; it asks for a fresh one.
func TestCrashAfterJournaledStartNeedsAFreshApproval(t *testing.T) {
	for _, c := range []struct {
		tool  string
		step  round.Step
		setup func(*testing.T, *wrig)
		acts  []string
	}{
		{"trial_boot", round.StepTrialBoot, func(t *testing.T, r *wrig) { r.installDone(t) }, []string{"prepare", "reboot"}},
		{"promote_kernel", round.StepPromote, func(t *testing.T, r *wrig) {
			r.drained(t)
			r.readyToPromote(t)
		}, []string{"promote"}},
	} {
		t.Run(c.tool, func(t *testing.T) {
			r := newWRig(t)
			c.setup(t, r)
			if _, err := r.journal(t).StartStep(c.step, wNode, round.Meta{ApprovalID: "a-crashed", PlanDigest: "sha256:x"}); err != nil {
				t.Fatal(err)
			}
			_, res := r.call(t, c.tool, map[string]any{"node": wNode})
			if res.Status != StatusApprovalRequired || res.Approval == nil || res.Approval.Request == "" {
				t.Fatalf("re-entry of a %s that never reached the host: %s %v", c.tool, res.Status, res.Reasons)
			}
			for _, a := range c.acts {
				if n := r.host.Count(a); n != 0 {
					t.Fatalf("re-entry without approval ran %s %d times", a, n)
				}
			}
			// With a fresh approval it starts, once.
			_, res = r.call(t, c.tool, map[string]any{"node": wNode, "approval": "signed:" + digestOfRequest(res.Approval.Request)})
			if res.Status != StatusOK && res.Status != StatusInProgress {
				t.Fatalf("%s under a fresh approval: %s %v", c.tool, res.Status, res.Reasons)
			}
			if n := r.host.Count(c.acts[0]); n != 1 {
				t.Fatalf("%s ran %d times under one approval", c.acts[0], n)
			}
			if last := r.journal(t).State().Node(wNode).Steps[c.step].Last(); last.ApprovalID == "a-crashed" || last.ApprovalID == "" {
				t.Fatalf("the restart is journaled under approval %q, want the fresh one", last.ApprovalID)
			}
		})
	}
}
