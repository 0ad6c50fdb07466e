package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mcp-patch/mcp-patch/mcptool"
)

// roundHooks is everything the tool framework (package mcptool) asks of
// *Deps and of the round: the mode that refuses a kind of tool, how the
// round's answers become results, the audit and the commit after each
// call, the rules stated in input schemas and the tools a next call may
// name. It is built afresh for each tool: a package variable would make
// Builtin, which builds the tools, part of its own initialisation.
func roundHooks() *mcptool.Hooks[*Deps] {
	return &mcptool.Hooks[*Deps]{
		Refuse: func(ctx context.Context, d *Deps, spec Spec) error {
			if modeRefuses(d.Mode, spec.Kind) {
				return Refuse("Use a read-only tool, or ask the operator to restart the server without this mode.",
					fmt.Sprintf("the server runs in %s mode: %s tool %s is disabled", d.Mode, spec.Kind, spec.Name))
			}
			if spec.Kind == ReadOnly {
				// Where another server may have written the round, it is
				// answered as the remote holds it.
				d.SyncForRead(ctx)
				return nil
			}
			// Only the leader acts: a follower answers read-only tools
			// and refuses the others, naming the leader; a new leader
			// first takes the round over from the remote.
			l, err := d.Leadership(ctx)
			if err != nil {
				return err
			}
			return d.Leads(ctx, l, spec.Name)
		},
		Answer: answerCall,
		Audit: func(ctx context.Context, d *Deps, spec Spec, in any, res *Result) {
			audit(ctx, d, spec, in, res)
		},
		AfterCall: func(ctx context.Context, d *Deps, spec Spec, res *Result) {
			commitAfterCall(ctx, d, spec, res)
		},
		Offers: func(d *Deps, spec Spec) bool {
			return d.Mode != ModeReadOnly || spec.Kind == ReadOnly
		},
		Log:            func(d *Deps) *slog.Logger { return d.Log },
		Constrain:      constrainInput,
		ResultSchemaID: ResultSchemaID,
		Next: mcptool.NextCalls{
			StatusTool:    "round_status",
			DefaultAction: defaultNextAction,
			// round_status's node only narrows its rows: the call that
			// follows a step asks for the whole summary.
			Carried: []string{"node"},
			Fresh:   []string{"approval", "attestation"},
			Input:   builtinInput,
		},
	}
}

// answerCall words the round's answers (the window package's, a
// destructive step's request for approval, the approval a failed step ran
// under) as the call's result, and returns the error left to render.
func answerCall(spec Spec, err error, res *Result) error {
	err = fromWindow(err)
	var ae *approvedErr
	if errors.As(err, &ae) {
		res.ApprovalID = ae.id
	}
	n, ok := isNeedApproval(err)
	if !ok {
		return err
	}
	a := n.ApprovalNeeded
	res.Status, res.Approval = StatusApprovalRequired, &a
	res.Reasons = append(append([]string{}, n.notes...), spec.Name+" is destructive: a person must sign the request before anything runs", "nothing was executed")
	res.NextAction = "Give approval.request to a person unchanged with approval.command; when they hand back the signed approval, " +
		"make next_call with approval set to it (next_call is this call again)."
	return nil
}
