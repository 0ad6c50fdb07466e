package intent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Errors callers branch on. Each is wrapped with what was attempted.
var (
	// ErrNotRepo: the path is not the root of a Git working copy.
	ErrNotRepo = errors.New("not the root of a git working copy")
	// ErrInvalid: bad input (a name, a text, an option); nothing was changed.
	ErrInvalid = errors.New("invalid input")
	// ErrUnknownComponent: no such component folder with an intent.md.
	ErrUnknownComponent = errors.New("unknown component")
	// ErrUnknownDocument: not one of a component's documents, or absent.
	ErrUnknownDocument = errors.New("unknown document")
	// ErrUnknownProperty: the property id is not in the component's intent.md.
	ErrUnknownProperty = errors.New("unknown property")
	// ErrDirty: a file the write would touch has uncommitted changes that are
	// not ours, or the working copy is not clean enough to switch branches.
	ErrDirty = errors.New("uncommitted changes")
	// ErrProtectedBranch: the write would land on a protected branch.
	ErrProtectedBranch = errors.New("protected branch")
	// ErrBusy: another process holds the repository's index lock, or the
	// branch moved while we were committing.
	ErrBusy = errors.New("repository busy")
)

// Defaults for Options' zero values.
const (
	DefaultAuthorName           = "mcp-patch"
	DefaultAuthorEmail          = "mcp-patch@localhost"
	DefaultMaxTextBytes         = 16 << 10
	DefaultMaxDocumentBytes     = 256 << 10
	DefaultMaxVerifyOutputBytes = 64 << 10
	DefaultMaxCommitFileBytes   = 16 << 20
	DefaultPushTimeout          = 2 * time.Minute
)

// Document file names a component may have.
const (
	DocIntent    = "intent.md"
	DocRunbook   = "runbook.md"
	DocChangelog = "changelog.md"
	DocVerify    = "verify.sh"
	DocLessons   = "lessons.md"
	DocSettings  = "settings.yaml"
)

// DocumentNames are the documents of a component, in listing order.
var DocumentNames = []string{DocIntent, DocRunbook, DocChangelog, DocVerify, DocLessons, DocSettings}

// RoundsDir is the top-level folder holding round records; it is never a
// component.
const RoundsDir = "rounds"

// Options configure a Repo. Zero values take the documented defaults.
type Options struct {
	// Hashes, when set, remembers the blob hashes of files CommitFiles read
	// (HashCache): a server keeps one for the life of the process, so a
	// commit reads only the files that changed since the last.
	Hashes *HashCache
	// AuthorName and AuthorEmail sign every commit (author and committer).
	// Default "mcp-patch" <mcp-patch@localhost>.
	AuthorName  string
	AuthorEmail string
	// Protected branches are never committed to. Default main, master.
	Protected []string
	// RoundID is the round this handle writes for; it names the default
	// working branch and is the round of lessons that do not name one.
	RoundID string
	// WorkingBranch is the branch every commit goes to. Default
	// "mcp-patch/round-<RoundID>". Writes fail without it or a RoundID.
	WorkingBranch string
	// Remote, when set, names a remote in the repository's git config; the
	// working branch is pushed there after each commit (and by Push), and
	// fetched from there by Fetch.
	Remote string
	// SSH authenticates the push and the fetch when the remote URL is SSH.
	SSH SSHOptions
	// MaxTextBytes caps a lesson or open question's text. Default 16 KiB.
	MaxTextBytes int
	// MaxDocumentBytes caps the text returned for one document; longer
	// documents are cut and marked truncated. Default 256 KiB.
	MaxDocumentBytes int
	// MaxVerifyOutputBytes caps the verify.sh output kept (the tail).
	// Default 64 KiB.
	MaxVerifyOutputBytes int
	// MaxCommitFileBytes caps one file given to CommitFiles. Default 16 MiB.
	MaxCommitFileBytes int
	// VerifyPassEnv names the variables of the server's environment that
	// verify scripts see besides BaseVerifyEnv (e.g. KUBECONFIG, proxies).
	VerifyPassEnv []string
	// LookupEnv reads the server's environment for verify scripts. Default
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// VerifyDisabled, when not empty, says why this handle may not run
	// verify scripts (e.g. the server is read-only); RunVerify then returns
	// ErrVerifyDisabled with it.
	VerifyDisabled string
	// Now is the clock for lesson dates and commit times. Default time.Now.
	Now func() time.Time
	// Log receives what the repository does. Default: discarded.
	Log *slog.Logger
}

// SSHOptions authenticate a push or a fetch over SSH. Host keys are always checked
// against known_hosts; there is no way to turn that off.
type SSHOptions struct {
	// User overrides the user in the remote URL. Default: the URL's user,
	// else "git".
	User string
	// KnownHosts are OpenSSH known_hosts files. Default: $SSH_KNOWN_HOSTS,
	// else ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts. None readable is
	// an error.
	KnownHosts []string
	// KeyFiles are unencrypted private keys to offer.
	KeyFiles []string
	// UseAgent offers the keys of the agent at $SSH_AUTH_SOCK as well.
	UseAgent bool
	// DialTimeout bounds the connection and handshake. Default 10s.
	DialTimeout time.Duration
	// PushTimeout bounds a whole push, and a whole fetch's transfer.
	// Default 2m.
	PushTimeout time.Duration
}

// Repo is an intent repository's working copy. Its methods are safe for
// concurrent use; writes are serialised. It holds no open files between
// calls, so opening one per request is cheap.
type Repo struct {
	root string
	opts Options
	log  *slog.Logger
	mu   sync.Mutex
	// splitMin, when set, is the index size from which commits write it
	// split (splitindex.go; default splitIndexMinEntries, < 0 never).
	splitMin int
	// shared is the shared index last read or written (splitindex.go),
	// under mu.
	shared sharedIndexCache
}

var (
	roundIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`) })
	branchPattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`) })
)

// Open opens the working copy whose root is path. It refuses a path that is
// not the top of a non-bare Git working copy (a subfolder of one included,
// so that writes can never reach a surrounding repository) and bad options.
func Open(path string, opts Options) (*Repo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open intent repo %s: %w", path, err)
	}
	if _, err := os.Stat(filepath.Join(abs, ".git")); err != nil {
		return nil, fmt.Errorf("open intent repo %s: %w (no .git)", abs, ErrNotRepo)
	}
	if _, err := git.PlainOpenWithOptions(abs, &git.PlainOpenOptions{EnableDotGitCommonDir: true}); err != nil {
		return nil, fmt.Errorf("open intent repo %s: %w: %w", abs, ErrNotRepo, err)
	}
	if opts.AuthorName == "" {
		opts.AuthorName = DefaultAuthorName
	}
	if opts.AuthorEmail == "" {
		opts.AuthorEmail = DefaultAuthorEmail
	}
	if opts.Protected == nil {
		opts.Protected = []string{"main", "master"}
	}
	if opts.WorkingBranch == "" && opts.RoundID != "" {
		opts.WorkingBranch = "mcp-patch/round-" + opts.RoundID
	}
	if opts.MaxTextBytes <= 0 {
		opts.MaxTextBytes = DefaultMaxTextBytes
	}
	if opts.MaxDocumentBytes <= 0 {
		opts.MaxDocumentBytes = DefaultMaxDocumentBytes
	}
	if opts.MaxVerifyOutputBytes <= 0 {
		opts.MaxVerifyOutputBytes = DefaultMaxVerifyOutputBytes
	}
	if opts.MaxCommitFileBytes <= 0 {
		opts.MaxCommitFileBytes = DefaultMaxCommitFileBytes
	}
	if opts.SSH.DialTimeout <= 0 {
		opts.SSH.DialTimeout = 10 * time.Second
	}
	if opts.SSH.PushTimeout <= 0 {
		opts.SSH.PushTimeout = DefaultPushTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open intent repo %s: %w", abs, err)
	}
	return &Repo{root: abs, opts: opts, log: log.With("intent_repo", abs)}, nil
}

func (o Options) validate() error {
	var errs []error
	if strings.ContainsAny(o.AuthorName, "<>\n") || strings.ContainsAny(o.AuthorEmail, "<>\n ") {
		errs = append(errs, fmt.Errorf("author %q <%s>: no <, > or newlines", o.AuthorName, o.AuthorEmail))
	}
	if o.RoundID != "" && !roundIDPattern().MatchString(o.RoundID) {
		errs = append(errs, fmt.Errorf("round id %q: want letters, digits, '.', '_', '-' (at most 63)", o.RoundID))
	}
	if o.WorkingBranch != "" {
		if err := checkBranch(o.WorkingBranch); err != nil {
			errs = append(errs, err)
		}
		if slices.Contains(o.Protected, o.WorkingBranch) {
			errs = append(errs, fmt.Errorf("working branch %q: %w", o.WorkingBranch, ErrProtectedBranch))
		}
	}
	if o.Remote != "" && !branchPattern().MatchString(o.Remote) {
		errs = append(errs, fmt.Errorf("remote %q is not a remote name", o.Remote))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

func checkBranch(b string) error {
	ok := branchPattern().MatchString(b) && !strings.Contains(b, "..") && !strings.Contains(b, "//") &&
		!strings.HasSuffix(b, "/") && !strings.HasSuffix(b, ".lock") && !strings.HasSuffix(b, ".") &&
		!strings.Contains(b, "/.") && b != "HEAD"
	if ok {
		ok = plumbing.NewBranchReferenceName(b).Validate() == nil
	}
	if !ok {
		return fmt.Errorf("branch name %q is not a safe git branch name", b)
	}
	return nil
}

// Root is the absolute path of the working copy.
func (r *Repo) Root() string { return r.root }

// WorkingBranch is the branch writes go to; empty when neither a working
// branch nor a round id was given.
func (r *Repo) WorkingBranch() string { return r.opts.WorkingBranch }

// ValidComponentName reports whether name is a DNS-1123 label, the form
// every component folder name takes.
func ValidComponentName(name string) bool {
	return len(validation.IsDNS1123Label(name)) == 0
}

// ComponentSummary is one line of the component list.
type ComponentSummary struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Summary string `json:"summary"`
	// PropertyIDs are the ids of its properties, in order.
	PropertyIDs   []string `json:"property_ids"`
	OpenQuestions int      `json:"open_questions"`
	Lessons       int      `json:"lessons"`
	// Documents are the file names present, in DocumentNames order.
	Documents []string `json:"documents"`
	HasVerify bool     `json:"has_verify"`
	// Problems are format problems found in intent.md or settings.yaml.
	Problems []string `json:"problems" jsonschema:"format problems in intent.md or settings.yaml; empty when well formed"`
}

// Component is everything one component folder holds.
type Component struct {
	Name string `json:"name"`
	// Intent is intent.md parsed (best effort when Problems is not empty).
	Intent Intent `json:"intent"`
	// Settings is settings.yaml parsed; empty when absent or malformed.
	Settings Settings `json:"settings"`
	// Lessons are the entries of lessons.md, oldest first.
	Lessons []Lesson `json:"lessons"`
	// Documents are the text of every document present.
	Documents []Document `json:"documents"`
	// Problems are format problems found in intent.md or settings.yaml.
	Problems []string `json:"problems" jsonschema:"format problems in intent.md or settings.yaml; empty when well formed"`
}

// DocumentRef names a document without its text (the resource list).
type DocumentRef struct {
	URI       string `json:"uri" jsonschema:"resource URI intent://<component>/<file>"`
	Component string `json:"component"`
	Name      string `json:"name"`
	MIMEType  string `json:"mime_type"`
	Size      int64  `json:"size"`
}

// Document is one document's text.
type Document struct {
	URI       string `json:"uri" jsonschema:"resource URI intent://<component>/<file>"`
	Component string `json:"component"`
	Name      string `json:"name"`
	MIMEType  string `json:"mime_type"`
	Text      string `json:"text"`
	// Size is the file's size in bytes; Text holds at most MaxDocumentBytes.
	Size      int64 `json:"size"`
	Truncated bool  `json:"truncated" jsonschema:"the text was cut at the size limit"`
}

// URIScheme is the scheme of document URIs: intent://<component>/<file>.
const URIScheme = "intent"

// DocumentURI returns the URI of a component's document.
func DocumentURI(component, name string) string {
	return URIScheme + "://" + component + "/" + name
}

// ParseURI splits intent://<component>/<file> and validates both parts.
func ParseURI(uri string) (component, name string, err error) {
	rest, ok := strings.CutPrefix(uri, URIScheme+"://")
	if !ok {
		return "", "", fmt.Errorf("parse uri %q: %w: want %s://<component>/<file>", uri, ErrInvalid, URIScheme)
	}
	component, name, ok = strings.Cut(rest, "/")
	if !ok || !ValidComponentName(component) || !slices.Contains(DocumentNames, name) {
		return "", "", fmt.Errorf("parse uri %q: %w: want %s://<component>/<one of %s>", uri, ErrInvalid, URIScheme, strings.Join(DocumentNames, ", "))
	}
	return component, name, nil
}

// MIMEType returns the MIME type of a document name.
func MIMEType(name string) string {
	switch path.Ext(name) {
	case ".md":
		return "text/markdown"
	case ".sh":
		return "text/x-shellscript"
	case ".yaml":
		return "application/yaml"
	}
	return "text/plain"
}

// Components lists the component folders (top-level DNS-1123 folders that
// hold an intent.md), sorted by name.
func (r *Repo) Components() ([]ComponentSummary, error) {
	names, err := r.componentNames()
	if err != nil {
		return nil, err
	}
	out := make([]ComponentSummary, 0, len(names))
	for _, name := range names {
		c, err := r.Component(name)
		if err != nil {
			return nil, err
		}
		s := ComponentSummary{Name: name, Title: c.Intent.Title, Summary: c.Intent.Summary,
			PropertyIDs: c.Intent.PropertyIDs(), OpenQuestions: len(c.Intent.OpenQuestions),
			Lessons: len(c.Lessons), Documents: []string{}, Problems: c.Problems}
		for _, d := range c.Documents {
			s.Documents = append(s.Documents, d.Name)
			s.HasVerify = s.HasVerify || d.Name == DocVerify
		}
		out = append(out, s)
	}
	return out, nil
}

func (r *Repo) componentNames() ([]string, error) {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, fmt.Errorf("list components: %w", err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("list components: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || !ValidComponentName(e.Name()) || e.Name() == RoundsDir {
			continue
		}
		if fi, err := root.Lstat(e.Name() + "/" + DocIntent); err == nil && fi.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// checkComponent validates the name and that the component exists.
func (r *Repo) checkComponent(name string) error {
	if !ValidComponentName(name) || name == RoundsDir {
		return fmt.Errorf("%w: component name %q: want a DNS-1123 label (lower-case letters, digits, '-')", ErrInvalid, name)
	}
	fi, err := os.Lstat(filepath.Join(r.root, name, DocIntent))
	if err != nil || !fi.Mode().IsRegular() || !r.dirIsReal(name) {
		return fmt.Errorf("%w %q (no %s/%s in %s)", ErrUnknownComponent, name, name, DocIntent, r.root)
	}
	return nil
}

// dirIsReal refuses a component folder that is a symbolic link.
func (r *Repo) dirIsReal(name string) bool {
	fi, err := os.Lstat(filepath.Join(r.root, name))
	return err == nil && fi.IsDir()
}

// Component reads every document of one component and parses intent.md,
// settings.yaml and lessons.md. Format problems are reported in Problems,
// not as an error, so that a reader still sees the text.
func (r *Repo) Component(name string) (*Component, error) {
	if err := r.checkComponent(name); err != nil {
		return nil, fmt.Errorf("read component: %w", err)
	}
	c := &Component{Name: name, Lessons: []Lesson{}, Documents: []Document{}, Problems: []string{}}
	for _, doc := range DocumentNames {
		d, err := r.Document(name, doc)
		if errors.Is(err, ErrUnknownDocument) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read component %s: %w", name, err)
		}
		c.Documents = append(c.Documents, d)
		if d.Truncated && (doc == DocIntent || doc == DocSettings || doc == DocLessons) {
			c.Problems = append(c.Problems, fmt.Sprintf("%s is larger than %d bytes and was not fully parsed", doc, r.opts.MaxDocumentBytes))
		}
		switch doc {
		case DocIntent:
			in, err := ParseIntent(d.Text)
			c.Intent = in
			c.Problems = append(c.Problems, problemLines(DocIntent, err)...)
		case DocSettings:
			s, err := ParseSettings([]byte(d.Text))
			if err == nil {
				c.Settings = s
			}
			c.Problems = append(c.Problems, problemLines(DocSettings, err)...)
		case DocLessons:
			c.Lessons = ParseLessons(d.Text)
		}
	}
	return c, nil
}

func problemLines(doc string, err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimPrefix(l, ErrMalformed.Error()+": ")
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, doc+": "+l)
		}
	}
	return out
}

// Document returns one document's text, cut at MaxDocumentBytes.
func (r *Repo) Document(component, name string) (Document, error) {
	if err := r.checkComponent(component); err != nil {
		return Document{}, fmt.Errorf("read document: %w", err)
	}
	if !slices.Contains(DocumentNames, name) {
		return Document{}, fmt.Errorf("read document %s/%s: %w (want one of %s)", component, name, ErrUnknownDocument, strings.Join(DocumentNames, ", "))
	}
	rel := component + "/" + name
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return Document{}, fmt.Errorf("read document %s: %w", rel, err)
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return Document{}, fmt.Errorf("read document %s: %w (absent)", rel, ErrUnknownDocument)
	}
	if err != nil {
		return Document{}, fmt.Errorf("read document %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return Document{}, fmt.Errorf("read document %s: %w: not a regular file", rel, ErrInvalid)
	}
	f, err := root.Open(rel)
	if err != nil {
		return Document{}, fmt.Errorf("read document %s: %w", rel, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(r.opts.MaxDocumentBytes)+1))
	if err != nil {
		return Document{}, fmt.Errorf("read document %s: %w", rel, err)
	}
	d := Document{URI: DocumentURI(component, name), Component: component, Name: name,
		MIMEType: MIMEType(name), Size: fi.Size()}
	if len(data) > r.opts.MaxDocumentBytes {
		data = data[:r.opts.MaxDocumentBytes]
		// Do not cut a multi-byte character in half.
		for i := 0; i < utf8.UTFMax-1 && len(data) > 0; i++ {
			if r, size := utf8.DecodeLastRune(data); r != utf8.RuneError || size > 1 {
				break
			}
			data = data[:len(data)-1]
		}
		d.Truncated = true
	}
	d.Text = strings.ToValidUTF8(string(data), "\uFFFD")
	return d, nil
}

// Documents lists every document of every component (the MCP resources).
func (r *Repo) Documents() ([]DocumentRef, error) {
	names, err := r.componentNames()
	if err != nil {
		return nil, err
	}
	out := []DocumentRef{}
	for _, c := range names {
		for _, doc := range DocumentNames {
			fi, err := os.Lstat(filepath.Join(r.root, c, doc))
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			out = append(out, DocumentRef{URI: DocumentURI(c, doc), Component: c, Name: doc,
				MIMEType: MIMEType(doc), Size: fi.Size()})
		}
	}
	return out, nil
}

// RoundSettings merges the settings.yaml of every component into one value.
// A malformed settings.yaml, or one section set by two components, is an
// error: the round must not plan on half-read numbers.
func (r *Repo) RoundSettings() (Settings, error) {
	names, err := r.componentNames()
	if err != nil {
		return Settings{}, fmt.Errorf("read round settings: %w", err)
	}
	var merged Settings
	owners := map[string]string{}
	var errs []error
	for _, c := range names {
		d, err := r.Document(c, DocSettings)
		if errors.Is(err, ErrUnknownDocument) {
			continue
		}
		if err == nil && d.Truncated {
			err = fmt.Errorf("%w: larger than %d bytes", ErrMalformed, r.opts.MaxDocumentBytes)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
			continue
		}
		s, err := ParseSettings([]byte(d.Text))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
			continue
		}
		if err := merged.merge(s, c, owners); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return Settings{}, fmt.Errorf("read round settings: %w", errors.Join(errs...))
	}
	return merged, nil
}
