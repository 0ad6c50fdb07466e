package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
)

// windowLocks holds the window Leases this process keeps renewed.
type windowLocks struct {
	mu   sync.Mutex
	held map[string]context.CancelFunc // round/node → stops Keep
}

func (d *Deps) lockConfig() windowlock.Config {
	return windowlock.Config{Namespace: d.Config.Kube.LeaseNamespace, Identity: d.Identity, Logger: d.Log}
}

// holdWindow takes (or takes back) the window Lease for round and node and
// keeps it renewed for as long as the process runs.
func (d *Deps) holdWindow(ctx context.Context, kc *kube.Clients, roundID, node string) error {
	lock, _, err := windowlock.Acquire(ctx, kc.Kube, d.lockConfig(), roundID, node)
	var held *windowlock.HeldError
	if errors.As(err, &held) {
		return Refuse("Another operator's window is open: wait until it closes (its gate turns green), then call again.",
			fmt.Sprintf("the window lock %s is held by %s for round %s node %s until %s", held.Lease, held.Holder.Identity,
				held.Holder.Round, held.Holder.Node, held.Holder.ExpiresAt.UTC().Format(time.RFC3339)), "nothing was executed")
	}
	if err != nil {
		return fmt.Errorf("take the window lock: %w", err)
	}
	key := roundID + "/" + node
	d.locks.mu.Lock()
	defer d.locks.mu.Unlock()
	if d.locks.held == nil {
		d.locks.held = map[string]context.CancelFunc{}
	}
	if _, ok := d.locks.held[key]; ok {
		return nil
	}
	base := d.Background
	if base == nil {
		base = context.Background()
	}
	kctx, cancel := context.WithCancel(base)
	d.locks.held[key] = cancel
	go func() {
		if err := lock.Keep(kctx); err != nil && kctx.Err() == nil {
			d.Log.Error("window lock lost: stop the window", "round", roundID, "node", node, "err", err)
		}
	}()
	return nil
}

// releaseWindow lets the window Lease go once the node's window closed.
func (d *Deps) releaseWindow(ctx context.Context, kc *kube.Clients, roundID, node string) {
	key := roundID + "/" + node
	d.locks.mu.Lock()
	if cancel, ok := d.locks.held[key]; ok {
		cancel()
		delete(d.locks.held, key)
	}
	d.locks.mu.Unlock()
	lock, _, err := windowlock.Acquire(ctx, kc.Kube, d.lockConfig(), roundID, node)
	if err == nil {
		err = lock.Release(ctx)
	}
	if err != nil {
		d.Log.Warn("window lock not released (it expires by itself)", "round", roundID, "node", node, "err", err)
	}
}

func digestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func clip(lines []string, max int) []string {
	if len(lines) <= max {
		return lines
	}
	return append(lines[:max:max], fmt.Sprintf("... and %d more", len(lines)-max))
}

// ---- drain_node ----

// DrainIn is the node to drain.
type DrainIn struct {
	ApprovalArg
	Node   string `json:"node" jsonschema:"the node to cordon and drain"`
	DryRun bool   `json:"dry_run,omitempty" jsonschema:"cordon and evict with the API server's dry run: every check runs, nothing is persisted, no approval needed"`
}

// DrainOut is what the drain did.
type DrainOut struct {
	Result
	Preview *drain.Plan   `json:"preview,omitempty"`
	Drain   *drain.Result `json:"drain,omitempty"`
}

func (d *Deps) drainPolicy(s *session) drain.Policy {
	pol := drain.Policy{}
	if ds := s.settings.Drain; ds != nil && ds.EmptyDirPolicy == "delete" {
		pol.DeleteEmptyDirData = true
	}
	return pol
}

func (d *Deps) drainTimeout(s *session) time.Duration {
	if ds := s.settings.Drain; ds != nil && ds.TimeoutMinutes > 0 {
		return time.Duration(ds.TimeoutMinutes) * time.Minute
	}
	return d.Config.Kube.DrainTimeout.D()
}

// DrainNode is the drain_node tool.
func DrainNode() Tool {
	run := func(ctx context.Context, d *Deps, s *session, kc *kube.Clients, in DrainIn, expect string, p Progress) (DrainOut, error) {
		res, err := drain.Drain(ctx, kc.Kube, in.Node, drain.Options{
			Policy: d.drainPolicy(s), Round: s.id, Identity: d.Identity, ExpectDigest: expect,
			Timeout: d.drainTimeout(s), EvictRetryDelay: d.Config.Kube.EvictRetry.D(), DryRun: in.DryRun, Logger: d.Log,
		}, func(done, total int, msg string) { p(float64(done), float64(total), msg) })
		out := DrainOut{Drain: &res}
		if in.DryRun {
			if err != nil {
				return out, Fail("Read the blocked pods: the real drain would stop there too.", "dry-run drain: "+err.Error())
			}
			out.Reasons = []string{fmt.Sprintf("dry run: %d pods would be evicted", len(res.Evicted))}
			out.NextAction = "Call drain_node without dry_run to get the approval request."
			return out, nil
		}
		if err != nil {
			var blocked []string
			for _, b := range res.Blocked {
				line := b.PodRef.String() + ": " + b.Reason
				for _, pdb := range b.PDBs {
					line += fmt.Sprintf(" (PDB %s allows %d disruptions)", pdb.Name, pdb.DisruptionsAllowed)
				}
				blocked = append(blocked, line)
			}
			why := append([]string{"drain of " + in.Node + ": " + err.Error()}, blocked...)
			_ = s.fail(round.StepDrain, in.Node, strings.Join(why, "; "))
			return out, Fail("Stop: the node stays cordoned and recorded as ours. Tell a person which pods block (and their PDBs); they fix it and sign resume or abort.", why...)
		}
		if err := s.finish(round.StepDrain, in.Node, "", fmt.Sprintf("%d pods evicted", len(res.Evicted))); err != nil {
			return out, err
		}
		out.Reasons = []string{fmt.Sprintf("%s cordoned (recorded as ours) and %d pods evicted", in.Node, len(res.Evicted))}
		out.NextAction = "install_updates on this node next."
		return out, nil
	}
	return NewDestructive[DrainIn, DrainOut](Spec{
		Name:  "drain_node",
		Title: "Cordon and drain a node",
		Description: "Cordon the node (recording that this round cordoned it) and evict its pods through the Eviction API, PDBs " +
			"respected, DaemonSet pods left alone, emptyDir policy from the intent. The eviction preview (pods that will go) is " +
			"part of the plan a person approves. Opens the node's window: only one window at a time, and only when the previous " +
			"node's gate is green. On failure the node stays cordoned and the blocking pods are named.",
		Idempotent: false, OpenWorld: true,
	}, Steps[DrainIn, DrainOut]{
		Reenter: func(ctx context.Context, d *Deps, in DrainIn, p Progress) (DrainOut, bool, error) {
			if err := ValidNode(in.Node); err != nil {
				return DrainOut{}, true, err
			}
			s, err := d.openSession()
			if err != nil {
				return DrainOut{}, true, err
			}
			if in.DryRun {
				kc, err := d.cluster(ctx)
				if err != nil {
					return DrainOut{}, true, err
				}
				out, err := run(ctx, d, s, kc, in, "", p)
				return out, true, err
			}
			if !s.inFlight(round.StepDrain, in.Node) {
				return DrainOut{}, false, nil
			}
			// A drain this round started and did not record the end of:
			// the cordon is ours; evict what is left, same policy.
			kc, err := d.cluster(ctx)
			if err != nil {
				return DrainOut{}, true, err
			}
			if err := d.holdWindow(ctx, kc, s.id, in.Node); err != nil {
				return DrainOut{}, true, err
			}
			out, err := run(ctx, d, s, kc, in, "", p)
			return out, true, err
		},
		Plan: func(ctx context.Context, d *Deps, in DrainIn) (Plan, error) {
			s, err := d.openSession()
			if err != nil {
				return Plan{}, err
			}
			if err := s.admit(d, round.StepDrain, in.Node); err != nil {
				return Plan{}, err
			}
			if err := d.admitMaintenance(s, in.Node); err != nil {
				return Plan{}, err
			}
			if r := s.stepRun(round.StepSimulate, in.Node); r == nil || !r.Green() {
				return Plan{}, Refuse("Run simulate_upgrade (and download_updates, snapshot_node) on this node first.",
					"no green simulate_upgrade for "+in.Node+" this round: a drain without a checked package plan is not sure")
			}
			kc, err := d.cluster(ctx)
			if err != nil {
				return Plan{}, err
			}
			if n := s.j.State().Node(in.Node); n != nil && n.Role == round.RoleControlPlane {
				// Rebooting a control-plane node takes its etcd member down:
				// every other member must be healthy first, or quorum goes.
				if cfg, err := d.gateConfig(ctx, s); err == nil && cfg.Etcd != nil {
					if c := gate.CheckEtcd(ctx, *cfg.Etcd); !c.OK || len(c.Warnings) > 0 {
						why := "etcd is not fully healthy before the window of control-plane node " + in.Node + ": " +
							strings.Join(append([]string{c.Reason}, c.Warnings...), "; ") + " — its reboot would take another member down and could lose quorum"
						if err := s.start(round.StepDrain, in.Node, ""); err == nil {
							_ = s.fail(round.StepDrain, in.Node, why)
						}
						return Plan{}, Fail("Stop: a person restores the etcd member first, then signs resume.", why, "nothing was cordoned")
					}
				}
			}
			pl, err := drain.Preview(ctx, kc.Kube, in.Node, d.drainPolicy(s))
			if err != nil {
				return Plan{}, Fail("Check the node name and the API server.", "preview drain: "+err.Error())
			}
			if len(pl.Blockers) > 0 {
				why := append([]string{"the drain of " + in.Node + " would be blocked before it starts (nothing was cordoned):"}, pl.Blockers...)
				if err := s.start(round.StepDrain, in.Node, ""); err == nil {
					_ = s.fail(round.StepDrain, in.Node, strings.Join(why, " "))
				}
				return Plan{}, Fail("Stop: a person must deal with these pods (or change the intent's drain policy), then sign resume or abort.", why...)
			}
			summary := []string{fmt.Sprintf("cordon %s and evict %d pods (PDBs respected, DaemonSets stay)", in.Node, len(pl.Evict))}
			var pods []string
			for _, e := range pl.Evict {
				pods = append(pods, "evict "+e.String()+" ("+strings.ToLower(e.OwnerKind)+" "+e.OwnerName+")")
			}
			summary = append(summary, clip(pods, 40)...)
			for _, w := range pl.Warnings {
				summary = append(summary, "warning: "+oneLine(w))
			}
			return Plan{Node: in.Node, Round: s.id, Digest: pl.Digest, Summary: summary}, nil
		},
		Do: func(ctx context.Context, d *Deps, in DrainIn, plan Plan, a Approved, p Progress) (DrainOut, error) {
			s, err := d.openSession()
			if err != nil {
				return DrainOut{}, err
			}
			kc, err := d.cluster(ctx)
			if err != nil {
				return DrainOut{}, err
			}
			if err := d.holdWindow(ctx, kc, s.id, in.Node); err != nil {
				return DrainOut{}, err
			}
			if err := s.start(round.StepDrain, in.Node, a.ID); err != nil {
				d.releaseWindow(ctx, kc, s.id, in.Node)
				return DrainOut{}, err
			}
			return run(ctx, d, s, kc, in, plan.Digest, p)
		},
	})
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ---- install_updates ----

// InstallIn is the node to install on.
type InstallIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"the drained node to install the approved package set on"`
}

// InstallOut is where the install stands.
type InstallOut struct {
	Result
	Install *steps.InstallState `json:"install,omitempty"`
}

// InstallUpdates is the install_updates tool.
func InstallUpdates() Tool {
	status := func(ctx context.Context, d *Deps, s *session, node string) (InstallOut, error) {
		h, err := d.hosts(ctx)
		if err != nil {
			return InstallOut{}, err
		}
		st, err := h.Steps.Install(ctx, node, "status", s.id, "")
		out := InstallOut{Install: &st}
		if err != nil && st.State == "" {
			out.Result = Result{Status: StatusInProgress, Reasons: []string{"cannot read the install's state on " + node + " now: " + err.Error(),
				"the install runs detached on the node; a lost connection does not stop it"},
				NextAction: "Call install_updates again in a minute with the same node."}
			return out, nil
		}
		switch {
		case st.State == "not_started":
			// The process that started the step stopped before the node
			// started apt: start it now, bound to the recorded plan.
			np, _ := s.nodePlan(d, node)
			st2, err := h.Steps.Install(ctx, node, "start", s.id, np.PackageDigest)
			out.Install = &st2
			if err != nil {
				if errors.Is(err, steps.ErrRefused) {
					_ = s.fail(round.StepInstall, node, "the node refused to start the install (resumed): "+err.Error())
					return out, Fail("Stop and tell a person: the node's package set drifted.", err.Error())
				}
				return out, Fail("Call install_updates again: it reads the install's state first.", "starting the install on "+node+": "+err.Error())
			}
			out.Result = Result{Status: StatusInProgress, Reasons: []string{"apt-get full-upgrade started detached on " + node + " (resumed)"},
				NextAction: "Call install_updates again with the same node to follow it."}
			return out, nil
		case st.State == "running":
			out.Result = Result{Status: StatusInProgress,
				Reasons:    []string{fmt.Sprintf("apt is running on %s: %d unpacked, %d set up", node, st.Progress.Unpacked, st.Progress.SetUp)},
				NextAction: "Call install_updates again in a minute with the same node."}
			return out, nil
		case st.State == "finished" && st.ExitCode != nil && *st.ExitCode == 0 && len(st.Progress.DpkgErrors) == 0:
			if err := s.finish(round.StepInstall, node, "", "apt-get full-upgrade exited 0"); err != nil {
				return out, err
			}
			out.Reasons = []string{"apt-get full-upgrade finished on " + node + " (exit 0)"}
			out.NextAction = "trial_boot this node next."
			return out, nil
		case st.State == "finished":
			why := fmt.Sprintf("apt-get full-upgrade on %s failed (exit %v): %s", node, deref(st.ExitCode), strings.Join(st.Progress.DpkgErrors, "; "))
			_ = s.fail(round.StepInstall, node, why)
			return out, Fail("Stop: read the log tail; a person repairs dpkg on the node and signs resume or abort. The old kernel is still the default.", why)
		}
		why := fmt.Sprintf("the install on %s is in state %q, which this round did not start", node, st.State)
		_ = s.fail(round.StepInstall, node, why)
		return out, Fail("Stop and tell a person: the node's install state is unexpected.", why)
	}
	return NewDestructive[InstallIn, InstallOut](Spec{
		Name:  "install_updates",
		Title: "Install the approved updates",
		Description: "Start `apt-get full-upgrade` (non-interactive, needrestart listing only) detached on the drained node, so a " +
			"dropped SSH session cannot kill dpkg. The package set is re-simulated first and must equal the approved plan digest. " +
			"Answers in_progress: call again with the same node to follow it until it finishes. The old kernel stays installed and default.",
		Idempotent: false, OpenWorld: true,
	}, Steps[InstallIn, InstallOut]{
		Reenter: func(ctx context.Context, d *Deps, in InstallIn, p Progress) (InstallOut, bool, error) {
			if err := ValidNode(in.Node); err != nil {
				return InstallOut{}, true, err
			}
			s, err := d.openSession()
			if err != nil {
				return InstallOut{}, true, err
			}
			if !s.inFlight(round.StepInstall, in.Node) {
				return InstallOut{}, false, nil
			}
			out, err := status(ctx, d, s, in.Node)
			return out, true, err
		},
		Plan: func(ctx context.Context, d *Deps, in InstallIn) (Plan, error) {
			s, err := d.openSession()
			if err != nil {
				return Plan{}, err
			}
			if err := s.admit(d, round.StepInstall, in.Node); err != nil {
				return Plan{}, err
			}
			np, ok := s.nodePlan(d, in.Node)
			if !ok || np.PackageDigest == "" {
				return Plan{}, Refuse("Run simulate_upgrade on the node first.", "no simulated package plan is recorded for "+in.Node)
			}
			h, err := d.hosts(ctx)
			if err != nil {
				return Plan{}, err
			}
			sim, err := h.Steps.Simulate(ctx, in.Node)
			if err != nil {
				return Plan{}, hostError(in.Node, "re-simulate before install", err)
			}
			if len(sim.Plan.Blockers) > 0 {
				return Plan{}, Refuse("Run simulate_upgrade again: it records the failure and stops the round.", append([]string{"the live plan is not safe now:"}, sim.Plan.Blockers...)...)
			}
			if sim.Plan.Digest != np.PackageDigest {
				return Plan{}, Refuse("The packages changed since simulate_upgrade: run simulate_upgrade again, then ask for a new approval.",
					fmt.Sprintf("live package plan %s differs from the simulated plan %s", sim.Plan.Digest, np.PackageDigest), "nothing was executed")
			}
			summary := []string{fmt.Sprintf("install on %s: %d packages move (apt-get full-upgrade), nothing is removed", in.Node, len(sim.Plan.Packages))}
			if sim.Plan.TargetKernel != "" {
				summary = append(summary, "new kernel "+sim.Plan.TargetKernel+" is installed beside "+np.RunningKernel+", which stays the default")
			}
			var pk []string
			for _, pkg := range sim.Plan.Packages {
				pk = append(pk, fmt.Sprintf("%s %s %s -> %s [%s]", pkg.Action, pkg.Name, orDash(pkg.OldVersion), pkg.NewVersion, pkg.Class))
			}
			summary = append(summary, clip(pk, 60)...)
			return Plan{Node: in.Node, Round: s.id, Digest: sim.Plan.Digest, Summary: summary}, nil
		},
		Do: func(ctx context.Context, d *Deps, in InstallIn, plan Plan, a Approved, p Progress) (InstallOut, error) {
			s, err := d.openSession()
			if err != nil {
				return InstallOut{}, err
			}
			h, err := d.hosts(ctx)
			if err != nil {
				return InstallOut{}, err
			}
			if err := s.start(round.StepInstall, in.Node, a.ID); err != nil {
				return InstallOut{}, err
			}
			st, err := h.Steps.Install(ctx, in.Node, "start", s.id, plan.Digest)
			if err != nil {
				if errors.Is(err, steps.ErrRefused) {
					_ = s.fail(round.StepInstall, in.Node, "the node refused to start the install: "+err.Error())
					return InstallOut{Install: &st}, Fail("Stop and tell a person: the node's package set drifted or an install was already started.", err.Error())
				}
				// Not sure whether it started: the next call re-checks.
				return InstallOut{Install: &st}, Fail("Call install_updates again: it reads the install's state on the node instead of starting it again.",
					"starting the install on "+in.Node+": "+err.Error())
			}
			return InstallOut{Install: &st, Result: Result{Status: StatusInProgress,
				Reasons:    []string{"apt-get full-upgrade started detached on " + in.Node + " (" + st.Launcher + ")"},
				NextAction: "Call install_updates again with the same node to follow it."}}, nil
		},
	})
}

func deref(p *int) any {
	if p == nil {
		return "?"
	}
	return *p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
