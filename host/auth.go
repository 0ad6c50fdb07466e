package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// keyFiles parses private key files once and keeps the signers.
type keyFiles struct {
	mu      sync.Mutex
	signers map[string]ssh.Signer
}

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
			return nil, fmt.Errorf("identity file %s is passphrase-protected: load it into ssh-agent (ssh-add %s) instead", path, path)
		}
		return nil, fmt.Errorf("parse identity file %s: %w", path, err)
	}
	if k.signers == nil {
		k.signers = make(map[string]ssh.Signer)
	}
	k.signers[path] = s
	return s, nil
}

// authFor builds the public-key auth method for one handshake: the agent's
// keys first (when an agent socket is configured), then the pool-wide key
// files, then the target's own. The returned closer ends the agent
// connection and must be called once the handshake is over.
func (p *Pool) authFor(ctx context.Context, t Target) (ssh.AuthMethod, io.Closer, error) {
	var signers []ssh.Signer
	var closer io.Closer = nopCloser{}
	if p.cfg.AgentSocket != "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", p.cfg.AgentSocket)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to ssh-agent at %s: %w", p.cfg.AgentSocket, err)
		}
		agentSigners, err := agent.NewClient(conn).Signers()
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("list ssh-agent keys at %s: %w", p.cfg.AgentSocket, err)
		}
		signers = append(signers, agentSigners...)
		closer = conn
	}
	files := append(append([]string(nil), p.cfg.IdentityFiles...), t.IdentityFiles...)
	for _, f := range files {
		s, err := p.keys.signer(f)
		if err != nil {
			closer.Close()
			return nil, nil, err
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 {
		closer.Close()
		return nil, nil, fmt.Errorf("no SSH key for node %s: the agent holds no keys and no identity file is configured", t.Name)
	}
	return ssh.PublicKeys(signers...), closer, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
