package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/round"
)

// windowThrough runs a node's window through its tools up to promote:
// each destructive step approved on its own (perStep) or covered by the
// window's one signature. Each ok result's next_call names the next step.
func (f *fleet) windowThrough(node string, perStep bool) {
	f.t.Helper()
	var last *Result // the last ok result
	call := func(tool string, want Status, approve bool) {
		f.t.Helper()
		if last != nil {
			if nc := last.NextCall; nc == nil || nc.Tool != tool || nc.Arguments["node"] != node {
				f.t.Fatalf("on %s the result before %s names next_call %+v", node, tool, nc)
			}
		}
		var res *Result
		if approve {
			_, res = f.approve(tool, map[string]any{"node": node})
		} else {
			_, res = f.call(tool, map[string]any{"node": node})
		}
		if res.Status != want {
			f.t.Fatalf("%s on %s: %s, want %s: %v", tool, node, res.Status, want, res.Reasons)
		}
		if want == StatusOK {
			last = res
		} else {
			last = nil
		}
	}
	call("drain_node", StatusOK, perStep)
	call("install_updates", StatusInProgress, perStep)
	f.host(node).InstallState = "finished"
	call("install_updates", StatusOK, false)
	call("trial_boot", StatusInProgress, perStep)
	f.host(node).Boot(false)
	call("trial_boot", StatusOK, false)
	call("record_verification", StatusOK, false)
	call("uncordon_node", StatusOK, false)
	if f.state().Node(node).GPU {
		call("gpu_acceptance", StatusOK, false)
	}
	call("promote_kernel", StatusOK, perStep)
	if nc := last.NextCall; nc == nil || nc.Tool != "close_window" || nc.Arguments["node"] != node {
		f.t.Fatalf("promote_kernel on %s names next_call %+v, want close_window", node, nc)
	}
}

// gateAccepted closes a window whose gate cannot be green here (no etcd
// endpoints, no Postgres clusters, no API server pod to read OIDC from):
// the gate stays red past its settle time and stops the round; a person
// accepts that risk with a signed statement and resumes.
func (f *fleet) gateAccepted(node string) {
	f.t.Helper()
	f.must(StatusInProgress, "close_window", map[string]any{"node": node})
	f.advance(f.d.Config.Kube.GateSettle.D() + time.Second)
	f.must(StatusFailed, "close_window", map[string]any{"node": node})
	if res := f.decide(map[string]any{"decision": "residual_risk_accepted", "node": node, "step": "gate",
		"reason": "etcd and postgres are watched by hand in this test cluster", "review_trigger": "next-round:2026-12"}); res.Status != StatusOK {
		f.t.Fatalf("accept the red gate of %s: %s %v", node, res.Status, res.Reasons)
	}
	if st := f.state(); st.Node(node).Window != round.WindowClosed {
		f.t.Fatalf("the window of %s is %s after the accepted gate", node, st.Node(node).Window)
	}
	// The accepted gate closed the window: its Lease is free at once,
	// so the next node's drain is admitted (no wait for it to lapse).
	if h := f.leaseHolder(); h != "" {
		f.t.Fatalf("the window Lease of %s is still held by %q after the accepted gate closed it", node, h)
	}
	if rel := f.state().Releases; len(rel) == 0 || rel[len(rel)-1].Node != node || !strings.Contains(rel[len(rel)-1].Detail, "window Lease released") {
		f.t.Fatalf("the Lease release of %s is not journaled: %+v", node, rel)
	}
	if st := f.state(); st.Stop != nil {
		if res := f.decide(map[string]any{"decision": "resume", "reason": "risk accepted"}); res.Status != StatusOK {
			f.t.Fatalf("resume after %s: %s %v", node, res.Status, res.Reasons)
		}
	}
}

// A whole round on the fleet rig, through the tools only: plan, signature,
// three windows (the control plane per step, the GPU servers under one
// window signature each), the fleet check and its soak,
// autoremove and close. The cluster, the hosts, git and
// the webhook receiver show what happened.
func TestFleetRoundFromPlanToClose(t *testing.T) {
	f := newFleet(t)
	f.planned()

	f.preflight("cp-1")
	if _, res := f.call("approve_window", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
		t.Fatalf("approve_window on a control-plane node: %s %v", res.Status, res.Reasons)
	}
	f.windowThrough("cp-1", true)
	f.gateAccepted("cp-1")

	f.preflight("gpu-1")
	if _, res := f.approve("approve_window", map[string]any{"node": "gpu-1"}); res.Status != StatusOK || res.NextCall == nil || res.NextCall.Tool != "drain_node" {
		t.Fatalf("approve_window gpu-1: %s %v, next_call %+v", res.Status, res.Reasons, res.NextCall)
	}
	f.windowThrough("gpu-1", false)
	smoke, err := f.kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=mcp-patch-gpu-smoke"})
	if err != nil || len(smoke.Items) != 0 {
		t.Fatalf("smoke pods left behind: %v %v", smoke, err)
	}
	if f.model.calls.Load() == 0 {
		t.Fatal("gpu_acceptance never asked the model endpoint")
	}
	f.gateAccepted("gpu-1")

	f.preflight("gpu-2")
	if _, res := f.approve("approve_window", map[string]any{"node": "gpu-2"}); res.Status != StatusOK {
		t.Fatalf("approve_window gpu-2: %s %v", res.Status, res.Reasons)
	}
	f.windowThrough("gpu-2", false)
	f.gateAccepted("gpu-2")
	for _, n := range []string{"gpu-1", "gpu-2"} {
		if _, err := f.kube.CoreV1().Pods("inference").Get(t.Context(), "model-5c-"+map[string]string{"gpu-1": "a", "gpu-2": "b"}[n], metav1.GetOptions{}); err == nil {
			t.Errorf("the inference pod on %s was not evicted by its drain", n)
		}
		if f.node(n).Spec.Unschedulable {
			t.Errorf("%s left cordoned", n)
		}
	}

	m := f.must(StatusOK, "fleet_check", nil)
	for _, n := range m["nodes"].([]any) {
		if n.(map[string]any)["ok"] != true {
			t.Errorf("fleet_check: %v", n)
		}
	}
	f.must(StatusOK, "record_fleet_check", nil)
	if !f.state().FleetCheckGreen {
		t.Fatal("record_fleet_check did not record the green fleet check")
	}
	if _, res := f.call("autoremove", nil); res.Status != StatusRefused || !strings.Contains(reasons(res), "soak") {
		t.Fatalf("autoremove during the soak: %s %v", res.Status, res.Reasons)
	}
	f.advance(49 * time.Hour)
	if _, res := f.approve("autoremove", nil); res.Status != StatusOK || res.NextCall == nil || res.NextCall.Tool != "close_round" {
		t.Fatalf("autoremove: %s %v, next_call %+v", res.Status, res.Reasons, res.NextCall)
	}
	for _, n := range []string{"cp-1", "gpu-1", "gpu-2"} {
		if f.host(n).Count("autoremove") != 1 {
			t.Errorf("autoremove ran %d times on %s", f.host(n).Count("autoremove"), n)
		}
	}
	m = f.must(StatusOK, "close_round", nil)
	if !f.state().Closed {
		t.Fatal("round not closed")
	}
	branch := strings.TrimSpace(gitRun(t, f.repo, "branch", "--format=%(refname:short)", "--list", "mcp-patch/*"))
	if branch == "" {
		t.Fatalf("no working branch: %s", gitRun(t, f.repo, "branch", "-a"))
	}
	files := gitRun(t, f.repo, "ls-tree", "-r", "--name-only", branch)
	for _, want := range []string{"rounds/" + fRound + "/" + round.ReportFile, "rounds/" + fRound + "/" + round.TimelineFile, "rounds/" + fRound + "/" + round.JournalFile} {
		if !strings.Contains(files, want) {
			t.Errorf("%s not committed on %s:\n%s", want, branch, files)
		}
	}
	report, err := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, round.ReportFile))
	if err != nil || !strings.Contains(string(report), "gpu-2") {
		t.Fatalf("report: %v\n%s", err, report)
	}
	f.hooks.waitFor(t, "round_closed")
	f.hooks.waitFor(t, "round_stopped", "gpu-2", "gate")
}
