package tools

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round/service"
)

func TestHostErrorWords(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		refusal bool
		next    string
		reason  string
	}{
		{"host key", &host.HostKeyError{Node: "gpu-1", Host: "10.0.0.5"}, false, "never skip the check", "install on gpu-1"},
		{"bad input", fmt.Errorf("kernel %q: %w", "x;y", steps.ErrBadInput), true, "Fix the input.", "install on gpu-1"},
		{"unknown node", fmt.Errorf("gpu-9: %w", host.ErrUnknownNode), true, "plan_round's order", "install: gpu-9"},
		{"unreachable", errors.New("dial tcp: connection refused"), false, "reachable over SSH", "install on gpu-1: dial tcp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := service.HostError("gpu-1", "install", c.err)
			var ref *Refusal
			var f *Failure
			var next string
			var reasons []string
			switch {
			case errors.As(err, &ref):
				next, reasons = ref.NextAction, ref.Reasons
			case errors.As(err, &f):
				next, reasons = f.NextAction, f.Reasons
			default:
				t.Fatalf("%T %v is neither a refusal nor a failure", err, err)
			}
			if (ref != nil) != c.refusal {
				t.Errorf("refusal %v, want %v (%v)", ref != nil, c.refusal, err)
			}
			if !strings.Contains(next, c.next) {
				t.Errorf("next %q lacks %q", next, c.next)
			}
			if len(reasons) == 0 || !strings.HasPrefix(reasons[0], c.reason) {
				t.Errorf("reasons %q, want to start with %q", reasons, c.reason)
			}
			if c.refusal && (len(reasons) < 2 || reasons[len(reasons)-1] != "nothing was executed") {
				t.Errorf("a refusal says nothing was executed: %q", reasons)
			}
		})
	}
}

func TestClipDerefDigest(t *testing.T) {
	lines := []string{"a", "b", "c", "d"}
	if got := clip(lines, 4); strings.Join(got, ",") != "a,b,c,d" {
		t.Errorf("clip at its length changed it: %q", got)
	}
	got := clip(lines, 2)
	if strings.Join(got, ",") != "a,b,... and 2 more" {
		t.Errorf("clip(4 lines, 2) = %q", got)
	}
	if strings.Join(lines, ",") != "a,b,c,d" {
		t.Errorf("clip wrote into its input: %q", lines)
	}
	n := 3
	if deref(nil) != "?" || deref(&n) != 3 {
		t.Errorf("deref: %v %v", deref(nil), deref(&n))
	}
	d := service.DigestOf("ab", "c")
	if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
		t.Fatalf("digest %q", d)
	}
	if d == service.DigestOf("a", "bc") || d == service.DigestOf("abc") {
		t.Error("digestOf does not separate its parts")
	}
	if d != service.DigestOf("ab", "c") {
		t.Error("digestOf is not stable")
	}
	if orDash("") != "-" || orDash("x") != "x" || oneLine(" a \n b\t") != "a b" {
		t.Error("orDash/oneLine")
	}
}
