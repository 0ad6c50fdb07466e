package policy

import (
	"context"
	"testing"
)

// BenchmarkVerify is the cost of checking one ed25519 approval: parsing,
// the allowed_signers lookup, the signature, the bindings and the nonce
// store lookup (a locked read of the file's tail).
func BenchmarkVerify(b *testing.B) {
	for _, name := range keyList {
		b.Run(name, func(b *testing.B) {
			req := newTestRequest(b, t0)
			text := signReq(b, keys[name].Signer, req)
			v := &Verifier{AllowedSigners: mustSigners(b, allowedSignersFor(keyList...)), NonceStore: openStore(b), Clock: fixedClock(t0)}
			want := expectFor(req)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(context.Background(), text, want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyAndConsume adds the durable commit (append + fsync) of a
// fresh ed25519 approval each time.
func BenchmarkVerifyAndConsume(b *testing.B) {
	v := &Verifier{AllowedSigners: mustSigners(b, allowedSignersFor(keyList...)), NonceStore: openStore(b), Clock: fixedClock(t0)}
	var texts []string
	var reqs []Request
	for range b.N {
		r := newTestRequest(b, t0)
		reqs = append(reqs, r)
		texts = append(texts, signReq(b, keys["ed25519"].Signer, r))
	}
	b.ResetTimer()
	for i := range b.N {
		got, err := v.Verify(context.Background(), texts[i], expectFor(reqs[i]))
		if err != nil {
			b.Fatal(err)
		}
		if err := v.Consume(context.Background(), got); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSign is the signing side with an ed25519 key file's signer.
func BenchmarkSign(b *testing.B) {
	msg := newTestRequest(b, t0).Canonical()
	for b.Loop() {
		if _, err := Sign(keys["ed25519"].Signer, msg); err != nil {
			b.Fatal(err)
		}
	}
}
