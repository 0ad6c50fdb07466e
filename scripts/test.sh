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
# The window state machine and the MCP surface, from their own unit tests
# (fakes, no control plane): statement coverage of both together.
echo "test: window and tools coverage (no control plane)"
start=$(date +%s)
profile=$(mktemp)
go test -count=1 -timeout 20m -coverpkg=./round/window/...,./tools/... -coverprofile="$profile" ./round/window/... ./tools/ >/dev/null
go tool cover -func="$profile" | tail -n 1 | sed 's/^total:[[:space:]]*(statements)[[:space:]]*/test: round\/window + tools statement coverage: /'
rm -f "$profile"
echo "test: coverage phase took $(( $(date +%s) - start ))s"
