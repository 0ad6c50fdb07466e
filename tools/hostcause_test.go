package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
)

// The status rule, one case per status: a blocker turns ok (or unset)
// into failed and leaves every other status as it is.
func TestStatusRule(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  Status
		reasons []string
		want    Status
	}{
		{"ok without blockers", StatusOK, []string{"kernel 6.8.0-45-generic"}, StatusOK},
		{"unset without blockers", "", nil, ""},
		{"ok with a blocker", StatusOK, []string{"fine", Blocker("the upgrade would remove 1 package(s): oldlib")}, StatusFailed},
		{"unset with a blocker", "", []string{Blocker("dpkg was interrupted")}, StatusFailed},
		{"refused stays refused", StatusRefused, []string{Blocker("x")}, StatusRefused},
		{"in progress stays", StatusInProgress, []string{Blocker("x")}, StatusInProgress},
		{"approval stays", StatusApprovalRequired, []string{Blocker("x")}, StatusApprovalRequired},
		{"a reason that only mentions blockers", StatusOK, []string{"no blocker: all clear"}, StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := StatusRule(c.status, c.reasons); got != c.want {
				t.Errorf("StatusRule(%q, %q) = %q, want %q", c.status, c.reasons, got, c.want)
			}
		})
	}
}

// A handler that answers ok with a blocker among its reasons is turned
// into failed by the framework, the one place the rule is applied.
func TestFrameworkAppliesTheStatusRule(t *testing.T) {
	tl := New[NodeIn, InspectOut](Spec{Name: "lying_check", Title: "x", Kind: ReadOnly},
		func(ctx context.Context, d *Deps, in NodeIn, p Progress) (InspectOut, error) {
			return InspectOut{Result: Result{Status: StatusOK, Reasons: []string{Blocker("the upgrade would remove oldlib")}}}, nil
		})
	c := config.DefaultConfig()
	_, res := tl.CallJSON(context.Background(), &Deps{Config: &c}, json.RawMessage(`{"node":"n-1"}`), func(float64, float64, string) {})
	if res.Status != StatusFailed {
		t.Fatalf("status %s, want failed: %+v", res.Status, res)
	}
	if err := StatusRuleHolds(res); err != nil {
		t.Fatal(err)
	}
}

// Every tool's result, called with no cluster, no round and no hosts (the
// host-only CLI's first call), keeps the rule; the fleet rig checks every
// result of every fleet test the same way (fleet.call).
func TestEveryToolKeepsTheStatusRule(t *testing.T) {
	c := config.DefaultConfig()
	d := &Deps{Config: &c}
	for _, tl := range Builtin().All() {
		for _, args := range []string{`{}`, `{"node":"n-1"}`} {
			_, res := tl.CallJSON(context.Background(), d, json.RawMessage(args), func(float64, float64, string) {})
			if err := StatusRuleHolds(res); err != nil {
				t.Errorf("%s %s: %v", tl.Spec().Name, args, err)
			}
		}
	}
}

// Each refusal's next step fits its cause: what the host scripts and the
// SSH layer report, classified, and the step for it.
func TestNextStepForEachCause(t *testing.T) {
	stepErr := func(reason string) error {
		return fmt.Errorf("wrapped: %w", &steps.StepError{Step: "simulate", Node: "solo-1", Status: steps.StatusRefused, Reason: reason})
	}
	for _, c := range []struct {
		name  string
		err   error
		cause HostCause
		next  []string
		not   string
	}{
		{"interrupted dpkg", stepErr("dpkg was interrupted on this node (a package operation stopped half-way); nothing was changed. A person runs 'dpkg --configure -a' as root on the node"),
			CauseDpkgInterrupted, []string{"dpkg --configure -a", "solo-1"}, "reachable"},
		{"lock held", stepErr("dpkg is locked by process 4242 (apt-get full-upgrade) and stayed locked for 5 s; nothing was changed and the holder was left alone"),
			CauseDpkgLocked, []string{"let it finish", "never kill it"}, "reachable"},
		{"/boot short", stepErr("/boot has 336 KiB free, the new kernel(s) 9.9.9-1-generic need about 64 MiB"),
			CauseBootShort, []string{"Free space on /boot of solo-1", "old kernel"}, "reachable"},
		{"removal", stepErr("the upgrade would remove 1 package(s): oldlib"),
			CauseRemoval, []string{"Never run an upgrade that removes packages", "apt-get -s full-upgrade"}, "reachable"},
		{"host key changed", &host.HostKeyError{Node: "solo-1", Host: "10.0.0.5"},
			CauseHostKey, []string{"out of band", "never skip the check"}, "reachable"},
		{"unreachable", errors.New("dial tcp 10.0.0.5:22: connect: connection refused"),
			CauseUnreachable, []string{"solo-1 is reachable over SSH", "address and port"}, "dpkg"},
		{"no sudo", &host.SudoError{Node: "solo-1", User: "ubuntu", Reason: "sudo: a password is required"},
			CauseSudo, []string{"NOPASSWD"}, "reachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := hostCauseOf(c.err); got != c.cause {
				t.Fatalf("cause %q, want %q", got, c.cause)
			}
			err := hostError("solo-1", "simulate upgrade", c.err)
			var f *Failure
			if !errors.As(err, &f) {
				t.Fatalf("%T %v, want a failure", err, err)
			}
			for _, w := range c.next {
				if !strings.Contains(f.NextAction, w) {
					t.Errorf("next %q lacks %q", f.NextAction, w)
				}
			}
			if c.not != "" && strings.Contains(f.NextAction, c.not) {
				t.Errorf("next %q should not speak of %q", f.NextAction, c.not)
			}
		})
	}
}

// What a survey finds is a blocker with its cause, and the next step names
// each cause once.
func TestInspectionHazards(t *testing.T) {
	pid := 4242
	free := int64(336)
	clean := steps.Inspection{Kernel: "6.1.0-28-amd64", KernelPanic: 10, Pending: steps.BuildPlan("")}
	clean.Grub.EnvWritableAtBoot = true
	if hz := inspectionHazards(clean, ""); len(hz) != 0 {
		t.Fatalf("a clean survey has hazards: %+v", hz)
	}
	for _, c := range []struct {
		name   string
		change func(*steps.Inspection)
		cause  HostCause
		reason string
	}{
		{"interrupted", func(i *steps.Inspection) { i.Dpkg.Interrupted, i.Dpkg.FixCommand = true, "dpkg --configure -a" }, CauseDpkgInterrupted, "dpkg was interrupted"},
		{"audit", func(i *steps.Inspection) { i.Dpkg.Audit = "tinyapp half-configured" }, CauseDpkgAudit, "dpkg left packages half-way"},
		{"locked", func(i *steps.Inspection) { i.Dpkg.Lock = &steps.DpkgLock{PID: &pid, Command: "apt-get full-upgrade"} }, CauseDpkgLocked, "process 4242 (apt-get full-upgrade)"},
		{"boot short", func(i *steps.Inspection) {
			i.Boot = steps.BootSpace{Dir: "/boot", FreeKB: &free, NeedKB: 65536, NewKernels: []string{"9.9.9-1-generic"}, Short: true}
		}, CauseBootShort, "/boot has 336 KiB free"},
		{"removal", func(i *steps.Inspection) {
			i.Pending = steps.BuildPlan("Remv oldlib [1.0]\nInst newlib (1.0 lab [all])\n")
		}, CauseRemoval, "would remove 1 package(s): oldlib"},
		{"kernel.panic", func(i *steps.Inspection) { i.KernelPanic = 0 }, CauseBoot, "kernel.panic is 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			insp := clean
			c.change(&insp)
			hz := inspectionHazards(insp, "")
			if len(hz) != 1 || hz[0].cause != c.cause || !strings.Contains(hz[0].reason, c.reason) {
				t.Fatalf("hazards %+v, want one %s with %q", hz, c.cause, c.reason)
			}
			if r := blockerReasons(hz); StatusRule(StatusOK, r) != StatusFailed {
				t.Errorf("reasons %q keep an ok status", r)
			}
			if next := nextForHazards("solo-1", append(hz, hz...)); next != NextStepFor(c.cause, "solo-1") {
				t.Errorf("next %q, want the cause's step once", next)
			}
		})
	}
}

func TestSizeKB(t *testing.T) {
	for kb, want := range map[int64]string{0: "0 KiB", 336: "336 KiB", 1023: "1023 KiB", 1024: "1 MiB", 65536: "64 MiB"} {
		if got := steps.SizeKB(kb); got != want {
			t.Errorf("SizeKB(%d) = %q, want %q", kb, got, want)
		}
	}
}
