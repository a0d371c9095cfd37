#!/usr/bin/env bash
# Shared set-up steps, sourced by scripts/run.sh and scripts/test.sh. Every step is idempotent and quick when
# its work is already done (stamp files, dpkg/import checks), so both commands work on a fresh Debian machine
# and on one that already has everything. Nothing here reads stdin (CI runs with none).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
CACHE="$REPO/.cache"
CLIENTS="$CACHE/clients"
REDIS_PY_MAJORS="5 6 7 8"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

section() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    else
        sudo -n "$@"
    fi
}

usable_python() {
    # usable_python PYTHON: Python >= 3.11 that can make a venv with pip in it (Debian splits ensurepip out).
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

pick_python() {
    # The interpreter .venv is made from, and so the one the daemon runs on. KVD_PYTHON names one outright.
    # Otherwise Debian's own /usr/bin/python3.11 comes first: it is built with profile-guided optimisation and
    # libpython linked into the executable, while pyenv's default build (first on PATH here) is neither, and
    # kvd's per-request Python costs 8-20 % less on Debian's (docs/benchmarks.md, "Which interpreter"). Its
    # venv module is a separate package, installed here when missing (best effort). Then PATH order, 3.11 first
    # as the vLLM environment prefers.
    local candidate
    if [ -n "${KVD_PYTHON:-}" ]; then
        usable_python "$KVD_PYTHON" || {
            echo "KVD_PYTHON=$KVD_PYTHON is not a Python >= 3.11 with the venv and ensurepip modules" >&2
            exit 1
        }
        echo "$KVD_PYTHON"
        return
    fi
    if [ -x /usr/bin/python3.11 ] && command -v dpkg-query >/dev/null 2>&1; then
        usable_python /usr/bin/python3.11 || (ensure_apt python3.11-venv) >&2 || true
        if usable_python /usr/bin/python3.11; then
            echo /usr/bin/python3.11
            return
        fi
    fi
    for candidate in python3.11 python3 python3.12 python3.13; do
        if command -v "$candidate" >/dev/null 2>&1 && usable_python "$candidate"; then
            command -v "$candidate"
            return
        fi
    done
    echo "kvd needs Python 3.11 or newer (with the venv module)" >&2
    exit 1
}

base_python() {
    # base_python PYTHON: the real interpreter behind PYTHON (through pyenv's shims and a venv's links).
    "$1" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))' 2>/dev/null
}

deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

apt_has_candidate() {
    local cand
    cand="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')"
    [ -n "$cand" ] && [ "$cand" != "(none)" ]
}

stop_debian_redis_service() {
    # Debian's redis-server package starts a service on 6379. Tests never use 6379; make sure it is off.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-enabled --quiet redis-server 2>/dev/null || systemctl is-active --quiet redis-server 2>/dev/null; then
            note "disabling Debian's redis-server service"
            as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
        fi
    elif [ -x /etc/init.d/redis-server ]; then
        as_root /etc/init.d/redis-server stop >/dev/null 2>&1 || true
    fi
}

ensure_apt() {
    # ensure_apt PACKAGE...: install the Debian packages that are not installed yet.
    local missing=() pkg
    for pkg in "$@"; do
        deb_installed "$pkg" || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    section "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    local need_update=""
    for pkg in "${missing[@]}"; do
        apt_has_candidate "$pkg" || need_update=1
    done
    if [ -n "$need_update" ]; then
        note "apt-get update"
        as_root apt-get update -qq
    fi
    # policy-rc.d exit 101 = "do not start services": apt must not start redis-server on 6379.
    local made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
        as_root chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    local rc=0
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        </dev/null >/dev/null || rc=$?
    if [ "$rc" -ne 0 ] && [ -z "$need_update" ]; then
        note "install failed; retrying after apt-get update"
        as_root apt-get update -qq
        rc=0
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
            </dev/null >/dev/null || rc=$?
    fi
    [ -z "$made_policy" ] || as_root rm -f /usr/sbin/policy-rc.d
    [ "$rc" -eq 0 ] || {
        echo "apt-get install ${missing[*]} failed" >&2
        exit "$rc"
    }
    stop_debian_redis_service
}

ensure_redis_tools() {
    # The reference server and the C tools the compatibility tests drive: redis-server, redis-cli, redis-benchmark.
    # (right after installing them, ensure_apt turns off the service Debian's package would run on 6379)
    ensure_apt redis-server redis-tools
}

ensure_c_toolchain() {
    # ensure_c_toolchain PYTHON: a C compiler, PYTHON's headers and the headers kvd/persist/_records.c includes
    # (xxhash.h, zlib.h), so pip builds the C extensions setup.py declares. Best effort: kvd works without them,
    # through ctypes and Python, but every large SET, every small request and every persisted small write costs
    # more (kvd/buffers.py, kvd/protocol/receive.py, kvd/protocol/parser.py, kvd/persist/writer.py), and so do
    # DUMP/RESTORE and the bitmap, LCS and HyperLogLog commands; tests/unit/test_buffers.py fails where the set-up
    # did not build the first four.
    local py="$1" headers
    if ! command -v cc >/dev/null 2>&1; then
        (ensure_apt gcc libc6-dev) || note "no C compiler: kvd's C extensions are not built (kvd uses ctypes and Python, slower)"
    fi
    if [ ! -f /usr/include/xxhash.h ] || [ ! -f /usr/include/zlib.h ]; then
        (ensure_apt libxxhash-dev zlib1g-dev) || note "no xxhash.h/zlib.h: kvd/persist/_records.c is not built (the log packs small records in Python)"
    fi
    if ! has_python_headers "$py"; then
        # Debian's own interpreter keeps its headers in pythonX.Y-dev; pyenv and python.org builds ship them.
        headers="python$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev"
        (ensure_apt "$headers") || note "no Python headers ($headers): kvd's C extensions are not built (kvd uses ctypes and Python)"
    fi
}

has_python_headers() {
    # has_python_headers PYTHON: PYTHON's Python.h is installed (pip needs it to build kvd/_buffers.c).
    local include
    include="$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)" || return 1
    [ -f "$include/Python.h" ]
}

can_build_extension() {
    # can_build_extension PYTHON: a C compiler and PYTHON's headers are there, so a missing kvd/_buffers.c build
    # is worth another pip install (without them pip skips the optional extension every time).
    command -v cc >/dev/null 2>&1 && has_python_headers "$1"
}

buildable_extensions() {
    # The C extensions pip can build here (a compiler and the Python headers assumed), as one import list.
    local mods="kvd._buffers, kvd.protocol._receive, kvd.protocol._multibulk, kvd.persist._dump, kvd.commands._bitops"
    mods="$mods, kvd.commands._lcs, kvd.commands._hll"
    [ -f /usr/include/xxhash.h ] && [ -f /usr/include/zlib.h ] && mods="$mods, kvd.persist._records"
    echo "$mods"
}

venv_made_from() {
    # venv_made_from VENV PYTHON: VENV exists and was made from the interpreter behind PYTHON.
    [ -x "$1/bin/python" ] && [ "$(base_python "$1/bin/python")" = "$(base_python "$2")" ]
}

ensure_venv() {
    # ensure_venv [EXTRAS]: .venv (Python >= 3.11) with kvd installed in editable mode (+ extras), its C
    # extension compiled. Made anew when it was made from another interpreter than pick_python's; kvd is
    # reinstalled when the build's inputs change (the stamp holds their hash), or when the extension is missing
    # although it could be built.
    local extras="${1:-}"
    local stamp="$VENV/.kvd-installed${extras:+-$extras}" python
    python="$(pick_python)"
    if ! venv_made_from "$VENV" "$python"; then
        section "creating $VENV from $(base_python "$python")"
        rm -rf "$VENV"
        "$python" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip
    fi
    ensure_c_toolchain "$VENV/bin/python"
    local want
    want="$(cat "$REPO/pyproject.toml" "$REPO/setup.py" "$REPO"/kvd/_buffers.c "$REPO"/kvd/*/_*.c | sha256sum | cut -d' ' -f1)"
    # kvd[test] includes plain kvd: either stamp will do for run.sh.
    if [ -z "$extras" ] && [ -f "$VENV/.kvd-installed-test" ] && [ "$(cat "$VENV/.kvd-installed-test")" = "$want" ]; then
        stamp="$VENV/.kvd-installed-test"
    fi
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] ||
        ! "$VENV/bin/python" -c 'import kvd' >/dev/null 2>&1 ||
        { can_build_extension "$VENV/bin/python" && ! "$VENV/bin/python" -c "import $(buildable_extensions)" >/dev/null 2>&1; }; then
        section "installing kvd${extras:+[$extras]} into .venv"
        "$VENV/bin/python" -m pip install -q -e "$REPO${extras:+[$extras]}"
        echo "$want" >"$stamp"
    fi
}

ensure_client_matrix() {
    # redis-py 5.x .. 8.x, each in .cache/clients/redis<N> (tests put that directory first on PYTHONPATH of a
    # client subprocess). hiredis comes from .venv; the tests hide it to run the pure-Python parsers.
    local major target tmp
    for major in $REDIS_PY_MAJORS; do
        target="$CLIENTS/redis$major"
        if [ -f "$target/.installed" ] &&
            PYTHONPATH="$target" "$VENV/bin/python" -c "import redis, sys; sys.exit(not redis.__version__.startswith('$major.'))" \
                2>/dev/null; then
            continue
        fi
        section "installing redis-py $major.x into .cache/clients/redis$major"
        mkdir -p "$CLIENTS"
        tmp="$(mktemp -d "$CLIENTS/.redis$major.XXXXXX")"
        "$VENV/bin/python" -m pip install -q --target "$tmp" "redis==$major.*"
        # --target also installs redis' own dependencies; never let it shadow hiredis from .venv.
        rm -rf "$tmp"/hiredis "$tmp"/hiredis-*.dist-info
        PYTHONPATH="$tmp" "$VENV/bin/python" -c "import redis; print('   redis-py', redis.__version__)"
        touch "$tmp/.installed"
        rm -rf "$target"
        mv "$tmp" "$target"
    done
}

ensure_vllm_env() {
    # scripts/vllm_env.sh (owned by the connector work) builds the vLLM CPU environment and prints its python
    # path on the last line of stdout. Skipped with KVD_SKIP_VLLM=1 or when the script does not exist.
    if [ -n "${KVD_SKIP_VLLM:-}" ]; then
        note "KVD_SKIP_VLLM set: vLLM end-to-end tests will be skipped"
        return 0
    fi
    [ -f "$REPO/scripts/vllm_env.sh" ] || return 0
    section "vLLM environment (scripts/vllm_env.sh)"
    local out
    out="$(bash "$REPO/scripts/vllm_env.sh" </dev/null | tail -n 1)"
    if [ -n "$out" ] && [ -x "$out" ]; then
        export KVD_VLLM_PYTHON="$out"
        note "KVD_VLLM_PYTHON=$KVD_VLLM_PYTHON"
    else
        echo "scripts/vllm_env.sh did not print an executable python path (got: '$out')" >&2
        exit 1
    fi
}
