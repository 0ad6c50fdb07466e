package tools

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// With ssh.inventory set, the config's ssh.port, ssh.user and ssh.jump still
// apply to the nodes the file leaves them empty for.
func TestHostInventoryKeepsConfigSSHDefaults(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("nodes:\n  bastion: {address: 203.0.113.10}\n  gpu-01: {address: 10.0.0.11}\n  gpu-02: {address: 10.0.0.12, port: 22, user: root, jump: \"-\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config.DefaultConfig()
	c.SSH.Inventory, c.SSH.Port, c.SSH.User, c.SSH.Jump = inv, 2222, "ops", "bastion"
	d := &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got, err := service.LoadHostInventory(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]host.Target{
		"gpu-01": {Name: "gpu-01", Address: "10.0.0.11", Port: 2222, User: "ops", Jump: "bastion"},
		"gpu-02": {Name: "gpu-02", Address: "10.0.0.12", Port: 22, User: "root"},
	} {
		tg, err := got.Lookup(node)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, tg); diff != "" {
			t.Errorf("%s (-want +got):\n%s", node, diff)
		}
	}
}
