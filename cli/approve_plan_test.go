package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

const (
	approveRound  = "2026-11"
	approveTarget = "6.8.0-51-generic"
	// forgedTarget is the kernel an agent wrote into plan.md.
	forgedTarget = "6.8.0-99-generic"
)

// approvePlan writes a sealed plan of round approveRound (cp-1, the
// canary gpu-1 and gpu-2, GPU servers approved per window) into an intent
// repository's rounds/<round>/plan.json, and a plan.md an agent rewrote
// (another target kernel, another pod). It answers the repository and
// the plan.
func approvePlan(t *testing.T) (string, plan.Fleet) {
	t.Helper()
	running := "6.8.0-48-generic"
	facts := plan.Facts{Running: running, Target: approveTarget, PackageDigest: "sha256:pkgs",
		PackageLines: []string{"Inst linux-image-" + approveTarget},
		Packages: []plan.Package{{Name: "linux-image-" + approveTarget, Action: "install", NewVersion: "1", Class: "kernel"},
			{Name: "linux-modules-nvidia-550-server-" + approveTarget, Action: "install", NewVersion: "1", Class: "nvidia"}},
		Entries:         []plan.Entry{{ID: "gnulinux-advanced-u>gnulinux-" + running + "-advanced-u", Kernel: running}},
		GrubenvWritable: true, KernelPanic: 10, BootFreeBytes: -1, NvidiaInstalled: true,
		Drain: plan.DrainFacts{Pods: []plan.Pod{{Namespace: "inference", Name: "model-1", OwnerKind: "ReplicaSet", OwnerName: "model-5c"}}},
	}
	order := []plan.Position{{Node: "cp-1", ControlPlane: true, Reason: "control plane"},
		{Node: "gpu-1", GPU: true, Canary: true, Reason: "canary"}, {Node: "gpu-2", GPU: true, Reason: "GPU server"}}
	all := map[string]plan.Facts{}
	for _, p := range order {
		all[p.Node] = facts
	}
	f := plan.Build(plan.Input{Round: approveRound, Order: order, Facts: all, Intent: plan.Intent{GPUApproval: plan.PerWindow, PanicSeconds: 10}})
	repo := t.TempDir()
	dir := filepath.Join(repo, "rounds", approveRound)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := plan.Markdown(&md, f); err != nil {
		t.Fatal(err)
	}
	forged := strings.NewReplacer(approveTarget, forgedTarget, "inference/ReplicaSet/model-5c", "batch/Job/nothing-here").Replace(md.String())
	if forged == md.String() {
		t.Fatal("the forgery changed nothing")
	}
	for name, data := range map[string]string{"plan.json": string(b), "plan.md": forged} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo, f
}

// approveKey is a person's key made by the real ssh-keygen.
func approveKey(t *testing.T) string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	return key
}

// requestFile writes a request for tool on node binding digest.
func requestFile(t *testing.T, tool, node, digest string, summary []string) string {
	t.Helper()
	req, err := policy.NewRequest(tool, node, approveRound, digest, summary, 30*time.Minute, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "request.txt")
	if err := os.WriteFile(p, req.Canonical(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A person signs the plan with `mcp-patch approve` after an agent
// rewrote plan.md: what approve shows is the plan rendered by this binary
// from plan.json (its target kernel, packages, GRUB ids and pods), not
// plan.md; a request whose digest is not plan.json's, or one approve
// cannot show the plan of, is not signed.
func TestApproveShowsThePlanFromPlanJSON(t *testing.T) {
	repo, f := approvePlan(t)
	key := approveKey(t)
	req := requestFile(t, "sign_plan", window.FleetTarget, f.Digest, []string{"plan digest " + f.Digest})
	gpu, _ := f.Node("gpu-2")

	code, out, errOut := run(t, "", nil, "--intent-repo", repo, "approve", "--key", key, "--yes", req)
	if code != ExitOK || !strings.Contains(out, "BEGIN SSH SIGNATURE") {
		t.Fatalf("approve: exit %d:\n%s", code, errOut)
	}
	for _, want := range []string{"rendered by this mcp-patch from " + filepath.Join(repo, "rounds", approveRound, "plan.json"), "not from plan.md",
		approveTarget, "linux-modules-nvidia-550-server-" + approveTarget, gpu.Grub.New, "inference/ReplicaSet/model-5c", f.Digest} {
		if !strings.Contains(errOut, want) {
			t.Errorf("approve did not show %q:\n%s", want, errOut)
		}
	}
	for _, forged := range []string{forgedTarget, "batch/Job/nothing-here"} {
		if strings.Contains(errOut, forged) {
			t.Errorf("approve showed %q, from the rewritten plan.md:\n%s", forged, errOut)
		}
	}

	// --plan names the plan.json; the rendered plan is the same.
	planFile := filepath.Join(repo, "rounds", approveRound, "plan.json")
	if code, _, errOut := run(t, "", nil, "approve", "--plan", planFile, "--key", key, "--yes", req); code != ExitOK || !strings.Contains(errOut, gpu.Grub.New) {
		t.Fatalf("approve --plan: exit %d:\n%s", code, errOut)
	}

	refused := []struct {
		name string
		args []string
		want string
	}{
		{"another digest", []string{"--intent-repo", repo, "approve", "--key", key, "--yes",
			requestFile(t, "sign_plan", window.FleetTarget, "sha256:"+strings.Repeat("ab", 32), nil)}, "it is not the plan you are asked to sign"},
		{"no plan to show", []string{"approve", "--key", key, "--yes", req}, "pass --plan"},
		{"plan.json edited after it was sealed", []string{"approve", "--plan", editedPlan(t, planFile), "--key", key, "--yes", req}, "does not match its content"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, "", nil, tc.args...)
			if code == ExitOK || strings.Contains(out, "BEGIN SSH SIGNATURE") || !strings.Contains(errOut, "not signed") || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want not signed and %q:\n%s", code, tc.want, errOut)
			}
		})
	}
}

// editedPlan is a copy of plan.json with its target kernel changed by
// hand, its digests left as they were.
func editedPlan(t *testing.T, planFile string) string {
	t.Helper()
	b, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), approveTarget, forgedTarget)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A window approval shows each step of the node's window rendered from
// plan.json, with the digest it binds computed again by this binary; a
// request whose summary binds a step to another digest is not signed.
func TestApproveShowsEachStepOfTheWindow(t *testing.T) {
	repo, f := approvePlan(t)
	key := approveKey(t)
	n, _ := f.Node("gpu-1") // the canary: its window has the fallback drill
	tools := window.WindowTools(n, "sha256:"+strings.Repeat("cd", 32))
	summary := func(tools map[string]string) []string {
		out := []string{"one signature for the whole window of gpu-1"}
		for _, tl := range []string{"drain_node", "install_updates", "fallback_drill", "trial_boot", "promote_kernel"} {
			if dg, ok := tools[tl]; ok {
				out = append(out, tl+" bound to "+dg)
			}
		}
		return append(out, "window digest "+n.Window)
	}
	req := requestFile(t, "approve_window", n.Node, n.Window, summary(tools))
	code, _, errOut := run(t, "", nil, "--intent-repo", repo, "approve", "--key", key, "--yes", req)
	if code != ExitOK {
		t.Fatalf("approve: exit %d:\n%s", code, errOut)
	}
	for _, want := range []string{"The window of gpu-1 you approve, rendered by this mcp-patch from",
		"- drain_node: cordon gpu-1 and evict 1 pod(s): inference/ReplicaSet/model-5c (1)",
		"- install_updates: install 2 package(s)", "- fallback_drill: fallback drill: kernel " + approveTarget,
		"- trial_boot: boot " + n.Grub.New + " (kernel " + approveTarget + ") once", "- promote_kernel: make " + n.Grub.New,
		"bound to " + tools["trial_boot"], "bound to " + tools["promote_kernel"], "## 2. gpu-1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("approve did not show %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, forgedTarget) {
		t.Errorf("approve showed the rewritten plan.md:\n%s", errOut)
	}
	// A summary that binds the trial boot to another digest than the
	// plan's is not signed.
	other := map[string]string{}
	for k, v := range tools {
		other[k] = v
	}
	other["trial_boot"] = "sha256:" + strings.Repeat("ef", 32)
	code, out, errOut := run(t, "", nil, "--intent-repo", repo, "approve", "--key", key, "--yes",
		requestFile(t, "approve_window", n.Node, n.Window, summary(other)))
	if code == ExitOK || strings.Contains(out, "BEGIN SSH SIGNATURE") || !strings.Contains(errOut, "the request binds trial_boot to") {
		t.Fatalf("a window request bound to another trial boot: exit %d:\n%s", code, errOut)
	}
}
