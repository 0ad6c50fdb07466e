package window

import (
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
)

// GPUChecks are the answers of GPU acceptance's three checks on a node's
// new kernel; an Err is a check that could not run.
type GPUChecks struct {
	Host          steps.GPUCheck
	HostErr       error
	Smoke         gpucheck.SmokeResult
	SmokeErr      error
	Completion    gpucheck.CompletionResult
	CompletionErr error
}

// JudgeGPUAcceptance is GPU acceptance's verdict: any problem fails the
// step (and stops the round); notes do not (a smoke pod that found no free
// GPU is no capacity, not a regression).
func JudgeGPUAcceptance(c GPUChecks) (problems, notes []string) {
	if c.HostErr != nil {
		problems = append(problems, "host GPU check: "+c.HostErr.Error())
	} else if !c.Host.Passed {
		problems = append(problems, c.Host.Problems...)
	}
	switch {
	case c.SmokeErr != nil:
		problems = append(problems, "smoke pod: "+c.SmokeErr.Error())
	case c.Smoke.Status == "no_capacity":
		notes = append(notes, "smoke pod: "+c.Smoke.Message)
	case c.Smoke.Status != "ok":
		problems = append(problems, "smoke pod: "+c.Smoke.Message)
	}
	if c.CompletionErr != nil {
		problems = append(problems, "model completion: "+c.CompletionErr.Error())
	} else if !c.Completion.OK {
		problems = append(problems, "model completion: "+c.Completion.Reason)
	}
	return problems, notes
}
