package lab

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

var errStopAgent = errors.New("the test takes over")

// TestDriftAfterTheSignedPlan: the archive publishes an update for cp-1
// after the plan was signed and cp-1 was drained. Its install is refused
// with the diff against the reviewed plan and nothing is installed;
// replan_node re-plans the node, sign_plan asks a person to sign only
// the install that changed, and the install then moves the new set.
func TestDriftAfterTheSignedPlan(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0, DrainTimeoutMinutes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	agent := &Agent{Session: cs, Sign: l.Sign, Wait: l.Clock.AdvanceTo, Say: func(s string) { t.Log(s) },
		BeforeCall: func(ctx context.Context, tool, node string) error {
			if tool == "install_updates" && node == "cp-1" {
				return errStopAgent
			}
			return nil
		}}
	if _, err := agent.Run(ctx, "2026-11"); !errors.Is(err, errStopAgent) {
		t.Fatalf("the agent did not reach cp-1's install: %v", err)
	}
	h := l.Fleet.Host("cp-1")
	if err := l.Inject(ctx, "package-published", "cp-1", ""); err != nil {
		t.Fatal(err)
	}
	r := callTool(t, cs, "install_updates", map[string]any{"node": "cp-1"})
	why := strings.Join(anyStrings(r["reasons"]), "\n")
	if r["status"] != "refused" || !strings.Contains(why, "+ Inst snapd 2.66.1+24.04 2.66.1+24.04.1 amd64") || !strings.Contains(why, "nothing was executed") {
		t.Fatalf("install after the archive changed: %v\n%s", r["status"], why)
	}
	if st, err := h.State(); err != nil || st.Packages["snapd"].Version != "2.66.1+24.04" {
		t.Fatalf("snapd moved on a refused install: %v", err)
	}
	rp := callTool(t, cs, "replan_node", map[string]any{"node": "cp-1"})
	if rp["status"] != "ok" || strings.Join(anyStrings(rp["changed"]), " ") != "install" {
		t.Fatalf("replan_node: %v changed %v: %v", rp["status"], rp["changed"], rp["reasons"])
	}
	sp := callTool(t, cs, "sign_plan", map[string]any{})
	ap, _ := sp["approval"].(map[string]any)
	if sp["status"] != "approval_required" || ap == nil {
		t.Fatalf("sign_plan after the re-plan: %v", sp)
	}
	summary := strings.Join(anyStrings(ap["summary"]), "\n")
	if !strings.Contains(summary, "cp-1: install") || strings.Contains(summary, "cp-1: drain") || strings.Contains(summary, "cp-2") {
		t.Errorf("the re-sign asks for more than the change:\n%s", summary)
	}
	if status, reasons, err := agent.Follow(ctx, "sign_plan", map[string]any{}); err != nil || status != "ok" {
		t.Fatalf("sign the re-plan: %s %v %v", status, reasons, err)
	}
	if status, reasons, err := agent.Follow(ctx, "record_simulation", map[string]any{"node": "cp-1"}); err != nil || status != "ok" {
		t.Fatalf("record_simulation: %s %v %v", status, reasons, err)
	}
	if status, reasons, err := agent.Follow(ctx, "install_updates", map[string]any{"node": "cp-1"}); err != nil || status != "ok" {
		t.Fatalf("install of the re-planned set: %s %v %v", status, reasons, err)
	}
	if st, err := h.State(); err != nil || st.Packages["snapd"].Version != "2.66.1+24.04.1" {
		t.Fatalf("the re-planned install did not move snapd: %v", err)
	}
}

func anyStrings(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
