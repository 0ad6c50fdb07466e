package plan

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round/promotion"
)

const (
	running = "6.8.0-48-generic"
	target  = "6.8.0-51-generic"
	uuid    = "0c5e3d5a-6f1e-4a55-9d1c-6a0f3c1b2e11"
)

func entries() []Entry {
	return []Entry{
		{ID: "gnulinux-simple-" + uuid, Kernel: running},
		{ID: "gnulinux-advanced-" + uuid + ">gnulinux-" + running + "-advanced-" + uuid, Kernel: running},
		{ID: "gnulinux-advanced-" + uuid + ">gnulinux-" + running + "-recovery-" + uuid, Kernel: running, Recovery: true},
	}
}

// facts is a healthy node: a kernel upgrade with its NVIDIA modules, a
// drain that evicts two workloads.
func facts(gpu bool) Facts {
	f := Facts{
		Running: running, Target: target, PackageDigest: "sha256:pkgs",
		PackageLines: []string{"Inst linux-image-" + target, "Inst openssl [3.0.2-0ubuntu1.14] (3.0.2-0ubuntu1.15)"},
		Packages: []Package{
			{Name: "linux-image-" + target, Action: "install", NewVersion: "6.8.0-51.52", Class: "kernel"},
			{Name: "openssl", Action: "upgrade", OldVersion: "3.0.2-0ubuntu1.14", NewVersion: "3.0.2-0ubuntu1.15", Class: "other"},
		},
		Entries: entries(), GrubenvWritable: true, KernelPanic: 10, BootFreeBytes: 400 << 20, BootNeedBytes: 150 << 20,
		Drain: DrainFacts{Pods: []Pod{
			{Namespace: "platform-admission", Name: "webhook-7d9f-abcde", OwnerKind: "ReplicaSet", OwnerName: "webhook-7d9f"},
			{Namespace: "databases", Name: "pg-2", OwnerKind: "Cluster", OwnerName: "pg"},
		}},
	}
	if gpu {
		f.NvidiaInstalled, f.NvidiaBranch = true, "550-server"
		f.Packages = append(f.Packages, Package{Name: "linux-modules-nvidia-550-server-" + target, Action: "install", NewVersion: "6.8.0-51.52", Class: "nvidia"})
		f.Drain.Pods = append(f.Drain.Pods, Pod{Namespace: "inference", Name: "model-5c-xyz", OwnerKind: "ReplicaSet", OwnerName: "model-5c", GPUs: 8})
	}
	return f
}

func input(approval string) Input {
	order := []Position{
		{Node: "cp-1", ControlPlane: true, Reason: "control plane"},
		{Node: "cp-2", ControlPlane: true, Reason: "control plane"},
		{Node: "cp-3", ControlPlane: true, Reason: "holds the Postgres primary and the VIP: last"},
		{Node: "gpu-1", GPU: true, Canary: true, Reason: "canary"},
		{Node: "gpu-2", GPU: true, Reason: "GPU server"},
		{Node: "gpu-3", GPU: true, Reason: "GPU server"},
		{Node: "gpu-4", GPU: true, Reason: "GPU server"},
		{Node: "gpu-5", GPU: true, Reason: "GPU server"},
	}
	fs := map[string]Facts{}
	for _, p := range order {
		fs[p.Node] = facts(p.GPU)
	}
	return Input{Round: "2026-11", Order: order, Facts: fs,
		Placement: Placement{PostgresPrimary: map[string][]string{"cp-3": {"databases/pg"}}, VIPNode: "cp-3",
			Model: map[string]int{"gpu-2": 1}, GPUsAllocated: map[string]int{"gpu-2": 8}},
		Intent: Intent{GPUApproval: approval, PanicSeconds: 10, DriverBranch: "550-server"}}
}

func TestBuildHealthyFleet(t *testing.T) {
	f := Build(input(PerStep))
	if !f.Ready() {
		t.Fatalf("blockers on a healthy fleet: %v", f.Blockers)
	}
	if len(f.Nodes) != 8 {
		t.Fatalf("nodes = %d, want 8", len(f.Nodes))
	}
	// 3 control-plane × 4 + canary 5 + 4 GPU × 4 + plan + autoremove.
	if f.Signatures != 35 || f.PerStepSignatures != 35 {
		t.Errorf("signatures = %d/%d, want 35/35", f.Signatures, f.PerStepSignatures)
	}
	gpu, _ := f.Node("gpu-2")
	want := "gnulinux-advanced-" + uuid + ">gnulinux-" + target + "-advanced-" + uuid
	if gpu.Grub.New != want || !gpu.Grub.NewPredicted {
		t.Errorf("new entry = %q (predicted %v), want %q predicted", gpu.Grub.New, gpu.Grub.NewPredicted, want)
	}
	if gpu.Grub.Old != "gnulinux-advanced-"+uuid+">gnulinux-"+running+"-advanced-"+uuid {
		t.Errorf("old entry = %q", gpu.Grub.Old)
	}
	if diff := cmp.Diff([]string{"linux-modules-nvidia-550-server-" + target + " (new) -> 6.8.0-51.52"}, gpu.Packages.Nvidia); diff != "" {
		t.Errorf("nvidia packages (-want +got):\n%s", diff)
	}
	if gpu.Drain.Pods != 3 || len(gpu.Drain.Workloads) != 3 {
		t.Errorf("drain = %+v", gpu.Drain)
	}
	if diff := cmp.Diff([]string{"1 GPU pod(s) running", "8 GPU(s) allocated"}, gpu.Runs); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	cp3, _ := f.Node("cp-3")
	if diff := cmp.Diff([]string{"Postgres primary databases/pg", "the API VIP"}, cp3.Runs); diff != "" {
		t.Errorf("cp-3 runs (-want +got):\n%s", diff)
	}
	for _, n := range f.Nodes {
		for _, s := range WindowSteps {
			if n.Steps[s] == "" {
				t.Errorf("%s: no digest for %s", n.Node, s)
			}
		}
	}
}

func TestPerWindowNeedsFewerSignatures(t *testing.T) {
	step, window := Build(input(PerStep)), Build(input(PerWindow))
	// 3 × 4 + 5 GPU servers × 1 + plan + autoremove.
	if window.Signatures != 19 || window.PerStepSignatures != step.Signatures {
		t.Errorf("per window: %d signatures (%d per step), want 19 (%d)", window.Signatures, window.PerStepSignatures, step.Signatures)
	}
	cp, _ := window.Node("cp-1")
	if cp.Approval != PerStep {
		t.Errorf("control-plane node approval = %s, want per_step always", cp.Approval)
	}
	if step.Digest == window.Digest {
		t.Error("the approval sizing does not enter the plan digest")
	}
}

func TestBlockers(t *testing.T) {
	cases := []struct {
		name  string
		node  string
		edit  func(*Facts, *Input)
		cause string
		fix   string
	}{
		{"unreachable", "gpu-3", func(f *Facts, _ *Input) { *f = Facts{Err: "dial tcp 10.0.0.13:22: connection refused"} }, "not reachable", "an unread node is not skipped"},
		{"host key changed", "cp-2", func(f *Facts, _ *Input) { *f = Facts{Err: "host key mismatch", HostKeyChanged: true} }, "SSH host key changed", "known_hosts"},
		{"not read at all", "gpu-4", func(f *Facts, in *Input) { delete(in.Facts, "gpu-4") }, "did not read", ""},
		{"removal on the last GPU server", "gpu-5", func(f *Facts, _ *Input) {
			f.Removals = []string{"nvidia-dkms-550"}
			f.AptBlockers = []string{"the upgrade would remove 1 package(s): nvidia-dkms-550"}
		}, "apt would remove nvidia-dkms-550", "pin or install"},
		{"NVIDIA modules missing", "gpu-2", func(f *Facts, _ *Input) { f.Packages = f.Packages[:2] }, "no NVIDIA kernel modules for the target kernel " + target, "add linux-modules-nvidia-550-server-" + target},
		{"/boot too small", "gpu-3", func(f *Facts, _ *Input) { f.BootFreeBytes = 90 << 20 }, "/boot has 90 MiB free, the new kernel and its initrd need 150 MiB", "autoremove"},
		{"PDB that never allows", "cp-1", func(f *Facts, _ *Input) {
			f.Drain.Pods[0].NeverPDB = "PDB webhook has minAvailable 2 for 2 pods"
		}, "can never evict platform-admission/webhook-7d9f-abcde: PDB webhook has minAvailable 2", "PodDisruptionBudget"},
		{"drain refused by policy", "gpu-2", func(f *Facts, _ *Input) { f.Drain.Blockers = []string{"inference/scratch: pod has emptyDir data"} }, "the drain would be refused", ""},
		{"grubenv on mdraid", "gpu-4", func(f *Facts, _ *Input) {
			f.GrubenvWritable, f.GrubReasons = false, []string{"/boot/grub is on md0"}
		}, "grubenv is not writable at boot (/boot/grub is on md0)", ""},
		{"kernel.panic 0", "cp-3", func(f *Facts, _ *Input) { f.KernelPanic = 0 }, "kernel.panic is 0", "kernel.panic=10"},
		{"unattended kernel upgrades", "gpu-1", func(f *Facts, _ *Input) { f.UnattendedKernel = true }, "unattended-upgrades may install kernel packages", "Package-Blacklist"},
		{"dpkg interrupted", "gpu-2", func(f *Facts, _ *Input) { *f = Facts{SimulateRefused: "dpkg was interrupted: run dpkg --configure -a"} }, "cannot be simulated: dpkg was interrupted: run dpkg --configure -a", "repair"},
		{"unheld kubelet", "cp-1", func(f *Facts, _ *Input) { f.Unheld = []string{"kubelet"} }, "kubelet is installed but not held", "apt-mark hold kubelet"},
		{"no entry for the running kernel", "gpu-1", func(f *Facts, _ *Input) { f.Entries = nil }, "no GRUB entry boots the running kernel", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := input(PerWindow)
			f := in.Facts[tc.node]
			tc.edit(&f, &in)
			if _, ok := in.Facts[tc.node]; ok {
				in.Facts[tc.node] = f
			}
			fl := Build(in)
			if len(fl.Blockers) != 1 {
				t.Fatalf("blockers = %v, want one", fl.Blockers)
			}
			b := fl.Blockers[0]
			wantCheck := CheckInspect
			if strings.Contains(tc.name, "removal") || strings.Contains(tc.name, "unheld") || strings.Contains(tc.name, "/boot") || strings.Contains(tc.name, "dpkg") {
				wantCheck = CheckSimulate
			}
			if b.Check != wantCheck {
				t.Errorf("check = %q, want %q", b.Check, wantCheck)
			}
			if b.Node != tc.node || !strings.Contains(b.Cause, tc.cause) || !strings.Contains(b.Fix, tc.fix) {
				t.Errorf("blocker = %+v, want node %s, cause ~%q, fix ~%q", b, tc.node, tc.cause, tc.fix)
			}
			if fl.Ready() {
				t.Error("a plan with a blocker is ready")
			}
			if fl.Digest == Build(input(PerWindow)).Digest {
				t.Error("a blocker does not change the plan digest")
			}
		})
	}
}

func TestModulesAlreadyInstalledIsNoBlocker(t *testing.T) {
	in := input(PerStep)
	f := in.Facts["gpu-2"]
	f.Packages, f.TargetModules = f.Packages[:2], true
	in.Facts["gpu-2"] = f
	if fl := Build(in); !fl.Ready() {
		t.Errorf("blockers = %v", fl.Blockers)
	}
}

func TestDKMSBuildsTheModules(t *testing.T) {
	in := input(PerStep)
	f := in.Facts["gpu-2"]
	f.Packages = append(f.Packages[:2:2], Package{Name: "linux-headers-" + target, Action: "install", NewVersion: "6.8.0-51.52", Class: "kernel"})
	f.NvidiaDKMS = true
	in.Facts["gpu-2"] = f
	fl := Build(in)
	n, _ := fl.Node("gpu-2")
	if !fl.Ready() || !slices.ContainsFunc(n.Risks, func(r string) bool { return strings.Contains(r, "built by DKMS") }) {
		t.Errorf("blockers %v, risks %v", fl.Blockers, n.Risks)
	}
}

func TestLivepatchIsARiskNotABlocker(t *testing.T) {
	in := input(PerStep)
	f := in.Facts["cp-1"]
	f.LivepatchEnabled, f.LivepatchState = true, "nothing-to-apply"
	in.Facts["cp-1"] = f
	fl := Build(in)
	n, _ := fl.Node("cp-1")
	if !fl.Ready() || len(n.Risks) != 1 || !strings.Contains(n.Risks[0], "Livepatch is enabled (nothing-to-apply)") {
		t.Errorf("blockers %v, risks %v", fl.Blockers, n.Risks)
	}
}

func TestDrift(t *testing.T) {
	reviewed, _ := Build(input(PerWindow)).Node("gpu-3")
	cases := []struct {
		name  string
		edit  func(*Facts)
		steps []Step
		want  []Step
		line  string
	}{
		{"unchanged", func(*Facts) {}, nil, nil, ""},
		{"another package", func(f *Facts) {
			f.PackageDigest = "sha256:other"
			f.PackageLines = append(f.PackageLines, "Inst curl [7.81.0-1ubuntu1.15] (7.81.0-1ubuntu1.16)")
		}, nil, []Step{StepInstall}, "+ Inst curl [7.81.0-1ubuntu1.15] (7.81.0-1ubuntu1.16)"},
		{"another kernel", func(f *Facts) {
			f.Target, f.PackageDigest = "6.8.0-52-generic", "sha256:k52"
			f.Packages[2].Name = "linux-modules-nvidia-550-server-6.8.0-52-generic"
		}, nil, []Step{StepInstall, StepInstall, StepTrialBoot, StepPromote, StepPromote}, "+ 6.8.0-52-generic"},
		{"a drain that evicts more", func(f *Facts) {
			f.Drain.Pods = append(f.Drain.Pods, Pod{Namespace: "inference", Name: "batch-1", OwnerKind: "Job", OwnerName: "batch"})
		}, nil, []Step{StepDrain}, "+ evict inference/Job/batch (1 pod(s))"},
		{"a drain that evicts fewer is fine", func(f *Facts) { f.Drain.Pods = f.Drain.Pods[:1] }, nil, nil, ""},
		{"more pods of a known workload is fine", func(f *Facts) {
			f.Drain.Pods = append(f.Drain.Pods, Pod{Namespace: "inference", Name: "model-5c-abc", OwnerKind: "ReplicaSet", OwnerName: "model-5c"})
		}, nil, nil, ""},
		{"only the steps asked", func(f *Facts) { f.PackageDigest = "sha256:other" }, []Step{StepDrain}, nil, ""},
		{"another GRUB entry", func(f *Facts) {
			f.Entries = append(f.Entries, Entry{ID: "gnulinux-advanced-x>gnulinux-" + target + "-advanced-x", Kernel: target})
		}, []Step{StepTrialBoot}, []Step{StepTrialBoot}, "+ gnulinux-advanced-x>gnulinux-" + target + "-advanced-x"},
		{"a new blocker", func(f *Facts) { f.KernelPanic = 0 }, []Step{StepTrialBoot}, []Step{"blockers"}, "+ kernel.panic is 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := input(PerWindow)
			f := in.Facts["gpu-3"]
			f.Packages = append([]Package(nil), f.Packages...)
			tc.edit(&f)
			live := BuildNode(reviewed.Position, in.Order[5], f, in.Placement, in.Intent)
			cs := Drift(reviewed, live, tc.steps...)
			var got []Step
			for _, c := range cs {
				got = append(got, c.Step)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("drifted steps (-want +got):\n%s\n%v", diff, cs)
			}
			if tc.line != "" && !strings.Contains(strings.Join(FormatDrift("gpu-3", cs), "\n"), tc.line) {
				t.Errorf("diff %v lacks %q", FormatDrift("gpu-3", cs), tc.line)
			}
		})
	}
}

func TestDriftInFleetKnowsWorkloadsThatMove(t *testing.T) {
	in := input(PerStep)
	f := Build(in)
	facts := in.Facts["cp-1"]
	// cp-1 has no model pod in the plan; gpu-2's model ReplicaSet moved there.
	facts.Drain.Pods = append(facts.Drain.Pods, Pod{Namespace: "inference", Name: "model-5c-new", OwnerKind: "ReplicaSet", OwnerName: "model-5c"})
	live := BuildNode(1, in.Order[0], facts, in.Placement, in.Intent)
	if cs := f.DriftInFleet(live, StepDrain); len(cs) != 0 {
		t.Errorf("a workload the plan lists on another node: %v", cs)
	}
	reviewed, _ := f.Node("cp-1")
	if cs := Drift(reviewed, live, StepDrain); len(cs) != 1 {
		t.Errorf("node-level drift: %v", cs)
	}
	facts.Drain.Pods = append(facts.Drain.Pods, Pod{Namespace: "batch", Name: "x", OwnerKind: "Job", OwnerName: "x"})
	live = BuildNode(1, in.Order[0], facts, in.Placement, in.Intent)
	if cs := f.DriftInFleet(live, StepDrain); len(cs) != 1 || !strings.Contains(cs[0].String(), "+ evict batch/Job/x") {
		t.Errorf("a workload the plan lists nowhere: %v", cs)
	}
	if cs := f.DriftInFleet(Node{Node: "nope"}); len(cs) != 1 {
		t.Errorf("unknown node: %v", cs)
	}
}

func TestReplanResignsOnlyTheChange(t *testing.T) {
	in := input(PerStep)
	f := Build(in)
	facts := in.Facts["gpu-3"]
	facts.PackageDigest, facts.PackageLines = "sha256:other", append(facts.PackageLines, "Inst curl")
	live := BuildNode(0, in.Order[5], facts, in.Placement, in.Intent)
	g, changed, err := Replan(f, live)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Step{StepInstall}, changed); diff != "" {
		t.Errorf("changed steps (-want +got):\n%s", diff)
	}
	if g.Revision != 1 || g.Digest == f.Digest {
		t.Errorf("revision %d, digest unchanged %v", g.Revision, g.Digest == f.Digest)
	}
	n, _ := g.Node("gpu-3")
	if n.Position != 6 || n.Reason != "GPU server" {
		t.Errorf("re-planned node lost its place: %+v", n)
	}
	for _, other := range []string{"cp-1", "gpu-2", "gpu-4"} {
		a, _ := f.Node(other)
		b, _ := g.Node(other)
		if a.Window != b.Window {
			t.Errorf("%s's window digest changed by a re-plan of gpu-3", other)
		}
	}
	if _, _, err := Replan(f, Node{Node: "nope"}); err == nil {
		t.Error("re-plan of a node not in the plan")
	}
}

func TestDecodeRefusesAnEditedPlan(t *testing.T) {
	f := Build(input(PerWindow))
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if g.Digest != f.Digest {
		t.Errorf("digest after a round trip %s, want %s", g.Digest, f.Digest)
	}
	edited := bytes.Replace(b, []byte(`"package_digest": "sha256:pkgs"`), []byte(`"package_digest": "sha256:evil"`), 1)
	if _, err := Decode(edited); err == nil || !strings.Contains(err.Error(), "changed after it was sealed") {
		t.Errorf("edited plan: err = %v", err)
	}
	if _, err := Decode([]byte("{")); err == nil {
		t.Error("malformed plan accepted")
	}
}

func TestMarkdown(t *testing.T) {
	in := input(PerWindow)
	in.Intent.Notes = []Note{{Component: "os-layer", Kind: "open_question", Ref: "Q1", Text: "Livepatch reports\n nothing to apply"}}
	in.Intent.TestEnvironment, in.Intent.TestedKernels = "staging", []string{target}
	f := in.Facts["gpu-5"]
	f.Removals = []string{"nvidia-dkms-550"}
	in.Facts["gpu-5"] = f
	fl := Build(in)
	var b bytes.Buffer
	if err := Markdown(&b, fl); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# Plan of round 2026-11",
		"**This round needs 19 signatures** (35 with one signature per destructive step)",
		"- **gpu-5**: apt would remove nvidia-dkms-550",
		"| 3 | cp-3 | control-plane | " + running + " → " + target + " | 4 (per step) | holds the Postgres primary and the VIP: last |",
		"| 4 | gpu-1 | gpu (canary) |",
		"- Postgres primary of databases/pg on cp-3",
		"- kernel: linux-image-" + target + " (new) -> 6.8.0-51.52",
		"- NVIDIA: linux-modules-nvidia-550-server-" + target,
		"- other: openssl 3.0.2-0ubuntu1.14 -> 3.0.2-0ubuntu1.15",
		"- booted once (target kernel): `gnulinux-advanced-" + uuid + ">gnulinux-" + target + "-advanced-" + uuid + "` (the id update-grub will give it",
		"  - inference/ReplicaSet/model-5c (1)",
		"- os-layer open question Q1: Livepatch reports nothing to apply",
		"test environment: every target kernel (" + target + ") already closed a round in staging",
		"Plan digest: `" + fl.Digest + "`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("plan.md lacks %q", want)
		}
	}
	b.Reset()
	if err := Text(&b, fl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "gpu-5: apt would remove nvidia-dkms-550") || !strings.Contains(b.String(), "gpu*") {
		t.Errorf("text:\n%s", b.String())
	}
}

// Fleet-wide risks are in plan.md under Risks and in the digest: a plan
// whose risk line was edited away is refused.
func TestFleetRisksRenderedAndSealed(t *testing.T) {
	in := input(PerWindow)
	plain := Build(in)
	risk := "alerts.selector severity=critical matches no alerting rule in Prometheus (3 rules): the alert check can never turn red"
	in.Risks = []string{risk}
	fl := Build(in)
	if !slices.Contains(fl.Summary, "1 fleet-wide risk(s): read Risks in plan.md") || slices.ContainsFunc(plain.Summary, func(l string) bool { return strings.Contains(l, "risk") }) {
		t.Errorf("summaries %q and %q", fl.Summary, plain.Summary)
	}
	if fl.Digest == plain.Digest || len(fl.Risks) != 1 || len(plain.Risks) != 0 {
		t.Fatalf("risks %v, digest %s (without %s)", fl.Risks, fl.Digest, plain.Digest)
	}
	var b bytes.Buffer
	if err := Markdown(&b, fl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "## Risks\n\n- "+risk+"\n") {
		t.Errorf("plan.md lacks the fleet risk:\n%s", b.String())
	}
	b.Reset()
	if err := Markdown(&b, plain); err != nil || strings.Contains(b.String(), "\n## Risks\n") {
		t.Errorf("a plan without fleet risks has a Risks section (%v)", err)
	}
	enc, err := fl.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(enc); err != nil {
		t.Fatalf("decode: %v", err)
	}
	edited := bytes.Replace(enc, []byte(risk), []byte("all good"), 1)
	if _, err := Decode(edited); err == nil || !strings.Contains(err.Error(), "changed after it was sealed") {
		t.Errorf("a plan with its risk edited: %v", err)
	}
}

func TestPredictEntry(t *testing.T) {
	cases := []struct{ old, run, tgt, want string }{
		{"gnulinux-advanced-u>gnulinux-5.15.0-86-generic-advanced-u", "5.15.0-86-generic", "5.15.0-88-generic", "gnulinux-advanced-u>gnulinux-5.15.0-88-generic-advanced-u"},
		{"Ubuntu", "5.15.0-86-generic", "5.15.0-88-generic", ""},
		{"gnulinux-5.15.0-86-generic-advanced-u", "", "x", ""},
	}
	for _, tc := range cases {
		got, ok := PredictEntry(tc.old, tc.run, tc.tgt)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("PredictEntry(%q) = %q, %v; want %q", tc.old, got, ok, tc.want)
		}
	}
}

// A node re-planned after its drain keeps the reviewed drain: only the
// package change needs a new signature.
func TestKeepDoneHoldsTheDrainOfADrainedNode(t *testing.T) {
	in := input(PerStep)
	f := Build(in)
	reviewed, _ := f.Node("gpu-2")
	facts := in.Facts["gpu-2"]
	facts.Drain = DrainFacts{} // drained: nothing left to evict
	facts.PackageDigest, facts.PackageLines = "sha256:other", append(facts.PackageLines, "Inst curl")
	live := BuildNode(0, in.Order[4], facts, Placement{}, in.Intent)
	if _, changed, _ := Replan(f, live); !slices.Contains(changed, StepDrain) {
		t.Fatalf("without KeepDone the empty preview changes the drain: %v", changed)
	}
	kept := KeepDone(reviewed, live, StepDrain)
	g, changed, err := Replan(f, kept)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Step{StepInstall}, changed); diff != "" {
		t.Errorf("changed steps (-want +got):\n%s", diff)
	}
	n, _ := g.Node("gpu-2")
	if diff := cmp.Diff(reviewed.Drain, n.Drain); diff != "" || !slices.Equal(n.Runs, reviewed.Runs) || n.PackageDigest != "sha256:other" {
		t.Errorf("drain (-reviewed +kept):\n%s runs %v", diff, n.Runs)
	}
	if same := KeepDone(reviewed, live); len(same.Drain.Workloads) != 0 {
		t.Error("KeepDone with no step done changed the live plan")
	}
}

// A driver-container GPU server: the precompiled image for the target
// kernel must be listed by its registry (absent or unchecked blocks), or,
// for a build at boot, the kernel's headers must be in the package plan;
// the host-package module check does not apply to it.
func TestDriverContainer(t *testing.T) {
	img := "nvcr.io/nvidia/driver:550-" + target + "-ubuntu22.04"
	headers := Package{Name: "linux-headers-" + target, Class: "kernel", Action: "install"}
	for _, tc := range []struct {
		name   string
		dc     DriverContainerFacts
		pkgs   func([]Package) []Package
		cause  string
		check  string
		source string
	}{
		{"image present", DriverContainerFacts{Precompiled: true, Image: img, ImageVerdict: ImagePresent}, nil, "", "", "precompiled driver image " + img},
		{"image absent", DriverContainerFacts{Precompiled: true, Image: img, ImageVerdict: ImageAbsent, ImageReason: "the registry lists 12 tags of nvidia/driver, not it"},
			nil, "no precompiled driver image for the target kernel " + target + ": " + img, CheckInspect, ""},
		{"registry down", DriverContainerFacts{Precompiled: true, Image: img, ImageVerdict: "could_not_check", ImageReason: "dial tcp: connection refused"},
			nil, "could not check the precompiled driver image " + img + " for the target kernel " + target + ": dial tcp", CheckInspect, ""},
		{"built at boot with headers", DriverContainerFacts{}, func(p []Package) []Package { return append(p, headers) }, "", "", "built at boot by the driver container from linux-headers-" + target},
		{"built at boot without headers", DriverContainerFacts{}, nil, "needs linux-headers-" + target + ", which the package plan does not bring", CheckSimulate, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(PerStep)
			f := in.Facts["gpu-2"]
			f.Packages = f.Packages[:2] // no linux-modules-nvidia: not a blocker here
			if tc.pkgs != nil {
				f.Packages = tc.pkgs(f.Packages)
			}
			dc := tc.dc
			f.DriverContainer = &dc
			in.Facts["gpu-2"] = f
			fl := Build(in)
			var node *Node
			for i := range fl.Nodes {
				if fl.Nodes[i].Node == "gpu-2" {
					node = &fl.Nodes[i]
				}
			}
			if node == nil || node.DriverContainer == nil {
				t.Fatalf("gpu-2's plan has no driver container: %+v", node)
			}
			if tc.cause == "" {
				if !fl.Ready() || !strings.Contains(node.DriverContainer.Source, tc.source) {
					t.Fatalf("blockers %v, source %q, want none and ~%q", fl.Blockers, node.DriverContainer.Source, tc.source)
				}
				var md strings.Builder
				if err := Markdown(&md, fl); err != nil || !strings.Contains(md.String(), tc.source) {
					t.Fatalf("plan.md does not say the driver's source %q: %v", tc.source, md.String())
				}
				return
			}
			if len(fl.Blockers) != 1 || fl.Blockers[0].Node != "gpu-2" || !strings.Contains(fl.Blockers[0].Cause, tc.cause) || fl.Blockers[0].Check != tc.check {
				t.Fatalf("blockers %v, want one on gpu-2 (%s) ~%q", fl.Blockers, tc.check, tc.cause)
			}
		})
	}
}

func TestPromotionGate(t *testing.T) {
	in := input(PerWindow)
	// The gate's verdicts as preflight.WithPromotion keys them: the kernel
	// with the NVIDIA packages each node moves with it.
	verdicts := map[string]promotion.Verdict{}
	for _, f := range in.Facts {
		if f.Target != "" && f.Target != f.Running {
			nv := NvidiaMoves(f.Packages)
			verdicts[promotion.Key(f.Target, nv)] = promotion.Verdict{Kernel: f.Target, Nvidia: nv,
				Why: "kernel " + target + " is still soaking in staging until 2026-12-08 10:00 UTC", Fix: "Let it soak."}
		}
	}
	in.Intent.Promotion = &Promotion{Environment: "production", Upstream: "staging", Verdicts: verdicts}
	fl := Build(in)
	var blocked []string
	for _, b := range fl.Blockers {
		if b.Check == CheckPromotion {
			blocked = append(blocked, b.Node)
			if !strings.Contains(b.Cause, "still soaking in staging") || b.Fix != "Let it soak." {
				t.Fatalf("blocker %+v", b)
			}
		}
	}
	var moving int
	for _, n := range fl.Nodes {
		if n.Target != "" && n.Target != n.Running {
			moving++
		}
	}
	if moving == 0 || len(blocked) != moving || fl.Ready() {
		t.Fatalf("%d nodes move, %d blocked by the promotion gate: %v", moving, len(blocked), blocked)
	}
	if fl.Promotion == nil || len(fl.Promotion.Kernels) != len(verdicts) || len(verdicts) < 2 || fl.Promotion.Kernels[0].Proven {
		t.Fatalf("fleet promotion %+v", fl.Promotion)
	}
	var b bytes.Buffer
	if err := Markdown(&b, fl); err != nil {
		t.Fatal(err)
	}
	if md := b.String(); !strings.Contains(md, "## Promotion from staging") || !strings.Contains(md, "| "+target+" | - | **no** | kernel "+target+" is still soaking") ||
		!strings.Contains(md, " | linux-modules-nvidia-") {
		t.Fatalf("plan.md has no promotion section:\n%s", md)
	}

	// A person's promotion: planned, with the risk on every moving node.
	for k, v := range in.Intent.Promotion.Verdicts {
		in.Intent.Promotion.Verdicts[k] = promotion.Verdict{Kernel: target, Nvidia: v.Nvidia, Proven: true, Why: "promoted by bob", Risk: "kernel runs without proof: bob promoted it (CVE)"}
	}
	fl = Build(in)
	if !fl.Ready() {
		t.Fatalf("a promoted kernel still blocks: %v", fl.Blockers)
	}
	for _, n := range fl.Nodes {
		if n.Target != "" && n.Target != n.Running && !slices.Contains(n.Risks, "kernel runs without proof: bob promoted it (CVE)") {
			t.Fatalf("%s has no promotion risk: %v", n.Node, n.Risks)
		}
	}

	// No verdict for the kernel: not judged is not proven.
	delete(in.Intent.Promotion.Verdicts, target)
	fl = Build(in)
	if fl.Ready() || !strings.Contains(fl.Blockers[0].Cause, "was not judged against staging's records") {
		t.Fatalf("an unjudged kernel: %v", fl.Blockers)
	}
}
