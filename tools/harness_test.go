package tools

import (
	"os"
	"sync"
	"testing"
)

// testTools is the built-in registry, built once for the test binary:
// the tools hold no state of their own (it is all in Deps), and building
// the registry (every tool's input schema) per call was most of the CPU
// of the tests that make thousands of calls.
var testTools = sync.OnceValue(Builtin)

// memDir is a fresh directory on a memory filesystem (/dev/shm) where the
// machine has one, else t.TempDir(). The journal still fsyncs every
// record; there an fsync costs microseconds instead of the milliseconds
// of a shared disk, which otherwise dominate the tests that write
// thousands of records.
func memDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "mcp-patch-test-"); err == nil {
			t.Cleanup(func() {
				if err := os.RemoveAll(dir); err != nil {
					t.Errorf("remove %s: %v", dir, err)
				}
			})
			return dir
		}
	}
	return t.TempDir()
}
