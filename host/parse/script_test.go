package parse

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/scripts"
)

// fixture reads a sample from testdata/fixtures (copies of
// ../shared/fixtures; provenance in testdata/fixtures/SOURCES.md).
func fixture(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "fixtures", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fixtureFiles(t testing.TB, dir, prefix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("testdata", "fixtures", dir, prefix+"*"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no fixtures %s/%s*: %v", dir, prefix, err)
	}
	return m
}

// scriptBlock returns the shell functions between "# ---- NAME: begin" and
// "# ---- NAME: end" in an embedded host script, so tests run the very code
// the node runs.
func scriptBlock(t testing.TB, script, name string) string {
	t.Helper()
	b, err := scripts.Host.ReadFile("host/" + script)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	begin := strings.Index(s, "# ---- "+name+": begin")
	end := strings.Index(s, "# ---- "+name+": end")
	if begin < 0 || end < begin {
		t.Fatalf("%s has no %s block", script, name)
	}
	return s[begin:end]
}

// runShell runs sh -c with a script and stdin, failing the test on error.
func runShell(t testing.TB, script string, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, stderr.String())
	}
	return string(out)
}
