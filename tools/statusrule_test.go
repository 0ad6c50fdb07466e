package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// A handler that answers ok with a blocker among its reasons is turned
// into failed by the framework, the one place the rule is applied.
func TestFrameworkAppliesTheStatusRule(t *testing.T) {
	tl := New[NodeIn, InspectOut](Spec{Name: "lying_check", Title: "x", Kind: ReadOnly},
		func(ctx context.Context, d *Deps, in NodeIn, p Progress) (InspectOut, error) {
			return InspectOut{Result: Result{Status: StatusOK, Reasons: []string{Blocker("the upgrade would remove oldlib")}}}, nil
		})
	c := config.DefaultConfig()
	_, res := tl.CallJSON(context.Background(), &Deps{Config: &c}, json.RawMessage(`{"node":"n-1"}`), func(float64, float64, string) {})
	if res.Status != StatusFailed {
		t.Fatalf("status %s, want failed: %+v", res.Status, res)
	}
	if err := statusRuleHolds(res); err != nil {
		t.Fatal(err)
	}
}

// Every tool's result, called with no cluster, no round and no hosts (the
// host-only CLI's first call), keeps the rule; the fleet rig checks every
// result of every fleet test the same way (fleet.call).
func TestEveryToolKeepsTheStatusRule(t *testing.T) {
	c := config.DefaultConfig()
	d := &Deps{Config: &c}
	for _, tl := range Builtin().All() {
		for _, args := range []string{`{}`, `{"node":"n-1"}`} {
			_, res := tl.CallJSON(context.Background(), d, json.RawMessage(args), func(float64, float64, string) {})
			if err := statusRuleHolds(res); err != nil {
				t.Errorf("%s %s: %v", tl.Spec().Name, args, err)
			}
		}
	}
}

// A host step's error is a failure whose next step is its cause's
// (steps.CauseOf, steps.NextStepFor), with the action and node named.
func TestHostErrorNamesTheCausesNextStep(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"host key changed", &host.HostKeyError{Node: "solo-1", Host: "10.0.0.5"}},
		{"unreachable", errors.New("dial tcp 10.0.0.5:22: connect: connection refused")},
		{"a script's refusal", &steps.StepError{Step: "simulate", Node: "solo-1", Status: steps.StatusRefused, Reason: "the upgrade would remove 1 package(s): oldlib"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := service.HostError("solo-1", "simulate upgrade", c.err)
			var f *Failure
			if !errors.As(err, &f) {
				t.Fatalf("%T %v, want a failure", err, err)
			}
			if want := steps.NextStepFor(steps.CauseOf(c.err), "solo-1"); f.NextAction != want {
				t.Errorf("next %q, want %q", f.NextAction, want)
			}
			if !strings.Contains(f.Error(), "simulate upgrade on solo-1") {
				t.Errorf("reasons %q do not name the action and node", f.Reasons)
			}
		})
	}
}

// statusRuleHolds reports a result that breaks the status rule (nil when
// it keeps it), for the tests that run every tool's result through it.
func statusRuleHolds(r *Result) error {
	if r == nil {
		return fmt.Errorf("no result")
	}
	if r.Status == StatusOK {
		for _, reason := range r.Reasons {
			if IsBlocker(reason) {
				return fmt.Errorf("status ok with a blocker among its reasons: %q", reason)
			}
		}
	}
	return nil
}
