package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var outcomeDigest = "sha256:" + strings.Repeat("5e", 32)

func newOutcome(t testing.TB, issued time.Time, ttl time.Duration) Request {
	t.Helper()
	r, err := NewAttestation(KindRoundOutcome, AttestationFields{Environment: "staging", Round: "2026-11", Digest: outcomeDigest},
		[]string{"6.8.0-49-generic: 12 nodes, green, soaked 72 hours", "6.8.0-50-generic: rolled back on gpu-07 (verify failed)"},
		ttl, fixedClock(issued), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newPromotion(t testing.TB, issued time.Time, ttl time.Duration) Request {
	t.Helper()
	r, err := NewAttestation(KindKernelPromoted, AttestationFields{Environment: "production", Round: "2026-12",
		Kernel: "6.8.0-49-generic", Reason: "staging soak cut short by a power test; same kernel runs in the lab for 30 days"},
		[]string{"no round_outcome from staging names 6.8.0-49-generic"}, ttl, fixedClock(issued), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRecordKindsCanonicalText(t *testing.T) {
	clock := fixedClock(time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC))
	outcome, err := NewAttestation(KindRoundOutcome, AttestationFields{Environment: "staging", Round: "2026-11", Digest: outcomeDigest},
		[]string{"6.8.0-49-generic: 12 nodes, green, soaked 72 hours"}, time.Hour, clock, zeroRand{})
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := NewAttestation(KindKernelPromoted, AttestationFields{Environment: "production", Round: "2026-12",
		Kernel: "6.8.0-49-generic", Reason: "staging soak cut short"}, nil, time.Hour, clock, zeroRand{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"round outcome", outcome, `mcp-patch attestation v1
kind: round_outcome
environment: staging
round: 2026-11
outcome-digest: sha256:5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e
issued: 2026-11-29T14:00:00Z
expires: 2026-11-29T15:00:00Z
nonce: 000102030405060708090a0b0c0d0e0f
summary: 6.8.0-49-generic: 12 nodes, green, soaked 72 hours
`},
		{"kernel promoted", promoted, `mcp-patch attestation v1
kind: kernel_promoted
environment: production
round: 2026-12
kernel: 6.8.0-49-generic
reason: staging soak cut short
issued: 2026-11-29T14:00:00Z
expires: 2026-11-29T15:00:00Z
nonce: 000102030405060708090a0b0c0d0e0f
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
			if !tt.req.Kind.IsAttestation() || !tt.req.Kind.IsRecord() {
				t.Errorf("%s: IsAttestation %v, IsRecord %v; want both", tt.req.Kind, tt.req.Kind.IsAttestation(), tt.req.Kind.IsRecord())
			}
		})
	}
	for _, k := range []Kind{KindApproval, KindHypervisorSnapshotTaken, KindResidualRiskAccepted, KindRoundResume, KindRoundAbort} {
		if k.IsRecord() {
			t.Errorf("%s.IsRecord() = true", k)
		}
	}
}

// Each field of the two record kinds, wrong, is refused by NewAttestation
// (Validate), naming the field.
func TestNewRecordAttestationRefuses(t *testing.T) {
	outcome := AttestationFields{Environment: "staging", Round: "2026-11", Digest: outcomeDigest}
	promoted := AttestationFields{Environment: "production", Round: "2026-12", Kernel: "6.8.0-49-generic", Reason: "soak cut short"}
	with := func(f AttestationFields, edit func(*AttestationFields)) AttestationFields {
		edit(&f)
		return f
	}
	tests := []struct {
		name string
		kind Kind
		f    AttestationFields
		want string // "" means accepted
	}{
		{"outcome", KindRoundOutcome, outcome, ""},
		{"outcome, environment of 63", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = strings.Repeat("a", 63) }), ""},
		{"outcome, environment one digit", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = "1" }), ""},
		{"outcome, no environment", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = "" }), "field environment is empty"},
		{"outcome, environment upper case", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = "Staging" }), "field environment"},
		{"outcome, environment leading dash", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = "-staging" }), "field environment"},
		{"outcome, environment trailing dash", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = "staging-" }), "field environment"},
		{"outcome, environment with a dot", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = "eu.staging" }), "field environment"},
		{"outcome, environment of 64", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Environment = strings.Repeat("a", 64) }), "field environment"},
		{"outcome, no round", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Round = "" }), "field round is empty"},
		{"outcome, bad round", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Round = "2026 11" }), "field round"},
		{"outcome, no digest", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Digest = "" }), "field outcome-digest is empty"},
		{"outcome, digest upper hex", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Digest = strings.ToUpper(outcomeDigest) }), "field outcome-digest"},
		{"outcome, digest short", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Digest = outcomeDigest[:70] }), "field outcome-digest"},
		{"outcome, digest sha512", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Digest = "sha512:" + strings.Repeat("5e", 32) }), "field outcome-digest"},
		{"outcome, with a node", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Node = "gpu-03" }), "field node does not belong"},
		{"outcome, with a kernel", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Kernel = "6.8.0-49-generic" }), "field kernel does not belong"},
		{"outcome, with a reason", KindRoundOutcome, with(outcome, func(f *AttestationFields) { f.Reason = "r" }), "field reason does not belong"},

		{"promoted", KindKernelPromoted, promoted, ""},
		{"promoted, kernel with + and ~", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "6.8.0+rc1~bpo12_amd64" }), ""},
		{"promoted, kernel of 100", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "6" + strings.Repeat("x", 99) }), ""},
		{"promoted, no environment", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Environment = "" }), "field environment is empty"},
		{"promoted, environment with underscore", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Environment = "prod_eu" }), "field environment"},
		{"promoted, no kernel", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "" }), "field kernel is empty"},
		{"promoted, kernel starts with a letter", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "v6.8.0" }), "field kernel"},
		{"promoted, kernel with a space", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "6.8.0 generic" }), "field kernel"},
		{"promoted, kernel with a slash", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "6.8.0/../x" }), "field kernel"},
		{"promoted, kernel of 101", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Kernel = "6" + strings.Repeat("x", 100) }), "field kernel"},
		{"promoted, no reason", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Reason = "" }), "field reason is empty"},
		{"promoted, reason with trailing space", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Reason = "soak cut short " }), "field reason"},
		{"promoted, reason non-ASCII", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Reason = "soak cut short \u202e" }), "field reason"},
		{"promoted, reason too long", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Reason = strings.Repeat("x", MaxReasonLength+1) }), "field reason"},
		{"promoted, bad round", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Round = "-12" }), "field round"},
		{"promoted, with a digest", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Digest = outcomeDigest }), "field outcome-digest does not belong"},
		{"promoted, with a step", KindKernelPromoted, with(promoted, func(f *AttestationFields) { f.Step = "gate" }), "field step does not belong"},
		{"snapshot with an environment", KindHypervisorSnapshotTaken, AttestationFields{Node: "cp-01", Round: "2026-11", Environment: "staging"}, "field environment does not belong"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewAttestation(tt.kind, tt.f, nil, time.Hour, fixedClock(t0), nil)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// ParseRequest refuses each field of a record kind edited out of shape,
// missing, moved or foreign, naming it.
func TestParseRecordRefuses(t *testing.T) {
	outcome := string(newOutcome(t, t0, time.Hour).Canonical())
	promoted := string(newPromotion(t, t0, time.Hour).Canonical())
	line := func(text, name string) string {
		for l := range strings.SplitAfterSeq(text, "\n") {
			if strings.HasPrefix(l, name+": ") {
				return l
			}
		}
		t.Fatalf("no %s line in\n%s", name, text)
		return ""
	}
	set := func(text, name, v string) string { return strings.Replace(text, line(text, name), name+": "+v+"\n", 1) }
	drop := func(text, name string) string { return strings.Replace(text, line(text, name), "", 1) }
	tests := []struct {
		name, text, want string
	}{
		{"outcome environment upper case", set(outcome, "environment", "Staging"), "line 3: field environment"},
		{"outcome environment dotted", set(outcome, "environment", "eu.staging"), "field environment"},
		{"outcome environment missing", drop(outcome, "environment"), "want field environment, got field round"},
		{"outcome round bad", set(outcome, "round", "2026/11"), "field round"},
		{"outcome digest bad", set(outcome, "outcome-digest", "sha256:xyz"), "field outcome-digest"},
		{"outcome digest missing", drop(outcome, "outcome-digest"), "want field outcome-digest, got field issued"},
		{"outcome digest as plan-digest", strings.Replace(outcome, "outcome-digest: ", "plan-digest: ", 1), "want field outcome-digest, got field plan-digest"},
		{"outcome with a node", strings.Replace(outcome, "environment: ", "node: gpu-03\nenvironment: ", 1), "want field environment, got field node"},
		{"outcome with an unknown field", strings.Replace(outcome, "round: ", "region: eu\nround: ", 1), `unknown field "region"`},
		{"outcome fields reordered", strings.Replace(outcome, line(outcome, "environment")+line(outcome, "round"), line(outcome, "round")+line(outcome, "environment"), 1), "want field environment, got field round"},
		{"outcome with a kernel after nonce", outcome + "kernel: 6.8.0-49-generic\n", "only summary lines may follow nonce"},
		{"promoted kernel bad", set(promoted, "kernel", "latest"), "field kernel"},
		{"promoted kernel missing", drop(promoted, "kernel"), "want field kernel, got field reason"},
		{"promoted reason empty", set(promoted, "reason", ""), "field reason is empty"},
		{"promoted reason missing", drop(promoted, "reason"), "want field reason, got field issued"},
		{"promoted environment missing", drop(promoted, "environment"), "want field environment, got field round"},
		{"promoted environment bad", set(promoted, "environment", "prod-"), "field environment"},
		{"promoted duplicate kernel", strings.Replace(promoted, "reason: ", "kernel: 6.8.0-50-generic\nreason: ", 1), "duplicate field kernel"},
		{"promoted as outcome", strings.Replace(promoted, "kind: kernel_promoted", "kind: round_outcome", 1), "want field outcome-digest, got field kernel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q\n%s", err, tt.want, tt.text)
			}
		})
	}
}

func TestDescribeRecords(t *testing.T) {
	outcome := newOutcome(t, t0, 2*time.Hour)
	promoted := newPromotion(t, t0, time.Hour)
	tests := []struct {
		name string
		req  Request
		want []string
	}{
		{"round outcome", outcome, []string{
			"You certify that patch round 2026-11 in environment staging ended as summarised below; downstream environments will plan its kernels on the strength of this statement.\n",
			"Bound to the outcome record " + outcomeDigest + " committed for the round.\n",
			"Issued 2026-11-29 14:00:00 UTC, to be signed within 2 hours (until 2026-11-29 16:00:00 UTC). Once signed and committed it stands as a record, after that time too, for as long as your key stays in allowed_signers.\n",
			"  - 6.8.0-49-generic: 12 nodes, green, soaked 72 hours\n",
			"  - 6.8.0-50-generic: rolled back on gpu-07 (verify failed)\n",
			"Request " + outcome.ID() + ".\n",
		}},
		{"kernel promoted", promoted, []string{
			"You promote kernel 6.8.0-49-generic into environment production's round 2026-12 without proof from its upstream environment. " +
				"Your reason: staging soak cut short by a power test; same kernel runs in the lab for 30 days. This is a residual risk the round's report will name.\n",
			"to be signed within 1 hour (until 2026-11-29 15:00:00 UTC)",
			"  - no round_outcome from staging names 6.8.0-49-generic\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Describe(tt.req)
			for _, want := range tt.want {
				if !strings.Contains(got, want) {
					t.Errorf("Describe lacks %q:\n%s", want, got)
				}
			}
			if strings.Contains(got, ", once.") {
				t.Errorf("a record is not used once:\n%s", got)
			}
		})
	}
}

// VerifyRecord accepts a signed record for as long as its key stays in
// allowed_signers, after its request expired too, and refuses everything
// else, naming why.
func TestVerifyRecord(t *testing.T) {
	ed := keys["ed25519"]
	outcome := newOutcome(t, t0, time.Hour)
	good := signReq(t, ed.Signer, outcome)
	promotion := signReq(t, ed.Signer, newPromotion(t, t0, time.Hour))
	edSigners := string(allowedSignersFor("ed25519"))
	notRecord := errors.New("not a record kind")
	tests := []struct {
		name    string
		signers string    // allowed_signers; "" means edSigners
		text    string    // request and signature
		kind    Kind      // the kind the caller relies on
		now     time.Time // the verifier's clock
		labOnly bool      // RefuseLabOnly
		want    Reason    // "" means accepted
		wantErr error     // a caller's error, not a refusal
		detail  string    // the error contains it
	}{
		{name: "signed and valid", text: good, kind: KindRoundOutcome, now: t0.Add(time.Minute)},
		{name: "long after its request expired", text: good, kind: KindRoundOutcome, now: t0.Add(90 * 24 * time.Hour)},
		{name: "a promoted kernel", text: promotion, kind: KindKernelPromoted, now: t0.Add(48 * time.Hour)},
		{name: "signed by ssh-keygen's key types", text: signReq(t, keys["rsa"].Signer, outcome), signers: string(allowedSignersFor("rsa", "ed25519")),
			kind: KindRoundOutcome, now: t0.Add(48 * time.Hour)},
		{name: "signer line retired since it was signed", signers: `ed25519@test valid-before="20261201Z" ` + keyOnly(ed) + "\n",
			text: good, kind: KindRoundOutcome, now: t0.Add(90 * 24 * time.Hour)},
		{name: "lab-only key, allowed", signers: "ed25519@test " + keyOnly(ed) + " lab-only\n", text: good, kind: KindRoundOutcome, now: t0.Add(time.Hour)},

		{name: "a summary line changed", text: strings.Replace(good, "soaked 72 hours", "soaked 96 hours", 1), kind: KindRoundOutcome, now: t0.Add(time.Hour),
			want: ReasonBadSignature},
		{name: "the digest changed", text: strings.Replace(good, outcomeDigest, "sha256:"+strings.Repeat("5f", 32), 1), kind: KindRoundOutcome, now: t0.Add(time.Hour),
			want: ReasonBadSignature},
		{name: "a summary line added", text: strings.Replace(good, "-----BEGIN", "summary: 6.8.0-51-generic: green\n-----BEGIN", 1), kind: KindRoundOutcome,
			now: t0.Add(time.Hour), want: ReasonBadSignature},
		{name: "key removed from allowed_signers", signers: string(allowedSignersFor("rsa")), text: good, kind: KindRoundOutcome, now: t0.Add(time.Hour),
			want: ReasonUnknownSigner, detail: "not in allowed_signers"},
		{name: "signed by a key nobody allowed", text: signReq(t, freshSigner(t), outcome), kind: KindRoundOutcome, now: t0.Add(time.Hour),
			want: ReasonUnknownSigner},
		{name: "signer line not yet valid when signed", signers: `ed25519@test valid-after="20261201Z" ` + keyOnly(ed) + "\n",
			text: good, kind: KindRoundOutcome, now: t0.Add(90 * 24 * time.Hour), want: ReasonSignerNotValid},
		{name: "signer line names no one", signers: `!* ` + keyOnly(ed) + "\n", text: good, kind: KindRoundOutcome, now: t0.Add(time.Hour),
			want: ReasonNoPrincipal},
		{name: "signer line for other namespaces", signers: `ed25519@test namespaces="git" ` + keyOnly(ed) + "\n", text: good, kind: KindRoundOutcome,
			now: t0.Add(time.Hour), want: ReasonNamespaceNotAllowed},
		{name: "lab-only key, refused", signers: "ed25519@test " + keyOnly(ed) + " lab-only\n", text: good, kind: KindRoundOutcome, now: t0.Add(time.Hour),
			labOnly: true, want: ReasonLabOnlySigner},
		{name: "wrong kind", text: promotion, kind: KindRoundOutcome, now: t0.Add(time.Hour), want: ReasonMismatch,
			detail: `kind: the approval says "kernel_promoted", this step needs "round_outcome"`},
		{name: "lifetime over the maximum", text: signReq(t, ed.Signer, newOutcome(t, t0, 25*time.Hour)), kind: KindRoundOutcome,
			now: t0.Add(90 * 24 * time.Hour), want: ReasonLifetimeTooLong, detail: "1 day 1 hour, longer than the 1 day allowed"},
		{name: "issued in the future", text: good, kind: KindRoundOutcome, now: t0.Add(-10 * time.Minute), want: ReasonIssuedInFuture},
		{name: "issued within the clock skew", text: good, kind: KindRoundOutcome, now: t0.Add(-30 * time.Second)},
		{name: "signed in another namespace", text: FormatApproval(outcome, armorUnchecked(t, ed.Signer, "file", "sha512", outcome.Canonical())),
			kind: KindRoundOutcome, now: t0.Add(time.Hour), want: ReasonWrongNamespace},
		{name: "unsigned", text: outcome.String(), kind: KindRoundOutcome, now: t0.Add(time.Hour), want: ReasonMalformed},
		{name: "an approval is not a record", text: signReq(t, ed.Signer, newTestRequest(t, t0)), kind: KindApproval, now: t0.Add(time.Hour),
			wantErr: notRecord},
		{name: "a resume is not a record", text: good, kind: KindRoundResume, now: t0.Add(time.Hour), wantErr: notRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signers := tt.signers
			if signers == "" {
				signers = edSigners
			}
			// No NonceStore: a record reads none.
			v := &Verifier{AllowedSigners: mustSigners(t, []byte(signers)), Clock: fixedClock(tt.now), RefuseLabOnly: tt.labOnly}
			got, req, err := v.VerifyRecord(context.Background(), tt.text, tt.kind)
			var refusal *RefusalError
			switch {
			case tt.wantErr != nil:
				if err == nil || errors.As(err, &refusal) || !strings.Contains(err.Error(), tt.wantErr.Error()) {
					t.Fatalf("got %v, want a caller's error containing %q", err, tt.wantErr)
				}
				return
			case tt.want == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if diff := cmp.Diff(got.Request, req); diff != "" {
					t.Errorf("Verified.Request and the Request returned differ:\n%s", diff)
				}
				if req.Kind != tt.kind || got.Principal == "" || got.ApprovalID != req.ID() {
					t.Errorf("accepted %s by %q, id %s (request %s)", req.Kind, got.Principal, got.ApprovalID, req.ID())
				}
				return
			}
			if !errors.As(err, &refusal) || refusal.Reason != tt.want {
				t.Fatalf("got %v, want a refusal %s", err, tt.want)
			}
			if !strings.Contains(err.Error(), "verify "+string(tt.kind)+" record") || !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("error %q does not say the action and %q", err, tt.detail)
			}
			if got.Principal != "" || got.Request.Kind != "" || req.Kind != "" {
				t.Errorf("a refusal returned %+v, %+v", got, req)
			}
		})
	}
}

// A record is not a permission: Verify and Reverify refuse to check one,
// pointing at VerifyRecord, so that no step treats it as used once.
func TestVerifyRefusesRecordKinds(t *testing.T) {
	text := signReq(t, keys["ed25519"].Signer, newOutcome(t, t0, time.Hour))
	v := &Verifier{AllowedSigners: mustSigners(t, allowedSignersFor("ed25519")), NonceStore: openStore(t), Clock: fixedClock(t0)}
	want := Expectation{Kind: KindRoundOutcome, Node: "gpu-03", Round: "2026-11"}
	for name, verify := range map[string]func(context.Context, string, Expectation) (Verified, error){"Verify": v.Verify, "Reverify": v.Reverify} {
		_, err := verify(context.Background(), text, want)
		var refusal *RefusalError
		if err == nil || errors.As(err, &refusal) || !strings.Contains(err.Error(), "VerifyRecord") {
			t.Errorf("%s: got %v, want an expectation error pointing at VerifyRecord", name, err)
		}
	}
}
