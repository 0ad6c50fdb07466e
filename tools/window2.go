package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/round"
)

// pickEntry finds the non-recovery GRUB entry booting kernel, preferring
// the one inside the "Advanced options" submenu (its id carries the
// submenu path, as grub-reboot needs it).
func pickEntry(entries []parse.GrubEntry, kernel string) (parse.GrubEntry, bool) {
	var found []parse.GrubEntry
	for _, e := range entries {
		if e.Kernel == kernel && !e.Recovery {
			found = append(found, e)
		}
	}
	if len(found) == 0 {
		return parse.GrubEntry{}, false
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].Submenu != "" && found[j].Submenu == "" })
	return found[0], true
}

// ---- trial_boot ----

// TrialBootOut is where the trial boot stands.
type TrialBootOut struct {
	Result
	TrialBoot *steps.TrialBoot `json:"trial_boot,omitempty"`
}

// TrialBootIn is the node to trial-boot.
type TrialBootIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"the node whose new kernel boots once"`
}

// TrialBoot is the trial_boot tool.
func TrialBoot() Tool {
	wait := func(ctx context.Context, d *Deps, s *session, node string) (TrialBootOut, error) {
		h, err := d.hosts(ctx)
		if err != nil {
			return TrialBootOut{}, err
		}
		run := s.stepRun(round.StepTrialBoot, node)
		started := run.Attempts[len(run.Attempts)-1].Started
		h.Pool.Forget(node)
		tb, err := h.Steps.TrialBootStatus(ctx, node, s.id)
		out := TrialBootOut{TrialBoot: &tb}
		if errors.Is(err, steps.ErrRefused) && tb.RebootRequestedAt == "" {
			// The process that started the step stopped before it prepared
			// the trial boot: nothing was prepared, so prepare now from the
			// recorded entries, then request the reboot.
			np, _ := s.nodePlan(d, node)
			if _, err := h.Steps.TrialBootPrepare(ctx, node, steps.TrialBootInput{Round: s.id, OldEntry: np.OldEntry, NewEntry: np.NewEntry, PanicSeconds: panicSeconds(s)}); err != nil {
				_ = s.fail(round.StepTrialBoot, node, "prepare (resumed): "+err.Error())
				return out, Fail("Stop: the trial boot could not be prepared; the node was not rebooted. Tell a person.", "prepare trial boot on "+node+": "+err.Error())
			}
			if _, err := h.Steps.TrialBootReboot(ctx, node, s.id); err != nil {
				return out, hostError(node, "request the trial reboot", err)
			}
			out.Result = Result{Status: StatusInProgress, Reasons: []string{node + ": trial boot prepared and reboot requested (resumed)"},
				NextAction: "Call trial_boot again with the same node in a little while."}
			return out, nil
		}
		if err != nil {
			if waited := d.now().Sub(started); waited > d.Config.SSH.RebootTimeout.D() {
				why := fmt.Sprintf("%s has not come back %s after its trial reboot (%v): it may hang at boot", node, waited.Round(time.Second), err)
				_ = s.fail(round.StepTrialBoot, node, why)
				return out, Fail("Stop: a person needs out-of-band console access (BMC/IPMI) to see the node; the old kernel is the default, so a power cycle boots it.", why)
			}
			out.Result = Result{Status: StatusInProgress, Reasons: []string{node + " is rebooting (not reachable yet: " + err.Error() + ")"},
				NextAction: "Call trial_boot again with the same node in a little while."}
			return out, nil
		}
		if !tb.Rebooted {
			if tb.RebootRequestedAt == "" {
				// The process that started the step stopped before the
				// reboot was requested: finish what it began, from the
				// entries it recorded (prepare is idempotent).
				np, _ := s.nodePlan(d, node)
				if tb.NextEntry == "" {
					if _, err := h.Steps.TrialBootPrepare(ctx, node, steps.TrialBootInput{Round: s.id, OldEntry: np.OldEntry, NewEntry: np.NewEntry, PanicSeconds: panicSeconds(s)}); err != nil {
						_ = s.fail(round.StepTrialBoot, node, "prepare (resumed): "+err.Error())
						return out, Fail("Stop: the trial boot could not be prepared; the node was not rebooted. Tell a person.", "prepare trial boot on "+node+": "+err.Error())
					}
				}
				if tb2, err := h.Steps.TrialBootReboot(ctx, node, s.id); err == nil {
					tb = tb2
				} else {
					return out, hostError(node, "request the trial reboot", err)
				}
			}
			out.Result = Result{Status: StatusInProgress, Reasons: []string{node + " has not rebooted yet (same boot_id)"},
				NextAction: "Call trial_boot again with the same node in a little while."}
			return out, nil
		}
		switch tb.Outcome {
		case steps.OutcomeNewKernel:
			if err := s.finish(round.StepTrialBoot, node, tb.Kernel, "booted "+tb.Kernel+" once (old kernel still default)"); err != nil {
				return out, err
			}
			out.Reasons = []string{fmt.Sprintf("%s rebooted (boot_id %s) into the new kernel %s; the old kernel is still the default", node, tb.BootID, tb.Kernel)}
			out.NextAction = "verify_node this node next."
			return out, nil
		case steps.OutcomeFellBack:
			why := fmt.Sprintf("%s came back on the OLD kernel %s: the trial kernel %s did not come up and GRUB fell back to the default", node, tb.Kernel, tb.NewKernel)
			_ = s.fail(round.StepTrialBoot, node, why)
			return out, Fail("Stop the round: the new kernel does not boot here. The node runs the old kernel; tell a person (kernel logs, pstore) and let them sign abort or resume.", why)
		}
		why := fmt.Sprintf("%s booted %s, which is neither the trial kernel %s nor the old one", node, tb.Kernel, tb.NewKernel)
		_ = s.fail(round.StepTrialBoot, node, why)
		return out, Fail("Stop and tell a person: the node booted an unexpected kernel.", why)
	}
	return NewDestructive[TrialBootIn, TrialBootOut](Spec{
		Name:  "trial_boot",
		Title: "Trial-boot the new kernel",
		Description: "Boot the new kernel once through GRUB while the old one stays the default: GRUB_DEFAULT=<old entry id> in " +
			"/etc/default/grub.d/99-trial-boot.cfg (with panic=N on the kernel command line), update-grub, grub-reboot <new entry id>, " +
			"reboot. Refuses where grubenv cannot be written at boot (mdraid, LVM, btrfs, zfs) or kernel.panic is 0. Answers " +
			"in_progress: call again with the same node until it reports the booted kernel: the new one means the trial booted, " +
			"the old one means GRUB fell back (the round stops).",
		Idempotent: false, OpenWorld: true,
	}, Steps[TrialBootIn, TrialBootOut]{
		Reenter: func(ctx context.Context, d *Deps, in TrialBootIn, p Progress) (TrialBootOut, bool, error) {
			if err := ValidNode(in.Node); err != nil {
				return TrialBootOut{}, true, err
			}
			s, err := d.openSession()
			if err != nil {
				return TrialBootOut{}, true, err
			}
			if !s.inFlight(round.StepTrialBoot, in.Node) {
				return TrialBootOut{}, false, nil
			}
			out, err := wait(ctx, d, s, in.Node)
			return out, true, err
		},
		Plan: func(ctx context.Context, d *Deps, in TrialBootIn) (Plan, error) {
			s, err := d.openSession()
			if err != nil {
				return Plan{}, err
			}
			if err := s.admit(d, round.StepTrialBoot, in.Node); err != nil {
				return Plan{}, err
			}
			np, ok := s.nodePlan(d, in.Node)
			if !ok || np.TargetKernel == "" {
				return Plan{}, Refuse("Run simulate_upgrade first: it names the target kernel.", "no target kernel is recorded for "+in.Node)
			}
			h, err := d.hosts(ctx)
			if err != nil {
				return Plan{}, err
			}
			insp, err := h.Steps.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: np.TargetKernel})
			if err != nil {
				return Plan{}, hostError(in.Node, "inspect before the trial boot", err)
			}
			var problems []string
			oldE, okOld := pickEntry(insp.Grub.Entries, insp.Kernel)
			newE, okNew := pickEntry(insp.Grub.Entries, np.TargetKernel)
			if !okOld {
				problems = append(problems, "no GRUB entry boots the running kernel "+insp.Kernel)
			}
			if !okNew {
				problems = append(problems, "no GRUB entry boots the new kernel "+np.TargetKernel+" (did install finish and update-grub run?)")
			}
			if !insp.Grub.EnvWritableAtBoot {
				problems = append(problems, "grubenv cannot be written at boot ("+strings.Join(insp.Grub.Reasons, "; ")+"): the one-shot boot is not reliable here")
			}
			if insp.KernelPanic <= 0 {
				problems = append(problems, "kernel.panic is 0: a panicking trial kernel would hang instead of falling back")
			}
			n := s.j.State().Node(in.Node)
			if n != nil && n.GPU && !insp.TargetModules.Present {
				problems = append(problems, "no NVIDIA kernel modules for "+np.TargetKernel+" (linux-modules-nvidia or DKMS): the GPUs would be lost on the new kernel")
			}
			if insp.Kernel == np.TargetKernel {
				problems = append(problems, in.Node+" already runs the target kernel "+np.TargetKernel)
			}
			if len(problems) > 0 {
				if err := s.start(round.StepTrialBoot, in.Node, ""); err == nil {
					_ = s.fail(round.StepTrialBoot, in.Node, strings.Join(problems, "; "))
				}
				return Plan{}, Fail("Stop: the trial boot is not safe on this node. Tell a person; they fix it and sign resume, or abort.", problems...)
			}
			panicSecs := 10
			if k := s.settings.Kernel; k != nil && k.PanicRebootSeconds > 0 {
				panicSecs = k.PanicRebootSeconds
			}
			np.OldEntry, np.NewEntry = oldE.ID, newE.ID
			if err := s.saveNodePlan(d, np); err != nil {
				return Plan{}, err
			}
			summary := []string{
				fmt.Sprintf("reboot %s once into %s (GRUB entry %s)", in.Node, np.TargetKernel, newE.ID),
				fmt.Sprintf("the default stays %s (GRUB entry %s) through a drop-in; panic=%d on the kernel command line", insp.Kernel, oldE.ID, panicSecs),
				fmt.Sprintf("current boot_id %s", insp.BootID),
			}
			return Plan{Node: in.Node, Round: s.id, Summary: summary,
				Digest: digestOf("trial_boot", in.Node, insp.Kernel, oldE.ID, np.TargetKernel, newE.ID, fmt.Sprint(panicSecs))}, nil
		},
		Do: func(ctx context.Context, d *Deps, in TrialBootIn, plan Plan, a Approved, p Progress) (TrialBootOut, error) {
			s, err := d.openSession()
			if err != nil {
				return TrialBootOut{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			h, err := d.hosts(ctx)
			if err != nil {
				return TrialBootOut{}, err
			}
			panicSecs := 10
			if k := s.settings.Kernel; k != nil && k.PanicRebootSeconds > 0 {
				panicSecs = k.PanicRebootSeconds
			}
			if err := s.start(round.StepTrialBoot, in.Node, a.ID); err != nil {
				return TrialBootOut{}, err
			}
			tb, err := h.Steps.TrialBootPrepare(ctx, in.Node, steps.TrialBootInput{Round: s.id, OldEntry: np.OldEntry, NewEntry: np.NewEntry, PanicSeconds: panicSecs})
			if err != nil {
				_ = s.fail(round.StepTrialBoot, in.Node, "prepare: "+err.Error())
				return TrialBootOut{TrialBoot: &tb}, Fail("Stop: the trial boot could not be prepared; the node was not rebooted. Tell a person.", "prepare trial boot on "+in.Node+": "+err.Error())
			}
			p(1, 3, "prepared: next_entry="+tb.NextEntry)
			rb, err := h.Steps.TrialBootReboot(ctx, in.Node, s.id)
			if err != nil {
				return TrialBootOut{TrialBoot: &tb}, Fail("Call trial_boot again: it checks whether the node rebooted before doing anything.", "request the reboot of "+in.Node+": "+err.Error())
			}
			p(2, 3, "reboot requested")
			reasons := []string{fmt.Sprintf("%s will boot %s once (next_entry %s); default stays %s", in.Node, np.TargetKernel, tb.NextEntry, np.OldEntry)}
			if !tb.WatchdogArmed {
				reasons = append(reasons, "no hardware watchdog is armed (RuntimeWatchdogSec): a hang at boot is not covered and needs console access")
			}
			return TrialBootOut{TrialBoot: &rb, Result: Result{Status: StatusInProgress, Reasons: reasons,
				NextAction: "Call trial_boot again with the same node to follow the reboot."}}, nil
		},
	})
}

func panicSeconds(s *session) int {
	if k := s.settings.Kernel; k != nil && k.PanicRebootSeconds > 0 {
		return k.PanicRebootSeconds
	}
	return 10
}

// ---- uncordon_node ----

// UncordonOut says what happened.
type UncordonOut struct {
	Result
	Uncordon *drain.UncordonResult `json:"uncordon,omitempty"`
}

// UncordonNode is the uncordon_node tool.
func UncordonNode() Tool {
	return New[NodeIn, UncordonOut](Spec{
		Name:  "uncordon_node",
		Title: "Uncordon a node",
		Description: "Make the node schedulable again, only if this round cordoned it (recorded on the node); a node cordoned by " +
			"someone else is refused. Allowed after verify_node is green on the new kernel; needed before gpu_acceptance.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (UncordonOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return UncordonOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return UncordonOut{}, err
		}
		resumed := s.inFlight(round.StepUncordon, in.Node)
		if !resumed {
			if err := s.admit(d, round.StepUncordon, in.Node); err != nil {
				return UncordonOut{}, err
			}
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return UncordonOut{}, err
		}
		st, err := drain.ReadState(ctx, kc.Kube, in.Node)
		if err != nil {
			return UncordonOut{}, Fail("Check the node name and the API server.", "read the cordon of "+in.Node+": "+err.Error())
		}
		if resumed && !st.Unschedulable {
			// Uncordoned before the process that did it stopped.
			if err := s.finish(round.StepUncordon, in.Node, "", "found uncordoned (resumed)"); err != nil {
				return UncordonOut{}, err
			}
			return UncordonOut{Result: Result{Reasons: []string{in.Node + " is schedulable again"}, NextAction: "Call round_status for the next step."}}, nil
		}
		if st.Owner == nil || st.Owner.Identity != d.Identity {
			return UncordonOut{}, Refuse("Leave it: only the person or tool that cordoned the node may uncordon it.",
				fmt.Sprintf("%s was not cordoned by this server (%s)", in.Node, st.Describe()), "nothing was changed")
		}
		if err := s.begin(round.StepUncordon, in.Node, ""); err != nil {
			return UncordonOut{}, err
		}
		res, err := drain.Uncordon(ctx, kc.Kube, in.Node, d.Identity)
		if err != nil {
			_ = s.fail(round.StepUncordon, in.Node, err.Error())
			return UncordonOut{Uncordon: &res}, Fail("Tell a person: the node could not be uncordoned.", "uncordon "+in.Node+": "+err.Error())
		}
		if err := s.finish(round.StepUncordon, in.Node, "", ""); err != nil {
			return UncordonOut{}, err
		}
		next := "promote_kernel this node next."
		if n := s.j.State().Node(in.Node); n != nil && n.GPU {
			next = "gpu_acceptance this node next."
		}
		return UncordonOut{Uncordon: &res, Result: Result{Reasons: []string{in.Node + " is schedulable again"}, NextAction: next}}, nil
	})
}

// ---- gpu_acceptance ----

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
		Description: "Prove a GPU server works on its new kernel: the NVIDIA driver is loaded and `nvidia-smi -q -x` shows every GPU " +
			"healthy (count as the intent says), Fabric Manager is active on NVSwitch systems; a smoke pod requesting nvidia.com/gpu " +
			"runs on the node (when no GPU is free that is reported as no capacity, not a regression); and a real completion comes " +
			"back from the model endpoint named in the intent. Starts and deletes a pod.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (GPUAcceptanceOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return GPUAcceptanceOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		if !s.inFlight(round.StepGPUAcceptance, in.Node) {
			if err := s.admit(d, round.StepGPUAcceptance, in.Node); err != nil {
				return GPUAcceptanceOut{}, err
			}
		}
		g := s.settings.GPU
		if g == nil {
			return GPUAcceptanceOut{}, Refuse("Add the gpu section to the gpu-fleet component's settings.yaml.", "the intent has no gpu settings (expected GPUs, model endpoint)")
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return GPUAcceptanceOut{}, err
		}
		if err := s.begin(round.StepGPUAcceptance, in.Node, ""); err != nil {
			return GPUAcceptanceOut{}, err
		}
		out := GPUAcceptanceOut{}
		var problems, notes []string
		fm := ""
		if g.FabricManagerRequired {
			fm = "required"
		}
		p(0, 3, "host checks")
		hc, err := h.Steps.GPUCheck(ctx, in.Node, steps.GPUCheckInput{ExpectedGPUs: g.ExpectedGPUsPerServer, FabricManager: fm})
		out.Host = &hc
		if err != nil {
			problems = append(problems, "host GPU check: "+err.Error())
		} else if !hc.Passed {
			problems = append(problems, hc.Problems...)
		}
		p(1, 3, "smoke pod")
		smoke, err := gpucheck.SmokePod(ctx, kc.Kube, in.Node, gpucheck.SmokeOptions{Image: d.Config.Kube.SmokeImage, Timeout: 5 * time.Minute, PollInterval: 250 * time.Millisecond, Logger: d.Log})
		out.Smoke = &smoke
		switch {
		case err != nil:
			problems = append(problems, "smoke pod: "+err.Error())
		case smoke.Status == "no_capacity":
			notes = append(notes, "smoke pod: "+smoke.Message)
		case smoke.Status != "ok":
			problems = append(problems, "smoke pod: "+smoke.Message)
		}
		p(2, 3, "model completion")
		me := g.ModelEndpoint
		base, api := splitModelURL(me.URL)
		comp, err := gpucheck.Complete(ctx, gpucheck.CompletionRequest{Endpoint: base, API: api, Model: me.Model, Prompt: me.Prompt,
			MaxTokens: me.MaxTokens, Timeout: time.Duration(max(me.TimeoutSeconds, 1)) * time.Second})
		out.Completion = &comp
		if err != nil {
			problems = append(problems, "model completion: "+err.Error())
		} else if !comp.OK {
			problems = append(problems, "model completion: "+comp.Reason)
		}
		if len(problems) > 0 {
			_ = s.fail(round.StepGPUAcceptance, in.Node, strings.Join(problems, "; "))
			out.Result = Result{Status: StatusFailed, Reasons: problems,
				NextAction: "Stop: GPU acceptance failed on the new kernel (the old kernel is still the default). Tell a person; they sign resume (after fixing) or abort."}
			return out, nil
		}
		if err := s.finish(round.StepGPUAcceptance, in.Node, "", strings.Join(notes, "; ")); err != nil {
			return out, err
		}
		out.Reasons = append(notes, fmt.Sprintf("%d GPUs healthy, driver %s; completion answered in %s", hc.GPUCount, hc.DriverVersion, comp.Latency.Round(time.Millisecond)))
		out.NextAction = "promote_kernel this node next."
		return out, nil
	})
}

// splitModelURL accepts the intent's model URL with or without its route:
// ".../v1/completions" and ".../v1/chat/completions" name the API to use,
// a base URL leaves the choice to the check.
func splitModelURL(u string) (base, api string) {
	u = strings.TrimSuffix(u, "/")
	switch {
	case strings.HasSuffix(u, "/"+gpucheck.APIChat):
		return strings.TrimSuffix(u, "/"+gpucheck.APIChat), gpucheck.APIChat
	case strings.HasSuffix(u, "/"+gpucheck.APICompletions):
		return strings.TrimSuffix(u, "/"+gpucheck.APICompletions), gpucheck.APICompletions
	}
	return u, ""
}

// ---- promote_kernel ----

// PromoteOut says what GRUB boots next.
type PromoteOut struct {
	Result
	Promote *steps.PromoteResult `json:"promote,omitempty"`
}

// PromoteIn is the node to promote.
type PromoteIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"the node whose new kernel becomes the default"`
}

// PromoteKernel is the promote_kernel tool.
func PromoteKernel() Tool {
	return NewDestructive[PromoteIn, PromoteOut](Spec{
		Name:  "promote_kernel",
		Title: "Make the new kernel the default",
		Description: "Remove the trial-boot drop-in and run update-grub so the new kernel becomes GRUB's default, then confirm it. " +
			"Only after verify_node (and gpu_acceptance on GPU servers) is green on the new kernel.",
		Idempotent: true, OpenWorld: true,
	}, Steps[PromoteIn, PromoteOut]{
		Reenter: func(ctx context.Context, d *Deps, in PromoteIn, p Progress) (PromoteOut, bool, error) {
			if err := ValidNode(in.Node); err != nil {
				return PromoteOut{}, true, err
			}
			s, err := d.openSession()
			if err != nil {
				return PromoteOut{}, true, err
			}
			if !s.inFlight(round.StepPromote, in.Node) {
				return PromoteOut{}, false, nil
			}
			out, err := promote(ctx, d, s, in.Node)
			return out, true, err
		},
		Plan: func(ctx context.Context, d *Deps, in PromoteIn) (Plan, error) {
			if err := ValidNode(in.Node); err != nil {
				return Plan{}, err
			}
			s, err := d.openSession()
			if err != nil {
				return Plan{}, err
			}
			if err := s.admit(d, round.StepPromote, in.Node); err != nil {
				return Plan{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			return Plan{Node: in.Node, Round: s.id,
				Digest:  digestOf("promote_kernel", in.Node, np.TargetKernel, np.NewEntry),
				Summary: []string{fmt.Sprintf("make %s the default kernel of %s (remove the trial-boot drop-in, update-grub)", np.TargetKernel, in.Node)}}, nil
		},
		Do: func(ctx context.Context, d *Deps, in PromoteIn, plan Plan, a Approved, p Progress) (PromoteOut, error) {
			s, err := d.openSession()
			if err != nil {
				return PromoteOut{}, err
			}
			if err := s.start(round.StepPromote, in.Node, a.ID); err != nil {
				return PromoteOut{}, err
			}
			return promote(ctx, d, s, in.Node)
		},
	})
}

// promote makes the new kernel the default (idempotent) and records it.
func promote(ctx context.Context, d *Deps, s *session, node string) (PromoteOut, error) {
	np, _ := s.nodePlan(d, node)
	h, err := d.hosts(ctx)
	if err != nil {
		return PromoteOut{}, err
	}
	res, err := h.Steps.Promote(ctx, node, s.id, np.TargetKernel)
	if err != nil || !res.Promoted {
		why := fmt.Sprintf("promote on %s: default is now %q (%s), want %s", node, res.NextBootKernel, res.NextBootEntry, np.TargetKernel)
		if err != nil {
			why = "promote on " + node + ": " + err.Error()
		}
		_ = s.fail(round.StepPromote, node, why)
		return PromoteOut{Promote: &res}, Fail("Stop and tell a person: GRUB's default is not what it should be.", why)
	}
	if err := s.finish(round.StepPromote, node, "", "default is "+res.NextBootKernel); err != nil {
		return PromoteOut{}, err
	}
	return PromoteOut{Promote: &res, Result: Result{Reasons: []string{node + " boots " + res.NextBootKernel + " by default now"},
		NextAction: "check_gate with this node: the next node's drain waits for it to be green."}}, nil
}

// ---- check_gate ----

// GateIn optionally names the node whose window the gate closes.
type GateIn struct {
	Node string `json:"node,omitempty" jsonschema:"the node whose window this gate closes; omit for a look at the cluster only"`
}

// GateOut is the gate, each check with its evidence.
type GateOut struct {
	Result
	Gate *gate.Report `json:"gate,omitempty"`
}

const baselineFile = "baseline.json"

func (d *Deps) gateConfig(ctx context.Context, s *session) (gate.Config, error) {
	cfg := gate.Config{}
	if s.settings.StackHealth != nil {
		cfg.Health.CriticalNamespaces = s.settings.StackHealth.CriticalNamespaces
	}
	if b, err := d.Book.ReadFile(s.id, baselineFile); err == nil {
		var base gate.Baseline
		if err := json.Unmarshal(b, &base); err != nil {
			return cfg, fmt.Errorf("read the round's baseline: %w", err)
		}
		cfg.Baseline = &base
	}
	if pg := s.settings.Postgres; pg != nil {
		cfg.Postgres = gate.PostgresConfig{Namespaces: []string{pg.Namespace}, RequireClusters: true}
	}
	if k := d.Config.Kube; len(k.EtcdEndpoints) > 0 {
		ec := &gate.EtcdConfig{Endpoints: k.EtcdEndpoints, CAFile: k.EtcdCA, CertFile: k.EtcdCert, KeyFile: k.EtcdKey}
		if k.EtcdTunnel {
			h, err := d.hosts(ctx)
			if err != nil {
				return cfg, err
			}
			ec.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				host, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				return h.Pool.Dial(ctx, host, "tcp", net.JoinHostPort("127.0.0.1", port))
			}
		}
		cfg.Etcd = ec
	}
	cfg.OIDC = gate.OIDCConfig{PodNamespace: "kube-system", PodSelector: "component=kube-apiserver"}
	if f := d.Config.Kube.OIDCCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return cfg, fmt.Errorf("kube.oidc_ca_file: %w", err)
		}
		cfg.OIDC.CAPEM = pem
	}
	cfg.FailingVerify = d.failingVerify(ctx)
	return cfg, nil
}

// failingVerify runs every component's verify.sh and names those failing.
func (d *Deps) failingVerify(ctx context.Context) []string {
	if d.Intent == nil {
		return nil
	}
	r, err := d.Intent("")
	if err != nil {
		return nil
	}
	cs, err := r.Components()
	if err != nil {
		return nil
	}
	var failing []string
	for _, c := range cs {
		if !c.HasVerify {
			continue
		}
		v, err := r.RunVerify(ctx, c.Name, 2*time.Minute, d.VerifyEnv)
		if err != nil || !v.Passed {
			failing = append(failing, c.Name)
		}
	}
	return failing
}

// CheckGate is the check_gate tool.
func CheckGate() Tool {
	return New[GateIn, GateOut](Spec{
		Name:  "check_gate",
		Title: "Check the gate",
		Description: "Decide whether the next cordon may start: etcd has quorum and a leader (every member's status); every " +
			"CloudNativePG cluster is ready with no switchover in progress; every admission webhook's Deployment is at full ready " +
			"replicas; stack health shows no NEW failure against the baseline taken at round start; the API server's OIDC issuer " +
			"answers discovery. Each check is reported with its evidence. With a node whose kernel was promoted, a green gate " +
			"closes that node's window; a gate that stays red past the settle time stops the round.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in GateIn, p Progress) (GateOut, error) {
		if in.Node != "" {
			if err := ValidNode(in.Node); err != nil {
				return GateOut{}, err
			}
		}
		s, err := d.openSession()
		if err != nil {
			return GateOut{}, err
		}
		if in.Node != "" {
			if err := s.admit(d, round.StepGate, in.Node); err != nil {
				return GateOut{}, err
			}
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return GateOut{}, err
		}
		cfg, err := d.gateConfig(ctx, s)
		if err != nil {
			return GateOut{}, err
		}
		var accepted []string
		if in.Node != "" && cfg.Baseline != nil {
			if r := s.stepRun(round.StepTrialBoot, in.Node); r != nil && r.Green() {
				if accepted, err = gate.AcceptRebootRestarts(ctx, kc.Kube, cfg.Baseline, in.Node); err != nil {
					return GateOut{}, Fail("Check the API server and call again.", err.Error())
				}
				if len(accepted) > 0 {
					// Keep them accepted for the later gates of the round.
					b, _ := json.MarshalIndent(cfg.Baseline, "", "  ")
					if err := d.Book.WriteFile(s.id, baselineFile, append(b, '\n')); err != nil {
						return GateOut{}, fmt.Errorf("update the baseline: %w", err)
					}
				}
			}
		}
		rep := gate.Evaluate(ctx, kc.Kube, kc.Dynamic, cfg)
		for i, c := range rep.Checks {
			if c.Name == gate.NameBaseline && len(accepted) > 0 {
				rep.Checks[i].Evidence = append(rep.Checks[i].Evidence, "expected with the reboot, not counted: "+strings.Join(accepted, "; "))
			}
		}
		// An etcd member down keeps quorum, but the next control-plane
		// reboot would lose it: the gate is red until every member answers.
		for i, c := range rep.Checks {
			if c.Name == gate.NameEtcd && c.OK && len(c.Warnings) > 0 {
				rep.Checks[i].OK = false
				rep.Checks[i].Reason = "an etcd member is not healthy (" + strings.Join(c.Warnings, "; ") + "): quorum holds now, but the next control-plane reboot would lose it"
				rep.OK = false
				rep.Failed = append(rep.Failed, c.Name)
			}
		}
		out := GateOut{Gate: &rep}
		var reasons []string
		for _, c := range rep.Checks {
			if !c.OK {
				reasons = append(reasons, c.Name+": "+c.Reason)
			}
			for _, w := range c.Warnings {
				reasons = append(reasons, c.Name+" (warning): "+w)
			}
		}
		if in.Node == "" {
			out.Reasons = reasons
			if !rep.OK {
				out.Status = StatusFailed
				out.NextAction = "Do not cordon anything until the gate is green."
			} else {
				out.NextAction = "The cluster is healthy."
			}
			return out, nil
		}
		n := s.j.State().Node(in.Node)
		promoted := n != nil && n.Steps[round.StepPromote].Green()
		if rep.OK {
			if err := s.check(round.StepGate, in.Node, true, "", "gate green"); err != nil {
				return out, err
			}
			out.Reasons = append([]string{"gate green"}, reasons...)
			out.NextAction = "The next node may start (round_status names it)."
			if promoted {
				if st := s.j.State().Node(in.Node); st != nil && st.Window == round.WindowClosed {
					d.releaseWindow(ctx, kc, s.id, in.Node)
					if c, err := d.commitRound(ctx, s, "window of "+in.Node+" closed"); err != nil {
						out.Reasons = append(out.Reasons, "the round record was not committed: "+err.Error())
					} else {
						out.Reasons = append(out.Reasons, fmt.Sprintf("window of %s closed; round record committed (%s)", in.Node, short(c)))
					}
				}
			}
			return out, nil
		}
		// Red: wait within the settle time, then stop the round.
		np, _ := s.nodePlan(d, in.Node)
		first := np.GateRedSince
		if first.IsZero() {
			np.Node, np.GateRedSince = in.Node, d.now()
			_ = s.saveNodePlan(d, np)
			first = np.GateRedSince
		}
		if d.now().Sub(first) < d.Config.Kube.GateSettle.D() {
			out.Result = Result{Status: StatusInProgress, Reasons: reasons,
				NextAction: fmt.Sprintf("Wait and call check_gate again (the gate may settle until %s).", first.Add(d.Config.Kube.GateSettle.D()).UTC().Format(time.RFC3339))}
			return out, nil
		}
		if err := s.check(round.StepGate, in.Node, false, "", strings.Join(reasons, "; ")); err != nil {
			return out, err
		}
		out.Result = Result{Status: StatusFailed, Reasons: reasons,
			NextAction: "Stop: the gate stayed red. Tell a person what failed; nothing else is cordoned until they sign resume or abort."}
		return out, nil
	})
}
