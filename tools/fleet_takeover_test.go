package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube/leader"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/book"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A leader dies with an install in flight on cp-1; the other server, on
// its own working copy and state directory, takes the round over from
// what the intent remote and the window Lease hold: it adopts the journal
// up to the published head, keeps the signed proofs that verify, and
// completes the install by observing the host under the approval the first
// leader used. The host sees the install once; the next step runs under a
// new signature on the new leader; the old leader, back, follows.
func TestNewLeaderResumesTheInstallInFlight(t *testing.T) {
	f, bare, a, b := takeoverFleet(t)
	dA := f.d

	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain on server-a: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install on server-a: %s %v", res.Status, res.Reasons)
	}
	installs := func() int {
		n := 0
		for _, act := range f.host("cp-1").Actions {
			if strings.Contains(act.What, "install") {
				n++
			}
		}
		return n
	}
	if installs() != 1 {
		t.Fatalf("the host saw %v", f.host("cp-1").Actions)
	}
	// What the remote and the window Lease hold: the install's start.
	pub, ok, err := windowlock.ReadPublished(t.Context(), f.kube, dA.WindowLockConfig())
	if err != nil || !ok {
		t.Fatalf("published head: %v %v", ok, err)
	}
	branch := strings.TrimSpace(gitRun(t, f.repo, "rev-parse", "--abbrev-ref", "HEAD"))
	journal := gitRun(t, bare, "show", branch+":rounds/"+fRound+"/"+round.JournalFile)
	if !strings.Contains(journal, `"step":"install"`) || pub.Round != fRound || pub.Commit != strings.TrimSpace(gitRun(t, bare, "rev-parse", branch)) {
		t.Fatalf("the remote's journal or the published head lacks the install's start: %+v", pub)
	}

	// server-a is gone (its process ended): server-b leads. Someone with
	// push rights adds a proof nobody signed (the install's, moved to
	// gpu-2) to the round's folder on the remote.
	a.Stop()
	f.stop()
	forgeProof(t, bare, branch, "cp-1", "gpu-2")
	cluster, hosts := dA.Cluster, dA.Hosts
	repoA, stateA := f.cfg.IntentRepo, f.cfg.StateDir
	dB, repoB := f.serverB(t, bare, dA, b)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// The install is followed, not run again: no new signature.
	if _, res := f.call("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install on server-b, still running on the host: %s %v", res.Status, res.Reasons)
	}
	f.host("cp-1").InstallState = "finished"
	res := f.must(StatusOK, "install_updates", map[string]any{"node": "cp-1"})
	if installs() != 1 {
		t.Fatalf("the host saw the install %d times: %v", installs(), f.host("cp-1").Actions)
	}
	if id, _ := res["approval_id"].(string); id != "" && !strings.Contains(journal, id) {
		t.Errorf("install finished under approval %q, not the one server-a started it with", id)
	}
	// server-b holds server-a's proofs, verified again: the signed plan
	// stands and the next step asks only for its own signature.
	if _, res := f.approve("trial_boot", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("trial_boot on server-b: %s %v", res.Status, res.Reasons)
	}
	f.host("cp-1").Boot(false)
	f.must(StatusOK, "trial_boot", map[string]any{"node": "cp-1"})
	local := strings.TrimSpace(gitRun(t, repoB, "rev-parse", "HEAD"))
	if remote := strings.TrimSpace(gitRun(t, bare, "rev-parse", branch)); remote != local {
		t.Fatalf("server-b's record is not on the remote: %s vs %s", remote, local)
	}
	if _, err := os.Stat(filepath.Join(repoB, "rounds", fRound, "proofs.jsonl")); err != nil {
		t.Fatalf("the proofs do not travel with the round: %v", err)
	}
	kept, err := book.Proofs{Dir: book.ProofsDir(dB.Config.StateDir)}.All(fRound)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range kept {
		if p.Node == "gpu-2" {
			t.Fatalf("server-b kept a proof nobody signed: %s of %s, approval %s", p.Tool, p.Node, p.ApprovalID)
		}
	}
	if len(kept) == 0 {
		t.Fatal("server-b kept no proof of server-a's")
	}

	// server-a comes back, on its own working copy and state directory:
	// it follows. It refuses what writes, naming server-b, and its
	// round_status is server-b's, as of server-b's last push.
	a2 := mkElector(t, f, "server-a")
	a2.Start(t.Context())
	if err := a2.Observed(ctx); err != nil {
		t.Fatal(err)
	}
	cfgA := f.cfg
	cfgA.IntentRepo, cfgA.StateDir, cfgA.Identity = repoA, stateA, "server-a"
	follower, cleanup, err := Build(t.Context(), &cfgA, dB.Log, func(string) string { return "" }, dB.Clock)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	follower.Cluster, follower.Hosts, follower.Leader = cluster, hosts, a2
	callOn := func(d *Deps, tool string, args map[string]any) (map[string]any, *Result) {
		t.Helper()
		raw, _ := json.Marshal(args)
		out, res := testTools().Get(tool).CallJSON(t.Context(), d, raw, func(float64, float64, string) {})
		ob, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(ob, &m); err != nil {
			t.Fatal(err)
		}
		return m, res
	}
	if _, res := callOn(follower, "drain_node", map[string]any{"node": "gpu-1"}); res.Status != StatusRefused || !strings.Contains(reasons(res), "the leader is server-b") {
		t.Fatalf("drain_node on the follower: %s %v", res.Status, res.Reasons)
	}
	onLeader, _ := callOn(dB, "round_status", map[string]any{})
	onFollower, fres := callOn(follower, "round_status", map[string]any{})
	if fres.Status != StatusOK {
		t.Fatalf("round_status on the follower: %s %v", fres.Status, fres.Reasons)
	}
	if diff := cmp.Diff(onLeader["round"], onFollower["round"]); diff != "" {
		t.Errorf("the follower's round differs from the leader's (-leader +follower):\n%s", diff)
	}
}

// takeoverFleet is the fleet rig with leader election on and a bare
// intent remote: server-a (f.d) leads, server-b's elector (b) follows.
func takeoverFleet(t *testing.T) (f *fleet, bare string, a, b *leader.Elector) {
	t.Helper()
	f = newFleet(t, func(c *config.Config) {
		c.Git.Remote = "origin"
		c.LeaderElection.Enabled = true
		c.LeaderElection.LeaseDuration = config.Duration(time.Minute)
	})
	bare = filepath.Join(t.TempDir(), "intent.git")
	gitRun(t, filepath.Dir(bare), "clone", "-q", "--bare", f.repo, bare)
	gitRun(t, f.repo, "remote", "add", "origin", bare)
	a, b = electorsOn(t, f)
	f.d.Leader = a
	return f, bare, a, b
}

// serverB waits until b leads, then builds server-b as f's server: its own
// working copy (a clone of bare's main), its own state directory, the
// cluster and hosts of dA, elector b. It answers the server and its copy.
func (f *fleet) serverB(t *testing.T, bare string, dA *Deps, b *leader.Elector) (*Deps, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := b.Wait(ctx, true); err != nil {
		t.Fatal(err)
	}
	repoB := filepath.Join(t.TempDir(), "intent-b")
	gitRun(t, filepath.Dir(repoB), "clone", "-q", "-b", "main", bare, repoB)
	cluster, hosts := dA.Cluster, dA.Hosts
	f.cfg.IntentRepo, f.cfg.StateDir, f.cfg.Identity = repoB, t.TempDir(), "server-b"
	f.repo = repoB
	dB := f.build()
	dB.Cluster, dB.Hosts, dB.Leader = cluster, hosts, b
	return dB, repoB
}

// electorsOn are server-a and server-b in one election on the fleet's
// fake API server; server-a leads first.
func electorsOn(t *testing.T, f *fleet) (a, b *leader.Elector) {
	t.Helper()
	return startPair(t, mkElector(t, f, "server-a"), mkElector(t, f, "server-b"))
}

// What the remote holds is a mailbox: a journal edited there after the
// leader published its head is not adopted, and the new leader does
// nothing until a person looks.
func TestNewLeaderRefusesAJournalNotAsPublished(t *testing.T) {
	f, bare, a, b := takeoverFleet(t)
	dA := f.d
	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain on server-a: %s %v", res.Status, res.Reasons)
	}
	a.Stop()
	f.stop()

	// Someone with push rights drops the drain's records from the
	// journal on the remote, and adds a proof nobody signed.
	branch := strings.TrimSpace(gitRun(t, f.repo, "rev-parse", "--abbrev-ref", "HEAD"))
	edit := filepath.Join(t.TempDir(), "edit")
	gitRun(t, filepath.Dir(edit), "clone", "-q", "-b", branch, bare, edit)
	jpath := filepath.Join(edit, "rounds", fRound, round.JournalFile)
	raw, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		if !strings.Contains(line, `"step":"drain"`) {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(jpath, []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, edit, "commit", "-qam", "tidy the journal")
	gitRun(t, edit, "push", "-q", "origin", branch)

	f.serverB(t, bare, dA, b)
	before := len(f.host("cp-1").Actions)
	_, res := f.call("install_updates", map[string]any{"node": "cp-1"})
	if res.Status != StatusRefused || !strings.Contains(reasons(res), "not what was published") || !strings.Contains(reasons(res), "nothing was executed") {
		t.Fatalf("install over an edited journal: %s %v", res.Status, res.Reasons)
	}
	if len(f.host("cp-1").Actions) != before {
		t.Fatalf("the host saw %v", f.host("cp-1").Actions[before:])
	}
	if st, err := os.Stat(filepath.Join(f.cfg.StateDir, "journals", fRound+".jsonl")); err == nil && st.Size() > 0 {
		t.Errorf("server-b anchored a journal it refused (%d bytes)", st.Size())
	}
}

// mkElector is a server's elector on the fleet's fake API server.
func mkElector(t *testing.T, f *fleet, identity string) *leader.Elector {
	t.Helper()
	return newElector(t, f.kube, f.cfg.Kube.LeaseNamespace, identity, 5*time.Second, 3*time.Second, 500*time.Millisecond)
}

// An approved step's start that cannot be published where the next
// leader finds it does nothing: the host sees no install, the answer says
// why, and once the window Lease takes the head again a fresh signature
// starts the install, once.
func TestAStartNotPublishedDoesNothing(t *testing.T) {
	f, _, _, _ := takeoverFleet(t)
	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, res.Reasons)
	}
	// The API server refuses every new journal head from now on.
	var refuse atomic.Bool
	refuse.Store(true)
	f.kube.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l, ok := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ok && refuse.Load() && l.Annotations[windowlock.AnnotationJournalSeq] != "" {
			old, err := f.kube.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), l.Namespace, l.Name)
			if err == nil && old.(*coordinationv1.Lease).Annotations[windowlock.AnnotationJournalSeq] != l.Annotations[windowlock.AnnotationJournalSeq] {
				return true, nil, errors.New("etcdserver: request timed out")
			}
		}
		return false, nil, nil
	})
	installs := func() int {
		n := 0
		for _, act := range f.host("cp-1").Actions {
			if strings.Contains(act.What, "install") {
				n++
			}
		}
		return n
	}
	_, res := f.approve("install_updates", map[string]any{"node": "cp-1"})
	if res.Status == StatusInProgress || res.Status == StatusOK || !strings.Contains(reasons(res), "not published") {
		t.Fatalf("install with its start unpublished: %s %v", res.Status, res.Reasons)
	}
	if installs() != 0 {
		t.Fatalf("the host saw %v", f.host("cp-1").Actions)
	}
	refuse.Store(false)
	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install with the API server back: %s %v", res.Status, res.Reasons)
	}
	if installs() != 1 {
		t.Fatalf("the host saw the install %d times", installs())
	}
}

// forgeProof pushes to the remote's branch a copy of the last proof of
// the round with node from replaced by to (in the request too): its
// signature no longer verifies.
func forgeProof(t *testing.T, bare, branch, from, to string) {
	t.Helper()
	edit := filepath.Join(t.TempDir(), "forge")
	gitRun(t, filepath.Dir(edit), "clone", "-q", "-b", branch, bare, edit)
	path := filepath.Join(edit, "rounds", fRound, "proofs.jsonl")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	forged := strings.ReplaceAll(lines[len(lines)-1], from, to)
	if err := os.WriteFile(path, append(raw, []byte(forged+"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, edit, "commit", "-qam", "add a proof")
	gitRun(t, edit, "push", "-q", "origin", branch)
}
