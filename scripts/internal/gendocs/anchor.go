package main

import (
	"strings"
	"unicode"
)

// anchor is the fragment GitHub gives a Markdown heading: lower case, each
// space a hyphen, every character but letters, digits, '-' and '_' left
// out. Pure.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
