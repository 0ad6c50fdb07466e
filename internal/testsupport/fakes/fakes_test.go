package fakes_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
)

// The fake's fallback drill against the real fallback_drill.sh (run with
// a real shell over a temporary root): arm, status, the armed kernel's
// boot firing the unit, disarm answer the same armed/kernel/fired at each
// point, and bad input is refused by both.
func TestFallbackDrillContract(t *testing.T) {
	const round, kernel = "2026-11", "6.8.0-51-generic"
	root := t.TempDir()
	real := &steps.Steps{Runner: &steps.LocalRunner{}, Paths: steps.Paths{StateDir: filepath.Join(root, "state"), EtcDir: filepath.Join(root, "etc")}}
	fake := &fakes.Host{Running: "6.8.0-48-generic", Target: kernel}
	ctx := context.Background()
	type view struct {
		Armed  bool
		Kernel string
		Fired  bool
	}
	same := func(what string, r, f steps.DrillState, rerr, ferr error) {
		t.Helper()
		if (rerr == nil) != (ferr == nil) {
			t.Fatalf("%s: real err %v, fake err %v", what, rerr, ferr)
		}
		rv, fv := view{r.Armed, r.DrillKernel, r.Fired}, view{f.Armed, f.DrillKernel, f.Fired}
		if rv != fv {
			t.Fatalf("%s: real %+v, fake %+v", what, rv, fv)
		}
		if r.Fired != (r.FiredAt != "") || f.Fired != (f.FiredAt != "") {
			t.Fatalf("%s: fired_at does not follow fired: real %+v, fake %+v", what, r, f)
		}
	}
	step := func(what, action, rnd, k string) {
		t.Helper()
		r, rerr := real.FallbackDrill(ctx, "canary", action, rnd, k)
		f, ferr := fake.FallbackDrill(ctx, "canary", action, rnd, k)
		same(what, r, f, rerr, ferr)
	}
	step("bad kernel", steps.DrillArm, round, "6.8; reboot")
	step("status before arming", steps.DrillStatus, "", "")
	step("arm", steps.DrillArm, round, kernel)
	step("status armed", steps.DrillStatus, "", "")

	// The armed kernel boots: the unit runs (its crash left out) and the
	// host falls back.
	unit, err := os.ReadFile(filepath.Join(root, "etc", "systemd", "system", filepath.Base(fakes.DrillUnit)))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=/bin/sh -c '(.*); echo 1 > /proc/sys/kernel/sysrq; echo c > /proc/sysrq-trigger'$`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("no ExecStart with the crash in the unit:\n%s", unit)
	}
	if out, err := exec.Command("sh", "-c", strings.ReplaceAll(string(m[1]), "%%", "%")).CombinedOutput(); err != nil {
		t.Fatalf("the unit's command: %v: %s", err, out)
	}
	fake.TrialBootPrepare(ctx, "canary", steps.TrialBootInput{Round: round, NewEntry: fakes.Entry(kernel), OldEntry: fakes.Entry("6.8.0-48-generic")})
	fake.Boot(false)
	step("status after the armed kernel booted", steps.DrillStatus, "", "")
	if fake.Running != "6.8.0-48-generic" || fake.Outcome != steps.OutcomeFellBack {
		t.Fatalf("the fired drill did not bring the fake back on the old kernel: running %s, outcome %s", fake.Running, fake.Outcome)
	}
	step("disarm", steps.DrillDisarm, "", "")
	step("arm again clears the firing", steps.DrillArm, round, kernel)
	step("disarm again", steps.DrillDisarm, "", "")
	if n := fake.Count("drill-arm"); n != 2 {
		t.Fatalf("fake counted %d arms, want 2 (bad input arms nothing)", n)
	}
}

// A host that fell back before the new kernel reached its units leaves
// an armed drill unfired: no proof of the fallback.
func TestFallbackDrillUnfiredWhenTheKernelNeverCameUp(t *testing.T) {
	h := &fakes.Host{Running: "6.8.0-48-generic", Target: "6.8.0-51-generic"}
	if _, err := h.FallbackDrill(context.Background(), "n", steps.DrillArm, "2026-11", h.Target); err != nil {
		t.Fatal(err)
	}
	h.Boot(true)
	st, _ := h.FallbackDrill(context.Background(), "n", steps.DrillStatus, "", "")
	if st.Fired || !st.Armed {
		t.Fatalf("drill %+v after a fallback it did not cause", st)
	}
	h.Unreachable = true
	if _, err := h.FallbackDrill(context.Background(), "n", steps.DrillDisarm, "", ""); err == nil || h.Count("drill-disarm") != 0 {
		t.Fatalf("an unreachable host disarmed: %v", err)
	}
}
