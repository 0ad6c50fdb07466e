package host

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The config's ssh.port, ssh.user and ssh.jump lie beneath the inventory
// file's defaults, which lie beneath each node's own fields.
func TestInventoryOverConfigDefaults(t *testing.T) {
	config := Target{Port: 2222, User: "ops", Jump: "bastion"}
	tests := []struct {
		name    string
		yaml    string
		want    map[string]Target
		wantErr string
	}{
		{
			name: "config fills what the file leaves empty, per-node fields win",
			yaml: `
nodes:
  bastion: {address: 203.0.113.10}
  gpu-01: {address: 10.0.0.11}
  gpu-02: {address: 10.0.0.12, port: 22, user: root, jump: "-"}
`,
			want: map[string]Target{
				"bastion": {Name: "bastion", Address: "203.0.113.10", Port: 2222, User: "ops"},
				"gpu-01":  {Name: "gpu-01", Address: "10.0.0.11", Port: 2222, User: "ops", Jump: "bastion"},
				"gpu-02":  {Name: "gpu-02", Address: "10.0.0.12", Port: 22, User: "root"},
			},
		},
		{
			name: "the file's defaults win over the config",
			yaml: `
defaults: {port: 2200, user: ubuntu, jump: "-"}
nodes:
  gpu-01: {address: 10.0.0.11}
  gpu-02: {address: 10.0.0.12, user: admin}
`,
			want: map[string]Target{
				"gpu-01": {Name: "gpu-01", Address: "10.0.0.11", Port: 2200, User: "ubuntu"},
				"gpu-02": {Name: "gpu-02", Address: "10.0.0.12", Port: 2200, User: "admin"},
			},
		},
		{
			name:    "the config's jump must be in the inventory",
			yaml:    "nodes:\n  gpu-01: {address: 10.0.0.11}\n",
			wantErr: `the config's ssh.jump "bastion" is not a node in the inventory`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := ParseInventoryOver([]byte(tc.yaml), config)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Target{}
			for _, n := range inv.Nodes() {
				got[n], _ = inv.Lookup(n)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
			// A node the cluster adds later (SetAddress) gets the layered
			// defaults too.
			if err := inv.SetAddress("gpu-09", "10.0.0.19"); err != nil {
				t.Fatal(err)
			}
			got9, _ := inv.Lookup("gpu-09")
			want9 := Target{Name: "gpu-09", Address: "10.0.0.19", Port: tc.want["gpu-01"].Port, User: tc.want["gpu-01"].User, Jump: tc.want["gpu-01"].Jump}
			if diff := cmp.Diff(want9, got9); diff != "" {
				t.Errorf("node added from the cluster (-want +got):\n%s", diff)
			}
		})
	}
}

// The example inventory in the repository parses.
func TestExampleInventoryParses(t *testing.T) {
	inv, err := LoadInventoryOver("../examples/inventory.yaml", Target{Port: 22})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Nodes()) < 3 {
		t.Errorf("example inventory has %d nodes", len(inv.Nodes()))
	}
}
