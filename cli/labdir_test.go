package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lab up and lab demo --dir on a directory that is not a lab's refuse and
// remove nothing (the current directory included).
func TestLabDirNotALabIsRefused(t *testing.T) {
	for _, sub := range []string{"up", "demo"} {
		t.Run(sub, func(t *testing.T) {
			dir := t.TempDir()
			keep := filepath.Join(dir, "important.txt")
			if err := os.WriteFile(keep, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, errOut := run(t, "", nil, "lab", sub, "--dir", dir)
			if code != ExitNotOK || !strings.Contains(errOut, "not a lab directory") {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if b, err := os.ReadFile(keep); err != nil || string(b) != "keep me" {
				t.Errorf("the directory's file is gone or changed: %v %q", err, b)
			}
		})
	}
}
