package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// The fleet of BenchmarkServe1000Nodes: 3 control-plane nodes and 997 GPU
// servers.
const (
	benchGPUServers = 997
	benchRound      = "2026-11"
	benchRunning    = "6.8.0-48-generic"
	benchTarget     = "6.8.0-51-generic"
	benchUUID       = "0c5e3d5a-6f1e-4a55-9d1c-6a0f3c1b2e11"
)

// BenchmarkServe1000Nodes starts the real binary (serve on stdio) as a
// 1000-node installation has it: an SSH inventory of 1000 nodes with their
// known_hosts lines, and an open round of 1000 nodes, its journal and its
// reviewed plan (every node with a realistic monthly upgrade of 43
// packages, GRUB entries and a drain preview). Over one MCP session it
// answers tools/list, round_status and inspect_node of one node
// (which loads the inventory and opens the SSH pool; the dial is refused:
// no host listens). It reports the server's peak RSS (VmHWM; goal ≤ 64 MiB)
// and the size of plan.json, and how long round_status took. serve's
// default soft memory limit (serve.memory_limit_mib, 16) applies unless
// GOMEMLIMIT is set: GOMEMLIMIT=off shows the server without it.
func BenchmarkServe1000Nodes(b *testing.B) {
	repo := exampleRepo(b)
	dir := b.TempDir()
	nodes := benchNodes()
	cfg := benchFleetFiles(b, dir, repo, nodes)
	planSize := benchRoundFiles(b, repo, nodes)
	idle := idleServeMemory(b)
	b.ReportMetric(float64(idle.hwm)/1024, "MiB/peak-rss-idle")
	b.Logf("serve without a round or an inventory, after initialize: %s", idle)
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(binary, "serve", "--config", cfg)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "no-kubeconfig"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
			Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		var steps []string
		mark := func(what string) {
			m, err := procMemory(cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			steps = append(steps, what+": "+m.String())
		}
		mark("initialize")
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) == 0 {
			b.Fatalf("tools/list: %v", err)
		}
		mark("tools/list")
		statusCalls := 0
		for _, call := range []struct {
			name string
			args map[string]any
			ok   bool
		}{
			{"round_status", map[string]any{}, true},
			// Again, as an agent polls it: the plan is not decoded twice.
			{"round_status", map[string]any{}, true},
			{"inspect_node", map[string]any{"node": "gpu-0500"}, false},
		} {
			t0 := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: call.name, Arguments: call.args})
			took := time.Since(t0)
			if err != nil {
				b.Fatalf("%s: %v", call.name, err)
			}
			text := resultText(res)
			if res.IsError == call.ok {
				b.Fatalf("%s: isError=%v: %.600s", call.name, res.IsError, text)
			}
			if call.name == "round_status" && (!strings.Contains(text, `"windows_total":1000`) || !strings.Contains(text, `"next_cursor"`)) {
				b.Fatalf("round_status is not the summary of 1000 nodes and a page: %.600s", text)
			}
			if call.name == "inspect_node" && !strings.Contains(text, "gpu-0500") {
				b.Fatalf("inspect_node: %.600s", text)
			}
			label := call.name
			if call.name == "round_status" {
				unit := "ms/round_status"
				if statusCalls++; statusCalls > 1 {
					label, unit = "round_status again", "ms/round_status-again"
				}
				b.ReportMetric(float64(took)/float64(time.Millisecond), unit)
				b.ReportMetric(float64(len(text))/1024, "KiB/round_status-text")
			}
			mark(fmt.Sprintf("%s (%.0f ms)", label, float64(took)/float64(time.Millisecond)))
		}
		m, err := procMemory(cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		if err := cs.Close(); err != nil {
			b.Logf("close: %v", err)
		}
		cancel()
		b.ReportMetric(float64(m.hwm)/1024, "MiB/peak-rss")
		b.ReportMetric(float64(m.rss)/1024, "MiB/rss-after-calls")
		b.ReportMetric(float64(m.anon)/1024, "MiB/anon-after-calls")
		b.ReportMetric(float64(m.file)/1024, "MiB/file-backed-after-calls")
		b.ReportMetric(float64(planSize)/1024, "KiB/plan.json")
		b.Logf("memory after each call: %s", strings.Join(steps, "; "))
		b.Logf("serve with %d nodes: peak RSS %.1f MiB (goal ≤ 64 MiB), after the calls %s; plan.json %d KiB",
			len(nodes), float64(m.hwm)/1024, m, planSize/1024)
	}
}

// idleServeMemory is serve's memory after initialize with no round and no
// inventory: what the executable itself takes.
func idleServeMemory(b *testing.B) procMem {
	b.Helper()
	cmd := exec.Command(binary, "serve", "--intent-repo", exampleRepo(b), "--state-dir", b.TempDir())
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(b.TempDir(), "no-kubeconfig"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	m, err := procMemory(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchNodes are the fleet in round order.
func benchNodes() []round.Position {
	var out []round.Position
	for i := 1; i <= 3; i++ {
		out = append(out, round.Position{Node: fmt.Sprintf("cp-%d", i), Role: round.RoleControlPlane, Reason: "control plane"})
	}
	for i := 0; i < benchGPUServers; i++ {
		out = append(out, round.Position{Node: fmt.Sprintf("gpu-%04d", i), Role: round.RoleGPU, GPU: true, Canary: i == 0, Reason: "GPU server"})
	}
	return out
}

// benchFleetFiles writes the SSH side (a key, an inventory of every node
// at a loopback port nothing listens on, a known_hosts line per node) and
// the config file, and returns the config file's path.
func benchFleetFiles(b *testing.B, dir, repo string, nodes []round.Position) string {
	b.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		b.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, pem.EncodeToMemory(block), 0o600); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var inv, kh strings.Builder
	fmt.Fprintf(&inv, "defaults:\n  user: root\nnodes:\n")
	for _, n := range nodes {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		sp, err := ssh.NewPublicKey(pub)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(&inv, "  %s:\n    address: 127.0.0.1\n    port: %d\n    host_key_alias: %s.example.net\n", n.Node, port, n.Node)
		fmt.Fprintf(&kh, "%s.example.net %s", n.Node, ssh.MarshalAuthorizedKey(sp))
	}
	files := map[string]string{"inventory.yaml": inv.String(), "known_hosts": kh.String()}
	files["config.yaml"] = "intent_repo: " + strconv.Quote(repo) + "\nstate_dir: " + strconv.Quote(filepath.Join(dir, "state")) +
		"\nssh:\n  inventory: " + strconv.Quote(filepath.Join(dir, "inventory.yaml")) +
		"\n  known_hosts: [" + strconv.Quote(filepath.Join(dir, "known_hosts")) + "]" +
		"\n  key_files: [" + strconv.Quote(key) + "]\n"
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return filepath.Join(dir, "config.yaml")
}

// benchRoundFiles opens round 2026-11 in the intent repository with the
// order of every node, and writes its reviewed plan; it returns the size of
// plan.json.
func benchRoundFiles(b *testing.B, repo string, nodes []round.Position) int {
	b.Helper()
	dir := filepath.Join(repo, "rounds", benchRound)
	j, err := round.Open(dir, round.WithRepoRoot(repo))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := j.Plan(round.Order{Positions: nodes}, 24*time.Hour, round.Meta{}); err != nil {
		b.Fatal(err)
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	in := plan.Input{Round: benchRound, Facts: map[string]plan.Facts{},
		Placement: plan.Placement{PostgresPrimary: map[string][]string{"cp-3": {"databases/pg"}}, VIPNode: "cp-3",
			Model: map[string]int{}, GPUsAllocated: map[string]int{}},
		Intent: plan.Intent{GPUApproval: plan.PerWindow, PanicSeconds: 10, DriverBranch: "550-server"}}
	for _, n := range nodes {
		in.Order = append(in.Order, plan.Position{Node: n.Node, ControlPlane: n.Role == round.RoleControlPlane, GPU: n.GPU, Canary: n.Canary, Reason: n.Reason})
		in.Facts[n.Node] = benchFacts(n.GPU)
		if n.GPU {
			in.Placement.Model[n.Node], in.Placement.GPUsAllocated[n.Node] = 1, 8
		}
	}
	f := plan.Build(in)
	if !f.Ready() {
		b.Fatalf("the bench plan has blockers: %v", f.Blockers)
	}
	js, err := f.Encode()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), js, 0o644); err != nil {
		b.Fatal(err)
	}
	return len(js)
}

// benchFacts is one node as the preflight reads it in a monthly round: a
// new kernel (image, modules, headers; NVIDIA modules on GPU servers) and
// 40 other packages, its GRUB entries and a drain of four workloads.
func benchFacts(gpu bool) plan.Facts {
	f := plan.Facts{Running: benchRunning, Target: benchTarget, PackageDigest: "sha256:" + strings.Repeat("ab", 32),
		GrubenvWritable: true, KernelPanic: 10, BootFreeBytes: 400 << 20, BootNeedBytes: 150 << 20}
	add := func(name, action, old, new, class string) {
		f.Packages = append(f.Packages, plan.Package{Name: name, Action: action, OldVersion: old, NewVersion: new, Class: class})
		line := "Inst " + name
		if old != "" {
			line += " [" + old + "]"
		}
		f.PackageLines = append(f.PackageLines, line+" ("+new+" Ubuntu:24.04/noble-updates [amd64])")
	}
	for _, p := range []string{"linux-image-", "linux-modules-", "linux-headers-"} {
		add(p+benchTarget, "install", "", "6.8.0-51.52", "kernel")
	}
	for i := 0; i < 40; i++ {
		add(fmt.Sprintf("libexample%02d-1t64", i), "upgrade", "2.4.1-1ubuntu0.1", "2.4.1-1ubuntu0.2", "other")
	}
	if gpu {
		f.NvidiaInstalled, f.NvidiaBranch = true, "550-server"
		add("linux-modules-nvidia-550-server-"+benchTarget, "install", "", "6.8.0-51.52", "nvidia")
	}
	for _, k := range []string{benchRunning, "6.8.0-45-generic"} {
		f.Entries = append(f.Entries,
			plan.Entry{ID: "gnulinux-advanced-" + benchUUID + ">gnulinux-" + k + "-advanced-" + benchUUID, Kernel: k},
			plan.Entry{ID: "gnulinux-advanced-" + benchUUID + ">gnulinux-" + k + "-recovery-" + benchUUID, Kernel: k, Recovery: true})
	}
	f.Entries = append(f.Entries, plan.Entry{ID: "gnulinux-simple-" + benchUUID, Kernel: benchRunning})
	f.Drain.Pods = []plan.Pod{
		{Namespace: "platform-admission", Name: "webhook-7d9f-abcde", OwnerKind: "ReplicaSet", OwnerName: "webhook-7d9f"},
		{Namespace: "monitoring", Name: "node-exporter-proxy-5f-q2", OwnerKind: "ReplicaSet", OwnerName: "node-exporter-proxy-5f"},
		{Namespace: "databases", Name: "pg-2", OwnerKind: "Cluster", OwnerName: "pg"},
	}
	if gpu {
		f.Drain.Pods = append(f.Drain.Pods, plan.Pod{Namespace: "inference", Name: "model-5c-xyz", OwnerKind: "ReplicaSet", OwnerName: "model-5c", GPUs: 8})
	}
	return f
}

// procMem is a process's memory as /proc/PID/status has it, in KiB: the
// peak (VmHWM) and current RSS, and the RSS split into anonymous memory
// (heap, stacks) and file-backed pages (the executable's own mapped text
// and data).
type procMem struct{ hwm, rss, anon, file int64 }

func (m procMem) String() string {
	return fmt.Sprintf("rss %.1f MiB (anon %.1f, file %.1f), peak %.1f MiB",
		float64(m.rss)/1024, float64(m.anon)/1024, float64(m.file)/1024, float64(m.hwm)/1024)
}

// procMemory reads a process's memory from /proc/PID/status.
func procMemory(pid int) (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	var m procMem
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmHWM:":
			m.hwm = n
		case "VmRSS:":
			m.rss = n
		case "RssAnon:":
			m.anon = n
		case "RssFile:":
			m.file = n
		}
	}
	if m.hwm == 0 {
		return procMem{}, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return m, nil
}

func resultText(res *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(t.Text)
		}
	}
	return sb.String()
}
