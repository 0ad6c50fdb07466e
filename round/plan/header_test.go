package plan

import (
	"bytes"
	"strings"
	"testing"
)

// The streamed header says what the whole plan says of itself and of each
// node's approval, blocked or ready, and refuses an edited plan as Decode
// does.
func TestDecodeHeaderAgreesWithDecode(t *testing.T) {
	blocked := input(PerWindow)
	f5 := blocked.Facts["gpu-5"]
	f5.Removals = []string{"nvidia-dkms-550"}
	blocked.Facts["gpu-5"] = f5
	risky := input(PerWindow)
	risky.Risks = []string{"drain.wait_for_jobs.selector app=train matches no pod in the cluster: the drain will wait for nothing"}
	for name, in := range map[string]Input{"per window": input(PerWindow), "per step": input(PerStep), "blocked": blocked, "fleet risks": risky} {
		t.Run(name, func(t *testing.T) {
			f := Build(in)
			b, err := f.Encode()
			if err != nil {
				t.Fatal(err)
			}
			h, err := DecodeHeader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if h.Round != f.Round || h.Revision != f.Revision || h.Digest != f.Digest || h.Signatures != f.Signatures ||
				h.PerStepSignatures != f.PerStepSignatures || h.Ready() != f.Ready() || len(h.Blockers) != len(f.Blockers) ||
				strings.Join(h.Summary, "|") != strings.Join(f.Summary, "|") || len(h.Nodes) != len(f.Nodes) ||
				strings.Join(h.Risks, "|") != strings.Join(f.Risks, "|") {
				t.Fatalf("header %+v\nof plan %s rev %d signatures %d/%d blockers %v", h, f.Digest, f.Revision, f.Signatures, f.PerStepSignatures, f.Blockers)
			}
			for _, n := range f.Nodes {
				hn, ok := h.Node(n.Node)
				if !ok || hn.Approval != n.Approval || hn.Window != n.Window {
					t.Errorf("node %s: header %+v, plan %s %s", n.Node, hn, n.Approval, n.Window)
				}
			}
			edited := bytes.Replace(b, []byte(`"package_digest": "sha256:pkgs"`), []byte(`"package_digest": "sha256:evil"`), 1)
			if _, err := DecodeHeader(bytes.NewReader(edited)); err == nil || !strings.Contains(err.Error(), "changed after it was sealed") {
				t.Errorf("edited plan: err = %v", err)
			}
			for _, bad := range []string{"{", "[]", `{"nodes": {}}`, ""} {
				if _, err := DecodeHeader(strings.NewReader(bad)); err == nil {
					t.Errorf("malformed plan %q accepted", bad)
				}
			}
		})
	}
}
