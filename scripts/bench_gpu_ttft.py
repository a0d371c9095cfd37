"""Time to first token on a GPU: a prefix hit loaded from kvd against recomputing the prompt.

    python scripts/bench_gpu_ttft.py [--tokens 4096,16384,32768] [--repeat 3] [--json FILE]
    python scripts/bench_gpu_ttft.py --shape tiny --device cpu --tokens 512,1024   # a smoke run without a GPU

Needs transformers and, for the figures that count, a CUDA GPU (CI never has one; nothing depends on this).
No vLLM runs here: the lent GPU machines reach no package index, and vLLM's CUDA wheel is far over what can be
carried to them. So the engine's two paths are rebuilt from the parts that cost time, each real:

* **recompute**: one prefill forward of all N prompt tokens through a transformers Llama with Llama-3.1-8B's
  shape (32 layers, 4096 wide, 32 query and 8 KV heads, 14336 MLP, bf16; random weights, which do not change the
  time) and the first token's logits, as an engine without a hit computes them.
* **hit**: the connector's load of the first N - 256 tokens' KV (``connectors.paged_kv_check.load_through``)
  from a real kvd on this host, persistence off, by one of three transports: MGET over loopback TCP or over
  kvd's unix socket, received straight into pinned buffers, or ``KVD.GETINTO`` (kvd copies the values into the
  engine's page-locked shared memory, ``connectors/shm.py``); then ``PagedKV.scatter`` into a paged cache of the
  model's shape, CUDA graphs on. ``--connections N`` adds rows where N connections each receive a share. Then
  a forward of the last chunk
  of 256 tokens over the N - 256 before it. The connector recomputes at least the last chunk, as vLLM needs one
  token to compute; its attention reads the prefix from a transformers cache made once beforehand, where vLLM's
  reads the paged blocks the load wrote: the same arithmetic, without the hand-off between the two layouts.

* **save**: the other direction, on one connection per transport: every chunk of the prefix gathered from the
  paged cache into host memory (pinned buffers, or slots of a page-locked shared file for ``shm``) and saved
  (pipelined SETs, or ``KVD.SETFROM``: kvd copies the slots out itself). A prefill makes KV at its own rate
  (``kv_GB/s`` in the rows: the prefix's bytes over the recompute's time); where saves are slower, a connector
  saving every prompt falls behind and its queue drops saves.

Each figure is the median of ``--repeat`` timed runs after one warm-up, the GPU drained around each. The ratio
recompute / hit is the speed-up a prefix hit gives the first token; the load's GB/s can be set against the
loopback ceiling that ``bench_cuda_path.py`` measures on the same machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.client import ClientConfig, KvdClient, LoadBuffers
from connectors.paged_kv import PagedKV
from connectors.paged_kv_check import blocks_of, bytes_of, load_buffers, load_through
from connectors.shm import SharedBuffers
from connectors.testing import Server

CHUNK = 256  # tokens per kvd value, the connector's default
BLOCK = 16  # tokens per vLLM block

SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "rope_theta": 500000.0,
    },
    # Llama-3.1-70B's layers, 20 of its 80: per layer and token, compute and KV bytes are the model's own, so the
    # ratio of recompute to load is too (the embedding and the head aside); all 80 do not fit with room to spare.
    "llama-3.1-70b-20l": {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 20,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "rope_theta": 500000.0,
    },
    "tiny": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1024,
        "rope_theta": 10000.0,
    },
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_s(fn: Callable[[], None], repeat: int, device: torch.device) -> float:
    fn()  # warm-up: kernels loaded, allocator and cuBLAS settled
    samples = []
    for _ in range(repeat):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def build_model(shape: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=131072, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


@torch.inference_mode()
def first_token(model: torch.nn.Module, ids: torch.Tensor, past: Any = None) -> tuple[torch.Tensor, Any]:
    """The next token after ``ids`` (greedy) and the cache, computing logits for the last position only."""
    out = model.model(input_ids=ids, past_key_values=past, use_cache=True)
    logits = model.lm_head(out.last_hidden_state[:, -1:])
    return logits.argmax(-1), out.past_key_values


def paged_cache(model: torch.nn.Module, blocks: int, device: torch.device, dtype: torch.dtype) -> PagedKV:
    """A vLLM-shaped paged cache for ``model`` (CUDA's ``(2, blocks, block, kv heads, head)`` per layer)."""
    cfg = model.config
    head = cfg.hidden_size // cfg.num_attention_heads
    caches = {
        f"model.layers.{i}.self_attn.attn": torch.randn(
            2, blocks, BLOCK, cfg.num_key_value_heads, head, device=device, dtype=dtype
        )
        for i in range(cfg.num_hidden_layers)
    }
    return PagedKV(caches, num_blocks=blocks, block_size=BLOCK, blocks_per_chunk=CHUNK // BLOCK)


def load_parallel(
    kv: PagedKV,
    pool: ThreadPoolExecutor,
    lanes: list[tuple[KvdClient, LoadBuffers]],
    keys: list[str],
    dsts: list[list[int]],
) -> None:
    """The load over ``len(lanes)`` connections: each receives a contiguous share of the values into its own
    buffers on a thread of ``pool`` (``recv_into`` lets go of the GIL), then every value is scattered."""
    n = len(lanes)
    shares = [(j * len(keys) // n, (j + 1) * len(keys) // n) for j in range(n)]

    def receive(j: int) -> None:
        client, buffers = lanes[j]
        buffers.trim()
        lo, hi = shares[j]
        values = client.get_many(keys[lo:hi], kv.payload_bytes, into=buffers)
        assert all(v is not None and len(v) == kv.payload_bytes for v in values), "a value is missing or short"

    list(pool.map(receive, range(n)))
    kv.begin_load()
    for (_, buffers), (lo, hi) in zip(lanes, shares, strict=True):
        for i, dst in enumerate(dsts[lo:hi]):
            kv.scatter(buffers.backing(i)[: kv.payload_bytes], dst)
    kv.end_load()


def save_through(
    kv: PagedKV, client: KvdClient, staging: list[torch.Tensor] | SharedBuffers, keys: list[str], srcs: list[list[int]]
) -> None:
    """What the connector's ``wait_for_save`` and its saver do, without vLLM: every chunk gathered into its host
    buffer (a slot of ``staging`` when it is shared memory), then one save of them all."""
    n = kv.payload_bytes
    targets = [staging.backing(i)[:n] if isinstance(staging, SharedBuffers) else staging[i] for i in range(len(keys))]
    events = [kv.gather(s, t) for s, t in zip(srcs, targets, strict=True)]
    for event in events:
        if event is not None:  # CUDA: the copy out is queued; the saver waits for it
            event.synchronize()
    if isinstance(staging, SharedBuffers):
        written, _ = client.put_shared([(k, i, n) for i, k in enumerate(keys)], staging, skip_existing=False)
    else:
        written, _ = client.put_many(
            [(k, bytes_of(t)) for k, t in zip(keys, targets, strict=True)], skip_existing=False
        )
    assert written == len(keys), f"{written} of {len(keys)} chunks saved"


def run(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_model(args.shape, device, dtype)
    longest = max(args.tokens)
    blocks = 2 * longest // BLOCK + 16  # room for the saved prefix's blocks and, elsewhere, the loaded ones
    kv = paged_cache(model, blocks, device, dtype)
    bpc = CHUNK // BLOCK
    rng = random.Random(7)
    order = rng.sample(range(blocks), blocks)
    chunks = (longest - CHUNK) // CHUNK
    src = [order[c * bpc : (c + 1) * bpc] for c in range(chunks)]
    dst = [order[(chunks + c) * bpc : (chunks + c + 1) * bpc] for c in range(chunks)]
    keys = [f"ttft:{c}" for c in range(chunks)]

    def buffers(transport: str) -> LoadBuffers | SharedBuffers:
        if transport == "shm":  # kvd copies into the engine's page-locked shared memory (KVD.GETINTO)
            return SharedBuffers(kv.payload_bytes, keep_bytes=chunks * kv.payload_bytes, wrap=kv.host_view)
        return load_buffers(kv, chunks * kv.payload_bytes)

    lanes = {
        transport: [
            (KvdClient(ClientConfig(url=url, timeout_ms=120_000)), buffers(transport))
            for _ in range(max(args.connections))
        ]
        for transport, url in urls.items()
    }
    client = next(iter(lanes.values()))[0][0]

    def save_staging(transport: str) -> list[torch.Tensor] | SharedBuffers:
        if transport == "shm":  # the connector's save slots: page-locked shared memory kvd reads (KVD.SETFROM)
            slots = SharedBuffers(kv.payload_bytes, keep_bytes=0, wrap=kv.host_view)
            assert slots.ensure(chunks), "no room in /dev/shm for the save slots"
            return slots
        return [kv.host_buffer(kv.payload_bytes) for _ in range(chunks)]

    staging = {transport: save_staging(transport) for transport in urls}
    host = kv.host_buffer(kv.payload_bytes)
    for s, k in zip(src, keys, strict=True):  # the engine's earlier save of this prefix
        done = kv.gather(s, host)
        if done is not None:  # CUDA: an event for the copy out
            done.synchronize()
        written, _ = client.put_many([(k, bytes_of(host))], skip_existing=False)
        assert written == 1, f"kvd refused {k}"
    prompt = torch.randint(0, model.config.vocab_size, (1, longest), device=device)

    rows = []
    with ThreadPoolExecutor(max(args.connections)) as pool:
        for n in sorted(args.tokens):
            prefix = n - CHUNK
            n_chunks = prefix // CHUNK
            ids = prompt[:, :n]
            recompute = _median_s(lambda ids=ids: first_token(model, ids), args.repeat, device)
            _, past = first_token(model, ids[:, :prefix])

            def suffix(ids: torch.Tensor = ids, past: Any = past, prefix: int = prefix) -> None:
                first_token(model, ids[:, prefix:], past)
                past.crop(-CHUNK)  # back to the prefix, for the next run

            suffix_s = _median_s(suffix, args.repeat, device)
            del past
            loaded = n_chunks * kv.payload_bytes
            for transport, conns in [(t, c) for t in lanes for c in args.connections]:
                share = keys[:n_chunks], dst[:n_chunks]
                if conns == 1:  # the connector's own sequence: one connection, scatters as values arrive
                    load = partial(load_through, kv, lanes[transport][0][0], lanes[transport][0][1], *share)
                else:
                    load = partial(load_parallel, kv, pool, lanes[transport][:conns], *share)
                for d in dst[:n_chunks]:  # poisoned first, so a load that writes nothing fails the check below
                    for layer in kv.layers:
                        where = [b * layer.ratio + k for b in d for k in range(layer.ratio)]
                        layer.tensor.index_fill_(layer.dim, torch.tensor(where, device=device), 0)
                load_s = _median_s(load, args.repeat, device)
                for s, d in zip(src[:n_chunks], dst[:n_chunks], strict=True):
                    for a, b in zip(blocks_of(kv, s), blocks_of(kv, d), strict=True):
                        assert torch.equal(a, b), "loaded blocks differ from the saved ones"
                hit = load_s + suffix_s
                save_s = None
                if conns == 1:
                    client = lanes[transport][0][0]
                    save = partial(save_through, kv, client, staging[transport], keys[:n_chunks], src[:n_chunks])
                    save_s = _median_s(save, args.repeat, device)
                rows.append(
                    {
                        "tokens": n,
                        "transport": transport,
                        "connections": conns,
                        "recompute_ms": recompute * 1e3,
                        "load_ms": load_s * 1e3,
                        "suffix_ms": suffix_s * 1e3,
                        "hit_ms": hit * 1e3,
                        "speedup": recompute / hit,
                        "loaded_MiB": loaded / 2**20,
                        "load_GB/s": loaded / load_s / 1e9,
                        "prefill_tok/s": n / recompute,
                        "load_tok/s": prefix / load_s,
                        "kv_GB/s": loaded / recompute / 1e9,
                        "save_ms": save_s * 1e3 if save_s else None,
                        "save_GB/s": loaded / save_s / 1e9 if save_s else None,
                    }
                )
                print(
                    f"{n:6d} tokens, {transport} x{conns}: recompute {recompute * 1e3:8.1f} ms, "
                    f"hit {hit * 1e3:8.1f} ms "
                    f"(load {load_s * 1e3:.1f} + last chunk {suffix_s * 1e3:.1f}), {recompute / hit:.2f}x; "
                    f"load {loaded / load_s / 1e9:.2f} GB/s"
                    + (f", save {loaded / save_s / 1e9:.2f} GB/s" if save_s else "")
                    + f" (prefill makes {loaded / recompute / 1e9:.2f})",
                    flush=True,
                )
    for lane in lanes.values():
        for c, _ in lane:
            c.close()
    for slots in staging.values():
        if isinstance(slots, SharedBuffers):
            slots.close()
    return {"value_MiB": kv.payload_bytes / 2**20, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="4096,16384,32768", help="prompt lengths, multiples of 256")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--connections", default="1,4", help="connections the load uses, each a row")
    ap.add_argument(
        "--transports",
        default="tcp,unix,shm",
        help="loopback TCP, kvd's unix socket, shared memory filled by kvd (KVD.GETINTO), each a row",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.connections = [int(c) for c in args.connections.split(",")]
    args.transports = args.transports.split(",")
    if not set(args.transports) <= {"tcp", "unix", "shm"}:
        ap.error("--transports: some of tcp, unix, shm")
    if any(t % CHUNK or t < 2 * CHUNK for t in args.tokens):
        ap.error(f"--tokens: each a multiple of {CHUNK}, at least {2 * CHUNK}")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu_ttft: no CUDA device (--device cpu for a smoke run)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="kvd-bench-ttft-") as tmp:
        sock = Path(tmp) / "kvd.sock"
        server = Server(Path(tmp), persistence=False, maxmemory="64gb", unixsocket=str(sock)).start()
        try:
            urls = {"tcp": server.url, "unix": f"unix://{sock}", "shm": f"unix://{sock}"}
            result = run(args, {t: urls[t] for t in args.transports})
        finally:
            server.stop()
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    result.update({"gpu": gpu, "torch": torch.__version__, "shape": args.shape, "repeat": args.repeat})
    print(f"{gpu}, torch {torch.__version__}, {args.shape}, {result['value_MiB']:.2f} MiB a value")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
