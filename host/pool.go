package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// Sentinel errors callers branch on (all returned wrapped).
var (
	// ErrPoolClosed: the pool was closed; nothing was dialled or run.
	ErrPoolClosed = errors.New("ssh pool closed")
	// ErrConnectionLost: the SSH connection broke. When it broke while a
	// script ran, the script may have partly run. The pool drops the
	// connection; the next call dials a new one.
	ErrConnectionLost = errors.New("ssh connection lost")
	// ErrAuthFailed: the host refused every key offered.
	ErrAuthFailed = errors.New("ssh authentication failed")
	// ErrCommandTimeout: the script ran past Config.CommandTimeout and was
	// ended. It wraps context.DeadlineExceeded.
	ErrCommandTimeout = fmt.Errorf("command timed out: %w", context.DeadlineExceeded)
)

// Config configures a Pool. Zero values take the defaults named per field.
type Config struct {
	// KnownHostsFiles are OpenSSH known_hosts files. Required: there is no
	// way to connect to a host whose key is not listed. Re-read when they
	// change on disk.
	KnownHostsFiles []string
	// AgentSocket is the ssh-agent socket (what SSH_AUTH_SOCK holds); empty
	// means no agent. The agent's keys are offered before key files.
	AgentSocket string
	// IdentityFiles are unencrypted private key files offered to every host,
	// before each Target's own IdentityFiles.
	IdentityFiles []string
	// DefaultIdentityFiles are tried, in order, for a host when neither
	// IdentityFiles, the Target's IdentityFiles nor its ConfigIdentityFiles
	// name any file (DefaultIdentityFiles(home): ~/.ssh/id_rsa, id_ecdsa,
	// id_ed25519 ...). A missing one, or a passphrase-protected one the
	// agent does not hold, is skipped and named if no key is left. nil
	// means none.
	DefaultIdentityFiles []string
	// DialTimeout bounds the TCP connect plus SSH handshake of one hop.
	// 0 means 15s.
	DialTimeout time.Duration
	// CommandTimeout bounds one RunScript call (connecting included);
	// the remote script is ended when it expires. 0 means 30 minutes.
	CommandTimeout time.Duration
	// CancelGrace is how long RunScript waits, after signalling a cancelled
	// script, for the remote side to report that it ended before closing
	// the session anyway. 0 means 2s.
	CancelGrace time.Duration
	// KeepaliveInterval is the gap between keepalive@openssh.com requests
	// on an idle pooled connection. 0 means 30s; negative disables them.
	KeepaliveInterval time.Duration
	// KeepaliveTimeout is how long a keepalive reply may take before the
	// connection is declared dead and dropped. 0 means 15s.
	KeepaliveTimeout time.Duration
	// MaxOutputBytes caps what is kept of stdout and of stderr (each) per
	// script; the rest is read and discarded, and Output.Truncated is set.
	// 0 means 8 MiB.
	MaxOutputBytes int
	// Logger receives connection events (dial, drop, keepalive failure).
	// nil means no logging.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every default filled in; the caller
// still has to set KnownHostsFiles and a key source.
func DefaultConfig() Config {
	return Config{
		DialTimeout:       15 * time.Second,
		CommandTimeout:    30 * time.Minute,
		CancelGrace:       2 * time.Second,
		KeepaliveInterval: 30 * time.Second,
		KeepaliveTimeout:  15 * time.Second,
		MaxOutputBytes:    8 << 20,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = d.CommandTimeout
	}
	if c.CancelGrace == 0 {
		c.CancelGrace = d.CancelGrace
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = d.KeepaliveInterval
	}
	if c.KeepaliveTimeout == 0 {
		c.KeepaliveTimeout = d.KeepaliveTimeout
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = d.MaxOutputBytes
	}
	return c
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case len(c.KnownHostsFiles) == 0:
		return errors.New("ssh config: KnownHostsFiles is required (host keys are always checked)")
	case c.DialTimeout < 0:
		return errors.New("ssh config: DialTimeout must not be negative")
	case c.CommandTimeout < 0:
		return errors.New("ssh config: CommandTimeout must not be negative")
	case c.CancelGrace < 0:
		return errors.New("ssh config: CancelGrace must not be negative")
	case c.KeepaliveTimeout < 0:
		return errors.New("ssh config: KeepaliveTimeout must not be negative")
	case c.MaxOutputBytes < 0:
		return errors.New("ssh config: MaxOutputBytes must not be negative")
	}
	for _, f := range c.KnownHostsFiles {
		if f == "" {
			return errors.New("ssh config: empty path in KnownHostsFiles")
		}
	}
	for _, f := range c.IdentityFiles {
		if f == "" {
			return errors.New("ssh config: empty path in IdentityFiles")
		}
	}
	for _, f := range c.DefaultIdentityFiles {
		if f == "" {
			return errors.New("ssh config: empty path in DefaultIdentityFiles")
		}
	}
	return nil
}

// Stats counts what a Pool did since it was created.
type Stats struct {
	Dials            int64 // connection attempts (one per hop)
	Handshakes       int64 // SSH handshakes that succeeded
	Reused           int64 // calls served by an already open connection
	Dropped          int64 // connections dropped (dead, forgotten, keepalive failed)
	KeepalivesSent   int64
	KeepalivesFailed int64
	Open             int // connections open now
}

// Pool keeps one SSH connection per host and runs scripts and tunnels over
// them. It implements Runner. It is safe for concurrent use; Close ends
// every connection.
type Pool struct {
	inv  Inventory
	cfg  Config
	kh   *knownHosts
	keys keyFiles
	log  *slog.Logger

	// base is cancelled by Close; connection goroutines and dials hang off it.
	base       context.Context
	cancelBase context.CancelFunc
	wg         sync.WaitGroup

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool

	dials, handshakes, reused, dropped, kaSent, kaFailed atomic.Int64
}

var _ Runner = (*Pool)(nil)

// conn is one pooled connection, or a dial in progress.
type conn struct {
	node   string
	target Target        // what it was dialled for
	ready  chan struct{} // closed when the dial finished (client or err set)
	client *ssh.Client
	err    error
	dead   chan struct{} // closed when the connection ended
	// key names the key the host accepted: a file's path or the agent's
	// key; set before ready is closed.
	key string
	// lastActive is when a session last started or ended (UnixNano).
	lastActive atomic.Int64
}

// sameTarget says whether a connection dialled for a still serves b.
func sameTarget(a, b Target) bool {
	return a.Address == b.Address && a.Port == b.Port && a.LoginUser() == b.LoginUser() &&
		a.Jump == b.Jump && a.HostKeyAlias == b.HostKeyAlias && slices.Equal(a.IdentityFiles, b.IdentityFiles) &&
		slices.Equal(a.ConfigIdentityFiles, b.ConfigIdentityFiles) && a.IdentityAgent == b.IdentityAgent
}

// closeWhenDialled closes c's client once its dial is over; a dial still
// running sees c is no longer current and closes its client itself.
func closeWhenDialled(c *conn) {
	<-c.ready
	if c.client != nil {
		c.client.Close()
	}
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// NewPool checks cfg, reads the known_hosts files and returns an empty pool.
// Connections are opened on first use.
func NewPool(inv Inventory, cfg Config) (*Pool, error) {
	if inv == nil {
		return nil, errors.New("ssh pool: inventory is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	kh, err := newKnownHosts(cfg.KnownHostsFiles)
	if err != nil {
		return nil, fmt.Errorf("ssh pool: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Pool{
		inv: inv, cfg: cfg, kh: kh, log: log,
		base: base, cancelBase: cancel,
		conns: make(map[string]*conn),
	}, nil
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	open := 0
	for _, c := range p.conns {
		select {
		case <-c.ready:
			if c.err == nil && !c.isDead() {
				open++
			}
		default:
		}
	}
	p.mu.Unlock()
	return Stats{
		Dials: p.dials.Load(), Handshakes: p.handshakes.Load(), Reused: p.reused.Load(),
		Dropped: p.dropped.Load(), KeepalivesSent: p.kaSent.Load(), KeepalivesFailed: p.kaFailed.Load(),
		Open: open,
	}
}

// lookup validates node and resolves it through the inventory.
func (p *Pool) lookup(node string) (Target, error) {
	if err := ValidateNodeName(node); err != nil {
		return Target{}, err
	}
	t, err := p.inv.Lookup(node)
	if err != nil {
		return Target{}, err
	}
	if t.Name == "" {
		t.Name = node
	}
	if t.Name != node {
		return Target{}, fmt.Errorf("inventory returned target %q for node %q", t.Name, node)
	}
	if err := t.Validate(); err != nil {
		return Target{}, fmt.Errorf("inventory: %w", err)
	}
	if err := p.checkJumpChain(t); err != nil {
		return Target{}, err
	}
	return t, nil
}

// checkJumpChain refuses a jump chain that loops, is too long or names a
// node the inventory does not know, before anything is dialled.
func (p *Pool) checkJumpChain(t Target) error {
	seen := []string{t.Name}
	for hop := t.Jump; hop != ""; {
		if slices.Contains(seen, hop) {
			return fmt.Errorf("node %s: jump hosts loop: %s -> %s", t.Name, strings.Join(seen, " -> "), hop)
		}
		if len(seen) > maxJumpHops {
			return fmt.Errorf("node %s: more than %d jump hosts in a row", t.Name, maxJumpHops)
		}
		seen = append(seen, hop)
		jt, err := p.inv.Lookup(hop)
		if err != nil {
			return fmt.Errorf("node %s: jump host: %w", t.Name, err)
		}
		hop = jt.Jump
	}
	return nil
}

const maxJumpHops = 4

// client returns an open connection to t, dialling one when there is none
// or the pooled one is dead. Concurrent callers for the same node share one
// dial. The dial itself runs under the pool's lifetime and DialTimeout, not
// under ctx, so one caller giving up does not fail the others; ctx only
// bounds how long this caller waits.
func (p *Pool) client(ctx context.Context, t Target, hops int) (*conn, error) {
	if hops > maxJumpHops {
		return nil, fmt.Errorf("connect to node %s: more than %d jump hosts in a row (a jump cycle?)", t.Name, maxJumpHops)
	}
	for range 2 {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("connect to node %s: %w", t.Name, ErrPoolClosed)
		}
		c, ok := p.conns[t.Name]
		if ok && !sameTarget(c.target, t) {
			// The inventory changed (a new InternalIP, another user):
			// the old connection goes to the old place.
			delete(p.conns, t.Name)
			p.dropped.Add(1)
			go closeWhenDialled(c)
			ok = false
		}
		if !ok {
			c = &conn{node: t.Name, target: t, ready: make(chan struct{}), dead: make(chan struct{})}
			p.conns[t.Name] = c
			p.wg.Add(1)
			go p.dial(c, t, hops)
		}
		p.mu.Unlock()

		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to node %s: %w", t.Name, context.Cause(ctx))
		}
		if c.err != nil {
			return nil, c.err
		}
		if c.isDead() {
			p.drop(c, "connection found dead")
			continue
		}
		if ok {
			p.reused.Add(1)
		}
		return c, nil
	}
	return nil, fmt.Errorf("connect to node %s: new connection died at once: %w", t.Name, ErrConnectionLost)
}

// dial opens the connection for c and publishes the result.
func (p *Pool) dial(c *conn, t Target, hops int) {
	defer p.wg.Done()
	client, key, err := p.connect(p.base, t, hops)

	p.mu.Lock()
	current := p.conns[c.node] == c
	if err == nil && (!current || p.closed) {
		client.Close()
		client, err = nil, fmt.Errorf("connect to node %s: connection forgotten while it was being opened: %w", t.Name, ErrConnectionLost)
	}
	if err != nil && current {
		delete(p.conns, c.node)
	}
	c.client, c.err, c.key = client, err, key
	if err == nil {
		p.wg.Add(2)
		go p.watch(c)
		go p.keepalive(c)
	}
	p.mu.Unlock()
	if err != nil {
		close(c.dead)
		p.log.Debug("ssh dial failed", "node", t.Name, "err", err)
	} else {
		p.log.Debug("ssh connected", "node", t.Name, "addr", t.DialAddr(), "user", t.LoginUser(), "jump", t.Jump)
	}
	close(c.ready)
}

// connect does the TCP (or jump) dial and the SSH handshake, bounded by
// DialTimeout once the jump host's connection (bounded by its own dial) is
// there. base ends when the pool closes.
func (p *Pool) connect(base context.Context, t Target, hops int) (*ssh.Client, string, error) {
	callback, algos, err := p.kh.hostKeyConfig(t.Name, t.knownHostsAddr())
	if err != nil {
		return nil, "", fmt.Errorf("connect to node %s: %w", t.Name, err)
	}
	var jump *conn
	if t.Jump != "" {
		jt, err := p.lookup(t.Jump)
		if err != nil {
			return nil, "", fmt.Errorf("connect to node %s: jump host: %w", t.Name, err)
		}
		if jump, err = p.client(base, jt, hops+1); err != nil {
			return nil, "", fmt.Errorf("connect to node %s through jump host %s: %w", t.Name, jt.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(base, p.cfg.DialTimeout)
	defer cancel()
	auth, agentConn, rec, err := p.authFor(ctx, t)
	if err != nil {
		return nil, "", fmt.Errorf("connect to node %s: %w", t.Name, err)
	}
	defer agentConn.Close()

	var netConn net.Conn
	p.dials.Add(1)
	if jump == nil {
		var d net.Dialer
		netConn, err = d.DialContext(ctx, "tcp", t.DialAddr())
		if err != nil {
			return nil, "", fmt.Errorf("connect to node %s at %s: %w", t.Name, t.DialAddr(), err)
		}
	} else {
		netConn, err = jump.client.DialContext(ctx, "tcp", t.DialAddr())
		if err != nil {
			return nil, "", fmt.Errorf("connect to node %s at %s through jump host %s: %w", t.Name, t.DialAddr(), t.Jump, err)
		}
		jump.touch()
	}

	// The handshake has no context of its own: closing the connection is
	// what ends it when ctx does.
	stop := context.AfterFunc(ctx, func() { netConn.Close() })
	defer stop()
	cfg := &ssh.ClientConfig{
		User:              t.LoginUser(),
		Auth:              []ssh.AuthMethod{auth},
		HostKeyCallback:   callback,
		HostKeyAlgorithms: algos,
		Timeout:           p.cfg.DialTimeout,
	}
	sc, chans, reqs, err := ssh.NewClientConn(netConn, t.DialAddr(), cfg)
	if err != nil {
		netConn.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, "", fmt.Errorf("connect to node %s at %s: handshake did not finish within %s: %w", t.Name, t.DialAddr(), p.cfg.DialTimeout, ctxErr)
		}
		var hkErr *HostKeyError
		if errors.As(err, &hkErr) {
			return nil, "", fmt.Errorf("connect to node %s: %w", t.Name, hkErr)
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, "", fmt.Errorf("connect to node %s as user %s: every key was refused (%w): %w", t.Name, t.LoginUser(), ErrAuthFailed, err)
		}
		return nil, "", fmt.Errorf("connect to node %s at %s: %w", t.Name, t.DialAddr(), err)
	}
	p.handshakes.Add(1)
	key := ""
	if k := rec.key.Load(); k != nil {
		key = *k
	}
	return ssh.NewClient(sc, chans, reqs), key, nil
}

// watch waits for the connection to end and removes it from the pool.
func (p *Pool) watch(c *conn) {
	defer p.wg.Done()
	err := c.client.Wait()
	close(c.dead)
	p.mu.Lock()
	if p.conns[c.node] == c {
		delete(p.conns, c.node)
		p.dropped.Add(1)
		p.log.Info("ssh connection ended", "node", c.node, "err", err)
	}
	p.mu.Unlock()
}

// keepalive sends keepalive@openssh.com requests until the connection ends;
// a request that fails or gets no reply within KeepaliveTimeout closes it.
func (p *Pool) keepalive(c *conn) {
	defer p.wg.Done()
	if p.cfg.KeepaliveInterval < 0 {
		return
	}
	send := func() error {
		p.kaSent.Add(1)
		_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
		return err
	}
	idle := func() time.Duration { return time.Since(time.Unix(0, c.lastActive.Load())) }
	err := keepaliveLoop(c.dead, p.cfg.KeepaliveInterval, p.cfg.KeepaliveTimeout, idle, send)
	if err != nil {
		p.kaFailed.Add(1)
		p.log.Warn("ssh keepalive failed; dropping connection", "node", c.node, "err", err)
		c.client.Close()
	}
}

// keepaliveLoop calls send every interval until done is closed (returns
// nil) or a send fails or takes longer than timeout (returns why). A tick
// is skipped when the connection was active within the last interval
// (idle reports how long ago): traffic proves it alive, as with OpenSSH's
// ServerAliveInterval.
func keepaliveLoop(done <-chan struct{}, interval, timeout time.Duration, idle func() time.Duration, send func() error) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ticker.C:
		}
		if idle() < interval {
			continue
		}
		result := make(chan error, 1)
		go func() { result <- send() }()
		timer := time.NewTimer(timeout)
		select {
		case <-done:
			timer.Stop()
			return nil
		case err := <-result:
			timer.Stop()
			if err != nil {
				return fmt.Errorf("keepalive: %w", err)
			}
		case <-timer.C:
			return fmt.Errorf("keepalive: no reply within %s", timeout)
		}
	}
}

// drop closes c and removes it from the pool if it is still there.
func (p *Pool) drop(c *conn, why string) {
	p.mu.Lock()
	if p.conns[c.node] == c {
		delete(p.conns, c.node)
		p.dropped.Add(1)
		p.log.Info("ssh connection dropped", "node", c.node, "why", why)
	}
	p.mu.Unlock()
	if c.client != nil {
		c.client.Close()
	}
}

// KeyUsed names the key node's open pooled connection logged in with (an
// identity file's path, or "ssh-agent key SHA256:… comment"); false when
// the pool holds no open connection to node.
func (p *Pool) KeyUsed(node string) (string, bool) {
	p.mu.Lock()
	c, ok := p.conns[node]
	p.mu.Unlock()
	if !ok {
		return "", false
	}
	select {
	case <-c.ready:
		if c.err != nil || c.isDead() {
			return "", false
		}
		return c.key, true
	default:
		return "", false
	}
}

// Forget closes and drops the pooled connection to node, if any (after a
// reboot, for instance, the old connection is useless). The next call
// dials anew. Connections that jump through node end with it.
func (p *Pool) Forget(node string) {
	p.mu.Lock()
	c, ok := p.conns[node]
	if ok {
		delete(p.conns, node)
		p.dropped.Add(1)
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-c.ready:
		if c.client != nil {
			c.client.Close()
		}
	default:
		// The dial in progress sees it is no longer current and closes
		// its client itself.
	}
	p.log.Info("ssh connection forgotten", "node", node)
}

// Close ends every connection and waits for the pool's goroutines. Calls
// after Close fail with ErrPoolClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.conns
	p.conns = map[string]*conn{}
	p.mu.Unlock()
	p.cancelBase()
	for _, c := range conns {
		select {
		case <-c.ready:
			if c.client != nil {
				c.client.Close()
			}
		default:
		}
	}
	p.wg.Wait()
	return nil
}

// Dial opens a TCP connection to addr as seen from node, tunnelled through
// node's pooled SSH connection (direct-tcpip), e.g. to reach etcd on
// 127.0.0.1:2379 of a control-plane node. network must be "tcp", "tcp4" or
// "tcp6". The host's sshd must allow TCP forwarding. The tunnel lives on
// the pooled connection: Forget(node), a lost connection or Close ends it.
func (p *Pool) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("dial %s via node %s: network %q not supported (tcp only)", addr, node, network)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("dial %s via node %s: %w", addr, node, err)
	}
	t, err := p.lookup(node)
	if err != nil {
		return nil, fmt.Errorf("dial %s via node %s: %w", addr, node, err)
	}
	for attempt := 0; ; attempt++ {
		c, err := p.client(ctx, t, 0)
		if err != nil {
			return nil, fmt.Errorf("dial %s via node %s: %w", addr, node, err)
		}
		nc, err := c.client.DialContext(ctx, network, addr)
		if err == nil {
			c.touch()
			return nc, nil
		}
		var openErr *ssh.OpenChannelError
		if errors.As(err, &openErr) || ctx.Err() != nil || attempt > 0 {
			return nil, fmt.Errorf("dial %s via node %s: %w", addr, node, err)
		}
		p.drop(c, "tunnel open failed: "+err.Error())
	}
}

// openSession opens a session on node's pooled connection, redialling once
// when the pooled connection turns out to be dead.
func (p *Pool) openSession(ctx context.Context, t Target) (*conn, *ssh.Session, error) {
	for attempt := 0; ; attempt++ {
		c, err := p.client(ctx, t, 0)
		if err != nil {
			return nil, nil, err
		}
		sess, err := c.client.NewSession()
		if err == nil {
			c.touch()
			return c, sess, nil
		}
		var openErr *ssh.OpenChannelError
		if errors.As(err, &openErr) {
			// The host refused the session (MaxSessions, say) on a live
			// connection: keep the connection.
			return nil, nil, fmt.Errorf("open session on node %s: %w", t.Name, err)
		}
		p.drop(c, "session open failed: "+err.Error())
		if attempt > 0 || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("open session on node %s: %w: %w", t.Name, ErrConnectionLost, err)
		}
	}
}

// isConnectionLoss tells a broken transport from a remote exit.
func isConnectionLoss(err error) bool {
	var missing *ssh.ExitMissingError
	return errors.As(err, &missing) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}
