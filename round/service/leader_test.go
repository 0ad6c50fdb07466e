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
	"github.com/mcp-patch/mcp-patch/round/window"
)

// seenLeadership is an election as this server sees it at one moment.
type seenLeadership struct {
	observed error
	leads    bool
	leader   string
	checked  error
	// after is the leader Lease StepDown answers, stepErr its error;
	// steppedDown counts the calls.
	after       leader.LeaseState
	stepErr     error
	steppedDown int
}

func (s *seenLeadership) Identity() string               { return "ops-1" }
func (s *seenLeadership) Observed(context.Context) error { return s.observed }
func (s *seenLeadership) IsLeader() bool                 { return s.leads }
func (s *seenLeadership) Leader() string                 { return s.leader }
func (s *seenLeadership) Admit(context.Context) (leader.Fence, error) {
	return leader.Fence{Identity: "ops-1"}, nil
}
func (s *seenLeadership) Check(context.Context, leader.Fence) error { return s.checked }
func (s *seenLeadership) StepDown(context.Context, time.Duration) (leader.LeaseState, error) {
	s.steppedDown++
	if s.stepErr != nil {
		return leader.LeaseState{}, s.stepErr
	}
	s.leads, s.leader = false, s.after.Holder
	return s.after, nil
}
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
			f, err := d.AdmitLeader(t.Context(), "drain_node", "gpu-1")
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

func TestDecideOwnNode(t *testing.T) {
	tests := []struct {
		name            string
		runsOn, target  string
		election, leads bool
		want            OwnNode
	}{
		{name: "an admin host that is not a node", target: "cp-1", election: true, leads: true, want: OwnNodeGoOn},
		{name: "another node", runsOn: "cp-1", target: "gpu-3", election: true, leads: true, want: OwnNodeGoOn},
		{name: "the fleet", runsOn: "cp-1", target: window.FleetTarget, election: true, leads: true, want: OwnNodeGoOn},
		{name: "the leader on its own node", runsOn: "cp-1", target: "cp-1", election: true, leads: true, want: OwnNodeHandOver},
		{name: "a follower on its own node", runsOn: "cp-1", target: "cp-1", election: true, want: OwnNodeRefuse},
		{name: "one server on its own node", runsOn: "cp-1", target: "cp-1", want: OwnNodeRefuse},
		{name: "one server, another node", runsOn: "cp-1", target: "cp-2", want: OwnNodeGoOn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecideOwnNode(tt.runsOn, tt.target, tt.election, tt.leads); got != tt.want {
				t.Fatalf("DecideOwnNode(%q, %q, election %v, leads %v) = %v, want %v", tt.runsOn, tt.target, tt.election, tt.leads, got, tt.want)
			}
		})
	}
}

// The leader asked to act on the node it runs on hands the lead over and
// refuses, naming the new leader or saying who takes over; nothing else
// is admitted there; another node is admitted.
func TestOwnNodeAtAdmission(t *testing.T) {
	lost := errors.New("read Lease kube-system/mcp-patch-leader: connection refused")
	tests := []struct {
		name        string
		l           *seenLeadership
		off         bool
		node        string
		wantRefuse  []string // nil means admitted
		wantStepped int
	}{
		{name: "the leader, another node", l: &seenLeadership{leads: true, leader: "ops-1"}, node: "gpu-3"},
		{name: "the leader, its node, the other took over", node: "cp-1", wantStepped: 1,
			l:          &seenLeadership{leads: true, leader: "ops-1", after: leader.LeaseState{Exists: true, Holder: "ops-2", Transitions: 2}},
			wantRefuse: []string{"this server runs on cp-1, the node drain_node works on", "handed the lead over", `held by "ops-2"`, "Call drain_node again on the new leader, ops-2"}},
		{name: "the leader, its node, the Lease let go", node: "cp-1", wantStepped: 1,
			l:          &seenLeadership{leads: true, leader: "ops-1", after: leader.LeaseState{Exists: true, Transitions: 1}},
			wantRefuse: []string{"handed the lead over: the leader Lease is free", "the other server takes the lead within"}},
		{name: "the leader, its node, the release lost", node: "cp-1", wantStepped: 1,
			l:          &seenLeadership{leads: true, leader: "ops-1", after: leader.LeaseState{Exists: true, Holder: "ops-1", Transitions: 1}},
			wantRefuse: []string{"release did not reach the API server: the Lease lapses within"}},
		{name: "the leader, its node, step-down not confirmed", node: "cp-1", wantStepped: 1,
			l:          &seenLeadership{leads: true, leader: "ops-1", stepErr: lost},
			wantRefuse: []string{"handing the lead over was not confirmed", "connection refused"}},
		{name: "the leader lost the lead while stepping down", node: "cp-1", wantStepped: 1,
			l:          &seenLeadership{leads: true, leader: "ops-1", stepErr: leader.ErrNotLeading},
			wantRefuse: []string{"this server no longer leads"}},
		{name: "a follower on its node names the leader", node: "cp-1", l: &seenLeadership{leader: "ops-2"},
			wantRefuse: []string{"this server (ops-1) is a follower; the leader is ops-2"}},
		{name: "one server on its node", node: "cp-1", off: true,
			wantRefuse: []string{"this server runs on cp-1", "leader_election is off: there is no other server"}},
		{name: "one server, another node", node: "gpu-3", off: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.DefaultConfig()
			c.NodeName = "cp-1"
			c.LeaderElection.Enabled = !tt.off
			c.LeaderElection.LeaseDuration = config.Duration(time.Minute)
			d := &Service{Config: &c, Log: slog.New(slog.DiscardHandler)}
			if tt.l != nil {
				d.Leader = tt.l
			}
			_, err := d.AdmitLeader(t.Context(), "drain_node", tt.node)
			if tt.l != nil && tt.l.steppedDown != tt.wantStepped {
				t.Errorf("stepped down %d times, want %d", tt.l.steppedDown, tt.wantStepped)
			}
			if tt.wantRefuse == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ref *answer.Refusal
			if !errors.As(err, &ref) {
				t.Fatalf("got %v, want a refusal", err)
			}
			text := strings.Join(ref.Reasons, "; ") + "; next: " + ref.NextAction
			for _, want := range append(tt.wantRefuse, "nothing was executed") {
				if !strings.Contains(text, want) {
					t.Errorf("refusal %q does not say %q", text, want)
				}
			}
		})
	}
}
