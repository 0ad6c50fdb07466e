package fromfleet

import (
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
	os.Exit(m.Run())
}
