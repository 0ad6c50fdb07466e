package cli

import (
	"strings"
	"testing"
)

// TestLabPreviewRunsHostPreflight: `mcp-patch lab preview` starts the lab's
// hosts behind real SSH without any control plane and runs inspect_node and
// simulate_upgrade through the CLI twins on a control-plane node and the
// canary, printing each command and its answer, and exits 0.
func TestLabPreviewRunsHostPreflight(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "", nil, "lab", "preview", "--dir", dir)
	if code != ExitOK {
		t.Fatalf("lab preview: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, node := range previewNodes {
		for _, tool := range previewTools {
			cmd := "$ mcp-patch tool " + tool + " --node " + node + " -o table\n"
			i := strings.Index(out, cmd)
			if i < 0 {
				t.Fatalf("lab preview did not print %q:\n%s", cmd, out)
			}
			// The answer follows the command: the tool's own table, ok.
			answer := out[i+len(cmd):]
			if j := strings.Index(answer, "\n$ "); j >= 0 {
				answer = answer[:j]
			}
			if !strings.Contains(answer, "status:") || !strings.Contains(answer, "ok") {
				t.Errorf("%s on %s: the answer is not an ok table:\n%s", tool, node, answer)
			}
			if tool == "inspect_node" && !strings.Contains(answer, "kernel") {
				t.Errorf("inspect_node on %s names no kernel:\n%s", node, answer)
			}
		}
	}
	if !strings.Contains(out, "no control plane yet") {
		t.Errorf("lab preview does not say the control plane is not up:\n%s", out)
	}
}
