package window_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// claims is a cluster's kured lock and skip labels, as kube/actors'
// Claims answers them.
type claims struct {
	installed  bool
	kuredFor   []actors.KuredLock // kured's own holders
	ours       bool               // the round's holder is in the lock
	takeErr    error
	releases   int
	releaseErr error

	labels    map[string]string // node -> "ours" or "theirs"
	skipErr   error
	unskipErr error
}

func (c *claims) TakeKuredLock(context.Context) (actors.KuredHold, error) {
	switch {
	case c.takeErr != nil:
		return actors.KuredHold{Installed: c.installed}, c.takeErr
	case !c.installed:
		return actors.KuredHold{}, nil
	case c.ours:
		return actors.KuredHold{Installed: true, Held: true}, nil
	case len(c.kuredFor) > 0:
		return actors.KuredHold{Installed: true, Other: c.kuredFor}, nil
	}
	c.ours = true
	return actors.KuredHold{Installed: true, Taken: true, Held: true}, nil
}

func (c *claims) ReleaseKuredLock(context.Context) (bool, error) {
	c.releases++
	if c.releaseErr != nil {
		return false, c.releaseErr
	}
	was := c.ours
	c.ours = false
	return was, nil
}

func (c *claims) SkipDriverUpgrade(_ context.Context, node string) (actors.SkipState, error) {
	if c.skipErr != nil {
		return "", c.skipErr
	}
	if c.labels == nil {
		c.labels = map[string]string{}
	}
	switch c.labels[node] {
	case "ours":
		return actors.SkipOurs, nil
	case "theirs":
		return actors.SkipTheirs, nil
	}
	c.labels[node] = "ours"
	return actors.SkipAdded, nil
}

func (c *claims) UnskipDriverUpgrade(_ context.Context, node string) (bool, error) {
	if c.unskipErr != nil {
		return false, c.unskipErr
	}
	if c.labels[node] != "ours" {
		return false, nil
	}
	delete(c.labels, node)
	return true, nil
}

// otherActors are the journal's other_actors records, by event.
func otherActors(t *testing.T, r *rig) []round.ActorEvent {
	t.Helper()
	var out []round.ActorEvent
	b, err := round.ReadJournal(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var rec round.Record
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Kind == round.KindOtherActors {
			out = append(out, rec.Event)
		}
	}
	return out
}

// kured's lock is taken for the round at its first cordon, once nobody
// else holds the node, and journaled; while kured holds it the round
// waits; a second take (a resumed window, a second server) records
// nothing new; the round's end gives it back, journaled.
func TestTheDrainTakesKuredsLockForTheRound(t *testing.T) {
	r := newRig(t)
	c := &claims{installed: true, kuredFor: []actors.KuredLock{{NodeID: "gpu-9", Created: t0}}}
	r.w.Claims, r.w.OthersWait = c, time.Hour
	p := drainPlan(t, r)
	start := func() error {
		_, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
		return err
	}
	var waiting *window.Waiting
	if err := start(); !errors.As(err, &waiting) || waiting.Holders[0].Actor != actors.Kured || len(r.kube.Cordoned) != 0 {
		t.Fatalf("drain while kured holds its lock: %v (cordoned %v)", err, r.kube.Cordoned)
	}
	if w := r.j.State().Wait(node); w == nil || w.Holders[0].Who != "gpu-9" {
		t.Fatalf("the wait was not journaled: %+v", r.j.State().Waits)
	}
	c.kuredFor = nil
	if err := start(); err != nil || r.kube.Cordoned[node] == "" {
		t.Fatalf("drain once kured let go: %v (cordoned %v)", err, r.kube.Cordoned)
	}
	if k := r.j.State().KuredLock; k == nil || !k.Held || !c.ours {
		t.Fatalf("kured's lock after the drain: journal %+v, cluster ours=%v", k, c.ours)
	}
	want := []round.ActorEvent{round.EventWaitBegan, round.EventKuredLockTaken, round.EventWaitEnded, round.EventDriverUpgradeSkipSet}
	if diff := cmp.Diff(want, otherActors(t, r)); diff != "" {
		t.Fatalf("journal (-want +got):\n%s", diff)
	}

	// The round ends: kured's lock goes back, journaled once.
	reasons, err := r.w.ReleaseKuredLock(context.Background())
	if err != nil || c.ours || !strings.Contains(strings.Join(reasons, ";"), "given back") {
		t.Fatalf("release: %v %v (ours %v)", reasons, err, c.ours)
	}
	if k := r.j.State().KuredLock; k.Held {
		t.Fatalf("journal after the release: %+v", k)
	}
	if reasons, err := r.w.ReleaseKuredLock(context.Background()); err != nil || reasons != nil {
		t.Fatalf("release again: %v %v, want nothing to do", reasons, err)
	}
}

// A lock that cannot be given back is a journaled failure and an error,
// never dropped; a later release that works clears it.
func TestAKuredLockThatCannotGoBackIsAFailure(t *testing.T) {
	r := newRig(t)
	c := &claims{installed: true}
	r.w.Claims = c
	p := drainPlan(t, r)
	if _, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil); err != nil {
		t.Fatal(err)
	}
	c.releaseErr = errors.New("daemonsets.apps \"kured\" is forbidden")
	var stopped *window.Stopped
	if _, err := r.w.ReleaseKuredLock(context.Background()); !errors.As(err, &stopped) {
		t.Fatalf("a failed release: %v", err)
	}
	if k := r.j.State().KuredLock; !k.Held || !strings.Contains(k.Failure, "forbidden") {
		t.Fatalf("journal after a failed release: %+v", k)
	}
	c.releaseErr = nil
	if _, err := r.w.ReleaseKuredLock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := r.j.State().KuredLock; k.Held || k.Failure != "" {
		t.Fatalf("journal after the release: %+v", k)
	}
}

// kured not installed, or the cluster that cannot say: nothing taken, or
// a stop before the cordon.
func TestKuredNotInstalledOrUnreadable(t *testing.T) {
	r := newRig(t)
	r.w.Claims = &claims{}
	p := drainPlan(t, r)
	if _, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil); err != nil {
		t.Fatalf("drain without kured: %v", err)
	}
	if k := r.j.State().KuredLock; k != nil {
		t.Fatalf("kured's lock recorded without kured: %+v", k)
	}

	r2 := newRig(t)
	r2.w.Claims = &claims{installed: true, takeErr: errors.New("connection refused")}
	var stopped *window.Stopped
	if _, err := r2.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil); !errors.As(err, &stopped) ||
		!strings.Contains(err.Error(), "could not take kured's reboot lock") || len(r2.kube.Cordoned) != 0 {
		t.Fatalf("drain when kured's lock cannot be read: %v (cordoned %v)", err, r2.kube.Cordoned)
	}
}

// A GPU node's window keeps the GPU Operator's driver upgrade off it: the
// skip label set before the cordon and journaled, removed at the
// window's release only where the round set it; a person's label is
// left; a label that cannot be set stops before the cordon.
func TestTheWindowSkipsTheDriverUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name      string
		label     string // on the node before the window
		skipErr   error
		unskipErr error
		events    []round.ActorEvent
		after     string // the label after the release
		reason    string
		stop      bool
	}{
		{name: "free", events: []round.ActorEvent{round.EventDriverUpgradeSkipSet}, reason: "skip label nvidia.com/gpu-driver-upgrade.skip removed from gpu-1"},
		{name: "a person's", label: "theirs", after: "theirs"},
		{name: "the round's from before", label: "ours", reason: "removed from gpu-1"},
		{name: "cannot be removed", events: []round.ActorEvent{round.EventDriverUpgradeSkipSet}, unskipErr: errors.New("forbidden"), after: "ours", reason: "was not removed (a person removes it"},
		{name: "cannot be set", skipErr: errors.New("connection refused"), stop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			c := &claims{labels: map[string]string{}, skipErr: tc.skipErr, unskipErr: tc.unskipErr}
			if tc.label != "" {
				c.labels[node] = tc.label
			}
			r.w.Claims = c
			p := drainPlan(t, r)
			_, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
			if tc.stop {
				var stopped *window.Stopped
				if !errors.As(err, &stopped) || len(r.kube.Cordoned) != 0 || !strings.Contains(err.Error(), "driver upgrade") {
					t.Fatalf("drain: %v (cordoned %v), want a stop before the cordon", err, r.kube.Cordoned)
				}
				return
			}
			if err != nil || r.kube.Cordoned[node] == "" {
				t.Fatalf("drain: %v (cordoned %v)", err, r.kube.Cordoned)
			}
			if diff := cmp.Diff(tc.events, otherActors(t, r)); diff != "" {
				t.Fatalf("journal (-want +got):\n%s", diff)
			}
			reasons, err := r.w.Release(context.Background(), node)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.labels[node]; got != tc.after {
				t.Fatalf("label after the release: %q, want %q", got, tc.after)
			}
			if all := strings.Join(reasons, "; "); tc.reason == "" && strings.Contains(all, "skip") || !strings.Contains(all, tc.reason) {
				t.Fatalf("release reasons %q, want %q", all, tc.reason)
			}
		})
	}
}

// A wait is journaled once when it begins, again only when its holders
// change, and its end when the cordon goes ahead or the round stops.
func TestWaitsAreJournaledOnceAndOnChange(t *testing.T) {
	nm := actors.Holder{Actor: actors.NodeMaintenance, Who: "network-operator", Since: t0, Verdict: actors.Wait, What: "NodeMaintenance asks for the node"}
	gpu := actors.Holder{Actor: actors.GPUOperator, Who: "nvidia.com/gpu-driver-upgrade-state=upgrade-required", Verdict: actors.Wait, What: "driver upgrade"}
	person := actors.Holder{Actor: actors.Person, Who: "cordon", Verdict: actors.Stop, What: "a person cordoned the node"}
	for _, tc := range []struct {
		name  string
		looks [][]actors.Holder // what each call sees
		want  []round.ActorEvent
	}{
		{name: "nobody", looks: [][]actors.Holder{nil}},
		{name: "the same holder three times, then gone", looks: [][]actors.Holder{{nm}, {nm}, {nm}, nil},
			want: []round.ActorEvent{round.EventWaitBegan, round.EventWaitEnded}},
		{name: "the holders change", looks: [][]actors.Holder{{nm}, {nm, gpu}, {nm, gpu}, {gpu}, nil},
			want: []round.ActorEvent{round.EventWaitBegan, round.EventWaitChanged, round.EventWaitChanged, round.EventWaitEnded}},
		{name: "the wait becomes a stop", looks: [][]actors.Holder{{nm}, {person}},
			want: []round.ActorEvent{round.EventWaitBegan, round.EventWaitEnded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			o := &others{}
			r.w.Others, r.w.OthersWait = o, time.Hour
			p := drainPlan(t, r)
			for _, hs := range tc.looks {
				o.hs = hs
				_, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
				var waiting *window.Waiting
				var stopped *window.Stopped
				if err != nil && !errors.As(err, &waiting) && !errors.As(err, &stopped) {
					t.Fatal(err)
				}
				r.clk.Add(time.Minute)
			}
			if diff := cmp.Diff(tc.want, otherActors(t, r)); diff != "" {
				t.Fatalf("journal (-want +got):\n%s", diff)
			}
			if ws := r.j.State().Waits; len(ws) != 0 {
				t.Fatalf("a wait is left in the journal: %+v", ws)
			}
		})
	}
}

func drainPlan(t *testing.T, r *rig) window.DrainPlan {
	t.Helper()
	pv, err := r.kube.PreviewDrain(context.Background(), node, window.DrainOptions{}.Policy)
	if err != nil {
		t.Fatal(err)
	}
	p, err := window.DecideDrain(node, pv)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A trial boot that fell back to the old kernel on a driver-container
// node runs the driver pod's wait again there: its result is in the
// stop's reasons and the answer; a trial boot on the new kernel leaves it
// to GPU acceptance.
func TestAFallbackWaitsForTheDriverOnTheOldKernel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fellBack bool
		probe    *driverProbe
		calls    int
		words    string
	}{
		{name: "fell back, driver back", fellBack: true, calls: 1, words: "is Ready on the old kernel",
			probe: &driverProbe{applies: true, res: gpucheck.DriverPodResult{State: gpucheck.DriverReady, Pod: "nvidia-driver-x"}}},
		{name: "fell back, driver not back", fellBack: true, calls: 1, words: "the driver did not come back on the old kernel: no image",
			probe: &driverProbe{applies: true, res: gpucheck.DriverPodResult{State: gpucheck.DriverFailed, Reason: "no image"}}},
		{name: "the new kernel booted", probe: &driverProbe{applies: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.w.Driver = tc.probe
			r.trialBooted(t, tc.fellBack)
			o, err := r.w.FollowTrialBoot(context.Background(), node)
			if tc.probe.calls != tc.calls {
				t.Fatalf("the driver pod's wait ran %d times, want %d", tc.probe.calls, tc.calls)
			}
			if !tc.fellBack {
				if err != nil || o.Driver != nil {
					t.Fatalf("trial boot: %+v %v", o, err)
				}
				return
			}
			var stopped *window.Stopped
			if !errors.As(err, &stopped) || o.Driver == nil || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("fallback: %+v %v, want a stop saying %q", o, err, tc.words)
			}
			if st := r.j.State().Stop; st == nil || !strings.Contains(st.Reason, tc.words) {
				t.Fatalf("the journal's stop does not say the driver's result: %+v", st)
			}
		})
	}
}

// The drain's plan looks too (before a person signs): a wait it finds is
// journaled, and its end once the holder let go, so round_status shows no
// wait that is over while the signature is awaited.
func TestThePlansLookJournalsTheWaitToo(t *testing.T) {
	r := newRig(t)
	o := &others{hs: []actors.Holder{{Actor: actors.Kured, Who: "gpu-9", Since: t0, Verdict: actors.Wait, What: "kured reboots gpu-9"}}}
	r.w.Others, r.w.OthersWait = o, time.Hour
	var waiting *window.Waiting
	if err := r.w.OthersLetGo(context.Background(), node); !errors.As(err, &waiting) {
		t.Fatalf("plan while kured holds the node: %v", err)
	}
	if ws := r.j.State().Waits; len(ws) != 1 || ws[0].Holders[0].Who != "gpu-9" {
		t.Fatalf("waits: %+v", ws)
	}
	o.hs = nil
	if err := r.w.OthersLetGo(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if ws := r.j.State().Waits; len(ws) != 0 {
		t.Fatalf("a wait that is over is still shown: %+v", ws)
	}
	if diff := cmp.Diff([]round.ActorEvent{round.EventWaitBegan, round.EventWaitEnded}, otherActors(t, r)); diff != "" {
		t.Fatalf("journal (-want +got):\n%s", diff)
	}
}
