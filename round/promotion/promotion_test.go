package promotion_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round/promotion"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func outcome(env, id string, closed time.Time, ks ...promotion.Kernel) promotion.Outcome {
	return promotion.Outcome{Version: promotion.Version, Environment: env, Round: id, Closed: closed, FleetCheck: true,
		SoakStarted: closed.Add(-50 * time.Hour), SoakEnded: closed.Add(-time.Hour), Kernels: ks}
}

func green(k string, nodes ...string) promotion.Kernel {
	return promotion.Kernel{Kernel: k, Promoted: nodes, FellBack: []string{}, RolledBack: []string{}, Red: []string{}}
}

const (
	drv  = "nvidia-driver-550 550.127.05-0ubuntu1"
	mods = "linux-modules-nvidia-550-6.8.0-51-generic 6.8.0-51.52"
)

func withNvidia(k promotion.Kernel, pkgs ...string) promotion.Kernel {
	k.Nvidia = pkgs
	return k
}

func TestJudge(t *testing.T) {
	const k = "6.8.0-51-generic"
	week := 7 * 24 * time.Hour
	fellBack := green(k, "gpu-1")
	fellBack.FellBack = []string{"gpu-2"}
	rolled := green(k)
	rolled.RolledBack = []string{"gpu-1"}
	red := green(k, "cp-1")
	red.Red = []string{"cp-1: gate"}
	aborted := outcome("staging", "staging-2026-11", t0, green(k, "gpu-1"))
	aborted.Aborted = true
	for _, tc := range []struct {
		name     string
		gate     promotion.Gate
		nvidia   []string
		proven   bool
		why, fix string
		risk     bool
	}{
		{name: "soaked with the NVIDIA packages it ran upstream", gate: promotion.Gate{Now: t0.Add(week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, withNvidia(green(k, "gpu-1"), drv, mods))}}},
			nvidia: []string{mods}, proven: true, why: "soaked 7 day(s) until 2026-12-08 10:00 UTC; with NVIDIA " + mods},
		{name: "NVIDIA packages never run upstream with the kernel", gate: promotion.Gate{Now: t0.Add(week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, withNvidia(green(k, "gpu-1"), drv))}}},
			nvidia: []string{drv, mods}, why: "kernel " + k + " with NVIDIA " + drv + ", " + mods + " never closed a round in staging: staging's round s1 closed green with it but without NVIDIA " + mods,
			fix: "pin the NVIDIA packages"},
		{name: "a record without NVIDIA packages proves none", gate: promotion.Gate{Now: t0.Add(week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, green(k, "gpu-1"))}}},
			nvidia: []string{mods}, why: "without NVIDIA " + mods},
		{name: "a later green round with the NVIDIA packages proves them once soaked", gate: promotion.Gate{Now: t0.Add(week + 2*time.Hour), Proofs: []promotion.Proof{
			{Outcome: outcome("staging", "s1", t0, green(k, "gpu-1"))}, {Outcome: outcome("staging", "s2", t0.Add(time.Hour), withNvidia(green(k, "gpu-1"), mods))}}},
			nvidia: []string{mods}, proven: true, why: "round s2"},
		{name: "a later green round with the NVIDIA packages still soaking", gate: promotion.Gate{Now: t0.Add(week), Proofs: []promotion.Proof{
			{Outcome: outcome("staging", "s1", t0, green(k, "gpu-1"))}, {Outcome: outcome("staging", "s2", t0.Add(time.Hour), withNvidia(green(k, "gpu-1"), mods))}}},
			nvidia: []string{mods}, why: "still soaking in staging until 2026-12-08 11:00 UTC (round s2"},
		{name: "a person's promotion covers the NVIDIA packages", gate: promotion.Gate{Promoted: []promotion.Promoted{{Kernel: k, Principal: "bob", Reason: "r", ApprovalID: "abc"}}},
			nvidia: []string{mods}, proven: true, why: "promoted into production by bob", risk: true},
		{name: "never ran upstream", gate: promotion.Gate{},
			why: "kernel " + k + " never closed a round in staging", fix: "record_decision kernel_promoted"},
		{name: "other kernel only", gate: promotion.Gate{Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, green("6.8.0-50-generic", "gpu-1"))}}},
			why: "never closed a round in staging"},
		{name: "another environment's round proves nothing", gate: promotion.Gate{Proofs: []promotion.Proof{{Outcome: outcome("production-b", "p1", t0, green(k, "gpu-1"))}}},
			why: "never closed a round in staging"},
		{name: "still soaking", gate: promotion.Gate{Now: t0.Add(week - time.Minute), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, green(k, "gpu-1"))}}},
			why: "still soaking in staging until 2026-12-08 10:00 UTC (round s1 closed green 2026-12-01 10:00 UTC)"},
		{name: "soaked", gate: promotion.Gate{Now: t0.Add(week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, green(k, "gpu-1")), Principal: "alice", Path: "rounds/s1/outcome.json"}}},
			proven: true, why: "closed green in staging's round s1 on 2026-12-01 10:00 UTC (certified by alice, rounds/s1/outcome.json) and soaked 7 day(s)"},
		{name: "the earliest green round counts", gate: promotion.Gate{Now: t0.Add(week), Proofs: []promotion.Proof{
			{Outcome: outcome("staging", "s2", t0.Add(time.Hour), green(k, "gpu-1"))}, {Outcome: outcome("staging", "s1", t0, green(k, "gpu-1"))}}},
			proven: true, why: "round s1"},
		{name: "fell back", gate: promotion.Gate{Now: t0.Add(2 * week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, fellBack)}}},
			why: "kernel " + k + " fell back on gpu-2 in staging's round s1"},
		{name: "a fallback in one round blocks a green one", gate: promotion.Gate{Now: t0.Add(2 * week), Proofs: []promotion.Proof{
			{Outcome: outcome("staging", "s1", t0, green(k, "gpu-1"))}, {Outcome: outcome("staging", "s2", t0.Add(time.Hour), fellBack)}}},
			why: "fell back on gpu-2 in staging's round s2"},
		{name: "rolled back", gate: promotion.Gate{Now: t0.Add(2 * week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, rolled)}}},
			why: "was rolled back on gpu-1 in staging's round s1"},
		{name: "red gate", gate: promotion.Gate{Now: t0.Add(2 * week), Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, red)}}},
			why: "failed checks (cp-1: gate) in staging's round s1"},
		{name: "aborted round", gate: promotion.Gate{Now: t0.Add(2 * week), Proofs: []promotion.Proof{{Outcome: aborted}}},
			why: "staging's round staging-2026-11 did not close green (aborted)"},
		{name: "rejected records are named", gate: promotion.Gate{Rejected: []promotion.Rejected{{Path: "rounds/s9/outcome.json", Why: "the record was changed after it was signed"}}},
			why: "upstream records that prove nothing: rounds/s9/outcome.json (the record was changed after it was signed)"},
		{name: "a person promoted it", gate: promotion.Gate{Proofs: []promotion.Proof{{Outcome: outcome("staging", "s1", t0, fellBack)}},
			Promoted: []promotion.Promoted{{Kernel: k, Principal: "bob", Reason: "CVE fix cannot wait", ApprovalID: "abc"}}},
			proven: true, why: "promoted into production by bob without proof from staging (statement abc)", risk: true},
		{name: "a promotion of another kernel does not count", gate: promotion.Gate{Promoted: []promotion.Promoted{{Kernel: "6.8.0-52-generic", Principal: "bob"}}},
			why: "never closed a round in staging"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.gate
			g.Environment, g.Upstream, g.Soak = "production", "staging", week
			v := g.JudgeWith(k, tc.nvidia)
			if v.Proven != tc.proven || !strings.Contains(v.Why, tc.why) || (v.Risk != "") != tc.risk {
				t.Fatalf("Judge = %+v, want proven %v, why containing %q, risk %v", v, tc.proven, tc.why, tc.risk)
			}
			if !v.Proven && !strings.Contains(v.Fix, tc.fix) {
				t.Fatalf("fix %q, want it to contain %q", v.Fix, tc.fix)
			}
			if v.Proven && !tc.risk && v.Fix != "" {
				t.Fatalf("a proven kernel has a fix: %q", v.Fix)
			}
		})
	}
}

func TestLinesAndRoundTrip(t *testing.T) {
	k := green("6.8.0-51-generic", "gpu-1", "gpu-2")
	k.FellBack = []string{"gpu-3"}
	o := outcome("staging", "staging-2026-12", t0, k)
	want := []string{
		"round staging-2026-12 in staging closed 2026-12-01 10:00 UTC after autoremove",
		"fleet kernel check: green; soaked 2026-11-29 08:00 UTC to 2026-12-01 09:00 UTC",
		"kernel 6.8.0-51-generic: promoted on 2 node(s) (gpu-1, gpu-2); fell back on gpu-3",
	}
	if got := o.Lines(); !slices.Equal(got, want) {
		t.Fatalf("Lines:\n%q\nwant\n%q", got, want)
	}
	b, err := o.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := promotion.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Lines(), want) {
		t.Fatalf("decoded record says %q", back.Lines())
	}
	for name, bad := range map[string]string{
		"unknown field": strings.Replace(string(b), `"version": 1,`, `"version": 1, "trusted": true,`, 1),
		"version":       strings.Replace(string(b), `"version": 1,`, `"version": 2,`, 1),
		"no round":      strings.Replace(string(b), `"round": "staging-2026-12",`, `"round": "",`, 1),
	} {
		if _, err := promotion.Decode([]byte(bad)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestManyNodesAreCounted(t *testing.T) {
	var nodes []string
	for i := range 40 {
		nodes = append(nodes, "gpu-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	o := outcome("staging", "s1", t0, green("6.8.0-51-generic", nodes...))
	line := o.Lines()[2]
	if !strings.Contains(line, "promoted on 40 node(s)") || !strings.Contains(line, "and 28 more") || len(line) > 1000 {
		t.Fatalf("line %q", line)
	}
}

// writeRound commits an outcome record and a statement text in root.
func writeRound(t *testing.T, root, id string, raw []byte, statement string) {
	t.Helper()
	dir := filepath.Join(root, "rounds", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		if err := os.WriteFile(filepath.Join(dir, promotion.OutcomeFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if statement != "" {
		if err := os.WriteFile(filepath.Join(dir, promotion.StatementFile), []byte(statement), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoad drives Load with a verify function standing in for the
// signature check (policy's own tests and the service's test sign for
// real): what Load adds is holding the statement to the record.
func TestLoad(t *testing.T) {
	root := t.TempDir()
	enc := func(o promotion.Outcome) []byte {
		b, err := o.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := outcome("staging", "s1", t0, green("6.8.0-51-generic", "gpu-1"))
	goodRaw := enc(good)
	// The stand-in "signature": the statement text is the digest the
	// person signed; "bad" fails verification.
	statements := map[string]promotion.Statement{}
	stmt := func(name string, st promotion.Statement) string { statements[name] = st; return name }
	verify := func(_ context.Context, text string) (promotion.Statement, error) {
		st, ok := statements[text]
		if !ok {
			return promotion.Statement{}, errors.New("bad signature")
		}
		return st, nil
	}
	bind := func(o promotion.Outcome, raw []byte) promotion.Statement {
		return promotion.Statement{Environment: o.Environment, Round: o.Round, Digest: promotion.Digest(raw), Summary: o.Lines(), Principal: "alice"}
	}
	writeRound(t, root, "s1", goodRaw, stmt("s1", bind(good, goodRaw)))
	// Edited after signing: a node's fallback removed.
	edited := outcome("staging", "s2", t0, green("6.8.0-52-generic", "gpu-1"))
	orig := edited
	orig.Kernels = []promotion.Kernel{{Kernel: "6.8.0-52-generic", Promoted: []string{"gpu-1"}, FellBack: []string{"gpu-2"}, RolledBack: []string{}, Red: []string{}}}
	writeRound(t, root, "s2", enc(edited), stmt("s2", bind(orig, enc(orig))))
	// Hand-written: no statement at all.
	writeRound(t, root, "s3", enc(outcome("staging", "s3", t0, green("6.8.0-53-generic", "gpu-1"))), "")
	// A statement that does not verify.
	s4 := outcome("staging", "s4", t0, green("6.8.0-54-generic", "gpu-1"))
	writeRound(t, root, "s4", enc(s4), "forged")
	// A record copied into another round's directory.
	writeRound(t, root, "s5", goodRaw, stmt("s5", bind(good, goodRaw)))
	// Another environment's round is not read, signed or not.
	writeRound(t, root, "p1", enc(outcome("production", "p1", t0, green("6.8.0-51-generic", "gpu-9"))), "")
	// A round without an outcome (still open) is skipped.
	writeRound(t, root, "s6", nil, "")
	// A link instead of the record is refused.
	writeRound(t, root, "s7", nil, "")
	if err := os.Symlink(filepath.Join(root, "rounds", "s1", promotion.OutcomeFile), filepath.Join(root, "rounds", "s7", promotion.OutcomeFile)); err != nil {
		t.Fatal(err)
	}

	proofs, rejected, err := promotion.Load(context.Background(), root, "staging", verify)
	if err != nil {
		t.Fatal(err)
	}
	if len(proofs) != 1 || proofs[0].Outcome.Round != "s1" || proofs[0].Principal != "alice" || proofs[0].Path != "rounds/s1/outcome.json" {
		t.Fatalf("proofs %+v", proofs)
	}
	want := map[string]string{
		"rounds/s2/outcome.json": "the record was changed after it was signed",
		"rounds/s3/outcome.json": "no signed statement",
		"rounds/s4/outcome.json": "its statement does not verify: bad signature",
		"rounds/s5/outcome.json": "the record says s1 in rounds/s5",
		"rounds/s7/outcome.json": "symbolic link",
	}
	if len(rejected) != len(want) {
		t.Fatalf("rejected %+v, want %d", rejected, len(want))
	}
	for _, r := range rejected {
		if !strings.Contains(r.Why, want[r.Path]) || want[r.Path] == "" {
			t.Errorf("%s rejected for %q, want %q", r.Path, r.Why, want[r.Path])
		}
	}
	// No repository rounds at all: nothing, no error.
	if p, r, err := promotion.Load(context.Background(), t.TempDir(), "staging", verify); err != nil || len(p)+len(r) != 0 {
		t.Fatalf("empty repository: %v %v %v", p, r, err)
	}
}

func TestCheckSummary(t *testing.T) {
	o := outcome("staging", "s1", t0, green("6.8.0-51-generic", "gpu-1"))
	raw, err := o.Encode()
	if err != nil {
		t.Fatal(err)
	}
	st := promotion.Statement{Environment: "staging", Round: "s1", Digest: promotion.Digest(raw), Summary: o.Lines()}
	if why := promotion.Check(st, "s1", o, raw); why != "" {
		t.Fatalf("a matching statement: %s", why)
	}
	st.Summary = append(slices.Clone(st.Summary[:2]), "kernel 6.8.0-51-generic: promoted on 9 node(s)")
	if why := promotion.Check(st, "s1", o, raw); !strings.Contains(why, "summary") {
		t.Fatalf("a rewritten summary: %q", why)
	}
	st = promotion.Statement{Environment: "production", Round: "s1", Digest: promotion.Digest(raw), Summary: o.Lines()}
	if why := promotion.Check(st, "s1", o, raw); !strings.Contains(why, "environment production") {
		t.Fatalf("another environment: %q", why)
	}
}
