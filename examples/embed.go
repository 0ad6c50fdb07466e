// Package examples embeds the sample intent repository, so the lab can
// start from it without the source tree at hand.
package examples

import "embed"

// Intent is examples/intent.
//
//go:embed intent
var Intent embed.FS
