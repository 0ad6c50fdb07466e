// Package inbox is the one place people see what waits for their
// signature across environments: every server writes each approval
// request it issues into one directory (approvals.inbox), and `mcp-patch
// approvals` lists them, whichever environment's server asked. A person
// signing one from the inbox leaves the signed approval beside the
// request; the server that asked picks it up at the step's next call and
// verifies it like any approval handed back through the agent. Nothing in
// the inbox is trusted: a request is only what a person may sign (and
// `mcp-patch approve` shows it from its canonical text), an approval only
// counts once its signature verifies. Each server also leaves its round's
// status there (environment, round, phase, deadline), for the view across
// environments.
package inbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Entry is one pending signature request.
type Entry struct {
	ID string `json:"id"`
	// Environment is the asking server's environment ("" when the intent
	// defines none).
	Environment string `json:"environment,omitempty"`
	Round       string `json:"round"`
	// Node is the step's node (window.FleetTarget for the round's plan).
	Node string `json:"node"`
	// Step is the tool the request is for (drain_node, sign_plan, …).
	Step string `json:"step"`
	// Server is the asking server's identity.
	Server  string    `json:"server,omitempty"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
	// Summary is what the request asks, in plain words.
	Summary []string `json:"summary,omitempty"`
	// Request is the canonical request text a person signs.
	Request string `json:"request"`
	// Signed is true while a signed approval waits beside the request for
	// the server to use it (never written: the approval file says it).
	Signed bool `json:"-"`
}

// Status is a server's round as it last left it in the inbox.
type Status struct {
	Environment string `json:"environment,omitempty"`
	Server      string `json:"server,omitempty"`
	Round       string `json:"round,omitempty"`
	// Phase is the round's phase (not_planned, windows, closing, stopped,
	// aborted, closed).
	Phase string `json:"phase"`
	// Node is the node whose window is open or stopped, if any.
	Node string `json:"node,omitempty"`
	// Deadline is the round's next deadline on its environment's
	// compliance clock (zero: none known).
	Deadline time.Time `json:"deadline,omitzero"`
	Updated  time.Time `json:"updated"`
}

// Dir is an inbox directory.
type Dir string

var part = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$`)

// ID names the request of step on node in round: round:node:step.
func ID(round, node, step string) string { return round + ":" + node + ":" + step }

// ValidID refuses an id that is not round:node:step of names a file may
// carry.
func ValidID(id string) error {
	ps := strings.Split(id, ":")
	if len(ps) != 3 {
		return fmt.Errorf("inbox id %q is not ROUND:NODE:STEP (as mcp-patch approvals lists it)", id)
	}
	for _, p := range ps {
		if !part.MatchString(p) {
			return fmt.Errorf("inbox id %q is not ROUND:NODE:STEP (as mcp-patch approvals lists it)", id)
		}
	}
	return nil
}

const (
	requestExt  = ".request.json"
	approvalExt = ".approval"
	statusExt   = ".status.json"
)

func (d Dir) path(id, ext string) string { return filepath.Join(string(d), id+ext) }

// Put records e as pending (replacing the request of the same id). The
// time it was first asked is kept while the earlier request has not
// expired, so the inbox says how long the step has waited. A signed
// approval of an earlier request is left for the server to judge.
func (d Dir) Put(e Entry, now time.Time) error {
	e.ID = ID(e.Round, e.Node, e.Step)
	if err := ValidID(e.ID); err != nil {
		return err
	}
	if old, err := d.Get(e.ID); err == nil && now.Before(old.Expires) && !old.Since.IsZero() {
		e.Since = old.Since
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return d.write(d.path(e.ID, requestExt), append(b, '\n'))
}

// Get reads the pending request id.
func (d Dir) Get(id string) (Entry, error) {
	if err := ValidID(id); err != nil {
		return Entry{}, err
	}
	b, err := os.ReadFile(d.path(id, requestExt))
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, fmt.Errorf("no request %s is waiting in the inbox %s", id, d)
	}
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, fmt.Errorf("inbox request %s: %w", id, err)
	}
	if e.ID != id || ID(e.Round, e.Node, e.Step) != id {
		return Entry{}, fmt.Errorf("inbox request %s names another request (%s)", id, ID(e.Round, e.Node, e.Step))
	}
	_, err = os.Stat(d.path(id, approvalExt))
	e.Signed = err == nil
	return e, nil
}

// List returns the requests still valid at now, oldest first. A
// directory that does not exist is an empty inbox; an entry that cannot
// be read is an error naming it.
func (d Dir) List(now time.Time) ([]Entry, error) {
	names, err := d.names(requestExt)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, id := range names {
		e, err := d.Get(id)
		if err != nil {
			return nil, err
		}
		if !now.Before(e.Expires) {
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].Since.Equal(out[b].Since) {
			return out[a].Since.Before(out[b].Since)
		}
		return out[a].ID < out[b].ID
	})
	return out, nil
}

// Sign leaves a person's signed approval of request id beside it.
func (d Dir) Sign(id, approval string) error {
	if _, err := d.Get(id); err != nil {
		return err
	}
	return d.write(d.path(id, approvalExt), []byte(approval))
}

// Approval returns the signed approval waiting for request id, if any.
func (d Dir) Approval(id string) (string, bool, error) {
	if err := ValidID(id); err != nil {
		return "", false, err
	}
	b, err := os.ReadFile(d.path(id, approvalExt))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return string(b), true, nil
}

// Resolve drops request id and its approval (used, or refused and asked
// again).
func (d Dir) Resolve(id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	var errs []error
	for _, ext := range []string{approvalExt, requestExt} {
		if err := os.Remove(d.path(id, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DropApproval removes the approval of request id, keeping the request.
func (d Dir) DropApproval(id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	if err := os.Remove(d.path(id, approvalExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// PutStatus records a server's round (one file per environment; "" is
// named default).
func (d Dir) PutStatus(s Status) error {
	name := s.Environment
	if name == "" {
		name = "default"
	}
	if !part.MatchString(name) {
		return fmt.Errorf("environment %q cannot name an inbox status", name)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return d.write(d.path(name, statusExt), append(b, '\n'))
}

// Statuses returns every environment's status, by environment.
func (d Dir) Statuses() ([]Status, error) {
	names, err := d.names(statusExt)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(d.path(n, statusExt))
		if err != nil {
			return nil, err
		}
		var s Status
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("inbox status %s: %w", n, err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Environment < out[b].Environment })
	return out, nil
}

func (d Dir) names(ext string) ([]string, error) {
	entries, err := os.ReadDir(string(d))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ext); ok && !e.IsDir() && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	return out, nil
}

// write replaces path with b atomically (a reader sees the old or the
// new file, never half of one).
func (d Dir) write(path string, b []byte) error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(string(d), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return errors.Join(err, f.Close(), os.Remove(f.Name()))
	}
	if err := f.Close(); err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	return nil
}
