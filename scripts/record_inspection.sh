#!/bin/sh
# record_inspection: Record: inspect a node.
# The CLI twin of the MCP tool of the same name: same input, same output.
#   scripts/record_inspection.sh --json '<input>'   or per-field flags (see --help)
# Exit: 0 ok, 1 refused/failed/approval_required, 2 usage, 3 in progress.
set -eu
exec "${MCP_PATCH:-mcp-patch}" tool record_inspection "$@"
