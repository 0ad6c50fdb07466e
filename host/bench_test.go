package host

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

// BenchmarkFanOut runs a read-only command (`uname -r`, as fleet_check
// does) over N real sshd endpoints on loopback with several clients and
// prints a table of wall time and client CPU. Sizes come from
// MCPP_BENCH_HOSTS (default "50,200"), concurrency from
// MCPP_BENCH_CONCURRENCY (default 50); ansible runs only up to
// MCPP_BENCH_ANSIBLE_MAX hosts (default 50); MCPP_BENCH_EXTERNAL=0 leaves
// out parallel-ssh and ansible. scripts/bench-fanout.sh runs it.
//
// Client CPU is user+sys: for the in-process Go variants the getrusage
// (RUSAGE_SELF) delta of this process, for parallel-ssh and ansible the
// rusage of the tool's process with its reaped children (every ssh it ran).
func BenchmarkFanOut(b *testing.B) {
	sizes := envInts(b, "MCPP_BENCH_HOSTS", []int{50, 200})
	concurrency := envInts(b, "MCPP_BENCH_CONCURRENCY", []int{50})[0]
	ansibleMax := envInts(b, "MCPP_BENCH_ANSIBLE_MAX", []int{50})[0]
	external := os.Getenv("MCPP_BENCH_EXTERNAL") != "0" // parallel-ssh and ansible
	largest := 0
	for _, n := range sizes {
		largest = max(largest, n)
	}

	dir := sshdtest.TempDir(b, "fanout-bench-")
	signer, keyPath := sshdtest.NewKey(b, dir, "id_ed25519", "ed25519")
	servers := sshdtest.StartMany(b, largest, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	known := filepath.Join(dir, "known_hosts")
	sshdtest.WriteKnownHosts(b, known, servers...)
	inv, _ := NewMapInventory(Target{})
	nodes := make([]string, largest)
	for i, s := range servers {
		nodes[i] = fmt.Sprintf("node-%03d", i)
		if err := inv.Set(Target{Name: nodes[i], Address: s.Host, Port: s.Port}); err != nil {
			b.Fatal(err)
		}
	}
	kernel, err := exec.Command("uname", "-r").Output()
	if err != nil {
		b.Fatal(err)
	}
	want := strings.TrimSpace(string(kernel))
	cfg := Config{KnownHostsFiles: []string{known}, IdentityFiles: []string{keyPath}, DialTimeout: 60 * time.Second, CommandTimeout: 120 * time.Second}

	var rows []benchRow
	record := func(b *testing.B, r benchRow) {
		r.perHostMS = r.cpu.Seconds() * 1000 / float64(r.hosts)
		b.ReportMetric(r.wall.Seconds(), "wall-s")
		b.ReportMetric(r.cpu.Seconds(), "cpu-s")
		b.ReportMetric(r.perHostMS, "cpu-ms/host")
		b.ReportMetric(float64(r.handshakes), "handshakes")
		b.ReportMetric(float64(r.failures), "failed-hosts")
		if r.failures > 0 {
			b.Errorf("%s: %d of %d hosts failed: %s", r.variant, r.failures, r.hosts, r.firstErr)
		}
		// A benchmark the framework reruns with a larger b.N replaces
		// its earlier row.
		for i := range rows {
			if rows[i].variant == r.variant && rows[i].hosts == r.hosts {
				rows[i] = r
				return
			}
		}
		rows = append(rows, r)
	}

	for _, n := range sizes {
		hosts := nodes[:n]
		b.Run(fmt.Sprintf("hosts=%d/mcp-patch-cold", n), func(b *testing.B) {
			var pooled *Pool
			r := measureGo(b, func() (int, string) {
				p, err := NewPool(inv, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if pooled != nil {
					pooled.Close()
				}
				pooled = p
				return checkResults(runFleetCheck(b.Context(), p, hosts, concurrency), want)
			})
			r.variant, r.hosts, r.handshakes = "mcp-patch cold", n, pooled.Stats().Handshakes
			r.keepalives = pooled.Stats().KeepalivesSent
			record(b, r)

			// The first pass over open connections pays for the Go
			// runtime warming up (goroutine stacks grow on the deep SSH
			// path until the runtime learns their size); later passes are
			// the steady state. Both are shown.
			for _, pass := range []string{"1st", "2nd"} {
				b.Run("pooled-"+pass+"-pass", func(b *testing.B) {
					before := pooled.Stats()
					r := measureGo(b, func() (int, string) {
						return checkResults(runFleetCheck(b.Context(), pooled, hosts, concurrency), want)
					})
					after := pooled.Stats()
					r.variant, r.hosts = "mcp-patch pooled, "+pass, n
					r.handshakes = after.Handshakes - before.Handshakes
					r.keepalives = after.KeepalivesSent - before.KeepalivesSent
					if r.handshakes != 0 {
						b.Errorf("pooled run made %d new handshakes, want 0", r.handshakes)
					}
					record(b, r)
				})
			}
			pooled.Close()
		})
		b.Run(fmt.Sprintf("hosts=%d/x-crypto-ssh-sessions-on-open-connections", n), func(b *testing.B) {
			clients, err := dialAll(servers[:n], signer, known, concurrency)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range clients {
					c.Close()
				}
			}()
			for _, pass := range []string{"1st", "2nd"} {
				r := measureGo(b, func() (int, string) { return bareSessions(clients, concurrency, want) })
				r.variant, r.hosts = "x/crypto bare sess., "+pass, n
				record(b, r)
			}
		})
		b.Run(fmt.Sprintf("hosts=%d/x-crypto-ssh-loop-c%d", n, concurrency), func(b *testing.B) {
			r := measureGo(b, func() (int, string) { return plainLoop(servers[:n], signer, known, concurrency, want) })
			r.variant, r.hosts, r.handshakes = fmt.Sprintf("x/crypto/ssh loop c=%d", concurrency), n, int64(n)
			record(b, r)
		})
		if !external {
			continue
		}
		b.Run(fmt.Sprintf("hosts=%d/parallel-ssh", n), func(b *testing.B) {
			r := measureExternal(b, func(outDir string) *exec.Cmd {
				return parallelSSH(b, servers[:n], keyPath, known, concurrency, outDir)
			}, func(outDir string, _ []byte) (int, string) { return checkOutDir(outDir, n, want) })
			r.variant, r.hosts, r.handshakes = "parallel-ssh", n, int64(n)
			record(b, r)
		})
		if n <= ansibleMax {
			b.Run(fmt.Sprintf("hosts=%d/ansible", n), func(b *testing.B) {
				r := measureExternal(b, func(outDir string) *exec.Cmd {
					return ansibleCommand(b, servers[:n], keyPath, known, concurrency, outDir)
				}, func(_ string, out []byte) (int, string) { return checkAnsible(out, n, want) })
				r.variant, r.hosts, r.handshakes = "ansible -m command", n, int64(n)
				record(b, r)
			})
		}
	}
	printTable(rows, concurrency)
}

type benchRow struct {
	variant    string
	hosts      int
	wall, cpu  time.Duration
	perHostMS  float64
	handshakes int64
	keepalives int64 // keepalive round trips that fell into the window
	failures   int
	firstErr   string
}

// runFleetCheck is what fleet_check does per host.
func runFleetCheck(ctx context.Context, p *Pool, nodes []string, concurrency int) []Result[string] {
	return FanOut(ctx, nodes, concurrency, func(ctx context.Context, node string) (string, error) {
		out, err := p.RunScript(ctx, node, []byte("uname -r\n"), nil)
		if err == nil && out.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", out.ExitCode, out.Stderr)
		}
		return strings.TrimSpace(string(out.Stdout)), err
	})
}

func checkResults(results []Result[string], want string) (int, string) {
	failures, first := 0, ""
	for _, r := range results {
		if r.Err != nil || r.Value != want {
			if failures == 0 {
				first = fmt.Sprintf("%s: %q %v", r.Node, r.Value, r.Err)
			}
			failures++
		}
	}
	return failures, first
}

// measureGo runs fn b.N times and reports wall and this process's CPU per
// run.
func measureGo(b *testing.B, fn func() (int, string)) benchRow {
	var r benchRow
	runtime.GC() // garbage of the previous variant is not this one's cost
	cpu0 := selfCPU()
	start := time.Now()
	for range b.N {
		f, first := fn()
		if f > 0 && r.failures == 0 {
			r.firstErr = first
		}
		r.failures += f
	}
	r.wall = time.Since(start) / time.Duration(b.N)
	r.cpu = (selfCPU() - cpu0) / time.Duration(b.N)
	return r
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureExternal runs a client tool b.N times; CPU is the rusage of the
// tool with every child it reaped.
func measureExternal(b *testing.B, mk func(outDir string) *exec.Cmd, check func(outDir string, out []byte) (int, string)) benchRow {
	var r benchRow
	var wall, cpu time.Duration
	for range b.N {
		outDir := b.TempDir()
		cmd := mk(outDir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		wall += time.Since(start)
		if cmd.ProcessState == nil {
			b.Fatalf("%s: %v", cmd.Path, err)
		}
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		f, first := check(outDir, out.Bytes())
		if f > 0 && r.failures == 0 {
			r.firstErr = fmt.Sprintf("%s (exit %v): %s", first, err, lastLines(out.String(), 5))
		}
		r.failures += f
	}
	r.wall, r.cpu = wall/time.Duration(b.N), cpu/time.Duration(b.N)
	return r
}

// plainLoop is the baseline: for each host, ssh.Dial with known_hosts,
// one session, close; concurrency bounded like the others.
func plainLoop(servers []*sshdtest.Server, signer ssh.Signer, known string, concurrency int, want string) (int, string) {
	cb, err := knownhosts.New(known)
	if err != nil {
		return len(servers), err.Error()
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: cb, Timeout: 60 * time.Second}
	var mu sync.Mutex
	failures, first := 0, ""
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, s := range servers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out, err := func() ([]byte, error) {
				c, err := ssh.Dial("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), cfg)
				if err != nil {
					return nil, err
				}
				defer c.Close()
				sess, err := c.NewSession()
				if err != nil {
					return nil, err
				}
				defer sess.Close()
				return sess.Output("uname -r")
			}()
			if err != nil || strings.TrimSpace(string(out)) != want {
				mu.Lock()
				if failures == 0 {
					first = fmt.Sprintf("%s: %q %v", s.Addr(), out, err)
				}
				failures++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failures, first
}

// dialAll opens one plain x/crypto connection per server.
func dialAll(servers []*sshdtest.Server, signer ssh.Signer, known string, concurrency int) ([]*ssh.Client, error) {
	cb, err := knownhosts.New(known)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: cb, Timeout: 60 * time.Second}
	clients := make([]*ssh.Client, len(servers))
	errs := make([]error, len(servers))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, s := range servers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			clients[i], errs[i] = ssh.Dial("tcp", s.Addr(), cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, c := range clients {
				if c != nil {
					c.Close()
				}
			}
			return nil, fmt.Errorf("dial %s: %w", servers[i].Addr(), err)
		}
	}
	return clients, nil
}

// bareSessions is the floor for a pooled run: one session per open
// connection running the command directly, nothing else.
func bareSessions(clients []*ssh.Client, concurrency int, want string) (int, string) {
	var mu sync.Mutex
	failures, first := 0, ""
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, c := range clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out, err := func() ([]byte, error) {
				sess, err := c.NewSession()
				if err != nil {
					return nil, err
				}
				defer sess.Close()
				return sess.Output("uname -r")
			}()
			if err != nil || strings.TrimSpace(string(out)) != want {
				mu.Lock()
				if failures == 0 {
					first = fmt.Sprintf("%q %v", out, err)
				}
				failures++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failures, first
}

func parallelSSH(b *testing.B, servers []*sshdtest.Server, keyPath, known string, concurrency int, outDir string) *exec.Cmd {
	hostsFile := filepath.Join(b.TempDir(), "hosts")
	var lines strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&lines, "root@%s:%d\n", s.Host, s.Port)
	}
	if err := os.WriteFile(hostsFile, []byte(lines.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return exec.Command("parallel-ssh", "-h", hostsFile, "-p", strconv.Itoa(concurrency), "-t", "120",
		"-o", outDir,
		"-O", "UserKnownHostsFile="+known, "-O", "StrictHostKeyChecking=yes", "-O", "GlobalKnownHostsFile=/dev/null",
		"-O", "IdentityFile="+keyPath, "-O", "IdentitiesOnly=yes", "-O", "BatchMode=yes",
		"uname -r")
}

func checkOutDir(outDir string, n int, want string) (int, string) {
	entries, _ := os.ReadDir(outDir)
	ok := 0
	for _, e := range entries {
		if b, _ := os.ReadFile(filepath.Join(outDir, e.Name())); strings.TrimSpace(string(b)) == want {
			ok++
		}
	}
	if ok == n {
		return 0, ""
	}
	return n - ok, fmt.Sprintf("%d of %d output files hold %q", ok, n, want)
}

func ansibleCommand(b *testing.B, servers []*sshdtest.Server, keyPath, known string, concurrency int, outDir string) *exec.Cmd {
	invFile := filepath.Join(b.TempDir(), "inventory.ini")
	var lines strings.Builder
	lines.WriteString("[fleet]\n")
	for i, s := range servers {
		fmt.Fprintf(&lines, "h%03d ansible_host=%s ansible_port=%d\n", i, s.Host, s.Port)
	}
	fmt.Fprintf(&lines, "[fleet:vars]\nansible_user=root\nansible_python_interpreter=/usr/bin/python3\nansible_ssh_private_key_file=%s\n", keyPath)
	if err := os.WriteFile(invFile, []byte(lines.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("ansible", "fleet", "-i", invFile, "-m", "command", "-a", "uname -r", "-f", strconv.Itoa(concurrency), "-o")
	cmd.Env = append(os.Environ(),
		"ANSIBLE_HOST_KEY_CHECKING=True",
		"ANSIBLE_SSH_COMMON_ARGS=-o UserKnownHostsFile="+known+" -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes",
		"ANSIBLE_SSH_CONTROL_PATH_DIR="+filepath.Join(outDir, "cp"),
		"ANSIBLE_LOCAL_TEMP="+filepath.Join(outDir, "tmp"),
		"ANSIBLE_NOCOLOR=1",
	)
	return cmd
}

func checkAnsible(out []byte, n int, want string) (int, string) {
	ok := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "| CHANGED | rc=0 |") && strings.Contains(line, want) {
			ok++
		}
	}
	if ok == n {
		return 0, ""
	}
	return n - ok, fmt.Sprintf("%d of %d hosts reported %q", ok, n, want)
}

func printTable(rows []benchRow, concurrency int) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nfan-out of `uname -r` over real sshd endpoints on 127.0.0.1, concurrency %d\n", concurrency)
	fmt.Fprintf(&b, "%-24s %6s %9s %13s %14s %11s %11s %7s\n", "client", "hosts", "wall (s)", "client CPU(s)", "CPU/host (ms)", "handshakes", "keepalives", "failed")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-24s %6d %9.2f %13.3f %14.3f %11d %11d %7d\n", r.variant, r.hosts, r.wall.Seconds(), r.cpu.Seconds(), r.perHostMS, r.handshakes, r.keepalives, r.failures)
	}
	fmt.Fprintf(&b, "keepalives: keepalive@openssh.com round trips sent by the pool during the window (their CPU is in the figure)\n")
	fmt.Print(b.String())
}

func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
