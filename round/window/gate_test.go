package window_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestDecideRedGate(t *testing.T) {
	t0 := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	settle := 10 * time.Minute
	for _, tc := range []struct {
		name     string
		since    time.Time
		now      time.Time
		first    bool
		settling bool
		next     string
	}{
		{name: "turns red now", now: t0, first: true, settling: true, next: "settle until 2026-11-03T09:10:00Z"},
		{name: "red a while, within the settle time", since: t0, now: t0.Add(9 * time.Minute), settling: true, next: "settle until 2026-11-03T09:10:00Z"},
		{name: "the settle time is over", since: t0, now: t0.Add(settle), next: "Stop: the gate stayed red"},
		{name: "long past it", since: t0, now: t0.Add(3 * time.Hour), next: "Stop: the gate stayed red"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := window.DecideRedGate(tc.since, tc.now, settle)
			if r.First != tc.first || r.Settling != tc.settling || !strings.Contains(r.Next(), tc.next) {
				t.Fatalf("got %+v (%q), want first=%v settling=%v naming %q", r, r.Next(), tc.first, tc.settling, tc.next)
			}
			if want := tc.since; !tc.first && !r.Since.Equal(want) || tc.first && !r.Since.Equal(tc.now) {
				t.Fatalf("red since %v", r.Since)
			}
		})
	}
	if r := window.DecideRedGate(time.Time{}, t0, 0); !r.First || r.Settling {
		t.Fatalf("no settle time: a red gate stops at once: %+v", r)
	}
}
