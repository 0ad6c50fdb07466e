package window_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/maintenance"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// The maintenance rule before a node's window: outside the intent's
// windows, or too late in one for the node's expected window, the drain is
// refused (nothing written, the round not stopped) and round_status waits
// for the window it fits in; inside with room, or with no maintenance
// section, it is admitted.
func TestMaintenanceWindowGatesTheDrain(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 3, 12, 0, 0, 0, berlin) // a Tuesday, noon
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(o, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := &intent.MaintenanceSettings{
		EstimatedWindowMinutes: 90,
		Windows:                []maintenance.Declared{{Days: []string{"tue", "thu"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}},
	}
	closed := j.State().WindowDurations()
	before := j.State().LastSeq

	// Outside the window: refused, nothing recorded, the round not stopped.
	err = window.AdmitMaintenance(m, closed, now, "gpu-a")
	var r *window.Refusal
	if !errors.As(err, &r) || !strings.Contains(r.Next, "Wait until 2026-11-03T22:00:00+01:00") ||
		!strings.Contains(r.Error(), "outside the maintenance windows") || !strings.Contains(r.Error(), "nothing was cordoned") {
		t.Fatalf("outside: %v", err)
	}
	if j.State().LastSeq != before || j.State().Stop != nil {
		t.Fatal("a maintenance refusal wrote to the journal or stopped the round")
	}
	// round_status: the next call waits for the window.
	status := j.State().Status(now)
	status.Next = &round.Next{Node: "gpu-a", Step: round.StepDrain, Tool: "drain_node"}
	_, v, ok, err := window.Maintenance(m, closed, now)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	window.ApplyMaintenance(&status, v)
	if want := time.Date(2026, 11, 3, 22, 0, 0, 0, berlin); !status.Next.WaitUntil.Equal(want) || window.NextCall(j.State(), status) != nil ||
		!strings.Contains(status.NextAction, "Wait until") || !v.NextOpens.Equal(want) {
		t.Fatalf("status next %+v action %q view %+v", status.Next, status.NextAction, v)
	}

	// Inside with room: admitted. At 03:00 with 1h left of 90m: cut off
	// until Thursday's window.
	now = time.Date(2026, 11, 3, 23, 0, 0, 0, berlin)
	if err := window.AdmitMaintenance(m, closed, now, "gpu-a"); err != nil {
		t.Fatalf("inside: %v", err)
	}
	now = time.Date(2026, 11, 4, 3, 0, 0, 0, berlin)
	if err := window.AdmitMaintenance(m, closed, now, "gpu-a"); !errors.As(err, &r) || !strings.Contains(r.Next, "2026-11-05T22:00:00+01:00") {
		t.Fatalf("cutoff: %v", err)
	}
	// No maintenance section: no restriction.
	if err := window.AdmitMaintenance(nil, closed, now, "gpu-a"); err != nil {
		t.Fatal(err)
	}
}
