package intent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// PushResult says what a push did.
type PushResult struct {
	Remote string `json:"remote"`
	// URL is the remote's URL as configured.
	URL    string `json:"url"`
	Branch string `json:"branch"`
	// Hash is the commit the remote branch now points at.
	Hash string `json:"hash"`
	// UpToDate is true when the remote already had it.
	UpToDate bool `json:"up_to_date"`
}

// Push pushes the working branch to the configured remote, fast-forward
// only (never forced). SSH remotes are authenticated with Options.SSH and
// their host key checked against known_hosts; local paths and file:// URLs
// are pushed directly; other transports are refused.
func (r *Repo) Push(ctx context.Context) (PushResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	repo, err := git.PlainOpenWithOptions(r.root, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return PushResult{}, fmt.Errorf("push: %w: %w", ErrNotRepo, err)
	}
	return r.push(ctx, repo)
}

func (r *Repo) push(ctx context.Context, repo *git.Repository) (PushResult, error) {
	branch := r.opts.WorkingBranch
	if r.opts.Remote == "" || branch == "" {
		return PushResult{}, fmt.Errorf("push: %w: no remote or no working branch configured", ErrInvalid)
	}
	fail := func(err error) (PushResult, error) {
		return PushResult{}, fmt.Errorf("push %s to %s: %w", branch, r.opts.Remote, err)
	}
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return fail(fmt.Errorf("read branch: %w", err))
	}
	acc, err := r.remoteAccess(repo)
	if err != nil {
		return fail(err)
	}
	defer acc.close()
	opts := &git.PushOptions{
		RemoteName: r.opts.Remote,
		RefSpecs:   []config.RefSpec{config.RefSpec("refs/heads/" + branch + ":refs/heads/" + branch)},
		Auth:       acc.auth,
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.SSH.PushTimeout)
	defer cancel()
	res := PushResult{Remote: r.opts.Remote, URL: acc.url, Branch: branch, Hash: ref.Hash().String()}
	err = repo.PushContext(ctx, opts)
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		res.UpToDate = true
		err = nil
	}
	if err != nil {
		return fail(err)
	}
	r.log.InfoContext(ctx, "pushed", "remote", r.opts.Remote, "branch", branch, "hash", res.Hash, "up_to_date", res.UpToDate)
	return res, nil
}

// remoteAccess is how the configured remote is reached: its URL and the
// authentication its transport takes (nil for a local one).
type remoteAccess struct {
	url   string
	auth  transport.AuthMethod
	close func()
}

// remoteAccess answers how to reach the configured remote: SSH remotes are
// authenticated with Options.SSH and their host key checked against
// known_hosts; local paths and file:// URLs are reached directly; other
// transports are refused. The caller calls close when done.
func (r *Repo) remoteAccess(repo *git.Repository) (remoteAccess, error) {
	remote, err := repo.Remote(r.opts.Remote)
	if err != nil {
		return remoteAccess{}, err
	}
	urls := remote.Config().URLs
	if len(urls) == 0 {
		return remoteAccess{}, errors.New("the remote has no URL")
	}
	ep, err := transport.NewEndpoint(urls[0])
	if err != nil {
		return remoteAccess{}, err
	}
	acc := remoteAccess{url: urls[0], close: func() {}}
	switch ep.Protocol {
	case "file":
	case "ssh":
		auth, closeAgent, err := r.sshAuth(ep)
		if err != nil {
			return remoteAccess{}, err
		}
		acc.auth, acc.close = auth, closeAgent
	default:
		return remoteAccess{}, fmt.Errorf("%w: remote URL %q uses %s; only ssh and local remotes are reached", ErrInvalid, urls[0], ep.Protocol)
	}
	return acc, nil
}

// sshAuth implements go-git's ssh.AuthMethod with our own client config:
// the key files and the agent, host keys from known_hosts only.
type sshAuth struct {
	user string
	cfg  *ssh.ClientConfig
}

func (a *sshAuth) Name() string   { return "mcp-patch-ssh" }
func (a *sshAuth) String() string { return "user: " + a.user + ", name: " + a.Name() }
func (a *sshAuth) ClientConfig() (*ssh.ClientConfig, error) {
	c := *a.cfg
	return &c, nil
}

var _ gitssh.AuthMethod = (*sshAuth)(nil)

func (r *Repo) sshAuth(ep *transport.Endpoint) (*sshAuth, func(), error) {
	o := r.opts.SSH
	user := o.User
	if user == "" {
		user = ep.User
	}
	if user == "" {
		user = "git"
	}
	db, err := gitssh.NewKnownHostsDb(o.KnownHosts...)
	if err != nil {
		return nil, nil, fmt.Errorf("known_hosts: %w", err)
	}
	port := ep.Port
	if port == 0 {
		port = 22
	}
	hostPort := net.JoinHostPort(ep.Host, strconv.Itoa(port))

	var methods []ssh.AuthMethod
	var signers []ssh.Signer
	for _, f := range o.KeyFiles {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("read key %s: %w", f, err)
		}
		s, err := ssh.ParsePrivateKey(pem)
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, nil, fmt.Errorf("key %s is passphrase-protected: load it into the agent instead", f)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("parse key %s: %w", f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) > 0 {
		methods = append(methods, ssh.PublicKeys(signers...))
	}
	closeAgent := func() {}
	// The agent is one way in among the key files: a server without one
	// (a service, a pod) authenticates with its key files alone.
	sock := os.Getenv("SSH_AUTH_SOCK")
	if o.UseAgent && sock == "" && len(signers) == 0 {
		return nil, nil, errors.New("ssh agent requested but SSH_AUTH_SOCK is not set, and no key file is configured")
	}
	if o.UseAgent && sock != "" {
		conn, err := net.DialTimeout("unix", sock, o.DialTimeout)
		if err != nil {
			return nil, nil, fmt.Errorf("ssh agent: %w", err)
		}
		closeAgent = func() { _ = conn.Close() }
		methods = append(methods, ssh.PublicKeysCallback(agent.NewClient(conn).Signers))
	}
	if len(methods) == 0 {
		return nil, nil, errors.New("no SSH key files and no agent configured for the push")
	}
	cfg := &ssh.ClientConfig{
		User:              user,
		Auth:              methods,
		HostKeyCallback:   db.HostKeyCallback(),
		HostKeyAlgorithms: db.HostKeyAlgorithms(hostPort),
		Timeout:           max(o.DialTimeout, time.Second),
	}
	return &sshAuth{user: user, cfg: cfg}, closeAgent, nil
}
