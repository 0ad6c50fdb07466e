package fleet

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/mcp-patch/mcp-patch/lab/fleet/emul"
)

// servesHostCommands is set once the running executable has offered to
// play the lab-host helper (HostCommandMain); only then may its hosts'
// commands link to it.
var servesHostCommands atomic.Bool

// HostCommandMain is the lab-host helper mode of an executable: the lab
// links every emulated command of its hosts (apt-get, systemctl,
// update-grub, nvidia-smi, ...) to the executable that runs the lab, and
// the executable becomes that command when started under its name (or as
// "labtool COMMAND"). Call it first thing in main, and in TestMain of a
// test package that starts a fleet: when argv[0] names a lab-host command
// it runs it and returns its exit status with true; otherwise it returns
// false and the program goes on as itself. A lab-host command acts only on
// the lab host named by its environment (package emul) and refuses to run
// elsewhere.
func HostCommandMain(argv []string) (exitCode int, ran bool) {
	servesHostCommands.Store(true)
	if len(argv) == 0 || !emul.Serves(argv[0]) {
		return 0, false
	}
	return emul.Main(argv), true
}

// errNoHostCommands: the running executable never called HostCommandMain,
// so a host's commands linked to it would run it as itself.
var errNoHostCommands = errors.New("this executable does not serve the lab's host commands: call fleet.HostCommandMain first in main (or TestMain), or set Options.ToolBinary")

// hostCommandBinary is the executable a host's commands link to.
func hostCommandBinary(opts Options) (string, error) {
	if opts.ToolBinary != "" {
		return opts.ToolBinary, nil
	}
	if !servesHostCommands.Load() {
		return "", errNoHostCommands
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this executable for the hosts' commands: %w", err)
	}
	return self, nil
}
