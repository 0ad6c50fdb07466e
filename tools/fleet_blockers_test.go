package tools

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round/service"
)

// A node the preflight cannot read is a blocker of the plan: plan_round
// writes and commits the plan with it, named in plan.md, and stops the
// round before its first window; sign_plan will not sign it, no drain
// runs, round_status names no call (a person decides); once the node
// answers and a person signed resume, plan_round writes a ready plan and
// it is signed.
func TestFleetPlanWithAnUnreachableNode(t *testing.T) {
	f := newFleet(t)
	f.host("gpu-2").Unreachable = true
	_, res := f.call("plan_round", map[string]any{"round": fRound})
	if res.Status != StatusFailed || !strings.Contains(reasons(res), "gpu-2: not reachable") {
		t.Fatalf("plan_round with gpu-2 down: %s %v", res.Status, res.Reasons)
	}
	md, err := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, service.FleetPlanMD))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "gpu-2") || !strings.Contains(string(md), "connection refused") {
		t.Fatalf("plan.md does not name gpu-2's unread preflight:\n%s", md)
	}
	if st := f.state(); st.Stop == nil {
		t.Fatal("a plan with a blocker did not stop the round")
	}
	if _, res := f.call("sign_plan", nil); res.Status == StatusOK || res.Status == StatusApprovalRequired {
		t.Fatalf("sign_plan with blockers: %s %v", res.Status, res.Reasons)
	}
	if st := f.must(StatusOK, "round_status", nil); st["next_call"] != nil {
		t.Fatalf("round_status of a stopped round names %v", st["next_call"])
	}
	if _, res := f.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
		t.Fatalf("a drain under a blocked plan: %s %v", res.Status, res.Reasons)
	}

	f.host("gpu-2").Unreachable = false
	if res := f.decide(map[string]any{"decision": "resume", "reason": "gpu-2 is back"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
}

// Blockers on several nodes at once are all named, node and cause (a
// short /boot among them), and the call's every record, its own audit
// record last, is in the plan's commit: the intent repository is clean
// once plan_round answers, ready or blocked, and after sign_plan.
func TestFleetPlanNamesEveryBlockerAndCommitsItsAudit(t *testing.T) {
	f := newFleet(t)
	f.host("gpu-2").Unreachable = true
	f.host("cp-1").BootFreeKB = 20 << 10
	_, res := f.call("plan_round", map[string]any{"round": fRound})
	why := reasons(res)
	if res.Status != StatusFailed || !strings.Contains(why, "gpu-2: not reachable") || !strings.Contains(why, "cp-1: /boot has 20 MiB free") {
		t.Fatalf("plan_round with gpu-2 down and cp-1's /boot short: %s\n%s", res.Status, why)
	}
	if !strings.Contains(why, "plan committed to the intent repository") {
		t.Fatalf("the blocked plan was not committed:\n%s", why)
	}
	cleanAfter(t, f, "plan_round")

	f.host("gpu-2").Unreachable = false
	f.host("cp-1").BootFreeKB = 0
	if res := f.decide(map[string]any{"decision": "resume", "reason": "gpu-2 is back, /boot cleaned"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	cleanAfter(t, f, "plan_round")
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	cleanAfter(t, f, "sign_plan")
}

// The notice that a blocked plan stopped the round is delivered in the
// background; plan_round's commit waits for its outcome, so the committed
// journal holds it and the repository is clean once the call answers,
// even when the receiver is slow to answer.
func TestBlockedPlanCommitHoldsItsNotification(t *testing.T) {
	f := newFleet(t)
	f.hooks.delay.Store(int64(time.Second))
	f.host("gpu-2").Unreachable = true
	if _, res := f.call("plan_round", map[string]any{"round": fRound}); res.Status != StatusFailed {
		t.Fatalf("plan_round with gpu-2 down: %s %v", res.Status, res.Reasons)
	}
	cleanAfter(t, f, "plan_round")
	out, err := exec.Command("git", "-C", f.repo, "show", "HEAD:rounds/"+fRound+"/journal.jsonl").CombinedOutput()
	if err != nil {
		t.Fatalf("git show: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "notification round_stopped to ops sent") {
		t.Fatalf("the committed journal lacks the round_stopped notice's outcome:\n%s", out)
	}
}

// cleanAfter wants an intent working copy without changes and the
// committed audit log ending with tool's record.
func cleanAfter(t *testing.T, f *fleet, tool string) {
	t.Helper()
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", f.repo}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Fatalf("the intent repository is not clean after %s:\n%s", tool, st)
	}
	log := strings.Split(strings.TrimSpace(git("show", "HEAD:rounds/"+fRound+"/audit.jsonl")), "\n")
	var last struct {
		Tool string `json:"tool"`
	}
	if err := json.Unmarshal([]byte(log[len(log)-1]), &last); err != nil || last.Tool != tool {
		t.Fatalf("the committed audit log ends with %q (%v), want %s's record", last.Tool, err, tool)
	}
}
