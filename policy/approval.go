package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Reason names why an approval was refused. The values are stable and meant
// for tool results and audit records.
type Reason string

// Reasons for refusing an approval.
const (
	ReasonMalformed           Reason = "malformed"             // not a well-formed request + signature
	ReasonWrongNamespace      Reason = "wrong_namespace"       // signed for another purpose (e.g. -n file)
	ReasonUnsupportedKey      Reason = "unsupported_key"       // certificate, DSA, short RSA
	ReasonUnknownSigner       Reason = "unknown_signer"        // key not in allowed_signers
	ReasonNoPrincipal         Reason = "no_principal"          // allowed_signers lists the key for no principal by name ("!*")
	ReasonPrincipalNotAllowed Reason = "principal_not_allowed" // the step needs a principal the signer is not admitted as
	ReasonBadSignature        Reason = "bad_signature"         // the signature does not verify
	ReasonNamespaceNotAllowed Reason = "namespace_not_allowed" // allowed_signers limits the key to other namespaces
	ReasonSignerNotValid      Reason = "signer_not_valid_now"  // outside valid-after/valid-before
	ReasonLabOnlySigner       Reason = "lab_only_signer"       // the key is labelled lab-only and the server refuses those
	ReasonExpired             Reason = "expired"               // past its expiry
	ReasonLifetimeTooLong     Reason = "lifetime_too_long"     // issued for longer than the maximum lifetime
	ReasonIssuedInFuture      Reason = "issued_in_future"      // its signed issue time is ahead of the clock
	ReasonMismatch            Reason = "mismatch"              // signed for another tool/node/round/plan/kind
	ReasonReplayed            Reason = "replayed"              // its nonce was already used
	ReasonNeverUsed           Reason = "never_used"            // a standing approval no server accepted while it was valid
)

// RefusalError is why an approval was not accepted. Match a reason with
// errors.Is(err, ErrExpired) and so on; read the fields with errors.As.
type RefusalError struct {
	Reason Reason
	// Field, Want and Got say which binding differed (ReasonMismatch):
	// Want is what the step needs, Got what the approval says.
	Field, Want, Got string
	// Detail says what happened in words.
	Detail string
}

func (e *RefusalError) Error() string {
	if e.Reason == ReasonMismatch {
		return fmt.Sprintf("approval refused (%s): %s: the approval says %q, this step needs %q", e.Reason, e.Field, e.Got, e.Want)
	}
	return fmt.Sprintf("approval refused (%s): %s", e.Reason, e.Detail)
}

// Is matches refusals by reason, so errors.Is(err, ErrExpired) works.
func (e *RefusalError) Is(target error) bool {
	t, ok := target.(*RefusalError)
	return ok && t.Reason == e.Reason
}

// Hint says in plain words what to do about the refusal.
func (e *RefusalError) Hint() string {
	switch e.Reason {
	case ReasonMalformed:
		return "Pass the approval back exactly as the person produced it: the request text followed by the SSH signature block."
	case ReasonWrongNamespace:
		return "Sign again with the namespace mcp-patch: ssh-keygen -Y sign -n mcp-patch -f KEY request.txt."
	case ReasonUnsupportedKey:
		return "Sign with a plain ed25519, ecdsa, rsa (2048 bits or more) or FIDO hardware key."
	case ReasonUnknownSigner, ReasonNoPrincipal, ReasonNamespaceNotAllowed, ReasonSignerNotValid, ReasonLabOnlySigner:
		return "Ask a person whose key is allowed in the server's allowed_signers (by name, for namespace mcp-patch, now) to sign the request."
	case ReasonPrincipalNotAllowed:
		return "Ask one of the principals this kind of step needs to sign the request."
	case ReasonBadSignature:
		return "The request or the signature was changed after signing; ask a person to sign the request again."
	case ReasonLifetimeTooLong:
		return "Request a fresh approval: the server issues requests valid for its configured lifetime; do not sign requests that stay valid longer."
	case ReasonIssuedInFuture:
		return "The request claims to be issued later than now: request a fresh approval from this server (and check the clocks)."
	case ReasonExpired, ReasonReplayed, ReasonNeverUsed:
		return "Request a fresh approval and ask a person to sign it."
	case ReasonMismatch:
		return "The approval was signed for a different step or plan; request an approval for this step and plan."
	}
	return ""
}

// Sentinels for errors.Is.
var (
	ErrMalformed           = &RefusalError{Reason: ReasonMalformed}
	ErrWrongNamespace      = &RefusalError{Reason: ReasonWrongNamespace}
	ErrUnsupportedKey      = &RefusalError{Reason: ReasonUnsupportedKey}
	ErrUnknownSigner       = &RefusalError{Reason: ReasonUnknownSigner}
	ErrNoPrincipal         = &RefusalError{Reason: ReasonNoPrincipal}
	ErrPrincipalNotAllowed = &RefusalError{Reason: ReasonPrincipalNotAllowed}
	ErrBadSignature        = &RefusalError{Reason: ReasonBadSignature}
	ErrNamespaceNotAllowed = &RefusalError{Reason: ReasonNamespaceNotAllowed}
	ErrSignerNotValid      = &RefusalError{Reason: ReasonSignerNotValid}
	ErrLabOnlySigner       = &RefusalError{Reason: ReasonLabOnlySigner}
	ErrExpired             = &RefusalError{Reason: ReasonExpired}
	ErrLifetimeTooLong     = &RefusalError{Reason: ReasonLifetimeTooLong}
	ErrIssuedInFuture      = &RefusalError{Reason: ReasonIssuedInFuture}
	ErrMismatch            = &RefusalError{Reason: ReasonMismatch}
	ErrReplayed            = &RefusalError{Reason: ReasonReplayed}
	ErrNeverUsed           = &RefusalError{Reason: ReasonNeverUsed}
)

func refusal(r Reason, field, want, got, detail string) *RefusalError {
	return &RefusalError{Reason: r, Field: field, Want: want, Got: got, Detail: detail}
}

// Approval is a request together with its armored SSHSIG signature: the one
// blob a person hands back (through the agent) to let a step run.
type Approval struct {
	Request Request
	// Signature is the armored signature over Request.Canonical().
	Signature []byte
}

// FormatApproval joins a request and its armored signature into the text
// the agent passes back: the request, then the signature block. It is what
// `cat request.txt request.txt.sig` gives.
func FormatApproval(req Request, armoredSig []byte) string {
	return req.String() + string(armoredSig)
}

// String is the approval text.
func (a Approval) String() string { return FormatApproval(a.Request, a.Signature) }

// maxApprovalBytes bounds an approval: a request and a signature block
// (an RSA-16384 signature armors to under 6 KiB).
const maxApprovalBytes = MaxRequestBytes + 16<<10

// ParseApproval splits and checks an approval's text. It does not verify the
// signature (see Verifier).
func ParseApproval(text string) (Approval, error) {
	a, _, err := parseApproval(text)
	return a, err
}

func parseApproval(text string) (Approval, sigBlob, error) {
	fail := func(format string, args ...any) (Approval, sigBlob, error) {
		return Approval{}, sigBlob{}, refusal(ReasonMalformed, "", "", "", "parse approval: "+fmt.Sprintf(format, args...))
	}
	if len(text) > maxApprovalBytes {
		return fail("%d bytes, more than %d", len(text), maxApprovalBytes)
	}
	i := strings.Index(text, "\n"+armorBegin+"\n")
	if i < 0 {
		if strings.HasPrefix(text, armorBegin) {
			return fail("no request text before the signature")
		}
		return fail("no signature block (%s) after the request; the request must be signed", armorBegin)
	}
	reqText, sigText := text[:i+1], text[i+1:]
	req, err := ParseRequest([]byte(reqText))
	if err != nil {
		return fail("%v", err)
	}
	if string(req.Canonical()) != reqText {
		return fail("request text is not in canonical form")
	}
	blob, err := unarmor(sigText)
	if err != nil {
		return fail("%v", err)
	}
	sb, err := parseSigBlob(blob)
	if err != nil {
		return fail("%v", err)
	}
	return Approval{Request: req, Signature: []byte(sigText)}, sb, nil
}

// Expectation is what the step about to run needs an approval to say.
type Expectation struct {
	// Kind is what is being approved; zero means KindApproval.
	Kind Kind
	// Tool, Node, Round and PlanDigest must all be set for KindApproval.
	// Attestations need Node and Round and must leave Tool and PlanDigest
	// empty.
	Tool, Node, Round, PlanDigest string
	// Step and Stop are the stop a resume or abort answers, or the failed
	// check an accepted risk accepts: the failed step and its journal
	// record ("<seq> sha256:<hex>"), or NoStop for both. Required for
	// round_resume, round_abort and residual_risk_accepted, empty for
	// other kinds.
	Step, Stop string
	// Summary, when non-nil, must equal the signed summary line for line.
	// Pass the summary the server derives from the plan, so that a request
	// whose summary was altered before the person saw it is refused.
	Summary []string
	// Principals, when not empty, are the principals one of whom must
	// have signed: the signer's allowed_signers line must admit its key
	// as one of them (Verified.Principals). Empty: anyone the file admits.
	Principals []string
}

// bindsStop says whether a kind names a failure of the round: the stop a
// resume or abort answers, the failed check an accepted risk accepts.
func (k Kind) bindsStop() bool {
	return k == KindRoundResume || k == KindRoundAbort || k == KindResidualRiskAccepted
}

func (e Expectation) kind() Kind {
	if e.Kind == "" {
		return KindApproval
	}
	return e.Kind
}

func (e Expectation) validate() error {
	k := e.kind()
	if !k.Valid() {
		return fmt.Errorf("unknown kind %q", e.Kind)
	}
	if k.IsRecord() {
		return fmt.Errorf("%s is a record, not a permission used once: check it with VerifyRecord", k)
	}
	need := map[string]string{fieldNode: e.Node, fieldRound: e.Round}
	if k == KindApproval {
		need[fieldTool], need[fieldPlanDigest] = e.Tool, e.PlanDigest
	} else if e.Tool != "" || e.PlanDigest != "" {
		return fmt.Errorf("tool and plan-digest do not apply to %s", k)
	}
	if k.bindsStop() {
		need[fieldStep], need[fieldStop] = e.Step, e.Stop
	} else if e.Step != "" || e.Stop != "" {
		return fmt.Errorf("step and stop do not apply to %s", k)
	}
	for _, name := range []string{fieldTool, fieldNode, fieldRound, fieldPlanDigest, fieldStep, fieldStop} {
		if v, ok := need[name]; ok && v == "" {
			return fmt.Errorf("%s is empty", name)
		}
	}
	return nil
}

// Verified is an accepted approval: who signed what.
type Verified struct {
	// Principals are the names the allowed_signers line that verified the
	// signature admits the key as (AllowedSigner.Names), e.g.
	// ["alice@example.com"]; never empty. Principal is them joined by ",".
	Principals []string
	Principal  string
	// KeyFingerprint is the signing key's SHA256 fingerprint.
	KeyFingerprint string
	// KeyType is the signing key's type, e.g. ssh-ed25519.
	KeyType string
	// HardwareKey is true for FIDO (sk-) keys; their signatures always
	// carry the user-presence flag.
	HardwareKey bool
	// SignerLine is the allowed_signers line that admitted the key.
	SignerLine int
	// LabOnly is true when that line is labelled lab-only.
	LabOnly bool
	// Nonce is the request's nonce; ApprovalID is Request.ID().
	Nonce, ApprovalID string
	// Expires is when the approval stops being valid.
	Expires time.Time
	// Request is the signed request.
	Request Request
}

// Verifier checks approvals against the allowed signers, the clock and the
// used nonces.
type Verifier struct {
	// AllowedSigners are the keys that may sign. Required.
	AllowedSigners *AllowedSigners
	// NonceStore says which nonces were used. Required.
	NonceStore NonceStore
	// Clock tells the time; nil means time.Now.
	Clock func() time.Time
	// RefuseLabOnly refuses keys labelled lab-only (for production).
	RefuseLabOnly bool
	// MaxLifetime is the longest a request may be valid, from its signed
	// issue time to its expiry; zero means DefaultMaxLifetime.
	MaxLifetime time.Duration
	// ClockSkew is how far ahead of the clock a signed issue time may lie;
	// zero means DefaultClockSkew, negative means none.
	ClockSkew time.Duration
}

func (v *Verifier) now() time.Time {
	if v.Clock != nil {
		return v.Clock()
	}
	return time.Now()
}

// Verify checks an approval for the step described by want. It consumes
// nothing: call Consume right before executing the step. Any refusal is a
// *RefusalError; other errors (a broken nonce store, a bad expectation)
// also mean "do not run". ctx bounds the nonce store's look-up.
func (v *Verifier) Verify(ctx context.Context, approval string, want Expectation) (Verified, error) {
	got, err := v.verify(ctx, approval, want)
	if err != nil {
		return Verified{}, fmt.Errorf("verify approval: %w", err)
	}
	return got, nil
}

// Reverify checks again an approval that was accepted and used before,
// and that stands for what it signed (the signed plan of a round, the
// approval of a node's window): the same checks as Verify against the
// allowed signers of now (a key removed since is refused), the binding
// and the signed lifetime, except that it must have been used (its nonce
// consumed while it was valid) instead of unused and unexpired. Only the
// signed bytes prove an approval: a record of one, anywhere, does not.
func (v *Verifier) Reverify(ctx context.Context, approval string, want Expectation) (Verified, error) {
	got, err := v.check(ctx, approval, want, true)
	if err != nil {
		return Verified{}, fmt.Errorf("verify standing approval: %w", err)
	}
	return got, nil
}

// DerivedNonce is the nonce of one part of a standing approval (a step of
// a window approval): consuming it uses that part up, once, where every
// server looks, without touching the approval's own nonce.
func DerivedNonce(nonce, part string) string {
	sum := sha256.Sum256([]byte("mcp-patch derived nonce v1\n" + nonce + "\n" + part + "\n"))
	return hex.EncodeToString(sum[:16])
}

func (v *Verifier) verify(ctx context.Context, text string, want Expectation) (Verified, error) {
	return v.check(ctx, text, want, false)
}

func (v *Verifier) check(ctx context.Context, text string, want Expectation, standing bool) (Verified, error) {
	if v.AllowedSigners == nil || v.NonceStore == nil {
		return Verified{}, errors.New("verifier needs AllowedSigners and NonceStore")
	}
	if err := want.validate(); err != nil {
		return Verified{}, fmt.Errorf("expectation: %w", err)
	}
	s, err := v.signed(text)
	if err != nil {
		return Verified{}, err
	}
	now := v.now()
	signer, err := pickSignerLine(s.lines, now, s.fp)
	if err != nil {
		return Verified{}, err
	}
	names := signer.Names()
	if signer.LabOnly && v.RefuseLabOnly {
		return Verified{}, refusal(ReasonLabOnlySigner, "", "", "", fmt.Sprintf("key %s (allowed_signers line %d, %s) is labelled lab-only", s.fp, signer.Line, strings.Join(names, ",")))
	}
	req := s.req
	if !standing && !now.Before(req.Expires) {
		return Verified{}, refusal(ReasonExpired, "", "", "", fmt.Sprintf("expired at %s, it is now %s", req.Expires.Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
	}
	if err := CheckLifetime(req, now, v.MaxLifetime, v.ClockSkew); err != nil {
		return Verified{}, err
	}
	if err := checkBinding(req, want); err != nil {
		return Verified{}, err
	}
	got := s.verified(signer)
	if err := got.RequirePrincipals(want.Principals); err != nil {
		return Verified{}, err
	}
	used, err := v.NonceStore.Used(ctx, req.Nonce)
	if err != nil {
		return Verified{}, err
	}
	switch {
	case used && !standing:
		return Verified{}, refusal(ReasonReplayed, "", "", "", fmt.Sprintf("nonce %s has already been used", req.Nonce))
	case !used && standing:
		return Verified{}, refusal(ReasonNeverUsed, "", "", "", fmt.Sprintf("approval %s (nonce %s) was never accepted by this server while it was valid", req.ID(), req.Nonce))
	}
	return got, nil
}

// VerifyRecord checks a signed statement committed to Git as a record (a
// kind for which Kind.IsRecord holds: round_outcome, kernel_promoted),
// whenever a step relies on it, long after its request expired. text is
// the request followed by its signature block, as for Verify.
//
// It proves, when it returns no error:
//   - the statement is of kind want, and its text is in canonical form;
//   - its bytes, summary lines included, are what a key signed, with an
//     SSHSIG signature in the namespace mcp-patch;
//   - that key is in allowed_signers now (a key removed since is
//     refused), and the line that admits it names a principal, allows the
//     namespace, and was valid at the request's signed issue time (a line
//     whose valid-before passed since still admits what was signed
//     before it);
//   - the key is not labelled lab-only, when RefuseLabOnly is set;
//   - the signed lifetime (expires - issued) is within MaxLifetime, and
//     the issue time is not after now by more than ClockSkew.
//
// It does not prove:
//   - that the request is unexpired now: the record stands after its
//     request expired;
//   - anything about the nonce: it reads no NonceStore (none is needed)
//     and consumes nothing, so the same record may be relied on again;
//   - that the record says what the caller needs: the caller compares
//     the returned Request (environment, round, outcome-digest or kernel,
//     and the summary) with what it plans on, and the signer's principals
//     (Verified.RequirePrincipals) with who may make the statement;
//   - that the server composed the request: anyone may write the text;
//     the signature is what a person vouches for.
//
// A refusal is a *RefusalError naming what failed (ErrMalformed,
// ErrBadSignature, ErrUnknownSigner, ErrMismatch for another kind, ...).
// A want that is not a record kind is an error of the caller, not a
// refusal. ctx is not used today: nothing it does waits.
func (v *Verifier) VerifyRecord(ctx context.Context, text string, want Kind) (Verified, Request, error) {
	got, err := v.verifyRecord(text, want)
	if err != nil {
		return Verified{}, Request{}, fmt.Errorf("verify %s record: %w", want, err)
	}
	return got, got.Request, nil
}

func (v *Verifier) verifyRecord(text string, want Kind) (Verified, error) {
	if v.AllowedSigners == nil {
		return Verified{}, errors.New("verifier needs AllowedSigners")
	}
	if !want.IsRecord() {
		return Verified{}, fmt.Errorf("%q is not a record kind: check it with Verify", want)
	}
	s, err := v.signed(text)
	if err != nil {
		return Verified{}, err
	}
	req := s.req
	// The issue time is signed, so the line is judged when the person
	// signed, not now: a record outlives its signer's valid-before.
	signer, err := pickSignerLine(s.lines, req.Issued, s.fp)
	if err != nil {
		return Verified{}, err
	}
	names := signer.Names()
	if signer.LabOnly && v.RefuseLabOnly {
		return Verified{}, refusal(ReasonLabOnlySigner, "", "", "", fmt.Sprintf("key %s (allowed_signers line %d, %s) is labelled lab-only", s.fp, signer.Line, strings.Join(names, ",")))
	}
	if err := CheckLifetime(req, v.now(), v.MaxLifetime, v.ClockSkew); err != nil {
		return Verified{}, err
	}
	if req.Kind != want {
		return Verified{}, refusal(ReasonMismatch, "kind", string(want), string(req.Kind), "")
	}
	return s.verified(signer), nil
}

// signedText is a request whose signature verified with a key that
// allowed_signers lists, on the lines given; which line admits it, when,
// is for the caller to decide.
type signedText struct {
	req   Request
	pub   ssh.PublicKey
	fp    string
	lines []AllowedSigner
}

// signed parses text (request and signature block) and checks the
// signature: namespace, key type, a key allowed_signers lists, and the
// signature over the canonical request.
func (v *Verifier) signed(text string) (signedText, error) {
	a, sb, err := parseApproval(text)
	if err != nil {
		return signedText{}, err
	}
	pub := sb.PublicKey
	fp := ssh.FingerprintSHA256(pub)
	if sb.Namespace != Namespace {
		return signedText{}, refusal(ReasonWrongNamespace, "", "", "", fmt.Sprintf("signature namespace is %q, want %q", sb.Namespace, Namespace))
	}
	if err := checkSignerKey(pub); err != nil {
		return signedText{}, refusal(ReasonUnsupportedKey, "", "", "", err.Error())
	}
	lines := v.AllowedSigners.ForKey(pub)
	if len(lines) == 0 {
		return signedText{}, refusal(ReasonUnknownSigner, "", "", "", fmt.Sprintf("%s key %s is not in allowed_signers", pub.Type(), fp))
	}
	if err := verifySigBlob(sb, Namespace, a.Request.Canonical()); err != nil {
		return signedText{}, refusal(ReasonBadSignature, "", "", "", err.Error())
	}
	return signedText{req: a.Request, pub: pub, fp: fp, lines: lines}, nil
}

// verified is who signed s, admitted by the allowed_signers line signer.
func (s signedText) verified(signer AllowedSigner) Verified {
	names := signer.Names()
	return Verified{
		Principals:     names,
		Principal:      strings.Join(names, ","),
		KeyFingerprint: s.fp,
		KeyType:        s.pub.Type(),
		HardwareKey:    isSK(s.pub),
		SignerLine:     signer.Line,
		LabOnly:        signer.LabOnly,
		Nonce:          s.req.Nonce,
		ApprovalID:     s.req.ID(),
		Expires:        s.req.Expires,
		Request:        s.req,
	}
}

// RequirePrincipals refuses (ErrPrincipalNotAllowed) unless the signer is
// admitted as one of names; no names: anyone allowed_signers admits. It is
// what Verify checks for Expectation.Principals, for callers that hold an
// approval verified before (a window approval relied on step by step).
func (v Verified) RequirePrincipals(names []string) error {
	if len(names) == 0 {
		return nil
	}
	for _, p := range v.Principals {
		if slices.Contains(names, p) {
			return nil
		}
	}
	return refusal(ReasonPrincipalNotAllowed, "", "", "", fmt.Sprintf("signed by %s (key %s, allowed_signers line %d); this step needs a signature by %s",
		orNoOne(v.Principals), v.KeyFingerprint, v.SignerLine, oneOf(names)))
}

func orNoOne(names []string) string {
	if len(names) == 0 {
		return "no principal"
	}
	return strings.Join(names, ", ")
}

// oneOf is "a", "a or b", "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// pickSignerLine returns the first line for the key that admits it as a
// principal, in the namespace, now; otherwise the refusal of the first
// line. Like ssh-keygen, each line stands alone: a "!*" line does not
// take back what another line of the same key admits.
func pickSignerLine(lines []AllowedSigner, now time.Time, fp string) (AllowedSigner, error) {
	var first error
	for _, s := range lines {
		var err error
		switch {
		case len(s.Names()) == 0:
			err = refusal(ReasonNoPrincipal, "", "", "", fmt.Sprintf("allowed_signers line %d lists key %s for %q, which admits no principal: a negated pattern (!) admits no one and a wildcard names no one; list the person by name", s.Line, fp, s.Principal()))
		case !s.AllowsNamespace(Namespace):
			err = refusal(ReasonNamespaceNotAllowed, "", "", "", fmt.Sprintf("allowed_signers line %d limits key %s to namespaces %q", s.Line, fp, strings.Join(s.Namespaces, ",")))
		case !s.ValidAt(now):
			err = refusal(ReasonSignerNotValid, "", "", "", fmt.Sprintf("allowed_signers line %d admits key %s only %s", s.Line, fp, validityWords(s)))
		default:
			return s, nil
		}
		if first == nil {
			first = err
		}
	}
	return AllowedSigner{}, first
}

func validityWords(s AllowedSigner) string {
	var parts []string
	if !s.ValidAfter.IsZero() {
		parts = append(parts, "from "+s.ValidAfter.UTC().Format(time.RFC3339))
	}
	if !s.ValidBefore.IsZero() {
		parts = append(parts, "until "+s.ValidBefore.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, " ")
}

// CheckLifetime refuses a request that is valid for longer than max (zero:
// DefaultMaxLifetime) from its signed issue time, or whose issue time lies
// more than skew (zero: DefaultClockSkew; negative: none) after now. It
// holds whenever the request is presented, long before its expiry as well
// as just before it. Expiry itself is checked by Verify.
func CheckLifetime(req Request, now time.Time, max, skew time.Duration) error {
	if max <= 0 {
		max = DefaultMaxLifetime
	}
	switch {
	case skew == 0:
		skew = DefaultClockSkew
	case skew < 0:
		skew = 0
	}
	if life := req.Lifetime(); life > max {
		return refusal(ReasonLifetimeTooLong, "", "", "", fmt.Sprintf("issued %s and valid until %s: %s, longer than the %s allowed",
			req.Issued.Format(time.RFC3339), req.Expires.Format(time.RFC3339), DurationWords(life), DurationWords(max)))
	}
	if ahead := req.Issued.Sub(now); ahead > skew {
		return refusal(ReasonIssuedInFuture, "", "", "", fmt.Sprintf("issued %s, %s after now (%s)",
			req.Issued.Format(time.RFC3339), DurationWords(ahead), now.UTC().Format(time.RFC3339)))
	}
	return nil
}

func checkBinding(req Request, want Expectation) error {
	if k := want.kind(); req.Kind != k {
		return refusal(ReasonMismatch, "kind", string(k), string(req.Kind), "")
	}
	for _, c := range []struct{ field, want, got string }{
		{fieldTool, want.Tool, req.Tool},
		{fieldNode, want.Node, req.Node},
		{fieldRound, want.Round, req.Round},
		{fieldPlanDigest, want.PlanDigest, req.PlanDigest},
		{fieldStep, want.Step, req.Step},
		{fieldStop, want.Stop, req.Stop},
	} {
		if c.want != c.got {
			return refusal(ReasonMismatch, c.field, c.want, c.got, "")
		}
	}
	if want.Summary != nil && !slices.Equal(want.Summary, req.Summary) {
		for i := range max(len(want.Summary), len(req.Summary)) {
			w, wok := lineAt(want.Summary, i)
			g, gok := lineAt(req.Summary, i)
			if w != g || wok != gok {
				return refusal(ReasonMismatch, fmt.Sprintf("summary line %d", i+1), w, g, "")
			}
		}
	}
	return nil
}

func lineAt(lines []string, i int) (string, bool) {
	if i < len(lines) {
		return lines[i], true
	}
	return "(no line)", false
}

// ConsumePart uses up one part of a standing approval (DerivedNonce), once,
// durably: a second call for the same part is refused with ErrReplayed.
// The approval itself must have been used (Reverify checked it).
func (v *Verifier) ConsumePart(ctx context.Context, got Verified, part string) error {
	if v.NonceStore == nil {
		return errors.New("consume approval: verifier has no NonceStore")
	}
	// The mark outlives the approval's own expiry: the part is used for
	// as long as the standing approval could be presented.
	until := v.now().Add(LifetimeCeiling)
	if err := v.NonceStore.Consume(ctx, DerivedNonce(got.Nonce, part), got.ApprovalID, v.now(), until); err != nil {
		return fmt.Errorf("use %s of approval %s: %w", part, got.ApprovalID, err)
	}
	return nil
}

// Consume marks the approval used. Call it once the step is certain to run,
// immediately before running it; if it fails, do not run. It refuses an
// approval that expired since Verify, and one whose nonce another caller
// consumed first (ErrReplayed).
func (v *Verifier) Consume(ctx context.Context, got Verified) error {
	if v.NonceStore == nil {
		return errors.New("consume approval: verifier has no NonceStore")
	}
	now := v.now()
	if !now.Before(got.Expires) {
		return fmt.Errorf("consume approval %s: %w", got.ApprovalID,
			refusal(ReasonExpired, "", "", "", fmt.Sprintf("expired at %s, before it was used", got.Expires.Format(time.RFC3339))))
	}
	if err := v.NonceStore.Consume(ctx, got.Nonce, got.ApprovalID, now, got.Expires); err != nil {
		return fmt.Errorf("consume approval %s: %w", got.ApprovalID, err)
	}
	return nil
}
