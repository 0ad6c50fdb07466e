package round

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"
)

// FuzzReplay feeds arbitrary bytes to the journal replay. It must never
// panic; whatever it accepts must render a status, a report and a timeline
// that is valid XML, and replay the same way twice.
func FuzzReplay(f *testing.F) {
	// Seeds: a real journal, its prefixes, a torn tail, a corrupt line.
	dir := filepath.Join(f.TempDir(), "rounds", "2026-11")
	clk := newClock()
	j, err := Open(dir, WithClock(clk.Now))
	if err != nil {
		f.Fatal(err)
	}
	o, err := PlanOrder(fleetNodes())
	if err != nil {
		f.Fatal(err)
	}
	steps := []struct {
		step Step
		node string
		fail bool
	}{{StepBaseline, "", false}, {StepSnapshot, "cp-1", false}, {StepDrain, "cp-1", false}, {StepInstall, "cp-1", true}}
	if _, err := j.Plan(o, time.Hour, Meta{}); err != nil {
		f.Fatal(err)
	}
	for _, s := range steps {
		clk.Advance(time.Minute)
		if _, err := j.StartStep(s.step, s.node, Meta{}); err != nil {
			f.Fatal(err)
		}
		if s.fail {
			_, err = j.FailStep(s.step, s.node, Meta{Detail: "dpkg"})
		} else {
			_, err = j.FinishStep(s.step, s.node, Meta{Kernel: "6.8.0-45-generic"})
		}
		if err != nil {
			f.Fatal(err)
		}
	}
	if _, err := j.Decide(DecisionResume, "cp-1", StepInstall, Meta{}); err != nil {
		f.Fatal(err)
	}
	if _, err := j.StartStep(StepInstall, "cp-1", Meta{}); err != nil {
		f.Fatal(err)
	}
	j.Close()
	data, err := ReadJournal(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add(append(bytes.Clone(data), `{"seq":99,"ki`...))
	f.Add(bytes.Replace(data, []byte(`"seq":3`), []byte(`"seq":7`), 1))
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"seq":1,"time":"2026-11-03T08:00:00Z","kind":"decision","decision":"resume"}` + "\n"))
	f.Add([]byte(`{"seq":1,"time":"2026-11-03T08:00:00Z","kind":"plan","plan":{"order":{"positions":[{"node":"a","role":"gpu"}]},"soak":"-1h"}}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		st, info, err := Replay(data)
		if err != nil {
			return
		}
		if info.Records != int(st.LastSeq) {
			t.Fatalf("replayed %d records, state at seq %d", info.Records, st.LastSeq)
		}
		now := st.Updated.Add(time.Hour)
		status := st.Status(now)
		var b bytes.Buffer
		if err := RenderStatusText(&b, status); err != nil {
			t.Fatal(err)
		}
		for _, step := range append(append([]Step{}, NodeSteps...), RoundSteps...) {
			for _, n := range st.Nodes {
				_ = st.Admit(step, n.Node, now)
			}
			_ = st.Admit(step, "", now)
		}
		if err := RenderReport(&b, st); err != nil {
			t.Fatal(err)
		}
		var svg bytes.Buffer
		if err := RenderTimeline(&svg, st); err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(&svg)
		for {
			_, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("timeline of an accepted journal is not XML: %v", err)
			}
		}
		if st.Plan != nil {
			_, _ = ETA(st, nil, now, now.Add(48*time.Hour), ETAConfig{DefaultWindow: time.Hour})
		}
		again, _, err := Replay(data)
		if err != nil || again.LastSeq != st.LastSeq {
			t.Fatalf("second replay differs: %v", err)
		}
	})
}
