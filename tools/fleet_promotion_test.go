package tools

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/promotion"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// The promotion gate on the fleet rig: the intent repository's
// environments.yaml (the example's: production's upstream is staging,
// soaked 168 hours) and a production server (config environment).

const prodRound = "production-2026-11"

func production(c *config.Config) { c.Environment = "production" }

// upstreamRecord commits the outcome record of a staging round to the
// repository, with the statement signing it by the rig's person (as
// record_decision outcome_certified writes them and a merge brings them), and answers the
// record's path. edit, when set, changes the record after it was signed.
func (f *fleet) upstreamRecord(o promotion.Outcome, edit func(*promotion.Outcome)) string {
	f.t.Helper()
	raw, err := o.Encode()
	if err != nil {
		f.t.Fatal(err)
	}
	req, err := policy.NewAttestation(policy.KindRoundOutcome, policy.AttestationFields{Environment: o.Environment, Round: o.Round, Digest: promotion.Digest(raw)},
		o.Lines(), time.Hour, func() time.Time { return f.now }, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	statement := f.person.sign(f.t, req.String())
	if edit != nil {
		edit(&o)
		if raw, err = o.Encode(); err != nil {
			f.t.Fatal(err)
		}
	}
	dir := filepath.Join(f.repo, "rounds", o.Round)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, promotion.OutcomeFile), raw, 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, promotion.StatementFile), []byte(statement), 0o644); err != nil {
		f.t.Fatal(err)
	}
	gitRun(f.t, f.repo, "add", "rounds")
	gitRun(f.t, f.repo, "commit", "-qm", "merge staging's round "+o.Round)
	return "rounds/" + o.Round + "/" + promotion.OutcomeFile
}

// stagingOutcome is a staging round that closed at closed with kernel on
// gpu-1 and gpu-2, green unless k changes it.
func stagingOutcome(id string, closed time.Time, kernel string, k func(*promotion.Kernel)) promotion.Outcome {
	o := promotion.Outcome{Version: promotion.Version, Environment: "staging", Round: id, Closed: closed, FleetCheck: true,
		SoakStarted: closed.Add(-50 * time.Hour), SoakEnded: closed.Add(-2 * time.Hour),
		Kernels: []promotion.Kernel{{Kernel: kernel, Promoted: []string{"gpu-1", "gpu-2"}, FellBack: []string{}, RolledBack: []string{}, Red: []string{}}}}
	if k != nil {
		k(&o.Kernels[0])
	}
	return o
}

func (f *fleet) planMD(id string) string {
	f.t.Helper()
	md, err := os.ReadFile(filepath.Join(f.repo, "rounds", id, service.FleetPlanMD))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(md)
}

// Production plans only what staging proved: each refusal is a blocker
// of every moving node that says why (never run there, still soaking
// until when, fell back where, a record edited after it was signed), and
// the plan stops before any cordon; a kernel that closed green and soaked
// plans, and plan.md shows the proof.
func TestProductionPlansOnlyWhatStagingProved(t *testing.T) {
	start := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC) // the rig's clock
	tests := []struct {
		name    string
		records func(f *fleet)
		want    []string // in the blocker (or, when proven, in plan.md)
		proven  bool
	}{
		{name: "never run upstream", records: func(*fleet) {}, want: []string{"kernel " + fTarget + " never closed a round in staging"}},
		{name: "another kernel only", records: func(f *fleet) {
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), "6.8.0-50-generic", nil), nil)
		}, want: []string{"never closed a round in staging"}},
		{name: "still soaking", records: func(f *fleet) {
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-10*time.Hour), fTarget, nil), nil)
		}, want: []string{"still soaking in staging until 2026-11-09 22:00 UTC", "staging-2026-10"}},
		{name: "fell back upstream", records: func(f *fleet) {
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), fTarget, func(k *promotion.Kernel) { k.FellBack = []string{"gpu-2"} }), nil)
		}, want: []string{"fell back on gpu-2 in staging's round staging-2026-10"}},
		{name: "rolled back upstream", records: func(f *fleet) {
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), fTarget, func(k *promotion.Kernel) { k.RolledBack = []string{"gpu-1"} }), nil)
		}, want: []string{"rolled back on gpu-1"}},
		{name: "record edited after it was signed", records: func(f *fleet) {
			// Staging saw gpu-2 fall back; the record now says it did not.
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), fTarget, func(k *promotion.Kernel) { k.FellBack = []string{"gpu-2"} }),
				func(o *promotion.Outcome) { o.Kernels[0].FellBack = []string{} })
		}, want: []string{"never closed a round in staging", "rounds/staging-2026-10/outcome.json (the record was changed after it was signed"}},
		{name: "statement from a key allowed_signers does not list", records: func(f *fleet) {
			other := newSigner(f.t, f.t.TempDir(), "mallory@example.org")
			person := f.person
			f.person = other
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), fTarget, nil), nil)
			f.person = person
		}, want: []string{"never closed a round in staging", "its statement does not verify"}},
		{name: "closed green and soaked", records: func(f *fleet) {
			f.upstreamRecord(stagingOutcome("staging-2026-09", start.Add(-900*time.Hour), fTarget, func(k *promotion.Kernel) { k.FellBack = []string{} }), nil)
			f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), fTarget, nil), nil)
		}, proven: true, want: []string{"## Promotion from staging", "closed green in staging's round staging-2026-09", "certified by alice@example.org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, production)
			tt.records(f)
			_, res := f.call("plan_round", map[string]any{"round": prodRound})
			md := f.planMD(prodRound)
			if tt.proven {
				if res.Status != StatusOK {
					t.Fatalf("plan_round of a proven kernel: %s %v", res.Status, res.Reasons)
				}
				for _, w := range tt.want {
					if !strings.Contains(md, w) {
						t.Errorf("plan.md does not say %q:\n%s", w, md)
					}
				}
				if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
					t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
				}
				return
			}
			if res.Status != StatusFailed {
				t.Fatalf("plan_round of an unproven kernel: %s %v", res.Status, res.Reasons)
			}
			for _, node := range []string{"cp-1", "gpu-1", "gpu-2"} {
				if !strings.Contains(reasons(res), node+": ") {
					t.Errorf("no blocker on %s: %v", node, res.Reasons)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(reasons(res), w) || !strings.Contains(md, w) {
					t.Errorf("the blocker does not say %q:\n%v\nplan.md:\n%s", w, res.Reasons, md)
				}
			}
			if !strings.Contains(reasons(res), "record_decision kernel_promoted") {
				t.Errorf("the blocker does not say how a person promotes it anyway: %v", res.Reasons)
			}
			if st := f.state(); st.Stop == nil {
				t.Fatal("a plan with a promotion blocker did not stop the round")
			}
			if _, res := f.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
				t.Fatalf("a drain under a blocked plan: %s %v", res.Status, res.Reasons)
			}
			if f.node("cp-1").Spec.Unschedulable {
				t.Fatal("cp-1 was cordoned under a blocked plan")
			}
		})
	}
}

// A person promotes a kernel that never ran upstream with a signed
// statement naming the kernel, the environment, the round and the reason:
// the re-plan takes it, names the residual risk in plan.md, and the plan
// is signed. A statement for another kernel, or one edited, is refused
// and keeps nothing.
func TestPersonPromotesAKernelWithoutProof(t *testing.T) {
	f := newFleet(t, production)
	if _, res := f.call("plan_round", map[string]any{"round": prodRound}); res.Status != StatusFailed {
		t.Fatalf("plan_round of a kernel staging never ran: %s %v", res.Status, res.Reasons)
	}
	const reason = "staging is rebuilt this month; the kernel ran 30 days in the lab"
	ask := func(kernel string) string {
		t.Helper()
		_, res := f.call("record_decision", map[string]any{"decision": "kernel_promoted", "kernel": kernel, "reason": reason})
		if res.Status != StatusApprovalRequired || res.Approval == nil {
			t.Fatalf("kernel_promoted without a statement: %s %v", res.Status, res.Reasons)
		}
		return res.Approval.Request
	}
	text := ask(fTarget)
	for _, w := range []string{"kind: kernel_promoted", "environment: production", "round: " + prodRound, "kernel: " + fTarget,
		"summary: not proven in staging: kernel " + fTarget + " never closed a round in staging"} {
		if !strings.Contains(text, w) {
			t.Errorf("the statement does not say %q:\n%s", w, text)
		}
	}
	// Signed for another kernel, presented for this one.
	other := f.person.sign(t, ask("6.8.0-52-generic"))
	if _, res := f.call("record_decision", map[string]any{"decision": "kernel_promoted", "kernel": fTarget, "reason": reason, "attestation": other}); res.Status != StatusRefused ||
		!strings.Contains(reasons(res), "signed for kernel 6.8.0-52-generic") {
		t.Fatalf("a statement for another kernel: %s %v", res.Status, res.Reasons)
	}
	// Edited after signing: the signature no longer holds.
	signed := f.person.sign(t, text)
	edited := strings.Replace(signed, "reason: staging", "reason: Staging", 1)
	if _, res := f.call("record_decision", map[string]any{"decision": "kernel_promoted", "kernel": fTarget, "reason": "Staging" + strings.TrimPrefix(reason, "staging"), "attestation": edited}); res.Status != StatusRefused {
		t.Fatalf("an edited statement: %s %v", res.Status, res.Reasons)
	}
	m, res := f.call("record_decision", map[string]any{"decision": "kernel_promoted", "kernel": fTarget, "reason": reason, "attestation": signed})
	if res.Status != StatusOK || m["principal"] != "alice@example.org" {
		t.Fatalf("kernel_promoted: %s %v %v", res.Status, res.Reasons, m)
	}
	if _, res := f.call("record_decision", map[string]any{"decision": "kernel_promoted", "kernel": fTarget, "reason": reason, "attestation": signed}); res.Status != StatusRefused {
		t.Fatalf("the same statement twice: %s %v", res.Status, res.Reasons)
	}
	if res := f.decide(map[string]any{"decision": "resume", "reason": "kernel promoted by a person"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "plan_round", map[string]any{"round": prodRound})
	md := f.planMD(prodRound)
	for _, w := range []string{"promoted into production by alice@example.org without proof from staging",
		"kernel " + fTarget + " runs in production without a soaked green round in staging: alice@example.org promoted it (" + reason + ")"} {
		if !strings.Contains(md, w) {
			t.Errorf("plan.md does not say %q:\n%s", w, md)
		}
	}
	// The round's own record says so, and its report names the risk.
	if ps := f.state().Promotions; len(ps) != 2 || !strings.Contains(ps[0].Detail, "never closed a round in staging") ||
		!strings.Contains(ps[1].Detail, "residual risk: kernel "+fTarget+" runs in production") {
		t.Errorf("the journal's promotion records: %+v", ps)
	}
	var report strings.Builder
	err := round.RenderReport(&report, f.state())
	if err != nil || !strings.Contains(report.String(), "## Promotion") || !strings.Contains(report.String(), "alice@example.org promoted it ("+reason+")") {
		t.Errorf("the report does not name the promotion: %v\n%s", err, report.String())
	}
	// The promotion counts as this server's kept statement, verified
	// again: it holds after a restart.
	f.restart()
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan after a restart: %s %v", res.Status, res.Reasons)
	}
	// The stop reached people naming the environment.
	f.hooks.waitFor(t, `"kind":"round_stopped"`, `"environment":"production"`, "round "+prodRound+" (production) node cp-1 stopped")
}

// Rounds are per environment: a production server plans only rounds named
// after production, each environment's round runs on its own compliance
// clock, and a server without an environment has no gate.
func TestRoundsAreNamedAfterTheirEnvironment(t *testing.T) {
	f := newFleet(t, production)
	if _, res := f.call("plan_round", map[string]any{"round": "staging-2026-11"}); res.Status != StatusRefused ||
		!strings.Contains(reasons(res), "not a round of environment production") {
		t.Fatalf("plan_round of staging's round on a production server: %s %v", res.Status, res.Reasons)
	}
	if _, err := os.Stat(filepath.Join(f.repo, "rounds", "staging-2026-11")); !os.IsNotExist(err) {
		t.Fatalf("the refused plan left rounds/staging-2026-11: %v", err)
	}
	// A production server pointed at staging's cluster (environments.yaml:
	// production is kubeconfig context production) plans nothing.
	cl, err := f.d.Cluster(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wrong := *cl
	wrong.Context = "staging"
	f.d.Cluster = func(context.Context) (*kube.Clients, error) { return &wrong, nil }
	if _, res := f.call("plan_round", map[string]any{"round": prodRound}); res.Status != StatusRefused ||
		!strings.Contains(reasons(res), "this server uses kubeconfig context staging, and environment production is context production") {
		t.Fatalf("plan_round against staging's cluster: %s %v", res.Status, res.Reasons)
	}
	if _, err := os.Stat(filepath.Join(f.repo, "rounds", prodRound)); !os.IsNotExist(err) {
		t.Fatalf("the refused plan left rounds/%s: %v", prodRound, err)
	}

	// Production's compliance clock is its own: external-facing, 2 days.
	s := newFleet(t, func(c *config.Config) { c.Environment = "staging" })
	m := s.must(StatusOK, "plan_round", map[string]any{"round": "staging-2026-11"})
	if eta, _ := m["eta"].(map[string]any); eta == nil || eta["deadline"] != "2026-11-17T08:00:00Z" {
		t.Errorf("staging's (internal, 14 days) deadline: %v", m["eta"])
	}
	p := newFleet(t, production)
	p.upstreamRecord(stagingOutcome("staging-2026-10", p.now.Add(-300*time.Hour), fTarget, nil), nil)
	m = p.must(StatusOK, "plan_round", map[string]any{"round": prodRound})
	if eta, _ := m["eta"].(map[string]any); eta == nil || eta["deadline"] != "2026-11-05T08:00:00Z" {
		t.Errorf("production's (external-facing, 2 days) deadline: %v", m["eta"])
	}
	plain := newFleet(t)
	plain.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	if md := plain.planMD(fRound); strings.Contains(md, "Promotion") {
		t.Errorf("a server without an environment planned with a promotion gate:\n%s", md)
	}
}

// Staging's whole round on the rig, then its outcome certified: refused
// before the close; after it, the statement names each kernel and what
// happened to it (here every gate was red and accepted), and the signed
// record is committed. Brought to a production server's repository, it
// verifies there and blocks the kernel for its red gates.
func TestStagingCertifiesItsOutcomeForProduction(t *testing.T) {
	f := newFleet(t, func(c *config.Config) { c.Environment = "staging" })
	const id = "staging-2026-11"
	certify := map[string]any{"decision": "outcome_certified"}
	for _, n := range []string{"gpu-1", "gpu-2"} {
		f.host(n).Packages = []steps.PlannedPackage{nvidiaDriver}
	}
	f.must(StatusOK, "plan_round", map[string]any{"round": id})
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.call("record_decision", certify); res.Status != StatusRefused || !strings.Contains(reasons(res), "not closed") {
		t.Fatalf("outcome_certified of an open round: %s %v", res.Status, res.Reasons)
	}
	f.preflight("cp-1")
	f.windowThrough("cp-1", true)
	f.gateAccepted("cp-1")
	for _, n := range []string{"gpu-1", "gpu-2"} {
		f.preflight(n)
		if _, res := f.approve("approve_window", map[string]any{"node": n}); res.Status != StatusOK {
			t.Fatalf("approve_window %s: %s %v", n, res.Status, res.Reasons)
		}
		f.windowThrough(n, false)
		f.gateAccepted(n)
	}
	f.must(StatusOK, "record_fleet_check", nil)
	f.advance(49 * time.Hour)
	if _, res := f.approve("autoremove", nil); res.Status != StatusOK {
		t.Fatalf("autoremove: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "close_round", nil)

	_, res := f.call("record_decision", certify)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		t.Fatalf("outcome_certified without a statement: %s %v", res.Status, res.Reasons)
	}
	text := res.Approval.Request
	for _, w := range []string{"kind: round_outcome", "environment: staging", "round: " + id, "outcome-digest: sha256:",
		"summary: kernel " + fTarget + ": promoted on 3 node(s) (cp-1, gpu-1, gpu-2); red checks: cp-1: gate, gpu-1: gate, gpu-2: gate; with NVIDIA " + nvidiaDriverWords} {
		if !strings.Contains(text, w) {
			t.Errorf("the statement does not say %q:\n%s", w, text)
		}
	}
	m, res := f.call("record_decision", map[string]any{"decision": "outcome_certified", "attestation": f.person.sign(t, text)})
	if res.Status != StatusOK || m["principal"] != "alice@example.org" || !strings.Contains(reasons(res), "rounds/"+id+"/outcome.json") {
		t.Fatalf("outcome_certified: %s %v", res.Status, res.Reasons)
	}
	branch := strings.TrimSpace(gitRun(t, f.repo, "rev-parse", "--abbrev-ref", "HEAD"))
	files := gitRun(t, f.repo, "ls-tree", "-r", "--name-only", branch, "rounds/"+id)
	for _, want := range []string{"rounds/" + id + "/" + promotion.OutcomeFile, "rounds/" + id + "/" + promotion.StatementFile} {
		if !strings.Contains(files, want) {
			t.Errorf("%s not committed on %s:\n%s", want, branch, files)
		}
	}
	raw, err := os.ReadFile(filepath.Join(f.repo, "rounds", id, promotion.OutcomeFile))
	if err != nil {
		t.Fatal(err)
	}
	o, err := promotion.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := o.Kernel(fTarget); !ok || k.Green() || !o.Green() || !slices.Equal(k.Nvidia, []string{nvidiaDriverWords}) {
		t.Fatalf("the record: round green %v, kernel %+v", o.Green(), k)
	}
	statement, err := os.ReadFile(filepath.Join(f.repo, "rounds", id, promotion.StatementFile))
	if err != nil {
		t.Fatal(err)
	}

	// The production server of the same team (the same person's key).
	p := newFleet(t, production)
	signers, err := os.ReadFile(f.cfg.Approvals.AllowedSigners)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.cfg.Approvals.AllowedSigners, signers, 0o600); err != nil {
		t.Fatal(err)
	}
	p.person = f.person
	p.restart()
	dir := filepath.Join(p.repo, "rounds", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{promotion.OutcomeFile: raw, promotion.StatementFile: statement} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun(t, p.repo, "add", "rounds")
	gitRun(t, p.repo, "commit", "-qm", "merge staging's round")
	p.advance(30 * 24 * time.Hour)
	_, res = p.call("plan_round", map[string]any{"round": "production-2026-12"})
	if res.Status != StatusFailed || !strings.Contains(reasons(res), "failed checks (cp-1: gate, gpu-1: gate, gpu-2: gate) in staging's round "+id) {
		t.Fatalf("production's plan of a kernel red in staging: %s %v", res.Status, res.Reasons)
	}
}

var nvidiaDriver = steps.PlannedPackage{Name: "nvidia-driver-550", Action: "upgrade", OldVersion: "550.90.07-0ubuntu1", NewVersion: "550.127.05-0ubuntu1", Class: "nvidia"}

const nvidiaDriverWords = "nvidia-driver-550 550.127.05-0ubuntu1"

// The NVIDIA driver moves with the kernel on the GPU servers: a staging
// record of the kernel alone proves it for the control-plane node, not
// for the GPU servers, whose blocker names the driver staging never ran
// with it; a soaked green staging round with the driver proves both.
func TestProductionJudgesTheNvidiaDriverWithTheKernel(t *testing.T) {
	f := newFleet(t, production)
	for _, n := range []string{"gpu-1", "gpu-2"} {
		f.host(n).Packages = []steps.PlannedPackage{nvidiaDriver}
	}
	f.upstreamRecord(stagingOutcome("staging-2026-09", f.now.Add(-900*time.Hour), fTarget, nil), nil)
	_, res := f.call("plan_round", map[string]any{"round": prodRound})
	if res.Status != StatusFailed {
		t.Fatalf("plan_round with a driver staging never ran: %s %v", res.Status, res.Reasons)
	}
	why := "kernel " + fTarget + " with NVIDIA " + nvidiaDriverWords + " never closed a round in staging: staging's round staging-2026-09 closed green with it but without NVIDIA " + nvidiaDriverWords
	for _, n := range []string{"gpu-1", "gpu-2"} {
		if !strings.Contains(reasons(res), n+": "+why) {
			t.Errorf("no driver blocker on %s: %v", n, res.Reasons)
		}
	}
	if strings.Contains(reasons(res), "cp-1: ") {
		t.Errorf("cp-1 moves no driver and its kernel is proven, yet it is blocked: %v", res.Reasons)
	}
	if md := f.planMD(prodRound); !strings.Contains(md, "| "+fTarget+" | "+nvidiaDriverWords+" | **no** |") {
		t.Errorf("plan.md does not show the driver's verdict:\n%s", md)
	}

	f.upstreamRecord(stagingOutcome("staging-2026-10", f.now.Add(-300*time.Hour), fTarget, func(k *promotion.Kernel) { k.Nvidia = []string{nvidiaDriverWords} }), nil)
	if res := f.decide(map[string]any{"decision": "resume", "reason": "staging ran the driver with the kernel"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "plan_round", map[string]any{"round": prodRound})
	if md := f.planMD(prodRound); !strings.Contains(md, "| "+fTarget+" | "+nvidiaDriverWords+" | yes | kernel "+fTarget+" closed green in staging's round staging-2026-10") ||
		!strings.Contains(md, "| "+fTarget+" | - | yes | kernel "+fTarget+" closed green in staging's round staging-2026-09") {
		t.Errorf("plan.md does not show the proofs of the kernel alone and with the driver:\n%s", md)
	}
}

// Lessons carried: a lesson staging's round wrote (in the shared intent
// repository) appears in production's plan.md marked with its
// environment and round, and read_intent says which environment wrote it.
func TestStagingLessonsReachProductionsPlan(t *testing.T) {
	f := newFleet(t, production)
	start := f.now
	f.upstreamRecord(stagingOutcome("staging-2026-10", start.Add(-300*time.Hour), fTarget, nil), nil)
	const lesson = "The canary's RDMA rail came up 90 s after the driver pod; wait for the rail before the smoke test."
	p := filepath.Join(f.repo, "gpu-fleet", "lessons.md")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, []byte("\n## 2026-10-21 · round staging-2026-10 · `P4`\n\n"+lesson+"\n")...)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, f.repo, "commit", "-qam", "merge staging's lesson")
	f.must(StatusOK, "plan_round", map[string]any{"round": prodRound})
	if md := f.planMD(prodRound); !strings.Contains(md, "(from staging, round staging-2026-10): "+lesson) {
		t.Errorf("plan.md does not carry staging's lesson with its source:\n%s", md)
	}
	m := f.must(StatusOK, "read_intent", map[string]any{"component": "gpu-fleet"})
	found := false
	for _, l := range m["component"].(map[string]any)["lessons"].([]any) {
		l := l.(map[string]any)
		if l["round"] == "staging-2026-10" {
			found = true
			if l["environment"] != "staging" {
				t.Errorf("read_intent's lesson of staging-2026-10 names environment %v", l["environment"])
			}
		} else if l["environment"] != nil {
			t.Errorf("read_intent's lesson of round %v names environment %v", l["round"], l["environment"])
		}
	}
	if !found {
		t.Errorf("read_intent does not list staging's lesson: %v", m["component"].(map[string]any)["lessons"])
	}
}
