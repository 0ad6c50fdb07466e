package round

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round/maintenance"
)

func TestETA(t *testing.T) {
	h := time.Hour
	// Two windows closed (1h and 2h: median 1.5h), the window of cp-2 open for 30m.
	b := planned(t, soak48)
	for i, n := range []string{"cp-1", "cp-3"} {
		b.window(n)
		node := b.s.Node(n)
		node.ClosedAt = node.Opened.Add([]time.Duration{h, 2 * h}[i])
	}
	b.ok(StepSnapshot, "cp-2")
	b.ok(StepDrain, "cp-2")
	now := b.s.Node("cp-2").Opened.Add(30 * time.Minute)

	tests := []struct {
		name      string
		state     *State
		measured  map[string]time.Duration
		deadline  time.Duration // after now; 0 = none
		cfg       ETAConfig
		wantLeft  time.Duration
		meets     bool
		sources   []string
		wantError bool
	}{
		{
			name:     "median of this round's windows, 48h deadline met",
			state:    b.s,
			deadline: 48 * h,
			// cp-2 median 1.5h-0.5h = 1h; gpu-a, gpu-b, vm-1 at 1.5h each.
			wantLeft: h + 3*(90*time.Minute),
			meets:    true,
			sources:  []string{"median", "median", "median", "median"},
		},
		{
			name:     "measured windows from earlier rounds, between-window pause, deadline missed",
			state:    b.s,
			measured: map[string]time.Duration{"gpu-a": 10 * h, "gpu-b": 6 * h, "vm-1": 4 * h},
			cfg:      ETAConfig{BetweenWindows: h},
			deadline: 20 * h,
			// median of {1h, 2h, 10h, 6h, 4h} = 4h: cp-2 3.5h; gpu-a 11h, gpu-b 7h, vm-1 5h.
			wantLeft: 3*h + 30*time.Minute + 11*h + 7*h + 5*h,
			meets:    false,
			sources:  []string{"median", "measured", "measured", "measured"},
		},
		{
			name:     "nothing measured: the default",
			state:    planned(t, soak48).s,
			cfg:      ETAConfig{DefaultWindow: 2 * h},
			deadline: 14 * 24 * h,
			wantLeft: 12 * h,
			meets:    true,
			sources:  []string{"default", "default", "default", "default", "default", "default"},
		},
		{
			name:      "nothing measured and no default",
			state:     planned(t, soak48).s,
			wantError: true,
		},
		{
			name:     "no deadline",
			state:    b.s,
			wantLeft: h + 3*(90*time.Minute),
			meets:    true,
			sources:  []string{"median", "median", "median", "median"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var deadline time.Time
			if tc.deadline > 0 {
				deadline = now.Add(tc.deadline)
			}
			est, err := ETA(tc.state, tc.measured, now, deadline, tc.cfg)
			if tc.wantError {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := est.PatchedBy.Sub(now); got != tc.wantLeft {
				t.Errorf("patched in %s, want %s", got, tc.wantLeft)
			}
			if est.Meets != tc.meets {
				t.Errorf("meets = %v, want %v (slack %s)", est.Meets, tc.meets, est.Slack)
			}
			var sources []string
			for _, r := range est.Remaining {
				sources = append(sources, r.Source)
			}
			if diff := cmp.Diff(tc.sources, sources); diff != "" {
				t.Errorf("sources (-want +got):\n%s", diff)
			}
			if !deadline.IsZero() && est.Slack != deadline.Sub(est.PatchedBy) {
				t.Errorf("slack %s", est.Slack)
			}
			if want := est.PatchedBy.Add(soak48); !est.SoakEndsBy.Equal(want) {
				t.Errorf("soak ends by %v, want %v", est.SoakEndsBy, want)
			}
		})
	}
}

func TestETAUnderMaintenanceWindows(t *testing.T) {
	sched, err := maintenance.Compile([]maintenance.Declared{{
		Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, Start: "20:00", End: "23:00", TimeZone: "UTC"}})
	if err != nil {
		t.Fatal(err)
	}
	s := planned(t, soak48).s // six nodes, nothing measured
	now := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	deadline := time.Date(2026, 11, 8, 21, 0, 0, 0, time.UTC)
	// 2h windows in 3h evenings: one node a night, from tonight.
	est, err := ETA(s, nil, now, deadline, ETAConfig{DefaultWindow: 2 * time.Hour, Maintenance: sched})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 8, 22, 0, 0, 0, time.UTC); !est.PatchedBy.Equal(want) {
		t.Errorf("patched by %s, want %s", est.PatchedBy, want)
	}
	if est.Meets || est.WindowTimeNeeded != 12*time.Hour || est.WindowTimeLeft != 16*time.Hour {
		t.Errorf("meets %v, window time needed %s left %s; want false, 12h, 16h", est.Meets, est.WindowTimeNeeded, est.WindowTimeLeft)
	}
	// A node longer than every window: a clear error, not a date.
	if _, err := ETA(s, nil, now, deadline, ETAConfig{DefaultWindow: 4 * time.Hour, Maintenance: sched}); err == nil ||
		!strings.Contains(err.Error(), "no maintenance window is long enough") {
		t.Errorf("err = %v", err)
	}
}
