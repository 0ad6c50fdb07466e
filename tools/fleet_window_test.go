package tools

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// preflight runs a node's preflight steps through their tools.
func (f *fleet) preflight(node string) {
	f.t.Helper()
	f.must(StatusOK, "record_inspection", map[string]any{"node": node})
	f.must(StatusOK, "record_simulation", map[string]any{"node": node})
	f.must(StatusOK, "download_updates", map[string]any{"node": node})
	f.must(StatusOK, "snapshot_node", map[string]any{"node": node})
}

func reasons(res *Result) string { return strings.Join(res.Reasons, "; ") }

// The control-plane node's window, step by step through the tools, each
// destructive step under its own signature: the cordon is recorded on the
// Node with this server as its owner, the pods are evicted through the
// Eviction API, the host sees each action once, and the gate that cannot
// be proven green (no etcd endpoints configured) holds the window, then
// stops the round.
func TestFleetControlPlaneWindow(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	if _, res := f.call("drain_node", map[string]any{"node": "gpu-1"}); res.Status != StatusRefused {
		t.Fatalf("a drain out of order: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, reasons(res))
	}
	n := f.node("cp-1")
	if !n.Spec.Unschedulable {
		t.Fatal("cp-1 not cordoned after the drain")
	}
	if st, err := drain.ReadState(t.Context(), f.kube, "cp-1"); err != nil || st.Owner == nil || st.Owner.Identity != "server-a" {
		t.Fatalf("cordon owner: %+v %v", st.Owner, err)
	}
	if _, res := f.call("uncordon_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused || f.node("cp-1").Spec.Unschedulable != true {
		t.Fatalf("uncordon before verify: %s %v", res.Status, res.Reasons)
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
	// Again, unsigned, once it is done: refused, and the round does not
	// stop (it used to record a failure: "already runs the target kernel").
	prepared := f.host("cp-1").Count("prepare")
	if _, res := f.call("trial_boot", map[string]any{"node": "cp-1"}); res.Status != StatusRefused || !strings.Contains(reasons(res), "finished green") {
		t.Fatalf("trial_boot called again after it finished: %s %v", res.Status, res.Reasons)
	}
	if st := f.state(); st.Stop != nil || f.host("cp-1").Count("prepare") != prepared {
		t.Fatalf("trial_boot called again stopped the round (%+v) or prepared a boot", st.Stop)
	}
	f.must(StatusOK, "verify_node", map[string]any{"node": "cp-1"})
	f.must(StatusOK, "record_verification", map[string]any{"node": "cp-1"})
	f.must(StatusOK, "uncordon_node", map[string]any{"node": "cp-1"})
	if f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 still cordoned after uncordon_node")
	}
	// Again: the step is done; a second uncordon is refused and changes nothing.
	if _, res := f.call("uncordon_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
		t.Fatalf("second uncordon: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.call("gpu_acceptance", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
		t.Fatalf("gpu_acceptance on a control-plane node without GPUs: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.approve("promote_kernel", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("promote: %s %v", res.Status, reasons(res))
	}
	for _, what := range []string{"install", "prepare", "reboot", "promote"} {
		if c := f.host("cp-1").Count(what); c != 1 {
			t.Errorf("%s ran %d times on cp-1", what, c)
		}
	}

	// The gate: etcd is not configured, so it cannot be green.
	journal := f.state().LastSeq
	m, res := f.call("check_gate", map[string]any{"node": "cp-1"})
	if g, _ := m["gate"].(map[string]any); res.Status != StatusFailed || g == nil || g["ok"] != false || !strings.Contains(reasons(res), "etcd: not configured") {
		t.Fatalf("check_gate: %s %v %v", res.Status, res.Reasons, m["gate"])
	}
	if f.state().LastSeq != journal {
		t.Fatal("check_gate (read-only) wrote the journal")
	}
	_, res = f.call("close_window", map[string]any{"node": "cp-1"})
	if res.Status != StatusInProgress || !strings.Contains(reasons(res), "etcd") {
		t.Fatalf("close_window on a red gate: %s %v", res.Status, res.Reasons)
	}
	if st := f.state(); st.Stop != nil || st.Node("cp-1").Window != round.WindowOpen {
		t.Fatalf("a red gate inside its settle time stopped the round or closed the window: %+v", st.Stop)
	}
	f.advance(f.d.Config.Kube.GateSettle.D() + 1)
	_, res = f.call("close_window", map[string]any{"node": "cp-1"})
	if res.Status != StatusFailed {
		t.Fatalf("close_window after the settle time: %s %v", res.Status, res.Reasons)
	}
	st := f.state()
	if st.Stop == nil || st.Stop.Step != round.StepGate || st.Stop.Node != "cp-1" || st.LastSeq <= journal {
		t.Fatalf("the red gate did not stop the round at cp-1's gate: %+v", st.Stop)
	}
	f.hooks.waitFor(t, "round_stopped", "cp-1")
	if _, res := f.call("drain_node", map[string]any{"node": "gpu-1"}); res.Status != StatusRefused {
		t.Fatalf("the next drain while the round is stopped: %s %v", res.Status, res.Reasons)
	}
}

// The fallback drill that proves the fallback: armed under its approval,
// the armed kernel boots and crashes, GRUB brings the host back on the old
// kernel; the pass is recorded (a lesson in the journal), the drill is
// disarmed, and the normal trial boot follows.
func TestFallbackDrillPassesWhenTheArmedKernelFallsBack(t *testing.T) {
	r := newWRig(t)
	r.installDone(t)
	if res := r.approve(t, "fallback_drill", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("drill: %s %v", res.Status, res.Reasons)
	}
	if _, res := r.call(t, "fallback_drill", map[string]any{"node": wNode}); res.Status != StatusInProgress {
		t.Fatalf("drill before the host came back: %s %v", res.Status, res.Reasons)
	}
	r.host.Boot(false)
	_, res := r.call(t, "fallback_drill", map[string]any{"node": wNode})
	if res.Status != StatusOK || !strings.Contains(reasons(res), "passed") || !strings.Contains(res.NextAction, "trial_boot") {
		t.Fatalf("drill follow: %s %v (%s)", res.Status, res.Reasons, res.NextAction)
	}
	if r.host.Drill.Armed || r.host.Count("drill-disarm") != 1 || r.host.Running != wRunning {
		t.Fatalf("after the drill: %+v, %d disarms, running %s", r.host.Drill, r.host.Count("drill-disarm"), r.host.Running)
	}
	np, _ := (&window.Round{ID: wRound, Book: r.d.Book}).NodePlan(wNode)
	if !np.DrillPassed || !np.DrillStarted.IsZero() {
		t.Fatalf("the drill is not recorded as passed and ended: %+v", np)
	}
	st := r.journal(t).State()
	if len(st.Lessons) == 0 || !strings.Contains(st.Lessons[len(st.Lessons)-1].Text, "fallback drill on "+wNode+" passed") {
		t.Fatalf("no lesson of the passed drill: %+v", st.Lessons)
	}
	// A second drill is refused: the fallback is proven.
	if _, res := r.call(t, "fallback_drill", map[string]any{"node": wNode}); res.Status != StatusRefused {
		t.Fatalf("a second drill: %s %v", res.Status, res.Reasons)
	}
	if r.host.Count("drill-arm") != 1 {
		t.Fatalf("armed %d times", r.host.Count("drill-arm"))
	}
}
