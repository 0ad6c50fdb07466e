package emul

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAptConfDumpMatchesAptConfig parses apt.conf files the way the real
// apt-config does: the same lines, in the same order.
func TestAptConfDumpMatchesAptConfig(t *testing.T) {
	aptConfig, err := exec.LookPath("apt-config")
	if err != nil {
		t.Fatalf("apt-config (apt) is needed: %v", err)
	}
	dir := "../../../testdata/fixtures/livepatch"
	for _, name := range []string{
		"50unattended-upgrades_ubuntu-server_automatic-reboot-0200-with-users.conf",
		"50unattended-upgrades_ubuntu2204-stock.conf",
		"20auto-upgrades_ubuntu-server_enabled.conf",
		"lab",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if name == "lab" {
				path = filepath.Join(t.TempDir(), "50unattended-upgrades")
				src := "Unattended-Upgrade::Package-Blacklist {\n\t\"linux-\";\n\t\"nvidia-\"; // the driver\n};\n/* block\n comment */ Unattended-Upgrade::DevRelease \"auto\";\nA::B { C \"1\"; D { \"x\"; \"y\"; }; };\n"
				if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, err := exec.Command(aptConfig, "-o", "Dir::Etc::Parts=/nonexistent", "-o", "Dir::Etc::main=/nonexistent", "-c", path, "dump").Output()
			if err != nil {
				t.Fatalf("apt-config: %v", err)
			}
			var want []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if strings.HasPrefix(l, "Unattended-Upgrade") || strings.HasPrefix(l, "APT::Periodic") || strings.HasPrefix(l, "A ") || strings.HasPrefix(l, "A::") {
					want = append(want, l)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tree := &aptNode{}
			tree.parse(string(data))
			var got []string
			for _, l := range tree.dump() {
				if strings.HasPrefix(l, "Unattended-Upgrade") || strings.HasPrefix(l, "APT::Periodic") || strings.HasPrefix(l, "A ") || strings.HasPrefix(l, "A::") {
					got = append(got, l)
				}
			}
			if len(want) < 2 {
				t.Fatalf("apt-config printed too little to compare: %q", want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("dump (-apt-config +ours):\n%s", diff)
			}
		})
	}
}
