package book

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"
)

// The proofs of a round are the signed bytes of every approval a step ran
// under (the request text and its SSHSIG signature, as the person handed
// them back), each with the typed plan it ran. They are kept in the
// server's state directory (proofs/<round>.jsonl), out of the agent's
// reach, and every decision that rests on an earlier approval (the signed
// plan, a window approval, the approved plan of a drain carried on)
// verifies the signature again, against allowed_signers as it is now, at
// the moment it decides. rounds/<id>/plan-signatures.json and
// window-signatures/<node>.json in the intent repository are reports for
// people, rendered from these (reports.go): nothing reads them to decide.

// Proof is one kept approval.
type Proof struct {
	// Tool is the tool the request was signed for; Step, when set, the
	// destructive tool that ran under it (itself, or a step of a window
	// approval). A standing approval (sign_plan, approve_window) is kept
	// without a step when it is signed.
	Tool       string `json:"tool"`
	Step       string `json:"step,omitempty"`
	Node       string `json:"node"`
	ApprovalID string `json:"approval_id"`
	// Approval is the request text and its signature, as signed.
	Approval string `json:"approval"`
	// Plan is the typed plan the step ran (destructive steps); for a
	// standing approval, what its report says of it (sign_plan: the
	// planSignature, approve_window: the windowSignature), which the
	// report is rendered from.
	Plan json.RawMessage `json:"plan,omitempty"`
	Time time.Time       `json:"time"`
}

// proofsDir is where the proofs live under the state directory.
const proofsDir = "proofs"

// maxProofFile bounds a round's proof file (a round of 1,000 nodes keeps
// some 6,000 approvals of a few KiB each).
const maxProofFile = 256 << 20

var proofRoundRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// proofMu serialises appends of this process (several processes append
// under the file lock).
var proofMu sync.Mutex

// Proofs is where a server keeps its rounds' proofs: one file per round
// in a folder of its state directory (ProofsDir).
type Proofs struct {
	// Dir is the folder ("" refuses: without a state directory no
	// approval can be proven again).
	Dir string
	// Now stamps each kept proof; nil: time.Now.
	Now func() time.Time
}

// ProofsDir is where a server whose state directory is stateDir keeps its
// proofs.
func ProofsDir(stateDir string) string { return filepath.Join(stateDir, proofsDir) }

// File is the path of round roundID's proofs.
func (s Proofs) File(roundID string) (string, error) {
	if s.Dir == "" {
		return "", errors.New("no state directory is configured: the server keeps the signatures it verified there, and without them no approval can be proven again")
	}
	if !proofRoundRE.MatchString(roundID) {
		return "", fmt.Errorf("round id %q is not a plain name", roundID)
	}
	return filepath.Join(s.Dir, roundID+".jsonl"), nil
}

// Keep appends the signed bytes of an approval about to be used,
// fsynced, before the approval is consumed and the step acts.
func (s Proofs) Keep(roundID string, p Proof) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	p.Time = now().UTC()
	return s.keep(roundID, p)
}

// Import keeps proofs another server kept, as that server kept them (their
// times too): a server that takes the round over keeps the approvals the
// round ran under once their signatures verified again.
func (s Proofs) Import(roundID string, ps []Proof) error {
	for _, p := range ps {
		if err := s.keep(roundID, p); err != nil {
			return err
		}
	}
	return nil
}

// ProofsFile is the copy of the round's proofs the server commits beside
// the journal when another server may take the round over
// (rounds/<id>/proofs.jsonl): a mailbox like the inbox, never trusted,
// each entry kept again only once its signature verifies.
const ProofsFile = "proofs.jsonl"

// ParseProofs decodes the lines of a proofs file; a line that is not a
// proof is an error naming it.
func ParseProofs(data []byte) ([]Proof, error) {
	var out []Proof
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var p Proof
		if err := json.Unmarshal(line, &p); err != nil {
			return nil, fmt.Errorf("line %d is not a kept approval: %w", i+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (s Proofs) keep(roundID string, p Proof) error {
	path, err := s.File(roundID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("keep the approval's signature: %w", err)
	}
	proofMu.Lock()
	defer proofMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("keep the approval's signature: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("keep the approval's signature: %w", err)
	}
	err = appendLocked(f, path, append(b, '\n'))
	// Closing the file releases its lock too.
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("keep the approval's signature: close %s: %w", path, cerr)
	}
	return err
}

// appendLocked appends line to f under its exclusive lock, fsynced.
func appendLocked(f *os.File, path string, line []byte) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("keep the approval's signature: lock %s: %w", path, err)
	}
	if _, err := f.Write(line); err != nil {
		return fmt.Errorf("keep the approval's signature: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("keep the approval's signature: fsync %s: %w", path, err)
	}
	return nil
}

// All reads the round's kept approvals in the order they were kept. A
// torn last line (a crash while appending) belongs to an approval that was
// never consumed and is left out; any other damage is an error.
//
// The file only grows (Keep appends), so what was decoded once is
// kept (proofIndex) and a later call decodes only the lines appended
// since: a step's cost does not grow with the round's length. The kept
// entries are only what the file said; every decision verifies their
// signatures again (Latest, ApprovedPlan). A file that is not the one decoded (another
// inode, shorter, or its bytes before the decoded end changed) is decoded
// again from the start.
func (s Proofs) All(roundID string) ([]Proof, error) {
	path, err := s.File(roundID)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the kept signatures: %w", err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("read the kept signatures: %w", err)
	}
	if st.Size > maxProofFile {
		return nil, fmt.Errorf("read the kept signatures: %s is larger than %d bytes", path, maxProofFile)
	}
	proofIndexMu.Lock()
	defer proofIndexMu.Unlock()
	ix := proofIndexes[path]
	if ix == nil || !ix.continues(f, st) {
		ix = &proofIndex{dev: uint64(st.Dev), ino: st.Ino}
	}
	if err := ix.readFrom(f, path); err != nil {
		delete(proofIndexes, path)
		return nil, err
	}
	proofIndexes[path] = ix
	return ix.proofs[:len(ix.proofs):len(ix.proofs)], nil
}

// proofIndex is what All decoded of one proof file: the entries of its
// first size bytes (whole lines), and the last bytes of those, to tell the
// same file grown from one rewritten.
type proofIndex struct {
	dev, ino uint64
	size     int64
	tail     []byte
	proofs   []Proof
}

// proofTail is how many bytes before the decoded end must be unchanged.
const proofTail = 512

var (
	proofIndexMu sync.Mutex
	proofIndexes = map[string]*proofIndex{}
)

// continues says whether f (with stat st) is the file ix decoded, grown
// or as it was.
func (ix *proofIndex) continues(f *os.File, st syscall.Stat_t) bool {
	if uint64(st.Dev) != ix.dev || st.Ino != ix.ino || st.Size < ix.size {
		return false
	}
	got := make([]byte, len(ix.tail))
	if _, err := f.ReadAt(got, ix.size-int64(len(got))); err != nil {
		return false
	}
	return bytes.Equal(got, ix.tail)
}

// readFrom decodes the whole lines of f after ix.size and adds them.
func (ix *proofIndex) readFrom(f *os.File, path string) error {
	b, err := io.ReadAll(io.NewSectionReader(f, ix.size, maxProofFile+1-ix.size))
	if err != nil {
		return fmt.Errorf("read the kept signatures: %w", err)
	}
	if ix.size+int64(len(b)) > maxProofFile {
		return fmt.Errorf("read the kept signatures: %s is larger than %d bytes", path, maxProofFile)
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	if len(b) == 0 {
		return nil
	}
	line := 1 + len(ix.proofs)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxProofFile)
	for ; sc.Scan(); line++ {
		var p Proof
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return fmt.Errorf("read the kept signatures: %s line %d: %w", path, line, err)
		}
		ix.proofs = append(ix.proofs, p)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the kept signatures: %w", err)
	}
	ix.size += int64(len(b))
	keep := min(int64(proofTail), ix.size)
	// The tail ends the decoded part: from b, or from b and the earlier tail.
	joined := append(slices.Clone(ix.tail), b...)
	ix.tail = slices.Clone(joined[int64(len(joined))-keep:])
	return nil
}

// Reverify proves a kept approval again now: its signature against
// allowed_signers as it is, bound to tool and node (and digest, when not
// empty: otherwise whatever digest it signed), answered as the verifier
// answers (A).
type Reverify[A any] func(ctx context.Context, p Proof, tool, node, digest string) (A, error)

// Standing is a kept approval whose signature verified again just now.
type Standing[A any] struct {
	Approved A
	// Index is its place among the round's proofs.
	Index int
	Proof Proof
}

// Latest is the last kept standing approval (kept without a step) of tool
// on node among ps, verified again; ok is false when none was kept. One
// that was kept but no longer verifies (its key left allowed_signers) is
// an error that says so.
func Latest[A any](ctx context.Context, ps []Proof, tool, node string, reverify Reverify[A]) (Standing[A], bool, error) {
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if p.Tool != tool || p.Node != node || p.Step != "" {
			continue
		}
		a, err := reverify(ctx, p, tool, node, "")
		if err != nil {
			return Standing[A]{}, false, fmt.Errorf("the %s signature %s kept for %s no longer verifies: %w", tool, p.ApprovalID, node, err)
		}
		return Standing[A]{Approved: a, Index: i, Proof: p}, true, nil
	}
	return Standing[A]{}, false, nil
}

// ApprovedPlan is the plan P that step ran on node under the kept
// approval approvalID (as the journal names it), the newest among ps that
// decodes (decode), whose signature verifies again and binds the plan
// (binds, given what the verifier answered); nil when none is kept. One
// that no longer verifies is an error naming what (e.g. "drain").
func ApprovedPlan[A, P any](ctx context.Context, ps []Proof, what, step, node, approvalID string,
	decode func(json.RawMessage) (P, bool), reverify Reverify[A], binds func(Proof, A, P) bool) (*P, error) {
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if p.ApprovalID != approvalID || p.Node != node || p.Step != step || len(p.Plan) == 0 {
			continue
		}
		plan, ok := decode(p.Plan)
		if !ok {
			continue
		}
		a, err := reverify(ctx, p, p.Tool, node, "")
		if err != nil {
			return nil, fmt.Errorf("the signature of the %s in flight on %s no longer verifies: %w", what, node, err)
		}
		if !binds(p, a, plan) {
			continue
		}
		return &plan, nil
	}
	return nil, nil
}
