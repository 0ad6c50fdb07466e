package tools

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// peer is a second server of the same cluster, built by Build like the
// rig's own: its own state directory and identity, its own working copy of
// the intent repository (a copy of the rig's, taken now), the same
// allowed_signers, the same cluster (the API server stand-in, where used
// nonces are shared) and the same hosts.
func (f *fleet) peer() *fleet {
	f.t.Helper()
	repo := filepath.Join(f.t.TempDir(), "intent")
	if out, err := exec.Command("cp", "-a", f.repo, repo).CombinedOutput(); err != nil {
		f.t.Fatalf("copy the intent repository: %v: %s", err, out)
	}
	c := *f.d.Config
	c.IntentRepo, c.StateDir, c.Identity = repo, f.t.TempDir(), "server-b"
	if c.StateDir == f.d.Config.StateDir {
		f.t.Fatal("the peer shares the state directory")
	}
	// The round's anchor goes with the round (until the cluster holds its
	// head): without it the peer opens none of the rig's journals.
	if err := os.CopyFS(service.AnchorDir(c.StateDir), os.DirFS(service.AnchorDir(f.d.Config.StateDir))); err != nil {
		f.t.Fatalf("copy the rounds' anchors: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clock := func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	d, cleanup, err := Build(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string) string { return "" }, clock)
	if err != nil {
		f.t.Fatalf("Build the peer: %v", err)
	}
	f.t.Cleanup(func() { cancel(); cleanup() })
	d.Cluster, d.Hosts = f.d.Cluster, f.d.Hosts
	return &fleet{t: f.t, d: d, repo: repo, kube: f.kube, dyn: f.dyn, hosts: f.hosts, person: f.person, model: f.model, hooks: f.hooks, now: f.now}
}

// signedWith calls tool with a signed approval (or statement, for
// record_decision) the caller already holds.
func (f *fleet) signedWith(tool, field, signed string, args map[string]any) *Result {
	f.t.Helper()
	with := map[string]any{field: signed}
	for k, v := range args {
		with[k] = v
	}
	_, res := f.call(tool, with)
	return res
}

// An approval used on one server is refused by a second server of the
// same cluster with another state directory, though it is otherwise valid
// there (same round, same plan, same signer): the used nonce is where every
// server looks. Nothing is recorded on the second server.
func TestApprovalUsedOnOneServerIsRefusedOnAnother(t *testing.T) {
	a := newFleet(t)
	a.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	_, res := a.call("sign_plan", nil)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		t.Fatalf("sign_plan without approval: %s %v", res.Status, res.Reasons)
	}
	approval := a.person.sign(t, res.Approval.Request)
	b := a.peer() // the same round, planned, not yet signed

	// The peer asks for the same request: the approval is valid there.
	if _, res := b.call("sign_plan", nil); res.Status != StatusApprovalRequired || res.Approval == nil || res.Approval.Request == "" {
		t.Fatalf("the peer's sign_plan without approval: %s %v", res.Status, res.Reasons)
	}
	if res := a.signedWith("sign_plan", "approval", approval, nil); res.Status != StatusOK {
		t.Fatalf("sign_plan on server-a: %s %v", res.Status, res.Reasons)
	}
	journal := filepath.Join(b.repo, "rounds", fRound, round.JournalFile)
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	res = b.signedWith("sign_plan", "approval", approval, nil)
	if res.Status == StatusOK || !strings.Contains(reasons(res), "replayed") {
		t.Fatalf("the approval replayed on server-b: %s %v", res.Status, res.Reasons)
	}
	if after, err := os.ReadFile(journal); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the refused replay wrote server-b's journal (%v)", err)
	}
	if _, res := b.call("sign_plan", nil); res.Status != StatusApprovalRequired {
		t.Fatalf("server-b's plan after the refused replay: %s %v", res.Status, res.Reasons)
	}
}

// A signed resume statement used on one server is refused by a second
// server of the same cluster with another state directory, though the
// stop it answers is the same there; the round stays stopped on the
// second server.
func TestStatementUsedOnOneServerIsRefusedOnAnother(t *testing.T) {
	a := newFleet(t)
	a.host("gpu-2").Unreachable = true
	if _, res := a.call("plan_round", map[string]any{"round": fRound}); res.Status != StatusFailed {
		t.Fatalf("plan_round with gpu-2 down: %s %v", res.Status, res.Reasons)
	}
	a.host("gpu-2").Unreachable = false
	args := map[string]any{"decision": "resume", "reason": "gpu-2 is back"}
	_, res := a.call("record_decision", args)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		t.Fatalf("record_decision without a statement: %s %v", res.Status, res.Reasons)
	}
	statement := a.person.sign(t, res.Approval.Request)
	b := a.peer() // the same stop
	if st := b.state(); st.Stop == nil {
		t.Fatal("the peer's copy of the round is not stopped")
	}
	if res := a.signedWith("record_decision", "attestation", statement, args); res.Status != StatusOK {
		t.Fatalf("resume on server-a: %s %v", res.Status, res.Reasons)
	}
	if st := a.state(); st.Stop != nil {
		t.Fatalf("server-a's round still stopped: %+v", st.Stop)
	}
	res = b.signedWith("record_decision", "attestation", statement, args)
	if res.Status == StatusOK || !strings.Contains(reasons(res), "replayed") {
		t.Fatalf("the statement replayed on server-b: %s %v", res.Status, res.Reasons)
	}
	if st := b.state(); st.Stop == nil {
		t.Fatal("server-b's round resumed under a statement used on server-a")
	}
}
