package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/tools"
)

func (a *app) roundCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "round COMMAND",
		Short: "Where the current round stands",
		Args:  noArgs,
		RunE:  groupRun,
	}
	var roundID string
	status := &cobra.Command{
		Use:   "status [--round ID]",
		Short: "round_status as a readable table (the tool's own output: mcp-patch tool round_status)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runRoundStatus(cmd.Context(), a.g, roundID, a.stdio))
		},
	}
	status.Flags().StringVar(&roundID, "round", "", "the round (default: the open one)")
	c.AddCommand(status)
	return c
}

// runRoundStatus is `mcp-patch round status [--round ID]`.
func runRoundStatus(ctx context.Context, g *globals, roundID string, stdio IO) int {
	d, cleanup, code := g.depsFor(ctx, stdio)
	if code != ExitOK {
		return code
	}
	defer cleanup()
	args2, _ := json.Marshal(map[string]string{"round": roundID})
	out, res := tools.Builtin().Get("round_status").CallJSON(ctx, d, args2, func(float64, float64, string) {})
	if res.Status != tools.StatusOK {
		fmt.Fprintf(stdio.Stderr, "mcp-patch round status: %s: %v\n", res.Status, res.Reasons)
		return ExitNotOK
	}
	fmt.Fprint(stdio.Stdout, out.(*tools.RoundStatusOut).Table)
	for _, r := range res.Reasons {
		fmt.Fprintln(stdio.Stdout, "! "+r)
	}
	fmt.Fprintln(stdio.Stdout, "Next: "+res.NextAction)
	return ExitOK
}
