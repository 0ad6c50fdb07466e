package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// TestForgedJournalAfterARealFallbackNeverPromotes is the review's
// forgery on the lab: cp-1's new kernel panics at boot, GRUB falls back
// to the old one and the round stops on the trial boot. With the server
// ended, the agent cuts the journal at the failure, writes green
// trial_boot, verify and uncordon records numbered on, and starts the
// server again: promote_kernel must refuse (the journal does not
// reproduce the server's anchor), ask nobody to sign anything, and leave
// the host's boots and GRUB files as the fallback left them. A person
// writes the journal back from the anchor; the round is then stopped on
// the fallback again, and promote still does nothing.
func TestForgedJournalAfterARealFallbackNeverPromotes(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0,
		RebootTimeout: 15 * time.Second, GateSettle: 30 * time.Second, DrainTimeoutMinutes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := l.Inject(ctx, "kernel-panic", "cp-1", ""); err != nil {
		t.Fatal(err)
	}
	cs, _, closeSession, err := l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := (&Agent{Session: cs, Sign: l.Sign, Wait: l.Clock.AdvanceTo, Say: func(s string) { t.Log(s) }}).Run(ctx, "2026-11")
	closeSession()
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	if out.Stopped == nil || out.Stopped.Step != "trial_boot" || out.Stopped.Node != "cp-1" {
		t.Fatalf("the round stopped at %+v, want cp-1's trial boot", out.Stopped)
	}

	host := func() string {
		h := l.Fleet.Host("cp-1")
		st, err := h.State()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "kernel %s boots %d boot_id %s\n", st.Kernel, st.Boots, st.BootID)
		for _, p := range []string{"/boot/grub/grubenv", "/etc/default/grub.d/99-trial-boot.cfg", "/boot/grub/grub.cfg"} {
			data, err := os.ReadFile(h.Path(p))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s:\n%s\n", p, data)
		}
		return b.String()
	}
	fellBack := host()

	// The forgery, with the server ended.
	dir := filepath.Join(l.IntentRepo, "rounds", "2026-11")
	live := filepath.Join(dir, round.JournalFile)
	data, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	var forged []byte
	var seq uint64
	cut := false
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		var r round.Record
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &r) != nil {
			continue
		}
		if r.Kind == round.KindStepFailed && r.Step == round.StepTrialBoot && r.Node == "cp-1" {
			cut = true
			break
		}
		forged, seq = append(forged, line...), r.Seq
	}
	if !cut {
		t.Fatal("the live journal holds no failed trial boot of cp-1 to cut at")
	}
	add := func(r round.Record) {
		seq++
		r.Seq, r.Time = seq, l.Clock.Now().UTC()
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		forged = append(append(forged, b...), '\n')
	}
	add(round.Record{Kind: round.KindStepFinished, Step: round.StepTrialBoot, Node: "cp-1", Outcome: round.OutcomeDone, Kernel: "6.8.0-51-generic"})
	for _, s := range []round.Step{round.StepVerify, round.StepUncordon} {
		add(round.Record{Kind: round.KindStepStarted, Step: s, Node: "cp-1"})
		add(round.Record{Kind: round.KindStepFinished, Step: s, Node: "cp-1", Outcome: round.OutcomeDone, Kernel: "6.8.0-51-generic"})
	}
	if err := os.WriteFile(live, forged, 0o644); err != nil {
		t.Fatal(err)
	}

	cs, _, closeSession, err = l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	r := callTool(t, cs, "promote_kernel", map[string]any{"node": "cp-1"})
	if r["status"] != "refused" || r["approval"] != nil || !strings.Contains(fmt.Sprint(r["reasons"]), "what the server wrote") {
		t.Fatalf("promote_kernel on the forged journal: %v %v (approval %v), want refused as not what the server wrote", r["status"], r["reasons"], r["approval"])
	}
	t.Logf("promote on the forged journal: %v %v", r["status"], r["reasons"])
	closeSession()
	if got := host(); got != fellBack {
		t.Fatalf("the host changed under the forged journal:\nafter the fallback:\n%s\nnow:\n%s", fellBack, got)
	}

	// A person writes the journal back from the anchor.
	rep, err := round.RestoreFromAnchor(dir, service.AnchorDir(l.Config.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored %v (%d records)", rep.Replaced, rep.Records)
	cs, _, closeSession, err = l.Session(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession()
	st := callTool(t, cs, "round_status", map[string]any{})
	if !strings.Contains(fmt.Sprint(st), "trial_boot") || !strings.Contains(fmt.Sprint(st["next_action"]), "resume") {
		t.Errorf("round_status after the restore does not show the stop on the trial boot: %v", st["next_action"])
	}
	r = callTool(t, cs, "promote_kernel", map[string]any{"node": "cp-1"})
	if r["status"] == "ok" || r["status"] == "in_progress" || r["status"] == "approval_required" {
		t.Fatalf("promote_kernel after the restore: %v %v, want refused (the round is stopped on the fallback)", r["status"], r["reasons"])
	}
	if got := host(); got != fellBack {
		t.Fatalf("the host changed:\nafter the fallback:\n%s\nnow:\n%s", fellBack, got)
	}
}
