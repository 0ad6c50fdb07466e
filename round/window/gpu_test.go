package window_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestJudgeGPUAcceptance(t *testing.T) {
	good := func(mod func(*window.GPUChecks)) window.GPUChecks {
		c := window.GPUChecks{Host: steps.GPUCheck{Passed: true, GPUCount: 8}, Smoke: gpucheck.SmokeResult{Status: "ok"},
			Completion: gpucheck.CompletionResult{OK: true}}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name            string
		checks          window.GPUChecks
		problems, notes []string
	}{
		{name: "all green", checks: good(nil)},
		{name: "host check could not run", checks: good(func(c *window.GPUChecks) { c.HostErr = errors.New("ssh: timeout") }),
			problems: []string{"host GPU check: ssh: timeout"}},
		{name: "a GPU fell off the bus", checks: good(func(c *window.GPUChecks) {
			c.Host = steps.GPUCheck{Problems: []string{"7 GPUs, expected 8", "GPU 3: XID 79"}}
		}), problems: []string{"7 GPUs, expected 8", "GPU 3: XID 79"}},
		{name: "no free GPU is a note", checks: good(func(c *window.GPUChecks) {
			c.Smoke = gpucheck.SmokeResult{Status: "no_capacity", Message: "0 of 8 GPUs free"}
		}), notes: []string{"smoke pod: 0 of 8 GPUs free"}},
		{name: "smoke pod failed", checks: good(func(c *window.GPUChecks) {
			c.Smoke = gpucheck.SmokeResult{Status: "failed", Message: "CUDA error"}
		}), problems: []string{"smoke pod: CUDA error"}},
		{name: "smoke pod could not be made", checks: good(func(c *window.GPUChecks) { c.SmokeErr = errors.New("forbidden") }),
			problems: []string{"smoke pod: forbidden"}},
		{name: "completion wrong", checks: good(func(c *window.GPUChecks) {
			c.Completion = gpucheck.CompletionResult{Reason: "HTTP 503"}
		}), problems: []string{"model completion: HTTP 503"}},
		{name: "completion unreachable, host and smoke too", checks: window.GPUChecks{HostErr: errors.New("down"),
			SmokeErr: errors.New("no node"), CompletionErr: errors.New("refused")},
			problems: []string{"host GPU check: down", "smoke pod: no node", "model completion: refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, notes := window.JudgeGPUAcceptance(tc.checks)
			if d := cmp.Diff(tc.problems, problems); d != "" {
				t.Errorf("problems (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.notes, notes); d != "" {
				t.Errorf("notes (-want +got):\n%s", d)
			}
		})
	}
}
