package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// SnapshotOut lists the backup.
type SnapshotOut struct {
	Result
	Snapshot *steps.SnapshotResult `json:"snapshot,omitempty"`
}

// SnapshotNode is the snapshot_node tool.
func SnapshotNode() Tool {
	return New[NodeIn, SnapshotOut](Spec{
		Name:  "snapshot_node",
		Title: "Snapshot a node",
		Description: "Back up on the node, with sha256, what install could break: etcd (control plane), /etc/kubernetes, host " +
			"config (netplan, GRUB, sysctl, modprobe, apt). Required before install_updates.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (SnapshotOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return SnapshotOut{}, err
		}
		s := d.MaybeRound(true)
		if s == nil {
			return snapshotHostOnly(ctx, d, in.Node)
		}
		n := s.Journal.Shared().Node(in.Node)
		if n == nil {
			return SnapshotOut{}, Refuse("Use a node from the round's order.", in.Node+" is not in this round's order")
		}
		role := steps.RoleWorker
		if n.Role == round.RoleControlPlane {
			role = steps.RoleControlPlane
		}
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return SnapshotOut{}, err
		}
		if err := s.Begin(round.StepSnapshot, in.Node); err != nil {
			return SnapshotOut{}, err
		}
		snap, err := h.Steps.Snapshot(ctx, in.Node, s.ID, role, "")
		if err != nil {
			return SnapshotOut{Snapshot: &snap}, errors.Join(service.HostError(in.Node, "snapshot", err), s.Fail(round.StepSnapshot, in.Node, err.Error()))
		}
		if err := s.Finish(round.StepSnapshot, in.Node, "", fmt.Sprintf("%d files in %s", len(snap.Files), snap.Dir)); err != nil {
			return SnapshotOut{}, err
		}
		return SnapshotOut{Snapshot: &snap, Result: Result{
			Reasons:    []string{fmt.Sprintf("%d files in %s (etcd: %s)", len(snap.Files), snap.Dir, snap.EtcdMethod)},
			NextAction: "drain_node this node once the previous node's window has closed behind a green gate; round_status names the call (approve_window first for a GPU server approved per window).",
			NextCall:   CallTo("round_status")}}, nil
	})
}

// snapshotHostOnly is snapshot_node without a round: the host part only
// (host configuration and /etc/kubernetes; etcd is snapshotted in a round,
// on a control-plane node), under a label of today's date. Nothing is
// recorded.
func snapshotHostOnly(ctx context.Context, d *Deps, node string) (SnapshotOut, error) {
	h, err := d.OpenHosts(ctx)
	if err != nil {
		return SnapshotOut{}, err
	}
	label := "host-" + d.Clock().UTC().Format("20060102")
	snap, err := h.Steps.Snapshot(ctx, node, label, steps.RoleWorker, "")
	if err != nil {
		return SnapshotOut{Snapshot: &snap}, withReasons(service.HostError(node, "snapshot", err), "no round is open: nothing was recorded")
	}
	return SnapshotOut{Snapshot: &snap, Result: Result{
		Reasons: []string{fmt.Sprintf("%d files in %s", len(snap.Files), snap.Dir),
			"no round is open: the host part only (host configuration, /etc/kubernetes; no etcd), nothing was recorded"},
		NextAction: "The backup stays on the node under " + snap.Dir + "."}}, nil
}
