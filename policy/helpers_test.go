package policy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// testKey is a key pair made by the real ssh-keygen.
type testKey struct {
	Name    string // ed25519, ecdsa, rsa
	Path    string // private key file (OpenSSH format, unencrypted)
	PubLine string // "type base64 comment"
	Pub     ssh.PublicKey
	Signer  ssh.Signer
}

var (
	keyDir  string
	keys    = map[string]*testKey{} // by Name
	keyList = []string{"ed25519", "ecdsa", "rsa"}
)

func TestMain(m *testing.M) {
	code := func() int {
		if _, err := exec.LookPath("ssh-keygen"); err != nil {
			fmt.Fprintln(os.Stderr, "policy tests need ssh-keygen (openssh-client):", err)
			return 1
		}
		dir, err := os.MkdirTemp("", "policy-keys-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		keyDir = dir
		for _, spec := range []struct{ name, typ, bits string }{
			{"ed25519", "ed25519", ""}, {"ecdsa", "ecdsa", "256"}, {"rsa", "rsa", "3072"},
		} {
			k, err := genKey(dir, spec.name, spec.typ, spec.bits, "")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			keys[spec.name] = k
		}
		return m.Run()
	}()
	os.Exit(code)
}

// genKey runs ssh-keygen to make a key; passphrase "" means unencrypted.
func genKey(dir, name, typ, bits, passphrase string) (*testKey, error) {
	path := filepath.Join(dir, name)
	args := []string{"-q", "-t", typ, "-N", passphrase, "-C", name + "@test", "-f", path}
	if bits != "" {
		args = append(args, "-b", bits)
	}
	if out, err := exec.Command("ssh-keygen", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ssh-keygen %v: %v: %s", args, err, out)
	}
	pubLine, err := os.ReadFile(path + ".pub")
	if err != nil {
		return nil, err
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(pubLine)
	if err != nil {
		return nil, err
	}
	k := &testKey{Name: name, Path: path, PubLine: strings.TrimSpace(string(pubLine)), Pub: pub}
	if passphrase == "" {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if k.Signer, err = ssh.ParsePrivateKey(pem); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// sshKeygen runs the real ssh-keygen with stdin and returns stdout, or an
// error carrying stderr.
func sshKeygen(t testing.TB, stdin []byte, env []string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh-keygen", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("ssh-keygen %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// writeFile writes content under t.TempDir and returns the path.
func writeFile(t testing.TB, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// signersFile builds allowed_signers text: one "principal pubkey" line per key.
func signersFile(lines ...string) []byte {
	return []byte(strings.Join(lines, "\n") + "\n")
}

func mustSigners(t testing.TB, text []byte) *AllowedSigners {
	t.Helper()
	a, err := ParseAllowedSigners(text)
	if err != nil {
		t.Fatalf("parse allowed signers: %v\n%s", err, text)
	}
	return a
}

func openStore(t testing.TB) *FileNonceStore {
	t.Helper()
	s, err := OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var testDigest = "sha256:" + strings.Repeat("ab", 32)

// fixedClock is a clock stuck at a moment.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

var t0 = time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)

func newTestRequest(t testing.TB, now time.Time) Request {
	t.Helper()
	r, err := NewRequest("drain_node", "gpu-03", "2026-11", testDigest,
		[]string{"node gpu-03: cordon, then evict 3 pods: default/model-0, default/model-1, monitoring/dcgm-x7"},
		2*time.Hour, fixedClock(now), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func expectFor(r Request) Expectation {
	return Expectation{Kind: r.Kind, Tool: r.Tool, Node: r.Node, Round: r.Round, PlanDigest: r.PlanDigest,
		Step: r.Step, Stop: r.Stop, Summary: r.Summary}
}

// skSigner is a FIDO authenticator in software: it signs like a hardware
// key does (application hash, flags, counter, message hash), so the
// verification path for sk- keys can be exercised against ssh-keygen.
type skSigner struct {
	pub     ssh.PublicKey
	ed      ed25519.PrivateKey
	ec      *ecdsa.PrivateKey
	app     string
	flags   byte
	counter uint32
}

func newSKSigner(t testing.TB, typ string) *skSigner {
	t.Helper()
	s := &skSigner{app: "ssh:", flags: skFlagUserPresence, counter: 7}
	var wire []byte
	switch typ {
	case ssh.KeyAlgoSKED25519:
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s.ed = priv
		wire = ssh.Marshal(struct {
			Type string
			Key  []byte
			App  string
		}{typ, pub, s.app})
	case ssh.KeyAlgoSKECDSA256:
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s.ec = priv
		pt, err := priv.PublicKey.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		wire = ssh.Marshal(struct {
			Type, Curve string
			Key         []byte
			App         string
		}{typ, "nistp256", pt, s.app})
	default:
		t.Fatalf("unknown sk type %s", typ)
	}
	pub, err := ssh.ParsePublicKey(wire)
	if err != nil {
		t.Fatal(err)
	}
	s.pub = pub
	return s
}

func (s *skSigner) PublicKey() ssh.PublicKey { return s.pub }

func (s *skSigner) Sign(random io.Reader, data []byte) (*ssh.Signature, error) {
	appHash := sha256.Sum256([]byte(s.app))
	msgHash := sha256.Sum256(data)
	var signed []byte
	signed = append(signed, appHash[:]...)
	signed = append(signed, s.flags, byte(s.counter>>24), byte(s.counter>>16), byte(s.counter>>8), byte(s.counter))
	signed = append(signed, msgHash[:]...)
	rest := []byte{s.flags, byte(s.counter >> 24), byte(s.counter >> 16), byte(s.counter >> 8), byte(s.counter)}
	if s.ed != nil {
		return &ssh.Signature{Format: s.pub.Type(), Blob: ed25519.Sign(s.ed, signed), Rest: rest}, nil
	}
	h := sha256.Sum256(signed)
	r, ss, err := ecdsa.Sign(random, s.ec, h[:])
	if err != nil {
		return nil, err
	}
	return &ssh.Signature{Format: s.pub.Type(), Blob: ssh.Marshal(struct{ R, S *big.Int }{r, ss}), Rest: rest}, nil
}

// armorUnchecked signs without the self-check signSSHSIG does, to build
// signatures that must be refused (no user presence, other namespaces).
func armorUnchecked(t testing.TB, signer ssh.Signer, namespace, hashAlg string, msg []byte) []byte {
	t.Helper()
	data, err := signedData(namespace, hashAlg, msg)
	if err != nil {
		t.Fatal(err)
	}
	var sig *ssh.Signature
	if as, ok := signer.(ssh.AlgorithmSigner); ok && signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		sig, err = as.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSASHA512)
	} else {
		sig, err = signer.Sign(rand.Reader, data)
	}
	if err != nil {
		t.Fatal(err)
	}
	return armor(marshalSigBlob(signer.PublicKey(), namespace, hashAlg, sig))
}
