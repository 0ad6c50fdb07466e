// Package cluster runs a real Kubernetes control plane on loopback for tests
// and for the lab: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, built from pinned upstream sources by
// scripts/build-controlplane.sh (see lab/controlplane); the binary carries
// the script and the pins, so it needs no source tree. Nodes are kwok nodes:
// Node objects carrying the annotation kwok.x-k8s.io/node=fake, which kwok
// keeps Ready and whose bound pods it moves to Running. It also runs real
// multi-member etcd clusters with client TLS, for quorum checks.
//
// The package owns only the processes it starts (each in its own process
// group, ended by pid in Stop) and the temporary directories it creates. It
// must not import any other package of the project but scripts (the build
// script it carries, files only), and production packages must not import
// it: the project reaches this cluster the way it reaches a real one,
// through a kubeconfig.
package cluster
