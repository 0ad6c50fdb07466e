package hostpreview

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/steps"
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
	var out, tables strings.Builder
	if err := Run(ctx, Options{Dir: t.TempDir(), Tables: &tables, TablesName: "answers.txt"}, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	screen := out.String()
	if !strings.HasPrefix(screen, "Lab hosts up in ") || !strings.Contains(screen, ": 8 emulated Ubuntu") {
		t.Errorf("first line does not say the 8 hosts are up:\n%s", firstLines(screen, 2))
	}
	// The screen holds a few lines per node, naming where the full
	// answers are; the answers hold the tables.
	if n := strings.Count(screen, "\n"); n > 20 || !strings.Contains(screen, "Each command's full answer: answers.txt") {
		t.Errorf("the screen has %d lines, want a short summary naming answers.txt:\n%s", n, screen)
	}
	for _, node := range DefaultNodes {
		if !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(node)+`  kernel \S+ -> \S+; `).MatchString(screen) ||
			!strings.Contains(screen, "  blockers: none (plan sha256:") {
			t.Errorf("no summary of %s:\n%s", node, screen)
		}
	}
	if strings.Contains(screen, "$ mcp-patch tool") {
		t.Errorf("the full answers are on the screen:\n%s", screen)
	}
	text := tables.String()
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
	if !strings.Contains(screen, "Host-side preview done in ") {
		t.Errorf("no closing line:\n%s", screen[max(0, len(screen)-300):])
	}
}

func TestSummary(t *testing.T) {
	free := int64(20 * 1024 * 1024)
	insp := steps.Inspection{Node: "gpu-1", Kernel: "6.8.0-48-generic", InstalledKernels: make([]steps.InstalledKernel, 2)}
	ok := steps.Simulation{Holds: []string{"containerd", "kubelet"}, Boot: steps.BootSpace{FreeKB: &free, NeedKB: 65536},
		Plan: steps.PackagePlan{Digest: "sha256:aa96d4cb43f3f31743bda75216b7ae2e", TargetKernel: "6.8.0-51-generic",
			Packages: make([]steps.PlannedPackage, 12), Kernel: []string{"linux-image-6.8.0-51-generic"}, Nvidia: []string{"nvidia-dkms-550"}}}
	blocked := ok
	blocked.Plan.Blockers = []string{"apt would remove nvidia-fabricmanager-550"}
	blocked.Plan.TargetKernel = ""
	blocked.Boot = steps.BootSpace{NeedKB: 65536, Short: true}
	blocked.Unheld = []string{"kubelet"}
	for _, tc := range []struct {
		name string
		sim  steps.Simulation
		want []string
	}{
		{"nothing blocks", ok, []string{
			"gpu-1  kernel 6.8.0-48-generic -> 6.8.0-51-generic; 2 kernels installed; /boot 20480 MiB free for 64 MiB",
			"       12 packages: 1 kernel, 1 NVIDIA, 0 Kubernetes; 0 kept back; holds: containerd, kubelet",
			"       blockers: none (plan sha256:aa96d4cb43f3)",
		}},
		{"blocked", blocked, []string{
			"gpu-1  kernel 6.8.0-48-generic -> no new kernel; 2 kernels installed; /boot free space unknown, 64 MiB needed",
			"       12 packages: 1 kernel, 1 NVIDIA, 0 Kubernetes; 0 kept back; holds: containerd, kubelet",
			"       blockers: apt would remove nvidia-fabricmanager-550; /boot too small (65536 KiB needed); not held: kubelet",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Summary(insp, tc.sim)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
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
