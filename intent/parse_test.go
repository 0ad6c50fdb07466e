package intent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const wellFormed = "# demo\n\nSummary line.\n\n## Why it exists\n\nBecause.\n\n## Properties it must keep\n\n- `P1` **First.** Text\n  continues here.\n- **P2** Second.\n\n## Out of scope\n\n- Nothing.\n\n## Open questions\n"

func TestParseIntent(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		want     Intent
		problems []string
	}{
		{
			name: "well formed",
			src:  wellFormed,
			want: Intent{Title: "demo", Summary: "Summary line.", Why: "Because.",
				Properties: []Property{{ID: "P1", Title: "First", Text: "**First.** Text continues here."}, {ID: "P2", Text: "Second."}},
				OutOfScope: []string{"Nothing."}, OpenQuestions: []OpenQuestion{}},
		},
		{
			name: "questions in several forms",
			src: wellFormed + "- `Q3` against `P2` (2025-01-02, round r-1): Does it hold?\n" +
				"- Unnumbered, about **P1** and `P9`.\n" +
				"- `Q7` names nothing.\n\n  Second paragraph.\n\n" +
				"Prose after the list is not a question.\n",
			want: Intent{Title: "demo", Summary: "Summary line.", Why: "Because.",
				Properties: []Property{{ID: "P1", Title: "First", Text: "**First.** Text continues here."}, {ID: "P2", Text: "Second."}},
				OutOfScope: []string{"Nothing."}, OpenQuestions: []OpenQuestion{
					{ID: "Q3", Property: "P2", Date: "2025-01-02", Round: "r-1", Text: "against `P2` (2025-01-02, round r-1): Does it hold?"},
					{Property: "P1", Text: "Unnumbered, about **P1** and `P9`."},
					{ID: "Q7", Text: "names nothing.\n\nSecond paragraph."},
				}},
		},
		{
			name: "headings inside code fences are text",
			src:  strings.Replace(wellFormed, "Because.", "Because.\n\n```\n## Not a section\n- `P9` not a property\n```", 1),
			want: Intent{Title: "demo", Summary: "Summary line.", Why: "Because.\n\n```\n## Not a section\n- `P9` not a property\n```",
				Properties: []Property{{ID: "P1", Title: "First", Text: "**First.** Text continues here."}, {ID: "P2", Text: "Second."}},
				OutOfScope: []string{"Nothing."}, OpenQuestions: []OpenQuestion{}},
		},
		{
			name: "retired property and CRLF line endings",
			src:  strings.ReplaceAll(strings.Replace(wellFormed, "- **P2** Second.", "- `P2` ~~Second.~~ Retired 2025-10.", 1), "\n", "\r\n"),
			want: Intent{Title: "demo", Summary: "Summary line.", Why: "Because.",
				Properties: []Property{{ID: "P1", Title: "First", Text: "**First.** Text continues here."}, {ID: "P2", Text: "~~Second.~~ Retired 2025-10.", Retired: true}},
				OutOfScope: []string{"Nothing."}, OpenQuestions: []OpenQuestion{}},
		},
		{
			name:     "missing section",
			src:      strings.Replace(wellFormed, "## Out of scope\n\n- Nothing.\n\n", "", 1),
			problems: []string{`section "Out of scope" is missing`},
		},
		{
			name:     "unknown and repeated sections",
			src:      wellFormed + "\n## Notes\n\n## Why it exists\n",
			problems: []string{`unknown section "Notes"`, `section "Why it exists" appears twice`},
		},
		{
			name:     "out of order",
			src:      "# t\n\n## Properties it must keep\n\n- `P1` x\n\n## Why it exists\n\n## Out of scope\n\n## Open questions\n",
			problems: []string{`section "Why it exists" is out of order`},
		},
		{
			name:     "property without an id, and an id used twice",
			src:      strings.Replace(wellFormed, "- **P2** Second.", "- Second, no id.\n- `P1` again.", 1),
			problems: []string{"property 2: bullet \"Second, no id.\" does not start with an id", `property id "P1" is used twice`},
		},
		{
			name:     "no title",
			src:      strings.TrimPrefix(wellFormed, "# demo\n"),
			problems: []string{`no "# " title line`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseIntent(tt.src)
			if len(tt.problems) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			for _, p := range tt.problems {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error lacks %q:\n%v", p, err)
				}
			}
		})
	}
}

func TestAppendOpenQuestionRefusesAnUnclosedFence(t *testing.T) {
	if _, err := appendOpenQuestion(wellFormed+"\n```\nlog output\n", "Q1", "P1", "2025-11-29", "r1", "x"); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestAppendOpenQuestionKeepsTheDocument(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{
			name: "empty section at the end",
			src:  wellFormed,
			want: wellFormed + "\n- `Q1` against `P2` (2025-11-29, round r1): Why?\n  Second line.\n",
		},
		{
			name: "after an existing item",
			src:  wellFormed + "\n- `Q1` against `P1` (2025-01-01, round r0): Old.\n",
			want: wellFormed + "\n- `Q1` against `P1` (2025-01-01, round r0): Old.\n- `Q1` against `P2` (2025-11-29, round r1): Why?\n  Second line.\n",
		},
		{
			name: "after prose, no final newline",
			src:  wellFormed + "\nNone open.",
			want: wellFormed + "\nNone open.\n\n- `Q1` against `P2` (2025-11-29, round r1): Why?\n  Second line.\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := appendOpenQuestion(tt.src, "Q1", "P2", "2025-11-29", "r1", "Why?\nSecond line.")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseIntent checks that the parser never panics and that whatever it
// accepts still parses to the same properties plus exactly one question
// after record_lesson appends an open question.
func FuzzParseIntent(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join(examplesDir, "*", "intent.md"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "A question.\nWith a second line.")
	}
	f.Add(wellFormed, "x")
	f.Fuzz(func(t *testing.T, src, text string) {
		in, err := ParseIntent(src)
		_ = ParseLessons(src)
		if err != nil || len(in.Properties) == 0 {
			return
		}
		text, err = checkText(text, DefaultMaxTextBytes)
		if err != nil {
			return
		}
		prop := in.Properties[len(in.Properties)-1].ID
		id := nextQuestionID(in.OpenQuestions)
		out, err := appendOpenQuestion(src, id, prop, "2025-11-29", "r1", text)
		if err != nil {
			t.Fatalf("append to a well-formed document: %v", err)
		}
		again, err := ParseIntent(out)
		if err != nil {
			t.Fatalf("document no longer parses after append: %v\n%q", err, out)
		}
		if diff := cmp.Diff(in.Properties, again.Properties); diff != "" {
			t.Fatalf("properties changed (-before +after):\n%s", diff)
		}
		if len(again.OpenQuestions) != len(in.OpenQuestions)+1 {
			t.Fatalf("%d questions after append, want %d\n%q", len(again.OpenQuestions), len(in.OpenQuestions)+1, out)
		}
		last := again.OpenQuestions[len(again.OpenQuestions)-1]
		if last.ID != id || last.Property != prop {
			t.Fatalf("appended question read back as %+v, want id %s property %s\n%q", last, id, prop, out)
		}
	})
}
