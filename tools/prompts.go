package tools

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/round"
)

// A prompt is a named starting point for the agent (a slash command in
// Claude Code: /mcp__mcp-patch__plan_round): text only, it reads and
// changes nothing. Each takes the round's id, optional; without one the
// agent asks round_status which round is open.
type prompt struct {
	name, title, description string
	text                     func(roundArg string) string
}

var prompts = []prompt{
	{
		name:        "plan_round",
		title:       "Plan the patch round",
		description: "Read the intent, inspect the nodes and write the round's plan for a person to review and sign; no window starts.",
		text: func(r string) string {
			return "Plan the OS and kernel patch round" + roundName(r) + ".\n" +
				"1. read_intent: what each platform component must keep true, its open questions and the lessons of earlier rounds.\n" +
				"2. plan_round" + roundCall(r) + ": the order, what moves on each node, what each drain will evict, and the blockers. " +
				"If it stops on a blocker, report it with its reasons and next_action; do not work around it.\n" +
				"3. show_plan: summarise for a person which packages move, what runs where, what each drain evicts, and the decisions that are theirs (holds, the canary, open questions).\n" +
				"4. Hand the person the sign command the plan's result names. Start no window: every destructive step waits for a person's signature over exactly its plan."
		},
	},
	{
		name:        "continue_round",
		title:       "Continue the patch round",
		description: "Ask round_status where the open round stands and make its next call, one window at a time, stopping at every approval and every red check.",
		text: func(r string) string {
			return "Continue the patch round" + roundName(r) + ", one node at a time.\n" +
				"1. round_status" + roundCall(r) + ": read its reasons and make exactly its next_call.\n" +
				"2. approval_required: give the person the request text unchanged with the command shown and wait for the approval; add it as the \"approval\" argument to the same call. You cannot approve your own request.\n" +
				"3. in_progress: call the same tool again with the same arguments to see where it stands.\n" +
				"4. refused or failed: stop, report the reasons and next_action to the person, and wait for their signed decision (record_decision). Never work around a stop.\n" +
				"Repeat from 1 until round_status says the round waits for a person or is closed."
		},
	},
	{
		name:        "record_findings",
		title:       "Record what the round taught",
		description: "Read the round's report and commit its findings back to the intent documents as lessons and open questions.",
		text: func(r string) string {
			return "Write back what the patch round" + roundName(r) + " taught, before the next window.\n" +
				"1. round_status" + roundCall(r) + ": the report, the stops, the decisions and the nodes left behind.\n" +
				"2. For each finding, record_lesson against the component and the property it concerns: kind=lesson for what the next round should do differently, kind=open_question where the live system contradicts an intent document.\n" +
				"3. Report to the person what you recorded and the commits round_status names."
		},
	},
}

// roundName names the round in a prompt's text: its id, or the open one
// when the prompt was given none.
func roundName(r string) string {
	if r == "" {
		return " that is open (round_status names it)"
	}
	return " " + r
}

// roundCall is the argument list a prompt's tool calls carry: the round's
// id when the prompt was given one.
func roundCall(r string) string {
	if r == "" {
		return ""
	}
	return fmt.Sprintf(` {"round":%q}`, r)
}

// promptText is a prompt's text for its arguments, or why the arguments
// are refused: an unknown argument or a round id round.ValidRoundID
// refuses.
func promptText(p prompt, args map[string]string) (string, error) {
	r := ""
	for k, v := range args {
		switch {
		case k != "round":
			return "", fmt.Errorf("prompt %s: unknown argument %q (it takes round)", p.name, k)
		case v == "":
		case !round.ValidRoundID(v):
			return "", fmt.Errorf("prompt %s: round %q is not a round id (letters, digits, '.', '_' or '-', at most 64, such as 2026-12)", p.name, v)
		default:
			r = v
		}
	}
	return p.text(r), nil
}

// addPrompts offers the prompts on s.
func addPrompts(s *mcp.Server) {
	for _, p := range prompts {
		s.AddPrompt(&mcp.Prompt{Name: p.name, Title: p.title, Description: p.description,
			Arguments: []*mcp.PromptArgument{{Name: "round", Title: "Round", Description: "the round's id, such as 2026-12; empty: the open round"}}},
			func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				text, err := promptText(p, req.Params.Arguments)
				if err != nil {
					return nil, err
				}
				return &mcp.GetPromptResult{Description: p.description,
					Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}, nil
			})
	}
}
