package tools

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round/service"
)

// The signed plan is decoded once per content of plan.json: the same bytes
// give the kept plan again, other bytes are decoded (and their digests
// checked) anew, and a plan edited by hand is refused whichever way it is
// read.
func TestSignedPlanDecodedOncePerContent(t *testing.T) {
	f := newFleet(t)
	f.signInProcess()
	f.planned()
	ctx := t.Context()
	first, _, err := f.d.SignedPlan(ctx, fRound)
	if err != nil {
		t.Fatalf("signedPlan: %v", err)
	}
	again, _, err := f.d.SignedPlan(ctx, fRound)
	if err != nil {
		t.Fatal(err)
	}
	if &first.Nodes[0] != &again.Nodes[0] {
		t.Error("the same plan.json bytes were decoded again")
	}
	b, err := f.d.Book.ReadFile(fRound, service.FleetPlanFile)
	if err != nil {
		t.Fatal(err)
	}
	// The same plan, other bytes (a trailing newline): decoded anew.
	if err := f.d.Book.WriteFile(fRound, service.FleetPlanFile, append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	other, _, err := f.d.SignedPlan(ctx, fRound)
	if err != nil {
		t.Fatal(err)
	}
	if &other.Nodes[0] == &first.Nodes[0] || other.Digest != first.Digest {
		t.Errorf("other bytes: shared %v, digest %s want %s", &other.Nodes[0] == &first.Nodes[0], other.Digest, first.Digest)
	}
	// Edited by hand: refused, the kept plan notwithstanding.
	edited := strings.Replace(string(b), first.Nodes[0].Node, first.Nodes[0].Node+"x", 1)
	if err := f.d.Book.WriteFile(fRound, service.FleetPlanFile, []byte(edited)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.d.SignedPlan(ctx, fRound); err == nil {
		t.Error("a plan.json edited by hand was taken as the signed plan")
	}
}
