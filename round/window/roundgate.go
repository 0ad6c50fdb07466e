package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
)

// BaselineFile is the round's health baseline beside its journal, taken
// once before the first window.
const BaselineFile = "baseline.json"

// GatePhase refuses a node's gate before its phase: its window must be
// open with the kernel promoted. "Not yet" is a refusal, never a failure.
func (r *Round) GatePhase(node string) error {
	n := r.Journal.Shared().Node(node)
	if n == nil {
		return refuse("Use a node from the round's order.", node+" is not in this round's order")
	}
	if n.Window != round.WindowOpen || !n.Steps[round.StepPromote].Green() {
		state := "pending"
		if p := n.Steps[round.StepPromote]; p != nil {
			state = string(p.State)
		}
		return refuse("Not yet: call round_status for the step this node needs now.",
			fmt.Sprintf("not yet: the gate of %s closes its window after promote_kernel (window %s, promote %s)", node, n.Window, state),
			"nothing was checked or recorded")
	}
	return nil
}

// Baseline is the round's health baseline; nil before it was taken.
func (r *Round) Baseline() (*gate.Baseline, error) {
	b, err := r.Book.ReadFile(r.ID, BaselineFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the round's baseline: %w", err)
	}
	var base gate.Baseline
	if err := json.Unmarshal(b, &base); err != nil {
		return nil, fmt.Errorf("read the round's baseline: %w", err)
	}
	return &base, nil
}

func (r *Round) writeBaseline(base gate.Baseline) error {
	b, err := json.MarshalIndent(base, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the baseline: %w", err)
	}
	return r.Book.WriteFile(r.ID, BaselineFile, append(b, '\n'))
}

// KeepAccepted writes base, into which a gate accepted the restarts the
// node's deliberate reboot explains (accepted), as the round's baseline,
// so the later gates of the round accept them too. Nothing accepted:
// nothing is written.
func (r *Round) KeepAccepted(base *gate.Baseline, accepted []string) error {
	if len(accepted) == 0 || base == nil {
		return nil
	}
	if err := r.writeBaseline(*base); err != nil {
		return fmt.Errorf("update the baseline: %w", err)
	}
	return nil
}

// TakeBaseline takes the round's health baseline once, before its first
// window (take reads the cluster): journaled as the baseline step and
// written beside the journal. nil when the round has one already.
func (r *Round) TakeBaseline(ctx context.Context, take func(context.Context) (gate.Baseline, error)) (*gate.Baseline, error) {
	if r.Journal.Shared().BaselineTaken {
		return nil, nil
	}
	if err := r.Begin(round.StepBaseline, ""); err != nil {
		return nil, err
	}
	base, err := take(ctx)
	if err != nil {
		return nil, errors.Join(&Stopped{Next: "Check the API server; a person signs resume, then plan_round again.", Reasons: []string{"take the baseline: " + err.Error()}},
			r.Fail(round.StepBaseline, "", err.Error()))
	}
	b, err := json.MarshalIndent(base, "", "  ")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("encode the baseline: %w", err), r.Fail(round.StepBaseline, "", err.Error()))
	}
	if err := r.Book.WriteFile(r.ID, BaselineFile, append(b, '\n')); err != nil {
		return nil, err
	}
	if err := r.Finish(round.StepBaseline, "", "", fmt.Sprintf("%d not-ready nodes, %d unhealthy workloads, %d failing verify",
		len(base.NotReadyNodes), len(base.UnhealthyWorkloads), len(base.FailingVerify))); err != nil {
		return nil, err
	}
	return &base, nil
}

// EtcdBeforeWindow is DecideEtcdBeforeWindow on etcd's health, read
// (check) only before the window of a control-plane node.
func (r *Round) EtcdBeforeWindow(ctx context.Context, node string, check func(context.Context) *gate.Check) error {
	n := r.Journal.Shared().Node(node)
	if n == nil || n.Role != round.RoleControlPlane {
		return nil
	}
	c := check(ctx)
	if c == nil {
		return nil
	}
	return DecideEtcdBeforeWindow(node, n.Role, c)
}
