package steps

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-patch/mcp-patch/scripts"
)

// commonBlock is the shared shell block of the scripts, without its first
// line (`exec 3>&1 1>&2` would move stdout away from the test).
func commonBlock(t testing.TB) string {
	t.Helper()
	src, _ := scripts.Host.ReadFile("host/kernel.sh")
	b, ok := block(string(src), "common")
	if !ok {
		t.Fatal("no common block")
	}
	return strings.Replace(b, "exec 3>&1 1>&2\n", "", 1)
}

// jsonAwk runs the scripts' json_awk MODE on input and decodes the result.
func jsonAwk(t testing.TB, common, mode string, input []byte) (string, []string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", common+"\ntrap - EXIT\njson_awk "+mode)
	cmd.Stdin = bytes.NewReader(input)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("json_awk: %v", err)
	}
	if mode == "lines" {
		var l []string
		if err := json.Unmarshal(out, &l); err != nil {
			t.Fatalf("not JSON: %v\n%q", err, out)
		}
		return "", l
	}
	var s string
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("not JSON: %v\n%q", err, out)
	}
	return s, nil
}

func checkJSONRoundTrip(t testing.TB, common string, in string) {
	t.Helper()
	want := in
	if want != "" && !strings.HasSuffix(want, "\n") {
		want += "\n"
	}
	if got, _ := jsonAwk(t, common, "text", []byte(in)); got != want {
		t.Fatalf("text: got %q, want %q", got, want)
	}
	val, _ := jsonAwk(t, common, "value", []byte(in))
	if val != strings.TrimSuffix(want, "\n") {
		t.Fatalf("value: got %q, want %q", val, strings.TrimSuffix(want, "\n"))
	}
	_, lines := jsonAwk(t, common, "lines", []byte(in))
	var wantLines []string
	for _, l := range strings.Split(strings.TrimSuffix(want, "\n"), "\n") {
		if l != "" {
			wantLines = append(wantLines, l)
		}
	}
	if strings.Join(lines, "\x00") != strings.Join(wantLines, "\x00") {
		t.Fatalf("lines: got %q, want %q", lines, wantLines)
	}
}

// TestJSONEscapeRoundTrip: every byte but NUL survives the scripts' escaping
// and Go's decoding unchanged (as valid UTF-8 goes).
func TestJSONEscapeRoundTrip(t *testing.T) {
	common := commonBlock(t)
	var all strings.Builder
	for c := 1; c < 0x80; c++ {
		all.WriteByte(byte(c))
	}
	for _, in := range []string{"", "plain", "a\tb\"c\\d\r\n\nlast", all.String(), "ünïcødé ✓ 日本\n", "\\u0041 \\\"", "\x1b[31mred\x1b[0m\n\n\n"} {
		checkJSONRoundTrip(t, common, in)
	}
	// Bytes that are not UTF-8 still give valid JSON; Go reads them as
	// U+FFFD.
	got, _ := jsonAwk(t, common, "text", []byte("caf\xe9\n"))
	if got != "caf\uFFFD\n" {
		t.Errorf("latin-1: %q", got)
	}
}

func FuzzJSONEscapeAgainstScript(f *testing.F) {
	common := commonBlock(f)
	for _, s := range []string{"", "a\tb\"c\\d\r\n", "\x01\x1f\x7f", "ünï\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if strings.ContainsRune(in, 0) || !utf8.ValidString(in) {
			t.Skip("NUL cannot pass through a shell; invalid UTF-8 decodes as U+FFFD")
		}
		checkJSONRoundTrip(t, common, in)
	})
}
