package round

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// scriptedRound runs the test fleet to close: the canary's first trial boot
// panics (resume), gpu-b's gate finds a new failure that a person accepts
// as residual risk (then resume), vm-1 needs the hypervisor attestation.
func scriptedRound(t *testing.T) *Journal {
	t.Helper()
	clk := newClock()
	j := openJournal(t, roundDir(t), clk)
	if _, err := j.Plan(fleetOrder(t), soak48, Meta{ArgsDigest: "sha256:5e1f"}); err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, j: j, advance: clk.Advance, fail: func(step Step, node string, attempt int) string {
		if r := canaryPanics(step, node, attempt); r != "" {
			return r
		}
		if step == StepGate && node == "gpu-b" && attempt == 1 {
			return "new failure vs baseline: dcgm-exporter on gpu-b restarts (CrashLoopBackOff)"
		}
		return ""
	}}
	d.until(func(st Status) bool { return st.Stop != nil && st.Stop.Step == StepGate })
	clk.Advance(20 * time.Minute)
	if _, err := j.Decide(DecisionResidualRiskAccepted, "gpu-b", StepGate, Meta{ApprovalID: "sig-risk-gpu-b",
		Detail: "dcgm-exporter restarts are known upstream; review when the exporter is upgraded"}); err != nil {
		t.Fatal(err)
	}
	d.until(phaseIs(PhaseClosed))
	return j
}

func TestReportAndTimeline(t *testing.T) {
	j := scriptedRound(t)
	st := j.State()
	var md, svg bytes.Buffer
	if err := RenderReport(&md, st); err != nil {
		t.Fatal(err)
	}
	if err := RenderTimeline(&svg, st); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.md", md.Bytes())
	golden(t, "timeline.svg", svg.Bytes())

	for _, want := range []string{
		"| 3 | cp-2 | control-plane | control-plane node holding both the Postgres primary and the API VIP",
		"| 4 | gpu-a | gpu (canary) |",
		"**failed**: trial_boot on gpu-a: booted 6.8.0-45-generic again",
		"decision **residual_risk_accepted** on gpu-b (step gate), approval sig-risk-gpu-b",
		"decision **hypervisor_snapshot_taken** on vm-1",
		"| trial_boot | 2 |",
		"failed, residual risk accepted",
		"| vm-1 | 6.8.0-45-generic | 6.8.0-48-generic |",
		"- drain of cp-2 waited 40s",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	checkSVG(t, svg.Bytes(), len(st.Nodes)+1, true)

	// The same journal, replayed elsewhere, gives the same bytes.
	again, _, err := ReadState(j.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var md2, svg2 bytes.Buffer
	_ = RenderReport(&md2, again)
	_ = RenderTimeline(&svg2, again)
	if !bytes.Equal(md.Bytes(), md2.Bytes()) || !bytes.Equal(svg.Bytes(), svg2.Bytes()) {
		t.Error("report or timeline differ between the live state and a replay")
	}

	report, timeline, err := j.WriteReport()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(report); !bytes.Equal(b, md.Bytes()) {
		t.Error("report.md differs from RenderReport")
	}
	if b, _ := os.ReadFile(timeline); !bytes.Equal(b, svg.Bytes()) {
		t.Error("timeline.svg differs from RenderTimeline")
	}
}

// checkSVG parses the timeline as XML and checks it draws what it should.
func checkSVG(t *testing.T, data []byte, rows int, coloured bool) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	counts := map[string]int{}
	fills := map[string]int{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("timeline is not valid XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
			if se.Name.Local == "svg" && se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("svg namespace %q", se.Name.Space)
			}
			for _, a := range se.Attr {
				if a.Name.Local == "fill" {
					fills[a.Value]++
				}
			}
		}
	}
	if counts["svg"] != 1 || counts["rect"] < rows || counts["text"] < rows {
		t.Errorf("elements: %v", counts)
	}
	if !coloured {
		return
	}
	for _, c := range []string{colourDone, colourFailed, colourAccepted, colourWindow} {
		if fills[c] < 2 { // once in the legend, at least once in the chart
			t.Errorf("colour %s used %d times", c, fills[c])
		}
	}
}

func TestTimelineOfAnEmptyRoundIsValid(t *testing.T) {
	var svg bytes.Buffer
	if err := RenderTimeline(&svg, NewState("2026-11")); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes(), 1, false)
	var md bytes.Buffer
	if err := RenderReport(&md, NewState("2026-11")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "No order was recorded.") {
		t.Error(md.String())
	}
}
