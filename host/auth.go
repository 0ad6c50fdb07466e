package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// DefaultIdentityFiles are the identity files ssh(1) tries when none is
// configured, in its order (OpenSSH 9, ssh_config(5) IdentityFile), under
// home. id_dsa is left out: OpenSSH 10 dropped DSA.
func DefaultIdentityFiles(home string) []string {
	if home == "" {
		return nil
	}
	var out []string
	for _, name := range []string{"id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk"} {
		out = append(out, filepath.Join(home, ".ssh", name))
	}
	return out
}

// NoKeyError is returned (wrapped) when a handshake would offer no key at
// all: the agent has none (or there is no agent) and no identity file gave
// one. Tried names each identity file looked at and why it gave no key.
type NoKeyError struct {
	Node string
	// Agent is the agent socket; empty when none is configured.
	Agent string
	// AgentErr says why the agent at Agent could not be reached; empty
	// when it answered.
	AgentErr string
	// Tried is "path (why)" for each identity file looked at, in order.
	Tried []string
}

func (e *NoKeyError) Error() string {
	agentPart := "no ssh-agent to ask (SSH_AUTH_SOCK is not set, or IdentityAgent none)"
	switch {
	case e.AgentErr != "":
		agentPart = "the ssh-agent at " + e.Agent + " could not be reached (" + e.AgentErr + ")"
	case e.Agent != "":
		agentPart = "the ssh-agent at " + e.Agent + " holds no keys"
	}
	files := "no identity file is configured"
	if len(e.Tried) > 0 {
		files = "identity files tried: " + strings.Join(e.Tried, ", ")
	}
	return fmt.Sprintf("no SSH key for node %s: %s; %s", e.Node, agentPart, files)
}

// identityFiles says which identity files a handshake with t reads:
// strict ones (the pool's, then the inventory's) must each give a key or
// the connection fails; lenient ones (the OpenSSH configuration's
// IdentityFile lines, or, when nothing names any file, the default
// identities) are skipped with a note when missing or locked, as ssh(1)
// skips them. Pure.
func identityFiles(cfg Config, t Target) (strict, lenient []string) {
	strict = append(append(strict, cfg.IdentityFiles...), t.IdentityFiles...)
	lenient = append(lenient, t.ConfigIdentityFiles...)
	if len(strict) == 0 && len(lenient) == 0 {
		lenient = append(lenient, cfg.DefaultIdentityFiles...)
	}
	return strict, lenient
}

// keyFiles parses private key files once and keeps the signers.
type keyFiles struct {
	mu      sync.Mutex
	signers map[string]ssh.Signer
}

// errLocked is a passphrase-protected identity file; its public key, when
// the file carries it, is in the PassphraseMissingError it wraps.
var errLocked = errors.New("passphrase-protected")

func (k *keyFiles) signer(path string) (ssh.Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.signers[path]; ok {
		return s, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read identity file: %w", err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			return nil, fmt.Errorf("identity file %s is %w: load it into ssh-agent (ssh-add %s) instead: %w", path, errLocked, path, pp)
		}
		return nil, fmt.Errorf("parse identity file %s: %w", path, err)
	}
	if k.signers == nil {
		k.signers = make(map[string]ssh.Signer)
	}
	k.signers[path] = s
	return s, nil
}

// heldByAgent says whether a locked identity file's key is one the agent
// holds (then the agent's copy is offered, and the file is no loss).
func heldByAgent(err error, held map[string]bool) bool {
	var pp *ssh.PassphraseMissingError
	return errors.As(err, &pp) && pp.PublicKey != nil && held[string(pp.PublicKey.Marshal())]
}

// whyNoKey is the short reason a lenient identity file gave no key.
func whyNoKey(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "not found"
	case errors.Is(err, errLocked):
		return "passphrase-protected and not in the agent: ssh-add it"
	}
	return err.Error()
}

// login records which key a handshake logged in with: the server asks for
// a signature only from a key it accepts.
type login struct{ key atomic.Pointer[string] }

// authFor builds the public-key auth method for one handshake: the agent's
// keys first (when an agent socket is configured), then the identity files
// identityFiles names. The returned closer ends the agent connection and
// must be called once the handshake is over; the login says which key the
// host accepted.
func (p *Pool) authFor(ctx context.Context, t Target) (ssh.AuthMethod, io.Closer, *login, error) {
	rec := &login{}
	var signers []ssh.Signer
	var closer io.Closer = nopCloser{}
	held := map[string]bool{}
	var agentErr string
	socket := agentSocket(p.cfg.AgentSocket, t.IdentityAgent)
	if socket != "" {
		// An agent that does not answer (a stale SSH_AUTH_SOCK) is passed
		// over, as ssh(1) passes it over: the key files may still do.
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			agentErr = err.Error()
			p.log.Warn("ssh-agent not reachable; trying the identity files alone", "node", t.Name, "agent", socket, "err", err)
		} else {
			if signers, held, err = agentSigners(conn, rec); err != nil {
				conn.Close()
				return nil, nil, nil, fmt.Errorf("list ssh-agent keys at %s: %w", socket, err)
			}
			closer = conn
		}
	}
	strict, lenient := identityFiles(p.cfg, t)
	for _, f := range strict {
		s, err := p.keys.signer(f)
		switch {
		case err == nil:
			signers = append(signers, recording(s, f, rec))
		case heldByAgent(err, held):
		default:
			closer.Close()
			return nil, nil, nil, err
		}
	}
	var tried []string
	for _, f := range lenient {
		s, err := p.keys.signer(f)
		switch {
		case err == nil:
			signers = append(signers, recording(s, f, rec))
		case heldByAgent(err, held):
		default:
			tried = append(tried, fmt.Sprintf("%s (%s)", f, whyNoKey(err)))
		}
	}
	if len(signers) == 0 {
		closer.Close()
		return nil, nil, nil, &NoKeyError{Node: t.Name, Agent: socket, AgentErr: agentErr, Tried: tried}
	}
	return ssh.PublicKeys(signers...), closer, rec, nil
}

// agentSocket is the agent a handshake asks: the target's IdentityAgent
// from the OpenSSH configuration when it names a socket ("none": no agent),
// else the pool's (SSH_AUTH_SOCK). Pure.
func agentSocket(pool, identityAgent string) string {
	switch identityAgent {
	case "", "SSH_AUTH_SOCK":
		return pool
	case "none":
		return ""
	}
	return identityAgent
}

// agentSigners are the keys the agent on conn holds, each labelled with
// its fingerprint and comment, and the set of their public keys.
func agentSigners(conn net.Conn, rec *login) ([]ssh.Signer, map[string]bool, error) {
	ag := agent.NewClient(conn)
	keys, err := ag.List()
	if err != nil {
		return nil, nil, err
	}
	signers, err := ag.Signers()
	if err != nil {
		return nil, nil, err
	}
	comments := map[string]string{}
	for _, k := range keys {
		comments[string(k.Marshal())] = k.Comment
	}
	held := map[string]bool{}
	out := make([]ssh.Signer, 0, len(signers))
	for _, s := range signers {
		pub := string(s.PublicKey().Marshal())
		held[pub] = true
		from := strings.TrimSpace(fmt.Sprintf("ssh-agent key %s %s", ssh.FingerprintSHA256(s.PublicKey()), comments[pub]))
		out = append(out, recording(s, from, rec))
	}
	return out, held, nil
}

// recording wraps s so that signing with it records from in rec, keeping
// the algorithms s offers (an RSA key must still sign rsa-sha2-*).
func recording(s ssh.Signer, from string, rec *login) ssh.Signer {
	as, ok := s.(ssh.AlgorithmSigner)
	if !ok {
		return recordingSigner{s, from, rec}
	}
	r := recordingAlgorithmSigner{as, from, rec}
	if ms, ok := s.(ssh.MultiAlgorithmSigner); ok {
		return recordingMultiSigner{r, ms.Algorithms()}
	}
	return r
}

type recordingSigner struct {
	ssh.Signer
	from string
	rec  *login
}

func (s recordingSigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	s.rec.key.Store(&s.from)
	return s.Signer.Sign(rand, data)
}

type recordingAlgorithmSigner struct {
	ssh.AlgorithmSigner
	from string
	rec  *login
}

func (s recordingAlgorithmSigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	s.rec.key.Store(&s.from)
	return s.AlgorithmSigner.Sign(rand, data)
}

func (s recordingAlgorithmSigner) SignWithAlgorithm(rand io.Reader, data []byte, algorithm string) (*ssh.Signature, error) {
	s.rec.key.Store(&s.from)
	return s.AlgorithmSigner.SignWithAlgorithm(rand, data, algorithm)
}

type recordingMultiSigner struct {
	recordingAlgorithmSigner
	algorithms []string
}

func (s recordingMultiSigner) Algorithms() []string { return s.algorithms }

var (
	_ ssh.MultiAlgorithmSigner = recordingMultiSigner{}
	_ ssh.AlgorithmSigner      = recordingAlgorithmSigner{}
)

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
