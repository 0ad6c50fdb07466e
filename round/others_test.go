package round

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The waits round_status shows are derived from the journal alone: a wait
// begins once, its holders change, it ends when the cordon goes ahead or
// the round stops; an aborted round shows none.
func TestStatusWaitsFromTheJournal(t *testing.T) {
	nm := Holder{Actor: "node-maintenance", Who: "network-operator", Since: base, What: "NodeMaintenance asks for the node", Verdict: "wait"}
	kured := Holder{Actor: "kured", Who: "gpu-b", Since: base.Add(time.Minute), What: "kured holds its lock", Verdict: "wait"}
	until := base.Add(30 * time.Minute)
	type step struct {
		rec  Record
		fail string // the apply must refuse it, saying this
	}
	cases := []struct {
		name  string
		steps []step
		abort bool
		want  []Wait
	}{
		{name: "no wait", want: nil},
		{name: "a wait begins", steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{nm}, Until: until}},
		}, want: []Wait{{Node: "cp-1", Seq: 5, Since: base.Add(5 * time.Minute), Until: until, Holders: []Holder{nm}}}},
		{name: "its holders change", steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{nm}, Until: until}},
			{rec: Record{Event: EventWaitChanged, Node: "cp-1", Holders: []Holder{kured, nm}, Until: until}},
		}, want: []Wait{{Node: "cp-1", Seq: 5, Since: base.Add(5 * time.Minute), Until: until, Holders: []Holder{kured, nm}, Changed: 1}}},
		{name: "it ends", steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{nm}, Until: until}},
			{rec: Record{Event: EventWaitEnded, Node: "cp-1", Detail: "the cordon goes ahead"}},
		}, want: nil},
		{name: "a second begin is refused", steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{nm}, Until: until}},
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{nm}, Until: until}, fail: "began already"},
		}, want: []Wait{{Node: "cp-1", Seq: 5, Since: base.Add(5 * time.Minute), Until: until, Holders: []Holder{nm}}}},
		{name: "an end without a wait is refused", steps: []step{
			{rec: Record{Event: EventWaitEnded, Node: "cp-1"}, fail: "no wait of cp-1"},
		}},
		{name: "a wait without holders is refused", steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Until: until}, fail: "names no holder"},
		}},
		{name: "a node outside the order is refused", steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "nope", Holders: []Holder{nm}}, fail: "not in the round's order"},
		}},
		{name: "an unknown event is refused", steps: []step{
			{rec: Record{Event: "shrug", Node: "cp-1"}, fail: "other_actors event"},
		}},
		{name: "an aborted round shows no wait", abort: true, steps: []step{
			{rec: Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{nm}, Until: until}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := planned(t, time.Hour)
			for _, s := range tc.steps {
				r := s.rec
				r.Kind = KindOtherActors
				b.now = b.now.Add(time.Minute)
				r.Seq, r.Time = b.s.LastSeq+1, b.now
				next := b.s.Clone()
				err := next.Apply(r)
				switch {
				case s.fail == "" && err != nil:
					t.Fatalf("apply %+v: %v", r, err)
				case s.fail != "" && (err == nil || !strings.Contains(err.Error(), s.fail)):
					t.Fatalf("apply %+v: %v, want a refusal saying %q", r, err, s.fail)
				case err == nil:
					b.s = next
				}
			}
			if tc.abort {
				b.decide(DecisionAbort, "cp-1", "")
			}
			got := b.s.Status(b.now).Waits
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("waits (-want +got):\n%s", diff)
			}
		})
	}
}

// kured's lock as the round holds it: taken, a failed release keeps it
// held and says why, a release lets it go; round_status shows each.
func TestStatusKuredLock(t *testing.T) {
	b := planned(t, time.Hour)
	if st := b.s.Status(b.now); st.KuredLock != nil {
		t.Fatalf("before it is taken: %+v", st.KuredLock)
	}
	b.rec(Record{Kind: KindOtherActors, Event: EventKuredLockTaken, Detail: "kube-system/kured"})
	taken := b.now
	if got := b.s.Status(b.now).KuredLock; got == nil || !got.Held || !got.Taken.Equal(taken) {
		t.Fatalf("taken: %+v", got)
	}
	b.rec(Record{Kind: KindOtherActors, Event: EventKuredLockReleaseFailed, Detail: "forbidden"})
	if got := b.s.Status(b.now).KuredLock; !got.Held || got.Failure != "forbidden" {
		t.Fatalf("a failed release: %+v", got)
	}
	var text bytes.Buffer
	if err := RenderStatusText(&text, b.s.Status(b.now)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "its release FAILED: forbidden") {
		t.Fatalf("the text does not say the release failed:\n%s", text.String())
	}
	b.rec(Record{Kind: KindOtherActors, Event: EventKuredLockReleased})
	want := &KuredLockState{Taken: taken, Released: b.now}
	if diff := cmp.Diff(want, b.s.Status(b.now).KuredLock); diff != "" {
		t.Fatalf("released (-want +got):\n%s", diff)
	}
}

// The journal keeps the records and a reopened journal tells the same
// wait: the format is additive (a record without the new fields reads as
// before).
func TestJournalKeepsAWaitAcrossOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "2026-11")
	clock := newClock()
	j, err := Open(dir, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(fleetOrder(t), time.Hour, Meta{}); err != nil {
		t.Fatal(err)
	}
	h := Holder{Actor: "gpu-operator", Who: "nvidia.com/gpu-driver-upgrade-state=upgrade-required", What: "driver upgrade", Verdict: "wait"}
	if _, err := j.OtherActors(Record{Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{h}, Until: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, err = Open(dir, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	}()
	ws := j.Status().Waits
	if len(ws) != 1 || ws[0].Node != "cp-1" || ws[0].Holders[0] != h {
		t.Fatalf("waits after reopening: %+v", ws)
	}
}

// The report lists what the round saw of and did to the other actors, in
// words, among the failures and decisions.
func TestReportListsTheOtherActors(t *testing.T) {
	b := planned(t, time.Hour)
	h := Holder{Actor: "kured", Who: "gpu-b", What: "kured holds its lock", Verdict: "wait"}
	b.rec(Record{Kind: KindOtherActors, Event: EventWaitBegan, Node: "cp-1", Holders: []Holder{h}, Until: base.Add(time.Hour)})
	b.rec(Record{Kind: KindOtherActors, Event: EventWaitEnded, Node: "cp-1", Detail: "nobody else holds the node: the cordon goes ahead"})
	b.rec(Record{Kind: KindOtherActors, Event: EventKuredLockTaken, Node: "cp-1", Detail: "kured's reboot lock taken for the round before the cordon of cp-1"})
	var out bytes.Buffer
	if err := RenderReport(&out, b.s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"other actors: the drain of cp-1 waits for another party, at most until 2026-11-03T09:00:00Z: kured (gpu-b)",
		"other actors: the wait of cp-1 for another party ended: nobody else holds the node: the cordon goes ahead",
		"other actors: kured's reboot lock taken for the round before the cordon of cp-1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
}
