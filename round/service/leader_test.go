package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube/leader"
)

// seenLeadership is an election as this server sees it at one moment.
type seenLeadership struct {
	observed error
	leads    bool
	leader   string
	checked  error
}

func (s *seenLeadership) Identity() string               { return "ops-1" }
func (s *seenLeadership) Observed(context.Context) error { return s.observed }
func (s *seenLeadership) IsLeader() bool                 { return s.leads }
func (s *seenLeadership) Leader() string                 { return s.leader }
func (s *seenLeadership) Admit(context.Context) (leader.Fence, error) {
	return leader.Fence{Identity: "ops-1"}, nil
}
func (s *seenLeadership) Check(context.Context, leader.Fence) error { return s.checked }
func (s *seenLeadership) Wait(ctx context.Context, leading bool) error {
	if s.leads == leading {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestFollowerAndFence(t *testing.T) {
	fenced := errors.New(`fence failed: the leader Lease is now held by "ops-2"`)
	tests := []struct {
		name       string
		l          *seenLeadership
		off        bool
		wantRefuse string // "" means the call may go on
	}{
		{name: "election off", off: true},
		{name: "the leader", l: &seenLeadership{leads: true, leader: "ops-1"}},
		{name: "a follower", l: &seenLeadership{leader: "ops-2"}, wantRefuse: "this server (ops-1) is a follower; the leader is ops-2; call it"},
		{name: "the Lease not read yet", l: &seenLeadership{observed: context.DeadlineExceeded}, wantRefuse: "cannot tell which server leads"},
		{name: "seen as the holder, not leading", l: &seenLeadership{leader: "ops-1"}, wantRefuse: "no server leads now"},
		{name: "no holder", l: &seenLeadership{}, wantRefuse: "no server leads now"},
		{name: "the leader, fenced off", l: &seenLeadership{leads: true, leader: "ops-1", checked: fenced}, wantRefuse: "fenced off just before it acted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.DefaultConfig()
			c.LeaderElection.Enabled = !tt.off
			c.LeaderElection.LeaseDuration = config.Duration(50 * time.Millisecond)
			d := &Service{Config: &c, Log: slog.New(slog.DiscardHandler)}
			if tt.l != nil {
				d.Leader = tt.l
			}
			f, err := d.AdmitLeader(t.Context(), "drain_node")
			if err == nil {
				err = d.CheckFence(t.Context(), "drain_node", "gpu-1", f)
			}
			if tt.wantRefuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if (f == nil) != tt.off {
					t.Fatalf("fence %v with the election off: %v", f, tt.off)
				}
				return
			}
			var ref *answer.Refusal
			if !errors.As(err, &ref) || !strings.Contains(strings.Join(ref.Reasons, "; "), tt.wantRefuse) ||
				!strings.Contains(strings.Join(ref.Reasons, "; "), "nothing was executed") {
				t.Fatalf("got %v, want a refusal saying %q and that nothing was executed", err, tt.wantRefuse)
			}
		})
	}
}
