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
	c.Notifications = slices.Clone(s.Notifications)
	c.Rollbacks = slices.Clone(s.Rollbacks)
	c.Releases = slices.Clone(s.Releases)
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
