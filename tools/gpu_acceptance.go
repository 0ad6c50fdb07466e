package tools

import (
	"context"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// GPUAcceptanceOut is the host and cluster part of GPU acceptance.
type GPUAcceptanceOut struct {
	Result
	Host       *steps.GPUCheck            `json:"host,omitempty"`
	Smoke      *gpucheck.SmokeResult      `json:"smoke,omitempty"`
	Completion *gpucheck.CompletionResult `json:"completion,omitempty"`
}

// GPUAcceptance is the gpu_acceptance tool.
func GPUAcceptance() Tool {
	return New[NodeIn, GPUAcceptanceOut](Spec{
		Name:  "gpu_acceptance",
		Title: "GPU acceptance",
		Description: "On a GPU server's new kernel: driver loaded, all GPUs healthy, Fabric Manager up (NVSwitch), a smoke pod on " +
			"nvidia.com/gpu (none free: not a regression), a model endpoint completion.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (GPUAcceptanceOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return GPUAcceptanceOut{}, err
		}
		s, err := d.OpenRound()
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		if !s.InFlight(round.StepGPUAcceptance, in.Node) {
			if err := s.Admit(round.StepGPUAcceptance, in.Node); err != nil {
				return GPUAcceptanceOut{}, err
			}
		}
		g := s.Settings.GPU
		if g == nil {
			return GPUAcceptanceOut{}, Refuse("Add the gpu section to the gpu-fleet component's settings.yaml.", "the intent has no gpu settings (expected GPUs, model endpoint)")
		}
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		kc, err := d.KubeClients(ctx)
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		w, err := d.Window(ctx, s, service.NeedHost)
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		// GPU acceptance speaks for the boot that was trial-booted and
		// verified: the node, read now, must still run it.
		now, err := w.ObserveBoot(ctx, in.Node)
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		if _, err := window.DecideOnTrialBoot(in.Node, s.StepRun(round.StepTrialBoot, in.Node), now,
			window.Checked{Step: round.StepVerify, Run: s.StepRun(round.StepVerify, in.Node), Tool: "record_verification"}); err != nil {
			return GPUAcceptanceOut{}, err
		}
		if err := w.HoldLease(ctx, round.StepGPUAcceptance, in.Node); err != nil {
			return GPUAcceptanceOut{}, err
		}
		if err := s.Begin(round.StepGPUAcceptance, in.Node); err != nil {
			return GPUAcceptanceOut{}, err
		}
		c := window.RunGPUAcceptance(ctx, service.GPUProbes{Service: d, Hosts: h, Kube: kc.Kube, GPU: g}, in.Node, p)
		out := GPUAcceptanceOut{Host: &c.Host, Smoke: &c.Smoke, Completion: &c.Completion}
		problems, notes := window.JudgeGPUAcceptance(c)
		// The boot the host check ran on: promote is held to it.
		boot := window.Boot{Kernel: c.Host.Kernel, ID: c.Host.BootID}
		if len(problems) > 0 {
			if err := s.Rec().FailOn(round.StepGPUAcceptance, in.Node, boot, strings.Join(problems, "; ")); err != nil {
				problems = append(problems, "the failure could not be recorded in the journal: "+err.Error())
			}
			out.Result = Result{Status: StatusFailed, Reasons: problems,
				NextAction: "Stop: GPU acceptance failed on the new kernel (the old kernel is still the default). Tell a person; they sign resume (after fixing) or abort."}
			return out, nil
		}
		if err := s.Rec().FinishOn(round.StepGPUAcceptance, in.Node, boot, strings.Join(notes, "; ")); err != nil {
			return out, err
		}
		out.Reasons = window.GPUAccepted(c, notes)
		out.NextAction = "promote_kernel this node next."
		out.NextCall = CallTo("promote_kernel", "node", in.Node)
		return out, nil
	})
}
