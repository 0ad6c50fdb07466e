package fleet

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
)

// TestRealHostHazards: each hazard fault, as the unchanged scripts meet it
// on a lab host: a clear stop before anything changed, with the words and
// figures a person needs (the real behaviour is proven on the VM, lab/vm).
func TestRealHostHazards(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1})
	p := pool(t, f)
	h := f.Host("cp-1")
	digest := func() string {
		sim, out := step(t, p, h.Name, "simulate", nil)
		wantStatus(t, sim, out, "ok")
		return sim["plan_digest"].(string)
	}
	start := map[string]string{"ACTION": "start", "ROUND": "r1", "EXPECTED_PLAN_DIGEST": digest(), "LOCK_TIMEOUT": "2"}
	notStarted := func(t *testing.T) {
		t.Helper()
		st, out := step(t, p, h.Name, "install", map[string]string{"ACTION": "status", "ROUND": "r1"})
		wantStatus(t, st, out, "ok")
		if st["state"] != "not_started" {
			t.Fatalf("after a refusal the install must not have started: %v", st["state"])
		}
	}

	t.Run("dpkg-interrupted", func(t *testing.T) {
		if err := h.Inject(DpkgInterrupted{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.Clear("dpkg-interrupted"); err != nil {
				t.Fatal(err)
			}
		}()
		sim, out := step(t, p, h.Name, "simulate", nil)
		wantStatus(t, sim, out, "refused")
		if sim["fix_command"] != "dpkg --configure -a" || !strings.Contains(sim["reason"].(string), "dpkg --configure -a") {
			t.Errorf("simulate: %v", sim)
		}
		in, out := step(t, p, h.Name, "install", start)
		wantStatus(t, in, out, "refused")
		notStarted(t)
	})

	t.Run("boot-nearly-full", func(t *testing.T) {
		if err := h.Inject(BootNearlyFull{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.Clear("boot-nearly-full"); err != nil {
				t.Fatal(err)
			}
		}()
		sim, out := step(t, p, h.Name, "simulate", nil)
		wantStatus(t, sim, out, "ok")
		if sim["boot_short"] != true || sim["boot_free_kb"] != float64(20*1024) {
			t.Errorf("simulate: boot_short %v free %v need %v", sim["boot_short"], sim["boot_free_kb"], sim["boot_need_kb"])
		}
		in, out := step(t, p, h.Name, "install", start)
		wantStatus(t, in, out, "refused")
		if r := in["reason"].(string); !strings.Contains(r, "/boot has 20 MiB free") || !strings.Contains(r, NewKernel) {
			t.Errorf("install: %s", r)
		}
		notStarted(t)
	})

	t.Run("package-published", func(t *testing.T) {
		reviewed := start["EXPECTED_PLAN_DIGEST"]
		if err := h.Inject(PackagePublished{}); err != nil {
			t.Fatal(err)
		}
		sim, out := step(t, p, h.Name, "simulate", nil)
		wantStatus(t, sim, out, "ok")
		lines, _ := sim["plan_lines"].([]any)
		if sim["plan_digest"] == reviewed || !slices.ContainsFunc(lines, func(l any) bool { return l == "Inst snapd 2.66.1+24.04 2.66.1+24.04.1 amd64" }) {
			t.Errorf("simulate after the update was published: digest %v (reviewed %s), lines %v", sim["plan_digest"], reviewed, lines)
		}
		in, out := step(t, p, h.Name, "install", start)
		wantStatus(t, in, out, "refused")
		if !strings.Contains(in["reason"].(string), "the plan drifted") {
			t.Errorf("install of the reviewed digest: %v", in["reason"])
		}
		notStarted(t)
		if err := h.Clear("package-published"); err != nil {
			t.Fatal(err)
		}
		if d := digest(); d != reviewed {
			t.Errorf("after the update was withdrawn the digest is %s, want %s", d, reviewed)
		}
	})

	t.Run("dpkg-locked", func(t *testing.T) {
		if err := h.Inject(DpkgLocked{}); err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		holder := h.lockHolder.Process.Pid
		h.mu.Unlock()
		began := time.Now()
		in, out := step(t, p, h.Name, "install", start)
		wantStatus(t, in, out, "refused")
		if in["lock_holder_pid"] != float64(holder) || !strings.Contains(in["lock_holder_command"].(string), "flock") || in["lock_waited_seconds"] != float64(2) {
			t.Errorf("install: holder %v %q waited %v, want %d", in["lock_holder_pid"], in["lock_holder_command"], in["lock_waited_seconds"], holder)
		}
		if time.Since(began) < 2*time.Second {
			t.Errorf("refused after %s, before the 2 s lock timeout", time.Since(began))
		}
		if _, err := os.FindProcess(holder); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(holder) + "/cmdline"); err != nil || !strings.Contains(string(b), "flock") {
			t.Errorf("the holder must be left alone: %v", err)
		}
		notStarted(t)
		if err := h.Clear("dpkg-locked"); err != nil {
			t.Fatal(err)
		}
		// Once the lock is free the install gets past it (to the digest check).
		in, out = step(t, p, h.Name, "install", map[string]string{"ACTION": "start", "ROUND": "r2", "EXPECTED_PLAN_DIGEST": "sha256:" + strings.Repeat("0", 64), "LOCK_TIMEOUT": "2"})
		wantStatus(t, in, out, "refused")
		if !strings.Contains(in["reason"].(string), "the plan drifted") {
			t.Errorf("install after the lock was released: %v", in["reason"])
		}
	})

	t.Run("phased-update", func(t *testing.T) {
		if err := h.Inject(PhasedUpdate{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.Clear("phased-update"); err != nil {
				t.Fatal(err)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sim, err := steps.New(p, nil).Simulate(ctx, h.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(sim.Plan.Phased, "tzdata") || slices.Contains(sim.Plan.Removals, "tzdata") || len(sim.Plan.Blockers) != 0 {
			t.Errorf("phased %v removals %v blockers %v", sim.Plan.Phased, sim.Plan.Removals, sim.Plan.Blockers)
		}
	})

	t.Run("grub-default-overridden", func(t *testing.T) {
		sh(t, f, h, "apt-get -y full-upgrade </dev/null >/dev/null")
		oldID, newID := entryIDs(t, h)
		if err := h.Inject(GrubDefaultOverridden{}); err != nil {
			t.Fatal(err)
		}
		tb, out := step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "prepare", "ROUND": "r3", "OLD_ENTRY": oldID, "NEW_ENTRY": newID})
		wantStatus(t, tb, out, "refused")
		if !strings.Contains(tb["reason"].(string), "sets GRUB_DEFAULT and is read after") {
			t.Errorf("trial_boot: %v", tb["reason"])
		}
		if _, err := os.Stat(h.Path("/etc/default/grub.d/99-trial-boot.cfg")); !os.IsNotExist(err) {
			t.Errorf("the refused prepare wrote the drop-in: %v", err)
		}
		if err := h.Clear("grub-default-overridden"); err != nil {
			t.Fatal(err)
		}
		tb, out = step(t, p, h.Name, "trial_boot", map[string]string{"ACTION": "prepare", "ROUND": "r3", "OLD_ENTRY": oldID, "NEW_ENTRY": newID})
		wantStatus(t, tb, out, "ok")
	})
}
