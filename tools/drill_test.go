package tools

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round/window"
)

func (r *wrig) installDone(t *testing.T) {
	t.Helper()
	r.drained(t)
	r.approve(t, "install_updates", map[string]any{"node": wNode})
	r.host.InstallState = "finished"
	if _, res := r.call(t, "install_updates", map[string]any{"node": wNode}); res.Status != StatusOK {
		t.Fatalf("install follow: %s %v", res.Status, res.Reasons)
	}
}

// The fallback drill on the canary: approved, armed and rebooted once;
// a fallback the drill did not cause proves nothing.
func TestFallbackDrillOnFakes(t *testing.T) {
	r := newWRig(t)
	if _, res := r.call(t, "fallback_drill", map[string]any{"node": wNode}); res.Status != StatusRefused {
		t.Fatalf("drill before the window opened: %s %v", res.Status, res.Reasons)
	}
	r.installDone(t)
	res := r.approve(t, "fallback_drill", map[string]any{"node": wNode})
	if res.Status != StatusInProgress || res.NextAction == "" {
		t.Fatalf("drill: %s %v", res.Status, res.Reasons)
	}
	if n := r.host.Count("drill-arm"); n != 1 {
		t.Fatalf("drill armed %d times", n)
	}
	np, _ := (&window.Round{ID: wRound, Book: r.d.Book}).NodePlan(wNode)
	if np.DrillStarted.IsZero() || np.Drill == nil || np.DrillApproval == "" {
		t.Fatalf("the drill in flight is not recorded with its approval: %+v", np)
	}
	// The host came back on the old kernel but the drill's unit reports
	// that it never fired: that is no proof of the fallback.
	r.host.Boot(true)
	_, res = r.call(t, "fallback_drill", map[string]any{"node": wNode})
	if res.Status != StatusFailed || !strings.Contains(strings.Join(res.Reasons, " "), "did not prove the fallback") || res.NextAction == "" {
		t.Fatalf("drill follow, fell back without the drill firing: %s %v", res.Status, res.Reasons)
	}
	np, _ = (&window.Round{ID: wRound, Book: r.d.Book}).NodePlan(wNode)
	if np.DrillPassed {
		t.Fatalf("an unproven drill recorded as passed: %+v", np)
	}
	if n := r.host.Count("drill-arm"); n != 1 {
		t.Fatalf("the follow armed the drill again (%d)", n)
	}
}
