package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/tools"
)

// Every tool has an operator wrapper in scripts/ that calls the CLI twin,
// and the wrappers work.
func TestToolWrappers(t *testing.T) {
	infra := map[string]bool{"setup": true, "test": true, "demo": true, "build-controlplane": true, "build-vm-image": true, "bench-fanout": true, "measure-first-run": true}
	have := map[string]bool{}
	files, _ := filepath.Glob("../scripts/*.sh")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sh")
		if infra[name] {
			continue
		}
		have[name] = true
		b, _ := os.ReadFile(f)
		if !strings.Contains(string(b), `tool `+name+` "$@"`) {
			t.Errorf("%s does not call `mcp-patch tool %s`", f, name)
		}
	}
	for _, tl := range tools.Builtin().All() {
		if !have[tl.Spec().Name] {
			t.Errorf("no scripts/%s.sh wrapper", tl.Spec().Name)
		}
		delete(have, tl.Spec().Name)
	}
	for name := range have {
		t.Errorf("scripts/%s.sh wraps no tool", name)
	}
	cmd := exec.Command("../scripts/read_intent.sh", "--component", "postgres", "--intent-repo", exampleRepo(t))
	cmd.Env = append(os.Environ(), "MCP_PATCH="+binary)
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"name": "postgres"`) {
		t.Fatalf("wrapper: %v\n%s", err, out)
	}
}
