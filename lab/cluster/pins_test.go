package cluster

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/scripts"
)

// TestPinsAreCurrent: the copies this binary carries are the files of
// lab/controlplane that the build script hashes into its cache key (go.mod,
// go.sum and *.go), byte for byte and none missing or extra; otherwise
// `go generate ./lab/cluster` brings them up to date.
func TestPinsAreCurrent(t *testing.T) {
	src := filepath.Join("..", "controlplane")
	want := map[string]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if n := d.Name(); n != "go.mod" && n != "go.sum" && !strings.HasSuffix(n, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		want[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	err = fs.WalkDir(pins, "pins", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := pins.ReadFile(p)
		if err != nil {
			return err
		}
		got[strings.TrimSuffix(strings.TrimPrefix(p, "pins/"), pinSuffix)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 8 {
		t.Errorf("lab/controlplane has %d hashed files, want go.mod, go.sum and main.go of etcd and kube, kube/controllermanager.go and kube/kubectl/main.go", len(want))
	}
	for name := range want {
		if got[name] != want[name] {
			t.Errorf("lab/cluster/pins/%s%s is not lab/controlplane/%s: run go generate ./lab/cluster (and add a //go:generate line for a new file)", name, pinSuffix, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("lab/cluster/pins/%s%s has no source in lab/controlplane", name, pinSuffix)
		}
	}
}

// TestEmbeddedScriptIsTheScript: the build script the binary carries is
// scripts/build-controlplane.sh as it is in the tree.
func TestEmbeddedScriptIsTheScript(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", buildScript))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, scripts.BuildControlPlane) {
		t.Error("scripts.BuildControlPlane differs from scripts/build-controlplane.sh")
	}
}

// logLines collects the build script's progress lines.
type logLines struct{ lines []string }

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (l *logLines) Write(p []byte) (int, error) {
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

var keyedDirRE = regexp.MustCompile(`(not built yet|cached): (\S+/controlplane/[0-9a-f]{16})\b`)

func (l *logLines) keyedDir(t *testing.T) string {
	t.Helper()
	for _, s := range l.lines {
		if m := keyedDirRE.FindStringSubmatch(s); m != nil {
			return m[2]
		}
	}
	t.Fatalf("no cache directory in the build script's lines:\n%s", strings.Join(l.lines, ""))
	return ""
}

// TestEmbeddedBuildUsesTheCloneKey runs the script from the tree and the
// copy the binary writes out against one cache: both name the same keyed
// directory when nothing is built, and both find the same build once it is
// there. A changed key would make every installed binary rebuild for
// three quarters of an hour.
func TestEmbeddedBuildUsesTheCloneKey(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("MCP_PATCH_CACHE", cache)
	repoScript := func() (string, string, int) {
		cmd := exec.Command("sh", filepath.Join("..", "..", buildScript), "--cached-only")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		m := keyedDirRE.FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("the tree's script named no cache directory: %s", stderr.String())
		}
		return strings.TrimSpace(stdout.String()), m[2], cmd.ProcessState.ExitCode()
	}

	_, cloneDir, code := repoScript()
	if code != notBuiltExit {
		t.Fatalf("the tree's script exit %d on an empty cache, want %d", code, notBuiltExit)
	}
	var logs logLines
	if _, err := runEmbeddedBuild(t.Context(), logs.logger(), buildCachedOnly); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("embedded build on an empty cache: %v, want ErrNotBuilt", err)
	}
	if d := cmp.Diff(cloneDir, logs.keyedDir(t)); d != "" {
		t.Fatalf("the embedded pins name another cache directory than the tree's (-tree +embedded):\n%s", d)
	}

	// A finished build under that key, as the script leaves one.
	if err := os.MkdirAll(filepath.Join(cloneDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cloneDir, "bin", "kube-apiserver"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cloneDir, "COMPLETE"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cloneBin, _, code := repoScript()
	if code != 0 || cloneBin != filepath.Join(cloneDir, "bin") {
		t.Fatalf("the tree's script: exit %d, bin %q; want 0 and %s/bin", code, cloneBin, cloneDir)
	}
	// Without Go on PATH: a cached set needs no toolchain. The sources
	// written out go away afterwards.
	t.Setenv("PATH", pathWithout(t, "go"))
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	got, err := runEmbeddedBuild(t.Context(), slog.New(slog.DiscardHandler), buildCachedOnly)
	if err != nil {
		t.Fatal(err)
	}
	if got != cloneBin {
		t.Errorf("embedded build found %s, the tree's script %s", got, cloneBin)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("the build sources were left in %s: %v (%v)", tmp, left, err)
	}
}

// TestEmbeddedBuildFindsTheRealCache: on this machine's own cache the
// binary's copy and the tree's script agree (both built, or both not).
func TestEmbeddedBuildFindsTheRealCache(t *testing.T) {
	cmd := exec.Command("sh", filepath.Join("..", "..", buildScript), "--cached-only")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	got, embErr := runEmbeddedBuild(t.Context(), slog.New(slog.DiscardHandler), buildCachedOnly)
	switch code := cmd.ProcessState.ExitCode(); {
	case code == notBuiltExit:
		if !errors.Is(embErr, ErrNotBuilt) {
			t.Errorf("the tree's script finds no build, the binary's copy: %q, %v", got, embErr)
		}
	case code == 0:
		if want := strings.TrimSpace(string(out)); embErr != nil || got != want {
			t.Errorf("the binary's copy found %q (%v), the tree's script %q", got, embErr, want)
		}
	default:
		t.Fatalf("the tree's script: exit %d", code)
	}
}

// pathWithout returns $PATH less the directories holding an executable
// named name.
func pathWithout(t *testing.T, name string) string {
	t.Helper()
	var keep []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && !st.IsDir() {
			continue
		}
		keep = append(keep, d)
	}
	return strings.Join(keep, string(os.PathListSeparator))
}

// TestDebianEtcdUnavailableFallsBackToSource: when Debian's etcd package
// cannot be had (here: the mirror refuses connections), the script says why
// and that etcd comes from the pinned module instead, and leaves neither a
// Debian etcd nor its private apt directory in the cache.
func TestDebianEtcdUnavailableFallsBackToSource(t *testing.T) {
	cache := t.TempDir()
	cmd := exec.Command("sh", filepath.Join("..", "..", buildScript), "--prefetch")
	cmd.Env = append(os.Environ(), "MCP_PATCH_CACHE="+cache, "MCP_PATCH_DEBIAN_MIRROR=http://127.0.0.1:9/debian", "MCP_PATCH_ETCD=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("prefetch with an unreachable mirror: %v\n%s", err, out)
	}
	for _, want := range []string{"etcd from Debian: apt-get failed", "etcd (source)"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the script's output lacks %q:\n%s", want, out)
		}
	}
	left, err := filepath.Glob(filepath.Join(cache, "controlplane", "*etcd-debian*"))
	if err != nil || len(left) > 0 {
		t.Errorf("left in the cache after a failed fetch: %v (%v)", left, err)
	}
}
