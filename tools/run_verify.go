package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// RunVerifyIn names the component.
type RunVerifyIn struct {
	Component      string `json:"component"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"default 60"`
}

// RunVerifyOut is the script's outcome.
type RunVerifyOut struct {
	Result
	Verify *intent.VerifyResult `json:"verify,omitempty"`
}

// RunVerify is the run_verify tool.
func RunVerify() Tool {
	return New[RunVerifyIn, RunVerifyOut](Spec{
		Name:  "run_verify",
		Title: "Run a component's verify.sh",
		Description: "A component's verify.sh from the intent repository, bounded in time: exit code and output. Exit 0: its " +
			"properties hold as far as the script can tell.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in RunVerifyIn, p Progress) (RunVerifyOut, error) {
		timeout := 60 * time.Second
		if in.TimeoutSeconds != 0 {
			if in.TimeoutSeconds < 1 || in.TimeoutSeconds > 600 {
				return RunVerifyOut{}, Refuse("Use a timeout between 1 and 600 seconds.", fmt.Sprintf("timeout_seconds %d is out of range", in.TimeoutSeconds))
			}
			timeout = time.Duration(in.TimeoutSeconds) * time.Second
		}
		r, err := d.IntentRepo("")
		if err != nil {
			return RunVerifyOut{}, err
		}
		v, err := r.RunVerify(ctx, in.Component, timeout, d.VerifyEnv)
		if err != nil {
			return RunVerifyOut{}, service.IntentError("run verify.sh of "+in.Component, err)
		}
		out := RunVerifyOut{Verify: &v}
		if !v.Passed {
			why := fmt.Sprintf("verify.sh of %s exited %d", in.Component, v.ExitCode)
			if v.TimedOut {
				why = fmt.Sprintf("verify.sh of %s ran past %s and was killed", in.Component, timeout)
			}
			out.Result = Result{Status: StatusFailed, Reasons: []string{why},
				NextAction: "Read the output; if the component is unhealthy, stop and tell a person before any destructive step."}
			return out, nil
		}
		out.Reasons = []string{fmt.Sprintf("verify.sh of %s passed in %d ms", in.Component, v.DurationMS)}
		return out, nil
	})
}
