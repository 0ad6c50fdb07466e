package window_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestSimulateAutoremoveNamesFailedNodes(t *testing.T) {
	for _, c := range []struct {
		name        string
		unreachable bool
		action      string
		problems    int
		removals    []string
		ran         int
	}{
		{"simulation", false, "simulate", 0, []string{"linux-image-6.8.0-45-generic"}, 0},
		{"run", false, steps.AutoremoveRun, 0, []string{"linux-image-6.8.0-45-generic"}, 1},
		{"host down", true, "simulate", 1, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.host.Unreachable = c.unreachable
			r.host.Autoremoved = map[string][]string{node: {"linux-image-6.8.0-45-generic"}}
			res, problems := r.w.SimulateAutoremove(context.Background(), []string{node}, map[string]string{node: running}, c.action, 2)
			if len(problems) != c.problems {
				t.Fatalf("problems %q, want %d", problems, c.problems)
			}
			if c.problems > 0 && !strings.HasPrefix(problems[0], node+": ") {
				t.Errorf("problem %q does not name the node", problems[0])
			}
			if len(res) != 1 || strings.Join(res[0].Removals, ",") != strings.Join(c.removals, ",") {
				t.Errorf("results %+v, want removals %q", res, c.removals)
			}
			if n := r.host.Count("autoremove"); n != c.ran {
				t.Errorf("autoremove ran %d times, want %d", n, c.ran)
			}
		})
	}
}

func TestAutoremoveBeforeTheSoakIsRefusedAndRemovesNothing(t *testing.T) {
	r := newRig(t)
	r.host.Autoremoved = map[string][]string{node: {"linux-image-6.8.0-45-generic"}}
	res, problems := r.w.SimulateAutoremove(context.Background(), []string{node}, nil, "simulate", 1)
	p, err := window.DecideAutoremove(res, problems)
	if err != nil {
		t.Fatal(err)
	}
	if p.Step() != round.StepAutoremove || p.Target() != window.FleetTarget {
		t.Errorf("autoremove plan step %q target %q", p.Step(), p.Target())
	}
	before := len(r.j.State().Nodes)
	_, err = r.w.Autoremove(context.Background(), p, grant(p, "a-rm"), nil, 1)
	if err == nil || !strings.Contains(err.Error(), "fleet kernel check") {
		t.Fatalf("autoremove before the fleet check and soak: %v", err)
	}
	if n := r.host.Count("autoremove"); n != 0 {
		t.Fatalf("a refused autoremove ran %d times", n)
	}
	if got := r.j.State().RoundSteps[round.StepAutoremove]; got != nil && got.State == round.InFlight {
		t.Fatalf("a refused autoremove was journaled in flight: %+v", got)
	}
	if len(r.j.State().Nodes) != before {
		t.Fatal("nodes changed")
	}
}

func TestReleaseLeaseOnlyOurs(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.drained(t)
	if r.lease.Holder != "server-a" {
		t.Fatalf("the drain did not take the Lease: %+v", r.lease)
	}
	if err := r.w.ReleaseLease(ctx, "gpu-2"); err != nil || r.lease.Holder != "server-a" {
		t.Fatalf("release of another node's Lease let ours go: %v %+v", err, r.lease)
	}
	if err := r.w.ReleaseLease(ctx, node); err != nil || r.lease.Holder != "" || r.lease.Releases != 1 {
		t.Fatalf("release: %v %+v", err, r.lease)
	}
	r.w.Lease = nil
	if err := r.w.ReleaseLease(ctx, node); err != nil {
		t.Fatalf("release without a Lease: %v", err)
	}
	if err := r.w.HoldLease(ctx, round.StepInstall, node); err != nil {
		t.Fatalf("hold without a Lease: %v", err)
	}
}

func TestHoldLeaseRefusesAnotherOperatorsWindowAndStopsOnALostOne(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	// No window open here yet: another holder is a refusal, nothing stops.
	r.lease.Steal("server-b")
	err := r.w.HoldLease(ctx, round.StepDrain, node)
	var ref *window.Refusal
	if !errors.As(err, &ref) || !strings.Contains(ref.Next, "Another operator's window is open") {
		t.Fatalf("hold while another holds it, no window open: %v", err)
	}
	if r.j.State().Stop != nil {
		t.Fatalf("a refusal stopped the round: %+v", r.j.State().Stop)
	}
	// Our window open, the Lease taken away: the round stops under its rule.
	r.lease.Steal("")
	r.drained(t)
	r.lease.Steal("server-b")
	if err := r.w.HoldLease(ctx, round.StepInstall, node); err == nil {
		t.Fatal("hold of a lost Lease passed")
	}
	st := r.j.State().Stop
	if st == nil || !strings.Contains(st.Reason, string(round.RuleWindowLease)) {
		t.Fatalf("no stop under %s: %+v", round.RuleWindowLease, st)
	}
}

type failingLease struct{ fakes.Lease }

func (f *failingLease) Hold(context.Context, string, string) error {
	return errors.New("apiserver: connection refused")
}

func TestHoldLeaseOtherErrorIsNotAStop(t *testing.T) {
	r := newRig(t)
	r.w.Lease = &failingLease{}
	err := r.w.HoldLease(context.Background(), round.StepDrain, node)
	if err == nil || !strings.HasPrefix(err.Error(), "take the window Lease: ") {
		t.Fatalf("hold with the API server down: %v", err)
	}
	if r.j.State().Stop != nil {
		t.Fatal("an unreachable API server stopped the round")
	}
}

func TestHostErrorAndUncertainWords(t *testing.T) {
	he := &window.HostError{Node: node, Action: "install", Err: fmt.Errorf("bad kernel: %w", steps.ErrBadInput)}
	if he.Error() != "install on gpu-1: bad kernel: "+steps.ErrBadInput.Error() || !errors.Is(he, steps.ErrBadInput) {
		t.Errorf("host error %q does not wrap its cause", he.Error())
	}
	u := &window.Uncertain{Reasons: []string{"start sent", "answer lost"}}
	if u.Error() != "start sent; answer lost" {
		t.Errorf("uncertain %q", u.Error())
	}
}

func TestReentryWords(t *testing.T) {
	for r, want := range map[window.Reentry]string{window.Follow: "follow", window.NeedApproval: "need_approval", window.Overdue: "overdue"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}

func TestFallbackDrillPlanDigestBindsTheEntries(t *testing.T) {
	p := window.FallbackDrillPlan{Node: node, RunningKernel: running, TargetKernel: target, OldEntry: "old", NewEntry: "new", PanicSeconds: 10}
	if p.Target() != node || p.Step() != "" {
		t.Errorf("drill plan target %q step %q", p.Target(), p.Step())
	}
	q := p
	q.OldEntry = "other"
	if p.Digest() == q.Digest() {
		t.Error("the drill digest does not bind the old GRUB entry")
	}
	if s := strings.Join(p.Summary(), " "); !strings.Contains(s, running) || !strings.Contains(s, "old") {
		t.Errorf("summary %q does not name what it falls back to", s)
	}
}
