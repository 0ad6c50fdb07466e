package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/lab/hostpreview"
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

// TestHostPreviewPrintsWhatTheToolsPrint holds lab-preview (package
// hostpreview, the first screen of a cold scripts/demo.sh) to the CLI
// twins: on each node, its inspection and simulation tables are the very
// lines `mcp-patch tool inspect_node / simulate_upgrade -o table` prints
// under those keys, once the two labs' own directories and boot ids are
// masked and column padding is ignored.
func TestHostPreviewPrintsWhatTheToolsPrint(t *testing.T) {
	toolDir, previewDir := t.TempDir(), t.TempDir()
	code, toolOut, errOut := run(t, "", nil, "lab", "preview", "--dir", toolDir)
	if code != ExitOK {
		t.Fatalf("lab preview: exit %d\nstdout:\n%s\nstderr:\n%s", code, toolOut, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The preview's screen has a summary per host; its full answers, the
	// tables compared here, go to Tables.
	var screen, preview strings.Builder
	if err := hostpreview.Run(ctx, hostpreview.Options{Dir: previewDir, Tables: &preview}, &screen); err != nil {
		t.Fatalf("host preview: %v\n%s", err, screen.String())
	}
	bootID := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// A host's uptime goes on between the two runs (seconds apart on a
	// loaded machine).
	uptime := regexp.MustCompile(`(uptime_seconds:\s*)[0-9]+`)
	normalize := func(s, dir string) string {
		s = strings.ReplaceAll(s, dir, "<lab>")
		s = bootID.ReplaceAllString(s, "<boot-id>")
		s = uptime.ReplaceAllString(s, "${1}<seconds>")
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			// The nesting stays; the padding tabwriter adds does not.
			indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
			lines[i] = indent + strings.Join(strings.Fields(l), " ")
		}
		return strings.Join(lines, "\n")
	}
	// section is the text after the header line naming tool on node, up to
	// the next command (or the closing line).
	section := func(out, tool, node string) string {
		h := regexp.MustCompile(`(?m)^\$ mcp-patch tool ` + tool + ` --node ` + regexp.QuoteMeta(node) + ` .*\n`)
		loc := h.FindStringIndex(out)
		if loc == nil {
			t.Fatalf("no %s --node %s in:\n%s", tool, node, out)
		}
		rest := out[loc[1]:]
		if j := strings.Index(rest, "\n$ "); j >= 0 {
			rest = rest[:j]
		} else if j := strings.Index(rest, "\nHost-side preview done"); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	keys := map[string]string{"inspect_node": "inspection:", "simulate_upgrade": "simulation:"}
	for _, node := range hostpreview.DefaultNodes {
		for _, tool := range previewTools {
			want := normalize(section(toolOut, tool, node), toolDir)
			got := normalize(section(preview.String(), tool, node), previewDir)
			if !strings.HasPrefix(got, keys[tool]+"\n") || strings.Count(got, "\n") < 10 {
				t.Errorf("%s on %s: the preview's section is not a %s table:\n%s", tool, node, keys[tool], got)
				continue
			}
			if !strings.Contains(want, "\n"+strings.TrimRight(got, "\n")+"\n") {
				t.Errorf("%s on %s: the preview's %s differs from the tool's (-tool +preview):\n%s", tool, node, keys[tool],
					cmp.Diff(strings.Split(want, "\n"), strings.Split(got, "\n")))
			}
		}
	}
}
