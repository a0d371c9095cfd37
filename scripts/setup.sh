#!/usr/bin/env bash
# Shared set-up steps for scripts/run.sh and scripts/test.sh. Every step is idempotent and quick when its
# work is already done, so both commands can run on a fresh machine or on one that has everything.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
CACHE="$REPO/.cache"

section() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }

pick_python() {
    # kvd runs on Python >= 3.11; the vLLM environment needs 3.11 exactly (scripts/vllm_env.sh).
    for candidate in python3.11 python3 python3.12 python3.13; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    echo "kvd needs Python 3.11 or newer" >&2
    exit 1
}

ensure_apt() {
    # ensure_apt COMMAND PACKAGE...: install the Debian packages unless COMMAND is already on PATH.
    local probe="$1"
    shift
    command -v "$probe" >/dev/null 2>&1 && return
    section "installing Debian packages: $*"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    # Never let apt start Debian's redis-server service on port 6379: tests start their own servers.
    local made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
        $sudo chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    [ -z "$made_policy" ] || $sudo rm -f /usr/sbin/policy-rc.d
}

ensure_venv() {
    # ensure_venv EXTRAS: .venv with kvd installed in editable mode (+ extras); redone when pyproject changes.
    local extras="${1:-}"
    local stamp="$VENV/.kvd-installed${extras:+-$extras}"
    if [ ! -x "$VENV/bin/python" ]; then
        section "creating $VENV"
        "$(pick_python)" -m venv "$VENV"
        "$VENV/bin/pip" install -q --upgrade pip
    fi
    if [ ! -f "$stamp" ] || [ "$REPO/pyproject.toml" -nt "$stamp" ]; then
        section "installing kvd${extras:+[$extras]} into .venv"
        "$VENV/bin/pip" install -q -e "$REPO${extras:+[$extras]}"
        touch "$stamp"
    fi
}

ensure_client_matrix() {
    # redis-py 5, 6 and 7 in their own directories (8.x is the one in .venv), for the compatibility tests.
    local major
    for major in 5 6 7; do
        local target="$CACHE/clients/redis$major"
        if [ ! -f "$target/.installed" ]; then
            section "installing redis-py $major.x for the client matrix"
            rm -rf "$target"
            "$VENV/bin/pip" install -q --no-deps --target "$target" "redis==$major.*"
            touch "$target/.installed"
        fi
    done
}
