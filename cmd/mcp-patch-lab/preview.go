package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/cli"
	"github.com/mcp-patch/mcp-patch/lab"
)

// previewNodes are the hosts the preview inspects: a control-plane node and
// the canary, one of each kind the round treats differently.
var previewNodes = []string{"cp-1", "gpu-canary-1"}

// previewTools are the CLI twins the preview runs on each node: the
// host-side part of plan_round's preflight, read-only.
var previewTools = []string{"inspect_node", "simulate_upgrade"}

// labPreviewCommand is `mcp-patch lab preview`: the lab's hosts without the
// control plane, and the host-side preflight run on them through the CLI
// twins, printed as a person would type and see it. scripts/demo.sh runs it
// while the control plane compiles.
func labPreviewCommand(env cli.Env, options func() (lab.Options, *slog.Logger, error), addDir func(*cobra.Command)) *cobra.Command {
	c := &cobra.Command{
		Use:   "preview",
		Short: "Start the lab's hosts only (no control plane) and run inspect_node and simulate_upgrade on two of them",
		Long: `Start the lab's emulated hosts behind real SSH, without the control plane, and
run the host-side part of the preflight on a control-plane node and the
canary through the CLI twins (mcp-patch tool inspect_node / simulate_upgrade),
printing each command and its answer; then stop the hosts. Needs no
control-plane build: scripts/demo.sh shows it while that build runs.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, _, err := options()
			if err != nil {
				return err
			}
			return cli.ExitCode(labPreview(cmd.Context(), o, env.Stdio))
		},
	}
	addDir(c)
	return c
}

func labPreview(ctx context.Context, opts lab.Options, stdio cli.IO) int {
	start := time.Now()
	if err := lab.Fresh(opts.Dir); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab preview:", err)
		return cli.ExitNotOK
	}
	l, err := lab.Preview(ctx, opts)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab preview:", err)
		return cli.ExitNotOK
	}
	defer func() {
		if err := l.Close(); err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch lab preview: stopping the hosts:", err)
		}
	}()
	fmt.Fprintf(stdio.Stdout, "Lab hosts up in %s: %d hosts over SSH (no control plane yet), config %s\n",
		time.Since(start).Round(time.Second), len(l.Fleet.Hosts()), l.ConfigFile)
	fmt.Fprintf(stdio.Stdout, "The host-side preflight, read-only, as a person runs it (MCP_PATCH_CONFIG=%s):\n", l.ConfigFile)
	code := cli.ExitOK
	for _, node := range previewNodes {
		for _, tool := range previewTools {
			fmt.Fprintf(stdio.Stdout, "\n$ mcp-patch tool %s --node %s -o table\n", tool, node)
			// --log-level error: the answer alone, as the table shows it.
			args := []string{"tool", tool, "--node", node, "--config", l.ConfigFile, "-o", "table", "--log-level", "error"}
			if rc := cli.Run(ctx, args, stdio); rc != cli.ExitOK {
				fmt.Fprintf(stdio.Stderr, "mcp-patch lab preview: %s on %s exited %d\n", tool, node, rc)
				code = cli.ExitNotOK
			}
		}
	}
	fmt.Fprintf(stdio.Stdout, "\nPreview done in %s (%s): the round itself needs the control plane.\n",
		time.Since(start).Round(time.Second), strings.Join(previewTools, ", "))
	return code
}
