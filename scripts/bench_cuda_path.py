"""Time the connector's CUDA data path (``connectors.paged_kv.PagedKV``) on a GPU, against one plain copy.

    python scripts/bench_cuda_path.py [--chunks 8] [--repeat 10] [--json FILE]

Needs a CUDA GPU (CI never has one; nothing depends on this). The cache is shaped like Llama-3.1-8B's in bf16:
32 layers of ``(2, 4096 blocks, 16, 8 KV heads, 128)``, chunk 256 tokens = 32 MiB per value, chunk blocks
scattered over the cache. Every figure is GB/s of KV payload, and a ratio to the matching ceiling measured in
the same run (one ``non_blocking`` copy of each value between pinned host memory and the device):

* save: ``PagedKV.gather`` (every layer's ``index_select`` into one device staging buffer, replayed as a CUDA
  graph, then one copy to pinned memory, on a side stream), the same without CUDA graphs, and the alternative of
  a select and a copy per layer;
* load: ``PagedKV.scatter`` (one copy of the value to the device, then ``index_copy_`` per layer as a CUDA
  graph), the same without CUDA graphs, and the alternative of a copy and an ``index_copy_`` per layer;
* end to end through a real kvd on loopback (started here, persistence off): gather + pipelined SET; MGET
  received straight into pinned buffers; the same followed by the scatter (``connectors.paged_kv_check``'s
  ``load_through``, the connector's own sequence). Their ceiling is one loopback TCP connection moving the same
  bytes (``sendall`` from host memory, ``recv_into`` pinned memory), measured in the same run.

Round trips are checked bit for bit; ``python -m connectors.paged_kv_check`` checks correctness in depth.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.client import ClientConfig, KvdClient
from connectors.paged_kv import PagedKV
from connectors.paged_kv_check import blocks_of, bytes_of, load_buffers, load_through
from connectors.testing import Server


def _median_s(fn: Callable[[], None], repeat: int) -> float:
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _loopback_s(sources: list[memoryview], sinks: list[memoryview], repeat: int) -> float:
    """Median seconds to move ``sources`` over one loopback TCP connection into ``sinks`` (sendall, recv_into):
    the least a GET of those bytes can cost on this machine."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while conn.recv(1):
                for v in sources:
                    conn.sendall(v)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    with socket.create_connection(listener.getsockname()) as client:

        def once() -> float:
            start = time.perf_counter()
            client.sendall(b"x")
            for sink in sinks:
                got = 0
                while got < len(sink):
                    got += client.recv_into(sink[got:])
            return time.perf_counter() - start

        once()
        seconds = statistics.median(once() for _ in range(repeat))
    server.join(timeout=10)
    listener.close()
    return seconds


def _host_us(fn: Callable[[], None], repeat: int) -> float:
    """Median microseconds the host spends in ``fn`` (the GPU drained between calls): the time to queue work."""
    samples = []
    for _ in range(repeat + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(samples[1:]) * 1e6


def _forward_wait_us(save: Callable[[], Any], repeat: int) -> float:
    """Median microseconds between two events on the compute stream around ``save`` (the GPU idle before): from
    the save's call until the compute stream may go on, the host's queueing and the selects included."""
    samples = []
    for _ in range(repeat + 1):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        save()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(samples[1:])


def run_bench(client: KvdClient, chunks: int, repeat: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    dev = torch.device("cuda")
    layers, heads, head, bs, chunk, nb = 32, 8, 128, 16, 256, 4096
    bpc = chunk // bs
    caches = {
        f"model.layers.{i}.attn": torch.randn(2, nb, bs, heads, head, device=dev, dtype=torch.bfloat16)
        for i in range(layers)
    }
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=bpc)
    eager = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=bpc, cuda_graphs=False)
    assert kv._save_graphs is not None, "CUDA graphs were not captured"
    rng = random.Random(3)
    ids = rng.sample(range(nb), 2 * chunks * bpc)
    src = [ids[c * bpc : (c + 1) * bpc] for c in range(chunks)]
    dst = [ids[(chunks + c) * bpc : (chunks + c + 1) * bpc] for c in range(chunks)]
    total = kv.payload_bytes * chunks
    host = [kv.host_buffer(kv.payload_bytes) for _ in range(chunks)]
    flat_dev = torch.empty(kv.payload_bytes, dtype=torch.uint8, device=dev)
    rows: list[dict[str, Any]] = []

    def row(name: str, seconds: float, ceiling: float | None) -> None:
        rows.append(
            {"path": name, "GB/s": total / seconds / 1e9, "x ceiling": (ceiling / seconds) if ceiling else None}
        )

    def to_device() -> None:
        for h in host:
            flat_dev.copy_(h, non_blocking=True)

    def to_host() -> None:
        for h in host:
            h.copy_(flat_dev, non_blocking=True)

    h2d = _median_s(to_device, repeat)
    d2h = _median_s(to_host, repeat)
    row("ceiling: pinned -> device, one copy per value", h2d, None)
    row("ceiling: device -> pinned, one copy per value", d2h, None)

    def gather(paged: PagedKV = kv) -> None:
        events = [paged.gather(s, h) for s, h in zip(src, host, strict=True)]
        for e in events:
            e.synchronize()

    row("save: PagedKV.gather (select into device staging, one D2H)", _median_s(gather, repeat), d2h)
    row("save, the same without CUDA graphs", _median_s(lambda: gather(eager), repeat), d2h)

    def pinned_index(ids: list[int]) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.long, pin_memory=True).to(dev, non_blocking=True)

    def gather_per_layer() -> None:
        side = kv._save_stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for s, h in zip(src, host, strict=True):
                idx = pinned_index(s)
                off = 0
                for layer in kv.layers:
                    out = h[off : off + layer.nbytes].view(layer.words.dtype).view(layer.words_chunk_shape)
                    out.copy_(layer.words.index_select(1, idx), non_blocking=True)
                    off += layer.nbytes
        side.synchronize()

    row("save, alternative: a select and a D2H per layer", _median_s(gather_per_layer, repeat), d2h)

    def scatter(paged: PagedKV = kv) -> None:
        paged.begin_load()
        for d, h in zip(dst, host, strict=True):
            paged.scatter(h, d)
        paged.end_load()

    row("load: PagedKV.scatter (one H2D, index_copy_ on the device)", _median_s(scatter, repeat), h2d)
    row("load, the same without CUDA graphs", _median_s(lambda: scatter(eager), repeat), h2d)

    def scatter_per_layer() -> None:
        side = kv._load_stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for d, h in zip(dst, host, strict=True):
                idx = pinned_index(d)
                off = 0
                for layer in kv.layers:
                    src_layer = h[off : off + layer.nbytes].view(layer.words.dtype).view(layer.words_chunk_shape)
                    layer.words.index_copy_(1, idx, src_layer.to(dev, non_blocking=True))
                    off += layer.nbytes
        torch.cuda.current_stream().wait_stream(side)

    row("load, alternative: an H2D and an index_copy_ per layer", _median_s(scatter_per_layer, repeat), h2d)
    for s, d in zip(src, dst, strict=True):
        for a, b in zip(blocks_of(kv, s), blocks_of(kv, d), strict=True):
            assert torch.equal(a, b), "bench round trip mismatch"

    keys = [f"bench:{c}" for c in range(chunks)]
    views = [bytes_of(h) for h in host]

    def save_e2e() -> None:
        gather()
        written, _ = client.put_many(list(zip(keys, views, strict=True)), skip_existing=False)
        assert written == chunks

    buffers = load_buffers(kv, keep_bytes=2 * total)
    sinks = [bytes_of(kv.host_buffer(kv.payload_bytes)) for _ in range(chunks)]
    tcp = _loopback_s(views, sinks, repeat)
    row("ceiling: loopback TCP, sendall -> recv_into pinned", tcp, None)
    row("save end to end: gather + SET to kvd", _median_s(save_e2e, repeat), tcp)

    def receive() -> None:
        buffers.trim()
        values = client.get_many(keys, kv.payload_bytes, into=buffers)
        assert all(v is not None for v in values)

    row("load, network only: MGET into pinned buffers", _median_s(receive, repeat), tcp)

    row(
        "load end to end: MGET into pinned + scatter",
        _median_s(lambda: load_through(kv, client, buffers, keys, dst), repeat),
        tcp,
    )
    for s, d in zip(src, dst, strict=True):
        for a, b in zip(blocks_of(kv, s), blocks_of(kv, d), strict=True):
            assert torch.equal(a, b), "end-to-end round trip mismatch"

    def one_load(paged: PagedKV) -> None:
        paged.begin_load()
        paged.scatter(host[0], dst[0])
        paged.end_load()

    timings: dict[str, list[float]] = {}
    for _ in range(2):  # alternated, since the host's pace varies from one moment (and process) to the next
        for name, paged in (("", kv), (", without CUDA graphs", eager)):
            for what, fn in (
                ("host time to queue a save (gather of one value)", lambda p=paged: p.gather(src[0], host[0])),
                ("host time to queue a load (begin_load, scatter, end_load)", lambda p=paged: one_load(p)),
            ):
                timings.setdefault(what + name, []).append(_host_us(fn, repeat))
            wait = "time from a save's call until the compute stream may go on (one value)" + name
            timings.setdefault(wait, []).append(_forward_wait_us(lambda p=paged: p.gather(src[0], host[0]), repeat))
    return rows, {k: min(v) for k, v in timings.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=8, help="values per timed pass")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_cuda_path: no CUDA device", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="kvd-bench-cuda-") as tmp:
        server = Server(Path(tmp), persistence=False).start()
        try:
            client = KvdClient(ClientConfig(url=server.url, timeout_ms=60_000))
            rows, timings = run_bench(client, args.chunks, args.repeat)
            client.close()
        finally:
            server.stop()
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}, {server.kind}: {args.chunks} x 32 MiB a pass, median of {args.repeat}")
    print(f"{'path':58s} {'GB/s':>7s} {'x ceiling':>10s}")
    for r in rows:
        ratio = "" if r["x ceiling"] is None else f"{r['x ceiling']:.2f}"
        print(f"{r['path']:58s} {r['GB/s']:7.2f} {ratio:>10s}")
    for name, us in timings.items():
        print(f"{name}: {us:.0f} us")
    if args.json:
        out = {"gpu": gpu, "torch": torch.__version__, "rows": rows, "us": timings}
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
