package tools

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// Every window and round step called before its phase (right after the
// plan, nothing drained) is refused with its reasons and advice, and
// changes nothing: no journal record, no host or cluster action.
func TestStepsBeforeTheirPhaseAreRefused(t *testing.T) {
	r := newWRig(t)
	before := r.journalBytes(t)
	for _, c := range []struct {
		tool string
		args map[string]any
		// words the reasons must carry
		want string
	}{
		{"install_updates", map[string]any{"node": wNode}, "drain"},
		{"trial_boot", map[string]any{"node": wNode}, "window_not_open"},
		{"uncordon_node", map[string]any{"node": wNode}, ""},
		{"gpu_acceptance", map[string]any{"node": wNode}, ""},
		{"promote_kernel", map[string]any{"node": wNode}, ""},
		{"autoremove", nil, "fleet kernel check"},
		{"close_round", nil, "autoremove"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			out, res := r.call(t, c.tool, c.args)
			if res.Status != StatusRefused {
				t.Fatalf("%s before its phase: %s %v", c.tool, res.Status, res.Reasons)
			}
			why := strings.Join(res.Reasons, " ")
			if len(res.Reasons) == 0 || !strings.Contains(why, c.want) {
				t.Errorf("reasons %q lack %q", res.Reasons, c.want)
			}
			if res.NextAction == "" || out["next_action"] == "" {
				t.Errorf("a refusal without next_action: %+v", out)
			}
		})
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Error("a refused step wrote the journal")
	}
	if len(r.host.Actions) != 0 || len(r.kube.Actions) != 0 {
		t.Errorf("a refused step acted: host %+v cluster %+v", r.host.Actions, r.kube.Actions)
	}
	if st := r.journal(t).State(); st.Stop != nil {
		t.Errorf("a refusal stopped the round: %+v", st.Stop)
	}
}

// Bad node names are refused before anything is read or written.
func TestNodeInputValidated(t *testing.T) {
	r := newWRig(t)
	before := r.journalBytes(t)
	for _, tool := range []string{"drain_node", "install_updates", "trial_boot", "uncordon_node", "gpu_acceptance",
		"promote_kernel", "rollback_node", "fallback_drill", "inspect_node", "verify_node", "check_gate"} {
		for _, bad := range []string{"", "gpu-1; reboot", "../etc", strings.Repeat("a", 300)} {
			_, res := r.call(t, tool, map[string]any{"node": bad})
			if res.Status != StatusRefused {
				t.Errorf("%s node %q: %s %v", tool, bad, res.Status, res.Reasons)
			}
		}
	}
	if !bytes.Equal(before, r.journalBytes(t)) || len(r.host.Actions) != 0 || len(r.kube.Actions) != 0 {
		t.Fatal("bad input changed something")
	}
}

// The trial boot that falls back to the old kernel fails the window and
// stops the round; the promote that would follow is refused.
func TestTrialBootFallbackFailsTheWindow(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.approve(t, "install_updates", map[string]any{"node": wNode})
	r.host.InstallState = "finished"
	if _, res := r.call(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("install follow: %s %v", res.Status, res.Reasons)
	}
	if res := r.approve(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("trial boot: %s %v", res.Status, res.Reasons)
	}
	r.host.Boot(true)
	_, res := r.call(t, "trial_boot", map[string]any{"node": wNode})
	if res.Status != StatusFailed || res.NextAction == "" {
		t.Fatalf("trial boot that fell back: %s %v next %q", res.Status, res.Reasons, res.NextAction)
	}
	run := r.journal(t).State().Node(wNode).Steps[round.StepTrialBoot]
	if run == nil || run.State == round.InFlight || run.Green() {
		t.Fatalf("the fallen-back trial boot is journaled %+v", run)
	}
	_, res = r.call(t, "promote_kernel", map[string]any{"node": wNode})
	if res.Status == StatusOK || res.Status == StatusApprovalRequired || r.host.Count("promote") != 0 {
		t.Fatalf("promote after a fallback: %s %v", res.Status, res.Reasons)
	}
}
