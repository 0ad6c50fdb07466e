package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round"
)

// Claims is what the round takes from the others while it works and gives
// back (kube/actors' Claims): kured's reboot lock for the whole round, and
// the GPU Operator's per-node driver-upgrade skip for a GPU node's window.
// Each is taken only where free and given back only where it is the
// round's.
type Claims interface {
	TakeKuredLock(ctx context.Context) (actors.KuredHold, error)
	ReleaseKuredLock(ctx context.Context) (bool, error)
	SkipDriverUpgrade(ctx context.Context, node string) (actors.SkipState, error)
	UnskipDriverUpgrade(ctx context.Context, node string) (bool, error)
}

var _ Claims = (*actors.Claims)(nil)

// takeKuredLock takes kured's lock for the round before node's cordon,
// once nobody else holds the node: nil once the round holds it (or kured
// is not installed, or the intent leaves it); *Waiting while kured holds
// it (it took it between the look and the take), within bound; a
// journaled stop when the cluster cannot say. Taking it is journaled, and
// so is finding it held by the round without a record (a process that
// died between the two): any later process knows to give it back.
func (w *Window) takeKuredLock(ctx context.Context, node string, bound time.Duration) error {
	if w.Claims == nil {
		return nil
	}
	h, err := w.Claims.TakeKuredLock(ctx)
	if err != nil {
		return w.Rec.StopWith(round.StepDrain, node, othersNext,
			fmt.Sprintf("rule %s: could not take kured's reboot lock for the round before the cordon of %s: %v", round.RuleOtherActor, node, err),
			"nothing was cordoned or evicted")
	}
	if len(h.Other) > 0 {
		hs := make([]actors.Holder, 0, len(h.Other))
		for _, l := range h.Other {
			hs = append(hs, actors.Holder{Actor: actors.Kured, Who: l.NodeID, Since: l.Created, Verdict: actors.Wait,
				What: "kured took its reboot lock for node " + l.NodeID + ": the round takes it once kured lets go"})
		}
		switch v, until, why := DecideOthers(hs, w.now(), bound); v {
		case OthersWait:
			return &Waiting{Node: node, Holders: hs, Until: until}
		default:
			reasons := append([]string{fmt.Sprintf("rule %s: %s: %s", round.RuleOtherActor, node, why)}, holderLines(hs)...)
			return w.Rec.StopWith(round.StepDrain, node, othersNext, append(reasons, "nothing was cordoned or evicted")...)
		}
	}
	if !h.Held {
		return nil // not installed, or the intent leaves kured's lock alone
	}
	if k := w.Rec.J.Shared().KuredLock; !h.Taken && k != nil && k.Held {
		return nil // held, and the journal says so
	}
	detail := "kured's reboot lock taken for the round before the cordon of " + node
	if !h.Taken {
		detail = "kured's reboot lock found held by the round before the cordon of " + node + " (taken before this record)"
	}
	if _, err := w.Rec.J.OtherActors(round.Record{Event: round.EventKuredLockTaken, Node: node, Detail: detail}); err != nil {
		err = fmt.Errorf("record that the round took kured's lock: %w", err)
		if !h.Taken {
			return err // it stays held; a later call records it
		}
		if _, rerr := w.Claims.ReleaseKuredLock(ctx); rerr != nil {
			return errors.Join(err, fmt.Errorf("give kured's lock back after the record failed (a person removes the round's holder from it): %w", rerr))
		}
		return err
	}
	return nil
}

// ReleaseKuredLock gives kured's lock back when the round ends (closed or
// aborted): journaled when the round held it; a release that fails is
// journaled as such and answered as an error that stops the caller, so
// kured is never held back unseen. Nothing to do answers no reason.
func (w *Window) ReleaseKuredLock(ctx context.Context) ([]string, error) {
	if w.Claims == nil {
		return nil, nil
	}
	j := w.Rec.J
	held := w.Rec.J.Shared().KuredLock != nil && w.Rec.J.Shared().KuredLock.Held
	gone, err := w.Claims.ReleaseKuredLock(ctx)
	if err != nil {
		why := "kured's reboot lock was not given back: " + oneLine(err.Error())
		if _, jerr := j.OtherActors(round.Record{Event: round.EventKuredLockReleaseFailed, Detail: why}); jerr != nil {
			return nil, errors.Join(err, fmt.Errorf("record that kured's lock was not given back: %w", jerr))
		}
		return []string{why}, &Stopped{Reasons: []string{why, "kured reboots no node until the round's holder (mcp-patch:…) is removed from its lock annotation"},
			Next: "Call again once the API server answers; or a person removes the round's holder from kured's lock annotation on its DaemonSet."}
	}
	if !gone && !held {
		return nil, nil
	}
	detail := "kured's reboot lock given back"
	if !gone {
		detail = "kured's reboot lock no longer held by the round (removed or taken over before the release)"
	}
	if _, err := j.OtherActors(round.Record{Event: round.EventKuredLockReleased, Detail: detail}); err != nil {
		return []string{detail}, fmt.Errorf("record that kured's lock was given back: %w", err)
	}
	return []string{detail}, nil
}

// skipDriverUpgrade keeps the GPU Operator's driver upgrade off a GPU
// node during its window, before the cordon: the skip label set where
// absent and journaled as the round's; a label someone else set is left.
// A failure is an error the drain stops on, before the cordon.
func (w *Window) skipDriverUpgrade(ctx context.Context, node string) error {
	if w.Claims == nil {
		return nil
	}
	if n := w.Rec.J.Shared().Node(node); n == nil || !n.GPU {
		return nil
	}
	s, err := w.Claims.SkipDriverUpgrade(ctx, node)
	if err != nil {
		return fmt.Errorf("keep the GPU Operator's driver upgrade off %s (%s): %w", node, actors.LabelGPUDriverUpgradeSkip, err)
	}
	if s != actors.SkipAdded {
		return nil
	}
	if _, err := w.Rec.J.OtherActors(round.Record{Event: round.EventDriverUpgradeSkipSet, Node: node,
		Detail: actors.LabelGPUDriverUpgradeSkip + "=true set on " + node + " for its window (recorded on the node as the round's)"}); err != nil {
		err = fmt.Errorf("record the driver-upgrade skip on %s: %w", node, err)
		if _, uerr := w.Claims.UnskipDriverUpgrade(ctx, node); uerr != nil {
			return errors.Join(err, fmt.Errorf("take the skip label back: %w", uerr))
		}
		return err
	}
	return nil
}

// unskipDriverUpgrade is the window release's part: the reasons say what
// happened to node's skip label.
func (w *Window) unskipDriverUpgrade(ctx context.Context, node string) []string {
	if w.Claims == nil {
		return nil
	}
	gone, err := w.Claims.UnskipDriverUpgrade(ctx, node)
	switch {
	case err != nil:
		return []string{fmt.Sprintf("the driver-upgrade skip label %s of %s was not removed (a person removes it and the annotation %s): %s",
			actors.LabelGPUDriverUpgradeSkip, node, actors.AnnotationDriverUpgradeSkipBy, oneLine(err.Error()))}
	case gone:
		return []string{"driver-upgrade skip label " + actors.LabelGPUDriverUpgradeSkip + " removed from " + node}
	}
	return nil
}

// noteWait journals a wait for another party: when it begins, and again
// only when the set of holders changes (by actor and who).
func (w *Window) noteWait(wt *Waiting) error {
	hs := journalHolders(wt.Holders)
	prev := w.Rec.J.Shared().Wait(wt.Node)
	ev := round.EventWaitBegan
	if prev != nil {
		if sameHolders(prev.Holders, hs) {
			return nil
		}
		ev = round.EventWaitChanged
	}
	if _, err := w.Rec.J.OtherActors(round.Record{Event: ev, Node: wt.Node, Holders: hs, Until: wt.Until}); err != nil {
		return fmt.Errorf("record the wait of %s for another party: %w", wt.Node, err)
	}
	return nil
}

// endWait journals the end of node's wait, if one is recorded.
func (w *Window) endWait(node, how string) error {
	if w.Rec.J.Shared().Wait(node) == nil {
		return nil
	}
	if _, err := w.Rec.J.OtherActors(round.Record{Event: round.EventWaitEnded, Node: node, Detail: how}); err != nil {
		return fmt.Errorf("record the end of the wait of %s: %w", node, err)
	}
	return nil
}

// othersClear is the look before a cordon, with the wait journaled: nil
// when nobody else holds node (and, with request, the maintenance
// operator made the round's request Ready, and kured's lock is the
// round's); *Waiting while the round waits; a journaled stop otherwise.
func (w *Window) othersClear(ctx context.Context, node string, bound time.Duration, take bool) error {
	err := w.othersLetGo(ctx, node, bound)
	if err == nil && take {
		err = w.requestMaintenance(ctx, node, bound)
	}
	if err == nil && take {
		err = w.takeKuredLock(ctx, node, bound)
	}
	var wt *Waiting
	switch {
	case errors.As(err, &wt):
		if nerr := w.noteWait(wt); nerr != nil {
			return errors.Join(err, nerr)
		}
		return err
	case err != nil:
		var stopped *Stopped
		if errors.As(err, &stopped) {
			if eerr := w.endWait(node, "the round stopped for a person"); eerr != nil {
				return errors.Join(err, eerr)
			}
		}
		return err
	case take:
		return w.endWait(node, "nobody else holds the node: the cordon goes ahead")
	}
	return w.endWait(node, "nobody else holds the node: the drain's plan goes to a person to sign")
}

func journalHolders(hs []actors.Holder) []round.Holder {
	out := make([]round.Holder, 0, len(hs))
	for _, h := range hs {
		out = append(out, round.Holder{Actor: string(h.Actor), Who: h.Who, Since: h.Since, What: h.What, Verdict: string(h.Verdict)})
	}
	return out
}

// sameHolders compares two holder sets by actor and who.
func sameHolders(a, b []round.Holder) bool {
	key := func(hs []round.Holder) []string {
		out := make([]string, 0, len(hs))
		for _, h := range hs {
			out = append(out, h.Actor+"\x00"+h.Who)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}
