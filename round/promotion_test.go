package round

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Promotion records: the last one of each kernel stands, the report lists
// it (a person's promotion with its statement), and a record without a
// kernel or words is refused.
func TestPromotionRecords(t *testing.T) {
	b := planned(t, time.Hour)
	b.rec(Record{Kind: KindPromotion, Kernel: "6.8.0-51-generic", Detail: "kernel 6.8.0-51-generic never closed a round in staging"})
	b.rec(Record{Kind: KindPromotion, Kernel: "6.8.0-52-generic", Detail: "kernel 6.8.0-52-generic closed green in staging's round staging-2026-10"})
	b.rec(Record{Kind: KindPromotion, Kernel: "6.8.0-51-generic", Detail: "promoted by alice; residual risk: runs without a soaked green round", ApprovalID: "req-1"})
	if p, ok := b.s.LastPromotion("6.8.0-51-generic"); !ok || p.ApprovalID != "req-1" {
		t.Fatalf("last promotion of 51: %+v %v", p, ok)
	}
	if _, ok := b.s.LastPromotion("6.8.0-53-generic"); ok {
		t.Fatal("a promotion of a kernel never recorded")
	}
	var out bytes.Buffer
	if err := RenderReport(&out, b.s); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, w := range []string{"## Promotion", "- 6.8.0-51-generic: promoted by alice; residual risk: runs without a soaked green round (statement req-1)",
		"- 6.8.0-52-generic: kernel 6.8.0-52-generic closed green"} {
		if !strings.Contains(report, w) {
			t.Errorf("the report does not say %q:\n%s", w, report)
		}
	}
	if strings.Contains(report, "never closed a round in staging") {
		t.Errorf("the report lists a verdict a later one replaced:\n%s", report)
	}
	for _, bad := range []Record{{Kind: KindPromotion, Detail: "x"}, {Kind: KindPromotion, Kernel: "6.8.0-51-generic", Detail: " "}} {
		bad.Seq, bad.Time = b.s.LastSeq+1, b.now
		if err := b.s.Apply(bad); err == nil {
			t.Errorf("applied %+v", bad)
		}
	}
}
