package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/tools"
)

// TestReadOnlySweep runs a round and, after every call the agent makes,
// calls every read-only tool: the journal's bytes, the intent repository
// (refs and working tree) and the window Lease's holder stay exactly as
// they were, and the round is never stopped by them.
func TestReadOnlySweep(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 3, Canary: 1, GPUServers: 0}) // three: a single Postgres instance blocks the drain
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const roundID = "2026-11"
	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	var readOnly []tools.Tool
	for _, tl := range tools.Builtin().All() {
		if tl.Spec().Kind == tools.ReadOnly {
			readOnly = append(readOnly, tl)
		}
	}
	snapshot := func() string {
		var b strings.Builder
		j, _ := round.ReadJournal(filepath.Join(l.IntentRepo, "rounds", roundID))
		fmt.Fprintf(&b, "journal %d %x\n", len(j), j)
		for _, args := range [][]string{{"for-each-ref"}, {"status", "--porcelain"}} {
			out, err := exec.Command("git", append([]string{"-C", l.IntentRepo}, args...)...).Output()
			if err != nil {
				t.Fatalf("git %v: %v", args, err)
			}
			b.Write(out)
		}
		lease, err := l.Cluster.Client().CoordinationV1().Leases(l.Config.Kube.LeaseNamespace).Get(ctx, windowlock.DefaultName, metav1.GetOptions{})
		if err == nil {
			holder := ""
			if lease.Spec.HolderIdentity != nil {
				holder = *lease.Spec.HolderIdentity
			}
			fmt.Fprintf(&b, "lease %s %v %v\n", holder, lease.Annotations, lease.Spec.AcquireTime)
		}
		return b.String()
	}
	sweeps := 0
	agent := &Agent{Session: cs, Sign: l.Sign, Wait: l.Clock.AdvanceTo,
		BeforeClose: func(ctx context.Context) error {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_lesson", Arguments: map[string]any{
				"component": "os-layer", "kind": "lesson", "round": roundID, "text": "read-only sweep round"}})
			return err
		}}
	agent.AfterCall = func(ctx context.Context, tool, node, status string) {
		if status == "in_progress" {
			return
		}
		if node == "" {
			node = "cp-1"
		}
		before := snapshot()
		for _, tl := range readOnly {
			args := map[string]any{}
			if p := tl.InputSchema().Properties; p != nil {
				if _, ok := p["node"]; ok {
					args["node"] = node
				}
				if _, ok := p["component"]; ok && tl.Spec().Name == "run_verify" {
					args["component"] = "os-layer"
				}
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tl.Spec().Name, Arguments: args}); err != nil {
				t.Errorf("%s after %s %s: protocol error %v", tl.Spec().Name, tool, node, err)
			}
		}
		sweeps++
		if after := snapshot(); after != before {
			t.Errorf("read-only tools changed something after %s %s:\n%s", tool, node, diffLines(before, after))
		}
	}
	out, err := agent.Run(ctx, roundID)
	if err != nil {
		t.Fatalf("round: %v (after %d calls)", err, out.Calls)
	}
	if !out.Closed {
		t.Fatalf("round did not close: %+v", out.Stopped)
	}
	t.Logf("%d sweeps of %d read-only tools over a round of %d calls", sweeps, len(readOnly), out.Calls)
}

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out bytes.Buffer
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			fmt.Fprintf(&out, "- %.200s\n+ %.200s\n", x, y)
		}
	}
	return out.String()
}
