package round

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var timelineOut = flag.String("timeline-out", "", "write the demo-shaped round's timeline.svg here, to look at")

// demoShapedRound runs the test fleet to close with the demo's proportions:
// steps of a fraction of a second to a few seconds (the lab's), the canary's
// fallback drill passing before its trial boot, a red gate on gpu-b
// accepted as residual risk, vm-1's hypervisor attestation, and the 48-hour
// soak.
func demoShapedRound(t *testing.T) *Journal {
	t.Helper()
	clk := newClock()
	j := openJournal(t, roundDir(t), clk)
	if _, err := j.Plan(fleetOrder(t), soak48, Meta{ArgsDigest: "sha256:5e1f"}); err != nil {
		t.Fatal(err)
	}
	// The driver's minutes become the lab's fractions of seconds; the soak
	// (a wait, not a step time) stays 48 hours.
	advance := func(d time.Duration) {
		if d < time.Hour {
			d /= 150
		}
		clk.Advance(d)
	}
	d := &driver{t: t, j: j, advance: advance,
		before: func(step Step, node string, attempt int) {
			if step == StepTrialBoot && node == "gpu-a" && attempt == 1 {
				clk.Advance(9 * time.Second)
				if _, err := j.Lesson("fallback drill on gpu-a passed: the trial kernel 6.8.0-48-generic crashed after its sysctls loaded and GRUB brought the host back on 6.8.0-45-generic by itself"); err != nil {
					t.Fatal(err)
				}
			}
		},
		fail: func(step Step, node string, attempt int) string {
			if step == StepGate && node == "gpu-b" && attempt == 1 {
				return "new failure vs baseline: dcgm-exporter on gpu-b restarts (CrashLoopBackOff)"
			}
			return ""
		}}
	d.until(func(st Status) bool { return st.Stop != nil && st.Stop.Step == StepGate })
	clk.Advance(3 * time.Second)
	if _, err := j.Decide(DecisionResidualRiskAccepted, "gpu-b", StepGate, Meta{ApprovalID: "sig-risk-gpu-b",
		Detail: "dcgm-exporter restarts are known upstream"}); err != nil {
		t.Fatal(err)
	}
	d.until(phaseIs(PhaseClosed))
	return j
}

// svgElement is one element of a rendered timeline with its attributes.
type svgElement struct {
	name  string
	attrs map[string]string
	title string
}

func parseTimeline(t *testing.T, data []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var out []svgElement
	var stack []int // index in out of each open element, -1 for others
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("timeline is not valid XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "title" {
				stack = append(stack, -1)
				continue
			}
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.CharData:
			// A title's text belongs to the element around it.
			if n := len(stack); n >= 2 && stack[n-1] == -1 && stack[n-2] >= 0 {
				out[stack[n-2]].title += string(tok)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
}

func attrFloat(t *testing.T, e svgElement, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attrs[name], 64)
	if err != nil {
		t.Fatalf("%s %s=%q: %v", e.name, name, e.attrs[name], err)
	}
	return v
}

// TestTimelineShowsEveryWindowStep renders the timeline of a round shaped
// like the demo's (control-plane nodes, the canary with its fallback
// drill, GPU servers, decisions, steps of seconds beside a 48-hour soak)
// and checks that the windows are not crowded out: every window step's box
// is at least a few pixels wide, in order along its row, the soak is a
// marked break, and the drill and decisions are marked.
func TestTimelineShowsEveryWindowStep(t *testing.T) {
	j := demoShapedRound(t)
	st := j.State()
	var svg bytes.Buffer
	if err := RenderTimeline(&svg, st); err != nil {
		t.Fatal(err)
	}
	if *timelineOut != "" {
		if err := os.WriteFile(*timelineOut, svg.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	els := parseTimeline(t, svg.Bytes())
	type key struct {
		node string
		step Step
	}
	boxes := map[key][]svgElement{}
	var breaks, drills, decisions []svgElement
	var svgW float64
	for _, e := range els {
		switch {
		case e.name == "svg":
			svgW = attrFloat(t, e, "width")
		case e.attrs["class"] == "step":
			k := key{e.attrs["data-node"], Step(e.attrs["data-step"])}
			boxes[k] = append(boxes[k], e)
		case e.attrs["class"] == "break":
			breaks = append(breaks, e)
		case e.attrs["class"] == "drill":
			drills = append(drills, e)
		case e.attrs["class"] == "decision":
			decisions = append(decisions, e)
		}
	}
	if svgW > 2000 {
		t.Errorf("timeline is %.0f px wide", svgW)
	}
	const minWidth = 4.0
	windowSteps := 0
	for _, n := range st.Nodes {
		lastX := 0.0
		for _, step := range WindowSteps {
			r := n.Steps[step]
			if r == nil || len(r.Attempts) == 0 {
				continue
			}
			got := boxes[key{n.Node, step}]
			if len(got) != len(r.Attempts) {
				t.Errorf("%s %s: %d boxes for %d attempts", n.Node, step, len(got), len(r.Attempts))
				continue
			}
			for _, box := range got {
				windowSteps++
				x, w := attrFloat(t, box, "x"), attrFloat(t, box, "width")
				if w < minWidth {
					t.Errorf("%s %s: box %.1f px wide (%s)", n.Node, step, w, box.title)
				}
				if x < lastX {
					t.Errorf("%s %s: box at x=%.1f, before the step ahead of it (%.1f)", n.Node, step, x, lastX)
				}
				lastX = x
				if !strings.HasPrefix(box.title, string(step)+" on "+n.Node+": ") {
					t.Errorf("%s %s: title %q", n.Node, step, box.title)
				}
			}
		}
	}
	if windowSteps < 6*7 {
		t.Errorf("%d window step boxes, want every window's steps", windowSteps)
	}
	if len(breaks) != 1 || !strings.HasPrefix(breaks[0].title, "soak 48h") {
		t.Errorf("breaks: %+v, want the soak as one", breaks)
	}
	if len(drills) != 1 || !strings.Contains(drills[0].title, "fallback drill on gpu-a passed") {
		t.Errorf("drill marks: %+v", drills)
	}
	names := map[string]bool{}
	for _, d := range decisions {
		names[strings.Fields(d.title)[1]] = true
	}
	for _, want := range []DecisionName{DecisionResidualRiskAccepted, DecisionHypervisorSnapshotTaken} {
		if !names[string(want)] {
			t.Errorf("no mark for decision %s among %v", want, names)
		}
	}
	// The soak's box sits on the round row, as wide as its break.
	soak := boxes[key{"", StepSoak}]
	if len(soak) != 1 || attrFloat(t, soak[0], "width") < breakW {
		t.Errorf("soak boxes: %+v", soak)
	}
}

func TestAxis(t *testing.T) {
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name       string
		moments    []time.Time
		busy       []busySpan
		breakAfter time.Duration
		width      float64
		// wantBusyMin: each busy stretch at least stepMinW; wantBreaks: count.
		wantBreaks int
		wantWidth  float64
	}{
		{name: "proportional when nothing is short", moments: []time.Time{at(0), at(50), at(100)},
			busy: []busySpan{{at(0), at(50)}, {at(50), at(100)}}, breakAfter: time.Hour, width: 900, wantWidth: 900},
		{name: "a millisecond step beside minutes", moments: []time.Time{at(0), at(0.001), at(600)},
			busy: []busySpan{{at(0), at(0.001)}, {at(0.001), at(600)}}, breakAfter: time.Hour, width: 900, wantWidth: 900},
		{name: "the soak is a break", moments: []time.Time{at(0), at(10), at(10 + 48*3600), at(10 + 48*3600 + 5)},
			busy: []busySpan{{at(0), at(10)}, {at(10 + 48*3600), at(10 + 48*3600 + 5)}}, breakAfter: 10 * time.Minute, width: 900,
			wantBreaks: 1, wantWidth: 900},
		{name: "too many steps widen the axis", moments: func() []time.Time {
			var ts []time.Time
			for i := range 400 {
				ts = append(ts, at(float64(i)))
			}
			return ts
		}(), busy: []busySpan{{at(0), at(399)}}, breakAfter: time.Hour, width: 900, wantWidth: 399 * stepMinW / 0.7},
		{name: "one moment", moments: []time.Time{at(0)}, breakAfter: time.Hour, width: 900, wantWidth: 900},
		{name: "none", breakAfter: time.Hour, width: 900, wantWidth: 900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAxis(tc.moments, tc.busy, 100, tc.width, tc.breakAfter)
			if len(a.breaks) != tc.wantBreaks {
				t.Errorf("breaks %+v, want %d", a.breaks, tc.wantBreaks)
			}
			if d := a.width - tc.wantWidth; d > 0.01 || d < -0.01 {
				t.Errorf("width %.2f, want %.2f", a.width, tc.wantWidth)
			}
			if got := a.xs[len(a.xs)-1] - a.xs[0]; got-a.width > 0.01 || a.width-got > 0.01 {
				t.Errorf("moments span %.2f px, width %.2f", got, a.width)
			}
			for i := 1; i < len(a.ts); i++ {
				w := a.xs[i] - a.xs[i-1]
				if w <= 0 {
					t.Errorf("stretch %d is %.2f px: not increasing", i, w)
				}
				if covered(tc.busy, a.ts[i-1], a.ts[i]) && w < stepMinW {
					t.Errorf("busy stretch %d is %.2f px", i, w)
				}
			}
			for _, br := range a.breaks {
				if br.X1-br.X0 != breakW {
					t.Errorf("break %+v", br)
				}
			}
			// Times between moments fall between them; outside, on the ends.
			if len(tc.moments) >= 2 {
				mid := a.ts[0].Add(a.ts[1].Sub(a.ts[0]) / 2)
				if x := a.x(mid); x <= a.xs[0] || x >= a.xs[1] {
					t.Errorf("x(mid) = %.2f, not within %.2f..%.2f", x, a.xs[0], a.xs[1])
				}
			}
			if a.x(a.ts[0].Add(-time.Hour)) != a.xs[0] || a.x(a.ts[len(a.ts)-1].Add(time.Hour)) != a.xs[len(a.xs)-1] {
				t.Error("times outside the axis are not on its ends")
			}
		})
	}
}

func TestDrillMarks(t *testing.T) {
	s := NewState("2026-11")
	s.Nodes = []*NodeState{{Position: Position{Node: "gpu-canary-1"}}}
	for _, text := range []string{
		"fallback drill on gpu-canary-1 passed: the trial kernel crashed and GRUB brought the host back",
		"fallback drill on gpu-canary-1 did not prove the fallback: outcome booted_new on kernel 6.8.0-48-generic",
		"fallback drill on gpu-canary-1: the host did not come back within 10m0s",
		"fallback drill on gpu-9 passed: not a node of this round",
		"drain of cp-2 waited 40s",
	} {
		s.Lessons = append(s.Lessons, Lesson{Text: text})
	}
	got := drillMarks(s)
	want := []bool{true, false, false}
	if len(got) != len(want) {
		t.Fatalf("%d marks: %+v", len(got), got)
	}
	for i, m := range got {
		if m.Node != "gpu-canary-1" || m.Passed != want[i] {
			t.Errorf("mark %d: %+v, want passed=%v", i, m, want[i])
		}
	}
}
