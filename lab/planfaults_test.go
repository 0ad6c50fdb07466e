package lab

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

// TestPlanTimeFaults injects every fault the fleet-wide preflight must
// catch, all at once, one per node of a 2+1+2 lab: apt would remove a
// package on the last GPU server, the NVIDIA modules for the target
// kernel are missing on another, a PDB never lets the canary's pod go,
// /boot is too small on a control-plane node, and a control-plane host is
// powered off. plan_round must name every one (node and cause) as a
// blocker, cordon nothing, and leave the intent repository clean after
// its commit, its own audit record in it.
func TestPlanTimeFaults(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 2, DrainTimeoutMinutes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, f := range []struct{ fault, node, arg string }{
		{"apt-would-remove", "gpu-2", ""},
		{"nvidia-modules-missing", "gpu-1", ""},
		{"pdb-blocks-drain", "", "gpu-canary-1"},
		{"boot-nearly-full", "cp-2", ""},
	} {
		if err := l.Inject(ctx, f.fault, f.node, f.arg); err != nil {
			t.Fatalf("inject %s: %v", f.fault, err)
		}
	}
	down := l.Fleet.Host("cp-1")
	down.PowerOff()
	if err := down.WaitPower(ctx, fleet.PowerOff); err != nil {
		t.Fatal(err)
	}
	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	start := time.Now()
	r := callTool(t, cs, "plan_round", map[string]any{"round": "2026-11"})
	why := strings.Join(anyStrings(r["reasons"]), "\n")
	t.Logf("plan_round: %s in %s\n%s", r["status"], time.Since(start).Round(time.Millisecond), why)
	if r["status"] != "failed" {
		t.Fatalf("plan_round with five faults: %v", r["status"])
	}
	if order := anyStrings(orderOf(r)); len(order) == 0 || order[len(order)-1] != "gpu-2" {
		t.Errorf("gpu-2 is not the last GPU server of the order %v", order)
	}
	for _, want := range []struct{ node, cause string }{
		{"cp-1", "not reachable"},
		{"cp-2", "/boot has 20 MiB free"},
		{"gpu-canary-1", "disruption budget"},
		{"gpu-1", "no NVIDIA kernel modules for the target kernel"},
		{"gpu-2", "apt would remove"},
	} {
		if !hasLine(why, want.node+": ", want.cause) {
			t.Errorf("no blocker names %s with %q", want.node, want.cause)
		}
	}
	nodes, err := l.Cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s cordoned by a blocked plan", n.Name)
		}
	}
	out, err := exec.Command("git", "-C", l.IntentRepo, "status", "--porcelain").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("the intent repository after plan_round (%v):\n%s", err, out)
	}
	audit, err := exec.Command("git", "-C", l.IntentRepo, "show", "HEAD:rounds/2026-11/audit.jsonl").CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(audit)), "\n")
	if err != nil || !strings.Contains(lines[len(lines)-1], `"tool":"plan_round"`) {
		t.Fatalf("the committed audit log does not end with plan_round's record (%v):\n%s", err, audit)
	}
	for _, f := range []string{"plan.md", "plan.json"} {
		if out, err := exec.Command("git", "-C", l.IntentRepo, "cat-file", "-e", "HEAD:rounds/2026-11/"+f).CombinedOutput(); err != nil {
			t.Errorf("%s not committed: %v %s", f, err, out)
		}
	}
}

// orderOf is the nodes of plan_round's order.
func orderOf(r map[string]any) []any {
	o, _ := r["order"].(map[string]any)
	ps, _ := o["positions"].([]any)
	out := make([]any, 0, len(ps))
	for _, p := range ps {
		m, _ := p.(map[string]any)
		out = append(out, m["node"])
	}
	return out
}

// hasLine says whether one line of s starts with prefix and holds cause.
func hasLine(s, prefix, cause string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, cause) {
			return true
		}
	}
	return false
}
