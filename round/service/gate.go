package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func (d *Service) GateConfig(ctx context.Context, s *window.Round) (gate.Config, error) {
	cfg := gate.Config{}
	if s.Settings.StackHealth != nil {
		cfg.Health.CriticalNamespaces = s.Settings.StackHealth.CriticalNamespaces
	}
	base, err := s.Baseline()
	if err != nil {
		return cfg, err
	}
	cfg.Baseline = base
	if pg := s.Settings.Postgres; pg != nil {
		cfg.Postgres = gate.PostgresConfig{Namespaces: []string{pg.Namespace}, RequireClusters: true}
	}
	if k := d.Config.Kube; len(k.EtcdEndpoints) > 0 {
		ec := &gate.EtcdConfig{Endpoints: k.EtcdEndpoints, CAFile: k.EtcdCA, CertFile: k.EtcdCert, KeyFile: k.EtcdKey}
		if k.EtcdTunnel {
			h, err := d.OpenHosts(ctx)
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
	cfg.FailingVerify = d.FailingVerify(ctx)
	alerts, err := d.alertsConfig(s)
	if err != nil {
		return cfg, err
	}
	cfg.Alerts = alerts
	return cfg, nil
}

// FailingVerify runs every component's verify.sh and names those failing.
func (d *Service) FailingVerify(ctx context.Context) []string {
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

// GateRun is one evaluation of the gate: the report, its reasons, and the
// restarts the node's deliberate reboot explains (not yet kept).
type GateRun struct {
	Report   gate.Report
	Reasons  []string
	Accepted []string
	Baseline *gate.Baseline
}

// EvaluateGate evaluates the gate for node ("" for the cluster only). It
// writes nothing.
func EvaluateGate(ctx context.Context, d *Service, s *window.Round, node string) (GateRun, error) {
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return GateRun{}, err
	}
	cfg, err := d.GateConfig(ctx, s)
	if err != nil {
		return GateRun{}, err
	}
	var g GateRun
	if node != "" && cfg.Baseline != nil {
		if r := s.StepRun(round.StepTrialBoot, node); r != nil && r.Green() {
			if g.Accepted, err = gate.AcceptRebootRestarts(ctx, kc.Kube, cfg.Baseline, node); err != nil {
				return GateRun{}, answer.Fail("Check the API server and call again.", err.Error())
			}
			g.Baseline = cfg.Baseline
		}
	}
	g.Report, g.Reasons = gate.Judge(gate.Evaluate(ctx, kc.Kube, kc.Dynamic, cfg), g.Accepted)
	return g, nil
}

// TakeBaseline takes the round's health baseline once, before its first
// window (window.Round.TakeBaseline); nil when the round has one already.
func (d *Service) TakeBaseline(ctx context.Context, kc *kube.Clients, s *window.Round) (*gate.Baseline, error) {
	hc := gate.HealthConfig{}
	if sh := s.Settings.StackHealth; sh != nil {
		hc.CriticalNamespaces = sh.CriticalNamespaces
	}
	return s.TakeBaseline(ctx, func(ctx context.Context) (gate.Baseline, error) {
		return gate.TakeBaseline(ctx, kc.Kube, hc, d.FailingVerify(ctx))
	})
}

// etcdBeforeControlPlane reads etcd's health before the window of a
// control-plane node (window.Round.EtcdBeforeWindow).
func (d *Service) etcdBeforeControlPlane(ctx context.Context, s *window.Round, node string) error {
	return s.EtcdBeforeWindow(ctx, node, func(ctx context.Context) *gate.Check {
		cfg, err := d.GateConfig(ctx, s)
		if err != nil || cfg.Etcd == nil {
			return nil
		}
		c := gate.CheckEtcd(ctx, *cfg.Etcd)
		return &c
	})
}
