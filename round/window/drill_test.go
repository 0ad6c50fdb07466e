package window_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// memDrills is a DrillBook in memory.
type memDrills struct {
	rec    *window.DrillRecord
	passed bool
	fail   error
}

func (b *memDrills) StartDrill(p window.FallbackDrillPlan, id string, at time.Time) error {
	if b.fail != nil {
		return b.fail
	}
	b.rec = &window.DrillRecord{Plan: &p, ApprovalID: id, Started: at}
	return nil
}

func (b *memDrills) EndDrill(node string, passed bool) error {
	b.rec, b.passed = nil, b.passed || passed
	return nil
}

func (r *rig) drillPlan(t *testing.T) window.FallbackDrillPlan {
	t.Helper()
	insp, _ := r.host.Inspect(context.Background(), node, stepsInspect())
	p, err := window.DecideFallbackDrill(node, insp, target, true, false, 10)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The drill on the canary: armed and rebooted once under its approval; a
// crash and fallback the drill caused is a lesson, a fallback it did not
// cause stops the round, and so does a host not back within the bound.
func TestFallbackDrillOnFakes(t *testing.T) {
	ctx := context.Background()
	start := func(t *testing.T) (*rig, *memDrills) {
		r := newRig(t)
		r.installed(t)
		book := &memDrills{}
		p := r.drillPlan(t)
		o, err := r.w.StartFallbackDrill(ctx, book, p, grant(p, "a-drill"))
		if err != nil || !o.InProgress || book.rec == nil || book.rec.ApprovalID != "a-drill" || r.host.Count("drill-arm") != 1 {
			t.Fatalf("start: %+v %v, book %+v, armed %d", o, err, book.rec, r.host.Count("drill-arm"))
		}
		return r, book
	}

	t.Run("the drill fires and the host falls back", func(t *testing.T) {
		r, book := start(t)
		rec := *book.rec
		if o, err := r.w.FollowFallbackDrill(ctx, book, node, rec); err != nil || !o.InProgress {
			t.Fatalf("before the reboot: %+v %v", o, err)
		}
		r.host.Boot(false)
		o, err := r.w.FollowFallbackDrill(ctx, book, node, rec)
		if err != nil || o.InProgress || !strings.Contains(o.Reasons[0], "passed") || !book.passed || book.rec != nil {
			t.Fatalf("after the fallback: %+v %v, book %+v", o, err, book)
		}
		if ls := r.j.State().Lessons; len(ls) != 1 || r.j.State().Stop != nil {
			t.Fatalf("lessons %+v, stop %+v", ls, r.j.State().Stop)
		}
		if r.host.Count("drill-arm") != 1 {
			t.Error("the follow armed the drill again")
		}
	})

	t.Run("a fallback the drill did not cause", func(t *testing.T) {
		r, book := start(t)
		rec := *book.rec
		r.host.Boot(true)
		_, err := r.w.FollowFallbackDrill(ctx, book, node, rec)
		var st *window.Stopped
		if !errors.As(err, &st) || !strings.Contains(err.Error(), "did not prove the fallback") || book.passed || book.rec != nil {
			t.Fatalf("unproven drill: %v, book %+v", err, book)
		}
		if s := r.j.State().Stop; s == nil || s.Step != round.StepTrialBoot {
			t.Fatalf("the round did not stop at the trial boot: %+v", s)
		}
	})

	t.Run("the host is not back within the bound", func(t *testing.T) {
		r, book := start(t)
		rec := *book.rec
		r.clk.Add(16 * time.Minute)
		_, err := r.w.FollowFallbackDrill(ctx, book, node, rec)
		if err == nil || !strings.Contains(err.Error(), "did not come back within") || r.j.State().Stop == nil {
			t.Fatalf("overdue drill: %v, stop %+v", err, r.j.State().Stop)
		}
	})

	t.Run("the host refuses the drill's reboot: disarmed, not passed, the round stops", func(t *testing.T) {
		r := newRig(t)
		r.installed(t)
		f := r.faulty()
		f.rebootErr = fmt.Errorf("trial_boot on node %s: %w: the one-shot entry is gone", node, steps.ErrRefused)
		r.w.Host = f
		book := &memDrills{}
		p := r.drillPlan(t)
		_, err := r.w.StartFallbackDrill(ctx, book, p, grant(p, "a-drill"))
		var st *window.Stopped
		if !errors.As(err, &st) || !strings.Contains(err.Error(), "refused the drill's reboot") || book.passed || book.rec != nil {
			t.Fatalf("refused drill reboot: %v, book %+v", err, book)
		}
		if s := r.j.State().Stop; s == nil || s.Step != round.StepTrialBoot {
			t.Fatalf("the round did not stop at the trial boot: %+v", s)
		}
		if r.host.Count("drill-disarm") != 1 || r.host.Count("reboot") != 0 {
			t.Fatalf("disarmed %d times, rebooted %d times", r.host.Count("drill-disarm"), r.host.Count("reboot"))
		}
	})

	t.Run("the drill could not be recorded: nothing armed", func(t *testing.T) {
		r := newRig(t)
		r.installed(t)
		p := r.drillPlan(t)
		book := &memDrills{fail: errors.New("disk full")}
		if _, err := r.w.StartFallbackDrill(ctx, book, p, grant(p, "a-drill")); err == nil || r.host.Count("drill-arm") != 0 {
			t.Fatalf("start with a failing book: %v, armed %d", err, r.host.Count("drill-arm"))
		}
	})

	t.Run("an approval for another plan", func(t *testing.T) {
		r := newRig(t)
		r.installed(t)
		p := r.drillPlan(t)
		other := p
		other.NewEntry = "gnulinux-other"
		book := &memDrills{}
		if _, err := r.w.StartFallbackDrill(ctx, book, p, grant(other, "a-drill")); err == nil || book.rec != nil || r.host.Count("drill-arm") != 0 {
			t.Fatalf("start under another plan's approval: %v", err)
		}
	})
}
