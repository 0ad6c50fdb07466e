// Package policy decides who may do what: it owns signed approvals and
// attestations (the canonical request text, SSHSIG signatures in the format
// of `ssh-keygen -Y sign`, the allowed_signers file, expiry and single use),
// the server modes, and the signing side used by `mcp-patch approve`.
//
// It makes pure decisions. It must not touch the network, Kubernetes, SSH
// connections or hosts. Its only I/O is the nonce store directory it is
// handed (used nonces, append-only, fsynced) and, on the person's side, an
// ssh-agent socket or a private key file.
//
// # The request a person signs
//
// A request is line-oriented ASCII text with a fixed field order, every line
// ending in "\n" (no CR anywhere). For a destructive tool:
//
//	mcp-patch approval request v1
//	tool: drain_node
//	node: gpu-03
//	round: 2026-11
//	plan-digest: sha256:<64 lowercase hex>
//	issued: 2026-11-29T15:30:00Z
//	expires: 2026-11-29T16:00:00Z
//	nonce: <32 lowercase hex>
//	summary: <what the person is shown, one line each>
//
// For a statement that belongs to a person (an attestation) the header is
// "mcp-patch attestation v1", followed by "kind: <kind>" and that kind's
// fields (see Kind); a resume or abort names the stop it answers (the failed
// step and the digest of its journal record) and is refused on any other.
// The issue time is signed: Verify refuses a request valid for longer than
// the configured maximum lifetime (Verifier.MaxLifetime, default 24 h) from
// it, and one issued in the future, whenever it is presented. The summary lines are part of the signed bytes: people
// sign what they saw. The exact bytes signed are Request.Canonical(); parsing
// is strict (unknown, missing, duplicate or reordered fields, CR, tabs,
// non-ASCII, trailing junk: all refused), so a request has exactly one
// textual form.
//
// # The approval the agent passes back
//
// An approval is the request text immediately followed by the armored
// signature ("-----BEGIN SSH SIGNATURE-----" … "-----END SSH SIGNATURE-----").
// A person without `mcp-patch approve` produces one with plain OpenSSH:
//
//	ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 request.txt
//	cat request.txt request.txt.sig    # this is the approval
//
// # allowed_signers and lab-only keys
//
// The server trusts the keys in an allowed_signers file (ssh-keygen's ALLOWED
// SIGNERS format, as used by git's gpg.ssh.allowedSignersFile). A key whose
// trailing comment contains the word "lab-only" (a whitespace-separated
// token, any case) is labelled lab-only: ssh-keygen ignores the comment, and
// the server can warn about or refuse such keys in production
// (AllowedSigners.LabOnly, Verified.LabOnly, Verifier.RefuseLabOnly):
//
//	ci@lab namespaces="mcp-patch" ssh-ed25519 AAAAC3Nz... lab-only fleet simulator
//
// # Principals
//
// A key's line admits it as the principals the line lists by name, each
// unless a negated pattern of the line rejects it (AllowedSigner.Names):
// what `ssh-keygen -Y verify -I NAME` decides for each. An approval claims
// no identity, so a wildcard names no one, and "!*" or
// "!alice@example.com,*" admits its key as no one (ErrNoPrincipal). The
// accepted approval names its principals (Verified.Principals); a step
// that needs named principals (Expectation.Principals) refuses anyone
// else (ErrPrincipalNotAllowed), naming those it needs.
//
// # Single use
//
// Verify never consumes a nonce, so a step that is refused after Verify (the
// plan drifted, the gate is red) does not burn the approval. The caller
// commits with Verifier.Consume immediately before executing; Consume is an
// atomic check-and-mark persisted with fsync before it returns, so an
// executed approval can never be replayed, across restarts and processes.
// Several stores join with Nonces: the server puts the one every server of
// the cluster sees (kube/usednonces) before its state directory's, so a
// second server with another state directory refuses a used approval too.
//
// # Records
//
// Two kinds are records, not permissions (Kind.IsRecord): a round outcome
// (round_outcome: environment, round, outcome-digest, and what the round
// did per kernel as summary lines), which a person signs when a round
// closes so that environments downstream may plan its kernels, and a
// promoted kernel (kernel_promoted: environment, round, kernel, reason),
// which lets a round plan a kernel without that proof. They are committed
// to Git and checked with Verifier.VerifyRecord whenever a round relies on
// them: the signature, the key in allowed_signers now and its line valid
// at the signed issue time, and the signed lifetime; not the nonce, and
// not the expiry, for a record stands after its request expired. Verify
// and Reverify refuse these kinds.
package policy
