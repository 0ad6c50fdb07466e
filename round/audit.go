package round

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AuditDecision says whether a tool call was let through.
type AuditDecision string

// Audit decisions.
const (
	Allowed AuditDecision = "allowed"
	Refused AuditDecision = "refused"
)

// AuditEntry is what the caller reports about one tool call. Args are
// digested and never stored; Reason and Detail are kept through AuditText
// (no argument text beyond a short prefix, escaped, bounded).
type AuditEntry struct {
	Tool string
	Node string
	// Args are the call's arguments; only ArgsDigest(Args) is kept. When
	// nil, Digest is used as given.
	Args   any
	Digest string
	// ApprovalID names the person's approval the call carried, if any.
	ApprovalID string
	Decision   AuditDecision
	// Rule and Reason say why a call was refused.
	Rule   Rule
	Reason string
	// Outcome is what happened (done, failed, approval_required, ...).
	Outcome string
	Detail  string
}

// AuditRecord is one line of audit.jsonl.
type AuditRecord struct {
	Seq        uint64        `json:"seq"`
	Time       time.Time     `json:"time"`
	Round      string        `json:"round"`
	Tool       string        `json:"tool"`
	Node       string        `json:"node,omitempty"`
	ArgsDigest string        `json:"args_digest,omitempty"`
	ApprovalID string        `json:"approval_id,omitempty"`
	Decision   AuditDecision `json:"decision"`
	Rule       Rule          `json:"rule,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	Outcome    string        `json:"outcome,omitempty"`
	Detail     string        `json:"detail,omitempty"`
}

// ArgsDigest is "sha256:<hex>" of the canonical JSON of args: object keys
// sorted, no insignificant white space, numbers as written, no HTML
// escaping. Equal arguments give equal digests whatever their Go type or
// field order.
func ArgsDigest(args any) (string, error) {
	b, err := CanonicalJSON(args)
	if err != nil {
		return "", fmt.Errorf("digest arguments: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CanonicalJSON encodes v as JSON in one canonical form (see ArgsDigest).
func CanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Bounds of the words an audit record keeps.
const (
	// MaxAuditText is the most bytes of a reason or detail, escaped.
	MaxAuditText = 600
	// ArgPrefix is the most bytes of an argument's text an audit record
	// quotes; the rest is replaced by its length.
	ArgPrefix = 16
	// maxScan bounds the text searched for argument text.
	maxScan = 4 << 10
)

// AuditText makes text fit for an audit record: any run of more than
// ArgPrefix bytes that also occurs in a string of args (a signed approval,
// a reason, a lesson the caller passed) keeps its first ArgPrefix bytes;
// the rest becomes "...[N bytes of the arguments]"; control characters,
// backslashes and non-ASCII are escaped (\n, \x1b, \u202e), so a record
// is one line a person reads as it is stored; the result is at most max
// bytes, cut with "...".
func AuditText(text string, args any, max int) string {
	if len(text) > maxScan {
		text = text[:maxScan]
	}
	text = redactArgs(text, argStrings(args))
	var b strings.Builder
	var ends []int // where each escaped character ends in b
	for _, r := range text {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r > 0x7e && r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
		ends = append(ends, b.Len())
	}
	out := b.String()
	if len(out) <= max {
		return out
	}
	cut := 0
	for _, e := range ends {
		if e > max-3 {
			break
		}
		cut = e
	}
	return out[:cut] + "..."
}

// argStrings are the string values in args longer than ArgPrefix.
func argStrings(args any) []string {
	if args == nil {
		return nil
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			if len(x) > ArgPrefix {
				out = append(out, x)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// redactArgs replaces every run of more than ArgPrefix bytes of text that
// occurs in one of args by its first ArgPrefix bytes and its length.
func redactArgs(text string, args []string) string {
	if len(args) == 0 || len(text) <= ArgPrefix {
		return text
	}
	in := func(s string) bool {
		for _, a := range args {
			if strings.Contains(a, s) {
				return true
			}
		}
		return false
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		end := i + ArgPrefix + 1
		if end > len(text) || !in(text[i:end]) {
			b.WriteByte(text[i])
			i++
			continue
		}
		for end < len(text) && in(text[i:end+1]) {
			end++
		}
		fmt.Fprintf(&b, "%s...[%d bytes of the arguments]", text[i:i+ArgPrefix], end-i-ArgPrefix)
		i = end
	}
	return b.String()
}

// Audit appends one tool call to audit.jsonl and fsyncs it before
// returning.
func (j *Journal) Audit(e AuditEntry) (AuditRecord, error) {
	if e.Tool == "" {
		return AuditRecord{}, errors.New("audit: tool name is empty")
	}
	if e.Decision != Allowed && e.Decision != Refused {
		return AuditRecord{}, fmt.Errorf("audit %s: decision must be allowed or refused, not %q", e.Tool, e.Decision)
	}
	digest := e.Digest
	if e.Args != nil {
		d, err := ArgsDigest(e.Args)
		if err != nil {
			return AuditRecord{}, fmt.Errorf("audit %s: %w", e.Tool, err)
		}
		digest = d
	}
	if j.view {
		return AuditRecord{}, fmt.Errorf("audit %s: %w", e.Tool, ErrReadOnlyView)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.audit == nil {
		return AuditRecord{}, fmt.Errorf("audit %s: journal closed", e.Tool)
	}
	rec := AuditRecord{Seq: j.auditSeq + 1, Time: j.now(), Round: j.roundID, Tool: e.Tool, Node: AuditText(e.Node, nil, 253),
		ArgsDigest: digest, ApprovalID: AuditText(e.ApprovalID, nil, 64), Decision: e.Decision, Rule: e.Rule,
		Reason: AuditText(e.Reason, e.Args, MaxAuditText), Outcome: AuditText(e.Outcome, nil, 64), Detail: AuditText(e.Detail, e.Args, MaxAuditText)}
	line, err := json.Marshal(rec)
	if err != nil {
		return AuditRecord{}, fmt.Errorf("audit %s: %w", e.Tool, err)
	}
	line = append(line, '\n')
	_, werr := j.audit.Write(line)
	if werr == nil {
		werr = j.audit.Sync()
	}
	if werr != nil {
		if terr := j.audit.Truncate(j.auditSize); terr != nil {
			j.log.Error("audit write failed and could not be undone", "round", j.roundID, "err", terr)
		}
		return AuditRecord{}, fmt.Errorf("audit %s: %w", e.Tool, werr)
	}
	j.auditSize += int64(len(line))
	j.auditSeq = rec.Seq
	if j.segBytes > 0 && j.auditSize >= j.segBytes {
		j.sealAudit()
	}
	return rec, nil
}

// sealAudit moves the live audit log's lines into its next sealed
// segment; as sealJournal. j.mu is held.
func (j *Journal) sealAudit() {
	if !j.sealLive(j.audit, AuditFile, j.auditSegments+1, j.auditSize) {
		return
	}
	j.auditSegments++
	j.auditSize = 0
}

// auditStart is where the live audit log starts: the seq of the last
// sealed line, and whether the live file was emptied because it repeated
// the last segment (a seal cut off between its two steps).
type auditStart struct {
	seq     uint64
	dropped bool
}

// openAuditSegments counts the audit log's sealed segments and reads the
// last line of the last one.
func (j *Journal) openAuditSegments(f *os.File, path string, live []byte) (auditStart, error) {
	n, err := segmentCount(j.dir, AuditFile)
	if err != nil {
		return auditStart{}, err
	}
	j.auditSegments = n
	if n == 0 {
		return auditStart{}, nil
	}
	name := segmentName(AuditFile, n)
	last, err := readFile(j.dir, name)
	if err != nil {
		return auditStart{}, err
	}
	if len(last) == 0 || last[len(last)-1] != '\n' {
		return auditStart{}, fmt.Errorf("%s: a sealed segment ends in a partial line: segments are written whole and never change", name)
	}
	seq, err := lastAuditSeq(last)
	if err != nil {
		return auditStart{}, fmt.Errorf("%s: %w", name, err)
	}
	dropped, err := dropRepeatedSegment(f, path, live, last)
	if err != nil {
		return auditStart{}, err
	}
	if dropped {
		j.log.Warn("the live audit log repeated its last sealed segment (a seal cut off); emptied it", "round", j.roundID, "segment", name)
	}
	return auditStart{seq: seq, dropped: dropped}, nil
}

// lastAuditSeq is the seq of the last line of whole audit lines.
func lastAuditSeq(data []byte) (uint64, error) {
	body := bytes.TrimSuffix(data, []byte{'\n'})
	var rec AuditRecord
	if err := json.Unmarshal(body[bytes.LastIndexByte(body, '\n')+1:], &rec); err != nil {
		return 0, fmt.Errorf("last audit line is not a record: %w", err)
	}
	return rec.Seq, nil
}

// openAudit opens audit.jsonl for appending, saving and truncating a torn
// last line as the journal does.
func (j *Journal) openAudit() error {
	path := filepath.Join(j.dir, AuditFile)
	_, statErr := os.Lstat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := openFile(j.dir, AuditFile, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	j.audit = f
	if created {
		if err := syncDir(j.dir); err != nil {
			return err
		}
	}
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	prev, err := j.openAuditSegments(f, path, data)
	if err != nil {
		return err
	}
	if prev.dropped {
		data = nil
	}
	good, last, torn, err := scanAudit(data, prev.seq)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(torn) > 0 {
		saved, err := j.saveTorn(AuditFile, good, torn)
		if err != nil {
			return err
		}
		if err := f.Truncate(int64(good)); err != nil {
			return fmt.Errorf("truncate torn tail of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
		j.opened.AuditTornBytes = len(torn)
		j.log.Warn("audit log had a torn last line", "round", j.roundID, "bytes", len(torn), "saved_as", saved)
	}
	j.auditSize, j.auditSeq = int64(good), last
	return nil
}

// scanAudit returns the length of the whole-record prefix, the last seq and
// a torn last line. A line without its newline is torn here too: audit
// lines carry no state, so it is simply saved aside.
// prev is the seq of the record before data (the last sealed one), which
// is also the last seq when data holds none.
func scanAudit(data []byte, prev uint64) (good int, last uint64, torn []byte, err error) {
	pos := 0
	last = prev
	for pos < len(data) {
		end := bytes.IndexByte(data[pos:], '\n')
		var rec AuditRecord
		if end < 0 {
			return pos, last, data[pos:], nil
		}
		if jerr := json.Unmarshal(data[pos:pos+end], &rec); jerr != nil {
			if pos+end+1 == len(data) {
				return pos, last, data[pos:], nil
			}
			return 0, 0, nil, fmt.Errorf("audit line at byte %d is not a record: %w", pos, jerr)
		}
		if rec.Seq != last+1 {
			return 0, 0, nil, fmt.Errorf("audit sequence %d after %d at byte %d", rec.Seq, last, pos)
		}
		last = rec.Seq
		pos += end + 1
	}
	return pos, last, nil, nil
}
