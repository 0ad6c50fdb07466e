package policy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

func signReq(t testing.TB, signer ssh.Signer, req Request) string {
	t.Helper()
	res, err := Sign(signer, req.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	return FormatApproval(req, res.Signature)
}

func freshSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func keyOnly(k *testKey) string {
	f := strings.Fields(k.PubLine)
	return f[0] + " " + f[1]
}

func TestVerifyRefusals(t *testing.T) {
	ed := keys["ed25519"]
	req := newTestRequest(t, t0)
	good := signReq(t, ed.Signer, req)
	goodSig := good[len(req.String()):]

	// A certificate for the ed25519 key, signed by a throwaway CA.
	ca := freshSigner(t)
	cert := &ssh.Certificate{Key: ed.Pub, CertType: ssh.UserCert, ValidPrincipals: []string{"ed25519@test"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	certSigner, err := ssh.NewCertSigner(cert, ed.Signer)
	if err != nil {
		t.Fatal(err)
	}

	// Signed for 180 days: refused when presented early and when presented
	// within a day of its expiry alike.
	farReq := req
	farReq.Expires = t0.Add(180 * 24 * time.Hour)
	// Issued an hour from now: refused now, accepted within the skew.
	futureReq := req
	futureReq.Issued, futureReq.Expires = t0.Add(time.Hour), t0.Add(2*time.Hour)
	skewReq := req
	skewReq.Issued = t0.Add(30 * time.Second)
	tampered := strings.Replace(good, "evict 3 pods", "evict 0 pods", 1)
	otherRound := req
	otherRound.Round = "2026-12"

	flipSig := func(s string) string {
		// Flip one bit inside the ed25519 signature (the last base64 line
		// before the end marker holds signature bytes).
		lines := strings.Split(s, "\n")
		l := lines[len(lines)-3]
		c := l[5]
		r := byte('A')
		if c == 'A' {
			r = 'B'
		}
		lines[len(lines)-3] = l[:5] + string(r) + l[6:]
		return strings.Join(lines, "\n")
	}

	type tc struct {
		name     string
		signers  string // allowed_signers text; default: ed25519 key as ed25519@test
		labOnly  bool   // Verifier.RefuseLabOnly
		approval string
		want     Expectation
		at       time.Time // zero: t0
		reason   Reason
		field    string
		contains string
	}
	wantOK := expectFor(req)
	with := func(f func(*Expectation)) Expectation { e := wantOK; f(&e); return e }
	tests := []tc{
		{name: "accepted", approval: good, want: wantOK},
		{name: "accepted with sha256 hash", approval: FormatApproval(req, armorUnchecked(t, ed.Signer, Namespace, hashSHA256, req.Canonical())), want: wantOK},
		{name: "accepted without summary check", approval: good, want: with(func(e *Expectation) { e.Summary = nil })},

		{name: "unsigned", approval: req.String(), want: wantOK, reason: ReasonMalformed, contains: "no signature block"},
		{name: "signature only", approval: goodSig, want: wantOK, reason: ReasonMalformed, contains: "no request text"},
		{name: "garbage", approval: "approve it please", want: wantOK, reason: ReasonMalformed},
		{name: "CRLF", approval: strings.ReplaceAll(good, "\n", "\r\n"), want: wantOK, reason: ReasonMalformed},
		{name: "junk after signature", approval: good + "thanks!\n", want: wantOK, reason: ReasonMalformed, contains: "END SSH SIGNATURE"},
		{name: "signature cut short", approval: good[:len(good)-60] + "\n" + armorEnd + "\n", want: wantOK, reason: ReasonMalformed},
		{name: "unknown field in request", approval: strings.Replace(good, "round: ", "force: yes\nround: ", 1), want: wantOK, reason: ReasonMalformed, contains: `unknown field "force"`},

		{name: "wrong namespace", approval: FormatApproval(req, armorUnchecked(t, ed.Signer, "git", hashSHA512, req.Canonical())), want: wantOK, reason: ReasonWrongNamespace, contains: `"git"`},
		{name: "certificate", approval: FormatApproval(req, armorUnchecked(t, certSigner, Namespace, hashSHA512, req.Canonical())), want: wantOK, reason: ReasonUnsupportedKey, contains: "certificates"},
		{name: "unknown signer", approval: signReq(t, freshSigner(t), req), want: wantOK, reason: ReasonUnknownSigner, contains: "not in allowed_signers"},
		{name: "request changed after signing", approval: tampered, want: with(func(e *Expectation) { e.Summary = nil }), reason: ReasonBadSignature},
		{name: "signature bit flipped", approval: flipSig(good), want: wantOK, reason: ReasonBadSignature},
		{name: "signature from another request", approval: req.String() + signReq(t, ed.Signer, otherRound)[len(otherRound.String()):], want: wantOK, reason: ReasonBadSignature},
		{name: "RSA with SHA-1", signers: "rsa@test " + keys["rsa"].PubLine, approval: FormatApproval(req, armorRSASHA1(t, req.Canonical())), want: wantOK, reason: ReasonBadSignature, contains: "rsa-sha2-512"},
		{name: "unknown hash", approval: FormatApproval(req, armorWithHash(t, ed.Signer, "md5", req.Canonical())), want: wantOK, reason: ReasonBadSignature, contains: "md5"},

		{name: "namespace not allowed", signers: `ed25519@test namespaces="git,file" ` + keyOnly(ed), approval: good, want: wantOK, reason: ReasonNamespaceNotAllowed, contains: "git,file"},
		{name: "namespace pattern allows", signers: `ed25519@test namespaces="git,mcp-*" ` + keyOnly(ed), approval: good, want: wantOK},
		{name: "second line allows", signers: `old@test namespaces="git" ` + keyOnly(ed) + "\nnew@test " + keyOnly(ed), approval: good, want: wantOK},
		{name: "key retired", signers: `ed25519@test valid-before="20260601Z" ` + keyOnly(ed), approval: good, want: wantOK, reason: ReasonSignerNotValid, contains: "until 2026-06-01"},
		{name: "key not yet valid", signers: `ed25519@test valid-after="20261201Z" ` + keyOnly(ed), approval: good, want: wantOK, reason: ReasonSignerNotValid},
		{name: "lab-only refused", signers: "ci@lab " + keyOnly(ed) + " lab-only", labOnly: true, approval: good, want: wantOK, reason: ReasonLabOnlySigner},
		{name: "lab-only allowed in the lab", signers: "ci@lab " + keyOnly(ed) + " lab-only", approval: good, want: wantOK},

		{name: "expired", approval: good, want: wantOK, at: req.Expires, reason: ReasonExpired},
		{name: "180-day approval presented early", approval: signReq(t, ed.Signer, farReq), want: expectFor(farReq), reason: ReasonLifetimeTooLong, contains: "180 days, longer than the 1 day allowed"},
		{name: "180-day approval presented late", approval: signReq(t, ed.Signer, farReq), want: expectFor(farReq), at: farReq.Expires.Add(-time.Hour), reason: ReasonLifetimeTooLong},
		{name: "issued in the future", approval: signReq(t, ed.Signer, futureReq), want: expectFor(futureReq), reason: ReasonIssuedInFuture, contains: "1 hour after now"},
		{name: "issued within the clock skew", approval: signReq(t, ed.Signer, skewReq), want: expectFor(skewReq)},

		{name: "wrong tool", approval: good, want: with(func(e *Expectation) { e.Tool = "install_updates" }), reason: ReasonMismatch, field: "tool"},
		{name: "wrong node", approval: good, want: with(func(e *Expectation) { e.Node = "gpu-04" }), reason: ReasonMismatch, field: "node", contains: `the approval says "gpu-03", this step needs "gpu-04"`},
		{name: "wrong round", approval: good, want: with(func(e *Expectation) { e.Round = "2026-12" }), reason: ReasonMismatch, field: "round"},
		{name: "plan drifted", approval: good, want: with(func(e *Expectation) { e.PlanDigest = "sha256:" + strings.Repeat("cd", 32) }), reason: ReasonMismatch, field: "plan-digest"},
		{name: "summary altered before signing", approval: good, want: with(func(e *Expectation) { e.Summary = []string{"node gpu-03: cordon, then evict 4 pods"} }), reason: ReasonMismatch, field: "summary line 1"},
		{name: "summary line missing", approval: good, want: with(func(e *Expectation) { e.Summary = append(e.Summary, "more") }), reason: ReasonMismatch, field: "summary line 2"},
		{name: "attestation for an approval", approval: good, want: Expectation{Kind: KindRoundResume, Node: "gpu-03", Round: "2026-11", Step: NoStop, Stop: NoStop}, reason: ReasonMismatch, field: "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signers := tt.signers
			if signers == "" {
				signers = "ed25519@test " + ed.PubLine
			}
			at := tt.at
			if at.IsZero() {
				at = t0
			}
			v := &Verifier{AllowedSigners: mustSigners(t, []byte(signers+"\n")), NonceStore: openStore(t), Clock: fixedClock(at), RefuseLabOnly: tt.labOnly}
			got, err := v.Verify(context.Background(), tt.approval, tt.want)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if got.Nonce != req.Nonce || got.ApprovalID != got.Request.ID() || got.KeyFingerprint != ssh.FingerprintSHA256(ed.Pub) {
					t.Errorf("Verified = %+v", got)
				}
				return
			}
			var re *RefusalError
			if !errors.As(err, &re) {
				t.Fatalf("Verify: got %v, want a refusal (%s)", err, tt.reason)
			}
			if re.Reason != tt.reason || re.Field != tt.field {
				t.Errorf("refusal %s (field %q): %v; want %s (field %q)", re.Reason, re.Field, err, tt.reason, tt.field)
			}
			if !errors.Is(err, &RefusalError{Reason: tt.reason}) {
				t.Errorf("errors.Is does not match reason %s", tt.reason)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q lacks %q", err, tt.contains)
			}
			if re.Hint() == "" {
				t.Errorf("no hint for %s", re.Reason)
			}
			if !reflect.DeepEqual(got, Verified{}) {
				t.Errorf("refused, yet returned %+v", got)
			}
		})
	}
}

func armorWithHash(t testing.TB, signer ssh.Signer, hashAlg string, msg []byte) []byte {
	t.Helper()
	// Sign as if hashAlg were sha512, then relabel: the structure is
	// well-formed, the algorithm unknown.
	data, err := signedData(Namespace, hashSHA512, msg)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := signer.Sign(rand.Reader, data)
	if err != nil {
		t.Fatal(err)
	}
	return armor(marshalSigBlob(signer.PublicKey(), Namespace, hashAlg, sig))
}

func TestVerifyRefusesBadExpectation(t *testing.T) {
	req := newTestRequest(t, t0)
	v := &Verifier{AllowedSigners: mustSigners(t, allowedSignersFor("ed25519")), NonceStore: openStore(t), Clock: fixedClock(t0)}
	good := signReq(t, keys["ed25519"].Signer, req)
	for _, e := range []Expectation{
		{Node: "gpu-03", Round: "2026-11", PlanDigest: testDigest},                        // no tool
		{Tool: "drain_node", Round: "2026-11", PlanDigest: testDigest},                    // no node
		{Tool: "drain_node", Node: "gpu-03", Round: "2026-11"},                            // no digest
		{Kind: KindRoundResume, Tool: "drain_node", Node: "gpu-03", Round: "2026-11"},     // tool on attestation
		{Kind: "reboot_everything", Tool: "drain_node", Node: "gpu-03", Round: "2026-11"}, // unknown kind
	} {
		_, err := v.Verify(context.Background(), good, e)
		var re *RefusalError
		if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "expectation") {
			t.Errorf("Verify(%+v): got %v, want an expectation error", e, err)
		}
	}
	if _, err := (&Verifier{}).Verify(context.Background(), good, expectFor(req)); err == nil {
		t.Error("a Verifier without signers and store verified")
	}
}

func TestAttestationVerify(t *testing.T) {
	ed := keys["ed25519"]
	v := &Verifier{AllowedSigners: mustSigners(t, allowedSignersFor("ed25519")), NonceStore: openStore(t), Clock: fixedClock(t0)}
	stop := "12 sha256:" + strings.Repeat("ab", 32)
	att, err := NewAttestation(KindRoundResume, AttestationFields{Node: "gpu-07", Round: "2026-11", Reason: "RDMA rail fixed by hand", Step: "verify", Stop: stop},
		[]string{"failed check: rdma rail mlx5_3 down"}, time.Hour, fixedClock(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	text := signReq(t, ed.Signer, att)
	want := Expectation{Kind: KindRoundResume, Node: "gpu-07", Round: "2026-11", Step: "verify", Stop: stop}
	// A statement signed for one stop does not answer another: not a later
	// stop of the same step (another journal record), not another step.
	later := want
	later.Stop = "31 sha256:" + strings.Repeat("ef", 32)
	if _, err := v.Verify(context.Background(), text, later); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "stop") {
		t.Errorf("resume presented for a later stop: got %v, want mismatch on stop", err)
	}
	otherStep := want
	otherStep.Step = "gate"
	if _, err := v.Verify(context.Background(), text, otherStep); !errors.Is(err, ErrMismatch) {
		t.Errorf("resume presented for another step: got %v, want mismatch", err)
	}
	if _, err := v.Verify(context.Background(), text, Expectation{Kind: KindRoundResume, Node: "gpu-07", Round: "2026-11"}); err == nil {
		t.Error("an expectation without the stop verified a resume")
	}
	got, err := v.Verify(context.Background(), text, want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(att, got.Request); diff != "" {
		t.Errorf("verified request (-signed +got):\n%s", diff)
	}
	_, err = v.Verify(context.Background(), text, Expectation{Kind: KindRoundAbort, Node: "gpu-07", Round: "2026-11", Step: "verify", Stop: stop})
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("resume presented as abort: got %v, want mismatch", err)
	}
	_, err = v.Verify(context.Background(), text, Expectation{Tool: "drain_node", Node: "gpu-07", Round: "2026-11", PlanDigest: testDigest})
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("attestation presented as approval: got %v, want mismatch", err)
	}
}

// TestRefusedStepDoesNotBurn: Verify consumes nothing; Consume does, for
// good, also after the store is reopened.
func TestRefusedStepDoesNotBurn(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	req := newTestRequest(t, t0)
	text := signReq(t, keys["ed25519"].Signer, req)
	signers := mustSigners(t, allowedSignersFor("ed25519"))
	v := &Verifier{AllowedSigners: signers, NonceStore: store, Clock: fixedClock(t0)}

	drifted := expectFor(req)
	drifted.PlanDigest = "sha256:" + strings.Repeat("00", 32)
	if _, err := v.Verify(context.Background(), text, drifted); !errors.Is(err, ErrMismatch) {
		t.Fatalf("drifted plan: %v", err)
	}
	for range 2 { // verifying twice burns nothing either
		if _, err := v.Verify(context.Background(), text, expectFor(req)); err != nil {
			t.Fatalf("after a refused step: %v", err)
		}
	}
	got, err := v.Verify(context.Background(), text, expectFor(req))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Consume(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), text, expectFor(req)); !errors.Is(err, ErrReplayed) {
		t.Errorf("after Consume: got %v, want replayed", err)
	}
	if err := v.Consume(context.Background(), got); !errors.Is(err, ErrReplayed) {
		t.Errorf("second Consume: got %v, want replayed", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	reopened, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	v2 := &Verifier{AllowedSigners: signers, NonceStore: reopened, Clock: fixedClock(t0)}
	if _, err := v2.Verify(context.Background(), text, expectFor(req)); !errors.Is(err, ErrReplayed) {
		t.Errorf("after restart: got %v, want replayed", err)
	}
}

func TestConsumeRefusesExpired(t *testing.T) {
	req := newTestRequest(t, t0)
	now := t0
	v := &Verifier{AllowedSigners: mustSigners(t, allowedSignersFor("ed25519")), NonceStore: openStore(t), Clock: func() time.Time { return now }}
	got, err := v.Verify(context.Background(), signReq(t, keys["ed25519"].Signer, req), expectFor(req))
	if err != nil {
		t.Fatal(err)
	}
	now = req.Expires // the re-simulation took too long
	if err := v.Consume(context.Background(), got); !errors.Is(err, ErrExpired) {
		t.Errorf("Consume after expiry: got %v, want expired", err)
	}
}

// TestConcurrentConsume: of many goroutines committing one approval, one wins.
func TestConcurrentConsume(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenNonceStore(dir) // a second opener, as another process would be
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	req := newTestRequest(t, t0)
	signers := mustSigners(t, allowedSignersFor("ed25519"))
	text := signReq(t, keys["ed25519"].Signer, req)
	var wins, replays, others int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			store := a
			if i%2 == 1 {
				store = b
			}
			v := &Verifier{AllowedSigners: signers, NonceStore: store, Clock: fixedClock(t0)}
			got, err := v.Verify(context.Background(), text, expectFor(req))
			if err == nil {
				err = v.Consume(context.Background(), got)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrReplayed):
				replays++
			default:
				others++
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 || replays != 39 || others != 0 {
		t.Errorf("wins=%d replays=%d others=%d, want 1/39/0", wins, replays, others)
	}
}

// TestExpiryOverTime runs the clock forward inside a synctest bubble with
// the Verifier on its default clock.
func TestExpiryOverTime(t *testing.T) {
	signers := mustSigners(t, allowedSignersFor("ed25519"))
	store := openStore(t)
	synctest.Test(t, func(t *testing.T) {
		req, err := NewRequest("trial_boot", "gpu-03", "2026-11", testDigest, []string{"reboot once into 6.8.0-49"}, 30*time.Minute, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		text := signReq(t, keys["ed25519"].Signer, req)
		v := &Verifier{AllowedSigners: signers, NonceStore: store}
		if _, err := v.Verify(context.Background(), text, expectFor(req)); err != nil {
			t.Fatalf("fresh: %v", err)
		}
		time.Sleep(29*time.Minute + 58*time.Second)
		if _, err := v.Verify(context.Background(), text, expectFor(req)); err != nil {
			t.Fatalf("just before expiry: %v", err)
		}
		time.Sleep(2 * time.Second)
		if _, err := v.Verify(context.Background(), text, expectFor(req)); !errors.Is(err, ErrExpired) {
			t.Fatalf("at expiry: got %v, want expired", err)
		}
	})
}

// armorRSASHA1 signs with the legacy ssh-rsa (SHA-1) algorithm, which
// ssh-keygen refuses for SSHSIG and so do we.
func armorRSASHA1(t testing.TB, msg []byte) []byte {
	t.Helper()
	data, err := signedData(Namespace, hashSHA512, msg)
	if err != nil {
		t.Fatal(err)
	}
	signer := keys["rsa"].Signer.(ssh.AlgorithmSigner)
	sig, err := signer.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSA)
	if err != nil {
		t.Fatal(err)
	}
	return armor(marshalSigBlob(signer.PublicKey(), Namespace, hashSHA512, sig))
}
