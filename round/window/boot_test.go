package window_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// trialBooted runs the window to a trial boot on the fake host, which
// comes back on the new kernel or falls back to the old one. The trial
// boot is left in flight: the caller records how it ended.
func (r *rig) trialBooted(t *testing.T, fellBack bool) {
	t.Helper()
	r.installed(t)
	tp := r.trialPlan(t)
	if _, err := r.w.StartTrialBoot(context.Background(), tp, grant(tp, "a-trial"), nop); err != nil {
		t.Fatal(err)
	}
	r.host.Boot(fellBack)
}

// promoteRefused checks that promote, decided now, refuses saying want,
// and that nothing happened on the host: no promote ran, GRUB's default
// is the one the host started on.
func (r *rig) promoteRefused(t *testing.T, want string) {
	t.Helper()
	pp, err := r.w.PlanPromote(context.Background(), node, "")
	if !isRefusal(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("promote plan %+v: %v, want a refusal saying %q", pp, err, want)
	}
	if n, d := r.host.Count("promote"), r.host.Default(); n != 0 || d != "" {
		t.Fatalf("a refused promote acted on the host: %d promotes, GRUB default %q", n, d)
	}
}

// TestPromoteRefusesAFallenBackHostWhateverTheJournalSays: the trial
// kernel did not come up and GRUB fell back to the old kernel, but the
// journal was rewritten to say the trial boot, verify and GPU acceptance
// were green (on the boot running now, even). Promote observes the host:
// it runs the old kernel, so promote refuses, and the old kernel stays
// GRUB's default; a plan forged for that boot is refused by the host too.
func TestPromoteRefusesAFallenBackHostWhateverTheJournalSays(t *testing.T) {
	r := newRig(t)
	r.trialBooted(t, true)
	forged := round.Meta{Kernel: target, BootID: r.host.CurrentBoot(), Detail: "booted " + target + " once"}
	if _, err := r.j.FinishStep(round.StepTrialBoot, node, forged); err != nil {
		t.Fatal(err)
	}
	for _, st := range []round.Step{round.StepVerify, round.StepUncordon, round.StepGPUAcceptance} {
		if _, err := r.j.StartStep(st, node, round.Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.j.FinishStep(st, node, forged); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.j.State().Admit(round.StepPromote, node, t0); err != nil {
		t.Fatalf("the rewritten journal should pass the recorded rules: %v", err)
	}

	r.promoteRefused(t, node+" runs "+running+" (boot id "+r.host.CurrentBoot()+") now, not the trial kernel "+target)

	pp := window.PromotePlan{Node: node, Kernel: target, NewEntry: "gnulinux-" + target, BootID: r.host.CurrentBoot()}
	_, err := r.w.Promote(context.Background(), pp, grant(pp, "a-promote"))
	r.stopped(t, err, round.StepPromote, "it runs "+running)
	if n, d := r.host.Count("promote"), r.host.Default(); n != 0 || d != "" {
		t.Fatalf("the host promoted while running the old kernel: %d promotes, GRUB default %q", n, d)
	}
}

// TestPromoteRefusesAHostRebootedSinceVerify: the trial boot and the
// checks were green on one boot; the host booted again since (into the
// trial kernel once more, say by hand). Those checks do not speak for the
// boot running now: promote refuses, and a plan approved for the checked
// boot is refused by the host.
func TestPromoteRefusesAHostRebootedSinceVerify(t *testing.T) {
	r := newRig(t)
	r.trialBooted(t, false)
	if _, err := r.w.FollowTrialBoot(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	checkedBoot := r.host.CurrentBoot()
	if got := window.BootOf(r.run(round.StepTrialBoot)); got != (window.Boot{Kernel: target, ID: checkedBoot}) {
		t.Fatalf("the trial boot recorded %+v, want %s on boot %s", got, target, checkedBoot)
	}
	r.checked(t, round.StepVerify)
	r.green(t, round.StepUncordon, node)
	r.checked(t, round.StepGPUAcceptance)
	pp, err := r.w.PlanPromote(context.Background(), node, "")
	if err != nil || pp.BootID != checkedBoot {
		t.Fatalf("promote on the checked boot: %+v %v", pp, err)
	}

	r.host.BootID = "boot-after-verify"
	r.promoteRefused(t, "runs boot id boot-after-verify now, not "+checkedBoot)

	_, err = r.w.Promote(context.Background(), pp, grant(pp, "a-promote"))
	r.stopped(t, err, round.StepPromote, "the approval was for "+target+" (boot id "+checkedBoot+")")
	if n, d := r.host.Count("promote"), r.host.Default(); n != 0 || d != "" {
		t.Fatalf("the host promoted another boot: %d promotes, GRUB default %q", n, d)
	}
}

// TestVerifyOfAnotherBootDoesNotCount: verify recorded green on a boot
// other than the trial boot's (the boot before it, say) is no verify of
// the trial boot.
func TestVerifyOfAnotherBootDoesNotCount(t *testing.T) {
	r := newRig(t)
	r.trialBooted(t, false)
	if _, err := r.w.FollowTrialBoot(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if _, err := r.j.StartStep(round.StepVerify, node, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.j.FinishStep(round.StepVerify, node, round.Meta{Kernel: target, BootID: "boot-1"}); err != nil {
		t.Fatal(err)
	}
	r.green(t, round.StepUncordon, node)
	r.checked(t, round.StepGPUAcceptance)
	r.promoteRefused(t, "no green verify of "+node+" on its trial boot (boot id "+r.host.CurrentBoot()+"): the green one ran on boot id boot-1")
}
