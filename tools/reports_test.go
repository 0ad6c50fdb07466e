package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// forgedKernel is the target kernel an agent writes into plan.md.
const forgedKernel = "6.8.0-99-generic"

// branchFile is rounds/<fRound>/<name> as the round's working branch
// holds it; ok is false when the branch does not hold it.
func (f *fleet) branchFile(name string) (string, bool) {
	f.t.Helper()
	out, err := exec.Command("git", "-C", f.repo, "show", "mcp-patch/round-"+fRound+":rounds/"+fRound+"/"+name).Output()
	return string(out), err == nil
}

// roundFile is path rounds/<fRound>/<name> in the working copy.
func (f *fleet) roundFile(name string) string { return filepath.Join(f.repo, "rounds", fRound, name) }

// edit rewrites rounds/<fRound>/<name> as the agent would, with fn.
func (f *fleet) edit(name string, fn func(string) string) {
	f.t.Helper()
	b, err := os.ReadFile(f.roundFile(name))
	if err != nil {
		f.t.Fatal(err)
	}
	forged := fn(string(b))
	if forged == string(b) {
		f.t.Fatalf("the edit of %s changed nothing", name)
	}
	if err := os.WriteFile(f.roundFile(name), []byte(forged), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// forgeKernel is the agent's edit of plan.md: another target kernel.
func forgeKernel(s string) string { return strings.ReplaceAll(s, fTarget, forgedKernel) }

// renderedPlanMDOf is plan.md as the server renders it from plan.json.
func (f *fleet) renderedPlanMDOf() string {
	f.t.Helper()
	fp, ok, err := f.d.FleetPlan(fRound)
	if err != nil || !ok {
		f.t.Fatalf("plan: %v %v", ok, err)
	}
	var md strings.Builder
	if err := plan.Markdown(&md, fp); err != nil {
		f.t.Fatal(err)
	}
	return md.String()
}

// An agent rewrote plan.md (the target kernel) after plan_round, while a
// person was asked to sign: sign_plan refuses, with the person's
// approval and without, naming the line that differs, writes plan.md
// again from plan.json, and records nothing. Once plan.md is the render
// again the same approval signs the plan. No commit of the branch ever
// holds the forged plan.md.
func TestSignPlanRefusesAPlanMDThatIsNotThePlan(t *testing.T) {
	f := newFleet(t)
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	_, res := f.call("sign_plan", nil)
	if res.Status != StatusApprovalRequired {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	approval := f.person.sign(t, res.Approval.Request)

	f.edit(service.FleetPlanMD, forgeKernel)
	_, res = f.call("sign_plan", map[string]any{"approval": approval})
	why := reasons(res)
	if res.Status != StatusRefused || !strings.Contains(why, "is not the plan rendered from plan.json: line ") ||
		!strings.Contains(why, forgedKernel) || !strings.Contains(why, "nothing was signed") {
		t.Fatalf("sign_plan with a forged plan.md: %s %v", res.Status, res.Reasons)
	}
	if m := f.must(StatusOK, "show_plan", nil); m["plan"].(map[string]any)["signed"] == true {
		t.Fatal("the plan is signed under a forged plan.md")
	}
	if md, _ := os.ReadFile(f.roundFile(service.FleetPlanMD)); string(md) != f.renderedPlanMDOf() {
		t.Fatalf("plan.md was not written again from plan.json:\n%s", md)
	}

	// Forged again, asked bare: refused as well.
	f.edit(service.FleetPlanMD, forgeKernel)
	if _, res := f.call("sign_plan", nil); res.Status != StatusRefused || !strings.Contains(reasons(res), forgedKernel) {
		t.Fatalf("sign_plan without approval, plan.md forged: %s %v", res.Status, res.Reasons)
	}
	// plan.md is the render again: the person's approval signs the plan.
	if _, res := f.call("sign_plan", map[string]any{"approval": approval}); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	if md, ok := f.branchFile(service.FleetPlanMD); !ok || md != f.renderedPlanMDOf() {
		t.Fatalf("the branch's plan.md is not the render of plan.json (held %v):\n%s", ok, md)
	}
	// (The audit log quotes the refusal, forged line and all.)
	if log := gitRun(t, f.repo, "log", "--all", "--format=%h %s", "-S", forgedKernel, "--", "rounds/"+fRound+"/"+service.FleetPlanMD); log != "" {
		t.Fatalf("commits whose plan.md holds the forged kernel:\n%s", log)
	}
}

// After the plan is signed and the server started again, the agent
// edits what the server reports (plan.md, plan-signatures.json), writes a
// window approval of its own (window-signatures/gpu-2.json) and a
// state.json. The server's next commit holds its own renders, not the
// edits, leaves the made-up report out, and its message and the call's
// answer name each file; the state.json is no file of the server's (its
// state snapshot lives in the state directory) and no commit holds it.
// The commits before, of files the server wrote, name none.
func TestServerCommitHoldsItsOwnReports(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	if log := gitRun(t, f.repo, "log", "--all", "--format=%B"); strings.Contains(log, "Written again") || strings.Contains(log, "Left out") {
		t.Fatalf("a commit of the server's own files names edits:\n%s", log)
	}
	f.restart()
	f.state() // the journal opens before the edits

	f.edit(service.FleetPlanMD, forgeKernel)
	if err := os.WriteFile(f.roundFile(round.StateFile), []byte(`{"forged": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.edit(service.PlanSignedFile, func(s string) string { return strings.ReplaceAll(s, "alice@example.org", "mallory@example.org") })
	forgedWindow := filepath.Join(f.repo, "rounds", fRound, service.WindowSignaturesDir, "gpu-2.json")
	if err := os.MkdirAll(filepath.Dir(forgedWindow), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forgedWindow, []byte(`{"node": "gpu-2", "principal": "alice@example.org"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, res := f.call("plan_round", map[string]any{"round": fRound})
	if res.Status != StatusOK {
		t.Fatalf("plan_round: %s %v", res.Status, res.Reasons)
	}
	msg := gitRun(t, f.repo, "log", "-1", "--format=%B", "mcp-patch/round-"+fRound)
	for _, want := range []string{"Written again from the server's state over edits it did not make: ", "plan.md", "plan-signatures.json",
		"Left out, not written by the server: window-signatures/gpu-2.json"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the commit message lacks %q:\n%s", want, msg)
		}
	}
	for _, name := range []string{"plan.md", "plan-signatures.json", "window-signatures/gpu-2.json"} {
		if !strings.Contains(reasons(res), "rounds/"+fRound+"/"+name+" was not") {
			t.Errorf("plan_round's answer does not name %s: %v", name, res.Reasons)
		}
	}
	if md, ok := f.branchFile(service.FleetPlanMD); !ok || md != f.renderedPlanMDOf() {
		t.Errorf("the branch's plan.md is not the render of plan.json:\n%s", md)
	}
	if log := gitRun(t, f.repo, "log", "--all", "--format=%h %s", "--", "rounds/"+fRound+"/"+round.StateFile); log != "" {
		t.Errorf("commits hold a state.json in the intent repository:\n%s", log)
	}
	ps, ok := f.branchFile(service.PlanSignedFile)
	if !ok || strings.Contains(ps, "mallory") || !strings.Contains(ps, "alice@example.org") {
		t.Errorf("the branch's plan-signatures.json is not the server's (held %v):\n%s", ok, ps)
	}
	if _, ok := f.branchFile(service.WindowSignaturesDir + "/gpu-2.json"); ok {
		t.Error("the branch holds a window approval the server never kept")
	}
}
