package answer

import (
	"errors"
	"testing"
)

func TestCallToLeavesOutEmptyStrings(t *testing.T) {
	c := CallTo("drain_node", "node", "gpu-02", "approval", "", "wait", 0)
	if c.Tool != "drain_node" || len(c.Arguments) != 2 || c.Arguments["node"] != "gpu-02" || c.Arguments["wait"] != 0 {
		t.Fatalf("%+v", c)
	}
	if _, ok := c.Arguments["approval"]; ok {
		t.Fatalf("an empty approval was kept: %+v", c)
	}
}

func TestRefusalAndFailureSayTheirReasons(t *testing.T) {
	var r *Refusal
	if err := RefuseWith(CallTo("round_status"), "Call round_status.", "a", "b"); !errors.As(err, &r) || err.Error() != "a; b" || r.NextCall.Tool != "round_status" {
		t.Fatalf("%v %+v", err, r)
	}
	var f *Failure
	if err := Fail("Tell a person.", "x"); !errors.As(err, &f) || f.NextAction != "Tell a person." || err.Error() != "x" {
		t.Fatalf("%v %+v", err, f)
	}
	if !IsBlocker(Blocker("apt would remove x")) || IsBlocker("apt would remove x") {
		t.Fatal("blocker prefix")
	}
}
