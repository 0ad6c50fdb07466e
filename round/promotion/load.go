package promotion

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/mcp-patch/mcp-patch/round"
)

// Statement is what a verified outcome statement binds, and who signed it.
type Statement struct {
	Environment, Round, Digest string
	Summary                    []string
	Principal                  string
}

// VerifyFunc verifies a committed outcome statement's signature as the
// trust rules require (policy's record check: the key in allowed_signers
// now, the signature over the canonical statement, the kind) and returns
// what it binds.
type VerifyFunc func(ctx context.Context, text string) (Statement, error)

// Check holds a verified statement to the record beside it: the same
// environment and round (and the round's directory), the SHA-256 of the
// record's exact bytes, and the record's own lines as the summary the
// person was shown. "" when it holds.
func Check(st Statement, dirRound string, o Outcome, raw []byte) string {
	switch {
	case st.Environment != o.Environment:
		return fmt.Sprintf("the statement was signed for environment %s, the record says %s", st.Environment, o.Environment)
	case st.Round != o.Round || o.Round != dirRound:
		return fmt.Sprintf("the statement was signed for round %s, the record says %s in rounds/%s", st.Round, o.Round, dirRound)
	case st.Digest != Digest(raw):
		return fmt.Sprintf("the record was changed after it was signed (its digest is %s, the statement binds %s)", Digest(raw), st.Digest)
	case !slices.Equal(st.Summary, o.Lines()):
		return "the summary the person signed is not the record's"
	}
	return ""
}

// Load reads every round of the intent repository at root whose outcome
// record names environment upstream, and verifies each one's statement.
// A record that proves nothing is Rejected with the reason; an error is
// returned only when the rounds cannot be listed at all.
func Load(ctx context.Context, root, upstream string, verify VerifyFunc) ([]Proof, []Rejected, error) {
	roundsDir := filepath.Join(root, "rounds")
	entries, err := os.ReadDir(roundsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list the rounds of %s: %w", root, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var proofs []Proof
	var rejected []Rejected
	for _, e := range entries {
		id := e.Name()
		dir := filepath.Join(roundsDir, id)
		rel := "rounds/" + id + "/" + OutcomeFile
		if _, err := os.Lstat(filepath.Join(dir, OutcomeFile)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		raw, err := round.ReadFile(root, dir, OutcomeFile)
		if err != nil {
			rejected = append(rejected, Rejected{Path: rel, Why: "unreadable: " + err.Error()})
			continue
		}
		o, err := Decode(raw)
		if err != nil {
			rejected = append(rejected, Rejected{Path: rel, Why: err.Error()})
			continue
		}
		if o.Environment != upstream {
			continue
		}
		text, err := round.ReadFile(root, dir, StatementFile)
		if errors.Is(err, os.ErrNotExist) {
			rejected = append(rejected, Rejected{Path: rel, Why: "no signed statement (" + StatementFile + ") beside it"})
			continue
		}
		if err != nil {
			rejected = append(rejected, Rejected{Path: rel, Why: "its statement is unreadable: " + err.Error()})
			continue
		}
		st, err := verify(ctx, string(text))
		if err != nil {
			rejected = append(rejected, Rejected{Path: rel, Why: "its statement does not verify: " + err.Error()})
			continue
		}
		if why := Check(st, id, o, raw); why != "" {
			rejected = append(rejected, Rejected{Path: rel, Why: why})
			continue
		}
		proofs = append(proofs, Proof{Outcome: o, Path: rel, Principal: st.Principal})
	}
	return proofs, rejected, nil
}
