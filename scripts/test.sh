#!/usr/bin/env bash
# Install everything the tests need and run them. Extra arguments go to pytest (default: every test):
#   ./scripts/test.sh tests/compat -x
# Installs, when missing: Debian's redis-server and redis-tools (reference server, redis-cli, redis-benchmark;
# the service apt would start on 6379 is kept off), .venv with kvd[test], redis-py 5/6/7/8 for the client
# matrix (.cache/clients/redis<N>), and the vLLM CPU environment via scripts/vllm_env.sh when that exists
# (KVD_SKIP_VLLM=1 skips it). Then ruff check, ruff format --check, pytest.
# Exit status: pytest's (5, "no tests collected", becomes 1); if pytest passed but ruff did not, 1.
# KVD_TEST_TARGET=redis runs the same tests against Debian's redis-server instead of kvd.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$REPO"

section "set-up"
ensure_redis_tools
ensure_venv test
ensure_client_matrix
ensure_vllm_env
note "python: $("$VENV/bin/python" --version), redis-server: $(redis-server --version | awk '{print $3}')"

lint_failed=0
section "ruff check"
"$VENV/bin/ruff" check . || lint_failed=1
section "ruff format --check"
"$VENV/bin/ruff" format --check . || lint_failed=1

section "pytest ${*:-(all tests)} [target: ${KVD_TEST_TARGET:-kvd}]"
status=0
"$VENV/bin/python" -m pytest -p no:cacheprovider -ra "$@" </dev/null || status=$?

section "result"
if [ "$status" -eq 5 ]; then
    echo "FAILED: pytest collected no tests" >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "FAILED: pytest exited with $status" >&2
    exit "$status"
fi
if [ "$lint_failed" -ne 0 ]; then
    echo "FAILED: ruff (see above); the tests passed" >&2
    exit 1
fi
echo "OK: ruff clean, all selected tests passed"
