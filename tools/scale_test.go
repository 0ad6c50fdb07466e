package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/mcp-patch/mcp-patch/round/service"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/apifake"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// The scale rig is the fleet rig (the server as Build wires it, the real
// intent repository in Git, the real journal, approvals verified against
// allowed_signers) over a cluster of n nodes — 3 control-plane nodes and
// n-3 GPU servers, gpu-0000 the canary, one inference pod on each GPU
// server — and a fake host per node. The person's key is the rig's
// (made by ssh-keygen), signing in this process (policy.Sign, the SSHSIG
// that ssh-keygen -Y sign writes), so a thousand windows do not fork
// ssh-keygen thousands of times.
func newScaleFleet(tb testing.TB, n int) (*fleet, []string) {
	tb.Helper()
	f := newFleet(tb)
	f.signInProcess()

	names := scaleNodeNames(n)
	objs := make([]runtime.Object, 0, 2*n)
	// The components' verify.sh scripts run at every gate as child
	// processes (seconds each on a loaded machine): they are the intent's
	// cost, not the server's, so the scale rig's intent has none.
	verify, err := filepath.Glob(filepath.Join(f.repo, "*", "verify.sh"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(verify) > 0 {
		gitRun(tb, f.repo, append([]string{"rm", "-q"}, verify...)...)
		gitRun(tb, f.repo, "commit", "-qm", "no verify scripts in the scale rig")
	}
	f.hosts.mu.Lock()
	f.hosts.nodes = map[string]*fakes.Host{}
	for i, name := range names {
		var node *corev1.Node
		switch {
		case i < 3:
			node = readyNode(name, map[string]string{kube.LabelControlPlane: ""}, 0)
		case i == 3:
			node = readyNode(name, map[string]string{kube.LabelGPUPresent: "true", "platform.example.com/patch-canary": "true"}, 8)
		default:
			node = readyNode(name, map[string]string{kube.LabelGPUPresent: "true"}, 8)
		}
		objs = append(objs, node)
		if i >= 3 {
			objs = append(objs, workloadPod("inference", "model-"+name, name, "model-"+name))
		}
		f.hosts.nodes[name] = &fakes.Host{Running: fRunning, Target: fTarget, Digest: fmt.Sprintf("sha256:%064x", i+1)}
	}
	f.hosts.mu.Unlock()
	// The plain object tracker: NewClientset's field-managed one builds a
	// REST mapper on every call it answers (17 of 36 CPU-s of a 150-node
	// round went there), which is the fake's cost, not mcp-patch's; nothing
	// here applies server-side.
	f.kube = fake.NewSimpleClientset(objs...) //nolint:staticcheck // see above
	apifake.Behave(f.kube)
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.CNPGClusters: "ClusterList", actors.NodeMaintenances: "NodeMaintenanceList"})
	clients := &kube.Clients{Kube: f.kube, Dynamic: f.dyn, Host: "https://api.test:6443"}
	f.d.Cluster = func(context.Context) (*kube.Clients, error) { return clients, nil }
	return f, names
}

// scaleNodeNames are the rig's node names in their round order.
func scaleNodeNames(n int) []string {
	names := []string{"cp-1", "cp-2", "cp-3"}
	for i := range n - 3 {
		names = append(names, fmt.Sprintf("gpu-%04d", i))
	}
	return names
}

// scaleWindow runs one node's window through its tools as an agent does:
// the preflight records, the window's signature (GPU servers) or one per
// destructive step (control plane), drain to promote, the gate (red here:
// no etcd; past its settle time a person accepts it and resumes), then
// the round's commit a green close_window makes.
func (f *fleet) scaleWindow(node string, controlPlane bool) map[string]time.Duration {
	f.t.Helper()
	took := map[string]time.Duration{}
	arg := map[string]any{"node": node}
	t0 := time.Now()
	f.preflight(node)
	took["preflight"] = time.Since(t0)
	if !controlPlane {
		t0 := time.Now()
		if _, res := f.approve("approve_window", arg); res.Status != StatusOK {
			f.t.Fatalf("approve_window %s: %s %v", node, res.Status, res.Reasons)
		}
		took["approve_window"] = time.Since(t0)
	}
	step := func(tool string, want Status, sign bool) {
		f.t.Helper()
		t0 := time.Now()
		defer func() { took[tool] += time.Since(t0) }()
		var res *Result
		if sign {
			_, res = f.approve(tool, arg)
		} else {
			_, res = f.call(tool, arg)
		}
		if res.Status != want {
			f.t.Fatalf("%s on %s: %s, want %s: %v", tool, node, res.Status, want, res.Reasons)
		}
		if f.between != nil {
			f.between(node, tool)
		}
	}
	step("drain_node", StatusOK, controlPlane)
	step("install_updates", StatusInProgress, controlPlane)
	f.host(node).InstallState = "finished"
	step("install_updates", StatusOK, false)
	step("trial_boot", StatusInProgress, controlPlane)
	f.host(node).Boot(false)
	step("trial_boot", StatusOK, false)
	step("record_verification", StatusOK, false)
	step("uncordon_node", StatusOK, false)
	if !controlPlane {
		step("gpu_acceptance", StatusOK, false)
	}
	step("promote_kernel", StatusOK, controlPlane)
	step("close_window", StatusInProgress, false)
	f.advance(f.d.Config.Kube.GateSettle.D() + time.Second)
	step("close_window", StatusFailed, false)
	t0 = time.Now()
	defer func() { took["record_decision"] = time.Since(t0) }()
	if res := f.decide(map[string]any{"decision": "residual_risk_accepted", "node": node, "step": "gate",
		"reason": "etcd and postgres are watched by hand in this test cluster", "review_trigger": "next-round:2026-12"}); res.Status != StatusOK {
		f.t.Fatalf("accept the red gate of %s: %s %v", node, res.Status, res.Reasons)
	}
	if res := f.decide(map[string]any{"decision": "resume", "reason": "risk accepted"}); res.Status != StatusOK {
		f.t.Fatalf("resume after %s: %s %v", node, res.Status, res.Reasons)
	}
	return took
}

// commitWindow commits the round's files as a green close_window does
// and answers how long the commit took.
func (f *fleet) commitWindow(node string) time.Duration {
	f.t.Helper()
	s, err := f.d.OpenRound()
	if err != nil {
		f.t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := f.d.CommitRound(context.Background(), s, "window of "+node+" closed"); err != nil {
		f.t.Fatalf("commit after the window of %s: %v", node, err)
	}
	return time.Since(t0)
}

// windowCost is what one window cost and wrote.
type windowCost struct {
	Window      int
	Wall, CPU   time.Duration
	Commit      time.Duration
	Written     int64 // bytes the process wrote (write(2) calls: journal, state, audit, git objects, nonces)
	RoundFiles  int64 // growth of rounds/<id>/ on disk
	Repo        int64 // growth of .git on disk
	Status      time.Duration
	StatusBytes int
	Calls       map[string]time.Duration
}

// measureWindow runs window i (1-based) of the round and what it cost.
func (f *fleet) measureWindow(i int, node string, controlPlane bool) windowCost {
	f.t.Helper()
	c := windowCost{Window: i}
	roundDir := filepath.Join(f.repo, "rounds", fRound)
	files0, repo0, w0 := dirBytes(f.t, roundDir), dirBytes(f.t, filepath.Join(f.repo, ".git")), writtenBytes(f.t)
	cpu0, t0 := processCPU(f.t), time.Now()
	c.Calls = f.scaleWindow(node, controlPlane)
	c.Commit = f.commitWindow(node)
	c.Wall, c.CPU = time.Since(t0), processCPU(f.t)-cpu0
	c.Written = writtenBytes(f.t) - w0
	c.RoundFiles = dirBytes(f.t, roundDir) - files0
	c.Repo = dirBytes(f.t, filepath.Join(f.repo, ".git")) - repo0
	t1 := time.Now()
	m, res := f.call("round_status", nil)
	c.Status = time.Since(t1)
	if res.Status != StatusOK {
		f.t.Fatalf("round_status after window %d: %s %v", i, res.Status, res.Reasons)
	}
	b, err := json.Marshal(m)
	if err != nil {
		f.t.Fatal(err)
	}
	c.StatusBytes = len(b)
	return c
}

// median is the middle of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// processCPU is the CPU time (user and system) this process has used; the
// children (git is not one: go-git runs in process) are not in it.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writtenBytes is what this process handed to write(2) so far
// (/proc/self/io wchar).
func writtenBytes(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no wchar in /proc/self/io")
	return 0
}

// dirBytes is the size of the regular files under dir.
func dirBytes(tb testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkRoundAtScale drives a round of MCP_PATCH_SCALE_NODES nodes
// (default 1000) window by window through every step of every window and
// prints, for windows 1, 10, 100, 500 and 1000 (those the round has), the
// process's own CPU and wall for the window (the server and the fakes;
// the fakes do no emulation), the bytes it wrote, how the round's files
// and the repository grew, the commit's time (median of the window's and the four before), and round_status's latency
// and size after it.
func BenchmarkRoundAtScale(b *testing.B) {
	n := 1000
	if v := os.Getenv("MCP_PATCH_SCALE_NODES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 5 {
			b.Fatalf("MCP_PATCH_SCALE_NODES=%q: want a number of nodes ≥ 5", v)
		}
	}
	restarts := 20
	if v := os.Getenv("MCP_PATCH_SCALE_RESTARTS"); v != "" {
		var err error
		if restarts, err = strconv.Atoi(v); err != nil || restarts < 0 {
			b.Fatalf("MCP_PATCH_SCALE_RESTARTS=%q: want a number of restarts ≥ 0", v)
		}
	}
	report := map[int]bool{1: true, 10: true, 100: true, 500: true, 1000: true, n: true}
	// What each node's host must see once its window is done: the actions
	// of the same place in a small round run without a restart (control
	// plane, canary, GPU server).
	plain, plainNames := newScaleFleet(b, 6)
	want := plain.scaleRound(plainNames)
	template := func(i int) []string {
		var out []string
		for _, a := range want.Actions[plainNames[min(i, 5)]] {
			out = append(out, a.What)
		}
		return out
	}
	for b.Loop() {
		f, names := newScaleFleet(b, n)
		t0 := time.Now()
		f.planned()
		b.ReportMetric(time.Since(t0).Seconds(), "s/plan_round+sign")
		// The server is ended and built again from disk at random tool
		// boundaries (in flight steps among them) of windows that are not
		// measured, restarts times over the round.
		rnd := rand.New(rand.NewPCG(1000, uint64(n)))
		window, restarted := 0, 0
		f.between = func(node, tool string) {
			if restarted < restarts && !report[window] && rnd.IntN(max(1, 11*(n-window)/(restarts-restarted+1))) == 0 {
				restarted++
				f.restart()
			}
		}
		var costs []windowCost
		commits := make([]time.Duration, 0, n)
		for i, node := range names {
			window = i + 1
			c := f.measureWindow(i+1, node, i < 3)
			commits = append(commits, c.Commit)
			if report[i+1] {
				// One commit's time on a loaded machine is noise: the
				// median of the window's and the four before it.
				c.Commit = median(commits[max(0, i-4):])
				costs = append(costs, c)
			}
		}
		f.between = nil
		// Nothing lost or repeated: every host saw its window's actions
		// exactly once, as in the round without restarts.
		f.hosts.mu.Lock()
		for i, name := range names {
			var got []string
			for _, a := range f.hosts.nodes[name].Actions {
				got = append(got, a.What)
			}
			if diff := cmp.Diff(template(i), got); diff != "" {
				b.Errorf("host actions of %s differ from a round without restarts (-want +got):\n%s", name, diff)
			}
		}
		f.hosts.mu.Unlock()
		b.Logf("%d nodes, %d restarts of the server (load %s)\n%s", n, restarted, loadAvg(), costTable(costs))
		for _, c := range costs {
			b.Logf("window %d, wall per tool: %s", c.Window, callTimes(c.Calls))
		}
		// The repository as the round left it (loose objects, one tree
		// per changed folder per commit) and after git's own gc packs it.
		gitDir := filepath.Join(f.repo, ".git")
		before, t1 := dirBytes(b, gitDir), time.Now()
		gitRun(b, f.repo, "gc", "-q")
		b.Logf("repository after the round: %.1f MB; %.1f MB after git gc (%s), %s commits",
			float64(before)/1e6, float64(dirBytes(b, gitDir))/1e6, time.Since(t1).Round(time.Second), strings.TrimSpace(gitRun(b, f.repo, "rev-list", "--count", "HEAD")))
		last := costs[len(costs)-1]
		b.ReportMetric(last.Wall.Seconds(), "s/last-window-wall")
		b.ReportMetric(last.CPU.Seconds(), "s/last-window-cpu")
		b.ReportMetric(float64(last.StatusBytes), "B/round_status")
	}
}

func costTable(costs []windowCost) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%7s %9s %9s %9s %11s %11s %11s %10s %9s\n", "window", "wall ms", "cpu ms", "commit ms", "written KB", "round KB", "repo KB", "status ms", "status B")
	for _, c := range costs {
		fmt.Fprintf(&sb, "%7d %9.1f %9.1f %9.1f %11.1f %11.1f %11.1f %10.1f %9d\n", c.Window,
			ms(c.Wall), ms(c.CPU), ms(c.Commit), float64(c.Written)/1024, float64(c.RoundFiles)/1024, float64(c.Repo)/1024, ms(c.Status), c.StatusBytes)
	}
	return sb.String()
}

func callTimes(m map[string]time.Duration) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f ms", k, ms(m[k])))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// In a round of 60 nodes (past the size round_status pages at), what a
// window appends to the journal and the audit log does not grow with the
// window's place in the round (the sixth GPU window appends what the
// second did, give or take a record's digits), and round_status after
// each window is a summary and a page of at most 16 KiB that starts at
// the open or next window.
func TestRoundAtScaleAppendsFlatPerWindow(t *testing.T) {
	f, names := newScaleFleet(t, 60)
	// Small segments, so the ten windows seal several: a commit stores
	// the live logs and the new segments, never the sealed ones again.
	const segBytes = 24 << 10
	f.d.Book.SegmentBytes = segBytes
	f.planned()
	dir := filepath.Join(f.repo, "rounds", fRound)
	fileSize := func(name string) int64 {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	// size is a log's whole size: its sealed segments and the live file.
	size := func(name string) int64 {
		n := fileSize(name)
		segs, err := round.SegmentFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range segs {
			if strings.HasPrefix(s, strings.TrimSuffix(name, ".jsonl")+"-") {
				n += fileSize(s)
			}
		}
		return n
	}
	var logsStored []int64
	var sealedBytes, logsGrew int64
	sealedBefore := map[string]bool{}
	// snapshot is the state snapshot's inode and size (in the state
	// directory): a new inode is a new snapshot (written by atomic
	// replace).
	snapshot := func() (uint64, int64) {
		fi, err := os.Stat(round.SnapshotPath(dir, f.d.Book.AnchorDir))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino, fi.Size()
	}
	var appended, written, repo []int64
	var named []int
	var snapshots, journalGrew int64
	gitDir := filepath.Join(f.repo, ".git")
	// Each call leaves the working copy clean as git reads it, once the
	// index is written split too (intent/splitindex.go; git's own status
	// may write the split index back, which the next commit reads).
	f.between = func(node, tool string) {
		if st := gitRun(t, f.repo, "status", "--porcelain"); st != "" {
			t.Errorf("after %s on %s the working copy is not clean:\n%s", tool, node, st)
		}
	}
	for i, node := range names[:10] {
		j0, a0 := size(round.JournalFile), size(round.AuditFile)
		w0, r0 := writtenBytes(t), dirBytes(t, gitDir)
		ino0, _ := snapshot()
		f.scaleWindow(node, i < 3)
		// What the window's commit names: the round's few top-level files,
		// the node files written since the last commit (the window's own)
		// and the new segments, not a file of every node.
		rf, err := f.d.Book.Files(fRound)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rf.Files {
			if n := strings.TrimSuffix(filepath.Base(p), ".json"); strings.Contains(p, "/"+window.NodePlansDir+"/") || strings.Contains(p, "/"+service.WindowSignaturesDir+"/") {
				if n != node {
					t.Errorf("the commit after window %d (%s) names %s, a file of another node", i+1, node, p)
				}
			}
		}
		named = append(named, len(rf.Files))
		f.commitWindow(node)
		// What the window's commit stored of the logs, by real git: the
		// live files and the segments sealed since the last commit only.
		var stored int64
		for _, p := range strings.Fields(gitRun(t, f.repo, "show", "--name-only", "--format=", "HEAD")) {
			name := filepath.Base(p)
			if !strings.HasPrefix(name, "journal") && !strings.HasPrefix(name, "audit") {
				continue
			}
			if sealedBefore[name] {
				t.Errorf("the commit after window %d stored %s again, sealed before", i+1, name)
			}
			stored += fileSize(name)
		}
		logsStored = append(logsStored, stored)
		segs, err := round.SegmentFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		// A seal writes the live file's bytes once more, into the segment:
		// paid for by the log's growth, as snapshots are (checked below).
		var sealedNow int64
		for _, s := range segs {
			if !sealedBefore[s] {
				sealedNow += fileSize(s)
			}
			sealedBefore[s] = true
		}
		sealedBytes += sealedNow
		journalGrew += size(round.JournalFile) - j0
		appended = append(appended, size(round.JournalFile)-j0+size(round.AuditFile)-a0)
		logsGrew += appended[len(appended)-1]
		grew := dirBytes(t, gitDir) - r0
		repo = append(repo, grew)
		w := writtenBytes(t) - w0 - grew
		if ino, n := snapshot(); ino != ino0 {
			// A window's records outgrew the last snapshot: its cost is
			// paid for by the journal's growth (checked below), not by
			// this window's place in the round.
			snapshots += n
			w -= n
		}
		written = append(written, w-sealedNow)
		m, res := f.call("round_status", nil)
		if res.Status != StatusOK {
			t.Fatalf("round_status after the window of %s: %s %v", node, res.Status, res.Reasons)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 16<<10 {
			t.Errorf("round_status after window %d is %d bytes, want at most 16 KiB", i+1, len(b))
		}
		rs, _ := m["round"].(map[string]any)
		rows, _ := rs["nodes"].([]any)
		if len(rows) == 0 || len(rows) > round.PageNodes || rows[0].(map[string]any)["node"] != names[i+1] {
			t.Errorf("round_status after window %d: %d rows, first %v; want a page from %s", i+1, len(rows), rows[:min(1, len(rows))], names[i+1])
		}
	}
	// Windows 5 to 10 are GPU servers past the canary: the same steps.
	for i := 5; i < 10; i++ {
		if appended[i] > appended[5]+appended[5]/20 {
			t.Errorf("window %d appended %d bytes to the journal and the audit log, window 6 %d: %v", i+1, appended[i], appended[5], appended)
		}
	}
	// What a window writes outside the repository's objects (journal,
	// audit log, the tools' files, nonces), less state.json snapshots,
	// does not grow with its index; the snapshots together stay within
	// the journal's growth plus the first one. (Rewriting state.json with
	// every record wrote ~30 times its size per window, growing with the
	// round.)
	for i := 6; i < 10; i++ {
		if written[i] > written[5]+written[5]/5 {
			t.Errorf("window %d wrote %d bytes outside .git, window 6 %d: %v", i+1, written[i], written[5], written)
		}
	}
	if _, first := snapshot(); snapshots > journalGrew+2*first {
		t.Errorf("state.json snapshots wrote %d bytes in 10 windows whose journal grew by %d", snapshots, journalGrew)
	}
	// A commit stores at most the two live logs, each short of a segment
	// but for its last record, and what was sealed since the last commit:
	// however long the round has run.
	if sealedBytes > logsGrew+2*segBytes {
		t.Errorf("seals wrote %d bytes in 10 windows whose logs grew by %d", sealedBytes, logsGrew)
	}
	if len(sealedBefore) < 4 {
		t.Errorf("ten windows sealed %d segments at %d bytes; the test needs several", len(sealedBefore), segBytes)
	}
	for i, n := range logsStored {
		if limit := 2*segBytes + 2*appended[i] + 8<<10; n > limit {
			t.Errorf("the commit after window %d stored %d bytes of logs, more than %d (two live logs and the window's appends): %v", i+1, n, limit, logsStored)
		}
	}
	for i, n := range named {
		if n > 20 {
			t.Errorf("the commit after window %d names %d files, more than the round's top-level files, the window's node files and its segments: %v", i+1, n, named)
		}
	}
	if shared, _ := filepath.Glob(filepath.Join(gitDir, "sharedindex.*")); len(shared) == 0 {
		t.Errorf("ten windows' commits never wrote the index split (%d entries)", strings.Count(gitRun(t, f.repo, "ls-files"), "\n"))
	}
	t.Logf("files each window's commit named: %v", named)
	t.Logf("bytes of logs each window's commit stored: %v", logsStored)
	t.Logf("bytes appended to the journal and the audit log per window: %v", appended)
	t.Logf("bytes written outside .git per window: %v", written)
	t.Logf("growth of .git per window: %v", repo)
}

// scaleRoundRecord is what a round on the scale rig did: each host's
// actions and the journal's step records in order (kind, step, node,
// outcome: no times, seqs or approval ids, which differ between runs).
type scaleRoundRecord struct {
	Actions map[string][]fakes.Action
	Steps   []string
}

func (f *fleet) scaleRound(names []string) scaleRoundRecord {
	f.t.Helper()
	f.planned()
	for i, node := range names {
		f.scaleWindow(node, i < 3)
		f.commitWindow(node)
	}
	out := scaleRoundRecord{Actions: map[string][]fakes.Action{}}
	f.hosts.mu.Lock()
	for name, h := range f.hosts.nodes {
		out.Actions[name] = slices.Clone(h.Actions)
	}
	f.hosts.mu.Unlock()
	b, err := round.ReadJournal(filepath.Join(f.repo, "rounds", fRound))
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec round.Record
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			f.t.Fatalf("journal line %q: %v", l, err)
		}
		switch rec.Kind {
		case round.KindStepStarted, round.KindStepFinished, round.KindStepFailed:
			out.Steps = append(out.Steps, fmt.Sprintf("%s %s %s %s", rec.Kind, rec.Step, rec.Node, rec.Outcome))
		}
	}
	return out
}

// A round that outlives its server: the server is ended and built again
// from disk (the journal, the nonces, the signatures; a new Deps as a
// process start makes) after seeded random calls of a 12-node round,
// always including while install_updates and trial_boot are in flight
// (between the step's start record and its finish). The round resumes from the journal:
// every host saw exactly the actions of the same round run without a
// restart, and the journal's step records are the same steps in the same
// order. (About 15 s on the loaded 2-core machine: two rounds of 12
// windows.)
func TestRoundAtScaleResumesAfterRestarts(t *testing.T) {
	const n = 12
	plain, names := newScaleFleet(t, n)
	want := plain.scaleRound(names)

	f, _ := newScaleFleet(t, n)
	rnd := rand.New(rand.NewPCG(24, 2026))
	restarts := map[string]int{}
	f.between = func(node, tool string) {
		inFlight := tool == "install_updates" && f.host(node).InstallState != "finished" ||
			tool == "trial_boot" && !f.host(node).Rebooted
		if inFlight && restarts[tool] == 0 || rnd.IntN(4) == 0 {
			restarts[tool]++
			f.restart()
		}
	}
	got := f.scaleRound(names)
	if restarts["install_updates"] == 0 || restarts["trial_boot"] == 0 {
		t.Fatalf("restarts %v: none while a step was in flight", restarts)
	}
	if diff := cmp.Diff(want.Actions, got.Actions); diff != "" {
		t.Errorf("host actions differ from the round without restarts (-plain +restarted):\n%s", diff)
	}
	if diff := cmp.Diff(want.Steps, got.Steps); diff != "" {
		t.Errorf("journal step records differ from the round without restarts (-plain +restarted):\n%s", diff)
	}
	total := 0
	for _, c := range restarts {
		total += c
	}
	t.Logf("%d restarts (%v); %d step records", total, restarts, len(got.Steps))
}

// yearRound is one round of the twelve: its id, what plan_round, the
// round's commits and read_intent cost, and the repository after it.
type yearRound struct {
	ID                       string
	Plan, Commit, ReadIntent time.Duration
	Commits                  int
	RepoKB                   float64
	// Tree is the round's directory as committed right after its close.
	Tree string
}

// yearOfRounds runs the monthly rounds 2026-01 to 2026-12 in one intent
// repository on the scale rig of n nodes: each planned and signed, every
// window through every step, the fleet check, the soak, autoremove and
// close_round, then a lesson recorded for the next round. Before planning
// round k it checks that read_intent (the next round's read path) shows
// round k-1's lesson.
func yearOfRounds(tb testing.TB, n int) (*fleet, []yearRound) {
	f, names := newScaleFleet(tb, n)
	var out []yearRound
	for month := 1; month <= 12; month++ {
		id := fmt.Sprintf("2026-%02d", month)
		f.mu.Lock()
		f.now = time.Date(2026, time.Month(month), 3, 8, 0, 0, 0, time.UTC)
		f.mu.Unlock()
		f.hosts.mu.Lock()
		for i, name := range names {
			f.hosts.nodes[name] = &fakes.Host{Running: fRunning, Target: fTarget, Digest: fmt.Sprintf("sha256:%064x", 1000*month+i)}
		}
		f.hosts.mu.Unlock()
		yr := yearRound{ID: id}
		t0 := time.Now()
		m, res := f.call("read_intent", map[string]any{"component": "os-layer"})
		yr.ReadIntent = time.Since(t0)
		if res.Status != StatusOK {
			tb.Fatalf("read_intent before round %s: %s %v", id, res.Status, res.Reasons)
		}
		if month > 1 {
			b, err := json.Marshal(m)
			if err != nil {
				tb.Fatal(err)
			}
			if want := yearLesson(month - 1); !strings.Contains(string(b), want) {
				tb.Fatalf("read_intent before round %s does not show round %s's lesson %q", id, out[month-2].ID, want)
			}
		}
		t0 = time.Now()
		f.must(StatusOK, "plan_round", map[string]any{"round": id})
		yr.Plan = time.Since(t0)
		if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
			tb.Fatalf("sign_plan of %s: %s %v", id, res.Status, res.Reasons)
		}
		for i, node := range names {
			f.scaleWindow(node, i < 3)
			yr.Commit += f.commitWindow(node)
			yr.Commits++
		}
		f.must(StatusOK, "record_fleet_check", nil)
		f.advance(49 * time.Hour)
		if _, res := f.approve("autoremove", nil); res.Status != StatusOK {
			tb.Fatalf("autoremove of %s: %s %v", id, res.Status, res.Reasons)
		}
		f.must(StatusOK, "close_round", nil)
		f.must(StatusOK, "record_lesson", map[string]any{"component": "os-layer", "kind": "lesson", "round": id, "text": yearLesson(month)})
		yr.RepoKB = float64(dirBytes(tb, filepath.Join(f.repo, ".git"))) / 1024
		yr.Tree = strings.TrimSpace(gitRun(tb, f.repo, "rev-parse", f.workBranch(id)+":rounds/"+id))
		out = append(out, yr)
	}
	return f, out
}

// workBranch is the working branch the server commits round id to.
func (f *fleet) workBranch(id string) string {
	f.t.Helper()
	b := "mcp-patch/round-" + id
	if got := strings.TrimSpace(gitRun(f.t, f.repo, "branch", "--format=%(refname:short)", "--list", b)); got != b {
		f.t.Fatalf("no working branch %s: %s", b, gitRun(f.t, f.repo, "branch", "-a"))
	}
	return b
}

func yearTable(rounds []yearRound) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%8s %13s %8s %10s %15s %9s\n", "round", "plan_round ms", "commits", "commit ms", "read_intent ms", "repo KB")
	for _, r := range rounds {
		fmt.Fprintf(&sb, "%8s %13.1f %8d %10.1f %15.1f %9.0f\n", r.ID, ms(r.Plan), r.Commits, ms(r.Commit), ms(r.ReadIntent), r.RepoKB)
	}
	return sb.String()
}

func yearLesson(month int) string {
	return fmt.Sprintf("round 2026-%02d: the canary's initramfs took %d s longer", month, 30+month)
}

// Twelve monthly rounds in one intent repository: each round's record
// lands under its own rounds/<id>/ (journal, audit log, plan, report), no
// round's files change once it is closed, and each round's lesson is read
// by the next (yearOfRounds checks read_intent before each plan_round).
// About 40 s on the loaded 2-core machine (12 rounds of 5 windows).
func TestTwelveRoundsInOneRepository(t *testing.T) {
	f, rounds := yearOfRounds(t, 5)
	// The last round's branch holds the year: every round's directory as
	// it was committed when that round closed.
	branch := f.workBranch(rounds[len(rounds)-1].ID)
	for _, r := range rounds {
		files := gitRun(t, f.repo, "ls-tree", "--name-only", branch+":rounds/"+r.ID)
		for _, want := range []string{round.JournalFile, round.AuditFile, round.ReportFile, service.FleetPlanFile} {
			if !slices.Contains(strings.Fields(files), want) {
				t.Errorf("round %s: %s not committed under rounds/%s/: %s", r.ID, want, r.ID, files)
			}
		}
		if now := strings.TrimSpace(gitRun(t, f.repo, "rev-parse", branch+":rounds/"+r.ID)); now != r.Tree {
			t.Errorf("round %s's committed files changed after it closed (tree %s, then %s)", r.ID, r.Tree, now)
		}
		st, _, err := round.ReadState(filepath.Join(f.repo, "rounds", r.ID))
		if err != nil || !st.Closed || st.RoundID != r.ID {
			t.Errorf("round %s: closed %v, id %q (%v)", r.ID, st != nil && st.Closed, st.RoundID, err)
		}
	}
	t.Logf("twelve rounds of 5 nodes (load %s)\n%s", loadAvg(), yearTable(rounds))
}

// BenchmarkTwelveRounds prints, for twelve monthly rounds of
// MCP_PATCH_YEAR_NODES nodes (default 5) in one intent repository, what
// plan_round, the round's commits and read_intent took and how big the
// repository is after each.
func BenchmarkTwelveRounds(b *testing.B) {
	n := 5
	if v := os.Getenv("MCP_PATCH_YEAR_NODES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 5 {
			b.Fatalf("MCP_PATCH_YEAR_NODES=%q: want a number of nodes ≥ 5", v)
		}
	}
	for b.Loop() {
		_, rounds := yearOfRounds(b, n)
		b.Logf("twelve rounds of %d nodes (load %s)\n%s", n, loadAvg(), yearTable(rounds))
		last := rounds[len(rounds)-1]
		b.ReportMetric(last.RepoKB, "KB/repo-after-12")
		b.ReportMetric(ms(last.Commit)/float64(last.Commits), "ms/commit-round-12")
	}
}
