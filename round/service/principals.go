package service

import (
	"strings"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// PrincipalRule is whom the intent lets sign one kind of destructive step
// (os-layer settings.yaml, approvals.principals): one of Names, by their
// allowed_signers principal. No names: anyone allowed_signers admits.
type PrincipalRule struct {
	Names []string
	// Kind is the settings' name of the kind (intent.StepsControlPlane …).
	Kind string
}

// Words say the rule as the refusal and the request show it.
func (r PrincipalRule) Words() string {
	what := map[string]string{intent.StepsControlPlane: "control-plane steps", intent.StepsGPUServers: "GPU-server steps",
		intent.StepsOtherNodes: "steps on other nodes", intent.StepsFleet: "fleet-wide steps"}[r.Kind]
	return "the intent's approvals.principals." + r.Kind + " lets only " + strings.Join(r.Names, ", ") + " sign " + what
}

// stepKind is the kind of step on target, by the node's role in round j.
func stepKind(j *round.Journal, target string) (string, bool) {
	if target == window.FleetTarget {
		return intent.StepsFleet, true
	}
	n := j.Shared().Node(target)
	if n == nil {
		return "", false
	}
	switch n.Role {
	case round.RoleControlPlane:
		return intent.StepsControlPlane, true
	case round.RoleGPU:
		return intent.StepsGPUServers, true
	}
	return intent.StepsOtherNodes, true
}

// StepPrincipals is the rule for a destructive step on target (a node, or
// window.FleetTarget) in round roundID. A server without an intent
// repository or a round book has no rule. Settings it cannot read, and a
// node the round does not list while the intent names principals, are
// refusals: who may sign is never guessed.
func (d *Service) StepPrincipals(roundID, target string) (PrincipalRule, error) {
	if d.Intent == nil || d.Book == nil {
		return PrincipalRule{}, nil
	}
	r, err := d.IntentRepo(roundID)
	if err != nil {
		return PrincipalRule{}, err
	}
	st, err := r.RoundSettings()
	if err != nil {
		return PrincipalRule{}, answer.Refuse("Fix the intent's settings.yaml as the error says, then call again.",
			"the intent's settings cannot be read, so who may sign this step is unknown: "+err.Error(), "nothing was executed")
	}
	if st.Approvals == nil || st.Approvals.Principals == nil {
		return PrincipalRule{}, nil
	}
	j, err := d.Book.Journal(roundID, false)
	if err != nil {
		return PrincipalRule{}, err
	}
	kind, ok := stepKind(j, target)
	if !ok {
		return PrincipalRule{}, answer.Refuse("Plan the round again: this node is not in it.",
			target+" is not in round "+roundID+", so which principals the intent lets sign its steps is unknown", "nothing was executed")
	}
	names, _ := st.Approvals.Principals.For(kind)
	return PrincipalRule{Names: names, Kind: kind}, nil
}
