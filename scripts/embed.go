// Package scripts embeds the host-side steps so the binary can send them over
// SSH exactly as a person would run them by hand:
//
//	ssh node 'sudo sh -s' < scripts/host/inspect.sh
package scripts

import "embed"

//go:generate go run ./internal/hostgen -dir host

// Host holds scripts/host/*.sh. Their shared helpers come from
// scripts/host/lib/*.sh, copied in by `go generate ./scripts`.
//
//go:embed host/*.sh
var Host embed.FS
