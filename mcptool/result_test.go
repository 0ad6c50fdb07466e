package mcptool

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/answer"
)

// The status rule, one case per status: a blocker turns ok (or unset)
// into failed and leaves every other status as it is.
func TestStatusRule(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  Status
		reasons []string
		want    Status
	}{
		{"ok without blockers", StatusOK, []string{"kernel 6.8.0-45-generic"}, StatusOK},
		{"unset without blockers", "", nil, ""},
		{"ok with a blocker", StatusOK, []string{"fine", answer.Blocker("the upgrade would remove 1 package(s): oldlib")}, StatusFailed},
		{"unset with a blocker", "", []string{answer.Blocker("dpkg was interrupted")}, StatusFailed},
		{"refused stays refused", StatusRefused, []string{answer.Blocker("x")}, StatusRefused},
		{"in progress stays", StatusInProgress, []string{answer.Blocker("x")}, StatusInProgress},
		{"approval stays", StatusApprovalRequired, []string{answer.Blocker("x")}, StatusApprovalRequired},
		{"a reason that only mentions blockers", StatusOK, []string{"no blocker: all clear"}, StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := StatusRule(c.status, c.reasons); got != c.want {
				t.Errorf("StatusRule(%q, %q) = %q, want %q", c.status, c.reasons, got, c.want)
			}
		})
	}
}

func TestThen(t *testing.T) {
	c := answer.CallTo("next")
	for _, tc := range []struct {
		status Status
		want   *answer.Call
	}{{"", c}, {StatusOK, c}, {StatusInProgress, nil}, {StatusFailed, nil}} {
		if got := (Result{Status: tc.status}).Then(c).NextCall; got != tc.want {
			t.Errorf("status %q: next call %v, want %v", tc.status, got, tc.want)
		}
	}
}

func TestEncodeResult(t *testing.T) {
	type out struct {
		Payload string `json:"payload"`
		Result
		Early string `json:"early"`
	}
	b, err := EncodeResult(out{Payload: "p", Early: "e", Result: Result{Status: StatusOK, Reasons: []string{}, NextCall: answer.CallTo("x"), ApprovalID: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":"ok","reasons":[],"next_action":"","next_call":{"tool":"x","arguments":{}},"payload":"p","early":"e"}`
	if string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}
	if _, err := EncodeResult([]int{1}); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("a list encoded: %v", err)
	}
}

func TestProgressGuard(t *testing.T) {
	for _, tc := range []struct {
		name string
		done []float64
		sent []bool
	}{
		{"increasing", []float64{0, 1, 2.5, 3}, []bool{true, true, true, true}},
		{"a repeat is not sent", []float64{1, 1, 2}, []bool{true, false, true}},
		{"a late report is not sent", []float64{0, 3, 2, 4}, []bool{true, true, false, true}},
		{"the first may be zero", []float64{0, 0}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g progressGuard
			for i, d := range tc.done {
				if got := g.next(d); got != tc.sent[i] {
					t.Errorf("report %d (%v): sent %v, want %v", i, d, got, tc.sent[i])
				}
			}
		})
	}
}

func TestProgressAfter(t *testing.T) {
	type report struct{ done, total float64 }
	var got []report
	p := Progress(func(done, total float64, _ string) { got = append(got, report{done, total}) })
	sub := p.After(3, 11)
	sub(1, 6, "a")
	sub(6, 6, "b")
	if len(got) != 2 || got[0] != (report{4, 11}) || got[1] != (report{9, 11}) {
		t.Fatalf("After(3, 11): %v", got)
	}
}
