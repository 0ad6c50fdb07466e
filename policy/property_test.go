package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestVerifyProperty throws at least 10,000 verification attempts at a
// Verifier — valid, forged (bit flips in the signature and in the request),
// stale, replayed, wrongly bound, unsigned and foreign-signed — and compares
// each outcome with a model of what should pass. Accepting anything the
// model refuses is the failure that matters; it must never happen.
func TestVerifyProperty(t *testing.T) {
	const attempts = 10000
	seed := uint64(20261129)
	if s := os.Getenv("POLICY_PROPERTY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t.Logf("seed %d (set POLICY_PROPERTY_SEED to replay)", seed)

	allowed := []ssh.Signer{keys["ed25519"].Signer, keys["ecdsa"].Signer, keys["rsa"].Signer}
	foreign := freshSigner(t)
	v := &Verifier{AllowedSigners: mustSigners(t, allowedSignersFor(keyList...)), NonceStore: openStore(t)}
	var now time.Time
	v.Clock = func() time.Time { return now }

	type base struct {
		req  Request
		text string // the signed approval
	}
	tools := []string{"drain_node", "install_updates", "trial_boot", "promote_kernel", "autoremove"}
	nodes := []string{"cp-01", "cp-02", "gpu-01", "gpu-02", "gpu-03"}
	randDigest := func() string {
		var b strings.Builder
		b.WriteString("sha256:")
		for range 64 {
			b.WriteByte("0123456789abcdef"[rng.IntN(16)])
		}
		return b.String()
	}
	var pool []base
	for i := range 1000 {
		ttl := time.Duration(1+rng.IntN(120)) * time.Minute
		req, err := NewRequest(tools[rng.IntN(len(tools))], nodes[rng.IntN(len(nodes))], "2026-11", randDigest(),
			[]string{fmt.Sprintf("step %d: evict %d pods", i, rng.IntN(40))}, ttl, fixedClock(t0), nil)
		if err != nil {
			t.Fatal(err)
		}
		signer := allowed[0]
		if i%10 == 0 {
			signer = allowed[1+i%2]
		}
		pool = append(pool, base{req, signReq(t, signer, req)})
	}
	consumed := map[string]bool{}

	flip := func(s string, from, to int) string {
		b := []byte(s)
		i := from + rng.IntN(to-from)
		b[i] ^= 1 << rng.IntN(8)
		return string(b)
	}

	type tally struct{ tried, accepted, wrongAccept, wrongRefuse int }
	stats := map[string]*tally{}
	reasons := map[string]int{}
	var consumes int
	for range attempts {
		b := pool[rng.IntN(len(pool))]
		text, want := b.text, expectFor(b.req)
		now = t0.Add(time.Duration(rng.IntN(int(60*time.Minute/time.Second))) * time.Second)
		valid := true // what the model says, refined below
		var kind string
		switch p := rng.IntN(100); {
		case p < 30:
			kind = "valid"
		case p < 45:
			kind = "forged: bit flip in signature"
			text = flip(text, len(b.req.String()), len(text))
			valid = false
		case p < 60:
			kind = "forged: bit flip in request"
			text = flip(text, 0, len(b.req.String()))
			valid = false
		case p < 68:
			kind = "stale"
			now = b.req.Expires.Add(time.Duration(rng.IntN(3600)) * time.Second)
		case p < 78:
			kind = "replayed"
			var used []base
			for _, c := range pool {
				if consumed[c.req.Nonce] {
					used = append(used, c)
				}
			}
			if len(used) > 0 {
				b = used[rng.IntN(len(used))]
				text, want = b.text, expectFor(b.req)
			}
		case p < 88:
			kind = "wrong binding"
			switch rng.IntN(5) {
			case 0:
				want.Tool = tools[(indexOf(tools, want.Tool)+1+rng.IntN(len(tools)-1))%len(tools)]
			case 1:
				want.Node = nodes[(indexOf(nodes, want.Node)+1+rng.IntN(len(nodes)-1))%len(nodes)]
			case 2:
				want.Round = "2026-12"
			case 3:
				want.PlanDigest = randDigest()
			case 4:
				want.Summary = []string{"something else"}
			}
			valid = false
		case p < 91:
			kind = "unsigned"
			text = b.req.String()
			if rng.IntN(2) == 0 { // with a signature lifted from another request
				o := pool[rng.IntN(len(pool))]
				if o.req.Nonce != b.req.Nonce {
					text += o.text[len(o.req.String()):]
				}
			}
			valid = false
		case p < 94:
			kind = "long-dated (signed lifetime over the maximum)"
			long := b.req
			long.Expires = long.Issued.Add(DefaultMaxLifetime + time.Duration(1+rng.IntN(180*24))*time.Hour)
			text = signReq(t, allowed[0], long)
			want = expectFor(long)
			if rng.IntN(2) == 0 { // presented within the last day of its validity
				now = long.Expires.Add(-time.Duration(1+rng.IntN(23*3600)) * time.Second)
			}
			valid = false
		case p < 97:
			kind = "issued ahead of the clock"
			ahead := b.req
			skip := DefaultClockSkew + time.Duration(1+rng.IntN(3600))*time.Second
			ahead.Issued, ahead.Expires = ahead.Issued.Add(skip), ahead.Expires.Add(skip)
			text = signReq(t, allowed[0], ahead)
			want = expectFor(ahead)
			now = b.req.Issued
			valid = false
		default:
			kind = "foreign signer"
			text = signReq(t, foreign, b.req)
			valid = false
		}
		// The model: a valid approval passes while fresh and unused.
		shouldPass := valid && now.Before(b.req.Expires) && !consumed[b.req.Nonce]

		st := stats[kind]
		if st == nil {
			st = &tally{}
			stats[kind] = st
		}
		st.tried++
		got, err := v.Verify(context.Background(), text, want)
		if err == nil {
			st.accepted++
			if !shouldPass {
				st.wrongAccept++
				t.Errorf("ACCEPTED BUT SHOULD NOT (%s) at %s:\n%s", kind, now, text)
				continue
			}
			if rng.IntN(4) == 0 { // the step runs
				if err := v.Consume(context.Background(), got); err != nil {
					t.Errorf("Consume of a verified approval: %v", err)
				}
				consumed[got.Nonce] = true
				consumes++
			}
			continue
		}
		var re *RefusalError
		if errors.As(err, &re) {
			reasons[string(re.Reason)]++
		} else {
			reasons["other error"]++
			t.Errorf("%s: not a refusal: %v", kind, err)
		}
		if shouldPass {
			st.wrongRefuse++
			t.Errorf("REFUSED BUT SHOULD PASS (%s): %v", kind, err)
		}
	}

	var kinds []string
	total := tally{}
	for k, st := range stats {
		kinds = append(kinds, k)
		total.tried += st.tried
		total.accepted += st.accepted
		total.wrongAccept += st.wrongAccept
		total.wrongRefuse += st.wrongRefuse
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		st := stats[k]
		t.Logf("%-30s tried %5d  accepted %5d  accepted-wrongly %d  refused-wrongly %d", k, st.tried, st.accepted, st.wrongAccept, st.wrongRefuse)
	}
	var rs []string
	for r, n := range reasons {
		rs = append(rs, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(rs)
	t.Logf("refusals by reason: %s", strings.Join(rs, " "))
	t.Logf("SUMMARY verify property: %d attempts, %d accepted, %d refused, %d consumed; accepted that should not: %d; refused that should pass: %d",
		total.tried, total.accepted, total.tried-total.accepted, consumes, total.wrongAccept, total.wrongRefuse)
	if total.tried < attempts {
		t.Errorf("only %d attempts", total.tried)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return 0
}
