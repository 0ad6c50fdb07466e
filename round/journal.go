package round

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File names inside rounds/<round-id>/.
const (
	JournalFile = "journal.jsonl"
	StateFile   = "state.json"
	AuditFile   = "audit.jsonl"
	ReportFile  = "report.md"
	// TimelineFile is the SVG timeline the report links to.
	TimelineFile = "timeline.svg"
)

// ErrLocked is returned by Open when another process holds the journal
// open for writing.
var ErrLocked = errors.New("round journal is open for writing by another process")

// Journal is a round's append-only journal, its state and its audit log.
// Its methods are safe for concurrent use; appends are serialized and each
// is on disk (fsync'd) before it returns.
type Journal struct {
	dir     string
	root    string // the repository the round directory must be inside; "" unchecked
	roundID string
	log     *slog.Logger
	clock   func() time.Time

	mu     sync.Mutex
	f      *os.File
	size   int64
	state  *State
	broken error // a failed write that could not be undone: refuse appends

	audit     *os.File
	auditSize int64
	auditSeq  uint64

	opened OpenReport

	// snapSeq is the last_seq of the state.json on disk, snapBytes its
	// size, sinceSnap the journal bytes appended after it (see snapshotDue).
	snapSeq   uint64
	snapBytes int64
	sinceSnap int64

	// segments is how many sealed segments the journal has, sealedBytes
	// their size; auditSegments the audit log's. The live files are
	// sealed once they hold segBytes (SegmentBytes).
	segments      int
	sealedBytes   int64
	auditSegments int
	segBytes      int64

	// view: opened by OpenView, it writes nothing and reads the journal
	// again when it changed (viewMod, size, viewSegments: as last read);
	// viewSealed is the state the sealed segments make, kept so that a
	// refresh reads only the segments sealed since and the live file.
	view          bool
	viewMod       time.Time
	viewRecords   int
	viewSegments  int
	viewSealed    *State
	viewSealedRec int

	// observe is told of every record on disk (WithObserver).
	observe func(Record, *State)

	// anchorDir is where the round's anchor lives (WithAnchor), anc the
	// open anchor; nil: unanchored (tests of this package, views).
	anchorDir string
	anc       *anchor

	// checkDecision proves a decision record at replay (WithDecisionCheck).
	checkDecision func(Record) error

	// splitWrite, for the crash test only, writes each line in two parts
	// with this pause between, so a kill can land mid-line.
	splitWrite time.Duration
}

// OpenReport says what Open found and repaired.
type OpenReport struct {
	// Records is how many journal records were replayed.
	Records int `json:"records"`
	// TornBytes is the length of a torn last line (a crash mid-write) that
	// was saved to TornSavedAs and truncated away; 0 when none.
	TornBytes   int    `json:"torn_bytes,omitempty"`
	TornSavedAs string `json:"torn_saved_as,omitempty"`
	// StateFileStale says state.json disagreed with the journal: it was
	// missing while the journal had records, or it is not the state the
	// journal's first last_seq records make (it was rewritten from the
	// journal). A state.json behind the journal is not stale: it is the
	// snapshot of a prefix.
	StateFileStale bool `json:"state_file_stale,omitempty"`
	// NeedsRecheck lists the steps left in flight by a process that died.
	NeedsRecheck []Target `json:"needs_recheck,omitempty"`
	// AuditTornBytes is the length of a torn last line of audit.jsonl that
	// was saved beside it and truncated.
	AuditTornBytes int `json:"audit_torn_bytes,omitempty"`
	// Restored is the record written back from the anchor: the journal
	// lacked exactly the anchor's last record (a crash between the
	// anchor's write and the journal's, or that record cut away).
	Restored uint64 `json:"restored,omitempty"`
}

// Target is a step on a node ("" for round-level steps).
type Target struct {
	Node string `json:"node,omitempty"`
	Step Step   `json:"step"`
}

// Option adjusts Open.
type Option func(*Journal)

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(j *Journal) { j.clock = now } }

// WithObserver has f called with every record once it is on disk, and the
// state it made, while the journal's lock is held: f must not block and
// must not write to this journal (hand the work to a goroutine). The state
// is shared, not a copy: an append makes a new state and never changes one
// it made before, so f (and whoever it hands the state to) may keep it but
// only reads it.
// It is how notifications, metrics and Kubernetes Events follow the round
// whichever tool recorded the step.
func WithObserver(f func(Record, *State)) Option { return func(j *Journal) { j.observe = f } }

// WithDecisionCheck has Open prove every decision record it replays with
// check (the caller verifies the person's kept signature again): a
// decision whose check fails counts for nothing, and the state names it
// (State.Unproven). The server's own appends were checked before they
// were written.
func WithDecisionCheck(check func(Record) error) Option {
	return func(j *Journal) { j.checkDecision = check }
}

// replay applies one record read at open to st.
func (j *Journal) replay(st *State, rec Record) error {
	if rec.Kind == KindDecision && j.checkDecision != nil {
		if err := j.checkDecision(rec); err != nil {
			j.log.Warn("a decision record is not proven by a kept signature; it counts for nothing", "round", j.roundID, "seq", rec.Seq, "err", err)
			return st.ApplyUnproven(rec, err.Error())
		}
	}
	return st.Apply(rec)
}

// WithRepoRoot makes Open refuse a round directory that is not inside the
// repository at root or is reached through a symbolic link (CheckDir).
// Round files are always opened without following symbolic links.
func WithRepoRoot(root string) Option { return func(j *Journal) { j.root = root } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(j *Journal) { j.log = l } }

// Open opens (creating it if needed) the journal of the round whose
// directory is dir, rounds/<round-id>/; the directory name is the round id.
// It takes an exclusive lock (a second writer gets ErrLocked), replays the
// journal into the state, saves and truncates a torn last line (recording
// that it did), and appends a session_opened record: steps still in flight
// come back with NeedsRecheck.
func Open(dir string, opts ...Option) (*Journal, error) {
	dir = filepath.Clean(dir)
	id := filepath.Base(dir)
	if !ValidRoundID(id) {
		return nil, fmt.Errorf("open round journal %s: directory name %q is not a valid round id", dir, id)
	}
	j := &Journal{dir: dir, roundID: id, clock: time.Now, log: slog.New(slog.DiscardHandler), segBytes: SegmentBytes}
	for _, o := range opts {
		o(j)
	}
	if err := j.open(); err != nil {
		j.closeFiles()
		return nil, fmt.Errorf("open round journal %s: %w", dir, err)
	}
	return j, nil
}

func (j *Journal) open() error {
	if j.root != "" {
		if err := CheckDir(j.root, j.dir); err != nil {
			return err
		}
	}
	if err := mkdirSynced(j.dir); err != nil {
		return err
	}
	if j.root != "" {
		if err := CheckDir(j.root, j.dir); err != nil {
			return err
		}
	}
	if err := checkRecordFiles(j.dir); err != nil {
		return err
	}
	path := filepath.Join(j.dir, JournalFile)
	_, statErr := os.Lstat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := openFile(j.dir, JournalFile, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	j.f = f
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return ErrLocked
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if created {
		if err := syncDir(j.dir); err != nil {
			return err
		}
	}
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	sc, err := scanLines(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(sc.torn) > 0 || sc.missingNewline {
		// Readers (OpenView) wait while the bytes they read change.
		unlock, err := repairLock(f)
		if err != nil {
			return err
		}
		err = j.repairTail(f, path, &sc)
		if uerr := unlock(); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	j.size = int64(sc.good)

	all, err := j.openSegments(f, path, data, &sc)
	if err != nil && j.anchorDir != "" && !errors.Is(err, ErrUnsafePath) && !errors.Is(err, os.ErrNotExist) {
		// An anchored journal's segments are the server's: one missing,
		// out of place or cut is not what it left.
		return &TamperError{Round: j.roundID, Reason: "the sealed segments are not as the server left them: " + err.Error()}
	}
	if err != nil {
		return err
	}
	if j.anchorDir != "" {
		if err := j.openAnchored(f, &all); err != nil {
			return err
		}
	}

	snap, snapSize := j.readSnapshot()
	st := NewState(j.roundID)
	snapMatches := snap == nil && len(all.records) == 0
	for _, rec := range all.records {
		if err := j.replay(st, rec); err != nil {
			return fmt.Errorf("replay %s: %w", path, err)
		}
		if snap != nil && st.LastSeq == snap.LastSeq {
			snapMatches = stateEqual(st, snap)
		}
	}
	if st.RoundID != j.roundID {
		return fmt.Errorf("journal belongs to round %s, not %s", st.RoundID, j.roundID)
	}
	j.state = st
	j.opened.Records = len(all.records)
	j.opened.StateFileStale = !snapMatches
	if snapMatches && snap != nil {
		j.snapSeq, j.snapBytes = snap.LastSeq, snapSize
		j.sinceSnap = j.sealedBytes + j.size - snap.journalBytes(all)
	}
	if j.opened.StateFileStale {
		j.log.Info("state file disagreed with the journal; rebuilt from the journal", "round", j.roundID)
	}
	j.removeStaleTemps()
	if err := j.openAudit(); err != nil {
		return err
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.recordTornFiles(); err != nil {
		return err
	}
	if _, err := j.appendLocked(Record{Kind: KindSessionOpened, Round: j.roundID,
		Detail: fmt.Sprintf("pid %d", os.Getpid())}); err != nil {
		return err
	}
	if j.opened.StateFileStale || j.snapSeq+1 < j.state.LastSeq {
		if err := j.writeSnapshot(); err != nil {
			j.log.Warn("could not write the state snapshot; the journal is intact", "round", j.roundID, "err", err)
		}
	}
	j.opened.NeedsRecheck = j.state.needsRecheck()
	for _, t := range j.opened.NeedsRecheck {
		j.log.Warn("step was in flight when the previous process stopped; re-check before going on",
			"round", j.roundID, "node", t.Node, "step", t.Step)
	}
	return nil
}

// openSegments counts and reads the journal's sealed segments, empties a
// live file that still repeats the last of them (a seal cut off between
// its two steps), and answers every record, the sealed ones first, with
// their ends as offsets into the whole journal. j.size is the live file's.
func (j *Journal) openSegments(f *os.File, path string, data []byte, sc *scanned) (scanned, error) {
	n, err := segmentCount(j.dir, JournalFile)
	if err != nil {
		return scanned{}, err
	}
	j.segments = n
	if n == 0 {
		return *sc, nil
	}
	last, err := readFile(j.dir, segmentName(JournalFile, n))
	if err != nil {
		return scanned{}, err
	}
	dropped, err := dropRepeatedSegment(f, path, data[:min(sc.good, len(data))], last)
	if err != nil {
		return scanned{}, err
	}
	if dropped {
		j.log.Warn("the live journal repeated its last sealed segment (a seal cut off); emptied it", "round", j.roundID, "segment", segmentName(JournalFile, n))
		*sc = scanned{}
		j.size = 0
	}
	all, err := readSealed(j.dir, 1, n, 0)
	if err != nil {
		return scanned{}, err
	}
	j.sealedBytes = int64(all.good)
	for i := range sc.records {
		all.records = append(all.records, sc.records[i])
		all.ends = append(all.ends, int(j.sealedBytes)+sc.ends[i])
	}
	all.good += sc.good
	return all, nil
}

// repairTail saves and truncates a torn last line and completes a last
// record whose newline was not written; sc.good follows.
func (j *Journal) repairTail(f *os.File, path string, sc *scanned) error {
	if len(sc.torn) > 0 {
		saved, err := j.saveTorn(JournalFile, sc.good, sc.torn)
		if err != nil {
			return err
		}
		if err := f.Truncate(int64(sc.good)); err != nil {
			return fmt.Errorf("truncate torn tail of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
		j.opened.TornBytes, j.opened.TornSavedAs = len(sc.torn), saved
		j.log.Warn("round journal had a torn last line", "round", j.roundID, "bytes", len(sc.torn), "saved_as", saved)
	}
	if sc.missingNewline {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return fmt.Errorf("complete last line of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
		sc.good++
	}
	return nil
}

func (s *State) needsRecheck() []Target {
	var out []Target
	for _, n := range s.Nodes {
		for _, st := range NodeSteps {
			if r := n.Steps[st]; r != nil && r.NeedsRecheck {
				out = append(out, Target{Node: n.Node, Step: st})
			}
		}
	}
	for _, st := range RoundSteps {
		if r := s.RoundSteps[st]; r != nil && r.NeedsRecheck {
			out = append(out, Target{Step: st})
		}
	}
	return out
}

// Dir is the round's directory.
func (j *Journal) Dir() string { return j.dir }

// RoundID is the round's id (the directory name).
func (j *Journal) RoundID() string { return j.roundID }

// Opened says what Open found and repaired.
func (j *Journal) Opened() OpenReport { return j.opened }

// State returns a copy of the current state.
func (j *Journal) State() *State {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshView()
	return j.state.Clone()
}

// Shared returns the current state itself, not a copy: the caller only
// reads it. An append never changes a state it made (it applies the next
// record to a successor), so what Shared returned stays as it was while
// the round goes on. Use State for a copy to change.
func (j *Journal) Shared() *State {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshView()
	return j.state
}

// Closed says whether the round is closed, without copying the state.
func (j *Journal) Closed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshView()
	return j.state.Closed
}

// StepRun returns a copy of the run of step on node (node "" for a round
// step), or nil: the copy of one run, not of the whole state (State's
// cost grows with the round's windows).
func (j *Journal) StepRun(step Step, node string) *StepRun {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshView()
	r := j.state.StepRun(step, node)
	if r == nil {
		return nil
	}
	c := *r
	c.Attempts = slices.Clone(r.Attempts)
	return &c
}

// Hold runs fn with the journal's lock held: no record is appended while
// it runs, so a commit of the round's files takes journal.jsonl whole and
// state.json as the snapshot of one of its prefixes (never a record the
// journal does not hold). An anchored journal first checks its files
// against the anchor (Verify): a commit never stores a journal the server
// did not write, and fn does not run.
func (j *Journal) Hold(fn func() error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.verifyLocked(true); err != nil {
		return err
	}
	return fn()
}

// Close releases the lock and closes the files.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var serr error
	if !j.view && j.broken == nil && j.f != nil && j.snapSeq != j.state.LastSeq {
		serr = j.writeSnapshot()
	}
	err := j.closeFiles()
	j.broken = errors.New("journal closed")
	return errors.Join(serr, err)
}

func (j *Journal) closeFiles() error {
	var errs []error
	if j.f != nil {
		errs = append(errs, j.f.Close())
		j.f = nil
	}
	if j.audit != nil {
		errs = append(errs, j.audit.Close())
		j.audit = nil
	}
	if j.anc != nil {
		errs = append(errs, j.anc.close())
		j.anc = nil
	}
	return errors.Join(errs...)
}

func (j *Journal) now() time.Time { return j.clock().UTC().Round(0) }

// Plan records the order and the soak length from the intent. It is
// admitted until the first window opens.
func (j *Journal) Plan(order Order, soak time.Duration, m Meta) (Record, error) {
	if soak < 0 {
		return Record{}, fmt.Errorf("plan round %s: negative soak %s", j.roundID, soak)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.state.Admit(StepPlan, "", j.now()); err != nil {
		return Record{}, err
	}
	return j.appendLocked(withMeta(Record{Kind: KindPlan, Plan: &Schedule{Order: order, Soak: Duration(soak)}}, m))
}

// StartStep records that step starts on node ("" for round-level steps),
// if the standing rules admit it now; a refusal is a *RuleError and
// records nothing. Call it before acting, so a crash leaves the step in
// flight (and flagged NeedsRecheck) rather than unrecorded.
func (j *Journal) StartStep(step Step, node string, m Meta) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.state.Admit(step, node, j.now()); err != nil {
		return Record{}, err
	}
	return j.appendLocked(withMeta(Record{Kind: KindStepStarted, Step: step, Node: node}, m))
}

// RestartStep records a fresh, approved start of a step that is still in
// flight but, as its host showed, never began there (the process that
// started it stopped first). Only a new approval may do that: m.ApprovalID
// and m.PlanDigest are required. The earlier attempt is kept as abandoned.
func (j *Journal) RestartStep(step Step, node string, m Meta) (Record, error) {
	if m.ApprovalID == "" || m.PlanDigest == "" {
		return Record{}, fmt.Errorf("restart %s on %q: a fresh approval and its plan digest are required", step, node)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.state.AdmitRestart(step, node); err != nil {
		return Record{}, err
	}
	return j.appendLocked(withMeta(Record{Kind: KindStepStarted, Step: step, Node: node}, m))
}

// FinishStep records that a step in flight finished green.
func (j *Journal) FinishStep(step Step, node string, m Meta) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(withMeta(Record{Kind: KindStepFinished, Step: step, Node: node, Outcome: OutcomeDone}, m))
}

// FailStep records that a step in flight failed; m.Detail says why. The
// round stops until a person records resume or abort.
func (j *Journal) FailStep(step Step, node string, m Meta) (Record, error) {
	if strings.TrimSpace(m.Detail) == "" {
		return Record{}, fmt.Errorf("record failure of %s on %q: say why (Meta.Detail)", step, node)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(withMeta(Record{Kind: KindStepFailed, Step: step, Node: node, Outcome: OutcomeFailed}, m))
}

// InterruptStep records that this server stopped following a step in
// flight whose work on the host runs on (OutcomeInterrupted): the round
// stops until a person records resume or abort, and the step stays in
// flight, to be observed after a resume; m.Detail says why.
func (j *Journal) InterruptStep(step Step, node string, m Meta) (Record, error) {
	if strings.TrimSpace(m.Detail) == "" {
		return Record{}, fmt.Errorf("record the interruption of %s on %q: say why (Meta.Detail)", step, node)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(withMeta(Record{Kind: KindStepFailed, Step: step, Node: node, Outcome: OutcomeInterrupted}, m))
}

// Decide records a person's decision or attestation (the caller has
// verified the signature; m.ApprovalID names it). A refusal is a
// *RuleError and records nothing.
func (j *Journal) Decide(d DecisionName, node string, step Step, m Meta) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.state.AdmitDecision(d, node, step); err != nil {
		return Record{}, err
	}
	return j.appendLocked(withMeta(Record{Kind: KindDecision, Decision: d, Node: node, Step: step}, m))
}

// Lesson records something learned, for the report and the intent repo.
func (j *Journal) Lesson(text string) (Record, error) {
	if strings.TrimSpace(text) == "" {
		return Record{}, fmt.Errorf("record lesson for round %s: empty text", j.roundID)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(Record{Kind: KindLesson, Detail: text})
}

// Notification records a notification's delivery outcome (detail says
// what was sent to whom and how it went). Allowed at any time, after close
// too; it does not make the committed findings stale.
func (j *Journal) Notification(node, detail string) (Record, error) {
	if strings.TrimSpace(detail) == "" {
		return Record{}, fmt.Errorf("record notification for round %s: empty detail", j.roundID)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(Record{Kind: KindNotification, Node: node, Detail: detail})
}

// Released records what node's ended window let go of (detail says what
// and how it went). Allowed at any time, after close or abort too; it does
// not make the committed findings stale.
func (j *Journal) Released(node, detail string) (Record, error) {
	if strings.TrimSpace(detail) == "" {
		return Record{}, fmt.Errorf("record release for round %s: empty detail", j.roundID)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(Record{Kind: KindReleased, Node: node, Detail: detail})
}

// OtherActors records what the round saw of, or did to, another party
// (round.KindOtherActors; rec's Event, Node, Holders, Until and Detail).
// Allowed at any time, after close or abort too; it does not make the
// committed findings stale.
func (j *Journal) OtherActors(rec Record) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(Record{Kind: KindOtherActors, Event: rec.Event, Node: rec.Node, Holders: rec.Holders,
		Until: rec.Until, Detail: rec.Detail})
}

// Promotion records the promotion gate's verdict on kernel as the plan
// took it (round.KindPromotion). Allowed at any time.
func (j *Journal) Promotion(kernel, detail, approvalID string) (Record, error) {
	if kernel == "" || strings.TrimSpace(detail) == "" {
		return Record{}, fmt.Errorf("record promotion for round %s: empty kernel or detail", j.roundID)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(Record{Kind: KindPromotion, Kernel: kernel, Detail: detail, ApprovalID: approvalID})
}

// StartRollback records that rollback_node begins on node (before it acts).
func (j *Journal) StartRollback(node string, m Meta) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(withMeta(Record{Kind: KindRollback, Node: node}, m))
}

// EndRollback records how the node's rollback ended (done or failed).
func (j *Journal) EndRollback(node string, outcome Outcome, m Meta) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(withMeta(Record{Kind: KindRollback, Node: node, Outcome: outcome}, m))
}

// FindingsCommitted records that the lessons and the report were committed
// (commit names the Git commit). Close requires it after the last record.
func (j *Journal) FindingsCommitted(commit string) (Record, error) {
	if strings.TrimSpace(commit) == "" {
		return Record{}, fmt.Errorf("record findings commit for round %s: empty commit id", j.roundID)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(Record{Kind: KindFindings, Detail: commit})
}

func withMeta(r Record, m Meta) Record {
	r.ApprovalID, r.ArgsDigest, r.Detail, r.Kernel, r.BootID = m.ApprovalID, m.ArgsDigest, m.Detail, m.Kernel, m.BootID
	if r.Kind == KindStepStarted {
		r.PlanDigest, r.StepPlan = m.PlanDigest, m.StepPlan
	}
	return r
}

// appendLocked applies rec to a copy of the state, writes it to the journal
// and fsyncs, then keeps the new state and rewrites the state file. If the
// record does not fit the state, nothing is written. j.mu must be held.
func (j *Journal) appendLocked(rec Record) (Record, error) {
	// Nothing is appended after records the server did not write.
	if err := j.verifyLocked(false); err != nil {
		return Record{}, fmt.Errorf("append to round journal %s: %w", j.roundID, err)
	}
	if j.broken != nil {
		return Record{}, fmt.Errorf("append to round journal %s: %w", j.roundID, j.broken)
	}
	rec.Seq = j.state.LastSeq + 1
	rec.Time = j.now()
	next := j.state.successor(rec)
	if err := next.Apply(rec); err != nil {
		return Record{}, fmt.Errorf("append to round journal %s: %w", j.roundID, err)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return Record{}, fmt.Errorf("append to round journal %s: %w", j.roundID, err)
	}
	if j.anc != nil {
		// Write-ahead: the anchor holds the record before the journal does.
		if undoFailed, err := j.anc.appendRecord(rec.Seq, line); err != nil {
			if undoFailed {
				j.broken = fmt.Errorf("anchoring failed (%w) and could not be undone; reopen the journal", err)
			}
			return Record{}, fmt.Errorf("append to round journal %s: %w", j.roundID, err)
		}
	}
	line = append(line, '\n')
	if err := j.writeLine(line); err != nil {
		// Undo a partial write so the file ends on a whole record.
		if terr := j.f.Truncate(j.size); terr != nil {
			j.broken = fmt.Errorf("write failed (%w) and could not be undone (%v); reopen the journal", err, terr)
		} else if serr := j.f.Sync(); serr != nil {
			j.broken = fmt.Errorf("write failed (%w) and the undo could not be synced (%v); reopen the journal", err, serr)
		} else if j.anc != nil {
			if ferr := j.anc.forget(); ferr != nil {
				j.broken = fmt.Errorf("write failed (%w) and its anchor could not be taken back (%v); reopen the journal", err, ferr)
			}
		}
		return Record{}, fmt.Errorf("append to round journal %s: %w", j.roundID, err)
	}
	if j.anc != nil {
		j.anc.live.Write(line)
	}
	j.size += int64(len(line))
	j.sinceSnap += int64(len(line))
	// next is never changed from here on (the next append applies to a
	// copy of it), so the observer shares it instead of a copy of the
	// whole round's state per record.
	j.state = next
	if j.observe != nil {
		j.observe(rec, next)
	}
	if snapshotDue(j.sinceSnap, j.snapBytes) {
		if err := j.writeSnapshot(); err != nil {
			// The journal holds the record; the snapshot is only a cache.
			j.log.Warn("could not write the state snapshot; the journal is intact", "round", j.roundID, "err", err)
		}
	}
	if j.segBytes > 0 && j.size >= j.segBytes {
		j.sealJournal()
	}
	return rec, nil
}

// sealJournal moves the live journal's records into the next sealed
// segment. A seal that fails leaves the journal as it was (the next
// append tries again); one that could not be undone refuses appends.
// j.mu is held.
func (j *Journal) sealJournal() {
	if !j.sealLive(j.f, JournalFile, j.segments+1, j.size) {
		return
	}
	j.segments++
	j.sealedBytes += j.size
	j.size = 0
	if j.anc != nil {
		j.anchorSeal()
	}
}

// sealLive seals a live log (sealLog) and says whether it did. A seal
// that failed leaves the log as it was; one whose undo failed refuses
// further appends. j.mu is held.
func (j *Journal) sealLive(f *os.File, file string, n int, size int64) bool {
	undoFailed, err := sealLog(j.dir, f, file, n, size)
	if err == nil {
		return true
	}
	if undoFailed {
		j.broken = fmt.Errorf("%w; reopen the journal", err)
	}
	j.log.Warn("could not seal a live log into a segment; it stays live", "round", j.roundID, "file", file, "err", err)
	return false
}

func (j *Journal) writeLine(line []byte) error {
	if j.splitWrite > 0 && len(line) > 1 {
		half := len(line) / 2
		if _, err := j.f.Write(line[:half]); err != nil {
			return err
		}
		time.Sleep(j.splitWrite)
		line = line[half:]
	}
	if _, err := j.f.Write(line); err != nil {
		return err
	}
	return j.f.Sync()
}

// minSnapshotBytes is the journal growth below which no snapshot is
// written, however small the last one was.
const minSnapshotBytes = 4 << 10

// snapshotDue decides when state.json is written again: once the journal
// has grown by as many bytes as the last snapshot holds (and at least
// minSnapshotBytes). A snapshot's cost is then paid for by as many bytes
// of records, so what a record costs in writes stays proportional to the
// record, not to the round's state, from the first window to the last
// (the state of a 1,000-node round is megabytes; rewriting it with every
// record made each window's writes grow with its place in the round).
// A round with no snapshot yet gets one at its first record.
func snapshotDue(sinceSnap, snapBytes int64) bool {
	return snapBytes == 0 || sinceSnap >= max(snapBytes, minSnapshotBytes)
}

// writeSnapshot writes state.json, the state as of the last record, by
// atomic replace. j.mu is held.
func (j *Journal) writeSnapshot() error {
	b, err := json.MarshalIndent(j.state, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir, name := j.snapshotPath()
	if err := writeFileAtomic(dir, name, b); err != nil {
		return err
	}
	j.snapSeq, j.snapBytes, j.sinceSnap = j.state.LastSeq, int64(len(b)), 0
	return nil
}

// snapshot is state.json as read at open.
type snapshot struct {
	*State
	raw []byte
}

// readSnapshot reads state.json, nil when it is missing or not a state.
func (j *Journal) readSnapshot() (*snapshot, int64) {
	b, err := readFile(j.snapshotPath())
	if err != nil {
		return nil, 0
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, 0
	}
	return &snapshot{State: &st, raw: bytes.TrimSpace(b)}, int64(len(b))
}

// stateEqual reports whether st is what the snapshot says.
func stateEqual(st *State, snap *snapshot) bool {
	want, err := json.MarshalIndent(st, "", "  ")
	return err == nil && bytes.Equal(snap.raw, want)
}

// journalBytes is the length of the journal's prefix the snapshot covers.
func (snap *snapshot) journalBytes(sc scanned) int64 {
	for i, rec := range sc.records {
		if rec.Seq == snap.LastSeq {
			return int64(min(sc.ends[i], sc.good))
		}
	}
	return 0
}

// snapshotPath is where the state snapshot lives: an anchored journal
// (the server's) keeps it beside its anchor in the server's state
// directory, <round>.state.json, out of the intent repository, where a
// snapshot of a prefix of the journal would read as the round's state and
// its write at Close would leave the working copy changed after the
// call's last commit; a journal without an anchor (a standalone one, this
// package's tests) keeps it beside itself as state.json.
func (j *Journal) snapshotPath() (dir, name string) {
	if j.anchorDir != "" {
		return j.anchorDir, j.roundID + "." + StateFile
	}
	return j.dir, StateFile
}

// SnapshotPath is the path of the state snapshot of the round whose
// journal is in dir, anchored in anchorDir ("" when not anchored).
func SnapshotPath(dir, anchorDir string) string {
	j := &Journal{dir: filepath.Clean(dir), roundID: filepath.Base(filepath.Clean(dir)), anchorDir: anchorDir}
	d, name := j.snapshotPath()
	return filepath.Join(d, name)
}

func (j *Journal) removeStaleTemps() {
	dir, name := j.snapshotPath()
	matches, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
	for _, m := range matches {
		if err := os.Remove(m); err == nil {
			j.log.Info("removed a state file left half-written by a crash", "round", j.roundID, "file", filepath.Base(m))
		}
	}
}

// saveTorn keeps the torn bytes of file beside it, so nothing is dropped
// without a trace, and returns the name it used.
func (j *Journal) saveTorn(file string, offset int, torn []byte) (string, error) {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s.torn-%d", file, offset)
		if i > 0 {
			name = fmt.Sprintf("%s.%d", name, i)
		}
		f, err := os.OpenFile(filepath.Join(j.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, os.ErrExist) && i < 1000 {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("save torn tail of %s: %w", file, err)
		}
		_, werr := f.Write(torn)
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			return "", fmt.Errorf("save torn tail of %s: %w", file, err)
		}
		if err := syncDir(j.dir); err != nil {
			return "", err
		}
		return name, nil
	}
}

// recordTornFiles appends a torn_tail record for every saved torn tail
// (journal or audit log) that no record mentions yet: the one this Open
// saved, or one saved by an Open that died before recording it.
func (j *Journal) recordTornFiles() error {
	var names []string
	for _, file := range []string{JournalFile, AuditFile} {
		m, err := filepath.Glob(filepath.Join(j.dir, file+".torn-*"))
		if err != nil {
			return err
		}
		names = append(names, m...)
	}
	slices.Sort(names)
	for _, path := range names {
		name := filepath.Base(path)
		mention := "saved to " + name + " and truncated"
		if slices.ContainsFunc(j.state.Recoveries, func(r Recovery) bool { return strings.Contains(r.Detail, mention) }) {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		file, offset, _ := strings.Cut(name, ".torn-")
		offset, _, _ = strings.Cut(offset, ".")
		detail := fmt.Sprintf("torn last line of %s (%d bytes at offset %s: a crash mid-write, never acknowledged) %s",
			file, fi.Size(), offset, mention)
		if _, err := j.appendLocked(Record{Kind: KindTornTail, Detail: detail}); err != nil {
			return err
		}
	}
	return nil
}

// scanned is a journal file split into records.
type scanned struct {
	records []Record
	// ends are the byte offsets just past each record's line.
	ends []int
	// good is the length of the prefix made of whole records.
	good int
	// torn is a last line that does not parse (a crash mid-write).
	torn []byte
	// missingNewline: the last record parsed but its newline was not written.
	missingNewline bool
}

// scanLines splits a JSONL journal into records. Only the last line may be
// torn; a bad line followed by more data is corruption and an error, never
// skipped.
func scanLines(data []byte) (scanned, error) {
	var sc scanned
	pos, lineNo := 0, 0
	for pos < len(data) {
		lineNo++
		end := bytes.IndexByte(data[pos:], '\n')
		terminated := end >= 0
		var line []byte
		next := len(data)
		if terminated {
			line = data[pos : pos+end]
			next = pos + end + 1
		} else {
			line = data[pos:]
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			if next == len(data) {
				sc.torn = data[pos:]
				return sc, nil
			}
			return sc, fmt.Errorf("line %d (byte %d) is not a record and is not the last line: %w", lineNo, pos, err)
		}
		sc.records = append(sc.records, rec)
		sc.ends = append(sc.ends, next)
		sc.good = next
		sc.missingNewline = !terminated
		pos = next
	}
	return sc, nil
}

// ReplayInfo says what Replay read.
type ReplayInfo struct {
	Records int `json:"records"`
	// TornBytes is the length of a torn last line that was not replayed.
	TornBytes int `json:"torn_bytes,omitempty"`
}

// Replay rebuilds a round's state from journal bytes. A torn last line is
// reported in ReplayInfo, not replayed; any other bad line or a record that
// does not fit is an error.
func Replay(data []byte) (*State, ReplayInfo, error) {
	sc, err := scanLines(data)
	if err != nil {
		return nil, ReplayInfo{}, fmt.Errorf("replay round journal: %w", err)
	}
	info := ReplayInfo{Records: len(sc.records), TornBytes: len(sc.torn)}
	st := NewState("")
	for _, rec := range sc.records {
		if err := st.Apply(rec); err != nil {
			return nil, info, fmt.Errorf("replay round journal: %w", err)
		}
	}
	return st, info, nil
}

// ReadState replays the journal in dir without locking or changing
// anything, for status views while another process holds the journal.
func ReadState(dir string) (*State, ReplayInfo, error) {
	data, err := ReadJournal(dir)
	if err != nil {
		return nil, ReplayInfo{}, fmt.Errorf("read round journal %s: %w", dir, err)
	}
	st, info, err := Replay(data)
	if err != nil {
		return nil, info, fmt.Errorf("read round journal %s: %w", dir, err)
	}
	return st, info, nil
}

// mkdirSynced creates dir (and parents) and fsyncs each parent it added to.
func mkdirSynced(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirSynced(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	serr := d.Sync()
	cerr := d.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data: temp file, fsync, rename,
// fsync of the directory. A reader sees the old or the new file, whole.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp, err := writeTemp(dir, name, data)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return syncDir(dir)
}

// writeTemp writes data, synced and mode 0640, into a new temporary file
// beside dir/name and answers its path; on error nothing is left.
func writeTemp(dir, name string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	err = errors.Join(werr, serr, cerr)
	if err == nil {
		err = os.Chmod(tmp, 0o640)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
