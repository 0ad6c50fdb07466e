#!/bin/sh
# The main job on the embedded lab: sets up a fresh machine (scripts/setup.sh),
# builds mcp-patch, starts an emulated GPU fleet on a real control plane and
# runs a whole patch round from plan to close. Extra arguments go to
# `mcp-patch lab demo` (see `mcp-patch lab demo -h`).
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p bin
go build -o bin/mcp-patch ./cmd/mcp-patch
exec bin/mcp-patch lab demo "$@"
