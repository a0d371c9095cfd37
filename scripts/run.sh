#!/usr/bin/env bash
# Install what is missing (.venv with Python >= 3.11 and kvd in editable mode) and start kvd with the shipped
# kvd.toml. Extra arguments go to kvd and override the file:
#   ./scripts/run.sh --port 7000 --maxmemory 4gb
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_venv
cd "$REPO"
exec "$VENV/bin/kvd" --config "$REPO/kvd.toml" "$@"
