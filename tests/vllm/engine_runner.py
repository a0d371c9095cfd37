"""Runs one real vLLM engine in this process for the end-to-end tests (started by tests/vllm as a subprocess).

    <vllm-env python> tests/vllm/engine_runner.py SPEC.json OUT.json

SPEC: {"model": dir, "block_size": 32, "connector": {extra_config} | null, "module": "connectors.vllm",
       "class": "KvdConnector", "served_model_name": name, "hf_overrides": {...}, "enable_prompt_embeds": bool,
       "phases": [{"name": ..., "prompts": [prompt, ...], "max_tokens": 8,
       "before": [action, ...], "abort": [i, ...], "abort_after_steps": 1}]}
A prompt is a list of token ids, or {"ids": [...], "embeds": [first, end], "seed": N, "hidden": H}: those ids
with the positions first..end-1 given as embeddings instead (random, from the seed), a mixed-mode prompt.
A phase with "abort" runs step by step and aborts its prompts at those indexes after that many steps (their
outputs are null).
Actions run before a phase, in this process: {"op": "kill", "pid": N} stops the server;
{"op": "noise", "url": ..., "prompt": [ids...]} overwrites every stored chunk of that prompt with a value built by
the connector's own encoder (valid header and checksum) around a random payload; {"op": "damage", "url": ...,
"prompt": [ids...], "chunk": i} flips one payload byte of that prompt's stored chunk i (its checksum no longer
matches).
OUT: per phase, the greedy output token ids per prompt, wall time, and the connector's counters afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def _flush() -> None:
    try:
        from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

        if has_kv_transfer_group():
            conn = get_kv_transfer_group()
            if hasattr(conn, "flush"):
                conn.flush(timeout=60)
    except Exception as exc:
        print(f"flush failed: {exc!r}", file=sys.stderr)


def _noise(url: str, prompt: list[int]) -> int:
    """Replace the stored values of ``prompt``'s chunks by noise under a valid header (same key, same layout)."""
    import redis
    import torch

    from connectors import codec, hashing

    r = redis.Redis.from_url(url)
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    conn = get_kv_transfer_group()
    cs = conn._s.chunk_size
    hashes = hashing.chunk_hashes(prompt, cs)
    keys = hashing.make_keys(conn._s.namespace, conn._fp, hashes)
    n = 0
    gen = torch.Generator().manual_seed(7)
    for key, h in zip(keys, hashes, strict=True):
        old = r.get(key)
        if old is None:
            continue
        hdr = codec.read_header(old)
        payload = torch.randn(hdr.payload_len // conn._kv.itemsize, generator=gen).to(conn._kv.dtype)
        value = codec.encode(
            payload.view(torch.uint8).numpy().tobytes(),
            dtype=hdr.dtype,
            shape=hdr.shape,
            layout_fp=hdr.layout_fp,
            chunk_hash=h,
        )
        r.set(key, bytes(value))
        n += 1
    return n


def _damage(url: str, prompt: list[int], chunk: int) -> int:
    """Flip one byte near the end of the stored value of ``prompt``'s chunk ``chunk``; its length, 0 if absent."""
    import redis
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    from connectors import hashing

    conn = get_kv_transfer_group()
    key = hashing.make_keys(conn._s.namespace, conn._fp, hashing.chunk_hashes(prompt, conn._s.chunk_size))[chunk]
    r = redis.Redis.from_url(url)
    value = r.get(key)
    if value is None:
        return 0
    damaged = bytearray(value)
    damaged[-100] ^= 0xFF
    r.set(key, bytes(damaged))
    return len(value)


def _prompt(p: Any) -> dict[str, Any]:
    if isinstance(p, list):
        return {"prompt_token_ids": p}
    import torch

    first, end = p["embeds"]
    hidden = int(p["hidden"])
    embeds = torch.zeros(len(p["ids"]), hidden)  # rows at token positions are not used
    embeds[first:end] = torch.randn(end - first, hidden, generator=torch.Generator().manual_seed(p["seed"])) * 0.08
    mask = [not first <= i < end for i in range(len(p["ids"]))]
    return {"prompt_token_ids": p["ids"], "prompt_embeds": embeds, "prompt_is_token_ids": mask}


def _run_aborting(llm: Any, prompts: list[dict], params: Any, phase: dict) -> list[list[int] | None]:
    """The phase's prompts through the engine step by step; the requests at the indexes ``abort`` are aborted
    after ``abort_after_steps`` steps. Their outputs are None."""
    engine = llm.llm_engine
    ids = [f"{phase.get('name', 'phase')}-{i}" for i in range(len(prompts))]
    for rid, prompt in zip(ids, prompts, strict=True):
        engine.add_request(rid, prompt, params)
    done: dict[str, list[int]] = {}
    for step in range(1, 10_000):
        if not engine.has_unfinished_requests():
            break
        for out in engine.step():
            if out.finished:
                done[out.request_id] = list(out.outputs[0].token_ids)
        if step == phase.get("abort_after_steps", 1):
            engine.abort_request([ids[i] for i in phase["abort"]])
    return [None if i in phase["abort"] else done.get(rid) for i, rid in enumerate(ids)]


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2])
    from vllm import LLM, SamplingParams

    from connectors.testing import kv_transfer_config

    kwargs: dict = {}
    for option in ("served_model_name", "hf_overrides", "enable_prompt_embeds"):
        if spec.get(option):
            kwargs[option] = spec[option]
    if spec.get("connector") is not None:
        kwargs["kv_transfer_config"] = kv_transfer_config(
            spec["connector"], spec.get("class", "KvdConnector"), spec.get("module", "connectors.vllm")
        )
    t0 = time.perf_counter()
    llm = LLM(
        model=spec["model"],
        dtype=spec.get("dtype", "float32"),
        block_size=spec.get("block_size", 32),
        enforce_eager=True,
        enable_prefix_caching=False,
        kv_cache_memory_bytes=spec.get("kv_cache_bytes", 256 * 2**20),
        max_model_len=spec.get("max_model_len", 4096),
        max_num_batched_tokens=spec.get("max_num_batched_tokens", 4096),
        skip_tokenizer_init=True,
        seed=0,
        **kwargs,
    )
    results = {"startup_s": time.perf_counter() - t0, "phases": []}
    for phase in spec["phases"]:
        for action in phase.get("before", []):
            if action["op"] == "kill":
                os.kill(action["pid"], signal.SIGKILL)
                time.sleep(0.2)
            elif action["op"] == "noise":
                results.setdefault("noised", []).append(_noise(action["url"], action["prompt"]))
            elif action["op"] == "damage":
                results.setdefault("damaged", []).append(_damage(action["url"], action["prompt"], action["chunk"]))
        params = SamplingParams(temperature=0.0, max_tokens=phase.get("max_tokens", 8), ignore_eos=True)
        prompts = [_prompt(p) for p in phase["prompts"]]
        t = time.perf_counter()
        if "abort" in phase:
            outputs = _run_aborting(llm, prompts, params, phase)
        else:
            outputs = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
        wall = time.perf_counter() - t
        _flush()
        stats = {}
        if spec.get("connector") is not None:
            from connectors.vllm import STATS

            stats = dict(STATS.total)
        results["phases"].append(
            {
                "name": phase.get("name"),
                "outputs": outputs,
                "wall_s": wall,
                "stats": stats,
            }
        )
        out_path.write_text(json.dumps(results))  # after every phase: a crash still leaves what ran
    return 0


if __name__ == "__main__":
    sys.exit(main())
