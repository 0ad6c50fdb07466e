// Package answer is the vocabulary every layer answers a call with, below
// the MCP surface: a refusal (nothing was done), a failure (a step ran and
// failed), a pending wait (nothing done yet, look again), the next call to make and the blocker reasons the status rule
// reads. The round's layers return these errors; tools renders them as a
// tool result and adds nothing of its own.
package answer

import "strings"

// Call is a tool call the agent can make next: the tool's name and the
// arguments to pass it, exactly as tools/call takes them (an approval, when
// one is needed, is added by the caller once a person has signed).
type Call struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
}

// CallTo builds a Call from the tool name and argument name/value pairs;
// pairs whose value is an empty string are left out.
func CallTo(tool string, kv ...any) *Call {
	c := &Call{Tool: tool, Arguments: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		if s, ok := kv[i+1].(string); ok && s == "" {
			continue
		}
		c.Arguments[k] = kv[i+1]
	}
	return c
}

// Refusal is an error that refuses: nothing was done.
type Refusal struct {
	Reasons    []string
	NextAction string
	// NextCall is NextAction as a call, where it is one.
	NextCall *Call
}

func (r *Refusal) Error() string { return strings.Join(r.Reasons, "; ") }

// Refuse builds a Refusal.
func Refuse(next string, reasons ...string) error {
	return &Refusal{Reasons: reasons, NextAction: next}
}

// RefuseWith builds a Refusal whose next step is a call.
func RefuseWith(call *Call, next string, reasons ...string) error {
	return &Refusal{Reasons: reasons, NextAction: next, NextCall: call}
}

// Failure is an error returned when a step ran and failed.
type Failure struct {
	Reasons    []string
	NextAction string
	// NextCall is NextAction as a call, where it is one.
	NextCall *Call
}

func (f *Failure) Error() string { return strings.Join(f.Reasons, "; ") }

// Fail builds a Failure.
func Fail(next string, reasons ...string) error { return &Failure{Reasons: reasons, NextAction: next} }

// Pending is an error that says the call did nothing yet because it waits
// on something outside the round that lets go by itself (another party
// holding the node): the same call later looks again. It is no failure.
type Pending struct {
	Reasons    []string
	NextAction string
	NextCall   *Call
}

func (p *Pending) Error() string { return strings.Join(p.Reasons, "; ") }

// BlockerPrefix starts a reason that is a blocker: something that stops
// the round, or this step on this host, as things stand (a removal, an
// interrupted dpkg, a short /boot, an unreachable host ...). A person and
// an agent read it in the reasons; the status rule reads it too.
const BlockerPrefix = "blocker: "

// Blocker words a cause as a blocker reason.
func Blocker(cause string) string { return BlockerPrefix + cause }

// IsBlocker says whether a reason is a blocker.
func IsBlocker(reason string) bool { return strings.HasPrefix(reason, BlockerPrefix) }
