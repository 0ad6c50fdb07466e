package tools

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

func TestDecideRollback(t *testing.T) {
	now := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { now = now.Add(time.Minute); return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}, {Name: "gpu-b", GPU: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ round.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Plan(o, time.Hour, round.Meta{}))
	must(j.StartStep(round.StepBaseline, "", round.Meta{}))
	must(j.FinishStep(round.StepBaseline, "", round.Meta{}))
	for _, s := range round.PreflightSteps {
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		must(j.FinishStep(s, "gpu-a", round.Meta{Kernel: "6.8.0-40-generic"}))
	}
	before := j.State().Clone()
	for _, s := range []round.Step{round.StepDrain, round.StepInstall} {
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		must(j.FinishStep(s, "gpu-a", round.Meta{Kernel: "6.8.0-40-generic"}))
	}
	must(j.StartStep(round.StepTrialBoot, "gpu-a", round.Meta{}))
	must(j.FinishStep(round.StepTrialBoot, "gpu-a", round.Meta{Kernel: "6.8.0-45-generic"}))
	must(j.StartStep(round.StepVerify, "gpu-a", round.Meta{}))
	must(j.FailStep(round.StepVerify, "gpu-a", round.Meta{Detail: "bond0 has 1 active slave"}))
	red := j.State()

	entries := []parse.GrubEntry{
		{ID: "gnulinux-simple-u", Kernel: "6.8.0-45-generic"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-45-generic-advanced-u", Kernel: "6.8.0-45-generic", Submenu: "Advanced options"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-advanced-u", Kernel: "6.8.0-40-generic", Submenu: "Advanced options"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-recovery-u", Kernel: "6.8.0-40-generic", Submenu: "Advanced options", Recovery: true},
	}
	onNew := steps.Inspection{Kernel: "6.8.0-45-generic", BootID: "b-2"}
	onNew.Grub.Entries = entries
	onOld := onNew
	onOld.Kernel = "6.8.0-40-generic"
	noOld := onNew
	noOld.Grub.Entries = entries[:2]

	p, err := DecideRollback("gpu-a", red, onNew, "6.8.0-45-generic")
	if err != nil {
		t.Fatal(err)
	}
	if p.OldEntry != "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-advanced-u" || p.OldKernel != "6.8.0-40-generic" || p.FromKernel != "6.8.0-45-generic" || p.Promoted {
		t.Fatalf("plan %+v", p)
	}
	q := p
	q.BootID = "b-3"
	if q.Digest() == p.Digest() {
		t.Error("the digest must bind the boot the approval was given for")
	}
	if !strings.Contains(strings.Join(p.Summary(), " "), "keep the trial-boot drop-in") {
		t.Errorf("summary %q", p.Summary())
	}
	for _, tc := range []struct {
		name string
		node string
		st   *round.State
		insp steps.Inspection
		want string
	}{
		{"round not stopped", "gpu-a", before, onNew, "the round is not stopped at gpu-a"},
		{"another node", "gpu-b", red, onNew, "not stopped at gpu-b"},
		{"not in the order", "gpu-z", red, onNew, "not in the round's order"},
		{"already on the old kernel", "gpu-a", red, onOld, "already runs its old kernel"},
		{"old entry gone", "gpu-a", red, noOld, "no GRUB entry boots the old kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecideRollback(tc.node, tc.st, tc.insp, "6.8.0-45-generic")
			var r *Refusal
			if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
}
