package policy

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func FuzzParseRequest(f *testing.F) {
	req := newTestRequest(f, t0)
	f.Add(req.Canonical())
	att, err := NewAttestation(KindResidualRiskAccepted, AttestationFields{Node: "*", Round: "2026-11", Step: NoStop, Stop: NoStop,
		Reason: "accepted", ReviewTrigger: "driver-version-change:550.90.07"}, []string{"x"}, time.Hour, fixedClock(t0), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(att.Canonical())
	f.Add([]byte("mcp-patch attestation v1\nkind: round_abort\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, text []byte) {
		r, err := ParseRequest(text)
		if err != nil {
			return
		}
		// Whatever parses is valid and has exactly one textual form.
		if err := r.Validate(); err != nil {
			t.Fatalf("parsed request does not validate: %v\n%q", err, text)
		}
		if !bytes.Equal(r.Canonical(), text) {
			t.Fatalf("not canonical:\nin  %q\nout %q", text, r.Canonical())
		}
	})
}

func FuzzParseApproval(f *testing.F) {
	req := newTestRequest(f, t0)
	good := signReq(f, keys["ed25519"].Signer, req)
	f.Add(good)
	f.Add(strings.TrimSuffix(good, "\n"))
	f.Add(req.String())
	f.Add(good[len(req.String()):])
	f.Fuzz(func(t *testing.T, text string) {
		a, err := ParseApproval(text)
		if err != nil {
			return
		}
		if a.String() != text {
			t.Fatalf("ParseApproval lost bytes:\nin  %q\nout %q", text, a.String())
		}
	})
}

// FuzzVerify: no input other than the signed approval itself (with or
// without its final newline) is ever accepted.
func FuzzVerify(f *testing.F) {
	req := newTestRequest(f, t0)
	good := signReq(f, keys["ed25519"].Signer, req)
	v := &Verifier{AllowedSigners: mustSigners(f, allowedSignersFor(keyList...)), NonceStore: openStore(f), Clock: fixedClock(t0)}
	want := expectFor(req)
	f.Add(good)
	f.Add(strings.Replace(good, "gpu-03", "gpu-04", 1))
	f.Add(req.String())
	f.Fuzz(func(t *testing.T, text string) {
		if _, err := v.Verify(context.Background(), text, want); err == nil && text != good && text != strings.TrimSuffix(good, "\n") {
			t.Fatalf("accepted a text that is not the signed approval:\n%q", text)
		}
	})
}

func FuzzParseAllowedSigners(f *testing.F) {
	f.Add([]byte(string(allowedSignersFor(keyList...))))
	f.Add([]byte(`a@b,!c@d namespaces="mcp-patch",valid-after="20260101Z",valid-before="20270101" ` + keys["ed25519"].PubLine + " lab-only\n# c\n\n"))
	f.Add([]byte(`"x y" cert-authority ` + keys["ecdsa"].PubLine))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAllowedSigners(data)
		if err != nil {
			return
		}
		for _, s := range a.Signers {
			if s.Key == nil || len(s.Principals) == 0 || s.Line < 1 {
				t.Fatalf("incomplete signer %+v from %q", s, data)
			}
			if checkSignerKey(s.Key) != nil {
				t.Fatalf("unsupported key admitted from %q", data)
			}
			if !s.ValidAfter.IsZero() && !s.ValidBefore.IsZero() && !s.ValidBefore.After(s.ValidAfter) {
				t.Fatalf("empty validity admitted from %q", data)
			}
		}
		b, err := ParseAllowedSigners(data)
		if err != nil || len(b.Signers) != len(a.Signers) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}
