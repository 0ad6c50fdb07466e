// Command mcp-patch-lab is mcp-patch with the lab: the same CLI, whose
// `lab` command starts the embedded lab (an emulated GPU fleet behind real
// SSH on a real control plane) instead of running this binary. Started
// under the name of a lab host's command (the lab links them to this
// executable), it is that command instead (fleet.HostCommandMain). The
// production binary, cmd/mcp-patch, links none of it; `mcp-patch lab ...`
// runs this binary with the same arguments.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/mcp-patch/mcp-patch/cli"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

func main() {
	if code, ran := fleet.HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.RunWith(ctx, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, SetMemoryLimit: debug.SetMemoryLimit}, labCommand)
	stop()
	os.Exit(code)
}
