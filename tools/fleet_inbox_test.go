package tools

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/round/inbox"
)

// One inbox for two environments: staging's and production's servers
// (each its own cluster, repository and state directory) leave their
// requests in one inbox directory. It lists both at once with their
// environment, round, node and step, and each environment's round; a
// person signing one there lets exactly that step run at its next call
// without an approval: an approval left under another step's id is
// refused, removed and runs nothing, and the other environment's step
// still waits.
func TestOneInboxAcrossEnvironments(t *testing.T) {
	shared := t.TempDir()
	in := inbox.Dir(shared)
	inboxAt := func(c *config.Config) { c.Approvals.Inbox = shared }
	st := newFleet(t, func(c *config.Config) { c.Environment, c.Identity = "staging", "server-staging" }, inboxAt)
	pr := newFleet(t, production, func(c *config.Config) { c.Identity = "server-production" }, inboxAt)
	pr.upstreamRecord(stagingOutcome("staging-2026-10", pr.now.Add(-300*time.Hour), fTarget, nil), nil)
	const stRound = "staging-2026-11"

	// Staging's plan signed from the inbox.
	st.must(StatusOK, "plan_round", map[string]any{"round": stRound})
	_, res := st.call("sign_plan", nil)
	planID := inbox.ID(stRound, "all-nodes", "sign_plan")
	if res.Status != StatusApprovalRequired || !strings.Contains(reasons(res), "inbox as "+planID) {
		t.Fatalf("sign_plan without an approval: %s %v", res.Status, res.Reasons)
	}
	e, err := in.Get(planID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Environment != "staging" || e.Server != "server-staging" || e.Request != res.Approval.Request {
		t.Fatalf("the inbox's request: %+v", e)
	}
	if err := in.Sign(planID, st.person.sign(t, e.Request)); err != nil {
		t.Fatal(err)
	}
	if _, res := st.call("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan with the approval signed in the inbox: %s %v", res.Status, res.Reasons)
	}
	if _, err := in.Get(planID); err == nil {
		t.Fatal("the used request stayed in the inbox")
	}

	// Production's plan signed the usual way, through the agent.
	pr.must(StatusOK, "plan_round", map[string]any{"round": prodRound})
	if _, res := pr.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("production's sign_plan: %s %v", res.Status, res.Reasons)
	}
	st.preflight("cp-1")
	pr.preflight("cp-1")
	for _, f := range []*fleet{st, pr} {
		if _, res := f.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusApprovalRequired {
			t.Fatalf("drain_node without an approval: %s %v", res.Status, res.Reasons)
		}
	}
	pr.hooks.waitFor(t, "production", "mcp-patch approve "+inbox.ID(prodRound, "cp-1", "drain_node"))

	// The inbox lists both environments' requests, and their rounds.
	pending, err := in.List(pr.now)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]inbox.Entry{}
	for _, e := range pending {
		got[e.ID] = e
	}
	stID, prID := inbox.ID(stRound, "cp-1", "drain_node"), inbox.ID(prodRound, "cp-1", "drain_node")
	if len(pending) != 2 || got[stID].Environment != "staging" || got[prID].Environment != "production" || got[prID].Step != "drain_node" {
		t.Fatalf("the inbox lists %+v", pending)
	}
	statuses, err := in.Statuses()
	if err != nil {
		t.Fatal(err)
	}
	if len(statuses) != 2 || statuses[0].Environment != "production" || statuses[0].Round != prodRound || statuses[0].Phase != "windows" ||
		statuses[1].Environment != "staging" || statuses[1].Round != stRound {
		t.Fatalf("the environments' rounds: %+v", statuses)
	}
	// Production's compliance clock is 2 days (external-facing), staging's 14.
	if d := statuses[0].Deadline.Sub(pr.now); d <= 0 || d > 48*time.Hour {
		t.Errorf("production's deadline %s is not within 2 days of %s", statuses[0].Deadline, pr.now)
	}
	if d := statuses[1].Deadline.Sub(st.now); d <= 13*24*time.Hour || d > 14*24*time.Hour {
		t.Errorf("staging's deadline %s is not 14 days on", statuses[1].Deadline)
	}

	// round_status shows both environments' rounds.
	m := pr.must(StatusOK, "round_status", nil)
	envs, _ := m["environments"].([]any)
	if len(envs) != 2 || !strings.Contains(fmt.Sprint(envs), stRound) || !strings.Contains(fmt.Sprint(m["reasons"]), "2 request(s) of 2 environment(s) wait") {
		t.Fatalf("round_status across environments: %v; %v", m["environments"], m["reasons"])
	}

	// Staging's approval left under production's id runs nothing there.
	if err := in.Sign(prID, st.person.sign(t, got[stID].Request)); err != nil {
		t.Fatal(err)
	}
	if _, res := pr.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused || !strings.Contains(reasons(res), "was refused and removed") {
		t.Fatalf("another step's approval in the inbox: %s %v", res.Status, res.Reasons)
	}
	if pr.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 was cordoned under another step's approval")
	}
	if _, ok, err := in.Approval(prID); err != nil || ok {
		t.Fatalf("the refused approval stayed in the inbox (%v)", err)
	}

	// Signed from the inbox, exactly production's drain of cp-1 runs.
	if _, res := pr.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusApprovalRequired {
		t.Fatalf("drain_node asked again: %s %v", res.Status, res.Reasons)
	}
	e, err = in.Get(prID)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Sign(prID, pr.person.sign(t, e.Request)); err != nil {
		t.Fatal(err)
	}
	if _, res := pr.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain_node with the inbox's approval: %s %v", res.Status, res.Reasons)
	}
	if !pr.node("cp-1").Spec.Unschedulable {
		t.Fatal("production's cp-1 was not cordoned")
	}
	if st.node("cp-1").Spec.Unschedulable {
		t.Fatal("staging's cp-1 was cordoned by production's approval")
	}
	if _, res := st.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusApprovalRequired {
		t.Fatalf("staging's drain ran without its own signature: %s %v", res.Status, res.Reasons)
	}
	pending, err = in.List(pr.now)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ID != stID {
		t.Fatalf("after production's drain the inbox lists %+v", pending)
	}
}
