// Package book is the round's book: what the server keeps of each round,
// in the intent repository under rounds/<id>/ and in its own state
// directory.
//
// It owns opening a round's journal (for writing, anchored in the state
// directory, or as a read-only view), the open rounds, the round's files
// and its node files (one per node in a folder of the round), what a
// commit of a round names (only what changed since the book's last
// commit), the reports the server renders for people (plan.md and the
// signature reports: an edit behind the server is written again from its
// own state before a commit names it) and the proofs (the signed bytes of
// every approval a step ran under, kept in the state directory and read
// back incrementally).
//
// It decides nothing about the round's rules (round/, round/window) and
// verifies no signature: whoever proves a kept approval again hands it
// the means (a Reverify function). It never imports tools or cli; its
// refusals are *Refusal, which the tools render.
package book
