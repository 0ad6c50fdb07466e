package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcp-patch/mcp-patch/tools"
)

func init() { extraCommands["round"] = runRound }

// runRound is `mcp-patch round status [--round ID]`: round_status as a
// readable table (the tool's own output is `mcp-patch tool round_status`).
func runRound(ctx context.Context, g *globals, args []string, stdio IO) int {
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stdio.Stderr, "usage: mcp-patch round status [--round ID]")
		return ExitUsage
	}
	fs := subFlags("round status", g, stdio)
	roundID := fs.String("round", "", "the round (default: the open one)")
	if err := parseSub(fs, g, args[1:]); err != nil {
		return ExitUsage
	}
	d, cleanup, code := g.depsFor(ctx, stdio)
	if code != ExitOK {
		return code
	}
	defer cleanup()
	args2, _ := json.Marshal(map[string]string{"round": *roundID})
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
