package hostpreview

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

// TestMain lets the test binary play the hosts' emulated commands, as
// lab-preview does.
func TestMain(m *testing.M) {
	if code, ran := fleet.HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestRunSurveysEachNode runs the preview on the lab's hosts behind SSH and
// checks that each node's inspection and simulation came from that node
// (its own name, kernel, boot_id and package plan digest) in the order asked.
func TestRunSurveysEachNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out strings.Builder
	if err := Run(ctx, Options{Dir: t.TempDir()}, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.HasPrefix(text, "Lab hosts up in ") || !strings.Contains(text, ": 8 emulated Ubuntu") {
		t.Errorf("first line does not say the 8 hosts are up:\n%s", firstLines(text, 2))
	}
	// One section per command, each opened by the command a person types.
	sections := regexp.MustCompile(`(?m)^\$ mcp-patch tool (\S+) --node (\S+) `).FindAllStringSubmatchIndex(text, -1)
	want := []string{"inspect_node cp-1", "simulate_upgrade cp-1", "inspect_node gpu-canary-1", "simulate_upgrade gpu-canary-1"}
	if len(sections) != len(want) {
		t.Fatalf("%d command sections, want %d:\n%s", len(sections), len(want), text)
	}
	bootID := regexp.MustCompile(`(?m)^  boot_id:\s+([0-9a-f-]{36})$`)
	digest := regexp.MustCompile(`(?m)^    digest:\s+(sha256:[0-9a-f]{64})$`)
	seenBoot := map[string]string{}
	for i, s := range sections {
		tool, node := text[s[2]:s[3]], text[s[4]:s[5]]
		if got := tool + " " + node; got != want[i] {
			t.Errorf("section %d is %q, want %q", i, got, want[i])
		}
		end := len(text)
		if i+1 < len(sections) {
			end = sections[i+1][0]
		}
		body := text[s[0]:end]
		if !regexp.MustCompile(`(?m)^  node:\s+` + regexp.QuoteMeta(node) + `$`).MatchString(body) {
			t.Errorf("%s %s: the result does not name node %s:\n%s", tool, node, node, firstLines(body, 10))
		}
		switch tool {
		case "inspect_node":
			if !strings.Contains(body, "\ninspection:\n") || !strings.Contains(body, "  kernel:") {
				t.Errorf("inspect_node %s: no inspection with a kernel:\n%s", node, firstLines(body, 10))
			}
			m := bootID.FindStringSubmatch(body)
			if m == nil {
				t.Errorf("inspect_node %s: no boot_id", node)
				continue
			}
			for other, id := range seenBoot {
				if id == m[1] {
					t.Errorf("inspect_node %s and %s report the same boot_id %s: not two hosts", node, other, id)
				}
			}
			seenBoot[node] = m[1]
		case "simulate_upgrade":
			if !strings.Contains(body, "\nsimulation:\n") || digest.FindStringSubmatch(body) == nil {
				t.Errorf("simulate_upgrade %s: no simulation with a plan digest:\n%s", node, body)
			}
		}
	}
	if !strings.Contains(text, "Host-side preview done in ") {
		t.Errorf("no closing line:\n%s", text[max(0, len(text)-300):])
	}
}

// TestRunNamesAFailedNode: a node the fleet does not have is printed as an
// error and named in Run's error, and the other nodes are still surveyed.
func TestRunNamesAFailedNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out strings.Builder
	err := Run(ctx, Options{Dir: t.TempDir(), Nodes: []string{"gpu-99", "gpu-1"}}, &out)
	if err == nil || !strings.Contains(err.Error(), "inspect on gpu-99") || !strings.Contains(err.Error(), "simulate upgrade on gpu-99") {
		t.Fatalf("Run's error = %v, want one naming both steps on gpu-99", err)
	}
	if strings.Contains(err.Error(), "gpu-1:") || strings.Contains(err.Error(), "on gpu-1") {
		t.Errorf("Run's error names gpu-1, which answered: %v", err)
	}
	if !regexp.MustCompile(`(?m)^  node:\s+gpu-1$`).MatchString(out.String()) {
		t.Errorf("gpu-1 was not surveyed after gpu-99 failed:\n%s", firstLines(out.String(), 30))
	}
}

// TestRunRefusesWithoutDir: no directory, nothing started.
func TestRunRefusesWithoutDir(t *testing.T) {
	var out strings.Builder
	if err := Run(context.Background(), Options{}, &out); err == nil || !strings.Contains(err.Error(), "Dir is required") {
		t.Fatalf("Run without Dir = %v, want a refusal naming Dir", err)
	}
	if out.Len() != 0 {
		t.Errorf("Run without Dir printed %q", out.String())
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
