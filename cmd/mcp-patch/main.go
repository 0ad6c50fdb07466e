// Command mcp-patch is the MCP server and CLI for the OS and kernel patch
// round of a Kubernetes GPU cluster. main only builds the context and maps
// the result to an exit code; everything else lives in package cli. It
// links no lab code: the lab is cmd/mcp-patch-lab, which `mcp-patch lab`
// runs.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/mcp-patch/mcp-patch/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, SetMemoryLimit: debug.SetMemoryLimit})
	stop()
	os.Exit(code)
}
