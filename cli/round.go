package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
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
	restore := &cobra.Command{
		Use:   "restore --round ID",
		Short: "Write a round's journal back from the server's anchor, byte for byte as the server wrote it (the way out of a journal that does not reproduce it; run it with the server stopped)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runRoundRestore(a.g, roundID, a.stdio))
		},
	}
	restore.Flags().StringVar(&roundID, "round", "", "the round whose journal to restore")
	c.AddCommand(status, planCmd, restore)
	return c
}

// runRoundRestore is `mcp-patch round restore --round ID`.
func runRoundRestore(g *globals, roundID string, stdio IO) int {
	c, err := g.load(stdio.Getenv)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
		return ExitUsage
	}
	if !round.ValidRoundID(roundID) || c.IntentRepo == "" || c.StateDir == "" {
		fmt.Fprintln(stdio.Stderr, "mcp-patch round restore: needs --round, the intent repository and the state directory")
		return ExitUsage
	}
	dir := filepath.Join(c.IntentRepo, "rounds", roundID)
	rep, err := round.RestoreFromAnchor(dir, service.AnchorDir(c.StateDir))
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch round restore:", err)
		return ExitNotOK
	}
	if len(rep.Replaced) == 0 {
		fmt.Fprintf(stdio.Stdout, "round %s: the journal already is what the server wrote (%d records, %d sealed segments)\n", roundID, rep.Records, rep.Segments)
		return ExitOK
	}
	fmt.Fprintf(stdio.Stdout, "round %s: wrote back %s from the anchor (%d records, %d sealed segments); commit them before the next window\n",
		roundID, strings.Join(rep.Replaced, ", "), rep.Records, rep.Segments)
	return ExitOK
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
