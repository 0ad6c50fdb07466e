package steps

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/scripts"
)

// TestRealAptOutputParses runs the real apt-get -s full-upgrade against the
// lab repository and checks the parser reads the Remv, Inst, Conf lines
// and the kept-back (held) package as apt printed them.
func TestRealAptOutputParses(t *testing.T) {
	lab := newAptLab(t, "")
	out := lab.aptGet(t, "-s", "full-upgrade")
	sim := parse.ParseAptSimulate(out)
	var got []string
	for _, a := range sim.Actions {
		got = append(got, a.Op+" "+a.Package+" "+a.OldVersion+" "+a.NewVersion+" "+a.Arch+" "+strings.Join(a.Origins, "|"))
	}
	want := []string{
		"Remv oldlib 1.0   ",
		"Inst linux-image-9.9.9-1-generic  9.9.9-1.1 all mcp-lab:lab",
		"Inst linux-image-generic 1.0 2.0 all mcp-lab:lab",
		"Inst newlib  1.0 all mcp-lab:lab",
		"Inst tinyapp 1.0 2.0 all mcp-lab:lab",
		"Conf linux-image-9.9.9-1-generic  9.9.9-1.1 all mcp-lab:lab",
		"Conf linux-image-generic  2.0 all mcp-lab:lab",
		"Conf newlib  1.0 all mcp-lab:lab",
		"Conf tinyapp  2.0 all mcp-lab:lab",
	}
	slices.Sort(got[1:5])
	slices.Sort(got[5:])
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("actions (-want +got)\n%s\nraw:\n%s", d, out)
	}
	if d := cmp.Diff([]string{"kubelet"}, sim.KeptBack); d != "" {
		t.Errorf("kept back (-want +got)\n%s", d)
	}
	if d := cmp.Diff([]string{"oldlib"}, sim.Removed); d != "" {
		t.Errorf("removed (-want +got)\n%s", d)
	}
	if want := (parse.AptCounts{Upgraded: 2, NewlyInstalled: 2, ToRemove: 1, NotUpgraded: 1, Found: true}); sim.Counts != want {
		t.Errorf("counts %+v", sim.Counts)
	}
	// The plan digest of the script's awk equals the Go one on real output.
	src, _ := scripts.Host.ReadFile("host/simulate.sh")
	b, _ := block(string(src), "plan-digest")
	cmd := exec.Command("sh", "-c", b+"\nplan_digest")
	cmd.Stdin = strings.NewReader(out)
	d, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(d)) != parse.PlanDigest(out) {
		t.Errorf("awk %s go %s", d, parse.PlanDigest(out))
	}
}

func TestSimulateStep(t *testing.T) {
	lab := newAptLab(t, "")
	s := newSteps(t, lab.paths(), "")
	sim, err := s.Simulate(ctxT(t), testNode)
	if err != nil {
		t.Fatal(err)
	}
	p := sim.Plan
	if p.Digest != parse.PlanDigest(lab.aptGet(t, "-s", "full-upgrade")) {
		t.Errorf("digest %s differs from apt-get run here", p.Digest)
	}
	if d := cmp.Diff([]string{"oldlib"}, p.Removals); d != "" {
		t.Errorf("removals (-want +got)\n%s", d)
	}
	if p.TargetKernel != "9.9.9-1-generic" {
		t.Errorf("target kernel %q", p.TargetKernel)
	}
	if d := cmp.Diff([]string{"linux-image-9.9.9-1-generic", "linux-image-generic"}, sorted(p.Kernel)); d != "" {
		t.Errorf("kernel packages (-want +got)\n%s", d)
	}
	if len(p.Blockers) != 1 || !strings.Contains(p.Blockers[0], "remove 1 package(s): oldlib") {
		t.Errorf("blockers %q", p.Blockers)
	}
	kubelet := KubePackage{Name: "kubelet", Installed: true, Version: "1.0", Held: true}
	if !slices.Contains(sim.Kubernetes, kubelet) || len(sim.Unheld) != 0 {
		t.Errorf("kubernetes %+v unheld %v", sim.Kubernetes, sim.Unheld)
	}

	// Take the hold off kubelet (the real apt-mark against the lab): it is
	// then unheld and the upgrade would move it.
	cmd := exec.Command("apt-mark", "unhold", "kubelet")
	cmd.Env = append(os.Environ(), "APT_CONFIG="+lab.aptConf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apt-mark unhold: %v\n%s", err, out)
	}
	sim, err = s.Simulate(ctxT(t), testNode)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"kubelet"}, sim.Unheld); d != "" {
		t.Errorf("unheld (-want +got)\n%s", d)
	}
	if !slices.Contains(sim.Plan.Kubernetes, "kubelet") || len(sim.Plan.Blockers) != 3 {
		t.Errorf("plan kubernetes %v blockers %q", sim.Plan.Kubernetes, sim.Plan.Blockers)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func TestDownloadStep(t *testing.T) {
	lab := newAptLab(t, "")
	s := newSteps(t, lab.paths(), "")
	d, err := s.Download(ctxT(t), testNode)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range d.Fetched {
		got = append(got, f.Package+" "+f.Version)
	}
	if d := cmp.Diff([]string{"linux-image-9.9.9-1-generic 9.9.9-1.1", "linux-image-generic 2.0", "newlib 1.0", "tinyapp 2.0"}, sorted(got)); d != "" {
		t.Errorf("fetched (-want +got)\n%s", d)
	}
	if !d.Complete {
		t.Error("not complete")
	}
	if v := lab.installedVersion(t, "tinyapp"); v != "1.0 ii" {
		t.Errorf("download installed something: tinyapp %s", v)
	}
}

// TestInstallDetachedSurvivesSession starts the real apt-get full-upgrade
// into the lab's dpkg root (DPkg::Pre-Invoke sleeps 3 s so it is still
// running), kills the whole session that launched it, and checks the
// install finishes anyway and is reported finished with exit code 0.
func TestInstallDetachedSurvivesSession(t *testing.T) {
	lab := newAptLab(t, `DPkg::Pre-Invoke { "sleep 3"; };`)
	state := t.TempDir()
	paths := merge(lab.paths(), Paths{StateDir: state, SystemdDir: filepath.Join(state, "no-systemd")})
	s := newSteps(t, paths, "")
	ctx := ctxT(t)
	digest := parse.PlanDigest(lab.aptGet(t, "-s", "full-upgrade"))

	st, err := s.Install(ctx, testNode, InstallStart, "r1", "sha256:"+strings.Repeat("0", 64))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "the plan drifted") || st.PlanDigest != digest || len(st.DriftLines) != 5 {
		t.Fatalf("wrong digest: %v %+v", err, st)
	}
	if _, err := os.Stat(filepath.Join(state, "r1", "install.started")); !os.IsNotExist(err) {
		t.Fatal("a refused start left a start record")
	}

	// Launch through a session that stays open (like an SSH session), then
	// kill that whole session while apt runs.
	src, _ := scripts.Host.ReadFile("host/install.sh")
	env := map[string]string{"ACTION": "start", "ROUND": "r1", "EXPECTED_PLAN_DIGEST": digest}
	for k, v := range map[string]string{"APT_CONFIG": lab.aptConf, "DPKG_ADMINDIR": lab.admin, "STATE_DIR": state, "SYSTEMD_DIR": paths.SystemdDir} {
		env[k] = v
	}
	var payload strings.Builder
	for k, v := range env {
		payload.WriteString("export " + k + "='" + v + "'\n")
	}
	payload.Write(src)
	session := exec.Command("sh", "-c", `sh -s; echo "session-exit=$?"; sleep 60`)
	session.Env = []string{"PATH=" + DefaultPath}
	session.Stdin = strings.NewReader(payload.String())
	stdout, _ := session.StdoutPipe()
	session.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-session.Process.Pid, syscall.SIGKILL); _ = session.Wait() })
	buf := make([]byte, 1<<16)
	var out strings.Builder
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "session-exit=") && time.Now().Before(deadline) {
		n, err := stdout.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(out.String(), `"state":"running"`) || !strings.Contains(out.String(), "session-exit=0") {
		t.Fatalf("start did not report running: %s", out.String())
	}
	pidB, _ := os.ReadFile(filepath.Join(state, "r1", "install.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidB)))
	if sid, _ := syscall.Getpgid(pid); sid == session.Process.Pid {
		t.Fatal("install runs in the launching session's process group")
	}
	// The SSH session drops: SIGHUP then SIGKILL to the whole session.
	_ = syscall.Kill(-session.Process.Pid, syscall.SIGHUP)
	_ = syscall.Kill(-session.Process.Pid, syscall.SIGKILL)
	_ = session.Wait()

	if st, err := s.Install(ctx, testNode, InstallStatus, "r1", ""); err != nil || st.State != InstallRunning {
		t.Fatalf("after the session died: %v %+v", err, st)
	}
	// Starting again is refused while (and after) it runs.
	if _, err := s.Install(ctx, testNode, InstallStart, "r1", digest); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "never started twice") {
		t.Fatalf("second start: %v", err)
	}
	for time.Now().Before(deadline.Add(30 * time.Second)) {
		st, err = s.Install(ctx, testNode, InstallStatus, "r1", "")
		if err != nil || st.State != InstallRunning {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil || st.State != InstallFinished || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("install: %v %+v", err, st)
	}
	if st.Progress.SetUp < 4 || len(st.Progress.DpkgErrors) != 0 || st.Launcher != "setsid nohup" {
		t.Errorf("progress %+v launcher %q\n%s", st.Progress, st.Launcher, st.LogTail)
	}
	for pkg, want := range map[string]string{"tinyapp": "2.0 ii", "newlib": "1.0 ii", "kubelet": "1.0 hi", "linux-image-9.9.9-1-generic": "9.9.9-1.1 ii"} {
		if got := lab.installedVersion(t, pkg); got != want {
			t.Errorf("%s: %q, want %q", pkg, got, want)
		}
	}
	if got := lab.installedVersion(t, "linux-image-"+runningKernel(t)); got != "1.0 ii" {
		t.Errorf("the old kernel was touched: %q", got)
	}
}

// TestInstallLostProcess: a start record without a live process or an
// exit code (the node rebooted under dpkg) is reported lost, as an error.
func TestInstallLostProcess(t *testing.T) {
	state := t.TempDir()
	writeFile(t, filepath.Join(state, "r2", "install.started"), "2025-01-01T00:00:00Z\n", 0o644)
	writeFile(t, filepath.Join(state, "r2", "install.pid"), "999999\n", 0o644)
	s := newSteps(t, Paths{StateDir: state}, "")
	st, err := s.Install(ctxT(t), testNode, InstallStatus, "r2", "")
	if !errors.Is(err, ErrStepFailed) || st.State != InstallLost {
		t.Fatalf("%v %+v", err, st)
	}
}

// TestAutoremoveProtectsKernels: once nothing depends on the running
// kernel's image, the real apt-get (its own kernel protection switched off
// with APT::Protect-Kernels "false", and the lab has no
// 01autoremove-kernels list) proposes purging it; the script refuses.
// Otherwise the leftover package goes for real.
func TestAutoremoveProtectsKernels(t *testing.T) {
	running := runningKernel(t)
	lab := newAptLab(t, `APT::Protect-Kernels "false";`)
	// Nothing depends on the running kernel's image any more.
	lab.aptGet(t, "-y", "-o", "Dpkg::Options::=--force-confold", "install", "linux-image-generic=2.0")
	s := newSteps(t, lab.paths(), "")
	res, err := s.Autoremove(ctxT(t), testNode, AutoremoveInput{Action: AutoremoveSimulate})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "running kernel "+running) {
		t.Fatalf("%v %+v", err, res)
	}
	if d := cmp.Diff([]string{"linux-image-" + running}, res.Protected); d != "" {
		t.Errorf("protected (-want +got)\n%s", d)
	}
	if !slices.Contains(res.Removals, "leftover") {
		t.Errorf("removals %v", res.Removals)
	}
	// Run refuses too, and removes nothing.
	if _, err := s.Autoremove(ctxT(t), testNode, AutoremoveInput{Action: AutoremoveRun, SoakDone: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("run: %v", err)
	}
	if got := lab.installedVersion(t, "leftover"); got != "1.0 ii" {
		t.Errorf("leftover %q", got)
	}

	// The previous kernel (KEEP_KERNEL) is protected until the soak is over.
	// uname is a stand-in here: it names 9.9.9-1-generic as running so the
	// kernel running here plays the previous one.
	stub := stubDir(t, map[string]string{"uname": `if [ "${1:-}" = -r ]; then echo 9.9.9-1-generic; else exec /usr/bin/uname "$@"; fi` + "\n"})
	s = newSteps(t, lab.paths(), stub)
	_, err = s.Autoremove(ctxT(t), testNode, AutoremoveInput{Action: AutoremoveSimulate, KeepKernel: running})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "fallback kernel "+running+" before the soak is over") {
		t.Fatalf("keep kernel: %v", err)
	}
	res, err = s.Autoremove(ctxT(t), testNode, AutoremoveInput{Action: AutoremoveSimulate, KeepKernel: running, SoakDone: true})
	if err != nil || !slices.Contains(res.Removals, "linux-image-"+running) || res.RunningKernel != "9.9.9-1-generic" {
		t.Fatalf("after the soak: %v %+v", err, res)
	}

	// When nothing protected would go, run removes for real: here
	// linux-image-generic 1.0 still needs the running kernel, so only the
	// leftover package goes.
	lab2 := newAptLab(t, "")
	s2 := newSteps(t, lab2.paths(), "")
	res, err = s2.Autoremove(ctxT(t), testNode, AutoremoveInput{Action: AutoremoveRun})
	if err != nil || !res.Removed || !slices.Contains(res.Removals, "leftover") || slices.Contains(res.Removals, "linux-image-"+running) {
		t.Fatalf("%v %+v", err, res)
	}
	// The real dpkg logged its removal inside the lab, not in the
	// machine's /var/log/dpkg.log.
	if log, err := os.ReadFile(filepath.Join(lab2.dir, "log", "dpkg.log")); err != nil || !strings.Contains(string(log), "remove leftover:all 1.0") {
		t.Errorf("the lab's dpkg.log lacks the removal of leftover: %v\n%s", err, log)
	}
	if got := lab2.installedVersion(t, "leftover"); got == "1.0 ii" {
		t.Errorf("leftover still installed")
	}
}
