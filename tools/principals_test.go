package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// requirePrincipals adds approvals.principals to the os-layer settings of
// the rig's intent (lines indented under it, first in the section) and
// commits it.
func (f *fleet) requirePrincipals(lines ...string) {
	f.t.Helper()
	p := filepath.Join(f.repo, "os-layer", "settings.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		f.t.Fatal(err)
	}
	if !strings.Contains(string(b), "\napprovals:\n") {
		f.t.Fatal("the example os-layer settings have no approvals section")
	}
	section := "\napprovals:\n  principals:\n"
	for _, l := range lines {
		section += "    " + l + "\n"
	}
	b = []byte(strings.Replace(string(b), "\napprovals:\n", section, 1))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		f.t.Fatal(err)
	}
	gitRun(f.t, f.repo, "commit", "-qam", "approvals: principals per kind of step")
}

// addSigner lists another person in allowed_signers and restarts the
// server, which reads the file at start.
func (f *fleet) addSigner(principal string) signer {
	f.t.Helper()
	s := newSigner(f.t, filepath.Dir(f.cfg.Approvals.AllowedSigners), principal)
	fh, err := os.OpenFile(f.cfg.Approvals.AllowedSigners, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := fh.WriteString(s.allowedLine(f.t)); err != nil {
		f.t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		f.t.Fatal(err)
	}
	f.restart()
	return s
}

// signedBy calls tool, has s sign the request it answers with the real
// ssh-keygen and calls again with that approval.
func (f *fleet) signedBy(s signer, tool string, args map[string]any) *Result {
	f.t.Helper()
	_, res := f.call(tool, args)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		f.t.Fatalf("%s without approval: %s %v", tool, res.Status, res.Reasons)
	}
	with := map[string]any{"approval": s.sign(f.t, res.Approval.Request)}
	for k, v := range args {
		with[k] = v
	}
	_, res = f.call(tool, with)
	return res
}

// A control-plane step whose intent lets only bob sign it: the request
// says so, alice's valid signature is refused naming bob and the setting,
// nothing is cordoned, and bob's signature runs the step.
func TestIntentRequiredPrincipalRefusesAnotherSigner(t *testing.T) {
	f := newFleet(t)
	f.requirePrincipals("control_plane: [bob@example.org]")
	bob := f.addSigner("bob@example.org")
	f.planned()
	f.preflight("cp-1")

	_, res := f.call("drain_node", map[string]any{"node": "cp-1"})
	if res.Status != StatusApprovalRequired || !strings.Contains(reasons(res), "lets only bob@example.org sign control-plane steps") {
		t.Fatalf("drain_node cp-1 without approval: %s %v, want the request saying who signs", res.Status, res.Reasons)
	}
	res = f.signedBy(f.person, "drain_node", map[string]any{"node": "cp-1"})
	why := reasons(res)
	if res.Status != StatusRefused {
		t.Fatalf("drain_node cp-1 signed by alice: %s %v, want refused", res.Status, res.Reasons)
	}
	for _, w := range []string{"principal_not_allowed", "signed by alice@example.org", "needs a signature by bob@example.org",
		"approvals.principals.control_plane", "nothing was executed"} {
		if !strings.Contains(why, w) {
			t.Errorf("refusal %q does not say %q", why, w)
		}
	}
	if !strings.Contains(res.NextAction, "bob@example.org") {
		t.Errorf("next action %q does not name bob@example.org", res.NextAction)
	}
	if f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 was cordoned under alice's signature")
	}

	if res := f.signedBy(bob, "drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain_node cp-1 signed by bob: %s %v", res.Status, res.Reasons)
	}
	if !f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 not cordoned under bob's signature")
	}
}

// A GPU server's window approval is refused from a person the intent does
// not let sign GPU-server steps, and accepted from one it does; kinds the
// intent names no one for (the control plane here) take anyone.
func TestWindowApprovalNeedsThePrincipalTheIntentNames(t *testing.T) {
	f := newFleet(t)
	f.requirePrincipals("gpu_servers: [bob@example.org]")
	bob := f.addSigner("bob@example.org")
	f.planned()
	f.preflight("cp-1")
	f.windowThrough("cp-1", true)
	f.gateAccepted("cp-1")

	f.preflight("gpu-1")
	res := f.signedBy(f.person, "approve_window", map[string]any{"node": "gpu-1"})
	if why := reasons(res); res.Status != StatusRefused || !strings.Contains(why, "principal_not_allowed") ||
		!strings.Contains(why, "lets only bob@example.org sign GPU-server steps") {
		t.Fatalf("approve_window gpu-1 signed by alice: %s %v, want refused naming bob@example.org", res.Status, res.Reasons)
	}
	if res := f.signedBy(bob, "approve_window", map[string]any{"node": "gpu-1"}); res.Status != StatusOK || !strings.Contains(reasons(res), "approved by bob@example.org") {
		t.Fatalf("approve_window gpu-1 signed by bob: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.call("drain_node", map[string]any{"node": "gpu-1"}); res.Status != StatusOK {
		t.Fatalf("drain_node gpu-1 under bob's window approval: %s %v", res.Status, res.Reasons)
	}
}
