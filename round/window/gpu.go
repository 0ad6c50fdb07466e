package window

import (
	"context"
	"fmt"
	"time"

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
	// Driver is the wait for the node's driver pod on the new kernel, on a
	// GPU server whose driver is the GPU Operator's driver container (nil
	// elsewhere); DriverErr a wait that could not run.
	Driver    *gpucheck.DriverPodResult
	DriverErr error
}

// JudgeGPUAcceptance is GPU acceptance's verdict: any problem fails the
// step (and stops the round); notes do not (a smoke pod that found no free
// GPU is no capacity, not a regression).
func JudgeGPUAcceptance(c GPUChecks) (problems, notes []string) {
	switch {
	case c.DriverErr != nil:
		problems = append(problems, "driver pod: "+c.DriverErr.Error())
	case c.Driver != nil && c.Driver.State != gpucheck.DriverReady:
		problems = append(problems, "driver pod: "+c.Driver.Reason)
		for _, l := range lastN(c.Driver.Logs, 10) {
			problems = append(problems, "driver pod log: "+l)
		}
	case c.Driver != nil:
		notes = append(notes, "driver pod: "+c.Driver.Reason) // which pod, on which kernel
	}
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

// GPUProbes are GPU acceptance's three checks on a node: the host's GPUs
// and driver (host/steps), a smoke pod on nvidia.com/gpu and a completion
// from the model endpoint (kube/gpucheck).
type GPUProbes interface {
	HostGPU(ctx context.Context, node string) (steps.GPUCheck, error)
	SmokePod(ctx context.Context, node string) (gpucheck.SmokeResult, error)
	Completion(ctx context.Context) (gpucheck.CompletionResult, error)
}

// DriverProbe is the wait for a node's driver pod on the kernel it runs
// now, where the GPU Operator's driver container provides the driver;
// applies is false on a server whose driver comes from host packages.
type DriverProbe interface {
	DriverPod(ctx context.Context, node string) (res gpucheck.DriverPodResult, applies bool, err error)
}

// RunGPUAcceptance runs the three checks in turn, each whatever the
// others answered (a person reads all three), reporting progress before
// each; progress may be nil. Where p is also a DriverProbe and the node's
// driver is the driver container, the bounded wait for its driver pod
// comes first. It records nothing: JudgeGPUAcceptance judges the answers.
func RunGPUAcceptance(ctx context.Context, p GPUProbes, node string, progress func(done, total float64, msg string)) GPUChecks {
	if progress == nil {
		progress = func(float64, float64, string) {}
	}
	var c GPUChecks
	if dp, ok := p.(DriverProbe); ok {
		progress(0, 3, "driver pod")
		res, applies, err := dp.DriverPod(ctx, node)
		switch {
		case err != nil:
			c.DriverErr = err
		case applies:
			c.Driver = &res
		}
	}
	progress(0, 3, "host checks")
	c.Host, c.HostErr = p.HostGPU(ctx, node)
	progress(1, 3, "smoke pod")
	c.Smoke, c.SmokeErr = p.SmokePod(ctx, node)
	progress(2, 3, "model completion")
	c.Completion, c.CompletionErr = p.Completion(ctx)
	return c
}

// GPUAccepted is what a passed GPU acceptance reports: its notes, then the
// GPUs, the driver and how fast the model answered.
func GPUAccepted(c GPUChecks, notes []string) []string {
	return append(append([]string{}, notes...), fmt.Sprintf("%d GPUs healthy, driver %s; completion answered in %s",
		c.Host.GPUCount, c.Host.DriverVersion, c.Completion.Latency.Round(time.Millisecond)))
}

func lastN(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// DriverOnOldKernel is the driver pod's wait run again after a trial boot
// fell back, or a rollback brought the node back, to its old kernel.
type DriverOnOldKernel struct {
	// Result is the wait's outcome (nil when it could not run).
	Result *gpucheck.DriverPodResult `json:"result,omitempty"`
	// Red: the driver did not come back on the old kernel, or the wait
	// could not run; a person looks. Line says it in words.
	Red  bool   `json:"red"`
	Line string `json:"line"`
}

// driverOnOldKernel runs the driver pod's wait (Driver, as GPU acceptance
// runs it) on the kernel node runs now, after a fallback or a rollback,
// where the node's driver is the GPU Operator's driver container; nil
// where it is not (or no Driver is set).
func (w *Window) driverOnOldKernel(ctx context.Context, node string) *DriverOnOldKernel {
	if w.Driver == nil {
		return nil
	}
	if n := w.Rec.J.Shared().Node(node); n != nil && !n.GPU {
		return nil
	}
	res, applies, err := w.Driver.DriverPod(ctx, node)
	switch {
	case err != nil:
		return &DriverOnOldKernel{Red: true, Line: "the driver pod's wait on the old kernel could not run: " + oneLine(err.Error())}
	case !applies:
		return nil
	case res.State != gpucheck.DriverReady:
		d := &DriverOnOldKernel{Result: &res, Red: true, Line: "the driver did not come back on the old kernel: " + oneLine(res.Reason)}
		for _, l := range lastN(res.Logs, 5) {
			d.Line += " | " + oneLine(l)
		}
		return d
	}
	return &DriverOnOldKernel{Result: &res, Line: fmt.Sprintf("the driver pod %s is Ready on the old kernel (after %s)", res.Pod, res.Waited.Round(time.Second))}
}
