#!/bin/sh
# The test command: sets up a fresh machine (scripts/setup.sh), then vets and
# runs every Go test, including those against real sshd, grub tools, apt-get,
# git, ssh-keygen, etcd and kube-apiserver. Extra arguments go to `go test`.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "test: go vet"
go vet ./...
echo "test: go test"
go test -count=1 -timeout 80m "$@" ./...
