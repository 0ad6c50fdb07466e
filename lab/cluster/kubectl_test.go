package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlBuiltWhenFirstAskedFor: a control-plane set without kubectl
// (as the demo's first run leaves it) gets kubectl built into its own bin
// directory the first time Kubectl asks, through the script the binary
// carries, with the pinned Kubernetes version stamped in; the second ask
// finds it. The set here is the real one, linked into a cache of the
// test's own so the machine's set is not changed.
func TestKubectlBuiltWhenFirstAskedFor(t *testing.T) {
	real := binDirForTest(t, nil)
	key := filepath.Base(filepath.Dir(real))
	cache := t.TempDir()
	set := filepath.Join(cache, "controlplane", key)
	if err := os.MkdirAll(filepath.Join(set, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "kubectl" || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Symlink(filepath.Join(real, e.Name()), filepath.Join(set, "bin", e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"stages", "COMPLETE", "BUILD-INFO"} {
		if err := os.Symlink(filepath.Join(filepath.Dir(real), name), filepath.Join(set, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("MCP_PATCH_CACHE", cache)
	t.Setenv(EnvBinDir, "")

	bins := Binaries{Dir: filepath.Join(set, "bin")}
	if err := bins.check(); err != nil {
		t.Fatalf("the set without kubectl is not a whole set: %v", err)
	}
	var logs logLines
	got, err := Kubectl(t.Context(), logs.logger(), bins)
	if err != nil {
		t.Fatal(err)
	}
	if want := bins.Path("kubectl"); got != want {
		t.Fatalf("kubectl at %s, want %s", got, want)
	}
	if fi, err := os.Lstat(got); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("kubectl in the set is not a file of its own: %v %v", fi, err)
	}
	if !strings.Contains(strings.Join(logs.lines, ""), "kubectl: building it into "+bins.Dir) {
		t.Errorf("the build said nothing of kubectl:\n%s", strings.Join(logs.lines, ""))
	}
	out, err := exec.Command(got, "version", "--client").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl version --client: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "v1.37.2") {
		t.Errorf("kubectl version --client: %s, want the pinned v1.37.2", out)
	}
	// Asked again: found, nothing built.
	var again logLines
	if p, err := Kubectl(t.Context(), again.logger(), bins); err != nil || p != got {
		t.Fatalf("second ask: %s, %v", p, err)
	}
	if len(again.lines) != 0 {
		t.Errorf("second ask ran the build script:\n%s", strings.Join(again.lines, ""))
	}

	// With $MCP_PATCH_CONTROLPLANE_BIN naming a set without kubectl there
	// is nothing to build into: a clear error.
	bare := t.TempDir()
	t.Setenv(EnvBinDir, bare)
	if _, err := Kubectl(t.Context(), nil, Binaries{Dir: bare}); err == nil || !strings.Contains(err.Error(), "--kubectl") {
		t.Errorf("kubectl missing from $%s: %v, want an error naming --kubectl", EnvBinDir, err)
	}
}
