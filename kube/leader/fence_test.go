package leader

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecideFence(t *testing.T) {
	now := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	ours := LeaseState{Exists: true, Holder: "ops-1", Transitions: 4, RenewTime: now.Add(-5 * time.Second), Duration: 15 * time.Second}
	freeWindow := LeaseState{Exists: true, Transitions: 2}
	ourWindow := LeaseState{Exists: true, Holder: "ops-1", Transitions: 3, RenewTime: now.Add(-30 * time.Second), Duration: time.Minute}
	admitted := Fence{Identity: "ops-1", Leader: ours, Window: freeWindow}
	with := func(s LeaseState, edit func(*LeaseState)) LeaseState { edit(&s); return s }
	tests := []struct {
		name           string
		fence          Fence
		leader, window LeaseState
		leading        bool
		wantErrPart    string // "" means the step may act
	}{
		{name: "unchanged, renewed since", fence: admitted, leader: with(ours, func(s *LeaseState) { s.RenewTime = now.Add(-time.Second) }), window: freeWindow, leading: true},
		{name: "unchanged, the window ours and renewed", fence: Fence{Identity: "ops-1", Leader: ours, Window: ourWindow}, leader: ours,
			window: with(ourWindow, func(s *LeaseState) { s.RenewTime = now }), leading: true},
		{name: "no window Lease yet, none now", fence: Fence{Identity: "ops-1", Leader: ours}, leader: ours, leading: true},
		{name: "admitted without an identity", fence: Fence{Leader: ours}, leader: ours, leading: true, wantErrPart: "identity"},
		{name: "admitted as a follower", fence: Fence{Identity: "ops-1", Leader: with(ours, func(s *LeaseState) { s.Holder = "ops-2" })},
			leader: ours, leading: true, wantErrPart: `it was held by "ops-2"`},
		{name: "the elector gave up", fence: admitted, leader: ours, window: freeWindow, leading: false, wantErrPart: "no longer leads"},
		{name: "Lease deleted", fence: admitted, leader: LeaseState{}, window: freeWindow, leading: true, wantErrPart: "gone"},
		{name: "another holds it", fence: admitted, leader: with(ours, func(s *LeaseState) { s.Holder = "ops-2"; s.Transitions = 5 }),
			window: freeWindow, leading: true, wantErrPart: `now held by "ops-2"`},
		{name: "released", fence: admitted, leader: with(ours, func(s *LeaseState) { s.Holder = "" }), window: freeWindow, leading: true,
			wantErrPart: "now free"},
		{name: "lost and taken back", fence: admitted, leader: with(ours, func(s *LeaseState) { s.Transitions = 6 }), window: freeWindow,
			leading: true, wantErrPart: "changed hands"},
		{name: "expired by this clock", fence: admitted, leader: with(ours, func(s *LeaseState) { s.RenewTime = now.Add(-15 * time.Second) }),
			window: freeWindow, leading: true, wantErrPart: "have passed"},
		{name: "no renew time", fence: admitted, leader: with(ours, func(s *LeaseState) { s.RenewTime = time.Time{} }), window: freeWindow,
			leading: true, wantErrPart: "no renew time"},
		{name: "window taken since", fence: admitted, leader: ours, window: with(freeWindow, func(s *LeaseState) { s.Holder = "ops-2"; s.Transitions = 3 }),
			leading: true, wantErrPart: "window Lease changed"},
		{name: "window changed hands and back", fence: Fence{Identity: "ops-1", Leader: ours, Window: ourWindow}, leader: ours,
			window: with(ourWindow, func(s *LeaseState) { s.Transitions = 5 }), leading: true, wantErrPart: "window Lease changed"},
		{name: "window deleted", fence: admitted, leader: ours, window: LeaseState{}, leading: true, wantErrPart: "it is absent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := DecideFence(tt.fence, tt.leader, tt.window, tt.leading, now)
			if tt.wantErrPart == "" {
				if err != nil {
					t.Fatalf("DecideFence: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), tt.wantErrPart) {
				t.Fatalf("DecideFence = %v, want ErrFenced saying %q", err, tt.wantErrPart)
			}
		})
	}
}
