package tools

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// TestResumeStatementAnswersOneStop: an agent asks for two resume
// statements while the round is stopped, spends one, and keeps the other
// for later. When the round stops again — same step, same node, a new
// failure record — the spare statement is refused and nothing is
// recorded; a statement signed for this stop resumes it.
func TestResumeStatementAnswersOneStop(t *testing.T) {
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	allowed, err := policy.ParseAllowedSigners([]byte("alice@example.org namespaces=\"mcp-patch\" " +
		strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	book := service.NewRoundBook(t.TempDir(), filepath.Join(t.TempDir(), "journals"), clock)
	defer book.Close()
	d := &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mode: ModeNormal, Now: clock, Book: book,
		Approvals: &service.PolicyApprovals{Verifier: &policy.Verifier{AllowedSigners: allowed, NonceStore: store, Clock: clock},
			TTL: 30 * time.Minute, Clock: clock}}
	j, err := book.Journal("2026-11", true)
	if err != nil {
		t.Fatal(err)
	}
	order, err := round.PlanOrder([]round.NodeInfo{{Name: "cp-1", ControlPlane: true}, {Name: "gpu-1", GPU: true, Canary: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	failBaseline := func(why string) {
		t.Helper()
		if _, err := j.StartStep(round.StepBaseline, "", round.Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := j.FailStep(round.StepBaseline, "", round.Meta{Detail: why}); err != nil {
			t.Fatal(err)
		}
	}
	failBaseline("stack health unreadable")

	reg := &Registry{}
	reg.Add(RecordDecision())
	cs := connect(t, reg, d, nil)
	statement := func() string {
		t.Helper()
		_, m := call(t, cs, "record_decision", map[string]any{"decision": "resume", "reason": "health endpoint fixed"})
		if m["status"] != string(StatusApprovalRequired) {
			t.Fatalf("without a statement: %v", m)
		}
		text := m["approval"].(map[string]any)["request"].(string)
		req, err := policy.ParseRequest([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		res, err := policy.Sign(signer, req.Canonical())
		if err != nil {
			t.Fatal(err)
		}
		return policy.FormatApproval(req, res.Signature)
	}
	first, spare := statement(), statement()
	stop1 := j.State().Stop.Binding()
	if !strings.Contains(first, "step: baseline\nstop: "+stop1+"\n") {
		t.Fatalf("the statement does not name the stop %q:\n%s", stop1, first)
	}
	_, m := call(t, cs, "record_decision", map[string]any{"decision": "resume", "attestation": first})
	if m["status"] != string(StatusOK) || j.State().Stop != nil {
		t.Fatalf("resume with its own statement: %v", m)
	}

	now = now.Add(10 * time.Minute)
	failBaseline("stack health unreadable")
	stop2 := j.State().Stop
	if stop2 == nil || stop2.Binding() == stop1 {
		t.Fatalf("second stop %+v has the first one's binding", stop2)
	}
	decisions := len(j.State().Decisions)
	res, m := call(t, cs, "record_decision", map[string]any{"decision": "resume", "attestation": spare})
	if !res.IsError || m["status"] != string(StatusRefused) {
		t.Fatalf("spare statement on a later stop: %v", m)
	}
	if reasons := strings.Join(asStrings(m["reasons"]), " "); !strings.Contains(reasons, "stop") {
		t.Errorf("the refusal does not say the stop differs: %s", reasons)
	}
	if st := j.State(); st.Stop == nil || len(st.Decisions) != decisions {
		t.Fatalf("the spare statement resumed the round or recorded a decision: stop %+v", st.Stop)
	}
	// A statement signed for this stop resumes it.
	_, m = call(t, cs, "record_decision", map[string]any{"decision": "resume", "attestation": statement()})
	if m["status"] != string(StatusOK) || j.State().Stop != nil {
		t.Fatalf("resume with a statement for this stop: %v", m)
	}
}

func asStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
