package round

import (
	"maps"
	"slices"
)

// Clone returns a deep copy of the state.
func (s *State) Clone() *State {
	if s == nil {
		return nil
	}
	c := *s
	if s.Plan != nil {
		p := *s.Plan
		p.Order.Positions = slices.Clone(p.Order.Positions)
		p.Order.Notes = slices.Clone(p.Order.Notes)
		c.Plan = &p
	}
	if s.Nodes != nil {
		c.Nodes = make([]*NodeState, len(s.Nodes))
		for i, n := range s.Nodes {
			m := *n
			m.Steps = cloneRuns(n.Steps)
			c.Nodes[i] = &m
		}
	}
	c.RoundSteps = cloneRuns(s.RoundSteps)
	if s.Stop != nil {
		st := *s.Stop
		c.Stop = &st
	}
	c.Failures = slices.Clone(s.Failures)
	c.Decisions = slices.Clone(s.Decisions)
	c.Lessons = slices.Clone(s.Lessons)
	c.Recoveries = slices.Clone(s.Recoveries)
	c.Unproven = slices.Clone(s.Unproven)
	c.Notifications = slices.Clone(s.Notifications)
	c.Rollbacks = slices.Clone(s.Rollbacks)
	c.Releases = slices.Clone(s.Releases)
	c.Waits = slices.Clone(s.Waits)
	c.OtherActors = slices.Clone(s.OtherActors)
	if s.KuredLock != nil {
		k := *s.KuredLock
		c.KuredLock = &k
	}
	return &c
}

func cloneRuns(m map[Step]*StepRun) map[Step]*StepRun {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k, r := range out {
		if r != nil {
			c := *r
			c.Attempts = slices.Clone(r.Attempts)
			out[k] = &c
		}
	}
	return out
}

// successor is the state rec is applied to by an append: a copy of s that
// shares with s everything rec's Apply cannot change. The nodes rec can
// change (its own and the stopped step's) and the round steps are copied;
// the other nodes are shared; the append-only lists are shared clipped,
// so an append to the copy's list moves it and never writes into s's.
// A session opening (it marks every in-flight step) and a plan (it
// rebuilds the nodes) copy the whole state. s is never changed, so the
// states an append made before stay as they were (the observer keeps
// them); a copy of the whole round's state per record made a window's
// cost grow with the round.
func (s *State) successor(rec Record) *State {
	if rec.Kind == KindSessionOpened || rec.Kind == KindPlan {
		return s.Clone()
	}
	c := *s
	if s.Plan != nil {
		p := *s.Plan
		c.Plan = &p // applyPlan alone replaces it; Positions stay shared, never written
	}
	c.Nodes = slices.Clone(s.Nodes)
	for i, n := range c.Nodes {
		if n.Node == rec.Node || (s.Stop != nil && n.Node == s.Stop.Node) {
			m := *n
			m.Steps = cloneRuns(n.Steps)
			c.Nodes[i] = &m
		}
	}
	c.RoundSteps = cloneRuns(s.RoundSteps)
	if s.Stop != nil {
		st := *s.Stop
		c.Stop = &st
	}
	c.Failures = slices.Clip(s.Failures)
	c.Decisions = slices.Clip(s.Decisions)
	c.Lessons = slices.Clip(s.Lessons)
	c.Recoveries = slices.Clip(s.Recoveries)
	c.Unproven = slices.Clip(s.Unproven)
	c.Notifications = slices.Clip(s.Notifications)
	c.Releases = slices.Clip(s.Releases)
	// A rollback's end changes its entry in place.
	c.Rollbacks = slices.Clone(s.Rollbacks)
	// Waits are replaced, never written in place (applyOtherActors);
	// KuredLock is replaced whole.
	c.Waits = slices.Clip(s.Waits)
	c.OtherActors = slices.Clip(s.OtherActors)
	return &c
}
