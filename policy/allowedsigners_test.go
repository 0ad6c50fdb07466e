package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

type signerSummary struct {
	Line                    int
	Principals, Namespaces  []string
	ValidAfter, ValidBefore time.Time
	Fingerprint, Comment    string
	LabOnly                 bool
}

func summarize(a *AllowedSigners) []signerSummary {
	var out []signerSummary
	for _, s := range a.Signers {
		out = append(out, signerSummary{s.Line, s.Principals, s.Namespaces, s.ValidAfter, s.ValidBefore, s.Fingerprint(), s.Comment, s.LabOnly})
	}
	return out
}

func TestParseAllowedSigners(t *testing.T) {
	ed, ec, rsa := keys["ed25519"].PubLine, keys["ecdsa"].PubLine, keys["rsa"].PubLine
	fp := func(n string) string { return ssh.FingerprintSHA256(keys[n].Pub) }
	keyOnly := func(line string) string { f := strings.Fields(line); return f[0] + " " + f[1] }
	text := strings.Join([]string{
		"# people who may approve patch steps",
		"",
		"   # indented comment",
		"alice@example.com,alice " + keyOnly(ed),
		`bob@example.com namespaces="mcp-patch,git" ` + keyOnly(ec) + " bob's laptop",
		`"carol@example.com" valid-after="20260101Z",valid-before="202612312359Z" ` + keyOnly(rsa),
		"\tci@lab NAMESPACES=\"mcp-patch\" " + keyOnly(ed) + " Lab-Only fleet simulator",
		"dave@example.com " + keyOnly(ec) + " not-lab-only-but-says-lab-onlyish",
		"lab-approver@lab " + keyOnly(rsa) + " lab-only: signs in the lab demo",
		"",
	}, "\n")
	a, err := ParseAllowedSigners([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []signerSummary{
		{Line: 4, Principals: []string{"alice@example.com", "alice"}, Fingerprint: fp("ed25519")},
		{Line: 5, Principals: []string{"bob@example.com"}, Namespaces: []string{"mcp-patch", "git"}, Fingerprint: fp("ecdsa"), Comment: "bob's laptop"},
		{Line: 6, Principals: []string{"carol@example.com"}, ValidAfter: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			ValidBefore: time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC), Fingerprint: fp("rsa")},
		{Line: 7, Principals: []string{"ci@lab"}, Namespaces: []string{"mcp-patch"}, Fingerprint: fp("ed25519"), Comment: "Lab-Only fleet simulator", LabOnly: true},
		{Line: 8, Principals: []string{"dave@example.com"}, Fingerprint: fp("ecdsa"), Comment: "not-lab-only-but-says-lab-onlyish"},
		{Line: 9, Principals: []string{"lab-approver@lab"}, Fingerprint: fp("rsa"), Comment: "lab-only: signs in the lab demo", LabOnly: true},
	}
	if diff := cmp.Diff(want, summarize(a)); diff != "" {
		t.Errorf("parsed (-want +got):\n%s", diff)
	}
	if lab := a.LabOnly(); len(lab) != 2 || lab[0].Line != 7 || lab[1].Line != 9 {
		t.Errorf("LabOnly() = %v", summarize(&AllowedSigners{Signers: lab}))
	}
	if got := a.ForKey(keys["ed25519"].Pub); len(got) != 2 || got[0].Line != 4 || got[1].Line != 7 {
		t.Errorf("ForKey(ed25519) lines: %v", summarize(&AllowedSigners{Signers: got}))
	}

	// The same file is one ssh-keygen accepts.
	msg := []byte("hello\n")
	sig, err := sshKeygen(t, msg, nil, "-Y", "sign", "-n", Namespace, "-f", keys["ecdsa"].Path)
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "allowed_signers", []byte(text))
	if _, err := sshKeygen(t, msg, nil, "-Y", "verify", "-f", path, "-I", "bob@example.com", "-n", Namespace, "-s", writeFile(t, "sig", sig)); err != nil {
		t.Errorf("ssh-keygen refuses the same allowed_signers: %v", err)
	}
}

func TestParseAllowedSignersRefuses(t *testing.T) {
	ed := keys["ed25519"].PubLine
	f := strings.Fields(ed)
	typ, b64 := f[0], f[1]
	dsaPath := filepath.Join(t.TempDir(), "dsa")
	if _, err := sshKeygen(t, nil, nil, "-q", "-t", "dsa", "-N", "", "-f", dsaPath); err != nil {
		t.Fatal(err)
	}
	dsaPub, err := os.ReadFile(dsaPath + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, text, want string }{
		{"cert-authority", "*@example.com cert-authority " + ed, "cert-authority is not supported"},
		{"unknown option", `a@b no-touch-required ` + ed, `unknown option "no-touch-required"`},
		{"duplicate namespaces", `a@b namespaces="x",namespaces="y" ` + ed, "more than one namespaces"},
		{"unquoted namespaces", `a@b namespaces=mcp-patch ` + ed, "not quoted"},
		{"unterminated quote", `a@b namespaces="mcp-patch ` + ed, "unterminated quote"},
		{"before not after", `a@b valid-after="20260102",valid-before="20260101" ` + ed, "not after"},
		{"bad time", `a@b valid-after="2026-01-01" ` + ed, "YYYYMMDD"},
		{"trailing comma", `a@b namespaces="x", ` + ed, `unexpected ","`},
		{"trailing comma after flag", `a@b cert-authority, ` + ed, "trailing comma"},
		{"missing key", "a@b", "missing key"},
		{"missing key after options", `a@b namespaces="x"`, "missing key"},
		{"unknown key type", "a@b ssh-foo " + b64, "unknown key type"},
		{"type mismatch", "a@b ecdsa-sha2-nistp256 " + b64, "does not match"},
		{"bad base64", "a@b " + typ + " !!!!", "key data"},
		{"truncated key", "a@b " + typ + " " + b64[:20], typ},
		{"DSA", "a@b " + strings.TrimSpace(string(dsaPub)), "ssh-dss"},
		{"CR", "a@b " + ed + "\r", "carriage return"},
		{"empty principal", "a@b,,c " + ed, "empty principal"},
		{"quote inside principals", `"carol x@example.com",dave@example.com ` + ed, "quote the whole list"},
		{"stray quote", `carol"x" ` + ed, "quote the whole list"},
		{"unterminated quote in principals", `"carol ` + ed, "unterminated quote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAllowedSigners([]byte("# ok\n" + tt.text + "\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "line 2") {
				t.Errorf("got %v, want an error on line 2 containing %q", err, tt.want)
			}
		})
	}
}

func TestMatchPatternList(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		want     bool
	}{
		{"alice@example.com", []string{"alice@example.com"}, true},
		{"alice@example.com", []string{"*@example.com"}, true},
		{"alice@example.com", []string{"?lice@*"}, true},
		{"alice@example.com", []string{"*@example.org"}, false},
		{"alice@example.com", []string{"*@example.com", "!alice@*"}, false},
		{"bob@example.com", []string{"*@example.com", "!alice@*"}, true},
		{"bob@example.com", []string{"!alice@*"}, false},
		{"mcp-patch", []string{"git", "mcp-*"}, true},
		{"", []string{"*"}, true},
		{"abc", []string{"a*c*"}, true},
		{"abc", []string{"a*b"}, false},
		{"Alice", []string{"alice"}, false},
	}
	for _, tt := range tests {
		if got := matchPatternList(tt.name, tt.patterns); got != tt.want {
			t.Errorf("matchPatternList(%q, %q) = %v, want %v", tt.name, tt.patterns, got, tt.want)
		}
	}
}

func TestAllowedSignerValidity(t *testing.T) {
	s := AllowedSigner{ValidAfter: t0, ValidBefore: t0.Add(time.Hour)}
	for _, tt := range []struct {
		at   time.Time
		want bool
	}{
		{t0.Add(-time.Second), false},
		{t0, true},
		{t0.Add(time.Hour), true},
		{t0.Add(time.Hour + 500*time.Millisecond), true}, // whole seconds, as ssh-keygen
		{t0.Add(time.Hour + time.Second), false},
	} {
		if got := s.ValidAt(tt.at); got != tt.want {
			t.Errorf("ValidAt(%s) = %v, want %v", tt.at, got, tt.want)
		}
	}
}

// TestPrincipalMatchingAgreesWithSSHKeygen asks ssh-keygen -Y verify -I
// about the same names and patterns as MatchesPrincipal.
func TestPrincipalMatchingAgreesWithSSHKeygen(t *testing.T) {
	ed := keys["ed25519"]
	msg := []byte("hello\n")
	sig, err := sshKeygen(t, msg, nil, "-Y", "sign", "-n", Namespace, "-f", ed.Path)
	if err != nil {
		t.Fatal(err)
	}
	sigPath := writeFile(t, "sig", sig)
	for _, line := range []string{
		`alice@example.com,*@ops,!mallory@ops ` + keyOnly(ed),
		`"carol x@example.com,?ave@example.com" ` + keyOnly(ed),
	} {
		a := mustSigners(t, []byte(line+"\n"))
		path := writeFile(t, "allowed_signers", []byte(line+"\n"))
		for _, name := range []string{"alice@example.com", "bob@ops", "mallory@ops", "alice@example.org", "carol x@example.com", "dave@example.com", "ddave@example.com"} {
			_, err := sshKeygen(t, msg, nil, "-Y", "verify", "-f", path, "-I", name, "-n", Namespace, "-s", sigPath)
			theirs := err == nil
			if ours := a.Signers[0].MatchesPrincipal(name); ours != theirs {
				t.Errorf("%q against %q: ours %v, ssh-keygen %v (%v)", name, line, ours, theirs, err)
			}
		}
	}
}

// TestSignerOptionsAgreeWithSSHKeygen: for the same allowed_signers line,
// our Verifier and ssh-keygen -Y verify accept and refuse alike (both at
// the real current time).
func TestSignerOptionsAgreeWithSSHKeygen(t *testing.T) {
	ed := keys["ed25519"]
	now := time.Now()
	req := newTestRequest(t, now)
	sig, err := sshKeygen(t, req.Canonical(), nil, "-Y", "sign", "-n", Namespace, "-f", ed.Path)
	if err != nil {
		t.Fatal(err)
	}
	sigPath := writeFile(t, "sig", sig)
	for _, opts := range []string{
		``,
		`namespaces="git"`,
		`namespaces="mcp-*,git"`,
		`namespaces="*,!mcp-patch"`,
		`valid-before="20200101"`,
		`valid-after="20200101Z"`,
		`valid-after="202001011200",valid-before="29991231235959Z"`,
		`valid-after="29990101"`,
	} {
		line := "p@test " + opts + " " + keyOnly(ed) + "\n"
		_, theirErr := sshKeygen(t, req.Canonical(), nil, "-Y", "verify", "-f", writeFile(t, "allowed_signers", []byte(line)), "-I", "p@test", "-n", Namespace, "-s", sigPath)
		v := &Verifier{AllowedSigners: mustSigners(t, []byte(line)), NonceStore: openStore(t)}
		_, ourErr := v.Verify(context.Background(), FormatApproval(req, sig), expectFor(req))
		if (ourErr == nil) != (theirErr == nil) {
			t.Errorf("%s: ours %v, ssh-keygen %v", opts, ourErr, theirErr)
		}
	}
}
