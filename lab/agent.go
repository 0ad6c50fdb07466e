package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Agent runs a round the way an agent that knows nothing of rounds would:
// it asks round_status what comes next, makes that call, hands approval
// requests to a person (here: Sign), calls again while a step answers
// in_progress, and stops when the round needs a person's decision.
type Agent struct {
	Session Caller
	// Sign is the person: it signs an approval request or statement.
	Sign func(request string) (string, error)
	// Wait is asked to let time pass until t (the soak); the lab moves its
	// clock. Nil: the agent stops there.
	Wait func(t time.Time)
	// BeforeClose runs once before close_round (to record lessons).
	BeforeClose func(ctx context.Context) error
	// BeforeCall, when set, runs before each call the agent makes from
	// round_status (the demo runs the canary's fallback drill from it).
	BeforeCall func(ctx context.Context, tool, node string) error
	// AfterCall, when set, runs after each tool call the agent makes (a
	// test injects faults from it).
	AfterCall func(ctx context.Context, tool, node, status string)
	// Called, when set, runs after every tool call the agent makes,
	// round_status and a call answered approval_required included.
	Called func(ctx context.Context, tool, status string)
	// Say receives one line per call.
	Say func(string)
	// Poll is the pause before calling a step in progress again. Default 200ms.
	Poll time.Duration
	// PollNode is the pause for the steps of the nodes it names, where it
	// differs from Poll (a real VM: each call runs a host step on its one
	// emulated CPU, which the step in progress needs).
	PollNode map[string]time.Duration
	// MaxCalls bounds the whole run. Default 2000.
	MaxCalls int
}

// Caller makes a tool call as an MCP client does (*mcp.ClientSession).
type Caller interface {
	CallTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error)
}

var _ Caller = (*mcp.ClientSession)(nil)

// Outcome is how the run ended.
type Outcome struct {
	Closed bool `json:"closed"`
	// Stopped is set when the round waits for a person's decision.
	Stopped   *StopInfo `json:"stopped,omitempty"`
	Calls     int       `json:"calls"`
	Approvals int       `json:"approvals"`
	// Steps is each call in order: "tool node status".
	Steps []string `json:"steps"`
	// Active is the time spent inside tool calls that did work (not the
	// ones that answered in_progress while something waited), by node.
	Active map[string]time.Duration `json:"active_ns"`
	// ActiveByTool is the same time by tool, over the whole round.
	ActiveByTool map[string]time.Duration `json:"active_by_tool_ns"`
}

// StopInfo says where the round stopped and why.
type StopInfo struct {
	Node   string `json:"node"`
	Step   string `json:"step"`
	Reason string `json:"reason"`
}

// result is the part of every tool's output the agent reads.
type result struct {
	Status     string `json:"status"`
	Reasons    []string
	NextAction string `json:"next_action"`
	Approval   *struct {
		Request string `json:"request"`
	} `json:"approval"`
	NextCall *struct {
		Tool      string         `json:"tool"`
		Arguments map[string]any `json:"arguments"`
	} `json:"next_call"`
	RawRound json.RawMessage `json:"round"`
	Round    *struct {
		Phase string `json:"phase"`
		Stop  *struct {
			Node   string `json:"node"`
			Step   string `json:"step"`
			Reason string `json:"reason"`
		} `json:"stop"`
		Next *struct {
			Decision  string    `json:"decision"`
			WaitUntil time.Time `json:"wait_until"`
		} `json:"next"`
	} `json:"-"`
}

func (a *Agent) call(ctx context.Context, out *Outcome, tool string, args map[string]any) (result, error) {
	out.Calls++
	res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return result{}, fmt.Errorf("%s: protocol error: %w", tool, err)
	}
	var r result
	if len(res.Content) != 1 {
		return result{}, fmt.Errorf("%s: %d content blocks", tool, len(res.Content))
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &r); err != nil {
		return result{}, fmt.Errorf("%s: output is not JSON: %w", tool, err)
	}
	if tool == "round_status" && len(r.RawRound) > 0 && r.RawRound[0] == '{' {
		if err := json.Unmarshal(r.RawRound, &r.Round); err != nil {
			return result{}, fmt.Errorf("%s: round: %w", tool, err)
		}
	}
	if res.IsError != (r.Status == "refused" || r.Status == "failed") {
		return r, fmt.Errorf("%s: isError=%v with status %s", tool, res.IsError, r.Status)
	}
	if a.Called != nil {
		a.Called(ctx, tool, r.Status)
	}
	return r, nil
}

// Run drives round roundID until it closes, stops for a person, or the
// call budget runs out.
func (a *Agent) Run(ctx context.Context, roundID string) (Outcome, error) {
	if a.Poll == 0 {
		a.Poll = 200 * time.Millisecond
	}
	if a.MaxCalls == 0 {
		a.MaxCalls = 2000
	}
	say := a.Say
	if say == nil {
		say = func(string) {}
	}
	var out Outcome
	closedOnce := false
	lastActive := ""
	lastKey, repeats := "", 0
	for out.Calls < a.MaxCalls {
		st, err := a.call(ctx, &out, "round_status", map[string]any{})
		if err != nil {
			return out, err
		}
		var next struct {
			tool, node string
			args       map[string]any
		}
		switch {
		case st.Status == "refused" && st.Round == nil:
			next.tool, next.args = "plan_round", map[string]any{"round": roundID} // no round open yet
		case st.Round != nil && st.Round.Phase == "closed":
			out.Closed = true
			return out, nil
		case st.NextCall != nil:
			next.tool, next.args = st.NextCall.Tool, st.NextCall.Arguments
			next.node, _ = next.args["node"].(string)
		case st.Round != nil && st.Round.Next != nil && !st.Round.Next.WaitUntil.IsZero():
			if a.Wait == nil {
				return out, fmt.Errorf("the round waits until %s and the agent cannot wait", st.Round.Next.WaitUntil)
			}
			say(fmt.Sprintf("wait until %s (%s)", st.Round.Next.WaitUntil.UTC().Format(time.RFC3339), st.NextAction))
			a.Wait(st.Round.Next.WaitUntil.Add(time.Second))
			continue
		case st.Round != nil && st.Round.Stop != nil:
			out.Stopped = &StopInfo{Node: st.Round.Stop.Node, Step: st.Round.Stop.Step, Reason: st.Round.Stop.Reason}
			say("stopped: " + st.NextAction)
			return out, nil
		default:
			return out, fmt.Errorf("round_status names no next call: %s", st.NextAction)
		}
		if next.tool == "close_round" && !closedOnce && a.BeforeClose != nil {
			closedOnce = true
			if err := a.BeforeClose(ctx); err != nil {
				return out, err
			}
		}
		key := next.tool + " " + next.node
		if key == lastKey {
			repeats++
		} else {
			lastKey, repeats = key, 0
		}
		if repeats == 3 {
			say("repeating " + key + ": round_status said: " + st.NextAction)
		}
		if repeats > 300 {
			return out, fmt.Errorf("%s is not making progress", key)
		}
		if a.BeforeCall != nil {
			if err := a.BeforeCall(ctx, next.tool, next.node); err != nil {
				return out, err
			}
		}
		args := map[string]any{}
		for k, v := range next.args {
			args[k] = v
		}
		callStart := time.Now()
		r, err := a.call(ctx, &out, next.tool, args)
		if err != nil {
			return out, err
		}
		if r.Status == "approval_required" && r.Approval != nil {
			approval, err := a.Sign(r.Approval.Request)
			if err != nil {
				return out, fmt.Errorf("sign %s: %w", next.tool, err)
			}
			out.Approvals++
			args["approval"] = approval
			if r, err = a.call(ctx, &out, next.tool, args); err != nil {
				return out, err
			}
			delete(args, "approval")
		}
		out.Steps = append(out.Steps, fmt.Sprintf("%s %s %s", next.tool, next.node, r.Status))
		if r.Status != "in_progress" || out.Steps[len(out.Steps)-1] != lastActive {
			if out.Active == nil {
				out.Active = map[string]time.Duration{}
			}
			out.Active[next.node] += time.Since(callStart)
			if out.ActiveByTool == nil {
				out.ActiveByTool = map[string]time.Duration{}
			}
			out.ActiveByTool[next.tool] += time.Since(callStart)
		}
		lastActive = out.Steps[len(out.Steps)-1]
		if a.AfterCall != nil {
			a.AfterCall(ctx, next.tool, next.node, r.Status)
		}
		say(fmt.Sprintf("%-16s %-14s %-12s %s", next.tool, next.node, r.Status, first(r.Reasons)))
		if next.tool == "close_round" && r.Status == "ok" {
			out.Closed = true
			return out, nil
		}
		if r.Status == "in_progress" {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(a.pause(next.node)):
			}
		}
		if r.Status == "refused" && r.Round == nil && repeats > 3 {
			return out, errors.New(next.tool + " keeps being refused: " + first(r.Reasons))
		}
	}
	return out, fmt.Errorf("gave up after %d calls", out.Calls)
}

// Follow calls tool until it no longer answers in_progress, signing an
// approval request once when asked. It returns the last result's status
// and reasons.
func (a *Agent) Follow(ctx context.Context, tool string, args map[string]any) (string, []string, error) {
	var out Outcome
	for i := 0; i < 1000; i++ {
		r, err := a.call(ctx, &out, tool, args)
		if err != nil {
			return "", nil, err
		}
		if r.Status == "approval_required" && r.Approval != nil {
			approval, err := a.Sign(r.Approval.Request)
			if err != nil {
				return "", nil, err
			}
			withApproval := map[string]any{"approval": approval}
			for k, v := range args {
				withApproval[k] = v
			}
			if r, err = a.call(ctx, &out, tool, withApproval); err != nil {
				return "", nil, err
			}
		}
		if r.Status != "in_progress" {
			return r.Status, r.Reasons, nil
		}
		node, _ := args["node"].(string)
		select {
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case <-time.After(a.pause(node)):
		}
	}
	return "", nil, fmt.Errorf("%s stayed in progress", tool)
}

// pause is how long to wait before calling a step of node in progress
// again.
func (a *Agent) pause(node string) time.Duration {
	if d, ok := a.PollNode[node]; ok {
		return d
	}
	return a.Poll
}

func first(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}
