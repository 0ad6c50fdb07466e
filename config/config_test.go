package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
)

func TestValidateApprovalLifetimes(t *testing.T) {
	tests := []struct {
		name        string
		ttl, max    time.Duration
		wantErrPart string // "" means valid
	}{
		{name: "defaults", ttl: 30 * time.Minute, max: 24 * time.Hour},
		{name: "a shorter maximum", ttl: 10 * time.Minute, max: 2 * time.Hour},
		{name: "the ceiling", ttl: time.Hour, max: 7 * 24 * time.Hour},
		{name: "over the ceiling", ttl: time.Hour, max: 180 * 24 * time.Hour, wantErrPart: "approvals.max_lifetime"},
		{name: "ttl over the maximum", ttl: 3 * time.Hour, max: 2 * time.Hour, wantErrPart: "approvals.ttl"},
		{name: "zero maximum", ttl: time.Hour, max: 0, wantErrPart: "approvals.max_lifetime: must be positive"},
		{name: "ttl of seconds", ttl: 5 * time.Second, max: time.Hour, wantErrPart: "shorter than a minute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Identity = "test"
			c.Approvals.TTL, c.Approvals.MaxLifetime = Duration(tt.ttl), Duration(tt.max)
			err := c.Validate()
			if tt.wantErrPart == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErrPart)
			}
		})
	}
}

// The config's ceiling is the one policy can issue and verify.
func TestMaxApprovalLifetimeIsPolicyCeiling(t *testing.T) {
	if MaxApprovalLifetime != policy.LifetimeCeiling {
		t.Errorf("config allows %s, policy %s", MaxApprovalLifetime, policy.LifetimeCeiling)
	}
	if d := DefaultConfig().Approvals.MaxLifetime.D(); d != policy.DefaultMaxLifetime {
		t.Errorf("default max_lifetime %s, policy default %s", d, policy.DefaultMaxLifetime)
	}
}

func TestLoadMaxLifetime(t *testing.T) {
	p := t.TempDir() + "/c.yaml"
	if err := writeFile(p, "identity: x\napprovals:\n  max_lifetime: 2h\n  ttl: 20m\n"); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Approvals.MaxLifetime.D() != 2*time.Hour || c.Validate() != nil {
		t.Errorf("max_lifetime %s, validate %v", c.Approvals.MaxLifetime.D(), c.Validate())
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }

func TestValidateVerifyPassEnv(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"KUBECONFIG", "HTTPS_PROXY", "MCP_PATCH_VERIFY_REQUIRE_LIVE"}, ""},
		{[]string{"BAD-NAME"}, "verify.pass_env[0]"},
		{[]string{"KUBECONFIG", "MCP_PATCH_COMPONENT"}, "verify.pass_env[1]: MCP_PATCH_COMPONENT is set by run_verify"},
	} {
		c := DefaultConfig()
		c.Identity = "t"
		c.Verify.PassEnv = tt.names
		err := c.Validate()
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("pass_env %v: Validate = %v, want %q", tt.names, err, tt.want)
		}
	}
	if d := DefaultConfig(); len(d.Verify.PassEnv) != 1 || d.Verify.PassEnv[0] != "KUBECONFIG" || d.Verify.InReadOnly {
		t.Errorf("default verify %+v", d.Verify)
	}
}

func TestValidateMemoryLimit(t *testing.T) {
	if d := DefaultConfig(); d.Serve.MemoryLimitMiB != 16 {
		t.Errorf("default serve.memory_limit_mib %d, want 16", d.Serve.MemoryLimitMiB)
	}
	for mib, want := range map[int]string{0: "", 16: "", 1 << 20: "", -1: "serve.memory_limit_mib: -1 is out of range", 1<<20 + 1: "out of range"} {
		c := DefaultConfig()
		c.Identity = "t"
		c.Serve.MemoryLimitMiB = mib
		err := c.Validate()
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("memory_limit_mib %d: Validate = %v, want %q", mib, err, want)
		}
	}
}

func TestValidateLeaseTiming(t *testing.T) {
	tests := []struct {
		name            string
		duration, renew time.Duration
		wantErrPart     string // "" means valid
	}{
		{name: "defaults", duration: 60 * time.Second, renew: 20 * time.Second},
		{name: "short, for a lab", duration: 2 * time.Second, renew: 200 * time.Millisecond},
		{name: "renew as long as the Lease", duration: 10 * time.Second, renew: 10 * time.Second, wantErrPart: "kube.lease_renew"},
		{name: "sub-second Lease", duration: 500 * time.Millisecond, renew: 100 * time.Millisecond, wantErrPart: "whole number of seconds"},
		{name: "fractional seconds", duration: 1500 * time.Millisecond, renew: 100 * time.Millisecond, wantErrPart: "whole number of seconds"},
		{name: "zero renew", duration: 60 * time.Second, renew: 0, wantErrPart: "kube.lease_renew: must be positive"},
		{name: "zero duration", duration: 0, renew: time.Second, wantErrPart: "kube.lease_duration: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Identity = "test"
			c.Kube.LeaseDuration, c.Kube.LeaseRenew = Duration(tt.duration), Duration(tt.renew)
			err := c.Validate()
			if tt.wantErrPart == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErrPart)
			}
		})
	}
}

func TestValidateEnvironment(t *testing.T) {
	for _, tt := range []struct {
		name, env, want string // want "": valid
	}{
		{name: "none: one environment", env: ""},
		{name: "a label", env: "production-a"},
		{name: "upper case", env: "Production", want: `config environment: "Production" is not an environment name`},
		{name: "a dot", env: "prod.a", want: `config environment: "prod.a" is not an environment name`},
		{name: "too long", env: strings.Repeat("a", 64), want: "config environment:"},
		{name: "space", env: " staging", want: "config environment:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Identity = "t"
			c.Environment = tt.env
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// The environment comes from the file, and MCP_PATCH_ENVIRONMENT wins.
func TestEnvironmentFromFileAndEnv(t *testing.T) {
	p := t.TempDir() + "/c.yaml"
	if err := writeFile(p, "identity: x\nenvironment: staging\n"); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Environment != "staging" {
		t.Errorf("environment from the file = %q, want staging", c.Environment)
	}
	c.ApplyEnv(func(k string) string { return map[string]string{"MCP_PATCH_ENVIRONMENT": "production"}[k] })
	if c.Environment != "production" {
		t.Errorf("environment after MCP_PATCH_ENVIRONMENT = %q, want production", c.Environment)
	}
	c.ApplyEnv(func(string) string { return "" })
	if c.Environment != "production" {
		t.Errorf("an unset MCP_PATCH_ENVIRONMENT changed environment to %q", c.Environment)
	}
}

func TestValidateLeaderElection(t *testing.T) {
	tests := []struct {
		name        string
		edit        func(l *LeaderElection)
		wantErrPart string // "" means valid
	}{
		{name: "defaults, off", edit: func(*LeaderElection) {}},
		{name: "defaults, on", edit: func(l *LeaderElection) { l.Enabled = true }},
		{name: "short, for a test", edit: func(l *LeaderElection) {
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod = Duration(3*time.Second), Duration(2*time.Second), Duration(500*time.Millisecond)
		}},
		{name: "renew deadline as long as the Lease", edit: func(l *LeaderElection) { l.RenewDeadline = l.LeaseDuration },
			wantErrPart: "leader_election.renew_deadline"},
		{name: "retry too long for the deadline", edit: func(l *LeaderElection) { l.RetryPeriod = Duration(9 * time.Second) },
			wantErrPart: "leader_election.retry_period"},
		{name: "fractional seconds", edit: func(l *LeaderElection) { l.LeaseDuration = Duration(15500 * time.Millisecond) },
			wantErrPart: "whole number of seconds"},
		{name: "zero retry", edit: func(l *LeaderElection) { l.RetryPeriod = 0 }, wantErrPart: "leader_election.retry_period: must be positive"},
		{name: "the window Lease's name", edit: func(l *LeaderElection) { l.LeaseName = "mcp-patch-window" }, wantErrPart: "the window Lease"},
		{name: "not a name", edit: func(l *LeaderElection) { l.LeaseName = "Leader_Lease" }, wantErrPart: "leader_election.lease_name"},
		{name: "empty name", edit: func(l *LeaderElection) { l.LeaseName = "" }, wantErrPart: "leader_election.lease_name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Identity = "test"
			tt.edit(&c.LeaderElection)
			err := c.Validate()
			if tt.wantErrPart == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErrPart)
			}
		})
	}
}

// git.push_required needs a remote; leader election implies it where a
// remote is configured.
func TestPushRequired(t *testing.T) {
	for _, tt := range []struct {
		name           string
		remote         string
		required, lead bool
		want           bool
		err            string
	}{
		{name: "no remote, not asked", want: false},
		{name: "asked without a remote", required: true, err: "config git.push_required: needs git.remote"},
		{name: "asked", remote: "origin", required: true, want: true},
		{name: "a remote alone", remote: "origin", want: false},
		{name: "leader election with a remote", remote: "origin", lead: true, want: true},
		{name: "leader election without a remote", lead: true, want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Identity = "t"
			c.Git.Remote, c.Git.PushRequired, c.LeaderElection.Enabled = tt.remote, tt.required, tt.lead
			err := c.Validate()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Validate = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil && !strings.Contains(err.Error(), "leader_election") {
				t.Fatalf("Validate: %v", err)
			}
			if got := c.PushRequired(); got != tt.want {
				t.Fatalf("PushRequired = %v, want %v", got, tt.want)
			}
		})
	}
}

// node_name comes from the file or MCP_PATCH_NODE_NAME (the downward
// API's spec.nodeName in the cluster), and must be a node name.
func TestNodeName(t *testing.T) {
	tests := []struct {
		name, file, env string
		want            string
		wantErrPart     string // "" means valid
	}{
		{name: "unset: an admin host that is not a node"},
		{name: "from the file", file: "cp-1", want: "cp-1"},
		{name: "the environment wins", file: "cp-1", env: "gpu-3.example", want: "gpu-3.example"},
		{name: "not a node name", file: "GPU_3", wantErrPart: `node_name: "GPU_3" is not a Kubernetes node name`},
		{name: "a bad one from the environment", env: "gpu 3", wantErrPart: `node_name: "gpu 3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := t.TempDir() + "/c.yaml"
			text := "identity: x\n"
			if tt.file != "" {
				text += "node_name: " + tt.file + "\n"
			}
			if err := writeFile(p, text); err != nil {
				t.Fatal(err)
			}
			c, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			c.ApplyEnv(func(k string) string { return map[string]string{"MCP_PATCH_NODE_NAME": tt.env}[k] })
			err = c.Validate()
			if tt.wantErrPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
					t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErrPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.NodeName != tt.want {
				t.Fatalf("node_name = %q, want %q", c.NodeName, tt.want)
			}
		})
	}
}
