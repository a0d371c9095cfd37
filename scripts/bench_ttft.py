"""Time to first token with the kvd vLLM connector, measured with a real vLLM 0.32 CPU engine on this machine.

    .venv/bin/python scripts/bench_ttft.py            # default run (~5 min on 2 idle cores)
    .venv/bin/python scripts/bench_ttft.py --quick    # shorter prompts, fewer of them (~3 min)

Uses the ``--size bench`` random Llama from scripts/make_tiny_model.py (made on first use) and runs every engine
in a subprocess with the vLLM environment's Python (scripts/vllm_env.sh, or ``KVD_VLLM_PYTHON``), in-process
engine mode, offline, enforce_eager, vLLM's own prefix cache off, each with its own TMPDIR, exactly like
tests/vllm. kvd runs on 127.0.0.1 on a free port with persistence on, in a temporary directory; every process
started here is stopped in a ``finally``.

TTFT = wall time of ``llm.generate([prompt], max_tokens=1)`` for one prompt, inside an engine process that has
already served one unrelated warm-up prompt; ``llm.reset_prefix_cache()`` and a flush of the connector's queued
saves run between requests, outside the timing.

1. One long document: cold (engine without connector; and with connector against an empty kvd), warm from kvd's
   RAM (fresh engine process), and after a kvd restart (SIGTERM, same --dir: values come from the disk tier).
2. Stress: N documents whose KV together exceeds kvd's --maxmemory, sent in order, then each re-sent.
3. Cost of saving on an all-miss workload: prompt tokens/s over M distinct prompts, with the connector / without.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENGINE_TIMEOUT_S = 600


# --------------------------------------------------------------------------------------------------------------
# Engine side: runs under the vLLM environment's Python (``bench_ttft.py --engine SPEC OUT``).
# --------------------------------------------------------------------------------------------------------------


def _kvd_counters(url: str | None) -> dict[str, int]:
    if not url:
        return {}
    import redis

    try:
        info = redis.Redis.from_url(url, socket_timeout=10).info()
    except Exception:
        return {}
    return {
        k: int(info[k]) for k in ("ram_hits", "disk_hits", "ram_demotions", "ram_keys", "disk_only_keys") if k in info
    }


def _flush() -> float:
    t = time.perf_counter()
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    if has_kv_transfer_group():
        conn = get_kv_transfer_group()
        if hasattr(conn, "flush"):
            conn.flush(timeout=120)
    return time.perf_counter() - t


def engine_main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(out_path)
    from vllm import LLM, SamplingParams

    from connectors.testing import kv_transfer_config

    kwargs: dict[str, Any] = {}
    url = None
    if spec.get("connector") is not None:
        url = spec["connector"]["url"]
        kwargs["kv_transfer_config"] = kv_transfer_config(spec["connector"])
    t0 = time.perf_counter()
    llm = LLM(
        model=spec["model"],
        dtype="float32",
        block_size=32,
        enforce_eager=True,
        enable_prefix_caching=False,
        kv_cache_memory_bytes=spec["kv_cache_bytes"],
        max_model_len=spec["max_model_len"],
        max_num_batched_tokens=spec["max_model_len"],
        skip_tokenizer_init=True,
        seed=0,
        **kwargs,
    )
    res: dict[str, Any] = {"startup_s": time.perf_counter() - t0, "steps": []}
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)

    def stats() -> dict[str, int]:
        if url is None:
            return {}
        from connectors.vllm import STATS

        return dict(STATS.total)

    for step in spec["steps"]:
        prompts = [{"prompt_token_ids": p} for p in step["prompts"]]
        llm.reset_prefix_cache()
        s0, k0 = stats(), _kvd_counters(url)
        t = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - t
        flush_s = _flush()
        s1, k1 = stats(), _kvd_counters(url)
        res["steps"].append(
            {
                "name": step["name"],
                "tokens": sum(len(p) for p in step["prompts"]),
                "wall_s": wall,
                "flush_s": flush_s,
                "conn": {k: v - s0.get(k, 0) for k, v in s1.items() if isinstance(v, (int, float))},
                "kvd": {k: v - k0.get(k, 0) for k, v in k1.items()},
            }
        )
        out.write_text(json.dumps(res))
    llm.reset_prefix_cache()
    return 0


# --------------------------------------------------------------------------------------------------------------
# Driver side: runs under the repo's .venv.
# --------------------------------------------------------------------------------------------------------------


def vllm_python() -> str:
    py = os.environ.get("KVD_VLLM_PYTHON")
    if py:
        return py
    proc = subprocess.run(
        [str(REPO / "scripts" / "vllm_env.sh")], capture_output=True, text=True, timeout=1800, check=True
    )
    return proc.stdout.strip().splitlines()[-1]


def kv_bytes_per_token(model: Path) -> int:
    cfg = json.loads((model / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    dtype_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}[cfg.get("dtype", cfg.get("torch_dtype", "float32"))]
    return 2 * cfg["num_hidden_layers"] * kv_heads * head_dim * dtype_bytes


def tokens(seed: int, n: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(2, 2048) for _ in range(n)]  # 0, 1 are <s>, </s>


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.python = vllm_python()
        self.model = REPO / ".cache" / "models" / "bench-llama"
        subprocess.run(
            [self.python, str(REPO / "scripts" / "make_tiny_model.py"), str(self.model), "--size", "bench"],
            check=True,
            timeout=900,
        )
        self.bpt = kv_bytes_per_token(self.model)
        self.n = 0

    def engine(self, label: str, steps: list[dict[str, Any]], url: str | None) -> dict[str, Any]:
        """One fresh vLLM process: a warm-up prompt, then ``steps``; returns the per-step timings."""
        self.n += 1
        a = self.args
        work = self.work / f"engine{self.n}-{label}"
        (work / "tmp").mkdir(parents=True)
        warm = {"name": "warm-up", "prompts": [tokens(10_000 + self.n, 256)]}
        longest = max([a.doc_tokens, a.tput_tokens])
        batch = max(a.doc_tokens, a.tput_prompts * a.tput_tokens)
        spec = {
            "model": str(self.model),
            "connector": None if url is None else {"url": url, "chunk_size": 256, "namespace": "bench"},
            "max_model_len": (longest // 256 + 2) * 256,
            "kv_cache_bytes": int(batch * self.bpt * 1.25) + 64 * 2**20,
            "steps": [warm, *steps],
        }
        (work / "spec.json").write_text(json.dumps(spec))
        from connectors.testing import engine_env  # importable once run() has put the repository on sys.path

        env = engine_env(work)
        t = time.perf_counter()
        print(f"  engine {self.n} ({label}) ...", end="", flush=True)
        with open(work / "engine.log", "wb") as log:
            proc = subprocess.run(
                [
                    self.python,
                    str(Path(__file__).resolve()),
                    "--engine",
                    str(work / "spec.json"),
                    str(work / "out.json"),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=ENGINE_TIMEOUT_S,
                check=False,
            )
        if proc.returncode != 0:
            tail = (work / "engine.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"engine {label} failed ({proc.returncode}):\n{tail}")
        res = json.loads((work / "out.json").read_text())
        print(f" {time.perf_counter() - t:.0f} s (start-up {res['startup_s']:.0f} s)", flush=True)
        return {s["name"]: s for s in res["steps"]}


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"\n{title}\n", "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    for r in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    return "\n".join(lines)


def tiers(step: dict[str, Any]) -> str:
    k = step.get("kvd", {})
    c = step.get("conn", {})
    loaded = c.get("loaded_chunks", 0)
    return f"{loaded} chunks loaded (kvd ram_hits +{k.get('ram_hits', 0)}, disk_hits +{k.get('disk_hits', 0)})"


def run(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO))
    from connectors.testing import Server

    with tempfile.TemporaryDirectory(prefix="kvd-bench-ttft-") as tmp:
        work = Path(tmp)
        b = Bench(args, work)
        mib = b.bpt * args.doc_tokens / 2**20
        print(
            f"model: {b.model.name} (KV {b.bpt // 1024} KiB/token fp32); document {args.doc_tokens} tokens = "
            f"{mib:.0f} MiB of KV; chunk 256 tokens",
            flush=True,
        )
        out: list[str] = []
        doc = tokens(1, args.doc_tokens)
        tput_sets = [[tokens(100 * r + i + 1000, args.tput_tokens) for i in range(args.tput_prompts)] for r in range(2)]
        tput_steps = [{"name": f"tput{r}", "prompts": s} for r, s in enumerate(tput_sets)]
        servers: list[Server] = []
        try:
            # ---- Table 1 (+ the throughput runs of table 3, in the same processes) ----
            print("table 1 + table 3", flush=True)
            base = b.engine("no-connector", [{"name": "doc", "prompts": [doc]}, *tput_steps], None)
            s1 = Server(work / "kvd1", kind="kvd", persistence=True, maxmemory=args.maxmemory).start()
            servers.append(s1)
            cold = b.engine("cold", [{"name": "doc", "prompts": [doc]}, *tput_steps], s1.url)
            ram = b.engine("warm-ram", [{"name": "doc", "prompts": [doc]}], s1.url)
            t = time.perf_counter()
            s1.restart()  # SIGTERM, same --dir
            restart_s = time.perf_counter() - t
            disk = b.engine("after-restart", [{"name": "doc", "prompts": [doc]}], s1.url)
            s1.stop()
            c0 = base["doc"]["wall_s"]
            rows = [
                ["cold, no connector", f"{c0:.2f}", "1.00", "-"],
                [
                    "cold, connector, empty kvd (saves)",
                    f"{cold['doc']['wall_s']:.2f}",
                    f"{cold['doc']['wall_s'] / c0:.2f}",
                    tiers(cold["doc"]),
                ],
                [
                    "warm from kvd RAM (new vLLM process)",
                    f"{ram['doc']['wall_s']:.2f}",
                    f"{ram['doc']['wall_s'] / c0:.2f}",
                    tiers(ram["doc"]),
                ],
                [
                    f"after kvd restart (SIGTERM, {restart_s:.1f} s), disk tier",
                    f"{disk['doc']['wall_s']:.2f}",
                    f"{disk['doc']['wall_s'] / c0:.2f}",
                    tiers(disk["doc"]),
                ],
            ]
            out.append(
                table(
                    f"Table 1: one document of {args.doc_tokens} tokens, TTFT",
                    ["case", "TTFT s", "x cold", "served"],
                    rows,
                )
            )
            print(out[-1], flush=True)

            # ---- Table 3 ----
            def tps(r: dict[str, Any], flush: bool) -> float:
                vals = [
                    r[s["name"]]["tokens"] / (r[s["name"]]["wall_s"] + (r[s["name"]]["flush_s"] if flush else 0))
                    for s in tput_steps
                ]
                return statistics.mean(vals)

            n_tok = args.tput_prompts * args.tput_tokens
            t_base, t_conn, t_conn_f = tps(base, False), tps(cold, False), tps(cold, True)
            saved = sum(cold[s["name"]]["conn"].get("saved_chunks", 0) for s in tput_steps)
            rows = [
                ["without connector", f"{t_base:.0f}", "1.00"],
                ["with connector (saves every chunk; generate only)", f"{t_conn:.0f}", f"{t_conn / t_base:.2f}"],
                ["with connector, counting the wait for queued saves", f"{t_conn_f:.0f}", f"{t_conn_f / t_base:.2f}"],
            ]
            out.append(
                table(
                    f"Table 3: all-miss throughput, {args.tput_prompts} distinct prompts x {args.tput_tokens} tokens "
                    f"= {n_tok} tokens per batch, mean of 2 batches ({saved} chunks saved)",
                    ["case", "prompt tokens/s", "x without"],
                    rows,
                )
            )
            print(out[-1], flush=True)

            # ---- Table 2 ----
            print("table 2", flush=True)
            docs = [tokens(50 + i, args.doc_tokens) for i in range(args.docs)]
            total = b.bpt * args.doc_tokens * args.docs
            maxmem_mb = max(16, int(total * args.stress_fraction / 2**20))
            s2 = Server(work / "kvd2", kind="kvd", persistence=True, maxmemory=f"{maxmem_mb}mb").start()
            servers.append(s2)
            steps = [{"name": f"cold{i}", "prompts": [d]} for i, d in enumerate(docs)]
            steps += [{"name": f"warm{i}", "prompts": [d]} for i, d in enumerate(docs)]
            st = b.engine("stress", steps, s2.url)
            s2.stop()
            rows = []
            for i in range(args.docs):
                c, w = st[f"cold{i}"], st[f"warm{i}"]
                rows.append(
                    [
                        f"doc {i + 1}",
                        f"{c['wall_s']:.2f}",
                        f"{w['wall_s']:.2f}",
                        f"{w['wall_s'] / c['wall_s']:.2f}",
                        tiers(w),
                    ]
                )
            out.append(
                table(
                    f"Table 2: {args.docs} documents x {args.doc_tokens} tokens ({total / 2**20:.0f} MiB of KV) "
                    f"against kvd --maxmemory {maxmem_mb}mb, sent in order then each re-sent (one vLLM process)",
                    ["document", "cold TTFT s", "re-sent TTFT s", "x cold", "served"],
                    rows,
                )
            )
            print(out[-1], flush=True)
        finally:
            for s in servers:
                s.stop(kill=True)
        if args.out:
            Path(args.out).write_text("\n".join(out).strip() + "\n")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--engine":
        return engine_main(sys.argv[2], sys.argv[3])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shorter document, fewer prompts")
    p.add_argument("--doc-tokens", type=int, default=None, help="tokens per document (default 1024, quick 768)")
    p.add_argument("--docs", type=int, default=4, help="documents in table 2")
    p.add_argument("--stress-fraction", type=float, default=0.5, help="kvd --maxmemory as a fraction of their KV")
    p.add_argument("--maxmemory", default="512mb", help="kvd --maxmemory for table 1")
    p.add_argument("--tput-prompts", type=int, default=None, help="distinct prompts per batch in table 3")
    p.add_argument("--tput-tokens", type=int, default=256, help="tokens per prompt in table 3")
    p.add_argument("--out", help="also write the tables (markdown) to this file")
    args = p.parse_args()
    if args.doc_tokens is None:
        args.doc_tokens = 768 if args.quick else 1024
    if args.tput_prompts is None:
        args.tput_prompts = 4 if args.quick else 8
    # SIGTERM unwinds like Ctrl-C: subprocess.run kills the engine, the finally blocks stop kvd.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
