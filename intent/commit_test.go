package intent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecordLessonAndOpenQuestion(t *testing.T) {
	ctx := t.Context()
	dir := newExampleRepo(t)
	mainBefore := gitCLI(t, dir, "rev-parse", "main")
	r := openRepo(t, dir, nil)

	lesson, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "os-layer", Property: "P4",
		Text: "gpu-03's trial boot fell back to the old kernel.\n\nThe initramfs lacked the NVMe driver; rebuilt it and retried."})
	if err != nil {
		t.Fatal(err)
	}
	if !lesson.CreatedBranch || !lesson.SwitchedBranch || lesson.Branch != "mcp-patch/round-2025-11" || lesson.Parent != mainBefore {
		t.Errorf("lesson commit: %+v", lesson)
	}
	if diff := cmp.Diff([]string{"os-layer/lessons.md"}, lesson.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}

	question, err := r.RecordLesson(ctx, LessonInput{Kind: KindOpenQuestion, Component: "os-layer", Property: "P9", RoundID: "2025-11",
		Text: "Livepatch on gpu-05 reports `applied` fixes for a kernel the intent says must be rebooted within 2 days."})
	if err != nil {
		t.Fatal(err)
	}
	if question.OpenQuestionID != "Q2" || question.CreatedBranch || question.SwitchedBranch || question.Parent != lesson.Hash {
		t.Errorf("question commit: %+v", question)
	}

	// What the real git sees.
	if got := gitCLI(t, dir, "symbolic-ref", "--short", "HEAD"); got != "mcp-patch/round-2025-11" {
		t.Errorf("HEAD is on %q", got)
	}
	if got := gitCLI(t, dir, "rev-parse", "main"); got != mainBefore {
		t.Errorf("main moved from %s to %s", mainBefore, got)
	}
	if got := gitCLI(t, dir, "log", "--format=%H|%P|%an <%ae>|%cn <%ce>|%aI", "-2"); got !=
		question.Hash+"|"+lesson.Hash+"|mcp-patch bot <bot@example.com>|mcp-patch bot <bot@example.com>|2025-11-29T14:30:00+00:00\n"+
			lesson.Hash+"|"+mainBefore+"|mcp-patch bot <bot@example.com>|mcp-patch bot <bot@example.com>|2025-11-29T14:30:00+00:00" {
		t.Errorf("git log:\n%s", got)
	}
	for _, tc := range []struct{ rev, file string }{{lesson.Hash, "os-layer/lessons.md"}, {question.Hash, "os-layer/intent.md"}} {
		if got := gitCLI(t, dir, "show", "--name-only", "--format=", tc.rev); got != tc.file {
			t.Errorf("git show --name-only %s = %q, want only %s", tc.rev, got, tc.file)
		}
		if got := gitCLI(t, dir, "show", "--stat", "--format=", tc.rev); !strings.Contains(got, "1 file changed") {
			t.Errorf("git show --stat %s:\n%s", tc.rev, got)
		}
	}
	if got := gitCLI(t, dir, "log", "-1", "--format=%B", lesson.Hash); got !=
		"intent(os-layer): lesson on P4 (round 2025-11)\n\ngpu-03's trial boot fell back to the old kernel.\n\nRound: 2025-11\nComponent: os-layer\nKind: lesson\nProperty: P4" {
		t.Errorf("lesson message:\n%s", got)
	}
	if got := gitCLI(t, dir, "log", "-1", "--format=%s", question.Hash); got != "intent(os-layer): open question Q2 against P9 (round 2025-11)" {
		t.Errorf("question subject: %s", got)
	}
	if out, err := gitTry(t, dir, "fsck", "--strict", "--no-progress"); err != nil || out != "" {
		t.Errorf("git fsck --strict: %v\n%s", err, out)
	}
	if got := gitCLI(t, dir, "status", "--porcelain", "--untracked-files=all"); got != "" {
		t.Errorf("git status not clean after our commits:\n%s", got)
	}
	diff := gitCLI(t, dir, "diff", lesson.Hash, question.Hash)
	if !strings.Contains(diff, "+- `Q2` against `P9` (2025-11-29, round 2025-11): Livepatch on gpu-05 reports `applied` fixes") {
		t.Errorf("question diff:\n%s", diff)
	}
	lessonsMD := gitCLI(t, dir, "show", lesson.Hash+":os-layer/lessons.md")
	if !strings.HasSuffix(lessonsMD, "## 2025-11-29 · round 2025-11 · `P4`\n\ngpu-03's trial boot fell back to the old kernel.\n\nThe initramfs lacked the NVMe driver; rebuilt it and retried.") {
		t.Errorf("lessons.md ends:\n%s", lessonsMD[max(0, len(lessonsMD)-300):])
	}

	// What we read back.
	c, err := r.Component("os-layer")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Problems) != 0 {
		t.Errorf("problems after writes: %v", c.Problems)
	}
	var qs []OpenQuestion
	for _, q := range c.Intent.OpenQuestions {
		qs = append(qs, OpenQuestion{ID: q.ID, Property: q.Property, Date: q.Date, Round: q.Round})
	}
	if diff := cmp.Diff([]OpenQuestion{{"Q1", "P1", "2025-11-12", "2025-11", ""}, {"Q2", "P9", "2025-11-29", "2025-11", ""}}, qs); diff != "" {
		t.Errorf("open questions (-want +got):\n%s", diff)
	}
	last := c.Lessons[len(c.Lessons)-1]
	if last.Date != "2025-11-29" || last.Round != "2025-11" || last.Property != "P4" || !strings.HasSuffix(last.Text, "rebuilt it and retried.") {
		t.Errorf("last lesson: %+v", last)
	}

	// A person's commit with the git CLI after ours must see our changes:
	// the index we wrote has no stale cached tree.
	writeFile(t, filepath.Join(dir, "postgres", "runbook.md"), "# postgres runbook\n\nRewritten by a person.\n")
	gitCLI(t, dir, "commit", "-q", "-am", "A person's edit")
	if got := gitCLI(t, dir, "diff", "--name-only", question.Hash, "HEAD"); got != "postgres/runbook.md" {
		t.Errorf("a CLI commit after ours changed %q, want only postgres/runbook.md", got)
	}
	if got := gitCLI(t, dir, "status", "--porcelain"); got != "" {
		t.Errorf("status after a CLI commit:\n%s", got)
	}
}

func TestLessonWithoutPropertyAndNewLessonsFile(t *testing.T) {
	dir := newExampleRepo(t)
	gitCLI(t, dir, "rm", "-q", "postgres/lessons.md")
	gitCLI(t, dir, "commit", "-q", "-m", "drop postgres lessons")
	r := openRepo(t, dir, nil)
	c, err := r.RecordLesson(t.Context(), LessonInput{Kind: KindLesson, Component: "postgres", Text: "Switchover took 4 s."})
	if err != nil {
		t.Fatal(err)
	}
	got := gitCLI(t, dir, "show", c.Hash+":postgres/lessons.md")
	want := "# Lessons — postgres\n\nWhat past rounds taught us, newest last.\n\n## 2025-11-29 · round 2025-11\n\nSwitchover took 4 s."
	if got != want {
		t.Errorf("new lessons.md:\n%s", got)
	}
	if mode := gitCLI(t, dir, "ls-tree", c.Hash, "postgres/lessons.md"); !strings.HasPrefix(mode, "100644 blob") {
		t.Errorf("mode: %s", mode)
	}
	if mode := gitCLI(t, dir, "ls-tree", c.Hash, "postgres/verify.sh"); !strings.HasPrefix(mode, "100755 blob") {
		t.Errorf("verify.sh lost its mode: %s", mode)
	}
}

func TestRecordLessonRefusesAndChangesNothing(t *testing.T) {
	big := strings.Repeat("x", DefaultMaxTextBytes+1)
	tests := []struct {
		name  string
		in    LessonInput
		setup func(t *testing.T, dir string)
		want  error
	}{
		{name: "unknown component", in: LessonInput{Kind: KindLesson, Component: "storage", Text: "t"}, want: ErrUnknownComponent},
		{name: "path traversal", in: LessonInput{Kind: KindLesson, Component: "../x", Text: "t"}, want: ErrInvalid},
		{name: "traversal inside a name", in: LessonInput{Kind: KindLesson, Component: "os-layer/../control-plane", Text: "t"}, want: ErrInvalid},
		{name: "odd characters", in: LessonInput{Kind: KindLesson, Component: "os_layer", Text: "t"}, want: ErrInvalid},
		{name: "upper case", in: LessonInput{Kind: KindLesson, Component: "OS-layer", Text: "t"}, want: ErrInvalid},
		{name: "rounds folder", in: LessonInput{Kind: KindLesson, Component: "rounds", Text: "t"}, want: ErrInvalid},
		{name: "unknown kind", in: LessonInput{Kind: "note", Component: "os-layer", Text: "t"}, want: ErrInvalid},
		{name: "unknown property", in: LessonInput{Kind: KindOpenQuestion, Component: "os-layer", Property: "P42", Text: "t"}, want: ErrUnknownProperty},
		{name: "property of another component", in: LessonInput{Kind: KindLesson, Component: "postgres", Property: "P10", Text: "t"}, want: ErrUnknownProperty},
		{name: "open question without property", in: LessonInput{Kind: KindOpenQuestion, Component: "os-layer", Text: "t"}, want: ErrInvalid},
		{name: "malformed property id", in: LessonInput{Kind: KindLesson, Component: "os-layer", Property: "P1`", Text: "t"}, want: ErrInvalid},
		{name: "empty text", in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: " \n\t "}, want: ErrInvalid},
		{name: "oversized text", in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: big}, want: ErrInvalid},
		{name: "heading in text", in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: "ok\n## 2020-01-01 · fake entry"}, want: ErrInvalid},
		{name: "code fence in text", in: LessonInput{Kind: KindOpenQuestion, Component: "os-layer", Property: "P1", Text: "see\n```\nx"}, want: ErrInvalid},
		{name: "control character", in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: "bell\a"}, want: ErrInvalid},
		{name: "invalid UTF-8", in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: "a\xffb"}, want: ErrInvalid},
		{name: "other round", in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: "t", RoundID: "2025-10"}, want: ErrInvalid},
		{
			name: "unrelated edit in lessons.md", want: ErrDirty,
			in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: "t"},
			setup: func(t *testing.T, dir string) {
				f, err := os.OpenFile(filepath.Join(dir, "os-layer", "lessons.md"), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, err := f.WriteString("\nA person's unfinished note.\n"); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "staged edit in intent.md", want: ErrDirty,
			in: LessonInput{Kind: KindOpenQuestion, Component: "os-layer", Property: "P1", Text: "t"},
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "os-layer", "intent.md"), strings.Replace(readFile(t, filepath.Join(dir, "os-layer", "intent.md")), "deliberate", "careful", 1))
				gitCLI(t, dir, "add", "os-layer/intent.md")
			},
		},
		{
			name: "deleted lessons.md", want: ErrDirty,
			in: LessonInput{Kind: KindLesson, Component: "gpu-fleet", Text: "t"},
			setup: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "gpu-fleet", "lessons.md")); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "untracked lessons.md in the way", want: ErrDirty,
			in: LessonInput{Kind: KindLesson, Component: "postgres", Text: "t"},
			setup: func(t *testing.T, dir string) {
				gitCLI(t, dir, "rm", "-q", "--cached", "postgres/lessons.md")
				gitCLI(t, dir, "commit", "-q", "-m", "untrack")
			},
		},
		{
			name: "malformed intent.md takes no question", want: ErrMalformed,
			in: LessonInput{Kind: KindOpenQuestion, Component: "control-plane", Property: "P1", Text: "t"},
			setup: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "control-plane", "intent.md")
				writeFile(t, p, strings.Replace(readFile(t, p), "## Out of scope", "## Not in scope", 1))
				gitCLI(t, dir, "commit", "-q", "-am", "a person breaks the format")
			},
		},
		{
			name: "git lock held", want: ErrBusy,
			in: LessonInput{Kind: KindLesson, Component: "os-layer", Text: "t"},
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, ".git", "index.lock"), "")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newExampleRepo(t)
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			before := stateOf(t, dir)
			r := openRepo(t, dir, nil)
			_, err := r.RecordLesson(t.Context(), tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if diff := cmp.Diff(before, stateOf(t, dir)); diff != "" {
				t.Errorf("a refused write changed the repository (-before +after):\n%s", diff)
			}
		})
	}
}

func TestWriteWithoutWorkingBranchIsRefused(t *testing.T) {
	dir := newExampleRepo(t)
	before := stateOf(t, dir)
	r, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RecordLesson(t.Context(), LessonInput{Kind: KindLesson, Component: "os-layer", Text: "t", RoundID: "2025-11"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
	if diff := cmp.Diff(before, stateOf(t, dir)); diff != "" {
		t.Errorf("changed (-before +after):\n%s", diff)
	}
}

func TestReturnsToTheWorkingBranch(t *testing.T) {
	ctx := t.Context()
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	first, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "gpu-fleet", Property: "P3", Text: "first"})
	if err != nil {
		t.Fatal(err)
	}
	// A person looks at main in between.
	gitCLI(t, dir, "checkout", "-q", "main")
	mainHead := gitCLI(t, dir, "rev-parse", "main")

	// With an untracked file around, switching is refused and nothing moves.
	writeFile(t, filepath.Join(dir, "notes.txt"), "scratch\n")
	before := stateOf(t, dir)
	if _, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "gpu-fleet", Text: "second"}); !errors.Is(err, ErrDirty) {
		t.Fatalf("err = %v, want ErrDirty", err)
	}
	if diff := cmp.Diff(before, stateOf(t, dir)); diff != "" {
		t.Errorf("changed (-before +after):\n%s", diff)
	}
	if err := os.Remove(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}

	second, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "gpu-fleet", Text: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if !second.SwitchedBranch || second.CreatedBranch || second.Parent != first.Hash {
		t.Errorf("second commit: %+v", second)
	}
	if got := gitCLI(t, dir, "symbolic-ref", "--short", "HEAD"); got != "mcp-patch/round-2025-11" {
		t.Errorf("HEAD on %s", got)
	}
	if got := gitCLI(t, dir, "rev-parse", "main"); got != mainHead {
		t.Errorf("main moved")
	}
	if got := gitCLI(t, dir, "status", "--porcelain"); got != "" {
		t.Errorf("status:\n%s", got)
	}
	text := readFile(t, filepath.Join(dir, "gpu-fleet", "lessons.md"))
	if !strings.Contains(text, "\n\nfirst\n") || !strings.HasSuffix(text, "\n\nsecond\n") {
		t.Errorf("lessons.md on disk:\n%s", text)
	}
}

func TestWorkingBranchAtHeadIsSwitchedTo(t *testing.T) {
	dir := newExampleRepo(t)
	gitCLI(t, dir, "branch", "mcp-patch/round-2025-11")
	r := openRepo(t, dir, nil)
	c, err := r.RecordLesson(t.Context(), LessonInput{Kind: KindLesson, Component: "os-layer", Text: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if c.CreatedBranch || !c.SwitchedBranch {
		t.Errorf("%+v", c)
	}
	if got := gitCLI(t, dir, "symbolic-ref", "--short", "HEAD"); got != "mcp-patch/round-2025-11" {
		t.Errorf("HEAD on %s", got)
	}
}

func TestCommitFiles(t *testing.T) {
	ctx := t.Context()
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)

	// Someone else's staged edit must stay staged and out of our commit.
	writeFile(t, filepath.Join(dir, "os-layer", "runbook.md"), "# os-layer runbook\n\nA person's draft.\n")
	gitCLI(t, dir, "add", "os-layer/runbook.md")
	writeFile(t, filepath.Join(dir, "rounds", "2025-11", "journal.jsonl"), `{"seq":1,"kind":"session_opened"}`+"\n")
	writeFile(t, filepath.Join(dir, "rounds", "2025-11", "report.md"), "# Round 2025-11\n")

	c, err := r.CommitFiles(ctx, "round 2025-11: journal and report", []string{"rounds/2025-11/report.md", "rounds/2025-11/journal.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"rounds/2025-11/journal.jsonl", "rounds/2025-11/report.md"}, c.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if got := gitCLI(t, dir, "show", "--name-only", "--format=", c.Hash); got != "rounds/2025-11/journal.jsonl\nrounds/2025-11/report.md" {
		t.Errorf("commit holds:\n%s", got)
	}
	if got := gitCLI(t, dir, "diff", "--cached", "--name-only"); got != "os-layer/runbook.md" {
		t.Errorf("staged after our commit: %q, want the person's os-layer/runbook.md", got)
	}
	if got := gitCLI(t, dir, "status", "--porcelain", "--untracked-files=all"); got != "M  os-layer/runbook.md" {
		t.Errorf("status:\n%s", got)
	}
	if out, err := gitTry(t, dir, "fsck", "--strict", "--no-progress"); err != nil || out != "" {
		t.Errorf("git fsck --strict: %v\n%s", err, out)
	}

	// The journal grows; the next commit has only it.
	writeFile(t, filepath.Join(dir, "rounds", "2025-11", "journal.jsonl"), `{"seq":1,"kind":"session_opened"}`+"\n"+`{"seq":2}`+"\n")
	c2, err := r.CommitFiles(ctx, "round 2025-11: journal", []string{"rounds/2025-11/journal.jsonl", "rounds/2025-11/report.md"})
	if err != nil {
		t.Fatal(err)
	}
	if got := gitCLI(t, dir, "show", "--name-only", "--format=", c2.Hash); got != "rounds/2025-11/journal.jsonl" {
		t.Errorf("second commit holds %q", got)
	}
	if _, err := r.CommitFiles(ctx, "again", []string{"rounds/2025-11/journal.jsonl"}); !errors.Is(err, ErrNoChange) {
		t.Errorf("unchanged file: err = %v, want ErrNoChange", err)
	}

	bad := []struct {
		name    string
		message string
		paths   []string
		want    error
	}{
		{"traversal", "m", []string{"../outside"}, ErrInvalid},
		{"traversal inside", "m", []string{"rounds/../../outside"}, ErrInvalid},
		{"absolute", "m", []string{"/etc/passwd"}, ErrInvalid},
		{"git dir", "m", []string{".git/config"}, ErrInvalid},
		{"git dir by case", "m", []string{".GIT/config"}, ErrInvalid},
		{"unclean", "m", []string{"rounds//x"}, ErrInvalid},
		{"missing file", "m", []string{"rounds/2025-11/absent"}, ErrInvalid},
		{"folder", "m", []string{"rounds/2025-11"}, ErrInvalid},
		{"twice", "m", []string{"rounds/2025-11/report.md", "rounds/2025-11/report.md"}, ErrInvalid},
		{"no paths", "m", nil, ErrInvalid},
		{"empty message", "  ", []string{"rounds/2025-11/report.md"}, ErrInvalid},
		{"someone's staged file", "m", []string{"os-layer/runbook.md"}, ErrDirty},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			before := stateOf(t, dir)
			if _, err := r.CommitFiles(ctx, tt.message, tt.paths); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if diff := cmp.Diff(before, stateOf(t, dir)); diff != "" {
				t.Errorf("changed (-before +after):\n%s", diff)
			}
		})
	}
}

// A sealed segment is committed once: a later commit neither reads it
// nor stores it again, and a sealed path must be one of the paths.
func TestCommitFilesSealed(t *testing.T) {
	ctx := t.Context()
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	seg := "rounds/2025-11/journal-000001.jsonl"
	live := "rounds/2025-11/journal.jsonl"
	writeFile(t, filepath.Join(dir, seg), `{"seq":1,"kind":"session_opened"}`+"\n")
	writeFile(t, filepath.Join(dir, live), `{"seq":2,"kind":"lesson"}`+"\n")
	c, err := r.CommitFilesSealed(ctx, "round 2025-11: journal", []string{live, seg}, []string{seg})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{seg, live}, c.Files); diff != "" {
		t.Errorf("first commit's files (-want +got):\n%s", diff)
	}
	// The segment's working copy changes behind the server's back; the
	// next commit takes the live file only and keeps the branch's segment.
	writeFile(t, filepath.Join(dir, seg), `{"seq":1,"kind":"edited"}`+"\n")
	writeFile(t, filepath.Join(dir, live), `{"seq":2,"kind":"lesson"}`+"\n"+`{"seq":3,"kind":"lesson"}`+"\n")
	c2, err := r.CommitFilesSealed(ctx, "round 2025-11: journal", []string{live, seg}, []string{seg})
	if err != nil {
		t.Fatal(err)
	}
	if got := gitCLI(t, dir, "show", "--name-only", "--format=", c2.Hash); got != live {
		t.Errorf("second commit holds %q, want the live journal only", got)
	}
	if got := gitCLI(t, dir, "show", c2.Hash+":"+seg); got != `{"seq":1,"kind":"session_opened"}` {
		t.Errorf("the branch's segment is %q, want it as first committed", got)
	}
	if _, err := r.CommitFilesSealed(ctx, "again", []string{live, seg}, []string{seg}); !errors.Is(err, ErrNoChange) {
		t.Errorf("nothing new: err = %v, want ErrNoChange", err)
	}
	before := stateOf(t, dir)
	if _, err := r.CommitFilesSealed(ctx, "m", []string{live}, []string{seg}); !errors.Is(err, ErrInvalid) {
		t.Errorf("sealed path not among the paths: err = %v, want ErrInvalid", err)
	}
	if diff := cmp.Diff(before, stateOf(t, dir)); diff != "" {
		t.Errorf("a refused commit changed (-before +after):\n%s", diff)
	}
}

func TestConcurrentWritesAreSerialised(t *testing.T) {
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	ctx := context.Background()
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "control-plane", Text: "lesson " + string(rune('a'+i))})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := gitCLI(t, dir, "rev-list", "--count", "main..HEAD"); got != "8" {
		t.Errorf("%s commits on the working branch, want 8", got)
	}
	if got := strings.Count(readFile(t, filepath.Join(dir, "control-plane", "lessons.md")), "\n## 2025-11-29"); got != 8 {
		t.Errorf("%d new entries, want 8", got)
	}
	if got := gitCLI(t, dir, "status", "--porcelain"); got != "" {
		t.Errorf("status:\n%s", got)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDetachedHeadGetsTheWorkingBranch(t *testing.T) {
	dir := newExampleRepo(t)
	gitCLI(t, dir, "checkout", "-q", "--detach")
	head := gitCLI(t, dir, "rev-parse", "HEAD")
	r := openRepo(t, dir, nil)
	c, err := r.RecordLesson(t.Context(), LessonInput{Kind: KindLesson, Component: "os-layer", Text: "from a detached HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.CreatedBranch || c.Parent != head {
		t.Errorf("%+v", c)
	}
	if got := gitCLI(t, dir, "symbolic-ref", "--short", "HEAD"); got != "mcp-patch/round-2025-11" {
		t.Errorf("HEAD on %s", got)
	}
}

// A commit reads only the files that changed since they were last hashed;
// a file changed within the racy window, or edited behind the server's
// back (a new change time), is read again.
func TestCommitFilesReadsOnlyChangedFiles(t *testing.T) {
	ctx := t.Context()
	dir := newExampleRepo(t)
	hashes := &HashCache{}
	later := time.Now().Add(time.Hour)
	hashes.now = func() time.Time { return later }
	r := openRepo(t, dir, func(o *Options) { o.Hashes = hashes })
	files := []string{"rounds/2025-11/nodes/a.json", "rounds/2025-11/nodes/b.json", "rounds/2025-11/nodes/c.json"}
	for _, f := range files {
		writeFile(t, filepath.Join(dir, f), `{"node":"`+f+`"}`+"\n")
	}
	if _, err := r.CommitFiles(ctx, "round 2025-11: node plans", files); err != nil {
		t.Fatal(err)
	}
	if hashes.Hits() != 0 {
		t.Fatalf("%d hits on the first commit", hashes.Hits())
	}
	writeFile(t, filepath.Join(dir, files[1]), `{"node":"b","changed":true}`+"\n")
	c, err := r.CommitFiles(ctx, "round 2025-11: b changed", files)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{files[1]}, c.Files); diff != "" || hashes.Hits() != 2 {
		t.Errorf("second commit: %d hits, files (-want +got):\n%s", hashes.Hits(), diff)
	}
	if got := gitCLI(t, dir, "show", c.Hash+":"+files[1]); got != `{"node":"b","changed":true}` {
		t.Errorf("b on the branch: %q", got)
	}
	// An edit that keeps the size: the change time still differs.
	writeFile(t, filepath.Join(dir, files[0]), strings.Replace(readFile(t, filepath.Join(dir, files[0])), "a.json", "x.json", 1))
	c, err = r.CommitFiles(ctx, "round 2025-11: a edited", files)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{files[0]}, c.Files); diff != "" {
		t.Errorf("a same-size edit was not committed (-want +got):\n%s", diff)
	}
	// Within the racy window nothing is remembered: every file is read.
	hashes.now = time.Now
	before := hashes.Hits()
	writeFile(t, filepath.Join(dir, files[2]), `{"node":"c","changed":true}`+"\n")
	if _, err := r.CommitFiles(ctx, "round 2025-11: c changed", files); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitFiles(ctx, "again", files); !errors.Is(err, ErrNoChange) {
		t.Fatalf("unchanged: %v", err)
	}
	if got := hashes.Hits() - before; got != 4 {
		// a and b were remembered an hour ahead (2 hits each time); c,
		// just written, is read both times.
		t.Errorf("%d hits over two commits, want 4 (a and b twice, c never)", got)
	}
}
