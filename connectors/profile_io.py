"""Profile the connector's save and load paths on CPU, stage by stage, against a plain memcpy of the same bytes.

    .cache/vllm-0.32.0/bin/python -m connectors.profile_io [--url redis://...] [--layers 16] [--chunks 16]

Without ``--url`` it starts its own kvd (or redis-server, see connectors.testing) with persistence off, so the
numbers are the RAM tier. KV tensors have the CPU backend's layout ``(num_blocks, kv_heads, block_size,
2*head_size)``; block ids are scattered, as in a busy engine. Stages timed, each over the same chunks:

* memcpy: ``torch.Tensor.copy_`` of one contiguous buffer of a chunk's size (the floor for any copy);
* gather: the blocks of a chunk, all layers, into one value buffer (``index_select(out=)``): the only copy the
  forward thread pays for a save. The buffers are reused from pass to pass, as the connector reuses those of sent
  saves; ``gather, new buffers`` gathers into a fresh tensor per chunk, for comparison;
* seal: header + xxh3 checksum of the value (save thread);
* set: pipelined SET (with the EXISTS pre-check) of the values (save thread, network); ``set, shared memory``
  is ``KVD.SETFROM`` of the same values from the slots of a ``SharedBuffers`` file (kvd copies them out itself:
  the connector's way when kvd is on its host; its gather writes into those slots instead of its own buffers);
* get: MGET of the values into load buffers reused from pass to pass (``LoadBuffers``, as the connector does
  through a socket); ``get, new buffers`` is the same MGET received into a fresh bytearray per value, for
  comparison; ``get, shared memory`` is ``KVD.GETINTO`` into ``SharedBuffers`` (kvd copies the values into
  this process's /dev/shm file: the connector's way when kvd is on its host, ``connectors/shm.py``);
* decode: header checks + checksum;
* scatter: copy into the KV tensors (``index_copy_``).

Gather and scatter are :class:`connectors.paged_kv.PagedKV`'s, the connector's own code.

MB/s are MiB of KV per second.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from connectors import codec, hashing
from connectors.client import ClientConfig, KvdClient, LoadBuffers
from connectors.paged_kv import PagedKV
from connectors.shm import SharedBuffers
from connectors.testing import Server


def _mbps(nbytes: int, seconds: float) -> float:
    return nbytes / 2**20 / seconds if seconds > 0 else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    bpc = args.chunk_size // args.block_size
    num_blocks = args.chunks * bpc * 2 + 7
    layers = [
        torch.randn(num_blocks, args.kv_heads, args.block_size, 2 * args.head_size).to(dtype)
        for _ in range(args.layers)
    ]
    perm = torch.randperm(num_blocks).tolist()
    chunk_blocks = [perm[i * bpc : (i + 1) * bpc] for i in range(args.chunks)]
    kv = PagedKV(
        {f"layer{i}": t for i, t in enumerate(layers)},
        num_blocks=num_blocks,
        block_size=args.block_size,
        blocks_per_chunk=bpc,
    )
    payload = kv.payload_bytes
    value_shape = kv.value_shape
    hdr = codec.header_size(len(value_shape))
    total_kv = payload * args.chunks
    print(
        f"{args.layers} layers, chunk {args.chunk_size} tokens = {payload / 2**20:.2f} MiB per value, "
        f"{args.chunks} chunks = {total_kv / 2**20:.0f} MiB per pass, {torch.get_num_threads()} torch threads"
    )

    srv = None
    url = args.url
    if url is None:
        tmp = tempfile.mkdtemp(prefix="kvd-profile-")
        srv = Server(Path(tmp), persistence=False, maxmemory="4gb").start()
        url = srv.url
        print(f"server: {srv.kind} at {url} (persistence off)")
    client = KvdClient(ClientConfig(url=url, timeout_ms=60_000))
    layout_fp = b"P" * 16
    hashes = hashing.chunk_hashes(list(range(args.chunk_size * args.chunks)), args.chunk_size)
    keys = hashing.make_keys("profile", "0" * 16, hashes)

    best: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], None]) -> None:
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best[name] = min(best.get(name, dt), dt)

    src = torch.empty(payload, dtype=torch.uint8)
    src.random_(0, 255)
    dst = torch.empty(payload, dtype=torch.uint8)
    bufs = [torch.empty(hdr + payload, dtype=torch.uint8) for _ in range(args.chunks)]
    views = [memoryview(b.numpy()).cast("B") for b in bufs]
    got: list[memoryview | None] = []
    load_buffers = LoadBuffers(lambda n: (b := torch.empty(n, dtype=torch.uint8), memoryview(b.numpy()).cast("B")))
    shared = SharedBuffers(hdr + payload, keep_bytes=args.chunks * (hdr + payload), wrap=kv.host_view)
    outgoing = SharedBuffers(hdr + payload, keep_bytes=args.chunks * (hdr + payload), wrap=kv.host_view)
    assert outgoing.ensure(args.chunks), "no room in /dev/shm for the save slots"
    slots = [(key, c, hdr + payload) for c, key in enumerate(keys)]
    payloads: list[memoryview] = []
    for _ in range(args.repeat):
        client.raw().delete(*keys)

        def memcpy() -> None:
            for _ in range(args.chunks):
                dst.copy_(src)

        def gather_into(targets: list[torch.Tensor]) -> None:
            for c in range(args.chunks):
                kv.gather(chunk_blocks[c], targets[c][hdr:])

        def gather() -> None:
            gather_into(bufs)

        def gather_new() -> None:
            gather_into([torch.empty(hdr + payload, dtype=torch.uint8) for _ in range(args.chunks)])

        def seal() -> None:
            for c in range(args.chunks):
                codec.seal(views[c], dtype=args.dtype, shape=value_shape, layout_fp=layout_fp, chunk_hash=hashes[c])

        def put() -> None:
            written, _ = client.put_many(list(zip(keys, views, strict=True)))
            assert written == args.chunks, written

        def put_shared() -> None:
            written, _ = client.put_shared(slots, outgoing)
            assert written == args.chunks, written

        def get() -> None:
            got[:] = client.get_many(keys, hdr + payload, into=load_buffers)

        def get_new() -> None:
            client.get_many(keys, hdr + payload)

        def get_shared() -> None:
            values = client.get_many(keys, hdr + payload, into=shared)
            assert all(v is not None for v in values), "KVD.GETINTO lost a value"

        def decode() -> None:
            payloads[:] = [
                codec.decode(
                    v,
                    dtype=args.dtype,
                    shape=value_shape,
                    itemsize=layers[0].element_size(),
                    layout_fp=layout_fp,
                    chunk_hash=h,
                )
                for v, h in zip(got, hashes, strict=True)
            ]

        def scatter() -> None:
            for c in range(args.chunks):
                kv.scatter(torch.frombuffer(payloads[c], dtype=torch.uint8), chunk_blocks[c])

        timed("memcpy", memcpy)
        timed("gather, new buffers", gather_new)
        timed("gather", gather)
        timed("seal", seal)
        timed("set", put)
        client.raw().delete(*keys)
        for c in range(args.chunks):
            outgoing.view(c, hdr + payload)[:] = views[c]  # where the gather would have put them
        timed("set, shared memory", put_shared)
        timed("get, new buffers", get_new)
        timed("get, shared memory", get_shared)
        timed("get", get)
        timed("decode", decode)
        timed("scatter", scatter)

    save = best["gather"] + best["seal"] + best["set"]
    save_shared = best["gather"] + best["seal"] + best["set, shared memory"]
    load = best["get"] + best["decode"] + best["scatter"]
    load_shared = best["get, shared memory"] + best["decode"] + best["scatter"]
    print(f"{'stage':<32}{'ms/pass':>10}{'MiB/s':>10}{'x memcpy':>10}")
    rows = [
        (k, best[k])
        for k in (
            "memcpy",
            "gather, new buffers",
            "gather",
            "seal",
            "set",
            "set, shared memory",
            "get, new buffers",
            "get",
            "get, shared memory",
            "decode",
            "scatter",
        )
    ]
    rows += [("save total (gather+seal+set)", save), ("load total (get+decode+scatter)", load)]
    rows += [("save total, shared memory", save_shared), ("load total, shared memory", load_shared)]
    for name, dt in rows:
        print(f"{name:<32}{dt * 1e3:>10.1f}{_mbps(total_kv, dt):>10.0f}{dt / best['memcpy']:>10.1f}")
    print(f"get, shared memory: {'KVD.GETINTO' if client._has_getinto else 'MGET (the server refused KVD.GETINTO)'}")
    print(f"set, shared memory: {'KVD.SETFROM' if client._has_setfrom else 'SET (the server refused KVD.SETFROM)'}")
    shared.close()
    outgoing.close()
    client.close()
    if srv is not None:
        srv.stop()


if __name__ == "__main__":
    main()
