package policy

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// zeroRand makes nonces predictable in format tests.
type zeroRand struct{}

func (zeroRand) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

func TestRequestCanonicalText(t *testing.T) {
	clock := fixedClock(time.Date(2026, 11, 29, 14, 0, 0, 999, time.FixedZone("CET", 3600)))
	approval, err := NewRequest("drain_node", "gpu-03", "2026-11", testDigest,
		[]string{"node gpu-03: cordon, then evict 2 pods", "kernels: 6.8.0-45 -> 6.8.0-49"}, 2*time.Hour, clock, zeroRand{})
	if err != nil {
		t.Fatal(err)
	}
	risk, err := NewAttestation(KindResidualRiskAccepted, AttestationFields{Node: "*", Round: "2026-11", Step: NoStop, Stop: NoStop,
		Reason: "NVIDIA 550.90 builds with warnings on 6.8.0-49", ReviewTrigger: "driver-version-change:550.90.07"},
		nil, time.Hour, clock, zeroRand{})
	if err != nil {
		t.Fatal(err)
	}
	resume, err := NewAttestation(KindRoundResume, AttestationFields{Node: "gpu-03", Round: "2026-11",
		Reason: "RDMA rail fixed by hand", Step: "verify", Stop: "42 sha256:" + strings.Repeat("cd", 32)},
		[]string{"the round stopped at verify on gpu-03: rdma rail mlx5_3 down"}, 30*time.Minute, clock, zeroRand{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := NewAttestation(KindHypervisorSnapshotTaken, AttestationFields{Node: "cp-01", Round: "2026-11"},
		[]string{"snapshot cp-01-2026-11 on hv-2"}, time.Hour, clock, zeroRand{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"approval", approval, `mcp-patch approval request v1
tool: drain_node
node: gpu-03
round: 2026-11
plan-digest: sha256:abababababababababababababababababababababababababababababababab
issued: 2026-11-29T13:00:00Z
expires: 2026-11-29T15:00:00Z
nonce: 000102030405060708090a0b0c0d0e0f
summary: node gpu-03: cordon, then evict 2 pods
summary: kernels: 6.8.0-45 -> 6.8.0-49
`},
		{"residual risk, whole fleet", risk, `mcp-patch attestation v1
kind: residual_risk_accepted
node: *
round: 2026-11
step: none
stop: none
reason: NVIDIA 550.90 builds with warnings on 6.8.0-49
review-trigger: driver-version-change:550.90.07
issued: 2026-11-29T13:00:00Z
expires: 2026-11-29T14:00:00Z
nonce: 000102030405060708090a0b0c0d0e0f
`},
		{"resume, bound to its stop", resume, `mcp-patch attestation v1
kind: round_resume
node: gpu-03
round: 2026-11
step: verify
stop: 42 sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd
reason: RDMA rail fixed by hand
issued: 2026-11-29T13:00:00Z
expires: 2026-11-29T13:30:00Z
nonce: 000102030405060708090a0b0c0d0e0f
summary: the round stopped at verify on gpu-03: rdma rail mlx5_3 down
`},
		{"snapshot", snap, `mcp-patch attestation v1
kind: hypervisor_snapshot_taken
node: cp-01
round: 2026-11
issued: 2026-11-29T13:00:00Z
expires: 2026-11-29T14:00:00Z
nonce: 000102030405060708090a0b0c0d0e0f
summary: snapshot cp-01-2026-11 on hv-2
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, string(tt.req.Canonical())); diff != "" {
				t.Errorf("Canonical (-want +got):\n%s", diff)
			}
			back, err := ParseRequest([]byte(tt.want))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.req, back); diff != "" {
				t.Errorf("ParseRequest(Canonical) (-built +parsed):\n%s", diff)
			}
		})
	}
}

func TestAttestationKindsRoundTrip(t *testing.T) {
	for _, k := range []Kind{KindHypervisorSnapshotTaken, KindResidualRiskAccepted, KindRoundResume, KindRoundAbort} {
		t.Run(string(k), func(t *testing.T) {
			f := AttestationFields{Node: "gpu-07", Round: "2026-11"}
			if k != KindHypervisorSnapshotTaken {
				f.Reason = "checked by hand: the RDMA rail came back after a cable swap"
			}
			if k == KindResidualRiskAccepted {
				f.ReviewTrigger = "kernel-version-change:6.8.0-49"
			}
			if k == KindRoundResume || k == KindRoundAbort || k == KindResidualRiskAccepted {
				f.Step, f.Stop = "gate", "7 sha256:"+strings.Repeat("0f", 32)
			}
			r, err := NewAttestation(k, f, []string{"gate: rdma rail mlx5_3 down, now up"}, time.Hour, fixedClock(t0), nil)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseRequest(r.Canonical())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(r, back); diff != "" {
				t.Errorf("round trip (-built +parsed):\n%s", diff)
			}
			if !strings.HasPrefix(r.String(), attestationHeader+"\nkind: "+string(k)+"\n") {
				t.Errorf("header: %q", r.String())
			}
		})
	}
}

func TestNewRequestRefuses(t *testing.T) {
	ok := func() (string, string, string, string, []string, time.Duration) {
		return "drain_node", "gpu-03", "2026-11", testDigest, []string{"fine"}, time.Hour
	}
	tests := []struct {
		name   string
		modify func(tool, node, round, digest *string, summary *[]string, ttl *time.Duration)
		want   string
	}{
		{"zero ttl", func(_, _, _, _ *string, _ *[]string, ttl *time.Duration) { *ttl = 0 }, "ttl"},
		{"ttl beyond max", func(_, _, _, _ *string, _ *[]string, ttl *time.Duration) { *ttl = LifetimeCeiling + time.Second }, "ttl"},
		{"tool with capital", func(tool, _, _, _ *string, _ *[]string, _ *time.Duration) { *tool = "Drain" }, "tool"},
		{"node with underscore", func(_, node, _, _ *string, _ *[]string, _ *time.Duration) { *node = "gpu_03" }, "node"},
		{"node star on approval", func(_, node, _, _ *string, _ *[]string, _ *time.Duration) { *node = "*" }, "node"},
		{"empty round", func(_, _, round, _ *string, _ *[]string, _ *time.Duration) { *round = "" }, "round"},
		{"digest upper hex", func(_, _, _, d *string, _ *[]string, _ *time.Duration) { *d = strings.ToUpper(*d) }, "plan-digest"},
		{"summary newline", func(_, _, _, _ *string, s *[]string, _ *time.Duration) { *s = []string{"a\nnonce: x"} }, "summary"},
		{"summary non-ascii", func(_, _, _, _ *string, s *[]string, _ *time.Duration) { *s = []string{"evict pod \u202egnp.exe"} }, "summary"},
		{"summary empty line", func(_, _, _, _ *string, s *[]string, _ *time.Duration) { *s = []string{""} }, "summary"},
		{"summary too long", func(_, _, _, _ *string, s *[]string, _ *time.Duration) {
			*s = []string{strings.Repeat("x", MaxSummaryLength+1)}
		}, "summary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool, node, round, digest, summary, ttl := ok()
			tt.modify(&tool, &node, &round, &digest, &summary, &ttl)
			_, err := NewRequest(tool, node, round, digest, summary, ttl, fixedClock(t0), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error about %s", err, tt.want)
			}
		})
	}
	if _, err := NewAttestation(KindApproval, AttestationFields{Node: "a", Round: "b"}, nil, time.Hour, nil, nil); err == nil {
		t.Error("NewAttestation(KindApproval) succeeded")
	}
	if _, err := NewAttestation(KindRoundResume, AttestationFields{Node: "a", Round: "b", Step: NoStop, Stop: NoStop}, nil, time.Hour, nil, nil); err == nil {
		t.Error("round_resume without a reason succeeded")
	}
	for _, f := range []AttestationFields{
		{Node: "a", Round: "b", Reason: "r"},                                     // no stop named
		{Node: "a", Round: "b", Reason: "r", Step: "gate", Stop: NoStop},         // half a stop
		{Node: "a", Round: "b", Reason: "r", Step: "gate", Stop: "42"},           // no digest
		{Node: "a", Round: "b", Reason: "r", Step: "Gate", Stop: "42 sha256:00"}, // bad step, short digest
	} {
		if _, err := NewAttestation(KindRoundResume, f, nil, time.Hour, nil, nil); err == nil {
			t.Errorf("round_resume with step %q stop %q succeeded", f.Step, f.Stop)
		}
	}
	if _, err := NewAttestation(KindRoundAbort, AttestationFields{Node: "a", Round: "b", Reason: "r", ReviewTrigger: "x:y"}, nil, time.Hour, nil, nil); err == nil {
		t.Error("round_abort with a review trigger succeeded")
	}
}

func TestParseRequestRefuses(t *testing.T) {
	good := string(newTestRequest(t, t0).Canonical())
	lines := strings.SplitAfter(good, "\n")
	swap := func(i, j int) string {
		l := append([]string(nil), lines...)
		l[i], l[j] = l[j], l[i]
		return strings.Join(l, "")
	}
	tests := []struct {
		name, text, want string
	}{
		{"empty", "", "empty"},
		{"no final newline", strings.TrimSuffix(good, "\n"), "newline"},
		{"CRLF", strings.ReplaceAll(good, "\n", "\r\n"), "CR"},
		{"bare CR inside a value", strings.Replace(good, "gpu-03\n", "gpu-03\rnode: gpu-04\n", 1), "CR"},
		{"tab", strings.Replace(good, "node: ", "node:\t", 1), "printable"},
		{"non-ASCII", strings.Replace(good, "evict", "évict", 1), "printable"},
		{"wrong header", strings.Replace(good, "v1", "v2", 1), "line 1"},
		{"unknown field", strings.Replace(good, "round: ", "color: blue\nround: ", 1), `unknown field "color"`},
		{"duplicate field", strings.Replace(good, "round: ", "node: gpu-04\nround: ", 1), "duplicate field node"},
		{"duplicate after nonce", good + "node: gpu-04\n", "duplicate field node"},
		{"fields reordered", swap(1, 2), "want field tool"},
		{"missing field", strings.Replace(good, "round: 2026-11\n", "", 1), "want field round"},
		{"trailing junk", good + "garbage\n", "name: value"},
		{"trailing blank line", good + "\n", "name: value"},
		{"two spaces after colon", strings.Replace(good, "node: ", "node:  ", 1), "node"},
		{"upper-case name", strings.Replace(good, "node: ", "Node: ", 1), "bad field name"},
		{"issued with fraction", strings.Replace(good, ":00Z", ":00.5Z", 1), "issued"},
		{"issued with offset", strings.Replace(good, ":00Z", ":00+00:00", 1), "issued"},
		{"expires with fraction", strings.Replace(good, lines[6], strings.Replace(lines[6], ":00Z", ":00.5Z", 1), 1), "expires"},
		{"expires before issued", strings.Replace(good, lines[6], "expires: 2026-11-29T13:59:59Z\n", 1), "not after issued"},
		{"no issue time", strings.Replace(good, lines[5], "", 1), "want field issued"},
		{"short nonce", strings.Replace(good, lines[7], "nonce: abc\n", 1), "nonce"},
		{"attestation kind unknown", "mcp-patch attestation v1\nkind: approval\n", "attestation kind"},
		{"attestation without kind", "mcp-patch attestation v1\n", "kind"},
		{"summary with leading space", good + "summary:  x\n", "summary"},
		{"too long", good + strings.Repeat("summary: x\n", MaxRequestBytes/10), "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	req := newTestRequest(t, t0)
	got := Describe(req)
	for _, want := range []string{
		"You approve: cordon node gpu-03 and evict its pods",
		"Patch round: 2026-11.",
		"Bound to plan " + testDigest,
		"Issued 2026-11-29 14:00:00 UTC, valid for 2 hours (until 2026-11-29 16:00:00 UTC), once.",
		"  - node gpu-03: cordon, then evict 3 pods",
		"Request " + req.ID(),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Describe lacks %q:\n%s", want, got)
		}
	}
	resume, err := NewAttestation(KindRoundResume, AttestationFields{Node: "gpu-03", Round: "2026-11", Reason: "fixed",
		Step: "gate", Stop: "9 sha256:" + strings.Repeat("ab", 32)}, nil, 90*time.Minute, fixedClock(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"valid for 1 hour 30 minutes", "only the stop at step gate recorded in the journal as record 9"} {
		if got := Describe(resume); !strings.Contains(got, want) {
			t.Errorf("Describe(resume) lacks %q:\n%s", want, got)
		}
	}
	risk, err := NewAttestation(KindResidualRiskAccepted, AttestationFields{Node: "*", Round: "2026-11", Step: NoStop, Stop: NoStop,
		Reason: "driver warnings", ReviewTrigger: "driver-version-change:550.90.07"}, nil, time.Hour, fixedClock(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := Describe(risk); !strings.Contains(got, "the whole fleet") || !strings.Contains(got, "driver-version-change:550.90.07") {
		t.Errorf("Describe(residual risk):\n%s", got)
	}
}

func TestRequestIDCoversNonce(t *testing.T) {
	a, b := newTestRequest(t, t0), newTestRequest(t, t0)
	if a.ID() == b.ID() || len(a.ID()) != 24 {
		t.Errorf("IDs %q and %q", a.ID(), b.ID())
	}
	if !bytes.Equal(a.Canonical(), []byte(a.String())) {
		t.Error("String and Canonical differ")
	}
}

func TestDurationWords(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0 seconds"},
		{time.Second, "1 second"},
		{30 * time.Minute, "30 minutes"},
		{90 * time.Minute, "1 hour 30 minutes"},
		{24 * time.Hour, "1 day"},
		{180 * 24 * time.Hour, "180 days"},
		{49*time.Hour + 59*time.Minute, "2 days 1 hour"},
		{time.Hour + 5*time.Second, "1 hour"},
		{-2 * time.Hour, "minus 2 hours"},
	} {
		if got := DurationWords(tt.d); got != tt.want {
			t.Errorf("DurationWords(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
