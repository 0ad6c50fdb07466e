package window

import (
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/maintenance"
)

// MaintenanceView is where the round stands against the intent's
// maintenance windows (round_status shows it).
type MaintenanceView struct {
	InWindow   bool      `json:"in_window"`
	WindowEnds time.Time `json:"window_ends,omitzero"`
	NextOpens  time.Time `json:"next_opens,omitzero"`
	// Expected is the window a node is assumed to need and where the figure
	// comes from (median of this round's windows, or the intent's estimate).
	Expected       round.Duration `json:"expected_window"`
	ExpectedSource string         `json:"expected_source"`
	// DrainAdmitted says whether a drain may start now; NextFit is when the
	// next node's window fits, when it may not.
	DrainAdmitted bool      `json:"drain_admitted"`
	NextFit       time.Time `json:"next_fit,omitzero"`
	Reason        string    `json:"reason,omitempty"`
}

// Maintenance compiles the intent's maintenance windows m for a round
// whose closed windows took closed (round.State.WindowDurations), at now;
// ok is false when the intent declares none (work may start at any time).
func Maintenance(m *intent.MaintenanceSettings, closed map[string]time.Duration, now time.Time) (maintenance.Schedule, MaintenanceView, bool, error) {
	if m == nil {
		return maintenance.Schedule{}, MaintenanceView{}, false, nil
	}
	sched, err := m.Schedule()
	if err != nil {
		return maintenance.Schedule{}, MaintenanceView{}, false, err
	}
	lengths := make([]time.Duration, 0, len(closed))
	for _, d := range closed {
		lengths = append(lengths, d)
	}
	exp := maintenance.ExpectedWindow(lengths, m.Estimate())
	dec := maintenance.AdmitStart(sched, now, exp)
	v := MaintenanceView{Expected: round.Duration(exp.Length), ExpectedSource: exp.Source,
		DrainAdmitted: dec.Admit, NextFit: dec.NextFit, Reason: dec.Reason}
	if cur, in := sched.Current(now); in {
		v.InWindow, v.WindowEnds = true, cur.End
	}
	if next, ok := sched.NextOpen(now); ok {
		v.NextOpens = next.Start
	}
	return sched, v, true, nil
}

// AdmitMaintenance refuses to start node's window (its drain) when the
// node's expected window does not fit before the maintenance window ends
// (Maintenance). A Refusal changes nothing and does not stop the round: it
// waits.
func AdmitMaintenance(m *intent.MaintenanceSettings, closed map[string]time.Duration, now time.Time, node string) error {
	_, v, ok, err := Maintenance(m, closed, now)
	if err != nil {
		return refuse("Fix the maintenance section of os-layer/settings.yaml.", err.Error(), "nothing was cordoned")
	}
	if !ok || v.DrainAdmitted {
		return nil
	}
	next := "Wait: no maintenance window long enough is coming; a person lengthens a window or lowers estimated_window_minutes in os-layer/settings.yaml."
	if !v.NextFit.IsZero() {
		next = fmt.Sprintf("Wait until %s (the next maintenance window %s's expected window fits in), then call drain_node again; round_status says the same.",
			v.NextFit.Format(time.RFC3339), node)
	}
	return refuse(next, "maintenance window: "+v.Reason, "nothing was cordoned")
}

// ApplyMaintenance puts the maintenance rule into a status: when the next
// step would start a node's window and it does not fit, the next call
// waits for the window it fits in.
func ApplyMaintenance(status *round.Status, v MaintenanceView) {
	nx := status.Next
	if nx == nil || nx.Step != round.StepDrain || nx.Recheck || v.DrainAdmitted {
		return
	}
	if v.NextFit.IsZero() {
		status.NextAction = "Wait: " + v.Reason
		nx.Tool = ""
		return
	}
	nx.WaitUntil = v.NextFit
	status.NextAction = fmt.Sprintf("Wait until %s, when the next maintenance window that fits %s opens; then drain_node %s. (%s)",
		v.NextFit.Format(time.RFC3339), nx.Node, nx.Node, v.Reason)
}

// ETAConfig is the estimate's settings from the intent: the maintenance
// windows and their estimated node window, else one hour a node at any
// time.
func ETAConfig(s intent.Settings) round.ETAConfig {
	cfg := round.ETAConfig{DefaultWindow: time.Hour}
	if m := s.Maintenance; m != nil {
		if sched, err := m.Schedule(); err == nil {
			cfg.Maintenance, cfg.DefaultWindow = sched, m.Estimate()
		}
	}
	return cfg
}
