package round

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuditText(t *testing.T) {
	approval := "mcp-patch approval request v1\ntool: drain_node\nnode: gpu-03\nround: 2026-11\n-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQAAADMAAAALc3NoLWVkMjU1MTkAAAAg\n-----END SSH SIGNATURE-----\n"
	args := map[string]any{"node": "gpu-03", "approval": approval, "reason": "short"}
	tests := []struct {
		name, text string
		args       any
		max        int
		want       string
	}{
		{"plain", "drain refused: PDB web blocks eviction", nil, 600, "drain refused: PDB web blocks eviction"},
		{"escapes", "line1\nline2\t\x1b[31mred\u202ecod.exe \\", nil, 600, `line1\nline2\t\x1b[31mred\u202ecod.exe \\`},
		{"invalid utf-8", "bad \xff byte", nil, 600, `bad \ufffd byte`},
		{"bounded", strings.Repeat("a", 700), nil, 600, strings.Repeat("a", 597) + "..."},
		{"escape not split", strings.Repeat("a", 595) + "\u202e\u202e", nil, 600, strings.Repeat("a", 595) + "..."},
		{"approval quoted whole", "approval refused: bad signature in " + approval, args, 600,
			`approval refused: bad signature in mcp-patch approv...[` + itoa(len(approval)-16) + ` bytes of the arguments]`},
		{"a line of it quoted", `parse approval: line 5: got "-----BEGIN SSH SIGNATURE-----"`, args, 600,
			`parse approval: line 5: got "-----BEGIN SSH S...[13 bytes of the arguments]"`},
		{"short arguments kept", "node gpu-03: short", args, 600, "node gpu-03: short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AuditText(tt.text, tt.args, tt.max)
			if got != tt.want {
				t.Errorf("AuditText =\n%q\nwant\n%q", got, tt.want)
			}
			if len(got) > tt.max {
				t.Errorf("%d bytes, more than %d", len(got), tt.max)
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestAuditKeepsNoArgumentText: a call whose reasons quote its signed
// approval leaves an audit line with the digest of the arguments and no
// more than a short prefix of their text.
func TestAuditKeepsNoArgumentText(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "2026-11")
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	approval := "mcp-patch approval request v1\ntool: drain_node\nnode: gpu-03\nnonce: 0123456789abcdef0123456789abcdef\n"
	args := map[string]string{"node": "gpu-03", "approval": approval}
	want, _ := ArgsDigest(args)
	rec, err := j.Audit(AuditEntry{Tool: "drain_node", Node: "gpu-03", Args: args, Decision: Refused,
		Reason: "approval refused: " + approval, Detail: "nonce 0123456789abcdef0123456789abcdef\x00"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ArgsDigest != want {
		t.Errorf("digest %s, want %s", rec.ArgsDigest, want)
	}
	f, err := os.Open(filepath.Join(dir, AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var line string
	for sc.Scan() {
		line = sc.Text()
	}
	for _, leak := range []string{"tool: drain_node", "0123456789abcdef0123456789abcdef", `\u0000`} {
		if strings.Contains(line, leak) {
			t.Errorf("audit line keeps %q:\n%s", leak, line)
		}
	}
	if !strings.Contains(line, "bytes of the arguments") || !strings.Contains(line, want) {
		t.Errorf("audit line lacks the redaction or the digest:\n%s", line)
	}
}
