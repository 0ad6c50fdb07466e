package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The starter file names every field of the schema, loads, and gives the
// defaults back for everything but the fields it sets.
func TestStarterLoadsAsDefaultsPlusWhatItSets(t *testing.T) {
	c := DefaultConfig()
	c.IntentRepo = "/srv/intent"
	c.SSH.Inventory = "/etc/mcp-patch/inventory.yaml"
	b, err := Starter(c, map[string]bool{"intent_repo": true, "ssh.inventory": true})
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, field := range []string{"intent_repo:", "# state_dir:", "  # port: 22", "  inventory: /etc/mcp-patch/inventory.yaml", "# dial_timeout: 10s", "# max_lifetime: 24h0m0s", "lease_namespace: kube-system"} {
		if !strings.Contains(text, field) {
			t.Errorf("starter lacks %q:\n%s", field, text)
		}
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("the starter does not load: %v\n%s", err, text)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("loaded config (-want +got):\n%s", diff)
	}
}
