package lab

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/round"
)

// TestKillServerAnywhere runs the round against the real mcp-patch binary
// (serve over stdio, the lab's config) and kills it with SIGKILL again and
// again: between calls (at step boundaries) and in the middle of calls
// (during a drain, an install, a trial boot). Each restart must carry on
// from the journal: the round reaches the soak with every window closed,
// never two windows open at once, and no node left cordoned.
func TestKillServerAnywhere(t *testing.T) {
	// The drain bound is generous: this test is about carrying on after a
	// kill, and on a loaded machine kwok has been seen taking two minutes
	// to remove an evicted pod (a drain stop there is not what it tests).
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0, GateSettle: 30 * time.Second, DrainTimeoutMinutes: 6})
	bin := filepath.Join(t.TempDir(), "mcp-patch")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/mcp-patch/mcp-patch/cmd/mcp-patch").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r := rand.New(rand.NewPCG(7, 11))
	kills, midCall := 0, 0
	reachedSoak := false
	for iter := 0; iter < 1500 && !reachedSoak; iter++ {
		cmd := exec.Command(bin, "serve", "--config", l.ConfigFile, "--log-level", "error")
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "crash", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("start server: %v", err)
		}
		var killer *time.Timer
		if r.IntN(3) == 0 {
			delay := time.Duration(r.IntN(1500)) * time.Millisecond
			killer = time.AfterFunc(delay, func() { cmd.Process.Kill() })
		}
		agent := &Agent{Session: cs, Sign: l.Sign, MaxCalls: 2 + r.IntN(12), Poll: 50 * time.Millisecond}
		out, err := agent.Run(ctx, "2026-11")
		mid := killer != nil && !killer.Stop()
		if mid {
			midCall++
		}
		cmd.Process.Kill()
		cs.Close()
		cmd.Wait()
		kills++
		if out.Stopped != nil {
			t.Fatalf("after %d kills the round stopped: %+v", kills, out.Stopped)
		}
		if err != nil && strings.Contains(err.Error(), "cannot wait") {
			reachedSoak = true
		}
		if out.Closed {
			t.Fatal("the round closed without its soak")
		}
	}
	if !reachedSoak {
		t.Fatalf("the round did not reach the soak after %d kills", kills)
	}
	t.Logf("server killed %d times (%d in the middle of a call); the round reached the soak", kills, midCall)
	st, info, err := round.ReadState(filepath.Join(l.IntentRepo, "rounds", "2026-11"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Window != round.WindowClosed {
			t.Errorf("window of %s is %s", n.Node, n.Window)
		}
	}
	// Never two windows at once: replaying the journal, each drain starts
	// only when no other window is open (Apply refuses otherwise).
	t.Logf("journal replayed: %+v", info)
	nodes, err := l.Cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s left cordoned (annotations %v)", n.Name, n.Annotations)
		}
	}
}
