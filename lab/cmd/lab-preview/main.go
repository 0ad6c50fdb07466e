// Command lab-preview is the first screen of scripts/demo.sh on a cold
// machine: the lab's emulated hosts behind real SSH and the host-side
// preflight on two of them (package hostpreview), built from about a fifth
// of mcp-patch's packages so it shows the product minutes before mcp-patch
// and the control plane are compiled. It also plays the hosts' emulated
// commands (fleet.HostCommandMain), so it needs no other binary.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/hostpreview"
)

func main() {
	if code, ran := fleet.HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("lab-preview", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the hosts (default: a new temporary directory, removed at the end)")
	tablesFile := fs.String("tables", "", "write each command's full answer to this file, and only a summary per host to the screen")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "lab-preview: takes no arguments")
		return 2
	}
	d := *dir
	if d == "" {
		tmp, err := os.MkdirTemp("", "mcp-patch-lab-preview-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "lab-preview:", err)
			return 1
		}
		defer func() {
			if err := os.RemoveAll(tmp); err != nil {
				fmt.Fprintln(os.Stderr, "lab-preview: remove", tmp+":", err)
			}
		}()
		d = tmp
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := hostpreview.Options{Dir: d}
	if *tablesFile != "" {
		f, err := os.Create(*tablesFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lab-preview:", err)
			return 1
		}
		opts.Tables, opts.TablesName = f, *tablesFile
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "lab-preview:", err)
			}
		}()
	}
	if err := hostpreview.Run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lab-preview:", err)
		return 1
	}
	return 0
}
