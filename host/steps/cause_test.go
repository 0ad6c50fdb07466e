package steps

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/host"
)

// Each refusal's next step fits its cause: what the host scripts and the
// SSH layer report, classified, and the step for it.
func TestNextStepForEachCause(t *testing.T) {
	stepErr := func(reason string) error {
		return fmt.Errorf("wrapped: %w", &StepError{Step: "simulate", Node: "solo-1", Status: StatusRefused, Reason: reason})
	}
	for _, c := range []struct {
		name  string
		err   error
		cause Cause
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
		{"held packages", stepErr("Kubernetes packages would move: kubelet"),
			CausePackages, []string{"apt-mark hold"}, "reachable"},
		{"host key changed", &host.HostKeyError{Node: "solo-1", Host: "10.0.0.5"},
			CauseHostKey, []string{"out of band", "never skip the check"}, "reachable"},
		{"unreachable", errors.New("dial tcp 10.0.0.5:22: connect: connection refused"),
			CauseUnreachable, []string{"solo-1 is reachable over SSH", "address and port"}, "dpkg"},
		{"no key", fmt.Errorf("connect to node solo-1: %w", &host.NoKeyError{Node: "solo-1", Tried: []string{"/root/.ssh/id_ed25519 (not found)"}}),
			CauseNoKey, []string{"SSH key for solo-1", "~/.ssh/id_ed25519", "ssh-agent", "ssh.key_files", "IdentityFile", "doctor"}, "reachable"},
		{"no sudo", &host.SudoError{Node: "solo-1", User: "ubuntu", Reason: "sudo: a password is required"},
			CauseSudo, []string{"NOPASSWD"}, "reachable"},
		{"a script that broke its protocol", fmt.Errorf("inspect: %w", ErrProtocol),
			CauseOther, []string{"Read the reasons", "solo-1"}, "reachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := CauseOf(c.err)
			if got != c.cause {
				t.Fatalf("cause %q, want %q", got, c.cause)
			}
			next := NextStepFor(got, "solo-1")
			for _, w := range c.next {
				if !strings.Contains(next, w) {
					t.Errorf("next %q lacks %q", next, w)
				}
			}
			if c.not != "" && strings.Contains(next, c.not) {
				t.Errorf("next %q should not speak of %q", next, c.not)
			}
		})
	}
}

// What a survey finds is a blocker with its cause, and the next step names
// each cause once.
func TestInspectionHazards(t *testing.T) {
	pid := 4242
	free := int64(336)
	clean := Inspection{Kernel: "6.1.0-28-amd64", KernelPanic: 10, Pending: BuildPlan("")}
	clean.Grub.EnvWritableAtBoot = true
	if hz := InspectionHazards(clean, ""); len(hz) != 0 {
		t.Fatalf("a clean survey has hazards: %+v", hz)
	}
	for _, c := range []struct {
		name   string
		change func(*Inspection)
		cause  Cause
		reason string
	}{
		{"interrupted", func(i *Inspection) { i.Dpkg.Interrupted, i.Dpkg.FixCommand = true, "dpkg --configure -a" }, CauseDpkgInterrupted, "dpkg was interrupted"},
		{"audit", func(i *Inspection) { i.Dpkg.Audit = "tinyapp half-configured" }, CauseDpkgAudit, "dpkg left packages half-way"},
		{"locked", func(i *Inspection) { i.Dpkg.Lock = &DpkgLock{PID: &pid, Command: "apt-get full-upgrade"} }, CauseDpkgLocked, "process 4242 (apt-get full-upgrade)"},
		{"boot short", func(i *Inspection) {
			i.Boot = BootSpace{Dir: "/boot", FreeKB: &free, NeedKB: 65536, NewKernels: []string{"9.9.9-1-generic"}, Short: true}
		}, CauseBootShort, "/boot has 336 KiB free"},
		{"removal", func(i *Inspection) {
			i.Pending = BuildPlan("Remv oldlib [1.0]\nInst newlib (1.0 lab [all])\n")
		}, CauseRemoval, "would remove 1 package(s): oldlib"},
		{"kernel.panic", func(i *Inspection) { i.KernelPanic = 0 }, CauseBoot, "kernel.panic is 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			insp := clean
			c.change(&insp)
			hz := InspectionHazards(insp, "")
			if len(hz) != 1 || hz[0].Cause != c.cause || !strings.Contains(hz[0].Reason, c.reason) {
				t.Fatalf("hazards %+v, want one %s with %q", hz, c.cause, c.reason)
			}
			if next := NextForHazards("solo-1", append(hz, hz...)); next != NextStepFor(c.cause, "solo-1") {
				t.Errorf("next %q, want the cause's step once", next)
			}
		})
	}
}

// A short /boot in a simulated upgrade is its own cause, whatever its
// words; the other blockers are read from theirs.
func TestSimulationHazards(t *testing.T) {
	free := int64(336)
	sim := Simulation{Plan: BuildPlan("Remv oldlib [1.0]\n")}
	sim.Boot = BootSpace{Dir: "/boot", FreeKB: &free, NeedKB: 65536, NewKernels: []string{"9.9.9-1-generic"}, Short: true}
	sim.Plan.Blockers = append(sim.Plan.Blockers, sim.Boot.ShortReason())
	var got []Cause
	for _, h := range SimulationHazards(sim) {
		got = append(got, h.Cause)
	}
	if want := []Cause{CauseRemoval, CauseBootShort}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("causes %v, want %v", got, want)
	}
}

func TestSizeKB(t *testing.T) {
	for kb, want := range map[int64]string{0: "0 KiB", 336: "336 KiB", 1023: "1023 KiB", 1024: "1 MiB", 65536: "64 MiB"} {
		if got := SizeKB(kb); got != want {
			t.Errorf("SizeKB(%d) = %q, want %q", kb, got, want)
		}
	}
}
