package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

const baselineFile = "baseline.json"

func (d *Deps) gateConfig(ctx context.Context, s *window.Round) (gate.Config, error) {
	cfg := gate.Config{}
	if s.Settings.StackHealth != nil {
		cfg.Health.CriticalNamespaces = s.Settings.StackHealth.CriticalNamespaces
	}
	if b, err := d.Book.ReadFile(s.ID, baselineFile); err == nil {
		var base gate.Baseline
		if err := json.Unmarshal(b, &base); err != nil {
			return cfg, fmt.Errorf("read the round's baseline: %w", err)
		}
		cfg.Baseline = &base
	}
	if pg := s.Settings.Postgres; pg != nil {
		cfg.Postgres = gate.PostgresConfig{Namespaces: []string{pg.Namespace}, RequireClusters: true}
	}
	if k := d.Config.Kube; len(k.EtcdEndpoints) > 0 {
		ec := &gate.EtcdConfig{Endpoints: k.EtcdEndpoints, CAFile: k.EtcdCA, CertFile: k.EtcdCert, KeyFile: k.EtcdKey}
		if k.EtcdTunnel {
			h, err := d.hosts(ctx)
			if err != nil {
				return cfg, err
			}
			ec.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				host, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				return h.Pool.Dial(ctx, host, "tcp", net.JoinHostPort("127.0.0.1", port))
			}
		}
		cfg.Etcd = ec
	}
	cfg.OIDC = gate.OIDCConfig{PodNamespace: "kube-system", PodSelector: "component=kube-apiserver"}
	if f := d.Config.Kube.OIDCCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return cfg, fmt.Errorf("kube.oidc_ca_file: %w", err)
		}
		cfg.OIDC.CAPEM = pem
	}
	cfg.FailingVerify = d.failingVerify(ctx)
	alerts, err := d.alertsConfig(s)
	if err != nil {
		return cfg, err
	}
	cfg.Alerts = alerts
	return cfg, nil
}

// failingVerify runs every component's verify.sh and names those failing.
func (d *Deps) failingVerify(ctx context.Context) []string {
	if d.Intent == nil {
		return nil
	}
	r, err := d.Intent("")
	if err != nil {
		return nil
	}
	cs, err := r.Components()
	if err != nil {
		return nil
	}
	var failing []string
	for _, c := range cs {
		if !c.HasVerify {
			continue
		}
		v, err := r.RunVerify(ctx, c.Name, 2*time.Minute, d.VerifyEnv)
		if errors.Is(err, intent.ErrVerifyDisabled) {
			d.Log.Warn("verify.sh not run; the stack health check leaves verify out", "err", err)
			return nil
		}
		if err != nil || !v.Passed {
			failing = append(failing, c.Name)
		}
	}
	return failing
}

// gateRun is one evaluation of the gate: the report, its reasons, and the
// restarts the node's deliberate reboot explains (not yet kept).
type gateRun struct {
	rep      gate.Report
	reasons  []string
	accepted []string
	baseline *gate.Baseline
}

// keepAccepted writes the restarts a gate accepted (those the node's
// deliberate reboot explains) into the round's baseline, so the later
// gates of the round accept them too.
func (d *Deps) keepAccepted(s *window.Round, g gateRun) error {
	if len(g.accepted) == 0 {
		return nil
	}
	b, err := json.MarshalIndent(g.baseline, "", "  ")
	if err == nil {
		err = d.Book.WriteFile(s.ID, baselineFile, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("update the baseline: %w", err)
	}
	return nil
}

// evaluateGate evaluates the gate for node ("" for the cluster only). It
// writes nothing.
func evaluateGate(ctx context.Context, d *Deps, s *window.Round, node string) (gateRun, error) {
	kc, err := d.cluster(ctx)
	if err != nil {
		return gateRun{}, err
	}
	cfg, err := d.gateConfig(ctx, s)
	if err != nil {
		return gateRun{}, err
	}
	var g gateRun
	if node != "" && cfg.Baseline != nil {
		if r := s.StepRun(round.StepTrialBoot, node); r != nil && r.Green() {
			if g.accepted, err = gate.AcceptRebootRestarts(ctx, kc.Kube, cfg.Baseline, node); err != nil {
				return gateRun{}, Fail("Check the API server and call again.", err.Error())
			}
			g.baseline = cfg.Baseline
		}
	}
	rep := gate.Evaluate(ctx, kc.Kube, kc.Dynamic, cfg)
	for i, c := range rep.Checks {
		if c.Name == gate.NameBaseline && len(g.accepted) > 0 {
			rep.Checks[i].Evidence = append(rep.Checks[i].Evidence, "expected with the reboot, not counted: "+strings.Join(g.accepted, "; "))
		}
	}
	// An etcd member down keeps quorum, but the next control-plane
	// reboot would lose it: the gate is red until every member answers.
	for i, c := range rep.Checks {
		if c.Name == gate.NameEtcd && c.OK && len(c.Warnings) > 0 {
			rep.Checks[i].OK = false
			rep.Checks[i].Reason = "an etcd member is not healthy (" + strings.Join(c.Warnings, "; ") + "): quorum holds now, but the next control-plane reboot would lose it"
			rep.OK = false
			rep.Failed = append(rep.Failed, c.Name)
		}
	}
	for _, c := range rep.Checks {
		if !c.OK {
			g.reasons = append(g.reasons, c.Name+": "+c.Reason)
		}
		for _, w := range c.Warnings {
			g.reasons = append(g.reasons, c.Name+" (warning): "+w)
		}
	}
	g.rep = rep
	return g, nil
}

// gatePhase refuses a node's gate before its phase: its window must be
// open with the kernel promoted. "Not yet" is a refusal, never a failure.
func gatePhase(s *window.Round, node string) error {
	n := s.Journal.Shared().Node(node)
	if n == nil {
		return Refuse("Use a node from the round's order.", node+" is not in this round's order")
	}
	if n.Window != round.WindowOpen || !n.Steps[round.StepPromote].Green() {
		return Refuse("Not yet: call round_status for the step this node needs now.",
			fmt.Sprintf("not yet: the gate of %s closes its window after promote_kernel (window %s, promote %s)", node, n.Window, stepState(n.Steps[round.StepPromote])),
			"nothing was checked or recorded")
	}
	return nil
}

func stepState(r *round.StepRun) string {
	if r == nil {
		return "pending"
	}
	return string(r.State)
}

// takeBaseline takes the round's health baseline once, before its first
// window: journaled as the baseline step, written to rounds/<id>/baseline.json.
// nil when the round has one already.
func (d *Deps) takeBaseline(ctx context.Context, kc *kube.Clients, s *window.Round) (*gate.Baseline, error) {
	if s.Journal.Shared().BaselineTaken {
		return nil, nil
	}
	hc := gate.HealthConfig{}
	if sh := s.Settings.StackHealth; sh != nil {
		hc.CriticalNamespaces = sh.CriticalNamespaces
	}
	if err := s.Begin(round.StepBaseline, ""); err != nil {
		return nil, err
	}
	base, err := gate.TakeBaseline(ctx, kc.Kube, hc, d.failingVerify(ctx))
	if err != nil {
		return nil, errors.Join(Fail("Check the API server; a person signs resume, then plan_round again.", "take the baseline: "+err.Error()),
			s.Fail(round.StepBaseline, "", err.Error()))
	}
	b, err := json.MarshalIndent(base, "", "  ")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("encode the baseline: %w", err), s.Fail(round.StepBaseline, "", err.Error()))
	}
	if err := d.Book.WriteFile(s.ID, baselineFile, append(b, '\n')); err != nil {
		return nil, err
	}
	if err := s.Finish(round.StepBaseline, "", "", fmt.Sprintf("%d not-ready nodes, %d unhealthy workloads, %d failing verify", len(base.NotReadyNodes), len(base.UnhealthyWorkloads), len(base.FailingVerify))); err != nil {
		return nil, err
	}
	return &base, nil
}

// etcdBeforeControlPlane is window.DecideEtcdBeforeWindow on etcd's health,
// read only before the window of a control-plane node.
func (d *Deps) etcdBeforeControlPlane(ctx context.Context, s *window.Round, node string) error {
	n := s.Journal.Shared().Node(node)
	if n == nil || n.Role != round.RoleControlPlane {
		return nil
	}
	cfg, err := d.gateConfig(ctx, s)
	if err != nil || cfg.Etcd == nil {
		return nil
	}
	c := gate.CheckEtcd(ctx, *cfg.Etcd)
	return window.DecideEtcdBeforeWindow(node, n.Role, &c)
}
