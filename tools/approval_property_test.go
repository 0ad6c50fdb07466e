package tools

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

type propIn struct {
	ApprovalArg
	Node string `json:"node"`
}
type propOut struct{ Result }

// TestRandomCallsNeverExecuteWithoutValidApproval makes 10,000 random calls
// to a destructive tool through the real chokepoint and the real policy
// verifier: no approval, valid ones, forged (bit flips in request and
// signature), stale, replayed, bound to another node/round/digest, signed
// by an unknown key. It counts executions that had no valid approval: zero.
// propTool is the destructive step the approval property calls: one the
// reviewed plan does not bind, so that the property holds the chokepoint's
// approval rules alone (the signed-plan rule has its own table,
// window.TestCheckReviewed, and a window step without a round's signed
// plan is refused before any approval is asked).
const propTool = "prop_step"

func TestRandomCallsNeverExecuteWithoutValidApproval(t *testing.T) {
	const calls = 10000
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	stranger, _ := ssh.NewSignerFromKey(otherPriv)
	allowed, err := policy.ParseAllowedSigners([]byte("alice@example.org namespaces=\"mcp-patch\" " +
		strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	appr := &service.PolicyApprovals{Verifier: &policy.Verifier{AllowedSigners: allowed, NonceStore: store, Clock: clock}, TTL: 30 * time.Minute, Clock: clock}

	nodes := []string{"cp-1", "cp-2", "gpu-1"}
	digestOf := func(node string, drift int) string {
		return fmt.Sprintf("sha256:%064x", len(node)*1000+drift)
	}
	drift := 0
	executed := map[string]int{}
	tool := NewDestructive[propIn, propOut, testPlan](Spec{Name: propTool, Title: "t", Description: "t"}, Steps[propIn, propOut, testPlan]{
		Target: func(in propIn) string { return in.Node },
		Open:   func(*Deps) (*window.Round, error) { return &window.Round{ID: "2026-11"}, nil },
		Plan: func(ctx context.Context, d *Deps, r *window.Round, in propIn) (testPlan, error) {
			return testPlan{Node: in.Node, D: digestOf(in.Node, drift), Sum: []string{"drain " + in.Node}}, nil
		},
		Do: func(ctx context.Context, d *Deps, r *window.Round, in propIn, plan testPlan, a service.Approved, p Progress) (propOut, error) {
			executed[a.ID]++
			return propOut{}, nil
		},
	})
	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	d := &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mode: ModeNormal, Approvals: appr, Now: clock}

	sign := func(s ssh.Signer, tool, node, rnd, digest string, ttl time.Duration) (string, policy.Request) {
		req, err := policy.NewRequest(tool, node, rnd, digest, []string{"drain " + node}, ttl, clock, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := policy.Sign(s, req.Canonical())
		if err != nil {
			t.Fatal(err)
		}
		return policy.FormatApproval(req, res.Signature), req
	}
	flip := func(s string, r *mrand.Rand) string {
		b := []byte(s)
		i := r.IntN(len(b))
		b[i] ^= byte(1 << r.IntN(7))
		return string(b)
	}
	r := mrand.New(mrand.NewPCG(20261129, 1))
	var used []string
	kinds := map[string]int{}
	legit, illegitimate, total := 0, 0, 0
	for i := 0; i < calls; i++ {
		node := nodes[r.IntN(len(nodes))]
		if r.IntN(50) == 0 {
			drift++ // the live plan changes under the approvals in flight
		}
		var approval, kind string
		valid := false
		switch k := r.IntN(9); k {
		case 0:
			kind = "none"
		case 1, 2:
			kind = "valid"
			approval, _ = sign(signer, propTool, node, "2026-11", digestOf(node, drift), 30*time.Minute)
			valid = true
		case 3:
			kind = "forged-signature"
			a, _ := sign(signer, propTool, node, "2026-11", digestOf(node, drift), 30*time.Minute)
			idx := strings.Index(a, "-----BEGIN SSH SIGNATURE-----") + 40
			approval = a[:idx] + flip(a[idx:len(a)-40], r) + a[len(a)-40:]
		case 4:
			kind = "forged-request"
			a, _ := sign(signer, propTool, node, "2026-11", digestOf(node, drift), 30*time.Minute)
			idx := strings.Index(a, "-----BEGIN")
			approval = flip(a[:idx], r) + a[idx:]
		case 5:
			kind = "replayed"
			if len(used) == 0 {
				kind = "none"
				break
			}
			approval = used[r.IntN(len(used))]
		case 6:
			kind = "wrong-binding"
			switch r.IntN(4) {
			case 0:
				approval, _ = sign(signer, "install_updates", node, "2026-11", digestOf(node, drift), 30*time.Minute)
			case 1:
				approval, _ = sign(signer, propTool, nodes[(indexOf(nodes, node)+1)%len(nodes)], "2026-11", digestOf(node, drift), 30*time.Minute)
			case 2:
				approval, _ = sign(signer, propTool, node, "2026-10", digestOf(node, drift), 30*time.Minute)
			default:
				approval, _ = sign(signer, propTool, node, "2026-11", digestOf(node, drift+1), 30*time.Minute)
			}
		case 7:
			kind = "stale"
			approval, _ = sign(signer, propTool, node, "2026-11", digestOf(node, drift), time.Minute)
			now = now.Add(2 * time.Minute) // expires before it is presented
		case 8:
			kind = "unknown-key"
			approval, _ = sign(stranger, propTool, node, "2026-11", digestOf(node, drift), 30*time.Minute)
		}
		kinds[kind]++
		args, _ := json.Marshal(propIn{Node: node, ApprovalArg: ApprovalArg{Approval: approval}})
		before := sumCounts(executed)
		_, res := tool.CallJSON(context.Background(), d, args, func(float64, float64, string) {})
		ran := sumCounts(executed) > before
		total++
		switch {
		case ran && valid:
			legit++
			used = append(used, approval)
		case ran:
			illegitimate++
			t.Errorf("call %d (%s) executed: %+v", i, kind, res)
		case valid:
			t.Errorf("call %d: a valid approval was refused: %v", i, res.Reasons)
		}
		if !ran && res.Status == StatusOK {
			t.Errorf("call %d (%s): status ok without executing", i, kind)
		}
		now = now.Add(time.Second)
	}
	for id, n := range executed {
		if n > 1 {
			t.Errorf("approval %s executed %d times", id, n)
		}
	}
	t.Logf("random destructive calls: %d; executed with a valid approval: %d; executed without one: %d; by kind: %v",
		total, legit, illegitimate, kinds)
	fmt.Printf("approval property: %d calls, %d executions, all with a valid single-use approval; %d without\n", total, legit, illegitimate)
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestRandomReentryCrashConcurrency drives install_updates through the
// real chokepoint, journal and window package on a fake host with 10,000
// random calls: fresh calls, re-entries, crashes (the journal reopened by
// a new process), lost answers and batches of N concurrent calls sharing
// one approval, while the live package plan drifts. It checks, call batch
// by call batch: no action without an approval consumed for it, exactly
// one action for each approval consumed (none when its start lost its
// answer: a re-entry must not start it again), at most one approval
// consumed by a batch sharing one, and every action carries exactly the
// digest its approval signed.
func TestRandomReentryCrashConcurrency(t *testing.T) {
	const calls = 10000
	start := time.Now()
	r := mrand.New(mrand.NewPCG(20261201, 9))
	var rg *wrig
	var appr *syncApprovals
	gen := 0
	fresh := func() {
		gen++
		rg = newWRig(t)
		rg.host.AnyDigest = true
		rg.drained(t)
		appr = rg.d.Approvals.(*syncApprovals)
	}
	fresh()
	live := wDigest
	setLive := func(d string) {
		live = d
		rg.host.Digest = d
		rg.writePlan(t, d)
	}
	consumed := func() int {
		appr.mu.Lock()
		defer appr.mu.Unlock()
		return len(appr.used)
	}
	actionsByApproval := map[string]int{}
	total, withApproval, without, concurrent, crashes, lost, windows, used := 0, 0, 0, 0, 0, 0, 1, 0
	for total < calls {
		before := len(rg.host.Actions)
		usedBefore := consumed()
		var approval string
		kind := r.IntN(10)
		switch kind {
		case 0: // the plan drifts under the approvals
			setLive(fmt.Sprintf("sha256:%064x", r.IntN(1<<30)))
			continue
		case 1: // the process dies and a new one opens the journal
			crashes++
			if err := rg.d.Book.Close(); err != nil {
				t.Fatal(err)
			}
			rg.d.Book = service.NewRoundBook(rg.root, rg.d.Book.AnchorDir, rg.d.Now)
			continue
		case 2: // the next start loses its answer (until a start is tried)
			rg.host.FailStart = errors.New("ssh: connection reset")
			continue
		case 3: // the install ends on the host
			if rg.host.InstallState == "running" {
				rg.host.InstallState = "finished"
			}
		case 4, 5:
			approval = "signed:" + live
		case 6:
			approval = fmt.Sprintf("signed:sha256:%064x", r.IntN(1<<30)) // another digest
		}
		n := 1
		if r.IntN(8) == 0 {
			n = 2 + r.IntN(8)
			concurrent++
		}
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				args := map[string]any{"node": wNode}
				if approval != "" {
					args["approval"] = approval
				}
				rg.call(t, "install_updates", args)
			}()
		}
		wg.Wait()
		total += n
		newly := consumed() - usedBefore
		startLost := rg.host.FailStart != nil
		if newly > 0 {
			rg.host.FailStart = nil
		}
		used += newly
		if newly > 1 {
			t.Fatalf("call %d: %d concurrent calls sharing one approval consumed %d", total, n, newly)
		}
		var installs int
		for _, a := range rg.host.Actions[before:] {
			if a.What != "install" {
				continue
			}
			installs++
			if approval == "" || newly == 0 {
				t.Fatalf("call %d: install ran without an approval consumed for it (approval %q)", total, approval)
			}
			key := fmt.Sprint(gen, " ", approval) // each window has its own nonce store
			actionsByApproval[key]++
			if want := strings.TrimPrefix(approval, "signed:"); a.Digest != want {
				t.Fatalf("call %d: install of digest %s under an approval of %s", total, a.Digest, want)
			}
			if actionsByApproval[key] > 1 {
				t.Fatalf("call %d: approval %s acted %d times", total, approval, actionsByApproval[key])
			}
		}
		switch {
		case newly == 1 && !startLost && installs != 1:
			t.Fatalf("call %d: an approval consumed, %d installs", total, installs)
		case newly == 1 && startLost && installs != 0:
			t.Fatalf("call %d: a start that lost its answer installed %d times", total, installs)
		}
		if startLost && newly == 1 {
			lost++
		}
		if approval != "" {
			withApproval += n
		} else {
			without += n
		}
		if st := rg.journal(t).State(); st.Stop != nil || st.Node(wNode).Steps[round.StepInstall].Green() {
			fresh() // the window ended (done or stopped): a new one
			windows++
			setLive(wDigest)
		}
	}
	fmt.Printf("re-entry property: %d calls (%d with an approval, %d without), %d concurrent batches, %d crashes, %d windows; %d approvals consumed, %d installs (one each; %d starts lost their answer and stayed unstarted), none without an approval, each with its approved digest; %s\n",
		total, withApproval, without, concurrent, crashes, windows, used, len(actionsByApproval), lost, time.Since(start).Round(time.Millisecond))
}
