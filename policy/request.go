package policy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Kind says what a signed request is for: approving one destructive tool
// call, or attesting a decision that belongs to a person.
type Kind string

// Kinds of request. Each has a fixed list of fields, in this order, between
// its header and the summary lines (issued, expires and nonce always come
// last):
//
//	approval                   tool, node, round, plan-digest
//	hypervisor_snapshot_taken  node, round
//	residual_risk_accepted     node ("*" for the whole fleet), round, step, stop, reason, review-trigger
//	round_resume               node, round, step, stop, reason
//	round_abort                node, round, step, stop, reason
//	round_outcome              environment, round, outcome-digest
//	kernel_promoted            environment, round, kernel, reason
//
// A resume or abort names the stop it answers: the step that failed and
// "stop", the journal record of that failure (its sequence number and
// digest), or "none" for both when the round is not stopped (abort only).
// An accepted residual risk names the failed check the same way (the step
// and its failure's journal record), or "none" for both when it is a note
// for the report that accepts no check.
//
// A round outcome and a promoted kernel are records (Kind.IsRecord): they
// are committed to Git and stand after their request expired, for
// environments downstream to plan on. A round outcome certifies how a
// round in an environment ended, bound to the digest of the committed
// outcome record; a promoted kernel lets an environment's round plan a
// kernel without that proof from its upstream environment.
const (
	KindApproval                Kind = "approval"
	KindHypervisorSnapshotTaken Kind = "hypervisor_snapshot_taken"
	KindResidualRiskAccepted    Kind = "residual_risk_accepted"
	KindRoundResume             Kind = "round_resume"
	KindRoundAbort              Kind = "round_abort"
	KindRoundOutcome            Kind = "round_outcome"
	KindKernelPromoted          Kind = "kernel_promoted"
)

// Header lines. An approval has one header line; an attestation has the
// attestation header followed by "kind: <kind>".
const (
	approvalHeader    = "mcp-patch approval request v1"
	attestationHeader = "mcp-patch attestation v1"
)

// Limits on a request. They keep what a person reads short enough to read
// and what the server parses small.
const (
	MaxRequestBytes  = 64 << 10
	MaxSummaryLines  = 200
	MaxSummaryLength = 1000
	MaxReasonLength  = 500
	// DefaultMaxLifetime is the longest a request may stay valid, from its
	// signed issue time to its expiry, unless the server is configured
	// otherwise (a person cannot sign a standing permission by accident).
	DefaultMaxLifetime = 24 * time.Hour
	// LifetimeCeiling is the most any configuration may allow.
	LifetimeCeiling = 7 * 24 * time.Hour
	// DefaultClockSkew is how far in the future a signed issue time may lie
	// and still be taken as now: the servers of one cluster and the clock
	// that issued the request may differ by this much.
	DefaultClockSkew = time.Minute
)

// Field names, as they appear in the text.
const (
	fieldTool          = "tool"
	fieldNode          = "node"
	fieldRound         = "round"
	fieldPlanDigest    = "plan-digest"
	fieldReason        = "reason"
	fieldReviewTrigger = "review-trigger"
	fieldStep          = "step"
	fieldStop          = "stop"
	fieldIssued        = "issued"
	fieldExpires       = "expires"
	fieldNonce         = "nonce"
	fieldSummary       = "summary"
	fieldKind          = "kind"
	fieldEnvironment   = "environment"
	fieldKernel        = "kernel"
	fieldOutcomeDigest = "outcome-digest"
)

var kindFields = map[Kind][]string{
	KindApproval:                {fieldTool, fieldNode, fieldRound, fieldPlanDigest, fieldIssued, fieldExpires, fieldNonce},
	KindHypervisorSnapshotTaken: {fieldNode, fieldRound, fieldIssued, fieldExpires, fieldNonce},
	KindResidualRiskAccepted:    {fieldNode, fieldRound, fieldStep, fieldStop, fieldReason, fieldReviewTrigger, fieldIssued, fieldExpires, fieldNonce},
	KindRoundResume:             {fieldNode, fieldRound, fieldStep, fieldStop, fieldReason, fieldIssued, fieldExpires, fieldNonce},
	KindRoundAbort:              {fieldNode, fieldRound, fieldStep, fieldStop, fieldReason, fieldIssued, fieldExpires, fieldNonce},
	KindRoundOutcome:            {fieldEnvironment, fieldRound, fieldOutcomeDigest, fieldIssued, fieldExpires, fieldNonce},
	KindKernelPromoted:          {fieldEnvironment, fieldRound, fieldKernel, fieldReason, fieldIssued, fieldExpires, fieldNonce},
}

var knownFields = map[string]bool{
	fieldTool: true, fieldNode: true, fieldRound: true, fieldPlanDigest: true, fieldReason: true,
	fieldReviewTrigger: true, fieldStep: true, fieldStop: true, fieldIssued: true, fieldExpires: true,
	fieldNonce: true, fieldSummary: true, fieldKind: true, fieldEnvironment: true, fieldKernel: true, fieldOutcomeDigest: true,
}

// NoStop is the step and stop of an abort while the round is not stopped.
const NoStop = "none"

// Valid reports whether k is a kind this package knows.
func (k Kind) Valid() bool { _, ok := kindFields[k]; return ok }

// IsAttestation reports whether k is a person's statement rather than the
// approval of a tool call.
func (k Kind) IsAttestation() bool { return k.Valid() && k != KindApproval }

// IsRecord reports whether k is a statement committed to Git that stands
// after its request expired (Verifier.VerifyRecord), rather than a
// permission used once (Verifier.Verify, Verifier.Consume).
func (k Kind) IsRecord() bool { return k == KindRoundOutcome || k == KindKernelPromoted }

// Request is what a person signs. Fields that a kind does not use are empty.
// Build one with NewRequest or NewAttestation, read one with ParseRequest.
type Request struct {
	Kind Kind
	// Tool is the destructive tool approved (approval only), e.g. drain_node.
	Tool string
	// Node is the Kubernetes node name; "*" means the whole fleet
	// (residual_risk_accepted only).
	Node string
	// Round names the patch round, e.g. 2026-11.
	Round string
	// PlanDigest is "sha256:<hex>" of the plan the approval is bound to
	// (approval only).
	PlanDigest string
	// Reason is the person's words (residual_risk_accepted, round_resume,
	// round_abort, kernel_promoted).
	Reason string
	// ReviewTrigger is "<event>:<value>", the event that reopens an accepted
	// risk, e.g. driver-version-change:550.90.07 (residual_risk_accepted).
	ReviewTrigger string
	// Step is the step whose failure stopped the round (round_resume,
	// round_abort) or the failed check accepted (residual_risk_accepted),
	// or NoStop.
	Step string
	// Stop names the journal record of that failure, "<seq> sha256:<hex>"
	// (round_resume, round_abort, residual_risk_accepted), or NoStop.
	Stop string
	// Environment is the environment the round belongs to, a DNS-1123
	// label such as staging or production (round_outcome,
	// kernel_promoted).
	Environment string
	// Kernel is the kernel release promoted, as uname -r says it, e.g.
	// 6.8.0-49-generic (kernel_promoted).
	Kernel string
	// OutcomeDigest is "sha256:<hex>" of the committed outcome record the
	// statement certifies (round_outcome).
	OutcomeDigest string
	// Issued is when the server issued the request, UTC, whole seconds. It
	// is signed, so the lifetime Expires-Issued is what the person saw.
	Issued time.Time
	// Expires is when the request stops being valid, UTC, whole seconds.
	Expires time.Time
	// Nonce is 128 random bits in lowercase hex; it makes the request single use.
	Nonce string
	// Summary is what the person is shown, one line each; it is signed.
	Summary []string
}

// AttestationFields are the kind-specific fields of an attestation.
type AttestationFields struct {
	Node          string
	Round         string
	Reason        string
	ReviewTrigger string
	// Step and Stop bind a resume or abort to the stop it answers, and an
	// accepted risk to the failed check it accepts (see Request.Step and
	// Request.Stop).
	Step string
	Stop string
	// Environment, Kernel and Digest are a round outcome's environment and
	// outcome-digest, and a promoted kernel's environment and kernel (see
	// Request.Environment, Request.Kernel, Request.OutcomeDigest).
	Environment string
	Kernel      string
	Digest      string
}

// ID names the request in logs and audit records: the first 24 hex digits
// of the SHA-256 of its canonical text. It covers the nonce, so two requests
// never share one.
func (r Request) ID() string {
	sum := sha256.Sum256(r.Canonical())
	return hex.EncodeToString(sum[:12])
}

// NewRequest builds the approval request for one destructive tool call.
// clock nil means time.Now; random nil means crypto/rand.
func NewRequest(tool, node, round, digest string, summary []string, ttl time.Duration,
	clock func() time.Time, random io.Reader) (Request, error) {
	r := Request{Kind: KindApproval, Tool: tool, Node: node, Round: round, PlanDigest: digest,
		Summary: append([]string(nil), summary...)}
	if err := r.stamp(ttl, clock, random); err != nil {
		return Request{}, fmt.Errorf("new approval request for %s on %s: %w", tool, node, err)
	}
	return r, nil
}

// NewAttestation builds a statement of kind k for a person to sign.
func NewAttestation(k Kind, f AttestationFields, summary []string, ttl time.Duration,
	clock func() time.Time, random io.Reader) (Request, error) {
	if !k.IsAttestation() {
		return Request{}, fmt.Errorf("new attestation: %q is not an attestation kind", k)
	}
	r := Request{Kind: k, Node: f.Node, Round: f.Round, Reason: f.Reason, ReviewTrigger: f.ReviewTrigger,
		Step: f.Step, Stop: f.Stop, Environment: f.Environment, Kernel: f.Kernel, OutcomeDigest: f.Digest,
		Summary: append([]string(nil), summary...)}
	if err := r.stamp(ttl, clock, random); err != nil {
		return Request{}, fmt.Errorf("new %s attestation for %s: %w", k, r.subject(), err)
	}
	return r, nil
}

// subject names what a request is about, for error messages: its node or
// its environment's round.
func (r Request) subject() string {
	if r.Environment != "" {
		return fmt.Sprintf("round %s in environment %s", r.Round, r.Environment)
	}
	return r.Node
}

func (r *Request) stamp(ttl time.Duration, clock func() time.Time, random io.Reader) error {
	if ttl < time.Second || ttl > LifetimeCeiling {
		return fmt.Errorf("ttl %s is outside [1s, %s]", ttl, LifetimeCeiling)
	}
	if clock == nil {
		clock = time.Now
	}
	if random == nil {
		random = rand.Reader
	}
	var n [16]byte
	if _, err := io.ReadFull(random, n[:]); err != nil {
		return fmt.Errorf("draw nonce: %w", err)
	}
	r.Nonce = hex.EncodeToString(n[:])
	r.Issued = clock().UTC().Truncate(time.Second)
	r.Expires = r.Issued.Add(ttl.Truncate(time.Second))
	return r.Validate()
}

// Validate checks every field against the syntax the text format allows, so
// that a valid Request always has a canonical text that parses back to it.
func (r Request) Validate() error {
	fields, ok := kindFields[r.Kind]
	if !ok {
		return fmt.Errorf("unknown kind %q", r.Kind)
	}
	used := map[string]bool{}
	for _, name := range fields {
		used[name] = true
		if err := checkField(r.Kind, name, r.get(name)); err != nil {
			return err
		}
	}
	for name := range knownFields {
		if name == fieldSummary || name == fieldKind || used[name] {
			continue
		}
		if r.get(name) != "" {
			return fmt.Errorf("field %s does not belong to a %s request", name, r.Kind)
		}
	}
	for name, t := range map[string]time.Time{fieldIssued: r.Issued, fieldExpires: r.Expires} {
		if t.Location() != time.UTC || !t.Equal(t.Truncate(time.Second)) {
			return fmt.Errorf("%s %s is not a whole second in UTC", name, t)
		}
	}
	if !r.Expires.After(r.Issued) {
		return fmt.Errorf("expires %s is not after issued %s", r.Expires.Format(time.RFC3339), r.Issued.Format(time.RFC3339))
	}
	if (r.Step == NoStop) != (r.Stop == NoStop) {
		return fmt.Errorf("step %q and stop %q: both name the stop or both are %q", r.Step, r.Stop, NoStop)
	}
	if len(r.Summary) > MaxSummaryLines {
		return fmt.Errorf("summary has %d lines, more than %d", len(r.Summary), MaxSummaryLines)
	}
	for i, s := range r.Summary {
		if err := checkText(s, MaxSummaryLength); err != nil {
			return fmt.Errorf("summary line %d: %w", i+1, err)
		}
	}
	if n := len(r.canonical()); n > MaxRequestBytes {
		return fmt.Errorf("request is %d bytes, more than %d", n, MaxRequestBytes)
	}
	return nil
}

// Canonical is the exact text a person signs. It is only meaningful for a
// valid request (see Validate).
func (r Request) Canonical() []byte { return []byte(r.canonical()) }

// String is the canonical text.
func (r Request) String() string { return r.canonical() }

func (r Request) canonical() string {
	var b strings.Builder
	if r.Kind == KindApproval {
		b.WriteString(approvalHeader + "\n")
	} else {
		b.WriteString(attestationHeader + "\n")
		b.WriteString(fieldKind + ": " + string(r.Kind) + "\n")
	}
	for _, name := range kindFields[r.Kind] {
		b.WriteString(name + ": " + r.get(name) + "\n")
	}
	for _, s := range r.Summary {
		b.WriteString(fieldSummary + ": " + s + "\n")
	}
	return b.String()
}

func (r Request) get(name string) string {
	switch name {
	case fieldTool:
		return r.Tool
	case fieldNode:
		return r.Node
	case fieldRound:
		return r.Round
	case fieldPlanDigest:
		return r.PlanDigest
	case fieldReason:
		return r.Reason
	case fieldReviewTrigger:
		return r.ReviewTrigger
	case fieldStep:
		return r.Step
	case fieldStop:
		return r.Stop
	case fieldIssued:
		return formatTime(r.Issued)
	case fieldExpires:
		return formatTime(r.Expires)
	case fieldNonce:
		return r.Nonce
	case fieldEnvironment:
		return r.Environment
	case fieldKernel:
		return r.Kernel
	case fieldOutcomeDigest:
		return r.OutcomeDigest
	}
	return ""
}

func (r *Request) set(name, v string) {
	switch name {
	case fieldTool:
		r.Tool = v
	case fieldNode:
		r.Node = v
	case fieldRound:
		r.Round = v
	case fieldPlanDigest:
		r.PlanDigest = v
	case fieldReason:
		r.Reason = v
	case fieldReviewTrigger:
		r.ReviewTrigger = v
	case fieldStep:
		r.Step = v
	case fieldStop:
		r.Stop = v
	case fieldIssued:
		r.Issued, _ = time.Parse(expiresLayout, v) // checked by checkField
	case fieldExpires:
		r.Expires, _ = time.Parse(expiresLayout, v) // checked by checkField
	case fieldNonce:
		r.Nonce = v
	case fieldEnvironment:
		r.Environment = v
	case fieldKernel:
		r.Kernel = v
	case fieldOutcomeDigest:
		r.OutcomeDigest = v
	}
}

const expiresLayout = "2006-01-02T15:04:05Z"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(expiresLayout)
}

var (
	toolRE          = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`) })
	nodeLabelRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })
	roundRE         = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })
	digestRE        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) })
	nonceRE         = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{32}$`) })
	reviewTriggerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}:[A-Za-z0-9.+~:_-]{1,128}$`) })
	stepRE          = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`) })
	stopRE          = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(none|[1-9][0-9]{0,18} sha256:[0-9a-f]{64})$`) })
	kernelRE        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9][A-Za-z0-9._+~-]{0,99}$`) })
)

func checkField(k Kind, name, v string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("field %s %q: %s", name, v, fmt.Sprintf(format, args...))
	}
	if v == "" {
		return fmt.Errorf("field %s is empty", name)
	}
	switch name {
	case fieldTool:
		if !toolRE().MatchString(v) {
			return bad("want a snake_case tool name")
		}
	case fieldNode:
		if v == "*" && k == KindResidualRiskAccepted {
			return nil
		}
		if !validNodeName(v) {
			return bad("want a Kubernetes node name (lowercase DNS subdomain)")
		}
	case fieldRound:
		if !roundRE().MatchString(v) {
			return bad("want letters, digits, '.', '_' or '-', at most 64")
		}
	case fieldPlanDigest, fieldOutcomeDigest:
		if !digestRE().MatchString(v) {
			return bad("want sha256: and 64 lowercase hex digits")
		}
	case fieldEnvironment:
		// An environment is one DNS-1123 label, as a node name's part is.
		if !nodeLabelRE().MatchString(v) {
			return bad("want a DNS-1123 label: lowercase letters, digits and '-', at most 63, no '-' at either end")
		}
	case fieldKernel:
		if !kernelRE().MatchString(v) {
			return bad("want a kernel release such as 6.8.0-49-generic: a digit, then letters, digits, '.', '_', '+', '~' or '-', at most 100")
		}
	case fieldReason:
		if err := checkText(v, MaxReasonLength); err != nil {
			return bad("%v", err)
		}
	case fieldReviewTrigger:
		if !reviewTriggerRE().MatchString(v) {
			return bad("want <event>:<value>, e.g. driver-version-change:550.90.07")
		}
	case fieldStep:
		if !stepRE().MatchString(v) {
			return bad("want a step name such as install, or none")
		}
	case fieldStop:
		if !stopRE().MatchString(v) {
			return bad("want the failure's journal record as <seq> sha256:<64 hex>, or none")
		}
	case fieldIssued, fieldExpires:
		t, err := time.Parse(expiresLayout, v)
		if err != nil || t.Format(expiresLayout) != v {
			return bad("want UTC time as 2006-01-02T15:04:05Z")
		}
	case fieldNonce:
		if !nonceRE().MatchString(v) {
			return bad("want 32 lowercase hex digits")
		}
	}
	return nil
}

func validNodeName(v string) bool {
	if len(v) > 253 {
		return false
	}
	for label := range strings.SplitSeq(v, ".") {
		if !nodeLabelRE().MatchString(label) {
			return false
		}
	}
	return true
}

// checkText accepts printable ASCII without leading or trailing spaces.
// Non-ASCII is refused so that what a person reads is what the bytes say
// (no look-alike letters, no bidirectional overrides).
func checkText(s string, max int) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > max:
		return fmt.Errorf("%d characters, more than %d", len(s), max)
	case s[0] == ' ' || s[len(s)-1] == ' ':
		return errors.New("leading or trailing space")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("character %q at %d is not printable ASCII", c, i)
		}
	}
	return nil
}

// ParseRequest reads a request from its canonical text. It is strict: the
// text must be exactly what Canonical would produce for a valid request.
func ParseRequest(text []byte) (Request, error) {
	r, err := parseRequest(text)
	if err != nil {
		return Request{}, fmt.Errorf("parse request: %w", err)
	}
	return r, nil
}

func parseRequest(text []byte) (Request, error) {
	if len(text) > MaxRequestBytes {
		return Request{}, fmt.Errorf("%d bytes, more than %d", len(text), MaxRequestBytes)
	}
	s := string(text)
	if s == "" {
		return Request{}, errors.New("empty")
	}
	if !strings.HasSuffix(s, "\n") {
		return Request{}, errors.New("the last line does not end in a newline")
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		for j := 0; j < len(l); j++ {
			if c := l[j]; c < 0x20 || c > 0x7e {
				return Request{}, fmt.Errorf("line %d: character %q is not printable ASCII (CR, tab and non-ASCII are refused)", i+1, c)
			}
		}
	}
	var r Request
	next := 0
	switch lines[0] {
	case approvalHeader:
		r.Kind = KindApproval
		next = 1
	case attestationHeader:
		if len(lines) < 2 {
			return Request{}, errors.New("attestation without a kind line")
		}
		name, v, err := splitField(lines[1])
		if err != nil || name != fieldKind {
			return Request{}, fmt.Errorf("line 2: want \"kind: <kind>\", got %q", lines[1])
		}
		k := Kind(v)
		if !k.IsAttestation() {
			return Request{}, fmt.Errorf("line 2: unknown attestation kind %q", v)
		}
		r.Kind = k
		next = 2
	default:
		return Request{}, fmt.Errorf("line 1: want %q or %q, got %q", approvalHeader, attestationHeader, lines[0])
	}
	seen := map[string]bool{}
	for _, want := range kindFields[r.Kind] {
		if next >= len(lines) {
			return Request{}, fmt.Errorf("missing field %s", want)
		}
		name, v, err := splitField(lines[next])
		if err != nil {
			return Request{}, fmt.Errorf("line %d: %w", next+1, err)
		}
		if name != want {
			return Request{}, fmt.Errorf("line %d: want field %s, got %s", next+1, want, describeName(name, seen))
		}
		if err := checkField(r.Kind, name, v); err != nil {
			return Request{}, fmt.Errorf("line %d: %w", next+1, err)
		}
		r.set(name, v)
		seen[name] = true
		next++
	}
	for ; next < len(lines); next++ {
		name, v, err := splitField(lines[next])
		if err != nil {
			return Request{}, fmt.Errorf("line %d: %w", next+1, err)
		}
		if name != fieldSummary {
			return Request{}, fmt.Errorf("line %d: only summary lines may follow nonce, got %s", next+1, describeName(name, seen))
		}
		if err := checkText(v, MaxSummaryLength); err != nil {
			return Request{}, fmt.Errorf("line %d: summary: %w", next+1, err)
		}
		if len(r.Summary) == MaxSummaryLines {
			return Request{}, fmt.Errorf("more than %d summary lines", MaxSummaryLines)
		}
		r.Summary = append(r.Summary, v)
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Lifetime is how long the request is valid from its signed issue time.
func (r Request) Lifetime() time.Duration { return r.Expires.Sub(r.Issued) }

// DurationWords says a duration in plain words, its two largest units:
// "30 minutes", "1 hour 30 minutes", "180 days".
func DurationWords(d time.Duration) string {
	if d < 0 {
		return "minus " + DurationWords(-d)
	}
	d = d.Round(time.Second)
	units := []struct {
		name string
		size time.Duration
	}{{"day", 24 * time.Hour}, {"hour", time.Hour}, {"minute", time.Minute}, {"second", time.Second}}
	var parts []string
	for _, u := range units {
		if n := d / u.size; n > 0 && len(parts) < 2 {
			word := u.name
			if n != 1 {
				word += "s"
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, word))
			d -= n * u.size
		} else if len(parts) > 0 {
			break
		}
	}
	if len(parts) == 0 {
		return "0 seconds"
	}
	return strings.Join(parts, " ")
}

func describeName(name string, seen map[string]bool) string {
	switch {
	case seen[name]:
		return "duplicate field " + name
	case !knownFields[name]:
		return fmt.Sprintf("unknown field %q", name)
	}
	return "field " + name
}

// splitField splits "name: value" with exactly one space after the colon.
func splitField(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ": ")
	if !ok || name == "" {
		return "", "", fmt.Errorf("want \"name: value\", got %q", line)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c == '-') {
			return "", "", fmt.Errorf("bad field name %q", name)
		}
	}
	return name, value, nil
}
