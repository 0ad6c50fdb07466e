// Package promrules checks the example alert rules (examples/alerts) with
// Prometheus' own rule-file parser and PromQL parser, the code
// `promtool check rules` runs, and the Grafana dashboards (deploy/grafana):
// every panel's query parses as PromQL and reads only the metrics and
// labels mcp-patch exports (metrics/testdata/exported.txt, which the
// metrics package holds to a real scrape). It is a module of its own so that the
// Prometheus module's requirements stay out of mcp-patch's go.mod.
package promrules
