"""The connector's data path (connectors/paged_kv.py) checked on this machine's CPU by its own check module, run
with the vLLM environment's Python (torch lives there) against a real kvd. On a machine with a GPU the same
module also runs the CUDA cases (stream order, pinned buffers); CI has none, so here they are not collected.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from connectors.testing import engine_env

REPO = Path(__file__).resolve().parents[2]

CPU_CASES = {
    *(
        f"round trip {layout} skip={skip}"
        for layout in (
            "flash bf16",
            "cpu fp32",
            "flash HND view",
            "2 tensor blocks per block",
            "odd rows fp16",
            "mixed dtypes",
        )
        for skip in (0, 1)
    ),
    "receive buffers outlive their copies",
    "load longer than the kept buffers",
    "page-locked buffers unlock while mapped",
}


def _run_in_vllm_env(vllm_python: str, tmp_path: Path, args: list[str], out: Path) -> dict:
    """``vllm_python ARGS --json OUT`` from the repository (torch lives in that environment); its JSON."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = subprocess.run(
        [vllm_python, *args, "--json", str(out)],
        env=engine_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_paged_kv_checks_pass_on_cpu(vllm_python: str, tmp_path: Path) -> None:
    args = ["-m", "connectors.paged_kv_check", "--device", "cpu"]
    checks = _run_in_vllm_env(vllm_python, tmp_path, args, tmp_path / "checks.json")["checks"]
    assert {c["case"] for c in checks} == CPU_CASES
    assert all(c["ok"] and c["device"] == "cpu" for c in checks), checks


def test_the_gpu_ttft_bench_runs_on_the_cpu(vllm_python: str, tmp_path: Path) -> None:
    """scripts/bench_gpu_ttft.py's smoke run (a tiny model on the CPU): its docs' numbers come from a GPU, but
    the script, its three transports, its saves and its bit-for-bit check of the loaded blocks are kept working
    here."""
    args = [str(REPO / "scripts" / "bench_gpu_ttft.py"), "--shape", "tiny", "--device", "cpu"]
    args += ["--tokens", "512,768", "--connections", "1,2", "--repeat", "1"]
    rows = _run_in_vllm_env(vllm_python, tmp_path, args, tmp_path / "ttft.json")["rows"]
    seen = {(r["tokens"], r["transport"], r["connections"]) for r in rows}
    assert seen == {(n, t, c) for n in (512, 768) for t in ("tcp", "unix", "shm") for c in (1, 2)}
    assert all(r["recompute_ms"] > 0 and r["load_ms"] > 0 and r["loaded_MiB"] > 0 for r in rows)
    # Saves, one connection per transport (shared memory through KVD.SETFROM); the loads after them checked them
    assert all((r["save_GB/s"] or 0) > 0 for r in rows if r["connections"] == 1)
