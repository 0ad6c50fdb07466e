package window_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestWindowEnded(t *testing.T) {
	closed := func(seq uint64) *round.NodeState {
		return &round.NodeState{Position: round.Position{Node: node}, Window: round.WindowClosed, ClosedSeq: seq}
	}
	open := &round.NodeState{Position: round.Position{Node: node}, Window: round.WindowOpen}
	for _, c := range []struct {
		name string
		rec  round.Record
		st   *round.State
		want string
	}{
		{"green gate closed it", round.Record{Seq: 9, Kind: round.KindStepFinished, Step: round.StepGate, Node: node},
			&round.State{Nodes: []*round.NodeState{closed(9)}}, node},
		{"accepted red gate closed it", round.Record{Seq: 12, Kind: round.KindDecision, Decision: round.DecisionResidualRiskAccepted, Step: round.StepGate, Node: node},
			&round.State{Nodes: []*round.NodeState{closed(12)}}, node},
		{"closed earlier, not by this record", round.Record{Seq: 13, Kind: round.KindStepFinished, Step: round.StepGate, Node: node},
			&round.State{Nodes: []*round.NodeState{closed(9)}}, ""},
		{"gate green, window still open (promote not green)", round.Record{Seq: 9, Kind: round.KindStepFinished, Step: round.StepGate, Node: node},
			&round.State{Nodes: []*round.NodeState{open}, Current: node}, ""},
		{"abort while the window is open", round.Record{Seq: 20, Kind: round.KindDecision, Decision: round.DecisionAbort, Node: node},
			&round.State{Nodes: []*round.NodeState{open}, Current: node, Aborted: true}, node},
		{"abort with no window open", round.Record{Seq: 20, Kind: round.KindDecision, Decision: round.DecisionAbort, Node: node},
			&round.State{Nodes: []*round.NodeState{closed(9)}, Aborted: true}, ""},
		{"resume ends nothing", round.Record{Seq: 21, Kind: round.KindDecision, Decision: round.DecisionResume, Node: node},
			&round.State{Nodes: []*round.NodeState{open}, Current: node}, ""},
		{"round step", round.Record{Seq: 22, Kind: round.KindStepFinished, Step: round.StepFleetCheck},
			&round.State{Nodes: []*round.NodeState{closed(9)}}, ""},
		{"no state", round.Record{Seq: 9, Node: node}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := window.WindowEnded(c.rec, c.st); got != c.want {
				t.Errorf("WindowEnded = %q, want %q", got, c.want)
			}
		})
	}
}

// silencer is a Silencer that expires the ids it holds or fails.
type silencer struct {
	ids   []string
	err   error
	calls []string
}

func (s *silencer) Unsilence(_ context.Context, roundID, n string) ([]string, error) {
	s.calls = append(s.calls, roundID+"/"+n)
	return s.ids, s.err
}

type failingRelease struct{ window.Lease }

func (failingRelease) Release(context.Context, string, string) error {
	return errors.New("leases.coordination.k8s.io is forbidden")
}

func TestReleaseLetsGoOfTheLeaseAndTheSilenceJournaled(t *testing.T) {
	ctx := context.Background()
	t.Run("both released", func(t *testing.T) {
		r := newRig(t)
		if err := r.w.HoldLease(ctx, round.StepDrain, node); err != nil {
			t.Fatal(err)
		}
		sil := &silencer{ids: []string{"s-1"}}
		r.w.Silencer = sil
		reasons, err := r.w.Release(ctx, node)
		if err != nil || r.lease.Holder != "" || len(sil.calls) != 1 || sil.calls[0] != r.j.RoundID()+"/"+node {
			t.Fatalf("release: %v, Lease %+v, silencer %v", err, r.lease, sil.calls)
		}
		want := "window Lease released; Alertmanager silence of " + node + " expired (s-1)"
		if strings.Join(reasons, "; ") != want {
			t.Errorf("reasons %q, want %q", reasons, want)
		}
		rel := r.j.State().Releases
		if len(rel) != 1 || rel[0].Node != node || rel[0].Detail != want {
			t.Errorf("journaled releases %+v", rel)
		}
	})
	t.Run("failures are reasons, journaled, and the other is still tried", func(t *testing.T) {
		r := newRig(t)
		r.w.Lease = failingRelease{r.lease}
		sil := &silencer{err: errors.New("could not read alerts from http://am: connection refused")}
		r.w.Silencer = sil
		reasons, err := r.w.Release(ctx, node)
		if err != nil || len(sil.calls) != 1 {
			t.Fatalf("release: %v, silencer %v", err, sil.calls)
		}
		got := strings.Join(reasons, "; ")
		for _, w := range []string{"the window Lease was not released (it is no longer renewed and lapses by itself): leases.coordination.k8s.io is forbidden",
			"the Alertmanager silence of " + node + " was not removed (it ends at its own time): could not read alerts"} {
			if !strings.Contains(got, w) {
				t.Errorf("reasons %q lack %q", got, w)
			}
		}
		if rel := r.j.State().Releases; len(rel) != 1 || rel[0].Detail != got {
			t.Errorf("journaled releases %+v, want %q", rel, got)
		}
	})
	t.Run("nothing held: nothing said or journaled", func(t *testing.T) {
		r := newRig(t)
		r.w.Lease = nil
		before := r.j.State().LastSeq
		if reasons, err := r.w.Release(ctx, node); err != nil || len(reasons) != 0 || r.j.State().LastSeq != before {
			t.Fatalf("release with nothing held: %q %v, journal %d → %d", reasons, err, before, r.j.State().LastSeq)
		}
	})
}
