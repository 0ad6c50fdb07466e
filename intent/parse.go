package intent

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// The four sections of intent.md, in their required order.
const (
	SectionWhy           = "Why it exists"
	SectionProperties    = "Properties it must keep"
	SectionOutOfScope    = "Out of scope"
	SectionOpenQuestions = "Open questions"
)

var sectionOrder = []string{SectionWhy, SectionProperties, SectionOutOfScope, SectionOpenQuestions}

// ErrMalformed marks a document that does not follow the repository's format
// (see examples/intent/README.md).
var ErrMalformed = errors.New("malformed document")

// Intent is a parsed intent.md.
type Intent struct {
	// Title is the text of the "# " heading.
	Title string `json:"title"`
	// Summary is the prose between the title and the first section.
	Summary string `json:"summary"`
	// Why is the prose of "Why it exists".
	Why string `json:"why"`
	// Properties are the bullets of "Properties it must keep", in order.
	Properties []Property `json:"properties" jsonschema:"what the component must keep true, each with a stable id"`
	// OutOfScope are the bullets of "Out of scope".
	OutOfScope []string `json:"out_of_scope"`
	// OpenQuestions are the bullets of "Open questions".
	OpenQuestions []OpenQuestion `json:"open_questions" jsonschema:"contradictions or doubts flagged against a property; the round must not work around them"`
}

// Property is one property a component must keep.
type Property struct {
	// ID is the stable id the bullet starts with (`P3` or **P3**).
	ID string `json:"id" jsonschema:"stable property id such as P3"`
	// Title is the bold lead sentence, when the bullet has one.
	Title string `json:"title,omitempty"`
	// Text is the bullet after the id, lines joined.
	Text string `json:"text"`
	// Retired is true when the property is struck out (~~…~~).
	Retired bool `json:"retired" jsonschema:"the property is struck out and no longer holds"`
}

// OpenQuestion is one bullet of "Open questions".
type OpenQuestion struct {
	// ID is the question's own id (`Q1`), when it has one.
	ID string `json:"id,omitempty"`
	// Property is the id of the first property of this component the
	// question names (in backticks or bold); empty when it names none.
	Property string `json:"property,omitempty" jsonschema:"id of the property the question is about"`
	// Date and Round are set for questions in the form record_lesson writes:
	// "against `P1` (2025-11-12, round 2025-11): …".
	Date  string `json:"date,omitempty"`
	Round string `json:"round,omitempty"`
	// Text is the bullet after its id, lines joined.
	Text string `json:"text"`
}

// Lesson is one entry of lessons.md.
type Lesson struct {
	// Heading is the entry's "## " line without the marker.
	Heading string `json:"heading"`
	// Date, Round and Property are read from a heading of the form
	// "2025-10-09 · round 2025-10 · `P4`"; each may be empty.
	Date     string `json:"date,omitempty"`
	Round    string `json:"round,omitempty"`
	Property string `json:"property,omitempty" jsonschema:"id of the property the lesson bears on"`
	// Environment is the environment whose round wrote the lesson, when
	// environments.yaml names one and the round is named after it
	// (MarkEnvironments); empty otherwise.
	Environment string `json:"environment,omitempty" jsonschema:"environment of the round that wrote it (staging's lessons in production)"`
	// Text is the entry's body.
	Text string `json:"text"`
}

var (
	// idPattern is what a property or question id may look like.
	idPattern   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,31}$`) })
	leadingCode = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^`([^`\n]+)`") })
	leadingBold = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\*\*([^*\n]+)\*\*`) })
	refToken    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("`([^`\n]+)`|\\*\\*([^*\n]+)\\*\\*") })
	questionRef = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile("^against [`*]{1,2}[^`*\n]+[`*]{1,2} \\((\\d{4}-\\d{2}-\\d{2}), round ([^)\n]+)\\):\\s*")
	})
	lessonHead = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile("^(\\d{4}-\\d{2}-\\d{2})(?: · round (\\S+))?(?: · `([^`]+)`)?\\s*$")
	})
	qNumbered = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^Q([0-9]{1,9})$`) })
)

// line is one line of a document with its byte offsets.
type line struct {
	text       string // without the trailing "\n" or "\r\n"
	start, end int    // src[start:end] is the line including its newline
	inFence    bool   // inside (or delimiting) a fenced code block
}

func splitLines(src string) []line {
	lines, _ := scanLines(src)
	return lines
}

// scanLines splits src into lines and reports whether a code fence is still
// open at the end.
func scanLines(src string) ([]line, bool) {
	var out []line
	var fence string
	for start := 0; start < len(src); {
		end := strings.IndexByte(src[start:], '\n')
		if end < 0 {
			end = len(src)
		} else {
			end += start + 1
		}
		text := strings.TrimSuffix(strings.TrimSuffix(src[start:end], "\n"), "\r")
		l := line{text: text, start: start, end: end}
		trimmed := strings.TrimLeft(text, " ")
		indent := len(text) - len(trimmed)
		switch {
		case fence != "":
			l.inFence = true
			if indent <= 3 && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
		case indent <= 3 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			l.inFence = true
			n := len(trimmed) - len(strings.TrimLeft(trimmed, trimmed[:1]))
			fence = strings.Repeat(trimmed[:1], n)
		}
		out = append(out, l)
		start = end
	}
	return out, fence != ""
}

// section is the span of one "## " section.
type section struct {
	name       string
	heading    int // index of the heading line
	body       []line
	start, end int // byte span of the whole section, heading included
}

// outline is the "# " title, the lines before the first section, and the
// sections in document order.
type outline struct {
	title    string
	preamble []line
	sections []section
}

func outlineOf(src string) outline {
	var o outline
	lines := splitLines(src)
	cur := -1
	for i, l := range lines {
		if !l.inFence && strings.HasPrefix(l.text, "## ") {
			if cur >= 0 {
				o.sections[cur].end = l.start
			}
			o.sections = append(o.sections, section{
				name: strings.TrimSpace(l.text[3:]), heading: i, start: l.start, end: len(src),
			})
			cur++
			continue
		}
		if cur < 0 {
			if o.title == "" && !l.inFence && strings.HasPrefix(l.text, "# ") {
				o.title = strings.TrimSpace(l.text[2:])
				continue
			}
			o.preamble = append(o.preamble, l)
			continue
		}
		o.sections[cur].body = append(o.sections[cur].body, l)
	}
	return o
}

// ParseIntent parses intent.md. It returns what it could read even when the
// document is malformed; the error (wrapping ErrMalformed) then lists every
// problem found: a missing, repeated, unknown or misplaced "## " section, a
// property bullet without an id, an id used twice.
func ParseIntent(src string) (Intent, error) {
	o := outlineOf(src)
	in := Intent{Title: o.title, Summary: prose(o.preamble),
		Properties: []Property{}, OutOfScope: []string{}, OpenQuestions: []OpenQuestion{}}
	var problems []error
	if o.title == "" {
		problems = append(problems, errors.New(`no "# " title line`))
	}
	seen := map[string]bool{}
	next := 0
	for _, s := range o.sections {
		pos := indexOf(sectionOrder, s.name)
		switch {
		case pos < 0:
			problems = append(problems, fmt.Errorf("unknown section %q (want exactly: %s)", s.name, strings.Join(sectionOrder, ", ")))
			continue
		case seen[s.name]:
			problems = append(problems, fmt.Errorf("section %q appears twice", s.name))
			continue
		case pos < next:
			problems = append(problems, fmt.Errorf("section %q is out of order (want: %s)", s.name, strings.Join(sectionOrder, ", ")))
		}
		seen[s.name] = true
		next = pos + 1
		switch s.name {
		case SectionWhy:
			in.Why = prose(s.body)
		case SectionProperties:
			ids := map[string]bool{}
			for n, item := range bullets(s.body) {
				p, err := parseProperty(item)
				if err != nil {
					problems = append(problems, fmt.Errorf("property %d: %w", n+1, err))
					continue
				}
				if ids[p.ID] {
					problems = append(problems, fmt.Errorf("property id %q is used twice", p.ID))
					continue
				}
				ids[p.ID] = true
				in.Properties = append(in.Properties, p)
			}
		case SectionOutOfScope:
			in.OutOfScope = append(in.OutOfScope, bullets(s.body)...)
		case SectionOpenQuestions:
			for _, item := range bullets(s.body) {
				in.OpenQuestions = append(in.OpenQuestions, OpenQuestion{Text: item})
			}
		}
	}
	for _, name := range sectionOrder {
		if !seen[name] {
			problems = append(problems, fmt.Errorf("section %q is missing", name))
		}
	}
	for i := range in.OpenQuestions {
		in.OpenQuestions[i] = parseQuestion(in.OpenQuestions[i].Text, in.Properties)
	}
	if len(problems) > 0 {
		return in, fmt.Errorf("%w: %w", ErrMalformed, errors.Join(problems...))
	}
	return in, nil
}

// PropertyIDs returns the ids of the properties, in order.
func (in Intent) PropertyIDs() []string {
	ids := make([]string, 0, len(in.Properties))
	for _, p := range in.Properties {
		ids = append(ids, p.ID)
	}
	return ids
}

// HasProperty reports whether id names one of the properties.
func (in Intent) HasProperty(id string) bool {
	for _, p := range in.Properties {
		if p.ID == id {
			return true
		}
	}
	return false
}

func parseProperty(item string) (Property, error) {
	id, rest, ok := leadingID(item)
	if !ok {
		return Property{}, fmt.Errorf("bullet %q does not start with an id in backticks or bold", clip(item, 40))
	}
	p := Property{ID: id, Text: rest}
	if strings.HasPrefix(rest, "~~") {
		p.Retired = true
	}
	if m := leadingBold().FindStringSubmatch(rest); m != nil {
		p.Title = strings.TrimRight(strings.TrimSpace(m[1]), ".")
	}
	return p, nil
}

// leadingID splits "`P3` rest" or "**P3** rest" into id and rest.
func leadingID(item string) (id, rest string, ok bool) {
	for _, re := range []*regexp.Regexp{leadingCode(), leadingBold()} {
		if m := re.FindStringSubmatchIndex(item); m != nil {
			id = item[m[2]:m[3]]
			if !idPattern().MatchString(id) {
				return "", "", false
			}
			return id, strings.TrimSpace(item[m[1]:]), true
		}
	}
	return "", "", false
}

func parseQuestion(item string, props []Property) OpenQuestion {
	q := OpenQuestion{Text: item}
	if id, rest, ok := leadingID(item); ok && !hasProperty(props, id) {
		q.ID, q.Text = id, rest
	}
	for _, m := range refToken().FindAllStringSubmatch(q.Text, -1) {
		ref := m[1] + m[2]
		if hasProperty(props, ref) {
			q.Property = ref
			break
		}
	}
	if m := questionRef().FindStringSubmatch(q.Text); m != nil {
		q.Date, q.Round = m[1], m[2]
	}
	return q
}

func hasProperty(props []Property, id string) bool {
	for _, p := range props {
		if p.ID == id {
			return true
		}
	}
	return false
}

// bullets returns the top-level list items of a section body, each with its
// continuation lines joined: lines of one paragraph by a space, paragraphs by
// a blank line. An item ends at the next "- " / "* " / "+ " at column 0, at a
// heading, or at a blank line followed by a line that is not indented.
func bullets(body []line) []string {
	var items []string
	var cur []string
	in := false
	blank := false
	flush := func() {
		if in {
			items = append(items, joinParagraphs(cur))
		}
		cur, in, blank = nil, false, false
	}
	for _, l := range body {
		t := l.text
		switch {
		case !l.inFence && isBullet(t):
			flush()
			in = true
			cur = []string{strings.TrimSpace(t[2:])}
		case !in:
		case strings.TrimSpace(t) == "":
			blank = true
		case !l.inFence && strings.HasPrefix(t, "#"):
			flush()
		case blank && !strings.HasPrefix(t, " ") && !strings.HasPrefix(t, "\t"):
			flush()
		default:
			if blank {
				cur = append(cur, "")
				blank = false
			}
			cur = append(cur, strings.TrimSpace(t))
		}
	}
	flush()
	return items
}

func isBullet(t string) bool {
	return len(t) >= 2 && (t[0] == '-' || t[0] == '*' || t[0] == '+') && t[1] == ' '
}

// prose returns the non-blank text of lines, paragraphs separated by a blank
// line, lines of a paragraph kept as they are.
func prose(lines []line) string {
	var b strings.Builder
	blank := false
	for _, l := range lines {
		if strings.TrimSpace(l.text) == "" && !l.inFence {
			blank = b.Len() > 0
			continue
		}
		if blank {
			b.WriteString("\n\n")
			blank = false
		} else if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(strings.TrimRight(l.text, " \t"))
	}
	return b.String()
}

func joinParagraphs(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		switch {
		case i == 0:
		case p == "":
			continue
		case parts[i-1] == "":
			b.WriteString("\n\n")
		default:
			b.WriteString(" ")
		}
		b.WriteString(p)
	}
	return b.String()
}

// ParseLessons parses lessons.md: each "## " heading outside code blocks
// starts an entry; text before the first entry is the file's preamble.
func ParseLessons(src string) []Lesson {
	o := outlineOf(src)
	lessons := make([]Lesson, 0, len(o.sections))
	for _, s := range o.sections {
		l := Lesson{Heading: s.name, Text: prose(s.body)}
		if m := lessonHead().FindStringSubmatch(s.name); m != nil {
			l.Date, l.Round, l.Property = m[1], m[2], m[3]
		}
		lessons = append(lessons, l)
	}
	return lessons
}

// nextQuestionID returns Q<n+1> where n is the highest Q<n> id in use.
func nextQuestionID(qs []OpenQuestion) string {
	highest := 0
	for _, q := range qs {
		if m := qNumbered().FindStringSubmatch(q.ID); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > highest {
				highest = n
			}
		}
	}
	return "Q" + strconv.Itoa(highest+1)
}

// appendOpenQuestion returns src with a new bullet at the end of the "Open
// questions" section. The caller has validated the text (checkText).
func appendOpenQuestion(src, id, property, date, round, text string) (string, error) {
	o := outlineOf(src)
	var open *section
	for i := range o.sections {
		if o.sections[i].name == SectionOpenQuestions {
			open = &o.sections[i]
		}
	}
	if open == nil {
		return "", fmt.Errorf("%w: no %q section", ErrMalformed, SectionOpenQuestions)
	}
	if _, unclosed := scanLines(src); unclosed && open.end == len(src) {
		return "", fmt.Errorf("%w: a code block in %q is never closed", ErrMalformed, SectionOpenQuestions)
	}
	item := fmt.Sprintf("- `%s` against `%s` (%s, round %s): %s\n", id, property, date, round, indentContinuation(text))
	head := strings.TrimRight(src[:open.end], " \t\r\n")
	tail := src[open.end:]
	sep := "\n\n"
	if last := lastNonBlank(open.body); last != nil && !last.inFence && (isBullet(last.text) || strings.HasPrefix(last.text, " ")) {
		sep = "\n"
	}
	out := head + sep + item
	if tail != "" {
		out += "\n" + tail
	}
	return out, nil
}

// appendLesson returns lessons.md with a new dated entry at the end.
func appendLesson(src, component, date, round, property, text string) string {
	if strings.TrimSpace(src) == "" {
		src = "# Lessons — " + component + "\n\nWhat past rounds taught us, newest last.\n"
	}
	heading := "## " + date + " · round " + round
	if property != "" {
		heading += " · `" + property + "`"
	}
	return strings.TrimRight(src, " \t\r\n") + "\n\n" + heading + "\n\n" + text + "\n"
}

func lastNonBlank(lines []line) *line {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i].text) != "" {
			return &lines[i]
		}
	}
	return nil
}

// indentContinuation indents every line after the first by two spaces so the
// text stays inside its list item; blank lines stay blank.
func indentContinuation(text string) string {
	lines := strings.Split(text, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" {
			lines[i] = "  " + lines[i]
		}
	}
	return strings.Join(lines, "\n")
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
