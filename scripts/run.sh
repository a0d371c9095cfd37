#!/usr/bin/env bash
# Install what is missing and start kvd with the shipped kvd.toml. Extra arguments go to kvd:
#   ./scripts/run.sh --port 7000 --maxmemory 4gb
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_apt redis-cli redis-tools   # redis-cli, to talk to it
ensure_venv
cd "$REPO"
exec "$VENV/bin/kvd" --config "$REPO/kvd.toml" "$@"
