// Package deploy holds what a platform team installs beside the binary:
// the Kubernetes RBAC objects (kubernetes/, rendered from kube/rbac), the
// hardened systemd unit for serve over HTTP (systemd/) and the Grafana
// dashboard of the round (grafana/, checked against the exported metrics
// by test/promrules). Its tests check the unit with systemd's own tools.
package deploy
