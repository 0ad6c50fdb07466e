package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/inbox"
)

// One inbox, two environments: `mcp-patch approvals` lists each
// environment's round and both requests with the command that signs
// each; `mcp-patch approve ID` signs the one named and leaves the
// approval in the inbox, where the server's verifier accepts it for that
// step alone. An entry whose request is for another node is not signed.
func TestApprovalsInboxAcrossEnvironments(t *testing.T) {
	allowed := signersFile(t) // its key lies beside it
	dir := filepath.Dir(allowed)
	key := filepath.Join(dir, "id_ed25519")
	in := inbox.Dir(filepath.Join(dir, "inbox"))
	now := time.Now()
	digest := "sha256:" + strings.Repeat("ab", 32)
	put := func(env, round, node, listedNode string) {
		t.Helper()
		req, err := policy.NewRequest("drain_node", node, round, digest, []string{"cordon " + node + " and evict 2 pods"}, 30*time.Minute, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Put(inbox.Entry{Environment: env, Round: round, Node: listedNode, Step: "drain_node", Server: "server-" + env,
			Since: now.Add(-5 * time.Minute), Expires: req.Expires, Summary: req.Summary, Request: string(req.Canonical())}, now); err != nil {
			t.Fatal(err)
		}
	}
	put("staging", "staging-2026-12", "gpu-1", "gpu-1")
	put("production", "production-2026-12", "gpu-3", "gpu-3")
	for _, s := range []inbox.Status{
		{Environment: "staging", Round: "staging-2026-12", Phase: "windows", Node: "gpu-1", Deadline: now.Add(13 * 24 * time.Hour), Updated: now},
		{Environment: "production", Round: "production-2026-12", Phase: "windows", Node: "gpu-3", Deadline: now.Add(40 * time.Hour), Updated: now},
	} {
		if err := in.PutStatus(s); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := run(t, "", nil, "approvals", "--inbox", string(in))
	if code != ExitOK {
		t.Fatalf("approvals: exit %d: %s", code, errOut)
	}
	for _, w := range []string{"production-2026-12  windows  gpu-3", "staging", "mcp-patch approve production-2026-12:gpu-3:drain_node",
		"mcp-patch approve staging-2026-12:gpu-1:drain_node", "gpu-3  drain_node", "cordon gpu-3 and evict 2 pods"} {
		if !strings.Contains(out, w) {
			t.Errorf("approvals does not show %q:\n%s", w, out)
		}
	}
	code, out, errOut = run(t, "", nil, "approvals", "--inbox", string(in), "-o", "json")
	var v inboxView
	if code != ExitOK || json.Unmarshal([]byte(out), &v) != nil || len(v.Pending) != 2 || len(v.Environments) != 2 {
		t.Fatalf("approvals -o json: exit %d: %s %s", code, out, errOut)
	}

	prID := "production-2026-12:gpu-3:drain_node"
	code, out, errOut = run(t, "", nil, "approve", "--inbox", string(in), "--key", key, "--yes", prID)
	if code != ExitOK || out != "" || !strings.Contains(errOut, "Environment: production") || !strings.Contains(errOut, "waits in the inbox") {
		t.Fatalf("approve %s: exit %d: %q %s", prID, code, out, errOut)
	}
	approval, ok, err := in.Approval(prID)
	if err != nil || !ok {
		t.Fatalf("no approval left in the inbox (%v)", err)
	}
	if _, ok, _ := in.Approval("staging-2026-12:gpu-1:drain_node"); ok {
		t.Fatal("staging's request was signed too")
	}
	signers, err := policy.LoadAllowedSigners(allowed)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ver := &policy.Verifier{AllowedSigners: signers, NonceStore: store}
	if _, err := ver.Verify(t.Context(), approval, policy.Expectation{Tool: "drain_node", Node: "gpu-1", Round: "production-2026-12", PlanDigest: digest}); err == nil {
		t.Fatal("the approval of gpu-3's drain verified for gpu-1")
	}
	if _, err := ver.Verify(t.Context(), approval, policy.Expectation{Tool: "drain_node", Node: "gpu-3", Round: "production-2026-12", PlanDigest: digest}); err != nil {
		t.Fatalf("the server's verifier refused the inbox's approval: %v", err)
	}
	code, out, _ = run(t, "", nil, "approvals", "--inbox", string(in))
	if code != ExitOK || !strings.Contains(out, "signed; the server uses it") {
		t.Fatalf("a signed request is not shown as signed:\n%s", out)
	}

	// What the listing says is what is signed.
	put("production", "production-2026-12", "gpu-3", "gpu-4")
	if code, _, errOut := run(t, "", nil, "approve", "--inbox", string(in), "--key", key, "--yes", "production-2026-12:gpu-4:drain_node"); code == ExitOK ||
		!strings.Contains(errOut, "is listed for node gpu-4, but its request is for gpu-3") {
		t.Fatalf("a mislabelled entry: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, "", nil, "approve", "--inbox", string(in), "--key", key, "--yes", "production-2026-12:gpu-9:drain_node"); code != ExitUsage ||
		!strings.Contains(errOut, "no request production-2026-12:gpu-9:drain_node is waiting") {
		t.Fatalf("an id the inbox does not hold: exit %d: %s", code, errOut)
	}
}
