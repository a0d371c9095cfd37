#!/usr/bin/env bash
# Install everything the tests need and run them all. Extra arguments go to pytest:
#   ./scripts/test.sh tests/server -x
# Installs, when missing: Debian's redis-server/redis-tools (reference server, redis-cli, redis-benchmark),
# .venv with kvd and its test extras, redis-py 5/6/7 for the client matrix, and the vLLM CPU environment
# (cached under .cache/, see scripts/vllm_env.sh). Set KVD_SKIP_VLLM=1 to skip the vLLM end-to-end tests.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$REPO"

ensure_apt redis-server redis-server redis-tools
ensure_apt redis-benchmark redis-tools
ensure_venv test
ensure_client_matrix
if [ -z "${KVD_SKIP_VLLM:-}" ] && [ -x "$REPO/scripts/vllm_env.sh" ]; then
    section "vLLM environment"
    KVD_VLLM_PYTHON="$("$REPO/scripts/vllm_env.sh" | tail -n 1)"
    export KVD_VLLM_PYTHON
fi

section "ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .

section "pytest"
set +e
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit "$status"
