package tools

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// onBoot records st green on node on the boot the fake host runs now, as
// trial_boot, record_verification and gpu_acceptance record it.
func (r *wrig) onBoot(t *testing.T, st round.Step, n string) {
	t.Helper()
	j := r.journal(t)
	if _, err := j.StartStep(st, n, round.Meta{}); err != nil {
		t.Fatalf("start %s: %v", st, err)
	}
	if _, err := j.FinishStep(st, n, round.Meta{Kernel: r.host.Running, BootID: r.host.CurrentBoot()}); err != nil {
		t.Fatalf("finish %s: %v", st, err)
	}
}

// readyToPromote records, after the drain, the window green up to GPU
// acceptance, on the boot the fake host runs: the new kernel's, as a trial
// boot that came up leaves it.
func (r *wrig) readyToPromote(t *testing.T) {
	t.Helper()
	r.green(t, round.StepInstall, wNode)
	r.host.Running = r.host.Target
	for _, st := range []round.Step{round.StepTrialBoot, round.StepVerify, round.StepUncordon, round.StepGPUAcceptance} {
		r.onBoot(t, st, wNode)
	}
}

// trialBooted runs the window through the tools up to a trial boot whose
// reboot the fake host completes, on the new kernel or back on the old.
// The trial boot is left in flight.
func (r *wrig) trialBooted(t *testing.T, fellBack bool) {
	t.Helper()
	r.drained(t)
	if res := r.approve(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("install: %s %v", res.Status, res.Reasons)
	}
	r.host.InstallState = "finished"
	if _, res := r.call(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("install follow: %s %v", res.Status, res.Reasons)
	}
	if res := r.approve(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("trial boot: %s %v", res.Status, res.Reasons)
	}
	r.host.Boot(fellBack)
}

// untouched checks that no promote ran and GRUB's default is the one the
// host started on.
func (r *wrig) untouched(t *testing.T) {
	t.Helper()
	if n, d := r.host.Count("promote"), r.host.Default(); n != 0 || d != "" {
		t.Fatalf("promote acted on the host: %d promotes, GRUB default %q", n, d)
	}
}

// TestPromoteKernelRefusesAFallenBackHost: the trial kernel fell back to
// the old one, and the journal was rewritten to say the trial boot,
// verify, uncordon and GPU acceptance were green. promote_kernel reads the
// node: it runs the old kernel, so the call is refused (no request to
// sign), nothing runs on the host and GRUB's default stays the old kernel.
func TestPromoteKernelRefusesAFallenBackHost(t *testing.T) {
	r := newWRig(t)
	r.trialBooted(t, true)
	j := r.journal(t)
	if _, err := j.FinishStep(round.StepTrialBoot, wNode, round.Meta{Kernel: r.host.Target, BootID: r.host.CurrentBoot()}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []round.Step{round.StepVerify, round.StepUncordon, round.StepGPUAcceptance} {
		r.onBoot(t, st, wNode)
	}
	_, res := r.call(t, "promote_kernel", map[string]any{"node": wNode})
	if res.Status != StatusRefused || res.Approval != nil || !strings.Contains(reasons(res), wNode+" runs "+r.host.Running) ||
		!strings.Contains(reasons(res), "not the trial kernel "+r.host.Target) {
		t.Fatalf("promote_kernel on a host that fell back: %s %v", res.Status, res.Reasons)
	}
	r.untouched(t)
}

// TestPromoteKernelRefusesAHostRebootedSinceVerify: a person signed the
// promote of the boot that was trial-booted and verified (the request
// names it); the host booted again before the signature came back. The
// signed call is refused, nothing runs on the host.
func TestPromoteKernelRefusesAHostRebootedSinceVerify(t *testing.T) {
	r := newWRig(t)
	r.trialBooted(t, false)
	if _, res := r.call(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("trial boot follow: %s %v", res.Status, res.Reasons)
	}
	verified := r.host.CurrentBoot()
	r.onBoot(t, round.StepVerify, wNode)
	r.green(t, round.StepUncordon, wNode)
	r.onBoot(t, round.StepGPUAcceptance, wNode)
	_, res := r.call(t, "promote_kernel", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired || !strings.Contains(strings.Join(res.Approval.Summary, "\n"), "boot id "+verified) {
		t.Fatalf("promote_kernel on the verified boot: %s %v %+v", res.Status, res.Reasons, res.Approval)
	}
	approval := "signed:" + digestOfRequest(res.Approval.Request)

	r.host.BootID = "boot-after-verify"
	_, res = r.call(t, "promote_kernel", map[string]any{"node": wNode, "approval": approval})
	if res.Status != StatusRefused || !strings.Contains(reasons(res), "runs boot id boot-after-verify now, not "+verified) {
		t.Fatalf("promote_kernel after a reboot: %s %v", res.Status, res.Reasons)
	}
	r.untouched(t)
}

// TestUncordonRefusesAnotherBoot: workloads go back only to the boot that
// was verified. After record_verification, the node booted again (by
// hand, say): uncordon_node reads the node, refuses and leaves it
// cordoned; the same boot as verified is uncordoned.
func TestUncordonRefusesAnotherBoot(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, reasons(res))
	}
	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install: %s %v", res.Status, reasons(res))
	}
	f.host("cp-1").InstallState = "finished"
	f.must(StatusOK, "install_updates", map[string]any{"node": "cp-1"})
	if _, res := f.approve("trial_boot", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("trial boot: %s %v", res.Status, reasons(res))
	}
	f.host("cp-1").Boot(false)
	f.must(StatusOK, "trial_boot", map[string]any{"node": "cp-1"})
	f.must(StatusOK, "record_verification", map[string]any{"node": "cp-1"})
	verified := f.host("cp-1").CurrentBoot()

	f.host("cp-1").BootID = "boot-after-verify"
	_, res := f.call("uncordon_node", map[string]any{"node": "cp-1"})
	if res.Status != StatusRefused || !strings.Contains(reasons(res), "runs boot id boot-after-verify now, not "+verified) {
		t.Fatalf("uncordon of another boot: %s %v", res.Status, res.Reasons)
	}
	if !f.node("cp-1").Spec.Unschedulable || f.state().Stop != nil {
		t.Fatalf("a refused uncordon uncordoned the node or stopped the round (%+v)", f.state().Stop)
	}

	f.host("cp-1").BootID = verified
	f.must(StatusOK, "uncordon_node", map[string]any{"node": "cp-1"})
	if f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 still cordoned after uncordon_node on the verified boot")
	}
}
