// Package examples embeds the sample intent repository, so the lab can
// start from it without the source tree at hand.
package examples

import "embed"

// Intent is examples/intent.
//
//go:embed intent
var Intent embed.FS

//go:embed inventory.yaml
var inventory []byte

// Inventory is examples/inventory.yaml, the SSH inventory format with an
// example of every field.
func Inventory() []byte { return append([]byte(nil), inventory...) }
