package drain_test

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	klabels "k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// seen is what the window can observe of a cluster after one call: the
// call's error (by the sentinel it branches on), what the drain evicted,
// the node's cordon and owner, and what a drain would evict now.
type seen struct {
	Err           string
	DryRun        bool
	Evicted       []string
	Unschedulable bool
	Owner         string
	EvictNow      []string
	Blockers      bool
	SameDigest    bool
}

func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, drain.ErrBlocked):
		return "blocked"
	case errors.Is(err, drain.ErrPlanDrift):
		return "drift"
	default:
		return "error"
	}
}

func sortedNames(refs []drain.PodRef) []string {
	out := podNames(refs)
	sort.Strings(out)
	return out
}

// look observes node on c after a call that answered res and err; before
// is the digest of the preview taken before the call.
func look(t *testing.T, c window.Cluster, node string, pol drain.Policy, before string, res drain.Result, err error) seen {
	t.Helper()
	st, serr := c.CordonState(t.Context(), node)
	if serr != nil {
		t.Fatalf("cordon state of %s: %v", node, serr)
	}
	p, perr := c.PreviewDrain(t.Context(), node, pol)
	if perr != nil {
		t.Fatalf("preview of %s: %v", node, perr)
	}
	s := seen{Err: errKind(err), DryRun: res.DryRun, Evicted: sortedNames(res.Evicted), Unschedulable: st.Unschedulable,
		EvictNow: sortedNames(p.Evict), Blockers: len(p.Blockers) > 0, SameDigest: p.Digest == before}
	if st.Owner != nil {
		s.Owner = st.Owner.Identity
	}
	return s
}

// seed is the fake as the real cluster shows node now: its preview under
// pol and the pods a job selector holds there.
func seed(t *testing.T, f *fakes.Cluster, real window.Cluster, node string, pol drain.Policy, jobs klabels.Selector) {
	t.Helper()
	p, err := real.PreviewDrain(t.Context(), node, pol)
	if err != nil {
		t.Fatal(err)
	}
	held, err := real.HoldingPods(t.Context(), node, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if f.Pods == nil {
		f.Pods, f.Blockers, f.Jobs = map[string][]drain.PodRef{}, map[string][]string{}, map[string][]drain.PodRef{}
	}
	f.Pods[node], f.Blockers[node], f.Jobs[node] = p.Evict, p.Blockers, held
}

// TestWindowFakeClusterContract holds round/window/fakes.Cluster, on which
// the window's unit tests drain, to drain.Cluster on the real API server:
// the fake is seeded with what the real cluster shows (its preview and the
// pods a job selector holds), then both take the same calls, and after
// each the window observes the same thing on both: the same refusal
// (blockers, a digest that is no longer the approved one, an invalid
// identity) with nothing changed, the same dry run that changes nothing,
// the same pods evicted and the cordon recorded as ours, a person's cordon
// left theirs, another identity's cordon request leaving ours alone, and
// the job pods listed only under a selector and gone once drained.
func TestWindowFakeClusterContract(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	real := drain.Cluster{Kube: kc}
	name, person := "wfake-1", "wfake-2"
	node(t, c, name)
	node(t, c, person)
	daemonSet(t, kc, ns, "agent", name)
	deploy(t, kc, ns, "web", name, 2, false)
	barePod(t, kc, ns, "train", name)
	deploy(t, kc, ns, "side", person, 1, false)
	if out, err := c.Kubectl(t.Context(), "cordon", person); err != nil {
		t.Fatalf("kubectl cordon: %v %s", err, out)
	}

	cautious := drain.Policy{}
	permissive := drain.Policy{DeleteEmptyDirData: true, DeleteUnmanagedPods: true}
	jobs := klabels.SelectorFromSet(klabels.Set{"app": "train"})
	opts := func(pol drain.Policy, digest string) drain.Options {
		return drain.Options{Policy: pol, Round: round, Identity: us, ExpectDigest: digest, Timeout: time.Minute, EvictRetryDelay: 200 * time.Millisecond}
	}
	digest := func(cl window.Cluster, node string, pol drain.Policy) string {
		p, err := cl.PreviewDrain(t.Context(), node, pol)
		if err != nil {
			t.Fatal(err)
		}
		return p.Digest
	}
	// both runs call on each side and fails on the first difference.
	both := func(what string, node string, pol drain.Policy, fake *fakes.Cluster, call func(window.Cluster) (drain.Result, error)) seen {
		t.Helper()
		var got [2]seen
		for i, cl := range []window.Cluster{real, fake} {
			before := digest(cl, node, pol)
			res, err := call(cl)
			got[i] = look(t, cl, node, pol, before, res, err)
		}
		if d := cmp.Diff(got[0], got[1]); d != "" {
			t.Fatalf("%s (-real +fake):\n%s", what, d)
		}
		return got[0]
	}

	// The cautious policy: the unmanaged pod blocks; nothing changes.
	fc := &fakes.Cluster{}
	seed(t, fc, real, name, cautious, jobs)
	if s := both("drain with a blocker", name, cautious, fc, func(cl window.Cluster) (drain.Result, error) {
		return cl.Drain(t.Context(), name, opts(cautious, digest(cl, name, cautious)), nil)
	}); s.Err != "blocked" || s.Unschedulable || !s.SameDigest {
		t.Fatalf("drain with a blocker: %+v", s)
	}

	f := &fakes.Cluster{Cordoned: map[string]string{person: ""}}
	seed(t, f, real, name, permissive, jobs)
	seed(t, f, real, person, permissive, jobs)
	if s := both("drain of another digest", name, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		return cl.Drain(t.Context(), name, opts(permissive, "sha256:not-the-approved-one"), nil)
	}); s.Err != "drift" || s.Unschedulable || !s.SameDigest {
		t.Fatalf("drain of another digest: %+v", s)
	}
	both("drain without an identity", name, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		o := opts(permissive, "")
		o.Identity = ""
		return cl.Drain(t.Context(), name, o, nil)
	})
	if s := both("dry run", name, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		o := opts(permissive, digest(cl, name, permissive))
		o.DryRun = true
		return cl.Drain(t.Context(), name, o, nil)
	}); s.Err != "" || !s.DryRun || len(s.Evicted) != 3 || s.Unschedulable || !s.SameDigest {
		t.Fatalf("dry run: %+v", s)
	}

	for i, cl := range []window.Cluster{real, f} {
		all, err := cl.HoldingPods(t.Context(), name, jobs)
		none, nerr := cl.HoldingPods(t.Context(), name, klabels.Everything())
		if err != nil || nerr != nil || len(all) != 1 || all[0].Name != "train" || len(none) != 0 {
			t.Fatalf("side %d: jobs under app=train %v (%v), under no selector %v (%v)", i, all, err, none, nerr)
		}
	}

	// A person's cordon: our cordon request leaves it theirs, and a drain
	// there evicts without recording the node as ours.
	if s := both("cordon of a node a person cordoned", person, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		return drain.Result{}, cl.Cordon(t.Context(), person, round, us)
	}); s.Err != "" || !s.Unschedulable || s.Owner != "" {
		t.Fatalf("cordon of a node a person cordoned: %+v", s)
	}
	if s := both("drain of a node a person cordoned", person, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		return cl.Drain(t.Context(), person, opts(permissive, digest(cl, person, permissive)), nil)
	}); s.Err != "" || len(s.Evicted) != 1 || s.Owner != "" || len(s.EvictNow) != 0 {
		t.Fatalf("drain of a node a person cordoned: %+v", s)
	}

	// The approved drain: cordoned as ours, every planned pod evicted.
	if s := both("approved drain", name, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		return cl.Drain(t.Context(), name, opts(permissive, digest(cl, name, permissive)), nil)
	}); s.Err != "" || len(s.Evicted) != 3 || !s.Unschedulable || s.Owner != us || len(s.EvictNow) != 0 {
		t.Fatalf("approved drain: %+v", s)
	}
	for i, cl := range []window.Cluster{real, f} {
		if held, err := cl.HoldingPods(t.Context(), name, jobs); err != nil || len(held) != 0 {
			t.Fatalf("side %d: jobs after the drain %v (%v), want none", i, held, err)
		}
	}
	if s := both("another identity's cordon of our node", name, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		return drain.Result{}, cl.Cordon(t.Context(), name, round, them)
	}); s.Err != "" || s.Owner != us {
		t.Fatalf("another identity's cordon of our node: %+v", s)
	}
	if s := both("re-entered drain", name, permissive, f, func(cl window.Cluster) (drain.Result, error) {
		return cl.Drain(t.Context(), name, opts(permissive, ""), nil)
	}); s.Err != "" || len(s.Evicted) != 0 || s.Owner != us {
		t.Fatalf("re-entered drain: %+v", s)
	}
}
