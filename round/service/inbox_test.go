package service

import (
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
)

func TestInboxStatus(t *testing.T) {
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	now := start.Add(30 * time.Hour)
	tests := []struct {
		name     string
		st       *round.State
		days     int
		phase    string
		node     string
		deadline time.Time
	}{
		{name: "no round", st: nil, days: 2, phase: "not_planned"},
		{name: "stopped on a node", st: &round.State{RoundID: "production-2026-12", Started: start, Stop: &round.Stop{Node: "gpu-3", Step: round.StepGate}},
			days: 2, phase: "stopped", node: "gpu-3", deadline: start.Add(48 * time.Hour)},
		{name: "no compliance clock", st: &round.State{RoundID: "2026-12", Started: start}, days: 0, phase: "not_planned"},
		{name: "closed: no deadline left", st: &round.State{RoundID: "staging-2026-12", Started: start, Closed: true}, days: 14, phase: "closed"},
		{name: "aborted: no deadline left", st: &round.State{RoundID: "staging-2026-12", Started: start, Aborted: true}, days: 14, phase: "aborted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := InboxStatus(tt.st, "production", "server-a", tt.days, now)
			if s.Phase != tt.phase || s.Node != tt.node || !s.Deadline.Equal(tt.deadline) || s.Environment != "production" || s.Server != "server-a" || !s.Updated.Equal(now) {
				t.Fatalf("InboxStatus = %+v", s)
			}
		})
	}
}

func TestComplianceDays(t *testing.T) {
	k := intent.Settings{Kernel: &intent.KernelSettings{}}
	k.Kernel.ComplianceDeadlineDays.Internal = 14
	if d := complianceDays(k, intent.Environment{ComplianceDeadlineDays: 2}, true); d != 2 {
		t.Errorf("an environment's clock: %d", d)
	}
	if d := complianceDays(k, intent.Environment{}, false); d != 14 {
		t.Errorf("the intent's internal clock: %d", d)
	}
	if d := complianceDays(intent.Settings{}, intent.Environment{}, false); d != 0 {
		t.Errorf("no clock: %d", d)
	}
}
