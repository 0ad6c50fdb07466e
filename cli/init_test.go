package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/policy"
)

// init writes a config that loads and points at the files beside it, an
// inventory that parses, an allowed_signers template that parses (and, once
// a person is added the way it says, lists them), and a .mcp.json with
// absolute paths; a second init overwrites nothing.
func TestInitWritesAWorkingStarterAndOverwritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cfg")
	repo := exampleRepo(t)
	code, out, errOut := run(t, "", nil, "init", "--dir", dir, "--intent-repo", repo)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	c, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("config.yaml does not load: %v", err)
	}
	if c.IntentRepo != repo || c.SSH.Inventory != filepath.Join(dir, "inventory.yaml") || c.Approvals.AllowedSigners != filepath.Join(dir, "allowed_signers") {
		t.Errorf("config paths: intent %q inventory %q signers %q", c.IntentRepo, c.SSH.Inventory, c.Approvals.AllowedSigners)
	}
	if info, _ := os.Stat(cfgPath); info.Mode().Perm() != 0o600 {
		t.Errorf("config.yaml mode %v, want 0600", info.Mode().Perm())
	}
	if _, err := host.LoadInventory(c.SSH.Inventory); err != nil {
		t.Errorf("inventory.yaml: %v", err)
	}
	// The template's own instructions add a person.
	signers := c.Approvals.AllowedSigners
	tmpl, _ := os.ReadFile(signers)
	if !strings.Contains(string(tmpl), `namespaces="mcp-patch"`) || !strings.Contains(string(tmpl), "ssh-keygen -Y verify") {
		t.Errorf("allowed_signers template lacks the lines to add and check a person:\n%s", tmpl)
	}
	pub := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnb8X1eO3RHDpVxA0WVo1nkHbtqTxCqG6ScVjP6W4V4 alice@laptop"
	line := `alice@example.org namespaces="mcp-patch" ` + pub + "\n"
	if err := os.WriteFile(signers, append(tmpl, line...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.LoadAllowedSigners(signers); err != nil {
		t.Errorf("allowed_signers with a person added as it says: %v", err)
	}
	// .mcp.json runs this binary's serve with the config, by absolute paths.
	var mcpJSON struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, ".mcp.json"))
	if err := json.Unmarshal(b, &mcpJSON); err != nil {
		t.Fatalf(".mcp.json: %v\n%s", err, b)
	}
	srv := mcpJSON.MCPServers["mcp-patch"]
	if !filepath.IsAbs(srv.Command) || strings.Join(srv.Args, " ") != "serve --config "+cfgPath {
		t.Errorf(".mcp.json server %+v", srv)
	}
	// A second init refuses and leaves the edited file as it is.
	code, _, errOut = run(t, "", nil, "init", "--dir", dir)
	if code != ExitNotOK || !strings.Contains(errOut, "overwrites nothing") {
		t.Fatalf("second init: exit %d, %s", code, errOut)
	}
	if after, _ := os.ReadFile(signers); !strings.Contains(string(after), "alice@example.org") {
		t.Error("the second init changed allowed_signers")
	}
	// And the config works as written: a read-only tool runs with it.
	code, out, errOut = run(t, "", nil, "tool", "read_intent", "--config", cfgPath, "--state-dir", t.TempDir())
	if code != ExitOK || !strings.Contains(out, "os-layer") {
		t.Errorf("read_intent with the starter config: exit %d\n%s\n%s", code, out, errOut)
	}
}
