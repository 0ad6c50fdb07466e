package window

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/round"
)

// Silencer ends the Alertmanager silences a window put on its node.
type Silencer interface {
	// Unsilence expires them and answers the ids it expired (none: the
	// window put none there).
	Unsilence(ctx context.Context, round, node string) ([]string, error)
}

// WindowEnded names the node whose window rec ended: rec closed it (a green
// gate after the promote, or a person's acceptance of a red gate), or rec
// aborted the round while the window was open. "" when rec ended no
// window. st is the state rec made. Pure.
func WindowEnded(rec round.Record, st *round.State) string {
	if st == nil || rec.Seq == 0 {
		return ""
	}
	if n := st.Node(rec.Node); rec.Node != "" && n != nil && n.Window == round.WindowClosed && n.ClosedSeq == rec.Seq {
		return rec.Node
	}
	if rec.Kind == round.KindDecision && rec.Decision == round.DecisionAbort && st.Aborted && st.Current != "" {
		return st.Current
	}
	return ""
}

// Release lets go of what node's window held once it ended (WindowEnded): the
// window Lease, so that the next node's drain is admitted at once, the
// node's Alertmanager silence, this server's NodeMaintenance request and
// the GPU Operator's driver-upgrade skip label where the round set it. Each is tried whatever the other did; what
// happened is journaled in one record (round.KindReleased) and answered as
// reasons. A failure is a reason, not an error: the window has ended and
// stays so (the Lease is no longer renewed and lapses by itself; a silence
// ends at its own time). The error is the journal's only.
func (w *Window) Release(ctx context.Context, node string) ([]string, error) {
	var reasons []string
	if k := w.keeper(); k != nil {
		if err := k.Release(ctx, w.Round, node); err != nil {
			reasons = append(reasons, "the window Lease was not released (it is no longer renewed and lapses by itself): "+oneLine(err.Error()))
		} else {
			reasons = append(reasons, "window Lease released")
		}
	}
	if w.Silencer != nil {
		ids, err := w.Silencer.Unsilence(ctx, w.Round, node)
		if len(ids) > 0 {
			reasons = append(reasons, fmt.Sprintf("Alertmanager silence of %s expired (%s)", node, strings.Join(ids, ", ")))
		}
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("the Alertmanager silence of %s was not removed (it ends at its own time): %s", node, oneLine(err.Error())))
		}
	}
	if w.Requestor != nil {
		gone, err := w.Requestor.Release(ctx, node)
		switch {
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("the NodeMaintenance request for %s was not removed (a person deletes it): %s", node, oneLine(err.Error())))
		case gone:
			reasons = append(reasons, "NodeMaintenance request for "+node+" removed")
		}
	}
	reasons = append(reasons, w.unskipDriverUpgrade(ctx, node)...)
	if len(reasons) == 0 {
		return nil, nil
	}
	if _, err := w.Rec.J.Released(node, strings.Join(reasons, "; ")); err != nil {
		return reasons, fmt.Errorf("record what the window of %s let go of: %w", node, err)
	}
	return reasons, nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}
