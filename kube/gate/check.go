// Package gate holds the checks that decide when the next node of a round
// may be cordoned: etcd quorum and leader, every CloudNativePG cluster
// ready, every admission webhook backed by a fully ready Deployment, no new
// stack-health failures against the round's baseline, and the OIDC
// authenticator's issuer answering discovery.
//
// Every check reads and never writes. Each returns a Check with its
// evidence; a check that cannot reach what it inspects fails with the
// reason rather than passing. The package must not know about rounds,
// approvals or SSH: a tunnel to a control-plane host arrives as a dial
// function, host files arrive as bytes.
package gate

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Check names, as they appear in Check.Name.
const (
	NameEtcd     = "etcd"
	NamePostgres = "postgres"
	NameWebhooks = "webhooks"
	NameBaseline = "stack-health"
	NameOIDC     = "oidc"
	NameAlerts   = "alerts"
)

// Check is one gate check's verdict. OK with Warnings means it passes but
// a person should know (an etcd member down with quorum kept).
type Check struct {
	Name     string   `json:"name"`
	OK       bool     `json:"ok"`
	Reason   string   `json:"reason,omitempty"`
	Evidence []string `json:"evidence"`
	Warnings []string `json:"warnings,omitempty"`
	// Duration is how long the check took.
	Duration time.Duration `json:"duration_ns"`
}

// Config says which checks run and how. A nil pointer section reports its
// check as failed with "not configured": a gate never passes on a check it
// did not make.
type Config struct {
	Etcd     *EtcdConfig
	Postgres PostgresConfig
	Webhooks WebhookConfig
	// Baseline is the snapshot taken at round start; nil fails the
	// stack-health check.
	Baseline *Baseline
	Health   HealthConfig
	// FailingVerify are the intent verify checks failing now (the caller
	// runs them); compared against Baseline.FailingVerify.
	FailingVerify []string
	OIDC          OIDCConfig
	// Alerts, when set, adds the alert check (Prometheus or Alertmanager);
	// nil leaves it out: it is optional.
	Alerts *AlertsConfig
}

// Report is the whole gate: green only when every check is OK.
type Report struct {
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
	// Failed names the checks that are not OK.
	Failed []string `json:"failed,omitempty"`
}

// Evaluate runs every check concurrently and returns them in a fixed order.
func Evaluate(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, cfg Config) Report {
	checks := make([]Check, 5)
	var wg sync.WaitGroup
	run := func(i int, f func() Check) {
		wg.Go(func() { checks[i] = f() })
	}
	run(0, func() Check {
		if cfg.Etcd == nil {
			return Check{Name: NameEtcd, Reason: "not configured: no etcd endpoints given"}
		}
		return CheckEtcd(ctx, *cfg.Etcd)
	})
	run(1, func() Check { return CheckPostgres(ctx, dc, cfg.Postgres) })
	run(2, func() Check { return CheckWebhooks(ctx, kc, cfg.Webhooks) })
	run(3, func() Check {
		if cfg.Baseline == nil {
			return Check{Name: NameBaseline, Reason: "not configured: no baseline taken at round start"}
		}
		return CompareBaseline(ctx, kc, *cfg.Baseline, cfg.Health, cfg.FailingVerify)
	})
	run(4, func() Check { return CheckOIDC(ctx, kc, cfg.OIDC) })
	if cfg.Alerts != nil {
		checks = append(checks, Check{})
		run(5, func() Check { return CheckAlerts(ctx, *cfg.Alerts) })
	}
	wg.Wait()
	r := Report{OK: true, Checks: checks}
	for _, c := range checks {
		if !c.OK {
			r.OK = false
			r.Failed = append(r.Failed, c.Name)
		}
	}
	return r
}

// timed runs f and stamps its Duration.
func timed(f func() Check) Check {
	start := time.Now()
	c := f()
	c.Duration = time.Since(start)
	if c.Evidence == nil {
		c.Evidence = []string{}
	}
	return c
}
