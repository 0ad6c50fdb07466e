package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

// BenchmarkPreflight200Replay is plan_round's fleet-wide preflight on 200
// hosts whose answers cost them nothing here: what mcp-patch itself spends
// on 2 cores when each host runs preflight.sh on its own CPU, as real
// hosts do. BenchmarkPreflight200 plays all 200 hosts' shells and tools on
// the same 2 cores, and that (about 1.2 CPU-s of forks and execs per
// host) is what its wall time measures.
//
// First preflight.sh runs for real on a 3+1+1 lab fleet, through the
// production pool, and each role's answer (its stdout, stderr and exit
// status) is recorded. Then 200 SSH servers on loopback (x/crypto/ssh,
// public-key login, known host keys) answer the same command with the
// answer recorded for their role, after reading the script it sends. The
// client side is the production one: the SSH pool at concurrency 50,
// preflight parsing, the plan's build, encoding and rendering. It reports
// wall time, this process's CPU (client and servers: the servers' share is
// their handshakes) and peak RSS.
func BenchmarkPreflight200Replay(b *testing.B) {
	ctx := context.Background()
	answers := recordPreflight(b)
	rh := startReplayHosts(b, 200, answers)
	inv, err := host.LoadInventory(rh.inventory)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pool, err := host.NewPool(inv, host.Config{KnownHostsFiles: []string{rh.knownHosts}, IdentityFiles: []string{rh.keyFile}})
		if err != nil {
			b.Fatal(err)
		}
		var ru0, ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		sessions0 := rh.sessions()
		start := time.Now()
		facts, fl := planFromPreflight(b, ctx, pool, rh.nodes)
		wall := time.Since(start)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		pool.Close()
		if len(fl.Nodes) != len(rh.nodes) {
			b.Fatalf("plan has %d nodes, want %d", len(fl.Nodes), len(rh.nodes))
		}
		for _, n := range rh.nodes {
			if f := facts[n]; f.Err != "" || f.Target == "" {
				b.Fatalf("node %s: preflight did not read the replayed answer: err %q, target kernel %q", n, f.Err, f.Target)
			}
		}
		cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
		b.ReportMetric(wall.Seconds(), "s/wall-200")
		b.ReportMetric(cpu.Seconds(), "s/cpu-200")
		b.ReportMetric(float64(rh.sessions()-sessions0)/float64(len(rh.nodes)), "sessions/host")
		b.ReportMetric(float64(ru1.Maxrss)/1024, "MiB/maxrss")
	}
}

// answer is what one host's preflight.sh printed and how it exited.
type answer struct {
	stdout, stderr []byte
	exit           int
}

// recorder is a host.Runner that keeps each node's answer.
type recorder struct {
	host.Runner
	mu  sync.Mutex
	got map[string]answer
}

func (r *recorder) RunScript(ctx context.Context, node string, script []byte, env map[string]string) (host.Output, error) {
	out, err := r.Runner.RunScript(ctx, node, script, env)
	if err == nil {
		r.mu.Lock()
		r.got[node] = answer{stdout: out.Stdout, stderr: out.Stderr, exit: out.ExitCode}
		r.mu.Unlock()
	}
	return out, err
}

// recordPreflight runs preflight.sh on a 3+1+1 lab fleet and returns the
// answers of a control-plane node, the canary and a GPU server, keyed
// "cp", "canary", "gpu".
func recordPreflight(b *testing.B) map[string]answer {
	ctx := context.Background()
	f, nodes, newPool := benchFleet(b, fleet.Options{ControlPlanes: 3, Canary: 1, GPUServers: 1, ToolBinary: buildLabHost(b)})
	// The recording fleet stops before the replay is measured.
	defer func() {
		if err := f.Close(); err != nil {
			b.Logf("close the recording fleet: %v", err)
		}
	}()
	pool := newPool()
	defer pool.Close()
	rec := &recorder{Runner: pool, got: map[string]answer{}}
	for _, n := range nodes {
		if _, _, err := steps.New(rec, nil).Preflight(ctx, n); err != nil {
			b.Fatalf("record preflight on %s: %v", n, err)
		}
	}
	out := map[string]answer{"cp": rec.got[nodes[0]], "canary": rec.got[nodes[3]], "gpu": rec.got[nodes[4]]}
	for role, a := range out {
		if len(a.stdout) == 0 {
			b.Fatalf("no %s answer recorded (nodes %v)", role, nodes)
		}
	}
	return out
}

// replayHosts are SSH servers on loopback that answer any command with a
// recorded answer.
type replayHosts struct {
	nodes                          []string
	inventory, knownHosts, keyFile string
	count                          *atomic.Int64 // exec requests answered
}

func (r replayHosts) sessions() int64 { return r.count.Load() }

// startReplayHosts starts n servers: 3 control-plane nodes, a canary and
// GPU servers, each answering with its role's answer.
func startReplayHosts(b *testing.B, n int, answers map[string]answer) replayHosts {
	dir := sshdtest.TempDir(b, "replay-hosts-")
	hostKey, _ := sshdtest.NewKey(b, dir, "host_ed25519", "ed25519")
	client, keyFile := sshdtest.NewKey(b, dir, "id_ed25519", "ed25519")
	authorized := client.PublicKey().Marshal()
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), authorized) {
			return nil, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	cfg.AddHostKey(hostKey)

	rh := replayHosts{count: new(atomic.Int64)}
	var inv, kh strings.Builder
	fmt.Fprintf(&inv, "defaults:\n  user: root\n  identity_files: [%q]\nnodes:\n", keyFile)
	var wg sync.WaitGroup
	var listeners []net.Listener
	b.Cleanup(func() {
		for _, l := range listeners {
			l.Close()
		}
		wg.Wait()
	})
	for i := 0; i < n; i++ {
		var name string
		var a answer
		switch {
		case i < 3:
			name, a = fmt.Sprintf("cp-%d", i+1), answers["cp"]
		case i == 3:
			name, a = "gpu-canary-1", answers["canary"]
		default:
			name, a = fmt.Sprintf("gpu-%d", i-3), answers["gpu"]
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		listeners = append(listeners, l)
		port := l.Addr().(*net.TCPAddr).Port
		rh.nodes = append(rh.nodes, name)
		fmt.Fprintf(&inv, "  %s:\n    address: 127.0.0.1\n    port: %d\n", name, port)
		fmt.Fprintf(&kh, "[127.0.0.1]:%d %s", port, ssh.MarshalAuthorizedKey(hostKey.PublicKey()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					rh.serve(c, cfg, a)
				}()
			}
		}()
	}
	rh.inventory = filepath.Join(dir, "inventory.yaml")
	rh.knownHosts = filepath.Join(dir, "known_hosts")
	rh.keyFile = keyFile
	for path, content := range map[string]string{rh.inventory: inv.String(), rh.knownHosts: kh.String()} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return rh
}

// serve is one connection: every session's exec gets the answer once the
// client has sent the whole script (stdin closed).
func (r replayHosts) serve(c net.Conn, cfg *ssh.ServerConfig, a answer) {
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for req := range creqs {
				if req.Type != "exec" {
					if req.WantReply {
						req.Reply(req.Type == "env", nil)
					}
					continue
				}
				req.Reply(true, nil)
				r.count.Add(1)
				if _, err := io.Copy(io.Discard, ch); err != nil {
					return
				}
				ch.Write(a.stdout)
				ch.Stderr().Write(a.stderr)
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(a.exit)}))
				return
			}
		}()
	}
}
