// Command labtool is the multi-call program behind the emulated system
// commands of a lab host (apt-get, systemctl, update-grub, nvidia-smi, ...):
// the lab links each command name to it in the host's bin directory and
// it dispatches on argv[0]. See package emul.
package main

import (
	"os"

	"github.com/mcp-patch/mcp-patch/lab/fleet/emul"
)

func main() {
	os.Exit(emul.Main(os.Args))
}
