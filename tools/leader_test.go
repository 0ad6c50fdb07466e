package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube/leader"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// electorOn is this rig's server ("server-a") in an election on a fake
// API server that holds the objects given.
func electorOn(t *testing.T, r *wrig, objs ...*coordinationv1.Lease) *leader.Elector {
	t.Helper()
	kc := fake.NewClientset()
	for _, l := range objs {
		if _, err := kc.CoordinationV1().Leases(l.Namespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e, err := leader.New(kc, leader.Config{Namespace: "kube-system", Name: "mcp-patch-leader", WindowLease: "mcp-patch-window",
		Identity: "server-a", LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Start(t.Context())
	t.Cleanup(e.Stop)
	r.d.Config.LeaderElection.Enabled = true
	r.d.Leader = e
	return e
}

// roundAudit is the round's audit log ("" while there is none).
func roundAudit(t *testing.T, r *wrig) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.root, "rounds", wRound, "audit.jsonl"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return b
}

// A follower refuses a destructive tool before anything is done, naming
// the leader, and answers read-only tools.
func TestFollowerRefusesDestructiveNamingTheLeader(t *testing.T) {
	r := newWRig(t)
	holder, secs, now := "server-b", int32(60), metav1.NewMicroTime(time.Now())
	e := electorOn(t, r, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "mcp-patch-leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now, AcquireTime: &now}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.Observed(ctx); err != nil {
		t.Fatal(err)
	}
	r.d.Audit = r.d.RecordAudit
	before := r.journalBytes(t)
	auditBefore := roundAudit(t, r)

	for _, args := range []map[string]any{{"node": wNode}, {"node": wNode, "approval": "signed:anything"}} {
		_, res := r.call(t, "drain_node", args)
		why := strings.Join(res.Reasons, "; ")
		if res.Status != StatusRefused || !strings.Contains(why, "is a follower; the leader is server-b; call it") ||
			!strings.Contains(res.NextAction, "server-b") || !strings.Contains(why, "nothing was executed") {
			t.Fatalf("drain_node on a follower: %s %q next %q", res.Status, why, res.NextAction)
		}
		t.Logf("refused: %q; next: %q", why, res.NextAction)
	}
	if len(r.kube.Actions) != 0 || r.lease.Holder != "" {
		t.Fatalf("a follower acted: %+v, window Lease %q", r.kube.Actions, r.lease.Holder)
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Error("a follower's refused drain wrote the round's journal")
	}
	if !bytes.Equal(auditBefore, roundAudit(t, r)) {
		t.Error("a follower's refused drain wrote the round's audit log")
	}
	spill, err := os.ReadFile(filepath.Join(r.d.Config.StateDir, "audit.jsonl"))
	if err != nil || !bytes.Contains(spill, []byte(`"tool":"drain_node"`)) || !bytes.Contains(spill, []byte(`"follower":true`)) {
		t.Errorf("the follower's audit in its state directory: %v\n%s", err, spill)
	}
	if _, res := r.call(t, "round_status", map[string]any{}); res.Status == StatusRefused || res.Status == StatusFailed {
		t.Fatalf("round_status on a follower: %s %v", res.Status, res.Reasons)
	}
}

// The leader runs the step; a leader whose fence fails just before the
// step acts does nothing and says so.
func TestLeaderIsFencedBeforeItActs(t *testing.T) {
	r := newWRig(t)
	e := electorOn(t, r)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.Wait(ctx, true); err != nil {
		t.Fatal(err)
	}
	_, res := r.call(t, "drain_node", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired {
		t.Fatalf("drain_node on the leader, unsigned: %s %v", res.Status, res.Reasons)
	}
	signed := "signed:" + digestOfRequest(res.Approval.Request)

	// The same leader, fenced off after admission (another server took
	// the leader Lease while this one still believed it led).
	r.d.Leader = &fenceFails{Leadership: e}
	before := r.journalBytes(t)
	_, res = r.call(t, "drain_node", map[string]any{"node": wNode, "approval": signed})
	why := strings.Join(res.Reasons, "; ")
	if res.Status != StatusRefused || !strings.Contains(why, "fenced off just before it acted") || !strings.Contains(why, "nothing was executed") {
		t.Fatalf("fenced drain: %s %q", res.Status, why)
	}
	if f := r.d.Leader.(*fenceFails); f.checks == 0 {
		t.Fatal("the fence was never checked")
	}
	if len(r.kube.Actions) != 0 || r.lease.Holder != "" {
		t.Fatalf("a fenced leader acted: %+v, window Lease %q", r.kube.Actions, r.lease.Holder)
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Error("a fenced drain wrote the journal")
	}

	r.d.Leader = e
	_, res = r.call(t, "drain_node", map[string]any{"node": wNode, "approval": signed})
	if res.Status != StatusOK && res.Status != StatusInProgress {
		t.Fatalf("drain_node on the leader, signed: %s %v", res.Status, res.Reasons)
	}
	if len(r.kube.Actions) == 0 {
		t.Fatal("the leader's signed drain did nothing")
	}
}

// fenceFails is a leadership whose step is admitted and whose fence then
// fails: the leader Lease changed hands after the step was admitted.
type fenceFails struct {
	service.Leadership
	checks int
}

func (f *fenceFails) Check(context.Context, leader.Fence) error {
	f.checks++
	return fmt.Errorf("%w: the leader Lease is now held by \"server-b\" (3 transitions), not this server (\"server-a\")", leader.ErrFenced)
}

// electors are two servers, "server-a" and "server-b", in one election on
// one fake API server; server-a leads first, server-b has seen it.
func electors(t *testing.T) (a, b *leader.Elector) {
	t.Helper()
	kc := fake.NewClientset()
	mk := func(identity string) *leader.Elector {
		return newElector(t, kc, "kube-system", identity, time.Minute, 40*time.Second, time.Second)
	}
	return startPair(t, mk("server-a"), mk("server-b"))
}

// newElector is identity's elector on kc, stopped when the test ends.
func newElector(t *testing.T, kc kubernetes.Interface, ns, identity string, lease, renew, retry time.Duration) *leader.Elector {
	t.Helper()
	e, err := leader.New(kc, leader.Config{Namespace: ns, Name: "mcp-patch-leader", WindowLease: "mcp-patch-window",
		Identity: identity, LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

// startPair starts a and waits until it leads, then starts b and waits
// until it has seen the leader.
func startPair(t *testing.T, a, b *leader.Elector) (*leader.Elector, *leader.Elector) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a.Start(t.Context())
	if err := a.Wait(ctx, true); err != nil {
		t.Fatal(err)
	}
	b.Start(t.Context())
	if err := b.Observed(ctx); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// The leader never drains the node it runs on: asked to, it hands the
// lead over and refuses, having done nothing, and the other server, which
// runs elsewhere, drains it. A leader running elsewhere is admitted.
func TestLeaderHandsOverTheNodeItRunsOn(t *testing.T) {
	r := newWRig(t)
	a, b := electors(t)
	r.d.Config.LeaderElection.Enabled = true
	r.d.Config.LeaderElection.LeaseDuration = config.Duration(time.Minute)
	r.d.Leader = a

	// Running on another node, the leader's drain goes on to its approval.
	r.d.Config.NodeName = "cp-1"
	_, res := r.call(t, "drain_node", map[string]any{"node": wNode})
	if res.Status != StatusApprovalRequired {
		t.Fatalf("drain_node %s on the leader running on cp-1: %s %v", wNode, res.Status, res.Reasons)
	}
	signed := "signed:" + digestOfRequest(res.Approval.Request)
	if !a.IsLeader() {
		t.Fatal("the leader stepped down for another node's drain")
	}

	// Running on the node to drain, it hands over and does nothing.
	r.d.Config.NodeName = wNode
	before := r.journalBytes(t)
	_, res = r.call(t, "drain_node", map[string]any{"node": wNode, "approval": signed})
	why := strings.Join(res.Reasons, "; ")
	if res.Status != StatusRefused || !strings.Contains(why, "this server runs on "+wNode) ||
		!strings.Contains(why, "(server-a) handed the lead over") || !strings.Contains(why, "nothing was executed") {
		t.Fatalf("drain_node of the node the leader runs on: %s %q next %q", res.Status, why, res.NextAction)
	}
	t.Logf("refused: %q; next: %q", why, res.NextAction)
	if len(r.kube.Actions) != 0 || r.lease.Holder != "" {
		t.Fatalf("the leader acted on the node it runs on: %+v, window Lease %q", r.kube.Actions, r.lease.Holder)
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Error("the refused drain wrote the journal")
	}
	if a.IsLeader() {
		t.Fatal("the leader still leads after handing over")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := b.Wait(ctx, true); err != nil {
		t.Fatalf("the other server never took the lead: %v", err)
	}

	// The other server, running elsewhere, drains the node; the approval
	// was not used up by the refusal.
	r.d.Leader, r.d.Config.NodeName = b, "cp-1"
	_, res = r.call(t, "drain_node", map[string]any{"node": wNode, "approval": signed})
	if res.Status != StatusOK && res.Status != StatusInProgress {
		t.Fatalf("drain_node on the new leader: %s %v", res.Status, res.Reasons)
	}
	if len(r.kube.Actions) == 0 {
		t.Fatal("the new leader's signed drain did nothing")
	}
}
