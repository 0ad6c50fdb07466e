package tools

import "context"

// ApproveWindowIn is the node whose whole window a person approves.
type ApproveWindowIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"a GPU server"`
}

// ApproveWindowOut is the recorded window approval.
type ApproveWindowOut struct {
	Result
	Tools map[string]string `json:"tools,omitempty" jsonschema:"each covered tool and the plan digest it must show live"`
}

// ApproveWindow is the approve_window tool.
func ApproveWindow() Tool {
	return New[ApproveWindowIn, ApproveWindowOut](Spec{
		Name:  "approve_window",
		Title: "Approve a whole window",
		Description: "Where the intent allows it: one signature for a GPU server's whole window, bound to each step's digest; a " +
			"drifted live plan needs signing again.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in ApproveWindowIn, p Progress) (ApproveWindowOut, error) {
		o, err := d.ApproveWindow(ctx, in.Node, in.Approval)
		if err != nil {
			return ApproveWindowOut{}, err
		}
		if o.Already {
			return ApproveWindowOut{Tools: o.Tools, Result: Result{Reasons: []string{"the window of " + in.Node + " is already approved by " + o.Principal}}}, nil
		}
		out := ApproveWindowOut{Tools: o.Tools, Result: Result{Reasons: []string{"the window of " + in.Node + " is approved by " + o.Principal},
			NextAction: "drain_node " + in.Node + " (no further signature while its live plan matches).", NextCall: CallTo("drain_node", "node", in.Node)}}
		out.ApprovalID = o.ApprovalID
		return out, nil
	})
}
