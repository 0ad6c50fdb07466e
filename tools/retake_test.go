package tools

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mcp-patch/mcp-patch/round/window"
)

// A server that starts while the journal shows a window open takes the
// window Lease again (a read-only server does not), and writes nothing.
func TestServerRetakesTheWindowLeaseAtStart(t *testing.T) {
	r := newWRig(t)
	if node, err := r.d.RetakeWindowLease(t.Context()); node != "" || err != nil || r.lease.Holds != 0 {
		t.Fatalf("no window open: %q %v, %d holds", node, err, r.lease.Holds)
	}
	r.drained(t)
	r.lease.Steal("") // the server stopped and its Lease lapsed
	before := r.journalBytes(t)

	r.d.Mode = ModeReadOnly
	if node, err := r.d.RetakeWindowLease(t.Context()); node != "" || err != nil || r.lease.Holder != "" {
		t.Fatalf("read-only server: %q %v, Lease %+v", node, err, r.lease)
	}

	r.d.Mode = ModeNormal
	node, err := r.d.RetakeWindowLease(t.Context())
	if err != nil || node != wNode || r.lease.Holder != "server-a" || r.lease.Node != wNode {
		t.Fatalf("restart with %s's window open: %q %v, Lease %+v", wNode, node, err, r.lease)
	}

	r.lease.Steal("server-b")
	if _, err := r.d.RetakeWindowLease(t.Context()); !errors.Is(err, window.ErrLeaseHeld) || r.lease.Holder != "server-b" {
		t.Fatalf("another server holds the Lease: %v, Lease %+v", err, r.lease)
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Error("taking the Lease again at start wrote the journal")
	}
}
