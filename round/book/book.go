package book

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// Book keeps the rounds' journals in the intent repository under
// rounds/<round-id>/. The server holds the open round's journal for
// writing; a second process gets round.ErrLocked. Read-only tools read
// through views (View, CurrentView): they open nothing for writing, so a
// read-only call, even as a process's first, writes nothing and locks no
// writer out.
type Book struct {
	// Root is the intent repository's working copy.
	Root string
	// AnchorDir is where each round's journal is anchored
	// (round.WithAnchor): a directory of the server's state directory,
	// out of the agent's reach. Required to open a round for writing.
	AnchorDir string
	Clock     func() time.Time
	// Observe, when set, is every journal's observer (round.WithObserver).
	Observe func(round.Record, *round.State)
	// ReadOnly (a --read-only server) opens every journal as a view
	// (round.OpenView): nothing this process does can write a round.
	ReadOnly bool
	// CheckDecision, when set, proves each decision record a journal
	// replays at open (round.WithDecisionCheck) for round id.
	CheckDecision func(id string) func(round.Record) error
	// Foreign, when set, says whether round id is another environment's: a
	// repository of several environments holds their rounds side by side
	// (staging's merged into production's working copy), and another
	// server's journal is not anchored here. OpenRounds leaves such a
	// round out, so it is never taken for this server's open round.
	Foreign func(id string) bool
	// SegmentBytes, when set, is the size at which a round's live journal
	// and audit log are sealed into segments (round.WithSegmentBytes;
	// default round.SegmentBytes). Tests seal small logs.
	SegmentBytes int64

	mu   sync.Mutex
	open map[string]*round.Journal
	// views are the journals read by read-only calls, by round id.
	views map[string]*round.Journal
	// headers is each round's last decoded plan header, by the sha256 of
	// the plan.json bytes it was decoded from.
	headers byContent[plan.Header]
	// plans is each round's last decoded plan, likewise (signedPlan's,
	// shared and never written).
	plans byContent[plan.Fleet]
	// committed is, per round id, what this book's commits have already
	// stored, so that the next commit names only what changed since.
	committed map[string]*committedFiles
	// planMD is each round's plan.md rendered from the plan.json bytes
	// whose sha256 is its key (the last), under its own lock (reports.go).
	planMDMu sync.Mutex
	planMD   byContent[[]byte]
}

// committedFiles is what a book's commits of one round have stored: until
// the first commit since the book opened (a server that starts again does
// not know what the last one left uncommitted), Files names every node
// file and segment; after it, only the node files written since and the
// segments not yet committed.
type committedFiles struct {
	// scanned: a commit naming every file of the round has been made (or
	// found nothing to store).
	scanned bool
	// written are the node files (repository paths) written since the
	// last commit, with the generation of their last write.
	written map[string]uint64
	gen     uint64
	// segments are the sealed segments (repository paths) a commit holds.
	segments map[string]bool
}

// byContent keeps, per round, one value decoded from plan.json and the
// sha256 of the bytes it was decoded from (the last). The caller holds
// the book's lock.
type byContent[T any] map[string]decoded[T]

type decoded[T any] struct {
	sum [sha256.Size]byte
	v   T
}

func (m byContent[T]) get(id string, sum [sha256.Size]byte) (T, bool) {
	c, ok := m[id]
	if !ok || c.sum != sum {
		var zero T
		return zero, false
	}
	return c.v, true
}

func (m *byContent[T]) keep(id string, sum [sha256.Size]byte, v T) {
	if *m == nil {
		*m = byContent[T]{}
	}
	(*m)[id] = decoded[T]{sum, v}
}

// CachedHeader is round id's plan header decoded from plan.json bytes
// whose sha256 is sum, if it is the one kept; a copy the caller may change.
func (b *Book) CachedHeader(id string, sum [sha256.Size]byte) (plan.Header, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.headers.get(id, sum)
	if !ok {
		return plan.Header{}, false
	}
	return cloneHeader(h), true
}

// cloneHeader is h with slices of its own, so that the kept header and a
// caller's copy never share one.
func cloneHeader(h plan.Header) plan.Header {
	h.Summary, h.Blockers, h.Risks, h.Nodes = slices.Clone(h.Summary), slices.Clone(h.Blockers), slices.Clone(h.Risks), slices.Clone(h.Nodes)
	return h
}

// KeepHeader keeps round id's plan header, decoded from bytes whose sha256
// is sum (one per round: the last).
func (b *Book) KeepHeader(id string, sum [sha256.Size]byte, h plan.Header) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.headers.keep(id, sum, cloneHeader(h))
}

// SharedPlan is round id's plan decoded from plan.json bytes whose sha256
// is sum, if it is the one kept. It is shared: the caller only reads it.
func (b *Book) SharedPlan(id string, sum [sha256.Size]byte) (plan.Fleet, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.plans.get(id, sum)
}

// KeepPlan keeps round id's plan, decoded from bytes whose sha256 is sum
// (one per round: the last).
func (b *Book) KeepPlan(id string, sum [sha256.Size]byte, f plan.Fleet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.plans.keep(id, sum, f)
}

// New returns a book over an intent repository working copy whose
// rounds are anchored in anchorDir.
func New(root, anchorDir string, clock func() time.Time) *Book {
	return &Book{Root: root, AnchorDir: anchorDir, Clock: clock, open: map[string]*round.Journal{}}
}

// The files of a round's record the book names besides the journal's
// (round.JournalFile, round.AuditFile, ...).
const (
	// PlanFile is the reviewed plan (round/plan), PlanMDFile its render
	// for people.
	PlanFile   = "plan.json"
	PlanMDFile = "plan.md"
	// PlanSignaturesFile is the report of the plan's signatures.
	PlanSignaturesFile = "plan-signatures.json"
	// BaselineFile is the stack's health before the round.
	BaselineFile = "baseline.json"
	// NodePlansDir holds one node plan per node (nodes/<node>.json),
	// WindowSignaturesDir one report of a window approval per node.
	NodePlansDir        = "nodes"
	WindowSignaturesDir = "window-signatures"
)

// topFiles are the round's top-level record files a commit names when
// present.
var topFiles = []string{round.JournalFile, round.AuditFile, round.ReportFile, round.TimelineFile, BaselineFile,
	PlanFile, PlanMDFile, PlanSignaturesFile, ProofsFile}

// AnchorsDir is where the rounds' anchors live under the state directory.
const AnchorsDir = "journals"

// AnchorDir is where a server whose state directory is stateDir anchors
// its rounds' journals.
func AnchorDir(stateDir string) string { return filepath.Join(stateDir, AnchorsDir) }

func (b *Book) now() time.Time {
	if b.Clock != nil {
		return b.Clock()
	}
	return time.Now()
}

// Dir is round id's folder in the working copy, rounds/<id>.
func (b *Book) Dir(id string) string { return filepath.Join(b.Root, "rounds", id) }

// Journal opens (creating when create is set) the journal of round id.
func (b *Book) Journal(id string, create bool) (*round.Journal, error) {
	if !round.ValidRoundID(id) {
		return nil, refuse("Use a round id such as 2026-11 (letters, digits, '.', '_', '-').", fmt.Sprintf("round id %q is not valid", id))
	}
	if b.ReadOnly {
		if create {
			return nil, refuse("Use a server that is not read-only to plan a round.", "this server is read-only: it opens no round for writing")
		}
		return b.View(id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.open[id]; ok {
		return j, nil
	}
	dir := b.Dir(id)
	if _, err := os.Lstat(filepath.Join(dir, round.JournalFile)); err != nil && !create {
		return nil, refuse("Plan the round first (plan_round).", fmt.Sprintf("round %s has no journal in the intent repository", id))
	}
	if b.AnchorDir == "" {
		return nil, refuse("Ask the operator to configure state_dir.", "no state directory is configured: the server anchors each round's journal there and opens no round for writing without it")
	}
	opts := []round.Option{round.WithRepoRoot(b.Root), round.WithAnchor(b.AnchorDir)}
	if b.Clock != nil {
		opts = append(opts, round.WithClock(b.Clock))
	}
	if b.CheckDecision != nil {
		opts = append(opts, round.WithDecisionCheck(b.CheckDecision(id)))
	}
	if b.Observe != nil {
		opts = append(opts, round.WithObserver(b.Observe))
	}
	if b.SegmentBytes > 0 {
		opts = append(opts, round.WithSegmentBytes(b.SegmentBytes))
	}
	j, err := round.Open(dir, opts...)
	if errors.Is(err, round.ErrLocked) {
		return nil, refuse("Another mcp-patch process holds this round's journal (a running server?). Use that one, or stop it.",
			fmt.Sprintf("round %s: %v", id, err))
	}
	if errors.Is(err, round.ErrUnsafePath) {
		return nil, refuse("Ask a person to replace the link with the file itself (or remove it), then call again.",
			fmt.Sprintf("round %s: %v", id, err), "nothing was read or written")
	}
	if errors.Is(err, round.ErrTampered) {
		return nil, TamperRefusal(id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open journal of round %s: %w", id, err)
	}
	b.open[id] = j
	return j, nil
}

// View is round id's journal for a read-only call: the journal this
// process holds for writing when it holds one, else a view of it
// (round.OpenView), which writes nothing and takes no exclusive lock.
func (b *Book) View(id string) (*round.Journal, error) {
	if !round.ValidRoundID(id) {
		return nil, refuse("Use a round id such as 2026-11 (letters, digits, '.', '_', '-').", fmt.Sprintf("round id %q is not valid", id))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.open[id]; ok {
		return j, nil
	}
	if j, ok := b.views[id]; ok {
		return j, nil
	}
	dir := b.Dir(id)
	if _, err := os.Lstat(filepath.Join(dir, round.JournalFile)); err != nil {
		return nil, refuse("Plan the round first (plan_round).", fmt.Sprintf("round %s has no journal in the intent repository", id))
	}
	opts := []round.Option{round.WithRepoRoot(b.Root)}
	if b.Clock != nil {
		opts = append(opts, round.WithClock(b.Clock))
	}
	j, err := round.OpenView(dir, opts...)
	if errors.Is(err, round.ErrUnsafePath) {
		return nil, refuse("Ask a person to replace the link with the file itself (or remove it), then call again.",
			fmt.Sprintf("round %s: %v", id, err), "nothing was read or written")
	}
	if err != nil {
		return nil, fmt.Errorf("read journal of round %s: %w", id, err)
	}
	if b.views == nil {
		b.views = map[string]*round.Journal{}
	}
	b.views[id] = j
	return j, nil
}

// Holds says whether this process holds round id's journal for writing.
func (b *Book) Holds(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.open[id]
	return ok
}

// OpenRounds lists the rounds that are not closed, newest id last
// (this server's only, with Foreign).
func (b *Book) OpenRounds() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(b.Root, "rounds"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() || !round.ValidRoundID(e.Name()) || (b.Foreign != nil && b.Foreign(e.Name())) {
			continue
		}
		b.mu.Lock()
		j, held := b.open[e.Name()]
		b.mu.Unlock()
		var closed bool
		if held {
			closed = j.Closed()
		} else {
			s, _, err := round.ReadState(b.Dir(e.Name()))
			if err != nil {
				continue
			}
			// A journal that is not the server's says nothing about
			// whether its round closed: it stays listed, and opening it
			// answers why it cannot be used.
			closed = s.Closed && (b.AnchorDir == "" || round.CheckAnchored(b.Dir(e.Name()), b.AnchorDir) == nil)
		}
		if !closed {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Current returns the journal of the one open round.
func (b *Book) Current() (*round.Journal, error) {
	return b.current(func(id string) (*round.Journal, error) { return b.Journal(id, false) })
}

// CurrentView is Current for a read-only call: the one open round's
// journal as View answers it.
func (b *Book) CurrentView() (*round.Journal, error) { return b.current(b.View) }

// current opens the one open round's journal with open.
func (b *Book) current(open func(id string) (*round.Journal, error)) (*round.Journal, error) {
	ids, err := b.OpenRounds()
	if err != nil {
		return nil, fmt.Errorf("list rounds: %w", err)
	}
	switch len(ids) {
	case 0:
		month := b.now().UTC().Format("2006-01")
		return nil, &Refusal{Next: "Plan a round first: plan_round with round " + month + " (this month).",
			NextTool: "plan_round", NextArgs: []any{"round", month}, Reasons: []string{"no round is open"}}
	case 1:
		return open(ids[0])
	}
	return nil, refuse("Close or abort the older rounds first.", fmt.Sprintf("several rounds are open: %v", ids))
}

// CurrentID returns the open round's id, or "".
func (b *Book) CurrentID() string {
	ids, err := b.OpenRounds()
	if err != nil || len(ids) != 1 {
		return ""
	}
	return ids[0]
}

// RoundFiles is what a commit of a round's record names: Files, and
// among them Sealed, the sealed segments of its journal and audit log
// (files written once, which a commit need not read again once the branch
// holds them).
type RoundFiles struct {
	Files, Sealed []string
	// written are the node files named because this book wrote them, with
	// the generation of their last write.
	written map[string]uint64
}

// Files returns the repository paths of a round's record files a commit
// must name. The first call since the book opened names every record file
// present; once a commit of them is made (Committed), a call names the
// round's few top-level files, the node files this book wrote since and
// the segments sealed since, so a window's commit does not grow with the
// fleet.
func (b *Book) Files(id string) (RoundFiles, error) {
	path := func(f string) string { return filepath.ToSlash(filepath.Join("rounds", id, f)) }
	var out RoundFiles
	b.mu.Lock()
	c := b.committed[id]
	scanned := c != nil && c.scanned
	var segsDone map[string]bool
	if c != nil {
		out.written = maps.Clone(c.written)
		segsDone = c.segments // replaced by Committed, never changed: safe to read unlocked
	}
	b.mu.Unlock()

	segs, err := round.SegmentFiles(b.Dir(id))
	if err != nil {
		return RoundFiles{}, err
	}
	for _, f := range segs {
		if p := path(f); !segsDone[p] {
			out.Sealed = append(out.Sealed, p)
		}
	}
	for _, f := range topFiles {
		if _, err := os.Stat(filepath.Join(b.Dir(id), f)); err == nil {
			out.Files = append(out.Files, path(f))
		}
	}
	if scanned {
		out.Files = append(out.Files, slices.Sorted(maps.Keys(out.written))...)
	} else {
		for _, folder := range []string{NodePlansDir, WindowSignaturesDir} {
			nodes, err := b.NodeFiles(id, folder)
			if err != nil {
				return RoundFiles{}, err
			}
			for _, n := range nodes {
				out.Files = append(out.Files, path(folder+"/"+n+".json"))
			}
		}
	}
	out.Files = append(out.Files, out.Sealed...)
	return out, nil
}

// Committed tells the book that a commit of round id holds f (or found
// nothing in it to store): the next Files names only what changed since.
// A node file written again after Files named it stays to be named.
func (b *Book) Committed(id string, f RoundFiles) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.pending(id)
	c.scanned = true
	for p, gen := range f.written {
		if c.written[p] == gen {
			delete(c.written, p)
		}
	}
	segs := maps.Clone(c.segments)
	if segs == nil {
		segs = map[string]bool{}
	}
	for _, p := range f.Sealed {
		segs[p] = true
	}
	c.segments = segs
}

// pending returns round id's committedFiles, creating it. The caller holds
// the book's lock.
func (b *Book) pending(id string) *committedFiles {
	if b.committed == nil {
		b.committed = map[string]*committedFiles{}
	}
	c := b.committed[id]
	if c == nil {
		c = &committedFiles{written: map[string]uint64{}}
		b.committed[id] = c
	}
	return c
}

// nodeDir is rounds/<id>/<folder>, a folder of one file per node (the
// node plans, the window signatures).
func (b *Book) nodeDir(id, folder string) string { return filepath.Join(b.Dir(id), folder) }

// WriteNodeFile writes rounds/<id>/<folder>/<node>.json atomically,
// creating the folder when needed; links are refused as WriteFile refuses
// them.
func (b *Book) WriteNodeFile(id, folder, node string, data []byte) error {
	if b.ReadOnly {
		return fmt.Errorf("write %s/%s.json of round %s: %w", folder, node, id, round.ErrReadOnlyView)
	}
	dir := b.nodeDir(id, folder)
	if err := round.CheckDir(b.Root, dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := round.WriteFile(b.Root, dir, node+".json", data); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.pending(id)
	c.gen++
	c.written[filepath.ToSlash(filepath.Join("rounds", id, folder, node+".json"))] = c.gen
	return nil
}

// ReadNodeFile reads rounds/<id>/<folder>/<node>.json (os.ErrNotExist
// when the node has none).
func (b *Book) ReadNodeFile(id, folder, node string) ([]byte, error) {
	return round.ReadFile(b.Root, b.nodeDir(id, folder), node+".json")
}

// NodeFiles names the nodes that have a file in rounds/<id>/<folder>,
// sorted.
func (b *Book) NodeFiles(id, folder string) ([]string, error) {
	dir := b.nodeDir(id, folder)
	if err := round.CheckDir(b.Root, dir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if node, ok := strings.CutSuffix(e.Name(), ".json"); ok && e.Type().IsRegular() && !strings.HasPrefix(node, ".") {
			out = append(out, node)
		}
	}
	return out, nil
}

// WriteFile writes a file of the round's record atomically, never through
// a symbolic link (round.ErrUnsafePath).
func (b *Book) WriteFile(id, name string, data []byte) error {
	if b.ReadOnly {
		return fmt.Errorf("write %s of round %s: %w", name, id, round.ErrReadOnlyView)
	}
	return round.WriteFile(b.Root, b.Dir(id), name, data)
}

// ReadFile reads a file of the round's record; a symbolic link or a file
// outside the repository is refused (round.ErrUnsafePath).
func (b *Book) ReadFile(id, name string) ([]byte, error) {
	return round.ReadFile(b.Root, b.Dir(id), name)
}

// OpenFile opens a file of the round's record to stream it, refused as
// ReadFile refuses.
func (b *Book) OpenFile(id, name string) (*os.File, error) {
	return round.OpenFile(b.Root, b.Dir(id), name)
}

// Close closes every open journal.
func (b *Book) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for id, j := range b.open {
		errs = append(errs, j.Close())
		delete(b.open, id)
	}
	for id, j := range b.views {
		errs = append(errs, j.Close())
		delete(b.views, id)
	}
	return errors.Join(errs...)
}

// OpenState is the open round's state for a reader that opens nothing
// for writing (a metrics scrape): the journal's own state when this book
// holds it, else the state the journal on disk replays to; nil when no
// round is open.
func (b *Book) OpenState() (*round.State, error) {
	ids, err := b.OpenRounds()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	id := ids[len(ids)-1]
	b.mu.Lock()
	j, held := b.open[id]
	b.mu.Unlock()
	if held {
		return j.State(), nil
	}
	st, _, err := round.ReadState(b.Dir(id))
	return st, err
}

// TamperRefusal answers a round whose journal does not reproduce its
// anchor: the round is stopped for a person, who restores the files.
func TamperRefusal(id string, err error) error {
	return refuse(fmt.Sprintf("Stop and ask a person: the round's files in rounds/%s/ are not what the server wrote. "+
		"A person with the server stopped writes them back from the server's anchor (mcp-patch round restore --round %s) "+
		"and commits them, then calls again.", id, id),
		err.Error(), "the server acts on none of this journal: no step of this round runs until it reproduces its anchor")
}
