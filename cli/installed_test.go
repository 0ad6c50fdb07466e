package cli

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/lab"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLabUpFromAnInstalledBinary: the mcp-patch binary, outside the source
// tree, started from a directory outside it with no Go toolchain on PATH,
// brings the lab up (through the lab's binary, mcp-patch-lab, installed
// beside it) on the control plane already in the cache (the one a clone's
// scripts/build-controlplane.sh names: same key), and its hosts' commands
// are the lab's binary: inspect_node runs inspect.sh over SSH through them.
// Nothing is built at run time.
func TestLabUpFromAnInstalledBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// As every lab test: the first one on a fresh machine builds the control
	// plane (from the tree); the binary must then find that very build.
	bins, err := cluster.FindBinaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Dir(bins.Dir)

	elsewhere := t.TempDir()
	labDir := filepath.Join(elsewhere, "lab")
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", cluster.EnvBinDir, "MCP_PATCH_REPO", "MCP_PATCH_LAB_DIR", "MCP_PATCH_CONFIG", "PWD", lab.EnvHostBinary, EnvLabBinary:
			continue
		}
		env = append(env, kv)
	}
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "go")); err == nil {
			continue
		}
		path = append(path, d)
	}
	env = append(env, "PATH="+strings.Join(path, string(os.PathListSeparator)), "PWD="+elsewhere)
	command := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Dir, cmd.Env = elsewhere, env
		return cmd
	}
	if err := command("version").Run(); err != nil {
		t.Fatalf("the binary does not run from %s: %v", elsewhere, err)
	}
	up := command("lab", "up", "--dir", labDir, "--control-planes", "1", "--canary", "1", "--gpu-servers", "1",
		"--http", "127.0.0.1:0", "--log-level", "info")
	up.Cancel = func() error { return up.Process.Signal(syscall.SIGINT) }
	up.WaitDelay = time.Minute
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	up.Stderr = &stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	done := make(chan struct{})
	var waitErr error
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		waitErr = up.Wait()
	}()
	defer func() {
		select {
		case <-done:
		default:
			if err := up.Process.Signal(syscall.SIGINT); err != nil {
				t.Errorf("stop lab up: %v", err)
			}
			go func() {
				for range lines { // keep the pipe drained while it stops
				}
			}()
			select {
			case <-done:
				if waitErr != nil {
					t.Errorf("lab up after SIGINT: %v\nstderr:\n%s", waitErr, stderr.String())
				}
			case <-time.After(2 * time.Minute):
				t.Errorf("lab up did not stop within 2 minutes of SIGINT")
			}
		}
	}()
	for isUp := false; !isUp; {
		select {
		case l, ok := <-lines:
			if !ok {
				<-done
				t.Fatalf("lab up ended before the lab was up: %v\nstderr:\n%s", waitErr, stderr.String())
			}
			isUp = strings.HasPrefix(l, "The lab is up")
		case <-ctx.Done():
			t.Fatalf("the lab was not up in time\nstderr:\n%s", stderr.String())
		}
	}

	if log := stderr.String(); !strings.Contains(log, "cached: "+cached) {
		t.Errorf("lab up did not report the existing build %s:\n%s", cached, log)
	}
	for _, bad := range []string{"building into", "go: downloading", "go build"} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("lab up built something (%q):\n%s", bad, stderr.String())
		}
	}

	// The hosts' commands are links to the lab's binary, which plays them.
	links, err := filepath.Glob(filepath.Join(labDir, "fleet", "hosts", "gpu-canary-1", "bin", "*"))
	if err != nil || len(links) == 0 {
		t.Fatalf("no host commands under %s: %v", labDir, err)
	}
	for _, l := range links {
		if to, err := os.Readlink(l); err != nil || to != labBinary {
			t.Errorf("%s links to %q (%v), want the lab's binary %s", l, to, err, labBinary)
		}
	}
	insp := command("tool", "inspect_node", "--node", "gpu-canary-1", "--config", filepath.Join(labDir, "mcp-patch.yaml"))
	out, err := insp.CombinedOutput()
	if err != nil {
		t.Fatalf("inspect_node on the lab: %v\n%s", err, out)
	}
	for _, want := range []string{`"status": "ok"`, "6.8.0-48-generic", "grub"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("inspect_node output lacks %q:\n%s", want, out)
		}
	}
}
