// Package deploy holds what a platform team installs beside the binary:
// the Kubernetes RBAC objects (kubernetes/rbac.yaml, rendered from
// kube/rbac), the in-cluster Deployment of two replicas with a leader
// (kubernetes/deployment.yaml, dry-run on the lab's API server), the
// hardened systemd unit for serve over HTTP (systemd/) and the Grafana
// dashboard of the round (grafana/, checked against the exported metrics
// by test/promrules). Its tests check the unit with systemd's own tools.
package deploy
