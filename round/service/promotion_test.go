package service

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/promotion"
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

// The outcome names the NVIDIA packages the signed plan installed with
// each kernel on the nodes where it was promoted, not on a node that fell
// back or moved to another kernel.
func TestOutcomeNvidia(t *testing.T) {
	const k = "6.8.0-51-generic"
	o := promotion.Outcome{Kernels: []promotion.Kernel{
		{Kernel: k, Promoted: []string{"gpu-1"}, FellBack: []string{"gpu-2"}},
		{Kernel: "6.8.0-52-generic", Promoted: []string{"cp-1"}},
	}}
	f := plan.Fleet{Nodes: []plan.Node{
		{Node: "gpu-1", Target: k, Packages: plan.Packages{Nvidia: []string{"nvidia-driver-550 550.90 -> 550.127", "nvidia-dkms-535 535.1 -> (remove)"}}},
		{Node: "gpu-2", Target: k, Packages: plan.Packages{Nvidia: []string{"nvidia-driver-560 560.1 -> 560.2"}}},
		{Node: "cp-1", Target: "6.8.0-52-generic"},
	}}
	got := OutcomeNvidia(o, f)
	if !slices.Equal(got.Kernels[0].Nvidia, []string{"nvidia-driver-550 550.127"}) || got.Kernels[1].Nvidia != nil {
		t.Fatalf("OutcomeNvidia = %+v", got.Kernels)
	}
	if o.Kernels[0].Nvidia != nil {
		t.Fatal("OutcomeNvidia changed its input")
	}
}
