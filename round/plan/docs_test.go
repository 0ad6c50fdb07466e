package plan

import (
	"strings"
	"testing"
)

func TestChangelogEntry(t *testing.T) {
	f := Build(input(PerWindow))
	c := Closing{Round: "2026-11", Date: "2026-11-20", Report: "rounds/2026-11/report.md", Deviations: []string{"resume at trial_boot on gpu-3 by alice"}}
	e := ChangelogEntry(f, c)
	for _, want := range []string{
		"## 2026-11-20 · round 2026-11\n",
		"- kernel, control-plane nodes: " + running + " → " + target + "\n",
		"- kernel, gpu nodes: " + running + " → " + target + "\n",
		"- packages of note: linux-image-" + target + ", linux-modules-nvidia-550-server-" + target + "\n",
		"- deviation: resume at trial_boot on gpu-3 by alice\n",
		"report: [rounds/2026-11/report.md](../rounds/2026-11/report.md)",
	} {
		if !strings.Contains(e, want) {
			t.Errorf("entry lacks %q:\n%s", want, e)
		}
	}
	doc := "# os-layer changelog\n\nNewest first.\n\n## 2025-11-14\n\n- older\n"
	got := InsertChangelog(doc, "2026-11", e)
	if !strings.HasPrefix(got, "# os-layer changelog\n\nNewest first.\n\n## 2026-11-20 · round 2026-11\n") || !strings.HasSuffix(got, "## 2025-11-14\n\n- older\n") {
		t.Errorf("inserted:\n%s", got)
	}
	if !HasEntry(got, "2026-11") || HasEntry(doc, "2026-11") {
		t.Error("HasEntry")
	}
	if InsertChangelog(got, "2026-11", e) != got {
		t.Error("a second insert changed the changelog")
	}
	if got := InsertChangelog("# changelog", "2026-11", e); !strings.HasSuffix(got, e) {
		t.Errorf("empty changelog: %q", got)
	}
}

func TestRunbookProposal(t *testing.T) {
	c := Closing{Round: "2026-11", Date: "2026-11-20", Lessons: []string{
		"gpu-3's modules were missing; next time add linux-modules-nvidia to the plan before the window",
		"the lab was slow today",
	}}
	doc, ok := RunbookProposal("# runbook\n", c)
	if !ok || !strings.Contains(doc, "## Proposed by round 2026-11 (2026-11-20)") || !strings.Contains(doc, "- gpu-3's modules were missing") || strings.Contains(doc, "slow today") {
		t.Errorf("proposal (%v):\n%s", ok, doc)
	}
	if again, ok := RunbookProposal(doc, c); ok || again != doc {
		t.Error("a second proposal for the same round")
	}
	if _, ok := RunbookProposal("# runbook\n", Closing{Round: "r", Lessons: []string{"the lab was slow today"}}); ok {
		t.Error("a lesson that changes no step proposed a runbook edit")
	}
}
