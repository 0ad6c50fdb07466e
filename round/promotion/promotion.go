// Package promotion decides whether a round in an environment with an
// upstream environment (staging → production) may plan a kernel: only a
// kernel that closed a green round upstream and then soaked there for the
// intent's promotion soak, or one a person promoted anyway with a signed
// statement.
//
// The proof is the upstream round's outcome record (rounds/<id>/outcome.json)
// and a person's signed statement over its digest and its summary
// (rounds/<id>/outcome.statement), both committed to the intent repository
// by the upstream round's server from its own anchored journal. This
// package reads them, has the signature verified (a Verify the caller
// gives, over policy's record check) and judges each target kernel. An
// outcome record whose statement is missing, does not verify, or does not
// bind the record's exact bytes is refused and named: a hand-written or
// edited record proves nothing.
package promotion

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Files of a round's outcome, in rounds/<id>/.
const (
	OutcomeFile   = "outcome.json"
	StatementFile = "outcome.statement"
)

// Version of the outcome record's format.
const Version = 1

// Outcome is what a closed round did with each kernel it moved, as its
// server's own journal tells it. It is what a person certifies.
type Outcome struct {
	Version     int       `json:"version"`
	Environment string    `json:"environment"`
	Round       string    `json:"round"`
	Closed      time.Time `json:"closed"`
	// Aborted: the round ended by a person's abort, not after autoremove.
	Aborted bool `json:"aborted,omitempty"`
	// FleetCheck: the fleet-wide kernel check after the last window was
	// green (or accepted).
	FleetCheck bool `json:"fleet_check"`
	// SoakStarted and SoakEnded bound the round's own soak (fleet check to
	// autoremove); zero when the round did not soak.
	SoakStarted time.Time `json:"soak_started,omitzero"`
	SoakEnded   time.Time `json:"soak_ended,omitzero"`
	Kernels     []Kernel  `json:"kernels"`
}

// Kernel is one target kernel of the round and what happened on the nodes
// whose trial boot aimed at it. Node lists are sorted.
type Kernel struct {
	Kernel string `json:"kernel"`
	// Promoted are the nodes that boot it by default now.
	Promoted []string `json:"promoted"`
	// FellBack are the nodes whose trial boot did not come up on it (GRUB
	// went back to the old kernel, or the trial boot failed otherwise).
	FellBack []string `json:"fell_back"`
	// RolledBack are the nodes brought back to their old kernel after it.
	RolledBack []string `json:"rolled_back"`
	// Red are the failed checks on it, "node: step" (verify,
	// gpu_acceptance, gate), even where a person accepted the risk.
	Red []string `json:"red"`
	// Nvidia are the NVIDIA packages the round's signed plan installed
	// with the kernel on the nodes where it was promoted, "name version",
	// sorted (none: the round moved no NVIDIA package with it).
	Nvidia []string `json:"nvidia,omitempty"`
}

// Green reports whether the kernel ran the round without a fallback,
// rollback or red check, on at least one node.
func (k Kernel) Green() bool {
	return len(k.Promoted) > 0 && len(k.FellBack) == 0 && len(k.RolledBack) == 0 && len(k.Red) == 0
}

// Kernel returns the outcome of kernel, if the round moved nodes to it.
func (o Outcome) Kernel(kernel string) (Kernel, bool) {
	i := slices.IndexFunc(o.Kernels, func(k Kernel) bool { return k.Kernel == kernel })
	if i < 0 {
		return Kernel{}, false
	}
	return o.Kernels[i], true
}

// Green reports whether the round as a whole closed green: not aborted,
// its fleet check green.
func (o Outcome) Green() bool { return !o.Aborted && o.FleetCheck && !o.Closed.IsZero() }

// Encode is the record's bytes as committed: indented JSON and a newline.
// The statement binds the SHA-256 of exactly these bytes.
func (o Outcome) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the outcome of round %s: %w", o.Round, err)
	}
	return append(b, '\n'), nil
}

// Digest is "sha256:<hex>" of a record's bytes.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Decode reads a record, strictly: unknown fields and another version are
// refused.
func Decode(b []byte) (Outcome, error) {
	var o Outcome
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return Outcome{}, fmt.Errorf("not an outcome record: %w", err)
	}
	if o.Version != Version {
		return Outcome{}, fmt.Errorf("outcome record version %d, want %d", o.Version, Version)
	}
	if o.Environment == "" || o.Round == "" {
		return Outcome{}, errors.New("outcome record names no environment or round")
	}
	return o, nil
}

const timeWords = "2006-01-02 15:04 UTC"

// Lines are the record in words: the summary a person signs. A statement
// whose summary differs from the record's lines is refused.
func (o Outcome) Lines() []string {
	end := "closed " + o.Closed.UTC().Format(timeWords) + " after autoremove"
	if o.Aborted {
		end = "ended by an abort " + o.Closed.UTC().Format(timeWords)
	}
	out := []string{fmt.Sprintf("round %s in %s %s", o.Round, o.Environment, end)}
	switch {
	case !o.FleetCheck:
		out = append(out, "fleet kernel check: not green")
	case o.SoakStarted.IsZero():
		out = append(out, "fleet kernel check: green; no soak")
	default:
		out = append(out, fmt.Sprintf("fleet kernel check: green; soaked %s to %s", o.SoakStarted.UTC().Format(timeWords), o.SoakEnded.UTC().Format(timeWords)))
	}
	if len(o.Kernels) == 0 {
		out = append(out, "no node got a new kernel")
	}
	for _, k := range o.Kernels {
		line := fmt.Sprintf("kernel %s: promoted on %d node(s) (%s)", k.Kernel, len(k.Promoted), names(k.Promoted))
		if len(k.FellBack) > 0 {
			line += "; fell back on " + names(k.FellBack)
		}
		if len(k.RolledBack) > 0 {
			line += "; rolled back on " + names(k.RolledBack)
		}
		if len(k.Red) > 0 {
			line += "; red checks: " + names(k.Red)
		}
		if len(k.Nvidia) > 0 {
			line += "; with NVIDIA " + strings.Join(k.Nvidia, ", ")
		}
		out = append(out, line)
	}
	return out
}

// shownNames is how many names a summary line lists before it counts the
// rest (the record lists them all, and the statement binds the record).
const shownNames = 12

func names(ns []string) string {
	switch {
	case len(ns) == 0:
		return "none"
	case len(ns) > shownNames:
		return strings.Join(ns[:shownNames], ", ") + fmt.Sprintf(" and %d more", len(ns)-shownNames)
	}
	return strings.Join(ns, ", ")
}
