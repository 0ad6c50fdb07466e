package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// The intent package's errors as the agent reads them: bad input and a
// busy or dirty repository are refusals that say nothing changed (or ran),
// with what to do; anything else stays an error with the action named.
func TestIntentErrorsAsAnswers(t *testing.T) {
	for _, c := range []struct {
		err     error
		refused bool
		next    string
		tail    string
	}{
		{intent.ErrInvalid, true, "Fix the input", "nothing was changed"},
		{fmt.Errorf("component x: %w", intent.ErrUnknownComponent), true, "Fix the input", "nothing was changed"},
		{intent.ErrUnknownDocument, true, "Fix the input", "nothing was changed"},
		{intent.ErrUnknownProperty, true, "Fix the input", "nothing was changed"},
		{intent.ErrMalformed, true, "Fix the input", "nothing was changed"},
		{intent.ErrDirty, true, "Ask a person to commit or discard", "nothing was changed"},
		{intent.ErrProtectedBranch, true, "Configure a working branch", "nothing was changed"},
		{intent.ErrVerifyDisabled, true, "Run verify.sh on a server that is not read-only", "nothing was run"},
		{intent.ErrBusy, true, "Call again in a few seconds.", "nothing was changed"},
		{intent.ErrNotRepo, true, "Point --intent-repo", ""},
		{errors.New("disk full"), false, "", ""},
	} {
		got := service.IntentError("record lesson", c.err)
		var ref *Refusal
		if errors.As(got, &ref) != c.refused {
			t.Errorf("%v: %T %v, refusal %v", c.err, got, got, c.refused)
			continue
		}
		if !c.refused {
			if !errors.Is(got, c.err) || !strings.HasPrefix(got.Error(), "record lesson: ") {
				t.Errorf("%v became %v", c.err, got)
			}
			continue
		}
		if !strings.HasPrefix(ref.NextAction, c.next) || !strings.HasPrefix(ref.Reasons[0], "record lesson: ") {
			t.Errorf("%v: next %q reasons %q", c.err, ref.NextAction, ref.Reasons)
		}
		if c.tail != "" && ref.Reasons[len(ref.Reasons)-1] != c.tail {
			t.Errorf("%v: reasons %q, want them to end with %q", c.err, ref.Reasons, c.tail)
		}
	}
}

// A check that cannot reach its host: the read-only inspect_node tells
// the agent and writes nothing; record_inspection records the check as
// failed, which stops the round, and tells the agent a person decides.
func TestInspectOfAnUnreachableHost(t *testing.T) {
	f := newFleet(t)
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	f.host("gpu-2").Unreachable = true
	journal := filepath.Join(f.repo, "rounds", fRound, round.JournalFile)
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}

	_, res := f.call("inspect_node", map[string]any{"node": "gpu-2"})
	if res.Status != StatusFailed || !strings.Contains(reasons(res), "inspect on gpu-2") || strings.Contains(res.NextAction, "Stop:") {
		t.Fatalf("inspect_node of an unreachable host: %s %v next %q", res.Status, res.Reasons, res.NextAction)
	}
	if after, err := os.ReadFile(journal); err != nil || !bytes.Equal(before, after) || f.state().Stop != nil {
		t.Fatalf("the read-only inspect_node wrote the journal (%v): stop %+v", err, f.state().Stop)
	}

	_, res = f.call("record_inspection", map[string]any{"node": "gpu-2"})
	if res.Status != StatusFailed || !strings.HasPrefix(res.NextAction, "Stop: the check could not run.") || !strings.Contains(res.NextAction, "A person signs resume") {
		t.Fatalf("record_inspection of an unreachable host: %s %v next %q", res.Status, res.Reasons, res.NextAction)
	}
	st := f.state()
	if st.Stop == nil || st.Stop.Node != "gpu-2" || st.Stop.Step != round.StepInspect {
		t.Fatalf("the failed check did not stop the round at gpu-2's inspection: %+v", st.Stop)
	}
	if r := st.Node("gpu-2").Steps[round.StepInspect]; r == nil || r.State != round.Failed {
		t.Fatalf("gpu-2's inspection: %+v", r)
	}
}

// A rollback's uncordon (drain.UncordonIfOurs) with the cluster down
// leaves the node cordoned and says why.
func TestUncordonWithTheClusterDown(t *testing.T) {
	down := &Deps{Identity: "server-a", Cluster: func(context.Context) (*kube.Clients, error) { return nil, errors.New("connection refused") }}
	if done, words := down.UncordonIfOurs(context.Background(), wRound, "ours"); done || !strings.HasPrefix(words, "left cordoned: ") || !strings.HasSuffix(words, "connection refused") {
		t.Errorf("cluster down: %v %q", done, words)
	}
}
