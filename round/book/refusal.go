package book

import "strings"

// Refusal is a book's answer that nothing was done and why: a round id
// that is not one, a round with no journal, a journal another process
// holds, one that does not reproduce its anchor, a plan.md that is not
// the plan's render. The tools render it as a refused call.
type Refusal struct {
	Reasons []string
	// Next is what to do about it, in words.
	Next string
	// NextTool and NextArgs, when NextTool is set, are Next as a tool
	// call (argument name, value pairs).
	NextTool string
	NextArgs []any
}

func (r *Refusal) Error() string { return strings.Join(r.Reasons, "; ") }

func refuse(next string, reasons ...string) error { return &Refusal{Reasons: reasons, Next: next} }
