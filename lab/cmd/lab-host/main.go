// Command lab-host plays the emulated commands of the lab's hosts
// (apt-get, dpkg-query, uname, update-grub, nvidia-smi, ...) exactly as
// mcp-patch's lab-host mode does (fleet.HostCommandMain), with nothing
// else linked in: package emul and the standard library. A host step
// starts a dozen such commands, so their start is the lab's cost per
// host: this binary starts without the server's package inits (Kubernetes
// client schemes, protobuf registries, Prometheus collectors). Give it to
// the fleet as Options.ToolBinary.
package main

import (
	"fmt"
	"os"

	"github.com/mcp-patch/mcp-patch/lab/fleet/emul"
)

func main() {
	if len(os.Args) == 0 || !emul.Serves(os.Args[0]) {
		fmt.Fprintln(os.Stderr, "lab-host: run it as a lab host's command (linked under the command's name, or as labtool COMMAND)")
		os.Exit(2)
	}
	os.Exit(emul.Main(os.Args))
}
