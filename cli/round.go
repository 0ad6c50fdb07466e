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
	var markdown bool
	planCmd := &cobra.Command{
		Use:   "plan [--round ID] [--markdown]",
		Short: "The round's reviewed plan as a readable table, or plan.md (the tool's own output: mcp-patch tool show_plan)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runRoundPlan(cmd.Context(), a.g, roundID, markdown, a.stdio))
		},
	}
	planCmd.Flags().StringVar(&roundID, "round", "", "the round (default: the open one)")
	planCmd.Flags().BoolVar(&markdown, "markdown", false, "print plan.md whole (every package, GRUB id and pod)")
	c.AddCommand(status, planCmd)
	return c
}

// runRoundPlan is `mcp-patch round plan [--round ID] [--markdown]`.
func runRoundPlan(ctx context.Context, g *globals, roundID string, markdown bool, stdio IO) int {
	d, cleanup, code := g.depsFor(ctx, stdio)
	if code != ExitOK {
		return code
	}
	defer cleanup()
	args, _ := json.Marshal(map[string]string{"round": roundID})
	out, res := tools.Builtin().Get("show_plan").CallJSON(ctx, d, args, func(float64, float64, string) {})
	if res.Status != tools.StatusOK {
		fmt.Fprintf(stdio.Stderr, "mcp-patch round plan: %s: %v\n", res.Status, res.Reasons)
		return ExitNotOK
	}
	sp := out.(*tools.ShowPlanOut)
	if markdown {
		fmt.Fprint(stdio.Stdout, sp.Detail)
		return ExitOK
	}
	fmt.Fprint(stdio.Stdout, sp.Table)
	if st := sp.Plan; st != nil {
		signed := "not signed"
		if st.Signed {
			signed = "signed by " + st.SignedBy
		}
		fmt.Fprintf(stdio.Stdout, "revision %d, %s; this round needs %d signatures (%d with one per step)\n", st.Revision, signed, st.Signatures, st.PerStepSignatures)
		fmt.Fprintf(stdio.Stdout, "read %s\n", st.Files[0])
	}
	fmt.Fprintln(stdio.Stdout, "Next: "+res.NextAction)
	return ExitOK
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
