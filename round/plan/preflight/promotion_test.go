package preflight

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/promotion"
)

func TestWithPromotionJudgesEachMovingKernelOnce(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	gate := &promotion.Gate{Environment: "production", Upstream: "staging", Soak: time.Hour, Now: now,
		Promoted: []promotion.Promoted{{Kernel: "6.8.0-52-generic", Principal: "alice", Reason: "r", ApprovalID: "a1"}}}
	facts := map[string]plan.Facts{
		"a": {Running: "6.8.0-48-generic", Target: "6.8.0-51-generic"},
		"b": {Running: "6.8.0-48-generic", Target: "6.8.0-51-generic"},
		"c": {Running: "6.8.0-52-generic", Target: "6.8.0-52-generic"}, // not moving
		"d": {Running: "6.8.0-48-generic", Target: "6.8.0-52-generic"},
		"e": {Running: "6.8.0-48-generic"}, // no target
	}
	if got := WithPromotion(plan.Intent{}, nil, facts); got.Promotion != nil {
		t.Fatalf("no gate: %+v", got.Promotion)
	}
	if got := WithPromotion(plan.Intent{TestEnvironment: "lab", TestedKernels: []string{"x"}}, nil, facts); got.TestEnvironment != "lab" {
		t.Errorf("no gate: the hand-kept test environment went: %+v", got)
	}
	if got := WithPromotion(plan.Intent{TestEnvironment: "lab", TestedKernels: []string{"x"}}, gate, facts); got.TestEnvironment != "" || got.TestedKernels != nil {
		t.Errorf("the gate did not supersede the hand-kept test environment: %+v", got)
	}
	got := WithPromotion(plan.Intent{}, gate, facts).Promotion
	if got == nil || got.Environment != "production" || got.Upstream != "staging" || len(got.Verdicts) != 2 {
		t.Fatalf("promotion %+v", got)
	}
	if v := got.Verdicts["6.8.0-51-generic"]; v.Proven || v.Why != "kernel 6.8.0-51-generic never closed a round in staging" {
		t.Errorf("51: %+v", v)
	}
	if v := got.Verdicts["6.8.0-52-generic"]; !v.Proven || v.Risk == "" {
		t.Errorf("52 promoted by a person: %+v", v)
	}
}

func TestCarryLessons(t *testing.T) {
	lesson := func(round, heading string) intent.Lesson {
		return intent.Lesson{Round: round, Heading: heading, Text: "text of " + heading}
	}
	comps := []*intent.Component{
		{Name: "gpu-fleet", Lessons: []intent.Lesson{
			lesson("staging-2026-09", "h1"), lesson("staging-2026-10", "h2"), lesson("production-2026-10", "h3"), lesson("staging-2026-11", "h4"),
		}},
		{Name: "os-layer", Lessons: []intent.Lesson{lesson("staging-2026-09", "h5"), lesson("stagingx-2026-12", "h6")}},
	}
	proved := &promotion.Gate{Upstream: "staging", Proofs: []promotion.Proof{{Outcome: promotion.Outcome{Round: "staging-2026-09"}}}}
	own := plan.Note{Component: "gpu-fleet", Kind: "lesson", Ref: "h3", Text: "text of h3"}
	tests := []struct {
		name string
		gate *promotion.Gate
		in   []plan.Note
		want []plan.Note
	}{
		{name: "no gate", in: []plan.Note{own}, want: []plan.Note{own}},
		{name: "the proven round and the newest", gate: proved, in: []plan.Note{own, {Component: "gpu-fleet", Kind: "lesson", Ref: "h4", Text: "text of h4"}},
			want: []plan.Note{own,
				{Component: "gpu-fleet", Kind: "lesson", Ref: "h4", Text: "text of h4", Source: "staging, round staging-2026-11"},
				{Component: "gpu-fleet", Kind: "lesson", Ref: "h1", Text: "text of h1", Source: "staging, round staging-2026-09"},
				{Component: "os-layer", Kind: "lesson", Ref: "h5", Text: "text of h5", Source: "staging, round staging-2026-09"},
			}},
		{name: "nothing proven: the newest upstream round", gate: &promotion.Gate{Upstream: "staging"}, in: nil,
			want: []plan.Note{{Component: "gpu-fleet", Kind: "lesson", Ref: "h4", Text: "text of h4", Source: "staging, round staging-2026-11"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CarryLessons(plan.Intent{Notes: tt.in}, tt.gate, comps).Notes
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}
