#!/bin/sh
# certify_outcome: Certify a closed round's outcome.
# The CLI twin of the MCP tool of the same name: same input, same output.
#   scripts/certify_outcome.sh --json '<input>'   or per-field flags (see --help)
# Exit: 0 ok, 1 refused/failed/approval_required, 2 usage, 3 in progress.
set -eu
exec "${MCP_PATCH:-mcp-patch}" tool certify_outcome "$@"
