package tools

import "github.com/mcp-patch/mcp-patch/round"

// testPlan is a plan of a test step: a node and a digest.
type testPlan struct {
	Node string   `json:"node"`
	D    string   `json:"digest"`
	Sum  []string `json:"summary"`
}

func (p testPlan) Step() round.Step  { return round.StepDrain }
func (p testPlan) Target() string    { return p.Node }
func (p testPlan) Digest() string    { return p.D }
func (p testPlan) Summary() []string { return p.Sum }
