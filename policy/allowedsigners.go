package policy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// LabOnlyLabel is the word that, in a key's trailing comment in
// allowed_signers, marks the key as one for the lab (a simulated fleet, CI),
// never for production. ssh-keygen and git ignore the comment, so the file
// stays valid for them.
const LabOnlyLabel = "lab-only"

// AllowedSigner is one key line of an allowed_signers file.
type AllowedSigner struct {
	// Line is the 1-based line number in the file.
	Line int
	// Principals are the principal patterns as written (wildcards * and ?,
	// negation with a leading !).
	Principals []string
	// Namespaces are the namespace patterns of a namespaces="..." option;
	// nil means every namespace.
	Namespaces []string
	// ValidAfter and ValidBefore bound when the key may be used; zero means
	// unbounded.
	ValidAfter, ValidBefore time.Time
	// Key is the public key.
	Key ssh.PublicKey
	// Comment is the text after the key, if any.
	Comment string
	// LabOnly is true when Comment carries LabOnlyLabel.
	LabOnly bool
}

// Principal is the principals field as written, e.g. "alice@example.com".
func (s AllowedSigner) Principal() string { return strings.Join(s.Principals, ",") }

// Names are the principals the line admits its key as: the names it lists
// literally (no wildcard, no !) that none of its negated patterns rejects,
// each as `ssh-keygen -Y verify -I NAME` would decide it. ssh-keygen
// matches a wildcard against the identity its caller claims; an approval
// claims none, so a wildcard names no one, and a line of patterns alone
// ("!*", "!alice@example.com,*", "*@example.com") admits its key as no one.
func (s AllowedSigner) Names() []string {
	var out []string
	for _, p := range s.Principals {
		if strings.HasPrefix(p, "!") || strings.ContainsAny(p, "*?") || slices.Contains(out, p) {
			continue
		}
		if matchPatternList(p, s.Principals) {
			out = append(out, p)
		}
	}
	return out
}

// Fingerprint is the key's SHA256 fingerprint as ssh-keygen prints it.
func (s AllowedSigner) Fingerprint() string { return ssh.FingerprintSHA256(s.Key) }

// MatchesPrincipal reports whether name matches the principal patterns, as
// `ssh-keygen -Y verify -I name` would decide.
func (s AllowedSigner) MatchesPrincipal(name string) bool {
	return matchPatternList(name, s.Principals)
}

// AllowsNamespace reports whether the key may sign in namespace.
func (s AllowedSigner) AllowsNamespace(namespace string) bool {
	return s.Namespaces == nil || matchPatternList(namespace, s.Namespaces)
}

// ValidAt reports whether t lies inside the key's validity interval
// (both bounds inclusive, as ssh-keygen compares whole seconds).
func (s AllowedSigner) ValidAt(t time.Time) bool {
	t = t.Truncate(time.Second)
	if !s.ValidAfter.IsZero() && t.Before(s.ValidAfter) {
		return false
	}
	if !s.ValidBefore.IsZero() && t.After(s.ValidBefore) {
		return false
	}
	return true
}

// AllowedSigners is a parsed allowed_signers file.
type AllowedSigners struct {
	Signers []AllowedSigner
}

// LabOnly returns the lines labelled lab-only, for the server to warn about
// at start.
func (a *AllowedSigners) LabOnly() []AllowedSigner {
	var out []AllowedSigner
	for _, s := range a.Signers {
		if s.LabOnly {
			out = append(out, s)
		}
	}
	return out
}

// ForKey returns the lines listing key, in file order.
func (a *AllowedSigners) ForKey(key ssh.PublicKey) []AllowedSigner {
	want := key.Marshal()
	var out []AllowedSigner
	for _, s := range a.Signers {
		if bytes.Equal(s.Key.Marshal(), want) {
			out = append(out, s)
		}
	}
	return out
}

// LoadAllowedSigners reads and parses an allowed_signers file.
func LoadAllowedSigners(path string) (*AllowedSigners, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load allowed signers: %w", err)
	}
	a, err := ParseAllowedSigners(data)
	if err != nil {
		return nil, fmt.Errorf("load allowed signers %s: %w", path, err)
	}
	return a, nil
}

// ParseAllowedSigners parses the ALLOWED SIGNERS format of ssh-keygen(1):
//
//	principals [options] keytype base64-key [comment]
//
// Blank lines and lines starting with # are skipped. Options are
// cert-authority, namespaces="…", valid-after="…" and valid-before="…"
// (YYYYMMDD[HHMM[SS]], a trailing Z for UTC, otherwise local time, as
// ssh-keygen reads them). cert-authority is refused: mcp-patch does not
// accept certificates, so such a line could only mislead. Any error names
// the line; a file with one bad line is refused whole.
func ParseAllowedSigners(data []byte) (*AllowedSigners, error) {
	a := &AllowedSigners{}
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		if strings.ContainsRune(raw, '\r') {
			return nil, fmt.Errorf("line %d: carriage return (Windows line endings?); save the file with plain newlines", n)
		}
		line := strings.TrimLeft(raw, " \t")
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSignerLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		s.Line = n
		a.Signers = append(a.Signers, s)
	}
	return a, nil
}

func parseSignerLine(line string) (AllowedSigner, error) {
	var s AllowedSigner
	principals, rest, err := cutToken(line)
	if err != nil {
		return s, fmt.Errorf("principals: %w", err)
	}
	if strings.HasPrefix(principals, "\"") {
		// ssh-keygen takes a quoted field as the whole principals list.
		inner, ok := strings.CutSuffix(principals[1:], "\"")
		if !ok || strings.ContainsAny(inner, "\"\\") {
			return s, fmt.Errorf("principals %s: quote the whole list, as in \"a@x,b y@x\"", principals)
		}
		principals = inner
	} else if strings.ContainsAny(principals, "\"\\") {
		return s, fmt.Errorf("principals %s: quote the whole list, as in \"a@x,b y@x\"", principals)
	}
	if principals == "" {
		return s, errors.New("empty principals")
	}
	s.Principals = strings.Split(principals, ",")
	for _, p := range s.Principals {
		if p == "" || p == "!" {
			return s, fmt.Errorf("empty principal in %q", principals)
		}
	}
	rest = strings.TrimLeft(rest, " \t")
	if rest == "" {
		return s, errors.New("missing key")
	}
	first, after, err := cutToken(rest)
	if err != nil {
		return s, err
	}
	if !isKeyTypeName(first) {
		if err := parseSignerOptions(first, &s); err != nil {
			return s, err
		}
		rest = strings.TrimLeft(after, " \t")
		if rest == "" {
			return s, errors.New("missing key after options")
		}
	}
	keyType, after := rest, ""
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		keyType, after = rest[:i], strings.TrimLeft(rest[i:], " \t")
	}
	if !isKeyTypeName(keyType) {
		return s, fmt.Errorf("unknown key type %q", keyType)
	}
	b64, comment := after, ""
	if i := strings.IndexAny(after, " \t"); i >= 0 {
		b64, comment = after[:i], strings.Trim(after[i:], " \t")
	}
	if b64 == "" {
		return s, fmt.Errorf("missing %s key data", keyType)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return s, fmt.Errorf("%s key data: %w", keyType, err)
	}
	key, err := ssh.ParsePublicKey(raw)
	if err != nil {
		return s, fmt.Errorf("%s key: %w", keyType, err)
	}
	if key.Type() != keyType {
		return s, fmt.Errorf("key type %s does not match the key data (%s)", keyType, key.Type())
	}
	if err := checkSignerKey(key); err != nil {
		return s, err
	}
	s.Key = key
	s.Comment = comment
	for f := range strings.FieldsSeq(comment) {
		// "lab-only:" and "lab-only," count too: a label followed by
		// punctuation must not quietly turn a lab key into a production one.
		if strings.EqualFold(strings.TrimRight(f, ":,;."), LabOnlyLabel) {
			s.LabOnly = true
		}
	}
	return s, nil
}

// cutToken returns the first whitespace-delimited token, where whitespace
// inside double quotes does not count.
func cutToken(s string) (tok, rest string, err error) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && inQuote && i+1 < len(s):
			i++
		case c == '"':
			inQuote = !inQuote
		case (c == ' ' || c == '\t') && !inQuote:
			return s[:i], s[i:], nil
		}
	}
	if inQuote {
		return "", "", errors.New("unterminated quote")
	}
	return s, "", nil
}

func isKeyTypeName(s string) bool {
	switch s {
	case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
		ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256, ssh.KeyAlgoRSA, "ssh-dss":
		return true
	}
	return strings.HasSuffix(s, "-cert-v01@openssh.com")
}

func parseSignerOptions(opts string, s *AllowedSigner) error {
	var seenNS, seenAfter, seenBefore bool
	for opts != "" {
		name, val, rest, err := cutOption(opts)
		if err != nil {
			return fmt.Errorf("options: %w", err)
		}
		opts = rest
		name = strings.ToLower(name)
		switch name {
		case "cert-authority":
			return errors.New("cert-authority is not supported: mcp-patch accepts plain keys only; list each person's public key")
		case "namespaces":
			if seenNS {
				return errors.New(`options: more than one namespaces="…"`)
			}
			seenNS = true
			if val == nil || *val == "" {
				return errors.New(`options: namespaces needs a quoted list`)
			}
			s.Namespaces = strings.Split(*val, ",")
		case "valid-after", "valid-before":
			if (name == "valid-after" && seenAfter) || (name == "valid-before" && seenBefore) {
				return fmt.Errorf("options: more than one %s", name)
			}
			if val == nil {
				return fmt.Errorf("options: %s needs a quoted time", name)
			}
			t, err := parseSignerTime(*val)
			if err != nil {
				return fmt.Errorf("options: %s: %w", name, err)
			}
			if name == "valid-after" {
				seenAfter, s.ValidAfter = true, t
			} else {
				seenBefore, s.ValidBefore = true, t
			}
		default:
			if strings.HasPrefix(name, "ssh-") || strings.HasPrefix(name, "ecdsa-") || strings.HasPrefix(name, "sk-") {
				return fmt.Errorf("unknown key type %q", name)
			}
			return fmt.Errorf("options: unknown option %q", name)
		}
	}
	if !s.ValidAfter.IsZero() && !s.ValidBefore.IsZero() && !s.ValidBefore.After(s.ValidAfter) {
		return errors.New("options: valid-before is not after valid-after")
	}
	return nil
}

// cutOption reads one option: name or name="value" (with \" escapes),
// followed by a comma or the end.
func cutOption(s string) (name string, val *string, rest string, err error) {
	i := strings.IndexAny(s, "=,")
	if i < 0 {
		return s, nil, "", nil
	}
	name = s[:i]
	if name == "" {
		return "", nil, "", errors.New("empty option")
	}
	if s[i] == ',' {
		if i+1 == len(s) {
			return "", nil, "", errors.New("trailing comma")
		}
		return name, nil, s[i+1:], nil
	}
	s = s[i+1:]
	if !strings.HasPrefix(s, "\"") {
		return "", nil, "", fmt.Errorf("option %s: value is not quoted", name)
	}
	var b strings.Builder
	j := 1
	for ; j < len(s); j++ {
		c := s[j]
		if c == '\\' && j+1 < len(s) && s[j+1] == '"' {
			b.WriteByte('"')
			j++
			continue
		}
		if c == '"' {
			break
		}
		b.WriteByte(c)
	}
	if j >= len(s) {
		return "", nil, "", fmt.Errorf("option %s: unterminated quote", name)
	}
	v := b.String()
	s = s[j+1:]
	switch {
	case s == "":
		return name, &v, "", nil
	case s[0] == ',' && len(s) > 1:
		return name, &v, s[1:], nil
	}
	return "", nil, "", fmt.Errorf("option %s: unexpected %q after the value", name, s)
}

// parseSignerTime reads YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS, with a
// trailing Z for UTC and local time otherwise.
func parseSignerTime(v string) (time.Time, error) {
	loc := time.Local
	digits := v
	if d, ok := strings.CutSuffix(v, "Z"); ok {
		digits, loc = d, time.UTC
	}
	var layout string
	switch len(digits) {
	case 8:
		layout = "20060102"
	case 12:
		layout = "200601021504"
	case 14:
		layout = "20060102150405"
	default:
		return time.Time{}, fmt.Errorf("%q is not YYYYMMDD[HHMM[SS]][Z]", v)
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return time.Time{}, fmt.Errorf("%q is not YYYYMMDD[HHMM[SS]][Z]", v)
		}
	}
	t, err := time.ParseInLocation(layout, digits, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: %w", v, err)
	}
	return t, nil
}

// matchPatternList decides like OpenSSH's match_pattern_list: a name matches
// when some pattern matches it and no negated (!) pattern does.
func matchPatternList(name string, patterns []string) bool {
	matched := false
	for _, p := range patterns {
		if neg, ok := strings.CutPrefix(p, "!"); ok {
			if matchPattern(name, neg) {
				return false
			}
			continue
		}
		if matchPattern(name, p) {
			matched = true
		}
	}
	return matched
}

// matchPattern matches name against a pattern with * (any run) and ? (any
// one character).
func matchPattern(name, pattern string) bool {
	// Iterative wildcard match with backtracking to the last star.
	n, p := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			n++
			p++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
