package policy

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Namespace is the SSHSIG namespace of every mcp-patch signature
// (`ssh-keygen -Y sign -n mcp-patch`). A signature made for another purpose
// (git commits use "git", files use "file") can never pass as an approval.
const Namespace = "mcp-patch"

// SSHSIG wire constants (OpenSSH PROTOCOL.sshsig).
const (
	sshsigMagic   = "SSHSIG"
	sshsigVersion = 1
	armorBegin    = "-----BEGIN SSH SIGNATURE-----"
	armorEnd      = "-----END SSH SIGNATURE-----"
	armorWidth    = 70 // what ssh-keygen writes
	maxArmorWidth = 76
	hashSHA512    = "sha512" // what ssh-keygen signs with
	hashSHA256    = "sha256"
)

// minRSABits is the smallest RSA modulus accepted for a signer.
const minRSABits = 2048

// sigBlob is a decoded SSHSIG signature.
type sigBlob struct {
	PublicKey ssh.PublicKey
	Namespace string
	HashAlg   string
	Signature ssh.Signature
}

// signedData is what the key actually signs: the magic preamble, then the
// namespace, the reserved string, the hash algorithm and H(message), each as
// an SSH string.
func signedData(namespace, hashAlg string, message []byte) ([]byte, error) {
	var h []byte
	switch hashAlg {
	case hashSHA512:
		s := sha512.Sum512(message)
		h = s[:]
	case hashSHA256:
		s := sha256.Sum256(message)
		h = s[:]
	default:
		return nil, fmt.Errorf("hash algorithm %q is not sha256 or sha512", hashAlg)
	}
	var b bytes.Buffer
	b.WriteString(sshsigMagic)
	for _, s := range [][]byte{[]byte(namespace), nil, []byte(hashAlg), h} {
		b.Write(sshString(s))
	}
	return b.Bytes(), nil
}

func sshString(s []byte) []byte {
	out := make([]byte, 4+len(s))
	out[0], out[1], out[2], out[3] = byte(len(s)>>24), byte(len(s)>>16), byte(len(s)>>8), byte(len(s))
	copy(out[4:], s)
	return out
}

// signSSHSIG signs message with signer in namespace and returns the armored
// signature, byte for byte what `ssh-keygen -Y sign` writes for the same key
// (ed25519 and RSA signatures are deterministic, so identical).
func signSSHSIG(signer ssh.Signer, namespace string, message []byte, random io.Reader) ([]byte, error) {
	pub := signer.PublicKey()
	if err := checkSignerKey(pub); err != nil {
		return nil, err
	}
	data, err := signedData(namespace, hashSHA512, message)
	if err != nil {
		return nil, err
	}
	var sig *ssh.Signature
	if underlyingType(pub) == ssh.KeyAlgoRSA {
		as, ok := signer.(ssh.AlgorithmSigner)
		if !ok {
			return nil, errors.New("this RSA signer cannot make rsa-sha2-512 signatures")
		}
		sig, err = as.SignWithAlgorithm(random, data, ssh.KeyAlgoRSASHA512)
	} else {
		sig, err = signer.Sign(random, data)
	}
	if err != nil {
		return nil, fmt.Errorf("sign with %s key %s: %w", pub.Type(), ssh.FingerprintSHA256(pub), err)
	}
	// Check our own work: a signature we cannot verify must not leave here.
	if err := pub.Verify(data, sig); err != nil {
		return nil, fmt.Errorf("the %s key %s produced a signature that does not verify: %w", pub.Type(), ssh.FingerprintSHA256(pub), err)
	}
	return armor(marshalSigBlob(pub, namespace, hashSHA512, sig)), nil
}

func marshalSigBlob(pub ssh.PublicKey, namespace, hashAlg string, sig *ssh.Signature) []byte {
	var b bytes.Buffer
	b.WriteString(sshsigMagic)
	b.Write([]byte{0, 0, 0, sshsigVersion})
	b.Write(sshString(pub.Marshal()))
	b.Write(sshString([]byte(namespace)))
	b.Write(sshString(nil))
	b.Write(sshString([]byte(hashAlg)))
	b.Write(sshString(ssh.Marshal(sig)))
	return b.Bytes()
}

func armor(blob []byte) []byte {
	enc := base64.StdEncoding.EncodeToString(blob)
	var b bytes.Buffer
	b.WriteString(armorBegin + "\n")
	for len(enc) > armorWidth {
		b.WriteString(enc[:armorWidth] + "\n")
		enc = enc[armorWidth:]
	}
	b.WriteString(enc + "\n")
	b.WriteString(armorEnd + "\n")
	return b.Bytes()
}

// unarmor decodes an armored signature. It accepts what ssh-keygen writes:
// the begin line, base64 lines of at most 76 characters, the end line, and
// an optional final newline; nothing else.
func unarmor(text string) ([]byte, error) {
	body, ok := strings.CutPrefix(text, armorBegin+"\n")
	if !ok {
		return nil, errors.New("signature does not start with " + armorBegin)
	}
	body = strings.TrimSuffix(body, "\n") // the end line may lack its newline
	lines := strings.Split(body, "\n")
	if len(lines) < 2 || lines[len(lines)-1] != armorEnd {
		return nil, errors.New("signature does not end with " + armorEnd)
	}
	var enc strings.Builder
	for i, l := range lines[:len(lines)-1] {
		if l == "" || len(l) > maxArmorWidth {
			return nil, fmt.Errorf("signature line %d: %d characters, want 1 to %d", i+2, len(l), maxArmorWidth)
		}
		enc.WriteString(l)
	}
	blob, err := base64.StdEncoding.Strict().DecodeString(enc.String())
	if err != nil {
		return nil, fmt.Errorf("signature base64: %w", err)
	}
	return blob, nil
}

// reader walks SSH wire encoding.
type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = errors.New("truncated")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) uint32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (r *reader) string() []byte {
	n := r.uint32()
	if r.err != nil {
		return nil
	}
	if n > uint32(len(r.b)) {
		r.err = errors.New("truncated")
		return nil
	}
	return r.bytes(int(n))
}

// parseSigBlob decodes the binary SSHSIG structure. Trailing bytes, unknown
// versions, non-empty reserved fields and certificates are refused.
func parseSigBlob(blob []byte) (sigBlob, error) {
	r := &reader{b: blob}
	if string(r.bytes(len(sshsigMagic))) != sshsigMagic {
		return sigBlob{}, errors.New("not an SSHSIG signature (bad magic)")
	}
	if v := r.uint32(); r.err == nil && v != sshsigVersion {
		return sigBlob{}, fmt.Errorf("SSHSIG version %d, want %d", v, sshsigVersion)
	}
	pubBytes := r.string()
	namespace := r.string()
	reserved := r.string()
	hashAlg := r.string()
	sigBytes := r.string()
	if r.err != nil {
		return sigBlob{}, fmt.Errorf("SSHSIG structure %w", r.err)
	}
	if len(r.b) != 0 {
		return sigBlob{}, fmt.Errorf("SSHSIG structure has %d trailing bytes", len(r.b))
	}
	if len(reserved) != 0 {
		return sigBlob{}, errors.New("SSHSIG reserved field is not empty")
	}
	pub, err := ssh.ParsePublicKey(pubBytes)
	if err != nil {
		return sigBlob{}, fmt.Errorf("SSHSIG public key: %w", err)
	}
	var sig ssh.Signature
	if err := ssh.Unmarshal(sigBytes, &sig); err != nil {
		return sigBlob{}, fmt.Errorf("SSHSIG signature: %w", err)
	}
	return sigBlob{PublicKey: pub, Namespace: string(namespace), HashAlg: string(hashAlg), Signature: sig}, nil
}

// unsupportedKeyError says a key cannot be used for mcp-patch signatures.
type unsupportedKeyError struct{ msg string }

func (e *unsupportedKeyError) Error() string { return e.msg }

// checkSignerKey accepts the key types an approval may be signed with:
// ed25519, ECDSA (NIST P-256/384/521), RSA of at least 2048 bits, and the
// FIDO hardware types sk-ssh-ed25519@openssh.com and
// sk-ecdsa-sha2-nistp256@openssh.com. Certificates and DSA are refused.
func checkSignerKey(pub ssh.PublicKey) error {
	if _, ok := pub.(*ssh.Certificate); ok {
		return &unsupportedKeyError{"SSH certificates are not supported: list the person's plain public key in allowed_signers and sign with the key itself"}
	}
	switch pub.Type() {
	case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
		ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256:
		return nil
	case ssh.KeyAlgoRSA:
		ck, ok := pub.(ssh.CryptoPublicKey)
		if !ok { // e.g. an agent.Key: parse its wire form
			parsed, err := ssh.ParsePublicKey(pub.Marshal())
			if ck, ok = parsed.(ssh.CryptoPublicKey); err != nil || !ok {
				return &unsupportedKeyError{"RSA key without a usable public key"}
			}
		}
		rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey)
		if !ok || rk.N.BitLen() < minRSABits {
			return &unsupportedKeyError{fmt.Sprintf("RSA key is shorter than %d bits", minRSABits)}
		}
		return nil
	}
	return &unsupportedKeyError{fmt.Sprintf("key type %s is not accepted (use ed25519, ecdsa, rsa or a FIDO sk key)", pub.Type())}
}

func underlyingType(pub ssh.PublicKey) string {
	if c, ok := pub.(*ssh.Certificate); ok {
		return c.Key.Type()
	}
	return pub.Type()
}

// isSK reports whether pub is a FIDO hardware key.
func isSK(pub ssh.PublicKey) bool {
	t := pub.Type()
	return t == ssh.KeyAlgoSKED25519 || t == ssh.KeyAlgoSKECDSA256
}

// skFlagUserPresence is the FIDO "user present" flag: someone touched the key.
const skFlagUserPresence = 0x01

// verifySigBlob checks the cryptography of a decoded signature over message
// in namespace. It does not look at who the key belongs to.
func verifySigBlob(sb sigBlob, namespace string, message []byte) error {
	if sb.Namespace != namespace {
		return fmt.Errorf("signature namespace is %q, want %q", sb.Namespace, namespace)
	}
	if err := checkSignerKey(sb.PublicKey); err != nil {
		return err
	}
	sig := sb.Signature
	switch {
	case sb.PublicKey.Type() == ssh.KeyAlgoRSA:
		if sig.Format != ssh.KeyAlgoRSASHA512 && sig.Format != ssh.KeyAlgoRSASHA256 {
			return fmt.Errorf("RSA signature algorithm %q is refused (want rsa-sha2-512 or rsa-sha2-256)", sig.Format)
		}
	case sig.Format != sb.PublicKey.Type():
		return fmt.Errorf("signature algorithm %q does not match key type %s", sig.Format, sb.PublicKey.Type())
	}
	if isSK(sb.PublicKey) {
		if len(sig.Rest) != 5 {
			return errors.New("hardware-key signature without flags and counter")
		}
		if sig.Rest[0]&skFlagUserPresence == 0 {
			return errors.New("hardware-key signature was made without user presence (nobody touched the key)")
		}
	} else if len(sig.Rest) != 0 {
		return errors.New("signature has trailing bytes")
	}
	data, err := signedData(namespace, sb.HashAlg, message)
	if err != nil {
		return err
	}
	if err := sb.PublicKey.Verify(data, &sig); err != nil {
		return fmt.Errorf("signature does not verify with %s key %s: %w", sb.PublicKey.Type(), ssh.FingerprintSHA256(sb.PublicKey), err)
	}
	return nil
}
