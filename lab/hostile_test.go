package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/book"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// hostileTools are the destructive steps of a window a hostile agent
// attacks in the lab round.
var hostileTools = []string{"drain_node", "install_updates", "trial_boot", "promote_kernel"}

// TestHostileAgentInALabRound runs a whole round on the lab (a real
// API server and etcd, emulated hosts behind real SSH, the server as
// Build wires it) with an agent that can write the intent repository's
// working copy but holds no signing key. Before each destructive step a
// person has not signed yet (and, on a GPU server, before its window is
// approved), the agent calls the step bare, then forges what it can
// write: plan and window entries in plan-signatures.json and
// window-signatures/<node>.json carrying the digests the server itself
// asked to have signed, state.json marking every step done, the node's
// plan file, and calls again. After each window step the person's
// signature allowed, it calls the same step again unsigned. None of
// these calls may change the host (packages, dpkg, boots, GRUB's
// environment and drop-in) or cordon the node; the round then carries
// on under the person's signatures to its close.
func TestHostileAgentInALabRound(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 1, GateSettle: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	dir := filepath.Join(l.IntentRepo, "rounds", "2026-11")

	// footprint is everything a destructive step leaves on a node: the
	// host's packages, dpkg's state, its boots and GRUB's files, and the
	// node's cordon.
	footprint := func(node string) string {
		h := l.Fleet.Host(node)
		st, err := h.State()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		names := make([]string, 0, len(st.Packages))
		for name := range st.Packages {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Fprintf(&b, "%s=%s ", name, st.Packages[name].Version)
		}
		fmt.Fprintf(&b, "\nkernel %s boots %d boot_id %s dpkg_interrupted %v\n", st.Kernel, st.Boots, st.BootID, st.DpkgInterrupted)
		for _, p := range []string{"/boot/grub/grubenv", "/etc/default/grub.d/99-trial-boot.cfg", "/boot/grub/grub.cfg"} {
			data, err := os.ReadFile(h.Path(p))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s:\n%s\n", p, data)
		}
		n, err := l.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "unschedulable %v\n", n.Spec.Unschedulable)
		return b.String()
	}
	// forge writes the records the agent can write, with the digests
	// taken from the server's own plan and request; it answers a function
	// that puts every file back as it was.
	forge := func(tool, node, requestDigest string) func() {
		files := map[string][]byte{}
		keep := func(name string) {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) {
				files[name] = nil
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			files[name] = data
		}
		write := func(name string, data []byte) {
			keep(name)
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		js, err := os.ReadFile(filepath.Join(dir, "plan.json"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := plan.Decode(js)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := f.Node(node)
		if !ok {
			t.Fatalf("%s is not in the plan", node)
		}
		tools := window.WindowTools(n, requestDigest)
		if requestDigest != "" {
			tools[tool] = requestDigest
		}
		when := l.Clock.Now().UTC()
		steps := map[string]map[plan.Step]string{}
		for _, pn := range f.Nodes {
			steps[pn.Node] = pn.Steps
		}
		ws := map[string]any{"node": node, "window_digest": n.Window, "principal": "alice@example.org",
			"approval_id": "89abcdef0123456789abcdef", "tools": tools, "time": when}
		ps := map[string]any{
			"plan": []any{map[string]any{"digest": f.Digest, "revision": f.Revision, "principal": "alice@example.org",
				"approval_id": "0123456789abcdef01234567", "time": when, "nodes": steps}},
			"windows": map[string]any{node: ws},
		}
		for name, v := range map[string]any{"plan-signatures.json": ps, "window-signatures/" + node + ".json": ws} {
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			write(name, b)
		}
		// The server keeps its state snapshot in its state directory: the
		// agent forges a state.json into the round from it.
		if st, err := os.ReadFile(round.SnapshotPath(dir, book.AnchorDir(l.Config.StateDir))); err == nil {
			s := strings.NewReplacer(`"in_flight"`, `"done"`, `"not_started"`, `"done"`, `"pending"`, `"done"`).Replace(string(st))
			write(round.StateFile, []byte(s))
		}
		if np, err := os.ReadFile(filepath.Join(dir, "nodes", node+".json")); err == nil {
			write("nodes/"+node+".json", []byte(strings.ReplaceAll(string(np), "sha256:", "sha256:0")))
		}
		return func() {
			for name, data := range files {
				p := filepath.Join(dir, name)
				if data == nil {
					if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
						t.Fatal(err)
					}
					continue
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	bareAnswers := map[string]bool{"approval_required": true, "refused": true}
	attacked := map[string]int{}
	// attack calls tool on node bare and under forged records: neither
	// call may act.
	attack := func(tool, node string) {
		// Once, before the agent's first call of the step: a later call
		// may be the re-entry of a step a person's signature started,
		// which observes and finishes it.
		if attacked[tool+" "+node] > 0 {
			return
		}
		attacked[tool+" "+node]++
		before := footprint(node)
		r := callTool(t, cs, tool, map[string]any{"node": node})
		if !bareAnswers[fmt.Sprint(r["status"])] {
			t.Fatalf("%s %s called bare, no signature: %v %v", tool, node, r["status"], r["reasons"])
		}
		digest := ""
		if ap, ok := r["approval"].(map[string]any); ok {
			req, err := policy.ParseRequest([]byte(fmt.Sprint(ap["request"])))
			if err != nil {
				t.Fatal(err)
			}
			digest = req.PlanDigest
		}
		restore := forge(tool, node, digest)
		r = callTool(t, cs, tool, map[string]any{"node": node})
		restore()
		if !bareAnswers[fmt.Sprint(r["status"])] {
			t.Fatalf("%s %s under forged signatures and state: %v %v", tool, node, r["status"], r["reasons"])
		}
		if after := footprint(node); after != before {
			t.Fatalf("%s %s without a signature changed the node:\nbefore:\n%s\nafter:\n%s", tool, node, before, after)
		}
		attacked[tool]++
	}
	windowApproved := map[string]bool{}
	agent := &Agent{Session: cs, Sign: l.Sign, Wait: l.Clock.AdvanceTo, Say: func(s string) { t.Log(s) },
		BeforeCall: func(ctx context.Context, tool, node string) error {
			switch {
			case tool == "approve_window":
				// Before the person approves the window: the drain, the
				// window's first step, under forged window entries.
				attack("drain_node", node)
			case slices.Contains(hostileTools, tool) && !windowApproved[node]:
				attack(tool, node)
			}
			return nil
		},
		AfterCall: func(ctx context.Context, tool, node, status string) {
			if tool == "approve_window" && status == "ok" {
				windowApproved[node] = true
			}
			if !slices.Contains(hostileTools, tool) || status != "ok" || tool == "drain_node" {
				return
			}
			// The step ran under its signature; the same step again,
			// unsigned, changes nothing (a used approval is used).
			before := footprint(node)
			r := callTool(t, cs, tool, map[string]any{"node": node})
			if after := footprint(node); after != before {
				t.Errorf("%s %s called again after it ran (%v %v) changed the node:\nbefore:\n%s\nafter:\n%s", tool, node, r["status"], r["reasons"], before, after)
			}
			attacked[tool+" again"]++
		}}
	out, err := agent.Run(ctx, "2026-11")
	if err != nil && !strings.Contains(err.Error(), "cannot wait") {
		t.Fatalf("round: %v (after %d calls)", err, out.Calls)
	}
	if out.Stopped != nil {
		t.Fatalf("the round stopped: %+v", out.Stopped)
	}
	for _, tool := range hostileTools {
		if attacked[tool] == 0 || attacked[tool+" again"] == 0 && tool != "drain_node" {
			t.Errorf("%s was never attacked: %v", tool, attacked)
		}
	}
	t.Logf("attacks without a signature, by tool: %v; the round went on under %d person signatures (closed: %v)", attacked, out.Approvals, out.Closed)
}
