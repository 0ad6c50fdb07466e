// Package intent owns the intent repository: a Git working copy with one
// folder per platform component (intent.md, runbook.md, changelog.md,
// verify.sh, lessons.md, settings.yaml) and the round records under
// rounds/<round-id>/.
//
// It reads components and documents from the working copy, parses intent.md
// (the four sections, properties with stable ids, open questions naming a
// property) and settings.yaml (strict, typed), records lessons and open
// questions as commits made with go-git, commits files other packages wrote
// (the round journal and report), pushes the working branch over SSH with
// known_hosts checking, fast-forwards it (and the working copy) to the
// remote's when another server pushed there first, and runs a component's
// verify.sh with a time bound.
//
// Every commit goes through one chokepoint (Repo.commit) that refuses before
// touching anything when the input is bad or a file it would touch carries
// someone else's uncommitted edits, commits only the files it touched, never
// on a protected branch, and never rewrites history (the new commit's parent
// is the branch tip, updated with compare-and-swap). Repo.Fetch, the one
// other write, only fast-forwards, with the same refusals.
//
// It must not touch anything outside the repository root it was opened on,
// must not reach the cluster or the hosts (verify.sh may, as the person who
// wrote it intended), and knows nothing of rounds beyond their id.
package intent
