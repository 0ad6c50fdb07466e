package lab

import (
	"fmt"
	"os"
	"testing"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

// TestMain lets this test binary play the lab hosts' commands, as mcp-patch
// does: the fleet links them to the running executable.
func TestMain(m *testing.M) {
	if code, ran := fleet.HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	code := m.Run()
	if err := controlPlanes.closeAll(); err != nil {
		fmt.Fprintln(os.Stderr, "close the lab control planes:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
