// Package scripts embeds the host-side steps so the binary can send them over
// SSH exactly as a person would run them by hand:
//
//	ssh node 'sudo sh -s' < scripts/host/inspect.sh
package scripts

import "embed"

// Host holds scripts/host/*.sh.
//
//go:embed host/*.sh
var Host embed.FS
