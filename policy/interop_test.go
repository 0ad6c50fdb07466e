package policy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// allowedSignersFor lists every test key under principal "<name>@test".
func allowedSignersFor(names ...string) []byte {
	var lines []string
	for _, n := range names {
		lines = append(lines, n+"@test "+keys[n].PubLine)
	}
	return signersFile(lines...)
}

// TestSSHKeygenSignsWeVerify: a person approves with plain `ssh-keygen -Y
// sign` and our Verifier accepts it; signed in another namespace, refused.
func TestSSHKeygenSignsWeVerify(t *testing.T) {
	for _, name := range keyList {
		t.Run(name, func(t *testing.T) {
			req := newTestRequest(t, t0)
			sig, err := sshKeygen(t, req.Canonical(), nil, "-Y", "sign", "-n", Namespace, "-f", keys[name].Path)
			if err != nil {
				t.Fatal(err)
			}
			v := &Verifier{AllowedSigners: mustSigners(t, allowedSignersFor(keyList...)), NonceStore: openStore(t), Clock: fixedClock(t0)}
			got, err := v.Verify(context.Background(), FormatApproval(req, sig), expectFor(req))
			if err != nil {
				t.Fatalf("Verify of an ssh-keygen signature: %v", err)
			}
			if got.Principal != name+"@test" || got.KeyFingerprint != ssh.FingerprintSHA256(keys[name].Pub) || got.Nonce != req.Nonce {
				t.Errorf("Verified = %+v", got)
			}

			wrongNS, err := sshKeygen(t, req.Canonical(), nil, "-Y", "sign", "-n", "file", "-f", keys[name].Path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(context.Background(), FormatApproval(req, wrongNS), expectFor(req))
			if !errors.Is(err, ErrWrongNamespace) {
				t.Errorf("Verify of a -n file signature: got %v, want %v", err, ErrWrongNamespace)
			}
		})
	}
}

// verifyWithSSHKeygen runs `ssh-keygen -Y verify` and `-Y check-novalidate`.
func verifyWithSSHKeygen(t *testing.T, name string, msg, sig []byte, namespace string) error {
	t.Helper()
	signers := writeFile(t, "allowed_signers", allowedSignersFor(keyList...))
	sigPath := writeFile(t, "msg.sig", sig)
	if _, err := sshKeygen(t, msg, nil, "-Y", "verify", "-f", signers, "-I", name+"@test", "-n", namespace, "-s", sigPath); err != nil {
		return err
	}
	_, err := sshKeygen(t, msg, nil, "-Y", "check-novalidate", "-n", namespace, "-s", sigPath)
	return err
}

// TestWeSignSSHKeygenVerifies: what `mcp-patch approve` produces from a key
// file passes ssh-keygen's own checks, and for the deterministic key types
// is byte for byte what ssh-keygen writes.
func TestWeSignSSHKeygenVerifies(t *testing.T) {
	for _, name := range keyList {
		t.Run(name, func(t *testing.T) {
			msg := newTestRequest(t, t0).Canonical()
			res, err := SignWithKeyFile(keys[name].Path, nil, msg)
			if err != nil {
				t.Fatal(err)
			}
			if err := verifyWithSSHKeygen(t, name, msg, res.Signature, Namespace); err != nil {
				t.Fatalf("ssh-keygen refuses our signature: %v", err)
			}
			if err := verifyWithSSHKeygen(t, name, msg, res.Signature, "git"); err == nil {
				t.Error("ssh-keygen -Y verify -n git accepted an mcp-patch signature")
			}
			if err := verifyWithSSHKeygen(t, name, append(bytes.Clone(msg), 'x'), res.Signature, Namespace); err == nil {
				t.Error("ssh-keygen accepted our signature over a changed message")
			}
			if name == "ecdsa" {
				return // ECDSA signatures are randomised
			}
			theirs, err := sshKeygen(t, msg, nil, "-Y", "sign", "-n", Namespace, "-f", keys[name].Path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Signature, theirs) {
				t.Errorf("signature differs from ssh-keygen's:\nours:\n%s\ntheirs:\n%s", res.Signature, theirs)
			}
		})
	}
}

func TestSignWithEncryptedKeyFile(t *testing.T) {
	k, err := genKey(t.TempDir(), "enc", "ed25519", "", "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	msg := newTestRequest(t, t0).Canonical()
	if _, err := SignWithKeyFile(k.Path, nil, msg); err == nil || !strings.Contains(err.Error(), "encrypted") {
		t.Errorf("no passphrase: got %v, want an 'encrypted' error", err)
	}
	wrong := func() ([]byte, error) { return []byte("wrong"), nil }
	if _, err := SignWithKeyFile(k.Path, wrong, msg); err == nil {
		t.Error("wrong passphrase: signed anyway")
	}
	right := func() ([]byte, error) { return []byte("correct horse"), nil }
	res, err := SignWithKeyFile(k.Path, right, msg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fingerprint != ssh.FingerprintSHA256(k.Pub) {
		t.Errorf("fingerprint %s, want %s", res.Fingerprint, ssh.FingerprintSHA256(k.Pub))
	}
	signers := writeFile(t, "allowed_signers", signersFile("enc@test "+k.PubLine))
	if _, err := sshKeygen(t, msg, nil, "-Y", "verify", "-f", signers, "-I", "enc@test", "-n", Namespace, "-s", writeFile(t, "sig", res.Signature)); err != nil {
		t.Error(err)
	}
}

// startAgent runs a real ssh-agent in the foreground on a fresh socket and
// kills it (by pid) when the test ends.
func startAgent(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("ssh-agent"); err != nil {
		t.Fatalf("ssh-agent is needed: %v", err)
	}
	dir, err := os.MkdirTemp("", "agent-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "sock")
	cmd := exec.Command("ssh-agent", "-D", "-a", sock)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	// The socket file appears at bind, before the agent listens: wait until a
	// connection is accepted, not for the file.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			return sock
		}
		select {
		case <-done:
			t.Fatalf("ssh-agent exited: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh-agent socket %s accepted no connection in 10s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sshAdd(t *testing.T, sock, keyPath string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh-add", keyPath)
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add %s: %v: %s", keyPath, err, out)
	}
}

// TestSignWithAgent signs through a real ssh-agent (the path hardware keys
// take) and has ssh-keygen check the result.
func TestSignWithAgent(t *testing.T) {
	sock := startAgent(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	msg := newTestRequest(t, t0).Canonical()

	if _, err := SignWithAgent(ctx, sock, "", msg); err == nil || !strings.Contains(err.Error(), "no usable key") {
		t.Errorf("empty agent: got %v, want 'no usable key'", err)
	}
	sshAdd(t, sock, keys["ed25519"].Path)
	res, err := SignWithAgent(ctx, sock, "", msg)
	if err != nil {
		t.Fatalf("the only key: %v", err)
	}
	if res.Fingerprint != ssh.FingerprintSHA256(keys["ed25519"].Pub) || res.Comment != "ed25519@test" {
		t.Errorf("only key: signed with %s (%q)", res.Fingerprint, res.Comment)
	}
	sshAdd(t, sock, keys["ecdsa"].Path)
	sshAdd(t, sock, keys["rsa"].Path)
	if _, err := SignWithAgent(ctx, sock, "", msg); err == nil || !strings.Contains(err.Error(), "pick one by fingerprint") {
		t.Errorf("three keys, no filter: got %v, want 'pick one by fingerprint'", err)
	}
	if _, err := SignWithAgent(ctx, sock, "SHA256:nosuchkey", msg); err == nil {
		t.Error("unknown fingerprint: signed anyway")
	}
	for _, name := range keyList {
		t.Run(name, func(t *testing.T) {
			fp := ssh.FingerprintSHA256(keys[name].Pub)
			res, err := SignWithAgent(ctx, sock, strings.TrimPrefix(fp, "SHA256:"), msg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Fingerprint != fp {
				t.Errorf("signed with %s, want %s", res.Fingerprint, fp)
			}
			if err := verifyWithSSHKeygen(t, name, msg, res.Signature, Namespace); err != nil {
				t.Fatalf("ssh-keygen refuses the agent signature: %v", err)
			}
			if name != "ecdsa" {
				theirs, err := sshKeygen(t, msg, []string{"SSH_AUTH_SOCK=" + sock}, "-Y", "sign", "-n", Namespace, "-f", keys[name].Path+".pub")
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(res.Signature, theirs) {
					t.Errorf("agent signature differs from ssh-keygen's via the same agent:\nours:\n%s\ntheirs:\n%s", res.Signature, theirs)
				}
			}
		})
	}

	cancelled, stop := context.WithCancel(t.Context())
	stop()
	if _, err := SignWithAgent(cancelled, sock, "", msg); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v, want context.Canceled", err)
	}
}

// TestHardwareKeySignatures checks sk-ssh-ed25519 and sk-ecdsa signatures
// (made by a software authenticator with the FIDO signing rules) against
// both our Verifier and ssh-keygen, with and without the user-presence flag.
func TestHardwareKeySignatures(t *testing.T) {
	for _, typ := range []string{ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256} {
		t.Run(typ, func(t *testing.T) {
			sk := newSKSigner(t, typ)
			pubLine := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sk.pub)))
			signersText := signersFile("hw@test " + pubLine + " yubikey")
			v := &Verifier{AllowedSigners: mustSigners(t, signersText), NonceStore: openStore(t), Clock: fixedClock(t0)}
			signersPath := writeFile(t, "allowed_signers", signersText)

			req := newTestRequest(t, t0)
			res, err := Sign(sk, req.Canonical())
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(context.Background(), FormatApproval(req, res.Signature), expectFor(req))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if !got.HardwareKey || got.KeyType != typ {
				t.Errorf("Verified = %+v, want a hardware key of type %s", got, typ)
			}
			if _, err := sshKeygen(t, req.Canonical(), nil, "-Y", "verify", "-f", signersPath, "-I", "hw@test", "-n", Namespace, "-s", writeFile(t, "sig", res.Signature)); err != nil {
				t.Errorf("ssh-keygen refuses the hardware-key signature: %v", err)
			}

			sk.flags = 0 // signed without a touch
			noTouch := armorUnchecked(t, sk, Namespace, hashSHA512, req.Canonical())
			_, err = v.Verify(context.Background(), FormatApproval(req, noTouch), expectFor(req))
			if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "user presence") {
				t.Errorf("Verify without user presence: got %v, want bad_signature about user presence", err)
			}
			// ssh-keygen (OpenSSH 9.2) accepts it, so the signature is
			// well-formed and only our user-presence rule refuses it.
			out, err := sshKeygen(t, req.Canonical(), nil, "-Y", "verify", "-f", signersPath, "-I", "hw@test", "-n", Namespace, "-s", writeFile(t, "sig", noTouch))
			t.Logf("ssh-keygen on the untouched signature: err=%v out=%q", err, out)
		})
	}
}
