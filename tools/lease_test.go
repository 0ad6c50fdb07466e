package tools

import (
	"bytes"
	"strings"
	"testing"
)

// Another operator's window holds the Lease before this drain: the drain
// is refused in plain words, nothing is cordoned and the round goes on.
func TestDrainRefusedWhileAnotherWindowHoldsTheLease(t *testing.T) {
	r := newWRig(t)
	r.lease.Steal("server-b")
	before := r.journalBytes(t)
	_, res := r.call(t, "drain_node", map[string]any{"node": wNode})
	if res.Status == StatusApprovalRequired {
		_, res = r.call(t, "drain_node", map[string]any{"node": wNode, "approval": "signed:" + digestOfRequest(res.Approval.Request)})
	}
	if res.Status != StatusRefused || !strings.Contains(res.NextAction, "Another operator's window is open") {
		t.Fatalf("drain while server-b holds the Lease: %s %v next %q", res.Status, res.Reasons, res.NextAction)
	}
	if len(r.kube.Actions) != 0 || r.lease.Holder != "server-b" {
		t.Fatalf("a refused drain acted: %+v, Lease %q", r.kube.Actions, r.lease.Holder)
	}
	if st := r.journal(t).State(); st.Stop != nil {
		t.Fatalf("the refusal stopped the round: %+v", st.Stop)
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Error("a drain refused for the Lease wrote the journal")
	}
}

// An abort while a window is open ends it: the window Lease is let go at
// once (another round or server may work), journaled.
func TestFleetAbortReleasesTheOpenWindowsLease(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, res.Reasons)
	}
	if h := f.leaseHolder(); h == "" {
		t.Fatal("no window Lease held while the window of cp-1 is open")
	}
	res := f.decide(map[string]any{"decision": "abort", "reason": "the storage team needs the cluster"})
	if res.Status != StatusOK || !strings.Contains(reasons(res), "window Lease released") {
		t.Fatalf("abort: %s %v", res.Status, res.Reasons)
	}
	if h := f.leaseHolder(); h != "" {
		t.Fatalf("the window Lease is still held by %q after the abort", h)
	}
	if rel := f.state().Releases; len(rel) != 1 || rel[0].Node != "cp-1" {
		t.Fatalf("journaled releases %+v", rel)
	}
}
