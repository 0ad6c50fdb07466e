package tools

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// Under load, a round's destructive calls stay serialised per node: 20
// concurrent promote_kernel calls sharing one approval promote once while
// 16 callers hammer the read-only tools (round_status, check_gate,
// verify_node) on the same round and node, each of which answers a result.
func TestDestructiveSerialisedUnderReadLoad(t *testing.T) {
	r := newWRig(t)
	r.drained(t)
	r.readyToPromote(t)
	_, res := r.call(t, "promote_kernel", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired {
		t.Fatalf("promote: %s %v", res.Status, res.Reasons)
	}
	approval := "signed:" + digestOfRequest(res.Approval.Request)

	ctx, stop := context.WithCancel(context.Background())
	var reads, protocolErrors atomic.Int64
	var load sync.WaitGroup
	reading := []struct {
		tool string
		args map[string]any
	}{{"round_status", map[string]any{}}, {"check_gate", map[string]any{}}, {"verify_node", map[string]any{"node": wNode}}}
	for i := range 16 {
		load.Add(1)
		go func() {
			defer load.Done()
			for n := i; ctx.Err() == nil; n++ {
				c := reading[n%len(reading)]
				_, res := r.call(t, c.tool, c.args)
				if res == nil {
					protocolErrors.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	var wg sync.WaitGroup
	statuses := make([]Status, 20)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, res := r.call(t, "promote_kernel", map[string]any{"node": wNode, "approval": approval})
			statuses[i] = res.Status
		}()
	}
	wg.Wait()
	stop()
	load.Wait()
	if n := r.host.Count("promote"); n != 1 {
		t.Fatalf("20 concurrent calls with one approval under read load promoted %d times (%v)", n, statuses)
	}
	if protocolErrors.Load() > 0 {
		t.Fatalf("%d read-only calls answered no result", protocolErrors.Load())
	}
	t.Logf("%d read-only calls beside 20 concurrent promote_kernel calls (statuses %v)", reads.Load(), statuses)
}
