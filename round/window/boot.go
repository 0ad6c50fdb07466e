package window

import (
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/round"
)

// Boot is one boot of a node as a step saw it: the running kernel and
// /proc/sys/kernel/random/boot_id. The trial boot records the boot it
// proved; the checks record the boot they ran on; a step that depends on
// their outcome holds the host, observed now, to that same boot.
type Boot struct {
	Kernel string `json:"kernel"`
	ID     string `json:"boot_id"`
}

func (b Boot) String() string {
	return fmt.Sprintf("%s (boot id %s)", orUnknown(b.Kernel), orUnknown(b.ID))
}

// BootOf is the boot a step's last attempt recorded when it ended; zero
// when it recorded none.
func BootOf(run *round.StepRun) Boot {
	a := run.Last()
	if a == nil {
		return Boot{}
	}
	return Boot{Kernel: a.Kernel, ID: a.BootID}
}

// ObserveBoot reads the node's running kernel and boot id now.
func (w *Window) ObserveBoot(ctx context.Context, node string) (Boot, error) {
	k, err := w.Host.Kernel(ctx, node)
	if err != nil {
		return Boot{}, &HostError{Node: node, Action: "read the running kernel and boot id", Err: err}
	}
	return Boot{Kernel: k.Kernel, ID: k.BootID}, nil
}

// Checked is a check a later step needs green on the trial boot's boot.
type Checked struct {
	Step round.Step
	Run  *round.StepRun
	// Tool is what records the check again ("record_verification").
	Tool string
}

// DecideOnTrialBoot is the rule of every step that depends on the trial
// boot's outcome (uncordon, promote): node, observed now, still runs the
// boot its trial boot proved (the same boot id, the trial kernel), and
// each check was recorded green on that boot. The journal says what the
// server saw; only the host says what runs now, so a host that fell back
// to the old kernel, or booted again since its checks, is refused
// whatever the journal holds. It returns the trial boot, or a refusal
// naming what was observed against what was expected.
func DecideOnTrialBoot(node string, trial *round.StepRun, now Boot, checks ...Checked) (Boot, error) {
	if !trial.Green() {
		return Boot{}, refuse("trial_boot this node first.", "no green trial boot of "+node+" this round", "nothing was executed")
	}
	tb := BootOf(trial)
	if tb.ID == "" || tb.Kernel == "" {
		return Boot{}, refuse("Tell a person: the node's trial boot must be proven again (rollback_node, then trial_boot).",
			"the trial boot of "+node+" recorded no boot (kernel and boot id) when it finished: there is nothing to hold the host to",
			"nothing was executed")
	}
	if now.Kernel != tb.Kernel {
		return tb, refuse("Stop and tell a person: the node does not run its trial kernel; round_status and the node's boot logs say why.",
			fmt.Sprintf("%s runs %s now, not the trial kernel %s its trial boot proved (boot id %s): it fell back to another kernel or booted again since",
				node, now, tb.Kernel, tb.ID),
			"nothing was executed")
	}
	if now.ID != tb.ID {
		return tb, refuse("Stop and tell a person: the node booted again after its trial boot, so its trial boot and checks do not speak for the boot running now.",
			fmt.Sprintf("%s runs boot id %s now, not %s, the boot its trial boot proved on %s", node, orUnknown(now.ID), tb.ID, tb.Kernel),
			"nothing was executed")
	}
	for _, c := range checks {
		seen := BootOf(c.Run)
		if c.Run.Green() && seen.ID == tb.ID {
			continue
		}
		what := "none is recorded"
		switch {
		case c.Run == nil || len(c.Run.Attempts) == 0:
		case !c.Run.Green():
			what = "the last one is " + string(c.Run.State)
		case seen.ID == "":
			what = "the green one recorded no boot id"
		default:
			what = "the green one ran on boot id " + seen.ID
		}
		return tb, refuse(fmt.Sprintf("Call %s for %s: it checks the boot running now and records it.", c.Tool, node),
			fmt.Sprintf("no green %s of %s on its trial boot (boot id %s): %s", c.Step, node, tb.ID, what),
			"nothing was executed")
	}
	return tb, nil
}
