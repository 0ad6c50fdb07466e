// Package round owns the patch round itself: the order in which nodes are
// patched and why, the standing rules that decide whether a step may start
// now, the crash-safe journal the round lives in (rounds/<round-id>/), the
// audit log beside it, the round_status view, the compliance estimate and
// the report written at close (Markdown and an SVG timeline).
//
// It is pure logic plus file I/O under the round's own directory. It must
// not talk to hosts, the cluster or Git: it does not import client-go, SSH,
// go-git or the project's host, kube, intent or policy packages. The tool
// layer maps inventory, placement and check results into the small types
// declared here (NodeInfo, Placement, Meta) and calls in.
//
// # Steps
//
// A node's window is the sequence drain, install, trial_boot, verify,
// uncordon, gpu_acceptance (GPU servers only), promote, gate. Before it come
// the preflight steps inspect, simulate, download and snapshot, which may
// run on the next node while another node's window is open. Round-level
// steps are plan, baseline, fleet_check, soak, autoremove and close.
//
// Read-only steps (inspect, simulate, verify, gate, baseline, fleet_check)
// are always admitted: they change nothing, and a person re-checking a
// stopped round needs them. Their results still count: a failed check stops
// the round, a green gate closes a window. Every other step is ruled by
// (*State).Admit, which returns a *RuleError naming the rule it broke.
//
// # Windows
//
// A window opens when its drain starts and closes when a green gate is
// recorded after a green promote. Only one window is open at a time, and a
// node's drain is admitted only once every node before it in the order has
// its window closed.
//
// # Journal
//
// Everything that happens is a record appended to journal.jsonl (fsync'd
// before the call returns); the state snapshot is the state as of one
// record, by atomic replace, written at the first record, again each time
// the journal has grown by the snapshot's own size, and at Close: it is
// always the state of a prefix of the journal (its last_seq says which),
// so a window's writes stay proportional to its records, not to the
// round. An anchored journal (the server's) keeps it beside its anchor in
// the server's state directory (<round>.state.json), never in the intent
// repository: there it would read as the round's state while it is a
// prefix's, and its write at Close would change the working copy after
// the call's last commit. A journal without an anchor keeps it beside
// itself (state.json). On Open the state is rebuilt from the journal
// alone. A torn last line is saved beside the journal, truncated away and
// recorded. Each Open appends a session_opened record, so a step that was in
// flight when an earlier process died replays as in flight with
// NeedsRecheck set: the caller re-checks the host or cluster and records the
// outcome, it never repeats the step blindly. A second process opening the
// same journal for writing gets ErrLocked (flock); ReadState reads without
// locking. audit.jsonl beside it holds one fsync'd line per tool call that
// writes (read-only calls are audited in the server's state directory) with
// the digest of its arguments (ArgsDigest), never the arguments.
//
// Both logs are sealed in segments: once the live journal.jsonl (or
// audit.jsonl) holds SegmentBytes, its whole records move as they are into
// the next numbered segment beside it (journal-000001.jsonl, ...; written
// whole, then the live file is emptied, under the lock readers take) and
// never change again. Open, OpenView, ReadState and ReadJournal read the
// segments in order and then the live file; a missing segment, one that
// ends mid-record or a live file that overlaps a segment is refused, and a
// live file that still repeats its last segment (a seal cut off between
// its two steps) is emptied. A commit of the round's files so stores the
// live logs and the new segments only, and a window's cost in Git does not
// grow with its place in the round.
//
// # Anchor
//
// The journal sits in the intent repository, where the agent can write
// it. Opened WithAnchor (the server always does), every record is first
// appended, fsync'd, to the round's anchor in the server's state
// directory (the record's bytes and a running SHA-256), and each sealed
// segment's digest follows its seal. Open refuses a journal that does not
// reproduce the anchor with a *TamperError naming the first record that
// differs (ErrTampered), except a journal lacking exactly the anchor's
// last record (a crash between the two writes), which gets it back.
// Verify, and Hold before a commit, check the files on disk against the
// anchor while the journal is open; a difference refuses every later
// append. HoldHead hands out the head (a record's seq and chain) of the
// files a commit takes, for the server to publish; another server, with
// its own state directory, adopts the pushed journal on the strength of
// that head alone (Adopt): records past it are cut and saved, never
// anchored, and a journal that does not make it is refused
// (ErrNotPublished).
//
// # Use
//
//	order, err := round.PlanOrder(nodes, placement)   // the tool layer maps inventory in
//	j, err := round.Open("rounds/2026-11", round.WithLogger(log))
//	_, err = j.Plan(order, 48*time.Hour, round.Meta{})
//	_, err = j.StartStep(round.StepDrain, "cp-1", round.Meta{ApprovalID: id, ArgsDigest: d})
//	// err is a *round.RuleError when a standing rule refuses: nothing was recorded
//	_, err = j.FinishStep(round.StepDrain, "cp-1", round.Meta{})   // or FailStep: the round stops
//	st := j.Status()                                               // round_status, NextAction
//	report, timeline, err := j.WriteReport()                       // report.md, timeline.svg
//
// ETA estimates when every node will be patched against the deadline the
// intent gives.
package round
