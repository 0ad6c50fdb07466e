package lab

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// TestDemoThroughStagingAndProduction runs the demo round through both
// environments, each lab on its own real control plane, sharing the intent
// repository through its remote and one lab clock: staging's round
// closes and its outcome is certified and committed; production's plan is
// refused while staging's soak runs; after it, production's plan.md shows
// the proof from staging and its round closes with every node on the
// kernel staging proved.
func TestDemoThroughStagingAndProduction(t *testing.T) {
	dir := t.TempDir()
	remote, err := SeedIntentRemote(dir)
	if err != nil {
		t.Fatal(err)
	}
	person, err := NewApproverKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	shared := Options{OtherActors: true, IntentRemote: remote, Clock: &Clock{}, ApproverKey: person}
	staging := upLab(t, StagingOptions(shared))
	prodOpts := shared
	// Smaller than the demo's production (TestDemoRound runs that shape):
	// what is checked here is the way between the two environments.
	prodOpts.ControlPlanes, prodOpts.Canary, prodOpts.GPUServers = 2, 1, 1
	prodOpts.Environment = ProductionEnvironment
	production := upLab(t, prodOpts)
	if staging.Cluster.Server == production.Cluster.Server {
		t.Fatal("staging and production share a control plane")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := RunEnvironments(ctx, staging, production, "2026-11", io.MultiWriter(&out, tw{t}), testLog(t))
	if err != nil {
		t.Fatalf("%v (staging's calls: %s, production's: %s)", err, res.Staging.CallsLog, res.Production.CallsLog)
	}
	if err := WriteEnvironmentsSummary(io.MultiWriter(&out, tw{t}), staging, production, res); err != nil {
		t.Fatal(err)
	}

	// Staging's record: outcome.json and its signed statement committed on
	// its round branch, the record naming the kernel promoted on its three nodes.
	files, err := gitOutput(staging.IntentRepo, "ls-tree", "-r", "--name-only", res.Staging.Branch, "rounds/"+res.StagingRound)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{promotion.OutcomeFile, promotion.StatementFile} {
		if !strings.Contains(files, "rounds/"+res.StagingRound+"/"+f) {
			t.Errorf("%s not committed on %s:\n%s", f, res.Staging.Branch, files)
		}
	}
	raw, err := os.ReadFile(filepath.Join(staging.IntentRepo, "rounds", res.StagingRound, promotion.OutcomeFile))
	if err != nil {
		t.Fatal(err)
	}
	o, err := promotion.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Green() || len(o.Kernels) != 1 || len(o.Kernels[0].Promoted) != 3 {
		t.Fatalf("staging's outcome: green %v, kernels %+v", o.Green(), o.Kernels)
	}
	kernel := o.Kernels[0].Kernel
	if res.Principal != "lab-approver@mcp-patch.lab" {
		t.Errorf("staging's outcome certified by %q", res.Principal)
	}

	// Production refused to plan while staging's soak ran.
	refused := strings.Join(res.Refused, "\n")
	for _, want := range []string{"failed", "kernel " + kernel + " is still soaking in staging until " + res.SoakUntil.UTC().Format("2006-01-02 15:04 UTC"), res.StagingRound} {
		if !strings.Contains(refused, want) {
			t.Errorf("production's refused plan does not say %q:\n%s", want, refused)
		}
	}

	// Production's plan.md shows the proof, naming staging's round and the
	// person who certified it (its statement verified by production's
	// server against allowed_signers); the plan is of staging's kernel.
	md, err := gitOutput(production.IntentRepo, "show", res.Production.Branch+":rounds/"+res.ProductionRound+"/plan.md")
	if err != nil {
		t.Fatal(err)
	}
	proof := strings.Join(planSection(md, "Promotion from staging"), "\n")
	// The control-plane nodes move the kernel alone; the GPU servers move
	// it with NVIDIA modules that staging's GPU server installed with it.
	for _, want := range []string{"| " + kernel + " | - | yes |", "| " + kernel + " | linux-modules-nvidia-", "soaked 7 day(s) until", "; with NVIDIA linux-modules-nvidia-",
		"closed green in staging's round " + res.StagingRound, "certified by lab-approver@mcp-patch.lab"} {
		if !strings.Contains(proof, want) {
			t.Errorf("production's plan.md, Promotion from staging, does not say %q:\n%s", want, proof)
		}
	}
	js, err := gitOutput(production.IntentRepo, "show", res.Production.Branch+":rounds/"+res.ProductionRound+"/plan.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := plan.Decode([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nodes) != 4 {
		t.Errorf("production's plan lists %d nodes, want 4", len(f.Nodes))
	}
	for _, n := range f.Nodes {
		if n.Target != kernel {
			t.Errorf("production's plan takes %s to %s, not staging's %s", n.Node, n.Target, kernel)
		}
	}

	// Both rounds closed with every host on the promoted kernel.
	for _, l := range []*Lab{staging, production} {
		for _, h := range l.Fleet.Hosts() {
			st, err := h.State()
			if err != nil {
				t.Fatal(err)
			}
			if st.Kernel != kernel {
				t.Errorf("%s's %s runs %s, want %s", l.Environment, h.Name, st.Kernel, kernel)
			}
		}
	}
	for _, want := range []string{"staging     round " + res.StagingRound + " closed", "production  round " + res.ProductionRound + " closed", "Promotion from staging"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output does not say %q", want)
		}
	}
	t.Logf("staging's round %s, production's %s: %d and %d calls", res.Staging.Duration.Round(time.Second), res.Production.Duration.Round(time.Second),
		res.Staging.Outcome.Calls, res.Production.Outcome.Calls)
}

// The shared intent remote holds the example intent as it is, on main,
// environments.yaml included; a lab's clone commits its endpoints on top.
func TestSeedIntentRemote(t *testing.T) {
	dir := t.TempDir()
	remote, err := SeedIntentRemote(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := gitOutput(remote, "ls-tree", "-r", "--name-only", "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"environments.yaml", "os-layer/settings.yaml", "gpu-fleet/settings.yaml"} {
		if !strings.Contains("\n"+files+"\n", "\n"+want+"\n") {
			t.Errorf("the remote's main lacks %s:\n%s", want, files)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "intent-seed")); !os.IsNotExist(err) {
		t.Errorf("the seed working copy is left behind: %v", err)
	}
}

func TestStillSoaking(t *testing.T) {
	reasons := []string{"the plan has 2 blocker(s): nothing was cordoned", "cp-1: kernel 6.8.0-51-generic is still soaking in staging until 2026-12-16 15:45 UTC (round staging-2026-12 closed green 2026-12-09 15:45 UTC)"}
	if got, want := stillSoaking(reasons), "kernel 6.8.0-51-generic is still soaking in staging until 2026-12-16 15:45 UTC"; got != want {
		t.Errorf("stillSoaking = %q, want %q", got, want)
	}
	if got := stillSoaking([]string{"round staging-2026-12 is still open"}); got != "round staging-2026-12 is still open" {
		t.Errorf("stillSoaking without the gate's verdict = %q", got)
	}
}
