package policy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// SignResult is a signature made for a person.
type SignResult struct {
	// Signature is the armored SSHSIG signature, as `ssh-keygen -Y sign -n
	// mcp-patch` writes it.
	Signature []byte
	// Fingerprint and KeyType name the key that signed.
	Fingerprint, KeyType string
	// Comment is the key's comment in the agent (empty for key files).
	Comment string
}

// Sign signs msg with signer in the mcp-patch namespace. RSA keys sign with
// rsa-sha2-512, as ssh-keygen does.
func Sign(signer ssh.Signer, msg []byte) (SignResult, error) {
	sig, err := signSSHSIG(signer, Namespace, msg, rand.Reader)
	if err != nil {
		return SignResult{}, err
	}
	pub := signer.PublicKey()
	return SignResult{Signature: sig, Fingerprint: ssh.FingerprintSHA256(pub), KeyType: pub.Type()}, nil
}

// SignWithAgent signs msg with a key held by the ssh-agent listening on
// sockPath. keyFilter picks the key by its SHA256 fingerprint (with or
// without the "SHA256:" prefix); empty means the agent's only usable key.
// Hardware (FIDO) keys work: the agent asks for the touch. ctx bounds the
// whole exchange, including the wait for a touch.
func SignWithAgent(ctx context.Context, sockPath, keyFilter string, msg []byte) (SignResult, error) {
	res, err := signWithAgent(ctx, sockPath, keyFilter, msg)
	if err != nil {
		return SignResult{}, fmt.Errorf("sign with ssh-agent %s: %w", sockPath, err)
	}
	return res, nil
}

func signWithAgent(ctx context.Context, sockPath, keyFilter string, msg []byte) (SignResult, error) {
	if sockPath == "" {
		return SignResult{}, errors.New("no agent socket (is SSH_AUTH_SOCK set?)")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sockPath)
	if err != nil {
		return SignResult{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return SignResult{}, err
		}
	}
	// The agent protocol knows no context: closing the connection is how a
	// cancelled wait (for a touch, say) ends.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	wrap := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return err
	}

	client := agent.NewClient(conn)
	keys, err := client.List()
	if err != nil {
		return SignResult{}, wrap(fmt.Errorf("list keys: %w", err))
	}
	key, err := pickAgentKey(keys, keyFilter)
	if err != nil {
		return SignResult{}, err
	}
	signers, err := client.Signers()
	if err != nil {
		return SignResult{}, wrap(fmt.Errorf("list signers: %w", err))
	}
	for _, s := range signers {
		if string(s.PublicKey().Marshal()) != string(key.Marshal()) {
			continue
		}
		res, err := Sign(s, msg)
		if err != nil {
			return SignResult{}, wrap(err)
		}
		res.Comment = key.Comment
		return res, nil
	}
	return SignResult{}, fmt.Errorf("key %s left the agent while signing", ssh.FingerprintSHA256(key))
}

func pickAgentKey(keys []*agent.Key, filter string) (*agent.Key, error) {
	var usable []*agent.Key
	var names []string
	for _, k := range keys {
		if checkSignerKey(k) != nil {
			continue
		}
		usable = append(usable, k)
		names = append(names, fmt.Sprintf("%s %s %s", ssh.FingerprintSHA256(k), k.Type(), k.Comment))
	}
	if filter == "" {
		switch len(usable) {
		case 1:
			return usable[0], nil
		case 0:
			return nil, fmt.Errorf("the agent holds no usable key (%d keys, none ed25519/ecdsa/rsa>=2048/sk)", len(keys))
		}
		return nil, fmt.Errorf("the agent holds %d usable keys; pick one by fingerprint: %s", len(usable), strings.Join(names, "; "))
	}
	want := filter
	if !strings.HasPrefix(want, "SHA256:") {
		want = "SHA256:" + want
	}
	for _, k := range usable {
		if ssh.FingerprintSHA256(k) == want {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no usable key %s in the agent (it holds: %s)", want, strings.Join(names, "; "))
}

// PassphraseFunc supplies the passphrase of an encrypted key file; it is
// called only when the file is encrypted.
type PassphraseFunc func() ([]byte, error)

// SignWithKeyFile signs msg with the private key in an OpenSSH (or PEM)
// key file. passphrase may be nil for an unencrypted key. Hardware-key
// files (sk-*) cannot sign here: add them to ssh-agent and use
// SignWithAgent, or sign with `ssh-keygen -Y sign`.
func SignWithKeyFile(path string, passphrase PassphraseFunc, msg []byte) (SignResult, error) {
	res, err := signWithKeyFile(path, passphrase, msg)
	if err != nil {
		return SignResult{}, fmt.Errorf("sign with key file %s: %w", path, err)
	}
	return res, nil
}

func signWithKeyFile(path string, passphrase PassphraseFunc, msg []byte) (SignResult, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return SignResult{}, err
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		if passphrase == nil {
			return SignResult{}, errors.New("the key is encrypted and no passphrase was supplied")
		}
		pass, perr := passphrase()
		if perr != nil {
			return SignResult{}, fmt.Errorf("read passphrase: %w", perr)
		}
		signer, err = ssh.ParsePrivateKeyWithPassphrase(pem, pass)
		clear(pass)
	}
	if err != nil {
		if pub := readPubFile(path + ".pub"); pub != nil && isSK(pub) {
			return SignResult{}, fmt.Errorf("%s is a hardware-key file: ssh-add it and sign through the agent, or use ssh-keygen -Y sign (%w)", pub.Type(), err)
		}
		return SignResult{}, fmt.Errorf("parse private key: %w", err)
	}
	return Sign(signer, msg)
}

func readPubFile(path string) ssh.PublicKey {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil
	}
	return pub
}

// toolWords says what each destructive tool does, for a person.
var toolWords = map[string]string{
	"drain_node":      "cordon node %s and evict its pods (PodDisruptionBudgets respected)",
	"install_updates": "install the planned package updates on node %s (apt-get full-upgrade; the running kernel stays installed)",
	"trial_boot":      "reboot node %s once into the new kernel (it falls back to the old kernel if the new one does not come up)",
	"promote_kernel":  "make the new kernel the default on node %s",
	"autoremove":      "remove packages no longer needed on node %s (apt autoremove; never the running kernel)",
	"fallback_drill":  "run the fallback drill on node %s (reboot to prove the old kernel still boots)",
	"rollback_node":   "reboot node %s back into its old kernel (GRUB's default set back to the old entry where the new one was promoted)",
}

func stopWords(req Request) string {
	if req.Stop == NoStop {
		return "It answers no stop: the round is not stopped.\n"
	}
	seq, digest, _ := strings.Cut(req.Stop, " ")
	return fmt.Sprintf("It answers only the stop at step %s recorded in the journal as record %s (%s); any other stop needs a new statement.\n", req.Step, seq, digest)
}

// Describe says in plain words what signing req means.
func Describe(req Request) string {
	var b strings.Builder
	node := "node " + req.Node
	if req.Node == "*" {
		node = "the whole fleet"
	}
	switch req.Kind {
	case KindApproval:
		what := fmt.Sprintf("run the tool %q on node %s", req.Tool, req.Node)
		if words, ok := toolWords[req.Tool]; ok {
			what = fmt.Sprintf(words, req.Node)
		}
		fmt.Fprintf(&b, "You approve: %s.\n", what)
		fmt.Fprintf(&b, "Patch round: %s.\n", req.Round)
		fmt.Fprintf(&b, "Bound to plan %s: the server refuses it if the live plan no longer matches.\n", req.PlanDigest)
	case KindHypervisorSnapshotTaken:
		fmt.Fprintf(&b, "You state that a hypervisor snapshot of %s has been taken for patch round %s, so that it can be restored if the update goes wrong.\n", node, req.Round)
	case KindResidualRiskAccepted:
		fmt.Fprintf(&b, "You accept a residual risk on %s in patch round %s: %s.\n", node, req.Round, req.Reason)
		if req.Stop == NoStop {
			b.WriteString("It accepts no failed check: a note for the report.\n")
		} else {
			seq, digest, _ := strings.Cut(req.Stop, " ")
			fmt.Fprintf(&b, "It accepts only the failed %s recorded in the journal as record %s (%s), which then counts as green; any other failure needs a new statement.\n", req.Step, seq, digest)
		}
		fmt.Fprintf(&b, "It must be reviewed again on: %s.\n", req.ReviewTrigger)
	case KindRoundResume:
		fmt.Fprintf(&b, "You resume patch round %s, which stopped after a failed check on %s. Your reason: %s.\n", req.Round, node, req.Reason)
		b.WriteString(stopWords(req))
	case KindRoundAbort:
		fmt.Fprintf(&b, "You abort patch round %s after a failed check on %s. Your reason: %s.\n", req.Round, node, req.Reason)
		b.WriteString(stopWords(req))
	case KindRoundOutcome:
		fmt.Fprintf(&b, "You certify that patch round %s in environment %s ended as summarised below; downstream environments will plan its kernels on the strength of this statement.\n", req.Round, req.Environment)
		fmt.Fprintf(&b, "Bound to the outcome record %s committed for the round.\n", req.OutcomeDigest)
	case KindKernelPromoted:
		fmt.Fprintf(&b, "You promote kernel %s into environment %s's round %s without proof from its upstream environment. Your reason: %s. This is a residual risk the round's report will name.\n", req.Kernel, req.Environment, req.Round, req.Reason)
	default:
		fmt.Fprintf(&b, "Unknown kind of request %q: do not sign it.\n", req.Kind)
	}
	issued, expires := req.Issued.UTC().Format("2006-01-02 15:04:05 UTC"), req.Expires.UTC().Format("2006-01-02 15:04:05 UTC")
	if req.Kind.IsRecord() {
		fmt.Fprintf(&b, "Issued %s, to be signed within %s (until %s). Once signed and committed it stands as a record, after that time too, for as long as your key stays in allowed_signers.\n",
			issued, DurationWords(req.Lifetime()), expires)
	} else {
		fmt.Fprintf(&b, "Issued %s, valid for %s (until %s), once.\n", issued, DurationWords(req.Lifetime()), expires)
	}
	if len(req.Summary) > 0 {
		b.WriteString("What you were shown (signed with it):\n")
		for _, s := range req.Summary {
			b.WriteString("  - " + s + "\n")
		}
	}
	fmt.Fprintf(&b, "Request %s.\n", req.ID())
	return b.String()
}
