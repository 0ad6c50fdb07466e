package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sshKeygenApproval is req signed by the real ssh-keygen with test key
// name (ssh-keygen -Y sign -n mcp-patch), as a person approves by hand.
func sshKeygenApproval(t *testing.T, name string, req Request) (approval string, sig []byte) {
	t.Helper()
	sig, err := sshKeygen(t, req.Canonical(), nil, "-Y", "sign", "-n", Namespace, "-f", keys[name].Path)
	if err != nil {
		t.Fatal(err)
	}
	return FormatApproval(req, sig), sig
}

// TestNegatedPrincipalsAdmitNoOne: a line whose principals name nobody
// that its negations leave standing ("!*", "!alice@test,*", a name and its
// own negation, a wildcard alone) admits its key as no one, and
// ssh-keygen -Y verify refuses every name the line mentions too. Each
// line stands alone, as in ssh-keygen: a "!*" line does not take back
// what another line of the same key admits.
func TestNegatedPrincipalsAdmitNoOne(t *testing.T) {
	ed := keys["ed25519"]
	req := newTestRequest(t, t0)
	approval, sig := sshKeygenApproval(t, "ed25519", req)
	sigPath := writeFile(t, "request.sig", sig)
	for _, principals := range []string{`!*`, `!alice@test,*`, `alice@test,!alice@test`, `alice@test,!*@test`, `*@test`, `"!alice@test,*"`} {
		t.Run(principals, func(t *testing.T) {
			line := principals + ` namespaces="mcp-patch" ` + keyOnly(ed) + "\n"
			a := mustSigners(t, []byte(line))
			if names := a.Signers[0].Names(); len(names) != 0 {
				t.Errorf("Names() = %q, want none", names)
			}
			v := &Verifier{AllowedSigners: a, NonceStore: openStore(t), Clock: fixedClock(t0)}
			_, err := v.Verify(context.Background(), approval, expectFor(req))
			if !errors.Is(err, ErrNoPrincipal) || !strings.Contains(err.Error(), "line 1") {
				t.Fatalf("Verify: %v, want %v naming line 1", err, ErrNoPrincipal)
			}
			path := writeFile(t, "allowed_signers", []byte(line))
			for _, name := range []string{"alice@test", "ed25519@test"} {
				if !strings.Contains(principals, name) && principals != "!*" {
					continue
				}
				if _, err := sshKeygen(t, req.Canonical(), nil, "-Y", "verify", "-f", path, "-I", name, "-n", Namespace, "-s", sigPath); err == nil {
					t.Errorf("ssh-keygen -Y verify -I %s accepted the line, we refuse it", name)
				}
			}
		})
	}

	t.Run("another line of the key", func(t *testing.T) {
		a := mustSigners(t, signersFile(`!* `+keyOnly(ed), `alice@test `+keyOnly(ed)))
		v := &Verifier{AllowedSigners: a, NonceStore: openStore(t), Clock: fixedClock(t0)}
		got, err := v.Verify(context.Background(), approval, expectFor(req))
		if err != nil || got.Principal != "alice@test" || got.SignerLine != 2 {
			t.Fatalf("Verify = %q line %d, %v; want alice@test on line 2", got.Principal, got.SignerLine, err)
		}
	})
}

// TestApprovalRecordsPrincipal: an accepted approval names the principals
// its allowed_signers line admits the key as, by name: not the field as
// written, never a negated name or a pattern.
func TestApprovalRecordsPrincipal(t *testing.T) {
	ed := keys["ed25519"]
	req := newTestRequest(t, t0)
	approval, _ := sshKeygenApproval(t, "ed25519", req)
	for _, tt := range []struct {
		name, principals string
		want             []string
	}{
		{"one name", `alice@test`, []string{"alice@test"}},
		{"names, a negation and a pattern", `alice@test,alice-oncall@test,!mallory@test,*@ops`, []string{"alice@test", "alice-oncall@test"}},
		{"a name its pattern negates", `alice@test,!alice@*,bob@test`, []string{"bob@test"}},
		{"quoted", `"carol x@test,carol x@test"`, []string{"carol x@test"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := mustSigners(t, signersFile(tt.principals+` namespaces="mcp-patch" `+keyOnly(ed)))
			v := &Verifier{AllowedSigners: a, NonceStore: openStore(t), Clock: fixedClock(t0)}
			got, err := v.Verify(context.Background(), approval, expectFor(req))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.Principals); diff != "" {
				t.Errorf("Principals (-want +got):\n%s", diff)
			}
			if want := strings.Join(tt.want, ","); got.Principal != want {
				t.Errorf("Principal = %q, want %q", got.Principal, want)
			}
		})
	}
}

// TestRequiredPrincipalRefusesAnother: a step that needs one of named
// principals refuses a valid signature by another (naming those it
// needs), burns nothing, and accepts the same request signed by one of
// them.
func TestRequiredPrincipalRefusesAnother(t *testing.T) {
	ed, ec := keys["ed25519"], keys["ecdsa"]
	a := mustSigners(t, signersFile(`alice@test `+keyOnly(ed), `bob@test,!alice@test `+keyOnly(ec)))
	v := &Verifier{AllowedSigners: a, NonceStore: openStore(t), Clock: fixedClock(t0)}
	req := newTestRequest(t, t0)
	want := expectFor(req)
	want.Principals = []string{"bob@test", "carol@test"}

	byAlice, _ := sshKeygenApproval(t, "ed25519", req)
	_, err := v.Verify(context.Background(), byAlice, want)
	if !errors.Is(err, ErrPrincipalNotAllowed) {
		t.Fatalf("Verify of alice's signature: %v, want %v", err, ErrPrincipalNotAllowed)
	}
	for _, w := range []string{"signed by alice@test", "needs a signature by bob@test or carol@test"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	var re *RefusalError
	if !errors.As(err, &re) || re.Hint() == "" {
		t.Errorf("refusal without a hint: %v", err)
	}
	if _, err := v.Verify(context.Background(), byAlice, expectFor(req)); err != nil {
		t.Fatalf("alice's approval was burned by the refusal, or needs no principal and still fails: %v", err)
	}

	byBob, _ := sshKeygenApproval(t, "ecdsa", req)
	got, err := v.Verify(context.Background(), byBob, want)
	if err != nil || got.Principal != "bob@test" {
		t.Fatalf("Verify of bob's signature = %q, %v", got.Principal, err)
	}
	if err := got.RequirePrincipals([]string{"carol@test"}); !errors.Is(err, ErrPrincipalNotAllowed) || !strings.Contains(err.Error(), "carol@test") {
		t.Errorf("RequirePrincipals(carol) of bob's approval: %v", err)
	}
	if err := got.RequirePrincipals(nil); err != nil {
		t.Errorf("RequirePrincipals(none): %v", err)
	}
}
