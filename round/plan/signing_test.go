package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A re-plan's signature covers only what changed: per node, the steps
// whose digest moved, and a node new to the plan whole.
func TestChanges(t *testing.T) {
	f := Build(input(PerStep))
	signed := StepDigests(f)
	if got := Changes(signed, f); len(got) != 0 {
		t.Errorf("no change: %v", got)
	}
	delete(signed, "cp-1")
	signed["gpu-1"] = map[Step]string{StepDrain: "x"}
	want := []string{"cp-1: whole window (new in the plan)", "gpu-1: drain, install, trial_boot, promote"}
	if diff := cmp.Diff(want, Changes(signed, f)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The signing request names every node up to SummaryNodes and the rest
// in one line of counts; a re-plan's names only what changed; each ends
// with the digest it binds.
func TestSigningSummary(t *testing.T) {
	in := input(PerStep)
	for i := range SummaryNodes + 10 {
		n := fmt.Sprintf("gpu-x%02d", i)
		in.Order = append(in.Order, Position{Node: n, GPU: true, Reason: "GPU server"})
		in.Facts[n] = facts(true)
	}
	f := Build(in)
	for _, c := range []struct {
		name    string
		changed []string
		has     []string
		lines   int
	}{
		{"first signature", nil, []string{"1. cp-1 (control-plane)", "nodes (", "mcp-patch approve shows the whole plan"}, len(f.Summary) + SummaryNodes + 3},
		{"re-plan", []string{"gpu-2: install"}, []string{"re-plan (revision 0): only these changed since the last signature:", "gpu-2: install"}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := SigningSummary(f, c.changed)
			if len(got) != c.lines {
				t.Errorf("%d lines, want %d:\n%s", len(got), c.lines, strings.Join(got, "\n"))
			}
			text := strings.Join(got, "\n")
			for _, w := range c.has {
				if !strings.Contains(text, w) {
					t.Errorf("summary lacks %q:\n%s", w, text)
				}
			}
			if last := got[len(got)-1]; last != "plan digest "+f.Digest {
				t.Errorf("last line %q, want the digest", last)
			}
		})
	}
}
