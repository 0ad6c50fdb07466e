package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
)

// statelessRevision is the MCP revision whose requests carry no session
// (cli's statelessProtocol): any replica can answer any request.
const statelessRevision = "2026-07-28"

// TestTwoServersBehindOneAddress puts two mcp-patch servers (serve
// --http) that elect a leader on the cluster and share an intent remote
// behind one address: a reverse proxy that sends each request to the
// next server in turn. An agent connected to that address at the
// stateless revision gets every read-only answer from whichever replica
// the request reached; plan_round succeeds on the leader alone, and the
// follower refuses it naming the leader; once the plan is on the remote,
// round_status from either replica shows the same planned round.
func TestTwoServersBehindOneAddress(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 2, Canary: 1, GPUServers: 0, GateSettle: 30 * time.Second, DrainTimeoutMinutes: 6})
	bin := filepath.Join(t.TempDir(), "mcp-patch")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/mcp-patch/mcp-patch/cmd/mcp-patch").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	remote, copyB, knownHosts := intentRemote(t, l)
	apiAddr, err := url.Parse(l.Cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	token := rand.Text()
	tokenFile := filepath.Join(l.Dir, "http-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := map[string]*httpServer{}
	var ids []string
	for _, s := range []struct{ id, repo string }{{"lab-a", l.IntentRepo}, {"lab-b", copyB}} {
		cfg := leaderConfig(t, l, s.id, s.repo, apiAddr.Host, knownHosts)
		hs, err := startHTTPServer(ctx, bin, s.id, cfg, tokenFile, filepath.Join(l.Dir, "http-server-"+s.id+".log"))
		if hs != nil {
			t.Cleanup(hs.stop)
		}
		if err != nil {
			t.Fatal(err)
		}
		servers[s.id] = hs
		ids = append(ids, s.id)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range ids {
				t.Logf("last lines of %s's log:\n%s", id, tail(servers[id].logFile, 40))
			}
		}
	})
	for _, id := range ids {
		cs, err := statelessSession(ctx, servers[id].endpoint(), token)
		if err != nil {
			t.Fatalf("%s does not answer at %s: %v", id, servers[id].endpoint(), err)
		}
		cs.Close()
	}
	kc, ns := l.Cluster.Client(), l.Config.Kube.LeaseNamespace
	leader, follower := "", ""
	for deadline := time.Now().Add(time.Minute); ; {
		ls, err := readLeaderLease(ctx, kc, ns, config.DefaultLeaderLease)
		if err == nil && ls.fresh(time.Now()) && servers[ls.holder] != nil {
			leader = ls.holder
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no server holds the leader Lease a minute after both answered: it names %q (%v)", ls.holder, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range ids {
		if id != leader {
			follower = id
		}
	}
	t.Logf("both servers answer (%s at %s, %s at %s); %s leads", ids[0], servers[ids[0]].addr, ids[1], servers[ids[1]].addr, leader)

	front := newRoundRobin(t, servers, ids)
	agent, err := statelessSession(ctx, front.URL(), token)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer agent.Close()
	if v := agent.InitializeResult().ProtocolVersion; v != statelessRevision {
		t.Fatalf("the session through the proxy speaks %s, want %s (stateless)", v, statelessRevision)
	}
	call := func(tool string, args map[string]any) (string, httpAnswer) {
		t.Helper()
		id, a, err := front.call(ctx, agent, tool, args)
		if err != nil {
			t.Fatalf("%s through the proxy: %v", tool, err)
		}
		return id, a
	}

	// Read-only, before any round: each replica answers in turn.
	before := map[string]int{}
	for range 6 {
		id, a := call("round_status", map[string]any{})
		before[id]++
		t.Logf("round_status from %s: %s %s", id, a.Status, first(a.Reasons))
	}
	if len(before) != 2 {
		t.Errorf("round_status answered by %v; want both servers", before)
	}

	// The next request goes to the follower, so that the agent meets its
	// refusal before the leader plans.
	if front.peek() == leader {
		call("round_status", map[string]any{})
	}
	var refusals, plans int
	var order []string
	for i := 0; plans == 0; i++ {
		if i == 6 {
			t.Fatalf("plan_round did not succeed in %d calls", i)
		}
		id, a := call("plan_round", map[string]any{"round": leaderKillRound})
		t.Logf("plan_round from %s: %s %s", id, a.Status, first(a.Reasons))
		switch {
		case id == leader && a.Status == "ok":
			plans++
			for _, p := range a.Order.Positions {
				order = append(order, p.Node)
			}
		case id == leader:
			t.Fatalf("the leader %s answered plan_round %s: %q", leader, a.Status, a.Reasons)
		case a.Status == "refused" && slices.ContainsFunc(a.Reasons, func(r string) bool {
			return strings.Contains(r, "this server ("+follower+") is a follower; the leader is "+leader)
		}):
			refusals++
		default:
			t.Fatalf("the follower %s answered plan_round %s, want a refusal naming the leader %s: %q", follower, a.Status, leader, a.Reasons)
		}
	}
	if refusals == 0 {
		t.Errorf("no refusal of plan_round named the leader %s", leader)
	}
	if len(order) == 0 {
		t.Fatal("the plan orders no node")
	}

	// The leader published the plan's head: its commit is on the remote.
	for deadline := time.Now().Add(30 * time.Second); ; {
		p, ok, err := windowlock.ReadPublished(ctx, kc, windowlock.Config{Namespace: ns, Identity: "leader-http-test"})
		if err == nil && ok && p.Round == leaderKillRound {
			t.Logf("%s published round %s at seq %d, commit %s", p.By, p.Round, p.Seq, p.Commit)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plan's head is not published on the window Lease 30s after plan_round: ok %v, %+v, %v", ok, p, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The remote's record of the round holds the one plan.
	if n, err := remotePlans(remote, leaderKillRound); err != nil || n != 1 {
		t.Errorf("the remote's journal of round %s holds %d plan record(s) (%v); want 1", leaderKillRound, n, err)
	}

	// Read-only again: each replica shows the planned round, the same.
	after := map[string]int{}
	want := plannedView{RoundID: leaderKillRound, Order: order}
	for range 6 {
		id, a := call("round_status", map[string]any{})
		after[id]++
		if a.Status == "refused" || a.Status == "failed" || a.Round == nil {
			t.Errorf("round_status from %s after the plan: %s, round shown %v: %q", id, a.Status, a.Round != nil, a.Reasons)
			continue
		}
		got := plannedViewOf(*a.Round)
		t.Logf("round_status from %s: %s, phase %s, nodes %v", id, a.Status, got.Phase, got.Order)
		if got.Phase == round.PhaseNotPlanned {
			t.Errorf("round_status from %s after the plan: phase %s", id, got.Phase)
		}
		// The first answer's phase is the one every later answer must show.
		if want.Phase == "" {
			want.Phase = got.Phase
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round_status from %s after the plan (-want +got):\n%s", id, diff)
		}
	}
	if len(after) != 2 {
		t.Errorf("round_status after the plan answered by %v; want both servers", after)
	}
	if ls, err := readLeaderLease(ctx, kc, ns, config.DefaultLeaderLease); err != nil || ls.holder != leader {
		t.Errorf("the leader Lease names %q at the end (%v), want %s throughout", ls.holder, err, leader)
	}
	t.Logf("two servers behind one address: requests per server %v; %s leads; plan_round refused %d time(s) by %s naming the leader, planned %d time(s)",
		front.counts(), leader, refusals, follower, plans)
}

// remotePlans counts the plan records of round id's journal on the
// remote's working branch of the round.
func remotePlans(remote, id string) (int, error) {
	raw, err := exec.Command("git", "--git-dir", remote, "show", "mcp-patch/round-"+id+":rounds/"+id+"/"+round.JournalFile).Output()
	if err != nil {
		return 0, fmt.Errorf("read the journal on the remote: %w", err)
	}
	n := 0
	for line := range strings.Lines(string(raw)) {
		var rec round.Record
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Kind == round.KindPlan {
			n++
		}
	}
	return n, nil
}

// plannedView is what both replicas must agree on once the round is
// planned: its id, phase and nodes in order.
type plannedView struct {
	RoundID string
	Phase   round.Phase
	Order   []string
}

func plannedViewOf(st round.Status) plannedView {
	nodes := slices.Clone(st.Nodes)
	slices.SortFunc(nodes, func(a, b round.NodeStatus) int { return a.Index - b.Index })
	v := plannedView{RoundID: st.RoundID, Phase: st.Phase}
	for _, n := range nodes {
		v.Order = append(v.Order, n.Node)
	}
	return v
}

// httpAnswer is what the test reads of a tool's answer.
type httpAnswer struct {
	Status  string        `json:"status"`
	Reasons []string      `json:"reasons"`
	Round   *round.Status `json:"-"`
	Order   round.Order   `json:"-"`
}

// readAnswer checks that res is a tool result as the contract has it (one
// JSON text block with a status; isError exactly on refused and failed)
// and reads it.
func readAnswer(tool string, res *mcp.CallToolResult) (httpAnswer, error) {
	if res == nil || len(res.Content) != 1 {
		return httpAnswer{}, fmt.Errorf("not one content block: %+v", res)
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return httpAnswer{}, fmt.Errorf("content is %T, not text", res.Content[0])
	}
	var a httpAnswer
	var raw struct {
		Round json.RawMessage `json:"round"`
		Order *round.Order    `json:"order"`
	}
	if err := errors.Join(json.Unmarshal([]byte(text.Text), &a), json.Unmarshal([]byte(text.Text), &raw)); err != nil {
		return httpAnswer{}, fmt.Errorf("answer is not JSON: %w", err)
	}
	if a.Status == "" {
		return httpAnswer{}, fmt.Errorf("answer has no status: %s", clip(text.Text, 300))
	}
	if res.IsError != (a.Status == "refused" || a.Status == "failed") {
		return a, fmt.Errorf("isError %v with status %s", res.IsError, a.Status)
	}
	if tool == "round_status" && len(raw.Round) > 0 && raw.Round[0] == '{' {
		a.Round = new(round.Status)
		if err := json.Unmarshal(raw.Round, a.Round); err != nil {
			return a, fmt.Errorf("round: %w", err)
		}
	}
	if raw.Order != nil {
		a.Order = *raw.Order
	}
	return a, nil
}

// statelessSession connects an MCP client to endpoint with the bearer
// token at the stateless revision.
func statelessSession(ctx context.Context, endpoint, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "leader-http", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearerRoundTripper{token}}}, &mcp.ClientSessionOptions{ProtocolVersion: statelessRevision})
}

// bearerRoundTripper sends every request with the bearer token.
type bearerRoundTripper struct{ token string }

func (b bearerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// httpServer is one `mcp-patch serve --http` of the test.
type httpServer struct {
	id, addr, logFile string
	cmd               *exec.Cmd
	exited            chan struct{}
	stopOnce          sync.Once
}

// servingLine is what serve prints once it listens.
var servingLine = regexp.MustCompile(`serving MCP on http://(\S+)/`)

// startHTTPServer starts server id on a free loopback port, its stderr
// to logFile, and waits (two minutes at most) until it prints where it
// listens. A server that started is returned also with an error, so the
// caller stops it.
func startHTTPServer(ctx context.Context, bin, id, configFile, tokenFile, logFile string) (*httpServer, error) {
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	// The child has its own copy of the descriptor once started.
	defer logf.Close()
	cmd := exec.Command(bin, "serve", "--config", configFile, "--http", "127.0.0.1:0", "--token-file", tokenFile, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server %s: %w", id, err)
	}
	s := &httpServer{id: id, logFile: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if b, err := os.ReadFile(logFile); err == nil {
			if m := servingLine.FindSubmatch(b); m != nil {
				s.addr = string(m[1])
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return s, fmt.Errorf("server %s exited before it listened: %v\n%s", id, cmd.ProcessState, tail(logFile, 20))
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("server %s (pid %d) did not listen within two minutes:\n%s", id, cmd.Process.Pid, tail(logFile, 20))
		}
	}
}

func (s *httpServer) endpoint() string { return "http://" + s.addr + "/mcp" }

// stop ends the server by its pid: SIGTERM (a leader lets its Lease go),
// SIGKILL after 15 s.
func (s *httpServer) stop() {
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// roundRobin is one loopback address in front of the servers: each
// request goes to the next server in turn. It remembers where each
// request went.
type roundRobin struct {
	srv   *httptest.Server
	ids   []string
	proxy map[string]*httputil.ReverseProxy

	mu   sync.Mutex
	next int
	sent []sentRequest
}

// sentRequest is one request the proxy passed on: the server it went
// to, its JSON-RPC method and, for a tool call, the tool.
type sentRequest struct {
	server, method, tool string
}

func newRoundRobin(t *testing.T, servers map[string]*httpServer, ids []string) *roundRobin {
	t.Helper()
	p := &roundRobin{ids: ids, proxy: map[string]*httputil.ReverseProxy{}}
	for _, id := range ids {
		target := &url.URL{Scheme: "http", Host: servers[id].addr}
		p.proxy[id] = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }}
	}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// URL is the MCP endpoint behind the proxy.
func (p *roundRobin) URL() string { return p.srv.URL + "/mcp" }

func (p *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	json.Unmarshal(body, &msg)
	p.mu.Lock()
	id := p.ids[p.next%len(p.ids)]
	p.next++
	p.sent = append(p.sent, sentRequest{server: id, method: r.Method + " " + msg.Method, tool: msg.Params.Name})
	p.mu.Unlock()
	p.proxy[id].ServeHTTP(w, r)
}

// peek is the server the next request goes to.
func (p *roundRobin) peek() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids[p.next%len(p.ids)]
}

// counts is the number of requests each server got.
func (p *roundRobin) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for _, s := range p.sent {
		n[s.server]++
	}
	return n
}

// call calls tool through the proxy and says which server answered: the
// one that got the call's one request (a stateless call is one POST).
func (p *roundRobin) call(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (string, httpAnswer, error) {
	p.mu.Lock()
	mark := len(p.sent)
	p.mu.Unlock()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	p.mu.Lock()
	sent := slices.Clone(p.sent[mark:])
	p.mu.Unlock()
	if err != nil {
		return "", httpAnswer{}, fmt.Errorf("protocol error (requests %+v): %w", sent, err)
	}
	if len(sent) != 1 || sent[0].method != "POST tools/call" || sent[0].tool != tool {
		return "", httpAnswer{}, fmt.Errorf("the call went as %+v, want one POST tools/call %s", sent, tool)
	}
	a, err := readAnswer(tool, res)
	if err != nil {
		return sent[0].server, a, fmt.Errorf("answer from %s: %w", sent[0].server, err)
	}
	return sent[0].server, a, nil
}
