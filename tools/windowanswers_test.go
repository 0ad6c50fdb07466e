package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// What the agent is told for each answer of the window package: a
// refusal stays a refusal (nothing happened), a stop or an uncertain
// outcome is a failure, host errors keep their words and the window's own
// advice, a standing rule names itself, and of errors joined together the
// first answer wins while the others stay as reasons.
func TestWindowAnswersAsToolResults(t *testing.T) {
	type want struct {
		refused bool
		failed  bool
		next    string
		reasons []string
	}
	for _, c := range []struct {
		name string
		err  error
		want want
	}{
		{"refusal", &window.Refusal{Reasons: []string{"not drained"}, Next: "Drain first."},
			want{refused: true, next: "Drain first.", reasons: []string{"not drained"}}},
		{"stopped", &window.Stopped{Reasons: []string{"install failed"}, Next: "A person decides."},
			want{failed: true, next: "A person decides.", reasons: []string{"install failed"}}},
		{"uncertain", &window.Uncertain{Reasons: []string{"not sure it started"}, Next: "Call again."},
			want{failed: true, next: "Call again.", reasons: []string{"not sure it started"}}},
		{"host error with the window's advice", &window.HostError{Node: "gpu-1", Action: "promote", Err: errors.New("connection reset"), Next: "Call promote_kernel again: it checks grubenv."},
			want{failed: true, next: "Call promote_kernel again: it checks grubenv.", reasons: []string{"promote on gpu-1: connection reset"}}},
		{"host error, bad input", &window.HostError{Node: "gpu-1", Action: "install", Err: fmt.Errorf("%w: digest", steps.ErrBadInput)},
			want{refused: true, next: "Fix the input.", reasons: []string{"install on gpu-1: bad input: digest", "nothing was executed"}}},
		{"host error, host key", &window.HostError{Node: "gpu-1", Action: "trial boot", Err: &host.HostKeyError{Node: "gpu-1", Host: "10.0.0.5"}},
			want{failed: true, next: "A person must check the host key out of band"}},
		{"standing rule", &round.RuleError{Rule: round.RuleRoundStopped, Reason: "the round is stopped"},
			want{refused: true, next: "A person must decide: ask them to sign a resume or abort (record_decision).",
				reasons: []string{"refused by standing rule " + string(round.RuleRoundStopped) + ": the round is stopped", "nothing was executed"}}},
		{"an unrecorded stop says so", &window.Stop{Step: round.StepInstall, Node: "gpu-1", Reasons: []string{"held package"}, Next: "Unhold it."},
			want{failed: true, next: "Unhold it.", reasons: []string{"held package", "(not recorded: a decision to stop must go through Recorder.StopWith)"}}},
		{"need approval", window.ErrNeedApproval,
			want{refused: true, next: "Ask a person to sign a fresh request: call again without the approval to get it.", reasons: []string{window.ErrNeedApproval.Error()}}},
		{"joined: the refusal wins, the journal error stays", errors.Join(errors.New("journal: disk full"), &window.Refusal{Reasons: []string{"Lease held"}, Next: "Wait."}),
			want{refused: true, next: "Wait.", reasons: []string{"Lease held", "journal: disk full"}}},
		{"joined: a failure keeps the rest", errors.Join(&window.Stopped{Reasons: []string{"drain timed out"}, Next: "Decide."}, errors.New("release Lease: conflict"), nil),
			want{failed: true, next: "Decide.", reasons: []string{"drain timed out", "release Lease: conflict"}}},
		{"joined: need approval without an answer", errors.Join(window.ErrNeedApproval, errors.New("lease renewed late")),
			want{refused: true, next: "Ask a person to sign a fresh request: call again without the approval to get it.", reasons: []string{window.ErrNeedApproval.Error(), "lease renewed late"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := fromWindow(c.err)
			var ref *Refusal
			var fail *Failure
			isRef, isFail := errors.As(got, &ref), errors.As(got, &fail)
			if isRef != c.want.refused || isFail != c.want.failed {
				t.Fatalf("%v: refusal %v failure %v (%T), want refusal %v failure %v", c.err, isRef, isFail, got, c.want.refused, c.want.failed)
			}
			next, reasons := "", []string(nil)
			if isRef {
				next, reasons = ref.NextAction, ref.Reasons
			} else {
				next, reasons = fail.NextAction, fail.Reasons
			}
			if !strings.HasPrefix(next, c.want.next) {
				t.Errorf("next %q, want %q", next, c.want.next)
			}
			if c.want.reasons != nil && strings.Join(reasons, "|") != strings.Join(c.want.reasons, "|") {
				t.Errorf("reasons %q, want %q", reasons, c.want.reasons)
			}
		})
	}
	// An approval's id travels with the answer it wraps.
	got := fromWindow(&approvedErr{err: &window.Refusal{Reasons: []string{"x"}, Next: "y"}, id: "a-1"})
	var ae *approvedErr
	var ref *Refusal
	if !errors.As(got, &ae) || ae.id != "a-1" || !errors.As(got, &ref) {
		t.Fatalf("approved answer: %#v", got)
	}
	// Anything else passes through unchanged.
	plain := errors.New("plain")
	if got := fromWindow(plain); got != plain {
		t.Fatalf("a plain error became %v", got)
	}
	if fromWindow(nil) != nil {
		t.Fatal("nil became an error")
	}
}

// recordStop is where a Plan's decision to stop is recorded: the round
// stops at that step and node, with the Plan's reasons, and what is not a
// stop passes through without opening a round.
func TestRecordStopRecordsThePlansStop(t *testing.T) {
	r := newWRig(t)
	plain := errors.New("not a stop")
	if got := r.d.RecordStop(nil, plain); got != plain {
		t.Fatalf("a plain error: %v", got)
	}
	if st := r.journal(t).State(); st.Stop != nil {
		t.Fatalf("a plain error stopped the round: %+v", st.Stop)
	}
	// A stop the journal's rules refuse to record (an install on a node
	// not drained) is still answered, saying it is not on record.
	err := r.d.RecordStop(nil, &window.Stop{Step: round.StepInstall, Node: wNode, Reasons: []string{"a held package would be upgraded"}, Next: "Ask a person."})
	var stopped *window.Stopped
	if !errors.As(err, &stopped) || stopped.Journal == nil || !strings.Contains(err.Error(), "could not be recorded in the journal") {
		t.Fatalf("an unrecordable stop answers %v", err)
	}
	if st := r.journal(t).State(); st.Stop != nil {
		t.Fatalf("an unrecordable stop is in the journal: %+v", st.Stop)
	}

	r.drained(t)
	err = r.d.RecordStop(nil, &window.Stop{Step: round.StepInstall, Node: wNode, Reasons: []string{"a held package would be upgraded"}, Next: "Ask a person."})
	if !errors.As(err, &stopped) || stopped.Journal != nil {
		t.Fatalf("recorded stop answers %v", err)
	}
	var fail *Failure
	if !errors.As(fromWindow(err), &fail) || !strings.Contains(reasons(&Result{Reasons: fail.Reasons}), "a held package would be upgraded") {
		t.Fatalf("recorded stop answers %v", err)
	}
	st := r.journal(t).State()
	if st.Stop == nil || st.Stop.Step != round.StepInstall || st.Stop.Node != wNode || !strings.Contains(st.Stop.Reason, "held package") {
		t.Fatalf("the stop in the journal: %+v (recordStop answered %v)", st.Stop, err)
	}

	// No round open: the stop is still answered, with why it was not
	// recorded.
	d := &Deps{Config: r.d.Config, Log: r.d.Log, Now: r.d.Now}
	err = d.RecordStop(nil, &window.Stop{Step: round.StepInstall, Node: wNode, Reasons: []string{"held"}, Next: "Ask."})
	if !errors.As(err, &fail) || !strings.Contains(err.Error(), "no intent repository") {
		t.Fatalf("a stop with no round to record it in: %v", err)
	}
}

// The server's window Lease on the cluster, through its one keeper: the
// first hold takes it and keeps it renewed between the window's calls,
// another server is refused while it is held, a release frees it (and
// stops the renewal), and the other server then takes it.
func TestServerLeaseHoldsAndReleases(t *testing.T) {
	kc := fake.NewClientset()
	clients := &kube.Clients{Kube: kc}
	server := func(id string) *Deps {
		c := config.DefaultConfig()
		d := &Deps{Config: &c, Identity: id, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Cluster: func(context.Context) (*kube.Clients, error) { return clients, nil }}
		t.Cleanup(d.CloseLease)
		return d
	}
	ctx := t.Context()
	a, b := server("server-a"), server("server-b")
	ka, err := a.LeaseKeeper(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.LeaseKeeper(ctx); again != ka || err != nil {
		t.Fatalf("a second keeper in one process: %p %p %v", again, ka, err)
	}
	kb, err := b.LeaseKeeper(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hold := func(k *window.LeaseKeeper, node string) error {
		_, done, err := k.Hold(ctx, wRound, node)
		done() // the step ends; the server's keeper renews on
		return err
	}
	if err := hold(ka, wNode); err != nil {
		t.Fatalf("server-a takes the Lease: %v", err)
	}
	if err := hold(ka, wNode); err != nil {
		t.Fatalf("server-a holds it again (renewal): %v", err)
	}
	if err := ka.Check(wRound, wNode); err != nil {
		t.Fatalf("server-a does not keep its Lease between calls: %v", err)
	}
	if err := hold(kb, "gpu-2"); !errors.Is(err, window.ErrLeaseHeld) || !strings.Contains(err.Error(), "server-a") {
		t.Fatalf("server-b while server-a holds it: %v", err)
	}
	if err := kb.Release(ctx, wRound, "gpu-2"); err != nil {
		t.Fatalf("server-b releasing what it does not hold: %v", err)
	}
	if h, held, err := windowlock.Inspect(ctx, kc, a.WindowLockConfig()); err != nil || !held || h.Identity != "server-a" {
		t.Fatalf("server-b's release touched server-a's Lease: %+v %v %v", h, held, err)
	}
	if err := ka.Release(ctx, wRound, wNode); err != nil {
		t.Fatalf("server-a releases: %v", err)
	}
	if err := ka.Check(wRound, wNode); !errors.Is(err, window.ErrLeaseLost) {
		t.Fatalf("server-a still keeps the Lease after the release: %v", err)
	}
	if err := hold(kb, "gpu-2"); err != nil {
		t.Fatalf("server-b after the release: %v", err)
	}

	// Without a cluster there is nothing to hold; a cluster that cannot be
	// reached is an error, not a Lease held.
	if k, err := (&Deps{Config: a.Config}).LeaseKeeper(ctx); k != nil || err != nil {
		t.Fatalf("no cluster: %v %v", k, err)
	}
	down := server("server-c")
	down.Cluster = func(context.Context) (*kube.Clients, error) { return nil, errors.New("connection refused") }
	if _, err := down.LeaseKeeper(ctx); err == nil {
		t.Fatal("a Lease from an unreachable cluster")
	}
}
