package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const unitFile = "systemd/mcp-patch.service"

// installed writes the unit as it would be installed, with ExecStart's
// binary at a path that exists here (systemd-analyze verify checks it is
// executable): this test's own executable.
func installed(t *testing.T, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "ExecStart=/usr/local/bin/mcp-patch serve --http 127.0.0.1:") {
		t.Fatalf("%s: ExecStart does not run /usr/local/bin/mcp-patch serve --http on loopback", unitFile)
	}
	text = strings.Replace(text, "ExecStart=/usr/local/bin/mcp-patch ", "ExecStart="+exe+" ", 1)
	if edit != nil {
		text = edit(text)
	}
	p := filepath.Join(t.TempDir(), "mcp-patch.service")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install Debian's systemd package (scripts/setup.sh does)")
	}
	return p
}

// verify runs systemd-analyze verify; it exits 0 on a value it could not
// parse or an unknown key (it ignores them), so any output is a failure.
func verify(t *testing.T, path string) (string, error) {
	out, err := exec.Command(systemdAnalyze(t), "verify", "--man=no", path).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestSystemdUnitVerifies: systemd-analyze verify accepts the unit without
// a warning, and says so for a broken one.
func TestSystemdUnitVerifies(t *testing.T) {
	if out, err := verify(t, installed(t, nil)); err != nil || out != "" {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	broken := installed(t, func(s string) string {
		return strings.Replace(strings.Replace(s, "ProtectSystem=strict", "ProtectSystem=bogus", 1), "Restart=on-failure", "Restrt=on-failure", 1)
	})
	out, _ := verify(t, broken)
	if !strings.Contains(out, "protect system value") || !strings.Contains(out, "Unknown key 'Restrt'") {
		t.Errorf("systemd-analyze verify of a broken unit said %q", out)
	}
}

// TestSystemdUnitHardening: the directives the deployment relies on are
// there, and systemd-analyze security rates the unit's exposure as the
// deploy page shows it (at most 2.0, "OK").
func TestSystemdUnitHardening(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"User=mcp-patch", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=yes",
		"Restart=on-failure", "StateDirectory=mcp-patch", "CapabilityBoundingSet=\n", "LoadCredential=token:", "--token-file %d/token",
		"--state-dir /var/lib/mcp-patch/state"} {
		if !strings.Contains(string(b), "\n"+d) && !strings.Contains(string(b), d) {
			t.Errorf("%s lacks %q", unitFile, d)
		}
	}
	out, err := exec.Command(systemdAnalyze(t), "security", "--offline=yes", installed(t, nil)).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for mcp-patch\.service: ([0-9.]+) (\w+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	if level > 2.0 {
		t.Errorf("exposure level %s %s, want at most 2.0:\n%s", m[1], m[2], out)
	}
	page, err := os.ReadFile(filepath.Join("..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := "Overall exposure level for mcp-patch.service: " + string(m[1]) + " " + string(m[2])
	if !strings.Contains(string(page), shown) {
		t.Errorf("docs/deploy.md does not show %q (systemd-analyze security's verdict today)", shown)
	}
}
