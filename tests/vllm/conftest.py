"""End-to-end tests with a real vLLM 0.32 CPU engine (marker ``vllm``).

Each test runs the engine in a subprocess with the vLLM environment's Python (scripts/vllm_env.sh; or
``KVD_VLLM_PYTHON``), in-process engine mode (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: start-up in seconds, and the
scheduler and worker connectors share one process, so the runner can read their counters), offline, with its own
TMPDIR. The server is a real kvd (or redis-server, see connectors.testing). Skipped, with the reason, only when
the vLLM environment cannot be built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.testing import Server, engine_env, target_kind

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUNNER = HERE / "engine_runner.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    if os.environ.get("KVD_SKIP_VLLM"):
        pytest.skip("KVD_SKIP_VLLM is set")
    py = os.environ.get("KVD_VLLM_PYTHON")
    if not py:
        proc = subprocess.run(
            [str(REPO / "scripts" / "vllm_env.sh")], capture_output=True, text=True, timeout=1800, check=False
        )
        if proc.returncode != 0:
            pytest.skip(f"the vLLM environment could not be built: {proc.stderr.strip()[-500:]}")
        py = proc.stdout.strip().splitlines()[-1]
    if not Path(py).exists():
        pytest.skip(f"vLLM python {py} does not exist")
    return py


@pytest.fixture(scope="session")
def tiny_model(vllm_python: str) -> str:
    out = REPO / ".cache" / "models" / "tiny-llama"
    subprocess.run([vllm_python, str(REPO / "scripts" / "make_tiny_model.py"), str(out)], check=True, timeout=600)
    return str(out)


@pytest.fixture(scope="session")
def tiny_sliding_model(vllm_python: str) -> str:
    """The tiny model with every other layer windowed (64 tokens): a hybrid model to vLLM."""
    out = REPO / ".cache" / "models" / "tiny-sliding"
    script = str(REPO / "scripts" / "make_tiny_model.py")
    subprocess.run([vllm_python, script, str(out), "--size", "tiny-sliding"], check=True, timeout=600)
    return str(out)


class Engine:
    """Runs tests/vllm/engine_runner.py with a spec; returns its JSON result."""

    def __init__(self, python: str, model: str, base: Path) -> None:
        self.python = python
        self.model = model
        self.base = base
        self.n = 0

    def run(self, phases: list[dict[str, Any]], connector: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
        self.n += 1
        work = self.base / f"engine{self.n}"
        (work / "tmp").mkdir(parents=True)
        spec = {"model": self.model, "block_size": 32, "connector": connector, "phases": phases, **spec}
        (work / "spec.json").write_text(json.dumps(spec))
        env = engine_env(work, HERE)
        log = work / "engine.log"
        with open(log, "wb") as f:
            proc = subprocess.run(
                [self.python, str(RUNNER), str(work / "spec.json"), str(work / "out.json")],
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=600,
                check=False,
            )
        text = log.read_text(errors="replace")
        if proc.returncode != 0:
            raise AssertionError(f"vLLM run failed ({proc.returncode}):\n{text[-6000:]}")
        result = json.loads((work / "out.json").read_text())
        result["log"] = text
        return result


@pytest.fixture(scope="session")
def make_engine(vllm_python: str, tiny_model: str) -> Callable[[Path], Engine]:
    return lambda base: Engine(vllm_python, tiny_model, base)


@pytest.fixture(scope="session")
def make_sliding_engine(vllm_python: str, tiny_sliding_model: str) -> Callable[[Path], Engine]:
    return lambda base: Engine(vllm_python, tiny_sliding_model, base)


@pytest.fixture
def engine(make_engine: Callable[[Path], Engine], tmp_path: Path) -> Engine:
    return make_engine(tmp_path)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "server", persistence=True, appendfsync="always").start()
    yield srv
    srv.stop(kill=True)


@pytest.fixture(scope="session")
def store_kind() -> str:
    return target_kind()


def pytest_report_header(config: pytest.Config) -> str:
    return f"vLLM tests store: {target_kind()}; python for the tests' servers: {sys.executable}"
