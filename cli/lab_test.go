package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestFindLabBinary: $MCP_PATCH_LAB_BINARY wins (and must be an executable
// file), then mcp-patch-lab beside this executable, then on PATH; none is
// an error that says how to build it.
func TestFindLabBinary(t *testing.T) {
	dir := t.TempDir()
	mk := func(path string, mode os.FileMode) string {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	explicit := mk(filepath.Join(dir, "explicit", "lab"), 0o755)
	beside := mk(filepath.Join(dir, "bin", labBinaryName), 0o755)
	onPath := mk(filepath.Join(dir, "path", labBinaryName), 0o755)
	notExec := mk(filepath.Join(dir, "noexec", labBinaryName), 0o644)
	self := filepath.Join(dir, "bin", "mcp-patch")
	alone := filepath.Join(dir, "alone", "mcp-patch")
	for name, tc := range map[string]struct {
		env     map[string]string
		self    string
		want    string
		wantErr []string
	}{
		"the variable wins":     {env: map[string]string{EnvLabBinary: explicit, "PATH": filepath.Dir(onPath)}, self: self, want: explicit},
		"beside the executable": {env: map[string]string{"PATH": filepath.Dir(onPath)}, self: self, want: beside},
		"on PATH":               {env: map[string]string{"PATH": filepath.Dir(notExec) + ":" + filepath.Dir(onPath)}, self: alone, want: onPath},
		"the variable names a file that does not run": {env: map[string]string{EnvLabBinary: notExec}, self: self, wantErr: []string{EnvLabBinary, notExec, "not an executable file"}},
		"nowhere": {env: map[string]string{"PATH": filepath.Dir(notExec)}, self: alone,
			wantErr: []string{"mcp-patch-lab", filepath.Dir(alone), "PATH", "go build -o " + filepath.Join(filepath.Dir(alone), labBinaryName) + " ./cmd/mcp-patch-lab", "go install github.com/mcp-patch/mcp-patch/cmd/mcp-patch-lab@"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := findLabBinary(func(k string) string { return tc.env[k] }, func() (string, error) { return tc.self, nil }, os.Stat)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("found %s, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestLabWithoutTheLabBinary: mcp-patch lab without the lab's binary
// anywhere exits 1 naming how to build it, and runs nothing.
func TestLabWithoutTheLabBinary(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "", map[string]string{EnvLabBinary: "", "PATH": ""}, "lab", "demo", "--dir", dir)
	if code != ExitNotOK || !strings.Contains(errOut, "go build -o") || !strings.Contains(errOut, "./cmd/mcp-patch-lab") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the lab directory changed: %v %v", entries, err)
	}
}

// TestLabRunsTheLabBinary: mcp-patch lab passes its arguments, global
// flags included, to the lab's binary and answers with its exit code and
// output.
func TestLabRunsTheLabBinary(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := run(t, "", nil, "--log-level", "debug", "lab", "fault", "kernel-panic", "--node", "cp-1", "--dir", dir)
	if code != ExitNotOK || !strings.Contains(errOut, "no running lab in "+dir) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, _, errOut = run(t, "", nil, "lab", "demo", "--log-level", "loud", "--dir", dir)
	if code != ExitUsage || !strings.Contains(errOut, `--log-level "loud"`) {
		t.Fatalf("a bad global flag after lab: exit %d: %s", code, errOut)
	}
}

// readyWriter calls ready once on the first write that holds "ready".
type readyWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	ready func()
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.ready != nil && strings.Contains(w.buf.String(), "ready") {
		w.ready()
		w.ready = nil
	}
	return len(p), nil
}

// TestLabInterruptedStopsTheLabBinary: a stop of mcp-patch (its context
// done, as on Ctrl-C or SIGTERM) interrupts the lab's binary, and
// mcp-patch exits as it does (lab up stops its lab and exits 0).
func TestLabInterruptedStopsTheLabBinary(t *testing.T) {
	for name, exit := range map[string]int{"a clean stop": ExitOK, "a stop that fails": 3} {
		t.Run(name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "mcp-patch-lab")
			body := fmt.Sprintf("#!/bin/sh\ntrap 'echo stopping; exit %d' INT\necho ready\nwhile :; do sleep 0.05; done\n", exit)
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &readyWriter{ready: cancel}
			var errb strings.Builder
			code := Run(ctx, []string{"lab", "up"}, IO{Stdin: strings.NewReader(""), Stdout: out, Stderr: &errb,
				Getenv: func(k string) string { return map[string]string{EnvLabBinary: script}[k] }})
			if code != exit || !strings.Contains(out.buf.String(), "stopping") {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exit, out.buf.String(), errb.String())
			}
		})
	}
}
