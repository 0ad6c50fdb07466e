package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/steps"
)

// repoRoot is the repository root seen from this package.
var repoRoot = filepath.Join("..", "..", "..")

// TestPagesAreCurrent fails when a generated page on disk is not what the
// generator writes from the code as it is now.
func TestPagesAreCurrent(t *testing.T) {
	ps, err := pages(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		have, err := os.ReadFile(filepath.Join(repoRoot, p.path))
		if err != nil {
			t.Errorf("%s: %v (run `%s` from the repository root)", p.path, err, regenerate)
			continue
		}
		if d := cmp.Diff(string(p.want), string(have)); d != "" {
			t.Errorf("%s is stale: run `%s` from the repository root (-want +have):\n%s", p.path, regenerate, d)
		}
	}
}

// maxREADMELines is how long the README may be: the front door, not the
// lab notebook (measurements live in docs/benchmarks.md).
const maxREADMELines = 250

func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > maxREADMELines {
		t.Errorf("README.md has %d lines, at most %d: move detail into docs/ and link it", n, maxREADMELines)
	}
}

// TestRelativeLinksResolve: every relative link in README.md and docs/
// names a file that exists and, with a #fragment, a heading of that file.
func TestRelativeLinksResolve(t *testing.T) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // file → its headings' anchors
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[file] = a
		return a, nil
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range relativeLinks(string(b)) {
			checked++
			path, frag, _ := strings.Cut(l.target, "#")
			target := f
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(f), path))
				if _, err := os.Stat(filepath.Join(repoRoot, target)); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", f, l.line, l.target, target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: a fragment into %s, which is not Markdown", f, l.line, l.target, target)
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Fatal(err)
			}
			if !a[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", f, l.line, l.target, target, frag)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d relative links in %d files, want the README's index and the docs' links at least", checked, len(files))
	}
}

// TestEveryHostCauseHasAnEntry: each Cause constant the host steps declare
// has its entry in docs/troubleshooting.md's generated section, once.
func TestEveryHostCauseHasAnEntry(t *testing.T) {
	declared := hostCauseConstants(t, filepath.Join(repoRoot, causeDir))
	if len(declared) < 10 {
		t.Fatalf("found %d Cause constants in %s, want the cause table's", len(declared), causeDir)
	}
	listed := map[steps.Cause]int{}
	for _, c := range causes {
		listed[c.id]++
	}
	for _, v := range declared {
		if listed[steps.Cause(v)] != 1 {
			t.Errorf("cause %q is listed %d times in gendocs' causes, want once (add its title and how it shows)", v, listed[steps.Cause(v)])
		}
		delete(listed, steps.Cause(v))
	}
	for c := range listed {
		t.Errorf("gendocs lists cause %q, which the code does not declare", c)
	}
}

// hostCauseConstants are the values of the constants of type Cause
// declared in the package in dir.
func hostCauseConstants(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Cause" {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out = append(out, strings.Trim(lit.Value, "\"`"))
					}
				}
			}
		}
	}
	return out
}

// link is one relative link of a Markdown file.
type link struct {
	target string
	line   int
}

var (
	inlineLinkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// relativeLinks are the inline links of a Markdown text that name no
// scheme, outside code blocks and code spans. Pure.
func relativeLinks(md string) []link {
	var out []link
	fenced := false
	for i, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range inlineLinkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(l, ""), -1) {
			if !schemeRE.MatchString(m[1]) {
				out = append(out, link{target: m[1], line: i + 1})
			}
		}
	}
	return out
}

var linkTextRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// headingAnchors are the anchors GitHub gives a Markdown text's headings:
// a repeated one gets -1, -2, ... Pure.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimLeft(l, "#")
		if text == "" || text[0] != ' ' {
			continue
		}
		a := anchor(linkTextRE.ReplaceAllString(text, "$1"))
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestAnchor(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Getting started", "getting-started"},
		{"The journal's anchor", "the-journals-anchor"},
		{"mcp-patch tool read_intent", "mcp-patch-tool-read_intent"},
		{"Memory and round_status at 1,000 nodes", "memory-and-round_status-at-1000-nodes"},
		{"`serve`: the HTTP service", "serve-the-http-service"},
		{"Who can do what; production", "who-can-do-what-production"},
	} {
		if got := anchor(c.heading); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestHeadingAnchors(t *testing.T) {
	md := "# Title\n\n## Options\n\n```\n# not a heading\n```\n\n## Options\n\n### [Linked](x.md) heading\n#nospace\n"
	want := map[string]bool{"title": true, "options": true, "options-1": true, "linked-heading": true}
	if d := cmp.Diff(want, headingAnchors(md)); d != "" {
		t.Errorf("headingAnchors (-want +got):\n%s", d)
	}
}

func TestRelativeLinks(t *testing.T) {
	md := "See [a](docs/a.md), [b](b.md#part \"title\") and [c](https://example.com).\n" +
		"`[not](code.md)` [self](#top) <https://x.invalid>\n```\n[fenced](no.md)\n```\n[mail](mailto:a@b)\n"
	want := []link{{"docs/a.md", 1}, {"b.md#part", 1}, {"#top", 2}}
	if d := cmp.Diff(want, relativeLinks(md), cmp.AllowUnexported(link{})); d != "" {
		t.Errorf("relativeLinks (-want +got):\n%s", d)
	}
}

func TestSplice(t *testing.T) {
	begin, end := beginMarker("x"), endMarker("x")
	for _, c := range []struct {
		name, doc, body, want, err string
	}{
		{"replaces", "a\n" + begin + "old\n" + end + "b\n", "new", "a\n" + begin + "new\n" + end + "b\n", ""},
		{"empty section", "a\n" + begin + end, "new\n", "a\n" + begin + "new\n" + end, ""},
		{"no markers", "a\n", "new", "", "no "},
		{"end first", end + begin, "new", "", "before its begin"},
		{"twice", begin + end + begin + end, "new", "", "more than once"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := splice([]byte(c.doc), "x", c.body)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, string(got)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
