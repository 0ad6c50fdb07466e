// Package promrules checks the example alert rules (examples/alerts) with
// Prometheus' own rule-file parser and PromQL parser, the code
// `promtool check rules` runs. It is a module of its own so that the
// Prometheus module's requirements stay out of mcp-patch's go.mod.
package promrules
