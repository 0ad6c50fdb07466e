package service

import (
	"path/filepath"
	"testing"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/policy"
)

func TestRoundOfEnvironment(t *testing.T) {
	envs := intent.Environments{"prod": {Name: "prod"}, "prod-eu": {Name: "prod-eu"}, "staging": {Name: "staging"}}
	tests := []struct {
		id, env string
		ok      bool
	}{
		{"2026-11", "", true},
		{"staging-2026-11", "", true},
		{"staging-2026-11", "staging", true},
		{"prod-2026-11", "prod", true},
		{"prod-eu-2026-11", "prod-eu", true},
		{"prod-eu-2026-11", "prod", false}, // another environment's round
		{"2026-11", "staging", false},
		{"staging-2026-11", "prod", false},
	}
	for _, tt := range tests {
		if err := RoundOfEnvironment(tt.id, tt.env, envs); (err == nil) != tt.ok {
			t.Errorf("RoundOfEnvironment(%q, %q) = %v, want ok %v", tt.id, tt.env, err, tt.ok)
		}
	}
}

func TestPromotedMatches(t *testing.T) {
	want := policy.AttestationFields{Environment: "production", Round: "production-2026-12", Kernel: "6.8.0-51-generic", Reason: "r"}
	summary := []string{"not proven in staging: never"}
	ok := policy.Request{Environment: "production", Round: "production-2026-12", Kernel: "6.8.0-51-generic", Reason: "r", Summary: summary}
	tests := []struct {
		name string
		edit func(*policy.Request)
		ok   bool
	}{
		{"as asked", func(*policy.Request) {}, true},
		{"another environment", func(r *policy.Request) { r.Environment = "staging" }, false},
		{"another round", func(r *policy.Request) { r.Round = "production-2026-11" }, false},
		{"another kernel", func(r *policy.Request) { r.Kernel = "6.8.0-52-generic" }, false},
		{"another reason", func(r *policy.Request) { r.Reason = "other" }, false},
		{"another summary", func(r *policy.Request) { r.Summary = []string{"not proven in staging: soaking"} }, false},
	}
	for _, tt := range tests {
		r := ok
		tt.edit(&r)
		if err := promotedMatches(r, want, summary); (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestEnvironmentReach(t *testing.T) {
	repo := t.TempDir()
	env := intent.Environment{Name: "production", Context: "production", Inventory: "inventories/production.yaml"}
	tests := []struct {
		name, context, inventory string
		ok                       bool
	}{
		{"its own cluster and inventory", "production", filepath.Join(repo, "inventories", "production.yaml"), true},
		{"in a cluster: no context to compare", "", "", true},
		{"staging's cluster", "staging", "", false},
		{"staging's inventory", "production", filepath.Join(repo, "inventories", "staging.yaml"), false},
	}
	for _, tt := range tests {
		if err := EnvironmentReach(env, tt.context, tt.inventory, repo); (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok %v", tt.name, err, tt.ok)
		}
	}
	if err := EnvironmentReach(intent.Environment{Name: "staging"}, "anything", "/any/inventory.yaml", repo); err != nil {
		t.Errorf("an environment that names neither: %v", err)
	}
}
