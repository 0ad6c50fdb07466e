package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/rbac"
	"github.com/mcp-patch/mcp-patch/round"
)

// TestRoundWithoutEvictPermission: mcp-patch in the lab is the mcp-patch
// ServiceAccount with only the shipped roles (the API server authorises
// with Node,RBAC: it may not read a Secret). Taking create on
// pods/eviction away before the first drain stops the round at that
// drain, with a reason that names the permission and the rule that grants
// it; no pod is evicted, and the cordon the drain made is the journal's:
// its start is recorded before it, and the failure says the node was left
// cordoned.
func TestRoundWithoutEvictPermission(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0,
		RebootTimeout: 15 * time.Second, GateSettle: 30 * time.Second, DrainTimeoutMinutes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	sa, err := kube.Load(ctx, kube.LoadOptions{Kubeconfig: l.Config.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := rbac.Check(ctx, sa.Kube, rbac.Rules, rbacOptions()); err != nil || len(missing) != 0 {
		t.Fatalf("the ServiceAccount lacks %v (%v)", missing, err)
	}
	if _, err := sa.Kube.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the ServiceAccount listed Secrets: %v", err)
	}

	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	admin := l.Cluster.Client()
	drained := ""
	var podsBefore []string
	agent := &Agent{Session: cs, Sign: l.Sign, Wait: func(until time.Time) { l.Clock.AdvanceTo(until) }, Say: func(s string) { t.Log(s) },
		BeforeCall: func(ctx context.Context, tool, node string) error {
			if tool != "drain_node" || drained != "" {
				return nil
			}
			drained = node
			if podsBefore, err = podsOn(ctx, l, node); err != nil {
				return err
			}
			without := rbac.Without(rbac.Rules, "", "pods/eviction", "create")
			if err := l.ApplyRBAC(ctx, without); err != nil {
				return err
			}
			// The authorizer follows role changes through a watch: wait
			// until it answers the ServiceAccount with the verb gone.
			evict, _ := rbac.Lookup(rbac.Rules, "", "pods/eviction", "create")
			for {
				missing, err := rbac.Check(ctx, sa.Kube, []rbac.Rule{evict}, rbacOptions())
				if err != nil {
					return err
				}
				if len(missing) == 1 {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("the API server still allows evictions: %w", ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		}}
	out, err := agent.Run(ctx, "2026-11")
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	if drained == "" {
		t.Fatalf("the round never reached a drain: %v", out.Steps)
	}
	if out.Stopped == nil || out.Stopped.Step != string(round.StepDrain) || out.Stopped.Node != drained {
		t.Fatalf("the round stopped at %+v (closed %v); want the drain of %s", out.Stopped, out.Closed, drained)
	}
	for _, want := range []string{`cannot create resource "pods/eviction"`, "resources: [pods/eviction], verbs: [create]", "ClusterRole mcp-patch"} {
		if !strings.Contains(out.Stopped.Reason, want) {
			t.Errorf("the stop's reason %q does not say %q", out.Stopped.Reason, want)
		}
	}
	podsAfter, err := podsOn(ctx, l, drained)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range podsBefore {
		if !slices.Contains(podsAfter, p) {
			t.Errorf("pod %s left %s although no eviction was allowed", p, drained)
		}
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started, failed := drainRecords(t, l, drained)
	if !started || !strings.Contains(failed, "pods/eviction") {
		t.Fatalf("journal of %s's drain: started %v, failure %q", drained, started, failed)
	}
	if n.Spec.Unschedulable {
		owner, err := drain.ParseOwner(n.Annotations[drain.AnnotationCordonedBy])
		if err != nil || owner.Round != "2026-11" {
			t.Errorf("%s cordoned without our ownership (%v, %v)", drained, owner, err)
		}
		if !strings.Contains(failed, "node left cordoned") {
			t.Errorf("%s is cordoned by us but the journal's failure %q does not say so", drained, failed)
		}
	}
}

// podsOn lists the pods bound to node, as namespace/name.
func podsOn(ctx context.Context, l *Lab, node string) ([]string, error) {
	list, err := l.Cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out, nil
}

// drainRecords reads the round's journal: whether node's drain started,
// and the detail of its failure.
func drainRecords(t *testing.T, l *Lab, node string) (started bool, failed string) {
	t.Helper()
	data, err := round.ReadJournal(filepath.Join(l.IntentRepo, "rounds", "2026-11"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"node":"`+node+`"`) || !strings.Contains(line, `"step":"drain"`) {
			continue
		}
		switch {
		case strings.Contains(line, `"kind":"`+string(round.KindStepStarted)+`"`):
			started = true
		case strings.Contains(line, `"kind":"`+string(round.KindStepFailed)+`"`) && started:
			failed = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return started, failed
}

// TestPlanWithoutEvictPermission: without create on pods/eviction from
// the start, plan_round's server-side dry-run eviction (the drain preview)
// refuses the plan, naming the permission, before any node is cordoned.
func TestPlanWithoutEvictPermission(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0,
		RBACRules: rbac.Without(rbac.Rules, "", "pods/eviction", "create")})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	res := callTool(t, cs, "plan_round", map[string]any{"round": "2026-11"})
	text := fmt.Sprint(res)
	if res["status"] == "ok" || !strings.Contains(text, `cannot create resource "pods/eviction"`) || !strings.Contains(text, "verbs: [create]") {
		t.Fatalf("plan_round without the eviction permission answered %v", text)
	}
	nodes, err := l.Cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("%s is cordoned after a refused plan", n.Name)
		}
	}
}
