package window_test

import (
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
)

type podsByNode map[string][]round.Position

func (podsByNode) nodePods() map[string][]drain.PodRef {
	return map[string][]drain.PodRef{node: {{Namespace: "ml", Name: "trainer-0"}}}
}

func stepsInspect() steps.InspectInput { return steps.InspectInput{TargetKernel: target} }

func stepsTB(newEntry, oldEntry string) steps.TrialBootInput {
	return steps.TrialBootInput{Round: "r", NewEntry: newEntry, OldEntry: oldEntry, PanicSeconds: 10}
}
