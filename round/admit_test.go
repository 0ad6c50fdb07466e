package round

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const soak48 = 48 * time.Hour

// Each standing rule, broken on purpose. The order of the fleet is cp-1,
// cp-3, cp-2, gpu-a (canary), gpu-b, vm-1.
func TestAdmitRefusesEachRule(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(b *builder)
		step   Step
		node   string
		later  time.Duration // Admit at the builder's clock plus this
		want   Rule
		reason string // words the reason must contain
	}{
		{name: "unknown_step", step: "reboot", node: "cp-1", want: RuleUnknownStep},
		{name: "step_target: node step without node", step: StepDrain, want: RuleStepTarget, reason: "name the node"},
		{name: "step_target: round step with node", step: StepAutoremove, node: "cp-1", want: RuleStepTarget},
		{name: "no_plan", setup: func(b *builder) { b.s = NewState("2026-11") }, step: StepDrain, node: "cp-1", want: RuleNoPlan},
		{name: "unknown_node", step: StepDrain, node: "cp-9", want: RuleUnknownNode},
		{name: "step_in_flight", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.start(StepDrain, "cp-1")
		}, step: StepDrain, node: "cp-1", want: RuleStepInFlight, reason: "already in flight"},
		{name: "step_in_flight after a crash: re-check, never repeat", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.ok(StepDrain, "cp-1")
			b.start(StepInstall, "cp-1")
			b.rec(Record{Kind: KindSessionOpened, Round: "2026-11"})
		}, step: StepInstall, node: "cp-1", want: RuleStepInFlight, reason: "do not repeat it blindly"},
		{name: "round_closed", setup: closedRound, step: StepDownload, node: "cp-1", want: RuleRoundClosed},
		{name: "round_aborted", setup: func(b *builder) {
			b.fail(StepSimulate, "cp-1", "apt would remove ubuntu-minimal")
			b.decide(DecisionAbort, "cp-1", StepSimulate)
		}, step: StepDrain, node: "cp-1", want: RuleRoundAborted},
		{name: "round_stopped", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.ok(StepDrain, "cp-1")
			b.fail(StepInstall, "cp-1", "dpkg exited 100")
		}, step: StepDownload, node: "gpu-b", want: RuleRoundStopped, reason: "install on cp-1 (dpkg exited 100)"},
		{name: "order_fixed", setup: func(b *builder) { b.start(StepDrain, "cp-1") }, step: StepPlan, want: RuleOrderFixed},
		{name: "baseline_before_drain", setup: func(b *builder) {
			b.s = NewState("2026-11")
			b.rec(Record{Kind: KindSessionOpened, Round: "2026-11"})
			b.rec(Record{Kind: KindPlan, Plan: &Schedule{Order: fleetOrder(t), Soak: Duration(soak48)}})
		}, step: StepDrain, node: "cp-1", want: RuleBaselineBeforeDrain},
		{name: "one_window_at_a_time: drain", setup: func(b *builder) { b.ok(StepDrain, "cp-1") },
			step: StepDrain, node: "cp-3", want: RuleOneWindow, reason: "window of cp-1 is open"},
		{name: "one_window_at_a_time: install elsewhere", setup: func(b *builder) { b.ok(StepDrain, "cp-1") },
			step: StepInstall, node: "cp-3", want: RuleOneWindow},
		{name: "gate_before_next_cordon", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			for _, st := range []Step{StepDrain, StepInstall, StepTrialBoot, StepVerify, StepUncordon, StepPromote} {
				b.ok(st, "cp-1")
			}
		}, step: StepDrain, node: "cp-3", want: RuleGateBeforeNextCordon, reason: "gate of cp-1 is not green"},
		{name: "gate_before_next_cordon: gate green before promote does not close", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			for _, st := range []Step{StepDrain, StepInstall, StepGate, StepTrialBoot, StepVerify, StepUncordon, StepPromote} {
				b.ok(st, "cp-1")
			}
		}, step: StepDrain, node: "cp-3", want: RuleGateBeforeNextCordon},
		{name: "order", step: StepDrain, node: "cp-2", want: RuleOrder, reason: "cp-1 comes before cp-2"},
		{name: "order: skipping a node", setup: func(b *builder) { b.window("cp-1") },
			step: StepDrain, node: "cp-2", want: RuleOrder, reason: "cp-3 comes before cp-2"},
		{name: "window_closed", setup: func(b *builder) { b.window("cp-1") }, step: StepDrain, node: "cp-1", want: RuleWindowClosed},
		{name: "window_closed: install", setup: func(b *builder) { b.window("cp-1") }, step: StepInstall, node: "cp-1", want: RuleWindowClosed},
		{name: "window_not_open", step: StepTrialBoot, node: "cp-1", want: RuleWindowNotOpen},
		{name: "drain_before_install: never drained", setup: func(b *builder) { b.ok(StepSnapshot, "cp-1") },
			step: StepInstall, node: "cp-1", want: RuleDrainBeforeInstall},
		{name: "drain_before_install: drain failed, resumed", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.fail(StepDrain, "cp-1", "PDB blocks eviction of pg-1")
			b.decide(DecisionResume, "cp-1", StepDrain)
		}, step: StepInstall, node: "cp-1", want: RuleDrainBeforeInstall, reason: "pending"},
		{name: "snapshot_before_install", setup: func(b *builder) { b.ok(StepDrain, "cp-1") },
			step: StepInstall, node: "cp-1", want: RuleSnapshotBeforeInstall},
		{name: "hypervisor_snapshot_before_install", setup: func(b *builder) {
			for _, n := range []string{"cp-1", "cp-3", "cp-2", "gpu-a", "gpu-b"} {
				b.window(n)
			}
			b.ok(StepSnapshot, "vm-1")
			b.ok(StepDrain, "vm-1")
		}, step: StepInstall, node: "vm-1", want: RuleHypervisorSnapshotBeforeInstall},
		{name: "install_before_trial_boot", setup: func(b *builder) { b.ok(StepDrain, "cp-1") },
			step: StepTrialBoot, node: "cp-1", want: RuleInstallBeforeTrialBoot},
		{name: "verify_before_uncordon", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.ok(StepDrain, "cp-1")
			b.ok(StepInstall, "cp-1")
			b.ok(StepTrialBoot, "cp-1")
		}, step: StepUncordon, node: "cp-1", want: RuleVerifyBeforeUncordon},
		{name: "verify_before_uncordon: verify before the trial boot does not count", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.ok(StepDrain, "cp-1")
			b.ok(StepInstall, "cp-1")
			b.ok(StepVerify, "cp-1")
			b.ok(StepTrialBoot, "cp-1")
		}, step: StepUncordon, node: "cp-1", want: RuleVerifyBeforeUncordon},
		{name: "not_a_gpu_node", step: StepGPUAcceptance, node: "cp-1", want: RuleNotAGPUNode},
		{name: "uncordon_before_gpu_acceptance", setup: func(b *builder) {
			for _, n := range []string{"cp-1", "cp-3", "cp-2"} {
				b.window(n)
			}
			b.ok(StepSnapshot, "gpu-a")
			for _, st := range []Step{StepDrain, StepInstall, StepTrialBoot, StepVerify} {
				b.ok(st, "gpu-a")
			}
		}, step: StepGPUAcceptance, node: "gpu-a", want: RuleUncordonBeforeGPUAcceptance},
		{name: "checks_before_promote: verify missing", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			for _, st := range []Step{StepDrain, StepInstall, StepTrialBoot} {
				b.ok(st, "cp-1")
			}
		}, step: StepPromote, node: "cp-1", want: RuleChecksBeforePromote, reason: "verify of cp-1"},
		{name: "checks_before_promote: GPU acceptance missing", setup: func(b *builder) {
			for _, n := range []string{"cp-1", "cp-3", "cp-2"} {
				b.window(n)
			}
			b.ok(StepSnapshot, "gpu-a")
			for _, st := range []Step{StepDrain, StepInstall, StepTrialBoot, StepVerify, StepUncordon} {
				b.ok(st, "gpu-a")
			}
		}, step: StepPromote, node: "gpu-a", want: RuleChecksBeforePromote, reason: "GPU acceptance of gpu-a"},
		{name: "windows_before_soak", setup: func(b *builder) { b.window("cp-1") }, step: StepSoak, want: RuleWindowsBeforeSoak},
		{name: "fleet_check_before_soak", setup: func(b *builder) { b.allWindows() }, step: StepSoak, want: RuleFleetCheckBeforeSoak},
		{name: "fleet_check_before_soak: check taken before the last window", setup: func(b *builder) {
			for _, n := range b.s.Nodes[:5] {
				b.window(n.Node)
			}
			b.ok(StepFleetCheck, "")
			b.window("vm-1")
		}, step: StepSoak, want: RuleFleetCheckBeforeSoak},
		{name: "fleet_check_before_autoremove", setup: func(b *builder) {
			b.allWindows()
			b.ok(StepFleetCheck, "")
			b.start(StepSoak, "")
			b.fail(StepFleetCheck, "", "gpu-b runs 6.8.0-40")
			b.decide(DecisionResume, "", StepFleetCheck)
		}, later: 72 * time.Hour, step: StepAutoremove, want: RuleFleetCheckBeforeAutoremove},
		{name: "soak_before_autoremove: not started", setup: func(b *builder) {
			b.allWindows()
			b.ok(StepFleetCheck, "")
		}, step: StepAutoremove, want: RuleSoakBeforeAutoremove, reason: "has not started"},
		{name: "soak_before_autoremove: still running", setup: func(b *builder) {
			b.allWindows()
			b.ok(StepFleetCheck, "")
			b.start(StepSoak, "")
		}, later: 47 * time.Hour, step: StepAutoremove, want: RuleSoakBeforeAutoremove, reason: "1h0m0s left"},
		{name: "autoremove_before_close", setup: func(b *builder) {
			b.allWindows()
			b.rec(Record{Kind: KindFindings, Detail: "abc123"})
		}, step: StepClose, want: RuleAutoremoveBeforeClose},
		{name: "findings_before_close", setup: func(b *builder) {
			soakedRound(b)
		}, step: StepClose, want: RuleFindingsBeforeClose},
		{name: "findings_before_close: a lesson after the commit", setup: func(b *builder) {
			soakedRound(b)
			b.rec(Record{Kind: KindFindings, Detail: "abc123"})
			b.rec(Record{Kind: KindLesson, Detail: "one more thing"})
		}, step: StepClose, want: RuleFindingsBeforeClose},
		{name: "findings_before_close: aborted round", setup: func(b *builder) {
			b.decide(DecisionAbort, "", "")
		}, step: StepClose, want: RuleFindingsBeforeClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := planned(t, soak48)
			if tc.setup != nil {
				tc.setup(b)
			}
			before := b.s.Clone()
			err := b.s.Admit(tc.step, tc.node, b.now.Add(tc.later))
			if diff := cmp.Diff(tc.want, ruleOf(err)); diff != "" {
				t.Fatalf("rule (-want +got):\n%s\nerror: %v", diff, err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("reason %q lacks %q", err, tc.reason)
			}
			if !strings.Contains(err.Error(), string(tc.want)) {
				t.Errorf("error %q does not name its rule", err)
			}
			if diff := cmp.Diff(before, b.s); diff != "" {
				t.Errorf("Admit changed the state:\n%s", diff)
			}
		})
	}
}

func TestAdmitDecisionRefusesEachRule(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(b *builder)
		decision DecisionName
		node     string
		step     Step
		want     Rule
	}{
		{name: "unknown_decision", decision: "yolo", want: RuleUnknownDecision},
		{name: "not_stopped", decision: DecisionResume, want: RuleNotStopped},
		{name: "round_closed", setup: closedRound, decision: DecisionAbort, want: RuleRoundClosed},
		{name: "round_aborted: resume after abort", setup: func(b *builder) {
			b.fail(StepSimulate, "cp-1", "removal")
			b.decide(DecisionAbort, "", "")
		}, decision: DecisionResume, want: RuleRoundAborted},
		{name: "decision_target: hypervisor snapshot on bare metal", decision: DecisionHypervisorSnapshotTaken, node: "cp-1", want: RuleDecisionTarget},
		{name: "decision_target: risk on a check that did not fail", decision: DecisionResidualRiskAccepted, node: "cp-1", step: StepVerify, want: RuleDecisionTarget},
		{name: "decision_target: risk on a step that is not a check", setup: func(b *builder) {
			b.ok(StepSnapshot, "cp-1")
			b.ok(StepDrain, "cp-1")
			b.fail(StepInstall, "cp-1", "dpkg")
		}, decision: DecisionResidualRiskAccepted, node: "cp-1", step: StepInstall, want: RuleDecisionTarget},
		{name: "decision_target: fleet check named on a node", setup: func(b *builder) {
			b.fail(StepFleetCheck, "", "mixed kernels")
		}, decision: DecisionResidualRiskAccepted, node: "cp-1", step: StepFleetCheck, want: RuleDecisionTarget},
		{name: "decision_target: risk note without a node", decision: DecisionResidualRiskAccepted, want: RuleDecisionTarget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := planned(t, soak48)
			if tc.setup != nil {
				tc.setup(b)
			}
			err := b.s.AdmitDecision(tc.decision, tc.node, tc.step)
			if diff := cmp.Diff(tc.want, ruleOf(err)); diff != "" {
				t.Fatalf("rule (-want +got):\n%s\nerror: %v", diff, err)
			}
		})
	}
}

// What the rules let through: the allowed paths next to the refusals.
func TestAdmitAllows(t *testing.T) {
	t.Run("read-only checks while stopped", func(t *testing.T) {
		b := planned(t, soak48)
		b.ok(StepSnapshot, "cp-1")
		b.ok(StepDrain, "cp-1")
		b.fail(StepInstall, "cp-1", "dpkg exited 100")
		for _, st := range []Step{StepInspect, StepSimulate, StepVerify, StepGate} {
			if err := b.s.Admit(st, "cp-1", b.now); err != nil {
				t.Errorf("%s while stopped: %v", st, err)
			}
		}
		if err := b.s.Admit(StepFleetCheck, "", b.now); err != nil {
			t.Errorf("fleet_check while stopped: %v", err)
		}
	})
	t.Run("resume re-allows the failed step", func(t *testing.T) {
		b := planned(t, soak48)
		b.ok(StepSnapshot, "cp-1")
		b.ok(StepDrain, "cp-1")
		b.fail(StepInstall, "cp-1", "dpkg exited 100")
		if got := ruleOf(b.s.Admit(StepInstall, "cp-1", b.now)); got != RuleRoundStopped {
			t.Fatalf("install while stopped: rule %q", got)
		}
		b.decide(DecisionResume, "cp-1", StepInstall)
		if b.s.Stop != nil {
			t.Fatal("resume left the stop")
		}
		b.ok(StepInstall, "cp-1")
	})
	t.Run("preflight on the next node while a window is open", func(t *testing.T) {
		b := planned(t, soak48)
		b.ok(StepSnapshot, "cp-1")
		b.ok(StepDrain, "cp-1")
		for _, st := range PreflightSteps {
			b.ok(st, "cp-3")
		}
	})
	t.Run("read-only check left in flight by a crash is run again", func(t *testing.T) {
		b := planned(t, soak48)
		b.start(StepVerify, "cp-1")
		b.rec(Record{Kind: KindSessionOpened, Round: "2026-11"})
		if !b.s.Node("cp-1").Steps[StepVerify].NeedsRecheck {
			t.Fatal("verify not flagged NeedsRecheck")
		}
		b.ok(StepVerify, "cp-1")
		r := b.s.Node("cp-1").Steps[StepVerify]
		if got := []Outcome{r.Attempts[0].Outcome, r.Attempts[1].Outcome}; !cmp.Equal(got, []Outcome{OutcomeAbandoned, OutcomeDone}) {
			t.Errorf("attempt outcomes = %v", got)
		}
	})
	t.Run("aborted round hands back the node it cordoned", func(t *testing.T) {
		b := planned(t, soak48)
		b.ok(StepSnapshot, "cp-1")
		b.ok(StepDrain, "cp-1")
		b.fail(StepInstall, "cp-1", "dpkg exited 100")
		b.decide(DecisionAbort, "cp-1", StepInstall)
		b.ok(StepUncordon, "cp-1")
		if got := ruleOf(b.s.Admit(StepUncordon, "cp-3", b.now)); got != RuleRoundAborted {
			t.Errorf("uncordon of a node the round never cordoned: rule %q", got)
		}
		b.rec(Record{Kind: KindFindings, Detail: "abc"})
		b.ok(StepClose, "")
		if !b.s.Closed {
			t.Error("aborted round did not close")
		}
	})
	t.Run("residual risk on a red gate closes the window", func(t *testing.T) {
		b := planned(t, soak48)
		b.ok(StepSnapshot, "cp-1")
		for _, st := range []Step{StepDrain, StepInstall, StepTrialBoot, StepVerify, StepUncordon, StepPromote} {
			b.ok(st, "cp-1")
		}
		b.fail(StepGate, "cp-1", "new failure: node-exporter scrape on cp-1")
		b.decide(DecisionResidualRiskAccepted, "cp-1", StepGate)
		if got := b.s.Node("cp-1").Window; got != WindowClosed {
			t.Fatalf("window = %s, want closed", got)
		}
		if got := ruleOf(b.s.Admit(StepDrain, "cp-3", b.now)); got != RuleRoundStopped {
			t.Fatalf("before resume: rule %q, want round_stopped", got)
		}
		b.decide(DecisionResume, "cp-1", StepGate)
		b.ok(StepDrain, "cp-3")
	})
	t.Run("full round to close", func(t *testing.T) {
		b := planned(t, soak48)
		closedRound(b)
		if !b.s.Closed {
			t.Fatal("not closed")
		}
	})
}

// soakedRound runs every window, the fleet check, the soak and autoremove.
func soakedRound(b *builder) {
	b.t.Helper()
	b.allWindows()
	b.ok(StepFleetCheck, "")
	b.start(StepSoak, "")
	b.now = b.now.Add(48 * time.Hour)
	b.rec(Record{Kind: KindStepFinished, Step: StepSoak, Outcome: OutcomeDone})
	b.ok(StepAutoremove, "")
}

func closedRound(b *builder) {
	b.t.Helper()
	soakedRound(b)
	b.rec(Record{Kind: KindLesson, Detail: "cp-2 switchover took 40s"})
	b.rec(Record{Kind: KindFindings, Detail: "abc123"})
	b.ok(StepClose, "")
}
