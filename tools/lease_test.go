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
