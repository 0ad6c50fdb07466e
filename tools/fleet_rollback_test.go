package tools

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// rollbackHosts are the rig's hosts with the rollback steps of
// rollback.sh: prepare makes the old entry the next boot, reboot requests
// it, status proves it by a new boot id and the old uname. A node can be
// made red for verify; its GRUB menu keeps the old kernel's entry.
type rollbackHosts struct {
	*fleetHosts
	mu        sync.Mutex
	red       map[string]string
	requested map[string]bool
	actions   []string
}

var _ window.RollbackHost = (*rollbackHosts)(nil)

func (r *rollbackHosts) Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error) {
	insp, err := r.fleetHosts.Inspect(ctx, node, in)
	for _, e := range insp.Grub.Entries {
		if e.Kernel == fRunning {
			return insp, err
		}
	}
	insp.Grub.Entries = append(insp.Grub.Entries, parse.GrubEntry{ID: fakes.Entry(fRunning), Kernel: fRunning, Submenu: "gnulinux-advanced-u"})
	return insp, err
}

func (r *rollbackHosts) Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error) {
	r.mu.Lock()
	why := r.red[node]
	r.mu.Unlock()
	v, err := r.fleetHosts.Verify(ctx, node, in)
	if why != "" && in.TargetKernel == fTarget {
		v.Passed, v.Problems = false, []string{why}
	}
	return v, err
}

func (r *rollbackHosts) RollbackPrepare(ctx context.Context, node string, in steps.RollbackInput) (steps.Rollback, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actions = append(r.actions, node+" prepare "+in.OldEntry)
	return steps.Rollback{Node: node, NextEntry: in.OldEntry, OldEntry: in.OldEntry, OldKernel: in.OldKernel}, nil
}

func (r *rollbackHosts) RollbackReboot(ctx context.Context, node, rd string) (steps.Rollback, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actions = append(r.actions, node+" reboot")
	r.requested[node] = true
	return steps.Rollback{Node: node, RebootRequestedAt: "now", Method: "systemd-run"}, nil
}

func (r *rollbackHosts) RollbackStatus(ctx context.Context, node, rd string) (steps.Rollback, error) {
	k, err := r.fleetHosts.Kernel(ctx, node)
	if err != nil {
		return steps.Rollback{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := steps.Rollback{Node: node, Kernel: k.Kernel, BootID: "boot-2", RecordedBootID: "boot-2", OldKernel: fRunning, Outcome: steps.OutcomeNotRebooted}
	if r.requested[node] {
		st.RebootRequestedAt = "now"
	}
	if k.Kernel == fRunning {
		st.Outcome, st.Rebooted, st.BootID = steps.OutcomeRolledBack, true, "boot-3"
	}
	return st, nil
}

// A node whose new kernel booted but whose verify is red, rolled back
// through the tools: refused before the round stops at it, approved by
// the person, followed through the reboot, verified on the old kernel,
// uncordoned (this round cordoned it), announced; the round stays
// stopped for a person's decision.
func TestFleetRollbackOfARedNode(t *testing.T) {
	f := newFleet(t)
	rh := &rollbackHosts{fleetHosts: f.hosts, red: map[string]string{"cp-1": "bond0 has 1 active slave"}, requested: map[string]bool{}}
	f.d.Hosts = func(context.Context) (*service.HostAccess, error) {
		return &service.HostAccess{Steps: rh, Pool: nopPool{}}, nil
	}
	f.planned()
	f.preflight("cp-1")
	if _, res := f.call("rollback_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
		t.Fatalf("rollback before the round stops at the node: %s %v", res.Status, res.Reasons)
	}
	for _, step := range []string{"drain_node", "install_updates", "trial_boot"} {
		if _, res := f.approve(step, map[string]any{"node": "cp-1"}); res.Status != StatusOK && res.Status != StatusInProgress {
			t.Fatalf("%s: %s %v", step, res.Status, res.Reasons)
		}
		switch step {
		case "install_updates":
			f.host("cp-1").InstallState = "finished"
			f.must(StatusOK, step, map[string]any{"node": "cp-1"})
		case "trial_boot":
			f.host("cp-1").Boot(false)
			f.must(StatusOK, step, map[string]any{"node": "cp-1"})
		}
	}
	if _, res := f.call("record_verification", map[string]any{"node": "cp-1"}); res.Status != StatusFailed || !strings.Contains(reasons(res), "bond0") {
		t.Fatalf("red verify: %s %v", res.Status, res.Reasons)
	}
	if st := f.state(); st.Stop == nil || st.Stop.Node != "cp-1" {
		t.Fatalf("the round did not stop at cp-1: %+v", st.Stop)
	}
	if _, res := f.call("rollback_node", map[string]any{"node": "cp-1"}); res.Status != StatusApprovalRequired || len(rh.actions) != 0 {
		t.Fatalf("rollback without approval: %s %v; host %v", res.Status, res.Reasons, rh.actions)
	}
	_, res := f.approve("rollback_node", map[string]any{"node": "cp-1"})
	if res.Status != StatusInProgress || strings.Join(rh.actions, ";") != "cp-1 prepare "+fakes.Entry(fRunning)+";cp-1 reboot" {
		t.Fatalf("rollback start: %s %v; host %v", res.Status, res.Reasons, rh.actions)
	}
	if run := f.state().Rollback("cp-1"); run == nil || run.State != round.InFlight || run.ApprovalID == "" {
		t.Fatalf("rollback journaled as %+v", run)
	}
	if _, res := f.call("rollback_node", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("before the reboot: %s %v", res.Status, res.Reasons)
	}
	if !f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 uncordoned before it was back on its old kernel")
	}
	f.host("cp-1").Running = fRunning // the node boots its old kernel
	m, res := f.call("rollback_node", map[string]any{"node": "cp-1"})
	if res.Status != StatusOK || m["uncordoned"] != true || !strings.Contains(reasons(res), "boot-2 → boot-3") {
		t.Fatalf("after the reboot: %s %v %v", res.Status, res.Reasons, m)
	}
	if f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 still cordoned after a green rollback")
	}
	st := f.state()
	if run := st.Rollback("cp-1"); run == nil || run.State != round.Done || run.Kernel != fRunning {
		t.Fatalf("rollback journaled as %+v", run)
	}
	if st.Stop == nil {
		t.Fatal("the rollback resumed the round: a person decides")
	}
	if _, res := f.call("rollback_node", map[string]any{"node": "cp-1"}); res.Status == StatusOK || res.Status == StatusInProgress {
		t.Fatalf("a second rollback of a node on its old kernel: %s %v", res.Status, res.Reasons)
	}
	f.hooks.waitFor(t, "node_rolled_back", "cp-1")
}
