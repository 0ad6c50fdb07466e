package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
)

func TestEnvironmentCheck(t *testing.T) {
	const envs = "environments:\n  staging:\n    compliance: internal\n  production:\n    compliance: external-facing\n    upstream: staging\n    promotion_soak_hours: 168\n"
	tests := []struct {
		name, file, env string
		ok, warn        bool
		want            string
	}{
		{name: "one environment", ok: true, want: "has one environment"},
		{name: "environments, none served", file: envs, ok: true, warn: true, want: "defines production, staging and this server serves none"},
		{name: "production", file: envs, env: "production", ok: true,
			want: "serves production (external-facing, compliance deadline 2 days); rounds are named production-<month>; plans only kernels proven in staging and soaked 168 hours"},
		{name: "staging", file: envs, env: "staging", ok: true, want: "serves staging (internal, compliance deadline 14 days)"},
		{name: "an environment not defined", file: envs, env: "prod", want: `environment "prod" is not defined`},
		{name: "an environment, no file", env: "prod", want: "has no environments.yaml"},
		{name: "malformed", file: "environments:\n  staging:\n    compliance: secret\n", env: "staging", want: "compliance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.file != "" {
				if err := os.WriteFile(filepath.Join(dir, "environments.yaml"), []byte(tt.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := config.DefaultConfig()
			c.IntentRepo, c.Environment = dir, tt.env
			got := environmentCheck(&c)
			if got.ok != tt.ok || got.warn != tt.warn || !strings.Contains(got.msg, tt.want) {
				t.Errorf("got %s (ok %v warn %v), want ok %v warn %v and %q", got, got.ok, got.warn, tt.ok, tt.warn, tt.want)
			}
		})
	}
}
