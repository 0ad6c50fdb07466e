package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
	"github.com/mcp-patch/mcp-patch/kube/leader"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/tools"
)

// The election's timing in this test: short, so that a takeover takes
// seconds, within config validation (whole seconds; renew deadline under
// the lease duration and above 1.2 retry periods).
const (
	leaderLeaseDuration = 3 * time.Second
	leaderRenewDeadline = 2 * time.Second
	leaderRetryPeriod   = 500 * time.Millisecond
	// The window Lease lapses within seconds of its holder's death.
	windowLeaseDuration = 5 * time.Second
	windowLeaseRenew    = time.Second
	// partitionFor is how long a partition cuts the leader off the API
	// server: past its lease duration, so the other server takes over.
	partitionFor = leaderLeaseDuration + 2*time.Second
	// takeoverBound is what every takeover must stay within: the lease
	// duration and a retry period, and a margin for a loaded machine.
	takeoverBound = 15 * time.Second
	// leaderKillRound is the round the agent runs.
	leaderKillRound = "2026-11"
	// leaderWait bounds the router's wait for a live leader after a
	// leader refusal or a server that died under a call.
	leaderWait = 90 * time.Second
)

// TestKillTheLeaderAnywhere runs the round against two real mcp-patch
// servers (serve over stdio) that elect a leader on the cluster and share
// an intent remote. The agent's calls go to whichever server holds the
// leader Lease. In every slice of the agent's calls the leader meets one
// event, at random: SIGKILL in the middle of the slice (mid-call),
// SIGKILL at its end (a tool boundary), or a partition from the API
// server past its lease duration. Each time the other server must take
// over within a bound and carry the round on: it reaches the soak with
// every window closed, no node cordoned, no round stopped, and no action
// run twice (no approval starting the same step twice, one trial boot
// per host).
func TestKillTheLeaderAnywhere(t *testing.T) {
	// As TestKillServerAnywhere: a generous drain bound, since kwok on a
	// loaded machine may take minutes to remove an evicted pod.
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0, GateSettle: 30 * time.Second, DrainTimeoutMinutes: 6})
	bin := filepath.Join(t.TempDir(), "mcp-patch")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/mcp-patch/mcp-patch/cmd/mcp-patch").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	remote, copyB, knownHosts := intentRemote(t, l)
	apiAddr, err := url.Parse(l.Cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	h := &leaderHarness{kc: l.Cluster.Client(), ns: l.Config.Kube.LeaseNamespace, lease: config.DefaultLeaderLease,
		servers: map[string]*leaderServer{}, proxies: map[string]*apiProxy{}}
	level := "error"
	if os.Getenv("LAB_VERBOSE") != "" {
		level = "info"
	}
	for _, s := range []struct{ id, repo string }{{"lab-a", l.IntentRepo}, {"lab-b", copyB}} {
		p := newAPIProxy(t, apiAddr.Host)
		cfg := leaderConfig(t, l, s.id, s.repo, p.Addr(), knownHosts)
		h.proxies[s.id] = p
		h.servers[s.id] = &leaderServer{id: s.id, bin: bin, configFile: cfg, level: level,
			logFile: filepath.Join(l.Dir, "server-"+s.id+".log")}
		h.ids = append(h.ids, s.id)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range []string{remote, l.IntentRepo, copyB} {
				log, _ := exec.Command("git", "-C", d, "log", "--oneline", "-12", "--all", "--decorate").CombinedOutput()
				t.Logf("commits in %s:\n%s", d, log)
			}
			for _, id := range h.ids {
				t.Logf("last lines of %s's log:\n%s", id, tail(h.servers[id].logFile, 40))
				t.Logf("%s's takeovers:\n%s", id, grepLog(h.servers[id].logFile, "took the round over", "set aside", "cut from the journal", "not published", "superseded"))
			}
			t.Logf("the remote's journal, steps:\n%s", remoteSteps(remote))
		}
	})
	defer h.stopAll()
	for _, id := range h.ids {
		if err := h.servers[id].start(ctx); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	first, err := h.liveLeader(ctx, time.Now().Add(time.Minute), nil, time.Time{})
	if err != nil {
		t.Fatalf("no server leads after both started: %v", err)
	}
	t.Logf("both servers up; %s leads", first.id)

	r := rand.New(rand.NewPCG(7, 13))
	var (
		events              []*leaderEvent
		reachedSoak         bool
		mid, boundary, cuts int
		// lost and twice are -1 until the end checks ran.
		lost, twice = -1, -1
	)
	// The report, also when the test stops early.
	defer func() {
		var took []time.Duration
		for _, ev := range events {
			took = append(took, ev.takeover)
		}
		slices.Sort(took)
		var median, worst time.Duration
		if len(took) > 0 {
			median, worst = took[len(took)/2], took[len(took)-1]
		}
		checked := func(n int) string {
			if n < 0 {
				return "not checked"
			}
			return strconv.Itoa(n)
		}
		t.Logf("leader kill: %d kills (%d mid-call, %d at a tool boundary), %d partitions; takeover median %s, worst %s; steps lost (windows not closed): %s; actions twice: %s",
			mid+boundary, mid, boundary, cuts, median.Round(time.Millisecond), worst.Round(time.Millisecond), checked(lost), checked(twice))
	}()
	for slice := 0; !reachedSoak; slice++ {
		if slice == 400 {
			t.Fatalf("the round did not reach the soak after %d slices", slice)
		}
		// The slices are short (two to four calls, round_status among
		// them) so that the round meets at least 20 events before the
		// soak: undisturbed, it reaches the soak in about 25 slices of
		// two to seven calls.
		agent := &Agent{Session: h, Sign: l.Sign, MaxCalls: 2 + r.IntN(3), Poll: 50 * time.Millisecond}
		// 0: kill at a random delay inside the slice, 1: kill at its
		// end, 2: partition at a random delay (at the end where the
		// slice is shorter).
		kind := r.IntN(3)
		fired := make(chan *leaderEvent, 1)
		fire := func() { fired <- h.event(ctx, kind == 2) }
		var timer *time.Timer
		if kind != 1 {
			timer = time.AfterFunc(time.Duration(r.IntN(1500))*time.Millisecond, fire)
		}
		h.running.Store(true)
		out, err := agent.Run(ctx, leaderKillRound)
		h.running.Store(false)
		if timer == nil || timer.Stop() {
			fire()
		}
		ev := <-fired
		<-ev.done
		switch {
		case ev.skipped != nil:
			t.Logf("slice %d: no event: %v; calls: %s", slice, ev.skipped, h.takeTrace())
		case ev.err != nil:
			t.Fatalf("slice %d: %s of %s: %v", slice, ev.kind, ev.leader, ev.err)
		default:
			events = append(events, ev)
			switch ev.kind {
			case killMidCall:
				mid++
			case killBoundary:
				boundary++
			case partitionLeader:
				cuts++
			}
			t.Logf("event %d (slice %d): %s of %s; %s leads %s later; calls: %s", len(events), slice, ev.kind, ev.leader,
				ev.next, ev.takeover.Round(time.Millisecond), h.takeTrace())
			if ev.takeover > takeoverBound {
				t.Errorf("event %d: %s took %s to take over, more than %s", len(events), ev.next, ev.takeover, takeoverBound)
			}
		}
		if gone := h.roundLost(); gone != "" {
			t.Fatalf("after %d events the leader does not see the round the one before it ran: %s", len(events), gone)
		}
		if out.Stopped != nil {
			t.Fatalf("after %d events the round stopped: %+v", len(events), *out.Stopped)
		}
		if out.Closed {
			t.Fatal("the round closed without its soak")
		}
		switch {
		case err == nil:
		case strings.Contains(err.Error(), "cannot wait"):
			reachedSoak = true
		case strings.HasPrefix(err.Error(), "gave up after"):
			// The slice's calls are spent: the next slice goes on.
		default:
			t.Fatalf("after %d events the agent failed: %v (steps of this slice: %q)", len(events), err, out.Steps)
		}
	}
	h.stopAll()
	// The soak and the close: lab-a comes back in process, on the lab's
	// clock (the soak is 48 h), takes the round over from the remote as
	// the next leader and closes it.
	closeAfterTheKills(ctx, t, l, h.servers["lab-a"].configFile)

	if len(events) < 20 {
		t.Errorf("the round reached the soak after %d events; the test wants at least 20", len(events))
	}

	// The round's record: the longest journal of the remote's working
	// branch and the two working copies (the servers are stopped).
	dir, st, recs := latestRound(t, remote, l.IntentRepo, copyB)
	t.Logf("round record read from %s (%d records)", dir, len(recs))
	if !st.Closed {
		t.Errorf("the round's record on the remote is not closed (phase after %d records)", len(recs))
	}
	lost = 0
	for _, n := range st.Nodes {
		if n.Window != round.WindowClosed {
			lost++
			t.Errorf("window of %s is %s", n.Node, n.Window)
		}
	}
	twice = approvedTwice(t, recs) + trialBootsTwice(t, l.Fleet)
	nodes, err := l.Cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s left cordoned (annotations %v)", n.Name, n.Annotations)
		}
	}
}

// intentRemote makes the intent remote both servers share: a bare clone
// of the lab's working copy (server A's), added to it as origin, and a
// second working copy cloned from it (server B's). It returns the bare
// repository and B's working copy.
//
// The servers reach it over real SSH: an OpenSSH sshd on loopback that
// lets the lab operator's key in, its host key in a known_hosts file the
// servers' configs name (knownHosts), and each working copy's origin an
// ssh:// URL to the bare repository.
func intentRemote(t *testing.T, l *Lab) (remote, copyB, knownHosts string) {
	t.Helper()
	remote = filepath.Join(l.Dir, "intent-remote.git")
	copyB = filepath.Join(l.Dir, "intent-b")
	key, err := os.ReadFile(l.Fleet.OperatorKeyFile())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sshd := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	knownHosts = filepath.Join(l.Dir, "intent-remote.known_hosts")
	sshdtest.WriteKnownHosts(t, knownHosts, sshd)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	sshURL := (&url.URL{Scheme: "ssh", User: url.User(me.Username), Host: sshd.Addr(), Path: remote}).String()
	for _, step := range []struct {
		dir  string
		args []string
	}{
		{l.Dir, []string{"clone", "-q", "--bare", l.IntentRepo, remote}},
		{l.Dir, []string{"clone", "-q", remote, copyB}},
		{l.IntentRepo, []string{"remote", "add", "origin", sshURL}},
		{copyB, []string{"remote", "set-url", "origin", sshURL}},
	} {
		if err := git(step.dir, step.args...); err != nil {
			t.Fatal(err)
		}
	}
	return remote, copyB, knownHosts
}

// leaderConfig writes server id's configuration: the lab's, with its own
// identity, state directory and intent working copy, the intent remote
// (its host key in knownHosts),
// the election on, a window Lease that lapses within seconds, and a
// kubeconfig that reaches the API server through apiAddr (its proxy).
// The etcd endpoints stay direct.
func leaderConfig(t *testing.T, l *Lab, id, repo, apiAddr, knownHosts string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(l.ServiceAccountKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range kc.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatalf("kubeconfig cluster %s: %v", name, err)
		}
		// The API server's certificate covers 127.0.0.1, where the proxy listens.
		u.Host = apiAddr
		c.Server = u.String()
	}
	kubeconfig := filepath.Join(l.Dir, "mcp-patch-"+id+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	c := l.Config
	c.Identity = id
	c.StateDir = filepath.Join(l.Dir, "state-"+strings.TrimPrefix(id, "lab-"))
	c.IntentRepo = repo
	c.Kubeconfig = kubeconfig
	c.Git.Remote = "origin"
	c.SSH.KnownHosts = append(slices.Clone(c.SSH.KnownHosts), knownHosts)
	c.LeaderElection = config.LeaderElection{Enabled: true, LeaseName: config.DefaultLeaderLease,
		LeaseDuration: config.Duration(leaderLeaseDuration), RenewDeadline: config.Duration(leaderRenewDeadline),
		RetryPeriod: config.Duration(leaderRetryPeriod)}
	c.Kube.LeaseDuration = config.Duration(windowLeaseDuration)
	c.Kube.LeaseRenew = config.Duration(windowLeaseRenew)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(l.Dir, "mcp-patch-"+id+".yaml")
	if err := os.WriteFile(path, append([]byte("# mcp-patch configuration of server "+id+" (TestKillTheLeaderAnywhere)\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiProxy forwards TCP connections from a loopback port to the API
// server; Cut partitions whoever connects through it.
type apiProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	cutUntil time.Time
}

func newAPIProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.closeAll()
	})
	return p
}

// Addr is the proxy's 127.0.0.1:port.
func (p *apiProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection and refuses new ones for d.
func (p *apiProxy) Cut(d time.Duration) {
	p.mu.Lock()
	p.cutUntil = time.Now().Add(d)
	p.mu.Unlock()
	p.closeAll()
}

// CutUntil is when the last cut ends.
func (p *apiProxy) CutUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutUntil
}

func (p *apiProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *apiProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

// forward joins c to a new connection to the API server, unless the
// proxy is cut now.
func (p *apiProxy) forward(c net.Conn) {
	p.mu.Lock()
	cut := time.Now().Before(p.cutUntil)
	p.mu.Unlock()
	if cut {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if time.Now().Before(p.cutUntil) {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// leaderServer is one mcp-patch server of the test, run over stdio; a
// killed one is started again (it then follows).
type leaderServer struct {
	id, bin, configFile, level, logFile string

	mu      sync.Mutex
	cmd     *exec.Cmd
	session *mcp.ClientSession
	// gen changes at every start and kill: a call that fails while it
	// changed failed because the server was killed under it.
	gen  int
	live bool
}

func (s *leaderServer) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// The child has its own copy of the descriptor once started.
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s: start %s\n", time.Now().Format(time.RFC3339Nano), s.id)
	cmd := exec.Command(s.bin, "serve", "--config", s.configFile, "--log-level", s.level)
	cmd.Stderr = logf
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "leader-kill", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("start server %s: %w", s.id, err)
	}
	s.mu.Lock()
	s.cmd, s.session, s.live = cmd, cs, true
	s.gen++
	s.mu.Unlock()
	return nil
}

// kill ends the server with SIGKILL and waits until it is gone.
func (s *leaderServer) kill() {
	s.mu.Lock()
	cmd, cs := s.cmd, s.session
	s.live = false
	s.gen++
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	cs.Close()
}

// stop ends the server as a client does (stdin closed; a leader lets
// its Lease go).
func (s *leaderServer) stop() {
	s.mu.Lock()
	cs, live := s.session, s.live
	s.live = false
	s.gen++
	s.mu.Unlock()
	if live {
		cs.Close()
	}
}

// current is the server's session and generation while it runs.
func (s *leaderServer) current() (*mcp.ClientSession, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session, s.gen, s.live
}

func (s *leaderServer) generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// leaderHarness holds the two servers, their proxies and the leader
// Lease they elect on. It is the agent's Caller: each call goes to the
// server that holds the leader Lease now.
type leaderHarness struct {
	kc        kubernetes.Interface
	ns, lease string
	ids       []string
	servers   map[string]*leaderServer
	proxies   map[string]*apiProxy
	// running is set while the agent runs a slice: an event then is
	// mid-call.
	running atomic.Bool

	mu sync.Mutex
	// trace is "server tool status" of each call answered since the
	// last take.
	trace []string
	// sawRound: a leader answered round_status with a round; lostRound
	// says which server answered it later with none.
	sawRound  bool
	lostRound string
}

var _ Caller = (*leaderHarness)(nil)

// leaderRefusals are the words of the answers a server gives when it
// does not lead, cannot tell who does, or was fenced off (round/service
// leader.go): the call goes to the leader again.
var leaderRefusals = []string{"is a follower; the leader is", "no server leads now", "cannot tell which server leads",
	"was fenced off just before it acted"}

// CallTool calls the leader; on a leader refusal, or a leader killed
// under the call, it waits for a live leader and calls again.
func (h *leaderHarness) CallTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	deadline := time.Now().Add(leaderWait)
	var last *leaderServer
	var since time.Time
	why := "none"
	for {
		s, err := h.liveLeader(ctx, deadline, last, since)
		if err != nil {
			return nil, fmt.Errorf("%s: %w; last answer: %s", params.Name, err, why)
		}
		cs, gen, ok := s.current()
		if !ok {
			continue
		}
		res, err := cs.CallTool(ctx, params)
		switch {
		case err != nil && ctx.Err() == nil && s.generation() != gen:
			why = fmt.Sprintf("%s was killed under the call: %v", s.id, err)
		case err != nil:
			return res, err
		default:
			a := answerOf(res)
			if refusal := a.leaderRefusal(); refusal != "" {
				why = s.id + " refused: " + refusal
				break
			}
			h.note(s.id, params.Name, a)
			return res, nil
		}
		last, since = s, time.Now()
	}
}

// leaderAnswer is what the harness reads of a tool's answer.
type leaderAnswer struct {
	Status  string   `json:"status"`
	Reasons []string `json:"reasons"`
}

func answerOf(res *mcp.CallToolResult) leaderAnswer {
	var a leaderAnswer
	if res == nil || len(res.Content) != 1 {
		return a
	}
	if text, ok := res.Content[0].(*mcp.TextContent); ok {
		json.Unmarshal([]byte(text.Text), &a)
	}
	return a
}

// leaderRefusal is the reason of a refusal that names the leader rule,
// "" for any other answer.
func (a leaderAnswer) leaderRefusal() string {
	if a.Status != "refused" {
		return ""
	}
	for _, reason := range a.Reasons {
		for _, w := range leaderRefusals {
			if strings.Contains(reason, w) {
				return reason
			}
		}
	}
	return ""
}

// note traces a call answered by server id, and remembers a leader that
// answers round_status with no round after the round was planned or
// seen (round_status refuses only where it finds no round): a new
// leader that does not see the round the old one ran would plan it
// again.
func (h *leaderHarness) note(id, tool string, a leaderAnswer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	call := id + " " + tool + " " + a.Status
	if (a.Status == "refused" || a.Status == "failed") && len(a.Reasons) > 0 {
		call += " (" + clip(a.Reasons[0], 160) + ")"
	}
	h.trace = append(h.trace, call)
	switch {
	case tool != "round_status" && tool != "plan_round":
	case a.Status != "refused":
		// Handed over only once the remote holds it: a plan whose commit
		// never reached the remote (its leader lost the lead first) is
		// planned again by the next leader, and that is no loss.
		if !h.sawRound {
			h.sawRound = h.publishedRound()
		}
	case tool == "round_status" && h.sawRound && h.lostRound == "":
		h.lostRound = fmt.Sprintf("%s answered round_status with no round: %s", id, strings.Join(a.Reasons, "; "))
	}
}

// takeTrace returns the calls answered since the last take, runs of the
// same call folded ("lab-a drain_node in_progress ×12").
func (h *leaderHarness) takeTrace() string {
	h.mu.Lock()
	calls := h.trace
	h.trace = nil
	h.mu.Unlock()
	var out []string
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j] == calls[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", calls[i], j-i))
		} else {
			out = append(out, calls[i])
		}
		i = j
	}
	return strings.Join(out, ", ")
}

// publishedRound says whether a leader published the round's journal
// head on the window Lease (what a new leader adopts).
func (h *leaderHarness) publishedRound() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, ok, err := windowlock.ReadPublished(ctx, h.kc, windowlock.Config{Namespace: h.ns, Identity: "leader-kill-test"})
	return err == nil && ok && p.Round == leaderKillRound
}

// roundLost says which server answered round_status with no round after
// the round was seen ("" when none did).
func (h *leaderHarness) roundLost() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostRound
}

// liveLeader waits, polling every 100 ms until deadline, for a running
// server that holds an unexpired leader Lease; when last answered that
// it does not lead at since, last counts again only once it renewed the
// Lease after since.
func (h *leaderHarness) liveLeader(ctx context.Context, deadline time.Time, last *leaderServer, since time.Time) (*leaderServer, error) {
	for {
		ls, err := readLeaderLease(ctx, h.kc, h.ns, h.lease)
		if err == nil && ls.fresh(time.Now()) {
			if s := h.servers[ls.holder]; s != nil && (s != last || ls.renewed.After(since)) {
				if _, _, ok := s.current(); ok {
					return s, nil
				}
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("the leader Lease names %q, renewed %s", ls.holder, ls.renewed.Format(time.RFC3339Nano))
			}
			return nil, fmt.Errorf("no live leader within the wait: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leaderLease is the leader Lease as the API server holds it.
type leaderLease struct {
	holder   string
	renewed  time.Time
	duration time.Duration
}

// fresh: someone holds the Lease and it has not lapsed at now.
func (l leaderLease) fresh(now time.Time) bool {
	return l.holder != "" && now.Before(l.renewed.Add(l.duration))
}

func readLeaderLease(ctx context.Context, kc kubernetes.Interface, ns, name string) (leaderLease, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	le, err := kc.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return leaderLease{}, nil
	}
	if err != nil {
		return leaderLease{}, fmt.Errorf("read the leader Lease %s/%s: %w", ns, name, err)
	}
	var out leaderLease
	if le.Spec.HolderIdentity != nil {
		out.holder = *le.Spec.HolderIdentity
	}
	if le.Spec.RenewTime != nil {
		out.renewed = le.Spec.RenewTime.Time
	}
	if le.Spec.LeaseDurationSeconds != nil {
		out.duration = time.Duration(*le.Spec.LeaseDurationSeconds) * time.Second
	}
	return out, nil
}

// The events a slice ends its leader with.
const (
	killMidCall     = "kill -9 mid-call"
	killBoundary    = "kill -9 at a tool boundary"
	partitionLeader = "partition"
)

// leaderEvent is one event on the leader and the takeover after it.
type leaderEvent struct {
	kind, leader, next string
	at                 time.Time
	// takeover is the time from the event until next held the leader Lease.
	takeover time.Duration
	// skipped says why no event took place (no live leader then).
	skipped error
	// err: no takeover, or the killed server did not start again.
	err  error
	done chan struct{}
}

// event kills or partitions the server that leads now, and follows the
// takeover in the background (done closes when the other server holds
// the leader Lease and the first is back: started again, or the cut
// over).
func (h *leaderHarness) event(ctx context.Context, partition bool) *leaderEvent {
	ev := &leaderEvent{done: make(chan struct{})}
	ls, err := readLeaderLease(ctx, h.kc, h.ns, h.lease)
	s := h.servers[ls.holder]
	if err != nil || s == nil || !ls.fresh(time.Now()) {
		ev.skipped = fmt.Errorf("the leader Lease names %q (renewed %s; %v)", ls.holder, ls.renewed.Format(time.RFC3339Nano), err)
		close(ev.done)
		return ev
	}
	if _, _, ok := s.current(); !ok {
		ev.skipped = fmt.Errorf("the leader Lease names %s, which is not running", s.id)
		close(ev.done)
		return ev
	}
	ev.leader = s.id
	for _, id := range h.ids {
		if id != s.id {
			ev.next = id
		}
	}
	ev.at = time.Now()
	switch {
	case partition:
		ev.kind = partitionLeader
		h.proxies[s.id].Cut(partitionFor)
	case h.running.Load():
		ev.kind = killMidCall
		s.kill()
	default:
		ev.kind = killBoundary
		s.kill()
	}
	go h.followTakeover(ctx, ev, s)
	return ev
}

// followTakeover polls the leader Lease every 50 ms, for at most a
// minute, until ev.next holds it; then starts the killed server again
// (not sooner: a server restarted under its own identity renews its own
// unexpired Lease at once), or waits for the cut to end.
func (h *leaderHarness) followTakeover(ctx context.Context, ev *leaderEvent, s *leaderServer) {
	defer close(ev.done)
	bound := ev.at.Add(time.Minute)
	for {
		ls, err := readLeaderLease(ctx, h.kc, h.ns, h.lease)
		if err == nil && ls.holder == ev.next {
			ev.takeover = time.Since(ev.at)
			break
		}
		if time.Now().After(bound) || ctx.Err() != nil {
			ev.err = fmt.Errorf("%s did not take the leader Lease within a minute (it names %q; %v)", ev.next, ls.holder, err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ev.kind == partitionLeader {
		select {
		case <-time.After(time.Until(h.proxies[s.id].CutUntil())):
		case <-ctx.Done():
		}
		return
	}
	if err := s.start(ctx); err != nil {
		ev.err = errors.Join(ev.err, err)
	}
}

// stopAll stops the servers that run.
func (h *leaderHarness) stopAll() {
	for _, id := range h.ids {
		h.servers[id].stop()
	}
}

// latestRound reads round 2026-11 from the remote's working branch and
// from the working copies, and returns the one with the most journal
// records: its directory, state and records.
func latestRound(t *testing.T, remote string, copies ...string) (string, *round.State, []round.Record) {
	t.Helper()
	fromRemote := filepath.Join(t.TempDir(), "remote-round")
	dirs := slices.Clone(copies)
	if err := git(filepath.Dir(fromRemote), "clone", "-q", "-b", "mcp-patch/round-2026-11", remote, fromRemote); err != nil {
		t.Logf("the remote has no round branch: %v", err)
	} else {
		dirs = append([]string{fromRemote}, dirs...)
	}
	var (
		best   string
		bestSt *round.State
		most   = -1
	)
	for _, d := range dirs {
		dir := filepath.Join(d, "rounds", leaderKillRound)
		st, info, err := round.ReadState(dir)
		if err != nil {
			t.Logf("round record in %s: %v", d, err)
			continue
		}
		t.Logf("round record in %s: %d records", d, info.Records)
		if info.Records > most {
			best, bestSt, most = dir, st, info.Records
		}
	}
	if bestSt == nil {
		t.Fatal("no round record to check")
	}
	data, err := round.ReadJournal(best)
	if err != nil {
		t.Fatal(err)
	}
	var recs []round.Record
	for line := range strings.Lines(string(data)) {
		var rec round.Record
		if json.Unmarshal([]byte(line), &rec) == nil {
			recs = append(recs, rec)
		}
	}
	return best, bestSt, recs
}

// destructiveSteps are the steps the destructive tools start
// (tools.NewDestructive): each step_started of one carries the approval
// it ran under.
var destructiveSteps = map[round.Step]bool{round.StepDrain: true, round.StepInstall: true, round.StepTrialBoot: true,
	round.StepPromote: true, round.StepAutoremove: true}

// approvedTwice counts the destructive steps started a second time. One
// approval may start several steps: a GPU server's window approval
// (approvals.gpu_servers: per_window) covers each step of its window
// once. So an action run twice is the same approval starting the same
// step on the same node again, or a step started again on a node where
// it had already finished (a round without kills starts each once; a
// start again while the step is in flight is a restart after its host
// showed that nothing began, which is no second action).
func approvedTwice(t *testing.T, recs []round.Record) int {
	t.Helper()
	seen := map[string]uint64{}
	done := map[string]uint64{}
	twice := 0
	for _, rec := range recs {
		where := string(rec.Step) + " " + rec.Node
		if rec.Kind == round.KindStepFinished && destructiveSteps[rec.Step] {
			done[where] = rec.Seq
		}
		if rec.Kind != round.KindStepStarted || !destructiveSteps[rec.Step] {
			continue
		}
		if fin, ok := done[where]; ok {
			twice++
			t.Errorf("%s of %s started again (seq %d) after it finished (seq %d): an action run twice", rec.Step, rec.Node, rec.Seq, fin)
		}
		if rec.ApprovalID == "" {
			t.Errorf("step_started %s of %s (seq %d) carries no approval", rec.Step, rec.Node, rec.Seq)
			continue
		}
		key := rec.ApprovalID + " " + string(rec.Step) + " " + rec.Node
		if prev, ok := seen[key]; ok {
			twice++
			t.Errorf("approval %s started %s of %s twice (seq %d and %d): an action run twice", rec.ApprovalID, rec.Step, rec.Node, prev, rec.Seq)
		}
		seen[key] = rec.Seq
	}
	return twice
}

// trialBootsTwice counts the hosts' trial boots past one. A round
// without kills (the fleet's TestTrialBootCycle, the demo) boots each
// host once through GRUB's one-shot next_entry, into the new kernel the
// archive offers (the round's target), and promote makes it the default
// without a reboot: the history is the first boot on the old kernel,
// then one next_entry boot up on fleet.NewKernel. What is compared here
// is that one next_entry boot; a second is a trial boot run twice.
func trialBootsTwice(t *testing.T, f *fleet.Fleet) int {
	t.Helper()
	twice := 0
	for _, host := range f.Hosts() {
		hist := host.BootHistory()
		var trial []fleet.BootRecord
		for _, b := range hist {
			if b.FromNext {
				trial = append(trial, b)
			}
		}
		if len(trial) > 1 {
			twice += len(trial) - 1
		}
		if len(trial) != 1 || trial[0].Kernel != fleet.NewKernel || trial[0].Result != machine.BootUp {
			t.Errorf("%s: %d boots by next_entry, want one up on %s; boot history: %+v", host.Name, len(trial), fleet.NewKernel, hist)
		}
	}
	return twice
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// grepLog is the lines of a server's log holding any of words.
func grepLog(path string, words ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// remoteSteps lists the step records of the round's journal on the
// remote's working branch: seq, kind, step, node, approval.
func remoteSteps(remote string) string {
	raw, err := exec.Command("git", "--git-dir", remote, "show", "mcp-patch/round-"+leaderKillRound+":rounds/"+leaderKillRound+"/"+round.JournalFile).Output()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		var r round.Record
		if json.Unmarshal([]byte(line), &r) != nil || (r.Step == "" && r.Kind != round.KindSessionOpened) {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s %s %s %s %s", r.Seq, r.Kind, r.Step, r.Node, r.ApprovalID, r.Detail))
	}
	return strings.Join(out, "\n")
}

// closeAfterTheKills runs the rest of the round (the soak, autoremove,
// the lesson and the close) on server configFile built in process with
// the lab's clock: it begins a term as leader after the two processes
// ended, takes the round over from the remote and closes it. Its elector
// keeps real time (the Leases do), its round the lab's.
func closeAfterTheKills(ctx context.Context, t *testing.T, l *Lab, configFile string) {
	t.Helper()
	raw, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultConfig()
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	d, cleanup, err := tools.Build(ctx, &cfg, testLog(t), func(string) string { return "" }, l.Clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	kc, err := d.KubeClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	le := cfg.LeaderElection
	e, err := leader.New(kc.Kube, leader.Config{Namespace: cfg.Kube.LeaseNamespace, Name: le.LeaseName, WindowLease: windowlock.DefaultName,
		Identity: cfg.Identity, LeaseDuration: le.LeaseDuration.D(), RenewDeadline: le.RenewDeadline.D(), RetryPeriod: le.RetryPeriod.D()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	defer e.Stop()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.Wait(wait, true); err != nil {
		t.Fatalf("%s does not lead after the others stopped: %v", cfg.Identity, err)
	}
	d.Leader = e
	srv := tools.NewServer(tools.Builtin(), d, "lab")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lab-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	agent := &Agent{Session: cs, Sign: l.Sign, Wait: l.Clock.AdvanceTo, Poll: 50 * time.Millisecond,
		BeforeClose: func(ctx context.Context) error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_lesson", Arguments: map[string]any{
				"component": "os-layer", "kind": "lesson", "round": leaderKillRound,
				"text": "Round " + leaderKillRound + " ran through leader kills and partitions; each new leader took it over from the intent remote.",
			}})
			if err != nil || res.IsError {
				return fmt.Errorf("record_lesson before close: %v %v", err, res)
			}
			return nil
		}}
	out, err := agent.Run(ctx, leaderKillRound)
	if err != nil || !out.Closed {
		t.Fatalf("%s after the kills: closed %v, stopped %+v, err %v (steps %q)", cfg.Identity, out.Closed, out.Stopped, err, out.Steps)
	}
	t.Logf("%s took the round over after the kills and closed it in %d calls", cfg.Identity, out.Calls)
}
