// Package scripts embeds the host-side steps so the binary can send them over
// SSH exactly as a person would run them by hand:
//
//	ssh node 'sudo sh -s' < scripts/host/inspect.sh
//
// and the lab's control-plane build script, so an installed binary builds
// (or finds in the cache) the same control plane as a clone. It holds
// files only, no logic.
package scripts

import "embed"

//go:generate go run ./internal/hostgen -dir host

// Host holds scripts/host/*.sh. Their shared helpers come from
// scripts/host/lib/*.sh, copied in by `go generate ./scripts`.
//
//go:embed host/*.sh
var Host embed.FS

// BuildControlPlane is scripts/build-controlplane.sh (see lab/cluster).
//
//go:embed build-controlplane.sh
var BuildControlPlane []byte
