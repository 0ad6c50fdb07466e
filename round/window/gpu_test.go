package window_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
		{name: "driver pod ready", checks: good(func(c *window.GPUChecks) {
			c.Driver = &gpucheck.DriverPodResult{State: gpucheck.DriverReady, Reason: "driver pod d is Ready"}
		}), notes: []string{"driver pod: driver pod d is Ready"}},
		{name: "driver pod fails, its log kept", checks: good(func(c *window.GPUChecks) {
			c.Driver = &gpucheck.DriverPodResult{State: gpucheck.DriverFailed, Reason: "driver pod d on gpu-1 fails: container nvidia-driver-ctr CrashLoopBackOff",
				Logs: []string{"Building the kernel module", "make: *** /lib/modules/6.8.0-45-generic/build: No such file or directory"}}
		}), problems: []string{"driver pod: driver pod d on gpu-1 fails: container nvidia-driver-ctr CrashLoopBackOff",
			"driver pod log: Building the kernel module", "driver pod log: make: *** /lib/modules/6.8.0-45-generic/build: No such file or directory"}},
		{name: "driver pod could not be asked", checks: good(func(c *window.GPUChecks) { c.DriverErr = errors.New("forbidden") }),
			problems: []string{"driver pod: forbidden"}},
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

type gpuProbes struct {
	calls []string
	smoke error
}

func (p *gpuProbes) HostGPU(_ context.Context, node string) (steps.GPUCheck, error) {
	p.calls = append(p.calls, "host "+node)
	return steps.GPUCheck{Passed: true, GPUCount: 8, DriverVersion: "550.90.07"}, nil
}

func (p *gpuProbes) SmokePod(_ context.Context, node string) (gpucheck.SmokeResult, error) {
	p.calls = append(p.calls, "smoke "+node)
	return gpucheck.SmokeResult{}, p.smoke
}

func (p *gpuProbes) Completion(context.Context) (gpucheck.CompletionResult, error) {
	p.calls = append(p.calls, "completion")
	return gpucheck.CompletionResult{OK: true, Latency: 1234567 * time.Microsecond}, nil
}

// Every check runs, whatever another answered: a person reads all three.
func TestRunGPUAcceptance(t *testing.T) {
	p := &gpuProbes{smoke: errors.New("no node")}
	var progress []string
	c := window.RunGPUAcceptance(context.Background(), p, "gpu-1", func(done, total float64, msg string) {
		progress = append(progress, fmt.Sprintf("%v/%v %s", done, total, msg))
	})
	if d := cmp.Diff([]string{"host gpu-1", "smoke gpu-1", "completion"}, p.calls); d != "" {
		t.Errorf("checks (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"0/3 host checks", "1/3 smoke pod", "2/3 model completion"}, progress); d != "" {
		t.Errorf("progress (-want +got):\n%s", d)
	}
	problems, _ := window.JudgeGPUAcceptance(c)
	if d := cmp.Diff([]string{"smoke pod: no node"}, problems); d != "" {
		t.Errorf("problems (-want +got):\n%s", d)
	}
	c = window.RunGPUAcceptance(context.Background(), &gpuProbes{}, "gpu-1", nil)
	got := window.GPUAccepted(c, []string{"smoke pod: no free GPU"})
	want := []string{"smoke pod: no free GPU", "8 GPUs healthy, driver 550.90.07; completion answered in 1.235s"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("accepted (-want +got):\n%s", d)
	}
}

type driverProbes struct {
	gpuProbes
	applies bool
}

func (p *driverProbes) DriverPod(_ context.Context, node string) (gpucheck.DriverPodResult, bool, error) {
	p.calls = append(p.calls, "driver "+node)
	return gpucheck.DriverPodResult{State: gpucheck.DriverFailed, Reason: "waited 15m0s, the bound: no driver pod of this boot"}, p.applies, nil
}

// On a driver-container server the driver pod's wait comes first, and the
// other checks still run; elsewhere the probe does not apply.
func TestRunGPUAcceptanceWaitsForTheDriverPod(t *testing.T) {
	p := &driverProbes{applies: true}
	c := window.RunGPUAcceptance(context.Background(), p, "gpu-1", nil)
	if d := cmp.Diff([]string{"driver gpu-1", "host gpu-1", "smoke gpu-1", "completion"}, p.calls); d != "" {
		t.Errorf("checks (-want +got):\n%s", d)
	}
	if problems, _ := window.JudgeGPUAcceptance(c); len(problems) == 0 || problems[0] != "driver pod: waited 15m0s, the bound: no driver pod of this boot" {
		t.Errorf("problems %q", problems)
	}
	c = window.RunGPUAcceptance(context.Background(), &driverProbes{applies: false}, "gpu-1", nil)
	if c.Driver != nil {
		t.Errorf("a host-package server's checks carry a driver pod: %+v", c.Driver)
	}
}
