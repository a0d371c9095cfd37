"""Check the connector's data path (:class:`connectors.paged_kv.PagedKV`) on this machine's CPU and GPU.

    python -m connectors.paged_kv_check [--device cpu|cuda|all] [--json FILE]

Runs where torch is (the vLLM environment in CI, where ``tests/vllm/test_paged_kv.py`` runs it on the CPU; the
image of a lent GPU machine). It starts a real kvd (see :mod:`connectors.testing`) for the cases that load
through the network, exactly as the connector does: ``LoadBuffers`` of ``PagedKV.host_buffer`` memory,
``begin_load``, ``trim``, ``get_many``, ``scatter`` per value, ``end_load``.

Cases (each on every device asked for; the stream-order cases need CUDA):

* ``round trip <layout> skip=<k>``: gather a chunk from scattered blocks, compare the bytes with an independent
  reference, scatter them into other blocks leaving the first ``k`` alone; every other block is unchanged. On
  CUDA the copies of a whole chunk replay CUDA graphs (which the case checks were captured), and each case runs
  again ``without graphs``, every copy launched on its own.
  Layouts: CUDA flash-attention ``(2, blocks, block, heads, head)`` bf16, the same as a permuted view of an HND
  cache (not contiguous), the CPU backend's ``(blocks, heads, block, 2*head)`` fp32, one vLLM block as two
  tensor blocks, rows no wider integer divides (copied as fp16, not as ``as_words``' integers), and layers of
  mixed dtypes.
* ``gather waits for the forward``: the compute stream is busy (``torch.cuda._sleep``), then rewrites the blocks;
  the gather must copy the rewritten bytes.
* ``load waits for the forward``: the compute stream is busy, then poisons the destination blocks; the load
  must land after the poison.
* ``forward waits for the load``: the load stream is busy before the load's copies; a read queued on the compute
  stream right after ``end_load`` must see the loaded bytes.
* ``next forward waits for the save's reads``: the save stream is busy before the gather; the next step's forward
  (a write queued on the compute stream right after ``gather``) must not land before the blocks were read.
* ``a load does not queue behind saves``: with the save stream busy, a load's copies complete first.
* ``the host never waits for the GPU``: with the compute stream busy, a save and a load return before it is done
  (the forward thread queues copies; it never waits for them).
* ``a save's staging is reused after its copy out``: with the copies to the host held back, three saves in a row
  (two staging buffers taking turns) each land their own chunk.
* ``a load's staging is reused after its scatters``: with the scatters held back, three values in a row each land
  in their own blocks.
* ``receive buffers outlive their copies``: two loads in a row through kvd into the same pinned buffers while
  the first one's copies are held back; the second receive must not overwrite bytes the first has not copied.
  (On the CPU, where a copy is done when ``scatter`` returns, it checks two loads in a row through kvd.)
* ``load longer than the kept buffers``: a load of more values than ``keep_bytes`` covers; every value stays in
  its buffer until copied.
* ``page-locked buffers unlock while mapped`` (CPU run only): the lifetime of the host buffers that CUDA locks
  in place, with a stand-in for the driver's lock and unlock.

``scripts/bench_cuda_path.py`` times the same path on a GPU. Exit status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import random
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from connectors.client import ClientConfig, KvdClient, LoadBuffers
from connectors.paged_kv import PagedKV, locked_pages
from connectors.testing import Server

_BUSY_CYCLES = 200_000_000  # ~0.1 s of one GPU spin: long enough that a missing stream wait shows


# ---------------------------------------------------------------------------------------------------------------
# Layouts and references
# ---------------------------------------------------------------------------------------------------------------


def _layouts(device: torch.device) -> dict[str, tuple[dict[str, torch.Tensor], int, int]]:
    """name -> (KV tensors, vLLM block count, block size). Random contents: zeros would hide unwritten bytes."""
    g = torch.Generator(device="cpu").manual_seed(1234)

    def rnd(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    nb, bs = 37, 16
    return {
        "flash bf16": ({f"l{i}": rnd(2, nb, bs, 2, 64, dtype=torch.bfloat16) for i in range(3)}, nb, bs),
        "cpu fp32": ({f"l{i}": rnd(nb, 2, bs, 128, dtype=torch.float32) for i in range(3)}, nb, bs),
        # vLLM's HND cache layout: stored (2, blocks, heads, block, head), handed over as a permuted view.
        "flash HND view": (
            {f"l{i}": rnd(2, nb, 2, bs, 64, dtype=torch.bfloat16).permute(0, 1, 3, 2, 4) for i in range(2)},
            nb,
            bs,
        ),
        "2 tensor blocks per block": (
            {f"l{i}": rnd(2, nb * 2, bs // 2, 2, 32, dtype=torch.float16) for i in range(2)},
            nb,
            bs,
        ),
        # Rows of 6 bytes: no wider integer divides them, so the copies move the fp16 elements themselves.
        "odd rows fp16": ({f"l{i}": rnd(2, nb, bs, 1, 3, dtype=torch.float16) for i in range(2)}, nb, bs),
        "mixed dtypes": (
            {"a": rnd(2, nb, bs, 2, 64, dtype=torch.bfloat16), "b": rnd(2, nb, bs, 1, 32, dtype=torch.float32)},
            nb,
            bs,
        ),
    }


def _tensor_block_ids(block_ids: list[int], ratio: int) -> list[int]:
    return [b * ratio + k for b in block_ids for k in range(ratio)]


def _reference(kv: PagedKV, block_ids: list[int]) -> torch.Tensor:
    """A chunk's bytes built independently of PagedKV: each layer's blocks, one after the other, on the CPU."""
    parts = []
    for layer in kv.layers:
        t = layer.tensor.cpu()
        picked = torch.stack(
            [t.select(layer.dim, b) for b in _tensor_block_ids(block_ids, layer.ratio)], dim=layer.dim
        ).contiguous()
        parts.append(picked.view(-1).view(torch.uint8))
    return torch.cat(parts)


def blocks_of(kv: PagedKV, block_ids: list[int]) -> list[torch.Tensor]:
    """The bytes of ``block_ids`` in every layer (CPU copies)."""
    return [
        layer.tensor.index_select(
            layer.dim, torch.tensor(_tensor_block_ids(block_ids, layer.ratio), device=kv.device)
        ).cpu()
        for layer in kv.layers
    ]


def _flat(parts: list[torch.Tensor]) -> torch.Tensor:
    """The bytes of ``parts``, one after the other, as a value holds them (on the CPU)."""
    return torch.cat([p.cpu().contiguous().view(-1).view(torch.uint8) for p in parts])


def _pick(n_blocks: int, count: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """Two disjoint lists of ``count`` block ids, in scattered order."""
    ids = rng.sample(range(n_blocks), 2 * count)
    return ids[:count], ids[count:]


def bytes_of(t: torch.Tensor) -> memoryview:
    return memoryview(t.numpy()).cast("B")


def _sync(kv: PagedKV) -> None:
    if kv.cuda:
        torch.cuda.synchronize(kv.device)


def _host_like(kv: PagedKV, data: torch.Tensor) -> torch.Tensor:
    buf = kv.host_buffer(data.numel())
    buf.copy_(data)
    return buf


# ---------------------------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------------------------


def check_round_trip(device: torch.device, layout: str, skip: int, graphs: bool = True) -> None:
    caches, nb, bs = _layouts(device)[layout]
    bpc = 4
    registered = [t.cpu() for t in caches.values()]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=bpc, cuda_graphs=graphs)
    if kv.cuda:
        for direction, captured in (("save", kv._save_graphs), ("load", kv._load_graphs)):
            assert (captured is not None) == graphs, f"{direction}: CUDA graphs captured {captured is not None}"
    expect_launches = (
        "on the CPU"
        if not kv.cuda
        else ("CUDA graphs for saves and loads" if graphs else "one kernel per layer, no CUDA graphs")
    )
    assert kv.launches == expect_launches, f"launches says {kv.launches!r}, not {expect_launches!r}"
    for layer, old in zip(kv.layers, registered, strict=True):  # the capture's warm-up writes blocks back
        assert torch.equal(layer.tensor.cpu(), old), f"layer {layer.name} changed when it was registered"
    src, dst = _pick(nb, bpc, random.Random(f"{layout}/{skip}"))
    buf = kv.host_buffer(kv.payload_bytes)
    buf.fill_(0xA5)  # poisoned: an unwritten byte shows
    event = kv.gather(src, buf)
    if event is not None:
        event.synchronize()
    assert torch.equal(buf, _reference(kv, src)), "gathered bytes differ from the reference"
    before = [layer.tensor.cpu() for layer in kv.layers]
    kv.begin_load()
    kv.scatter(buf, dst, skip)
    kv.end_load()
    _sync(kv)
    for layer, old in zip(kv.layers, before, strict=True):
        now = layer.tensor.cpu()
        r = layer.ratio
        expect = old.clone()
        for j, (s, d) in enumerate(zip(src, dst, strict=True)):
            if j < skip:
                continue
            for k in range(r):
                expect.select(layer.dim, d * r + k).copy_(old.select(layer.dim, s * r + k))
        assert torch.equal(now, expect), f"layer {layer.name}: blocks after the load differ from what was saved"


def check_gather_waits_for_forward(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    src, _ = _pick(nb, 4, random.Random(7))
    idx = torch.tensor(src, device=device)
    fresh = [torch.randn_like(layer.tensor.index_select(1, idx)) for layer in kv.layers]
    torch.cuda.synchronize(device)
    torch.cuda._sleep(_BUSY_CYCLES)  # the forward is still running...
    for layer, new in zip(kv.layers, fresh, strict=True):
        layer.tensor.index_copy_(1, idx, new)  # ...and only then writes the blocks the save reads
    buf = kv.host_buffer(kv.payload_bytes)
    kv.gather(src, buf).synchronize()
    expect = _flat(fresh)
    assert torch.equal(buf, expect), "the gather copied the blocks before the forward had written them"


def check_forward_waits_for_gather(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    src, other = _pick(nb, 4, random.Random(13))
    buf = kv.host_buffer(kv.payload_bytes)
    expect = _flat(blocks_of(kv, src))
    idx, other_idx = (torch.tensor(ids, device=device) for ids in (src, other))
    kv.gather(src, buf).synchronize()  # warm-up, and index_fill_'s kernel loaded on other blocks
    for layer in kv.layers:
        layer.tensor.index_fill_(1, other_idx, float("nan"))
    torch.cuda.synchronize(device)
    with torch.cuda.stream(kv._save_stream):
        torch.cuda._sleep(_BUSY_CYCLES)  # the save's selects are slow to start
    done = kv.gather(src, buf)
    for layer in kv.layers:  # the next step's forward writes the blocks, now another request's
        layer.tensor.index_fill_(1, idx, float("nan"))
    done.synchronize()
    assert torch.equal(buf, expect), "the next forward overwrote the blocks before the save had read them"


def check_load_skips_queued_saves(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    src, dst = _pick(nb, 4, random.Random(14))
    buf = kv.host_buffer(kv.payload_bytes)
    kv.gather(src, buf).synchronize()  # warm-up
    payload = _host_like(kv, buf)
    torch.cuda.synchronize(device)
    kv.gather(src, buf)  # the last step's save...
    for stream in (kv._save_stream, kv._save_copy_stream):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(_BUSY_CYCLES)  # ...whose selects and copies to the host are still running
    kv.begin_load()
    kv.scatter(payload, dst)
    kv.end_load()
    kv.begin_load()  # waits for this load's copies
    busy = not kv._save_stream.query() and not kv._save_copy_stream.query()
    assert busy, "the load's copies waited for the saves queued before them"
    torch.cuda.synchronize(device)


def check_load_waits_for_forward(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    _, dst = _pick(nb, 4, random.Random(8))
    payload = _host_like(kv, torch.randint(0, 256, (kv.payload_bytes,), dtype=torch.uint8))
    idx = torch.tensor(dst, device=device)
    # The first pass warms up: the allocators then hold what the load needs, and index_fill_'s kernel is loaded.
    # A first allocation or the first launch of a kernel can make the host wait for the GPU (measured on an
    # H200), which would order the load after the poison with or without the stream wait under test.
    for busy in (False, True):
        torch.cuda.synchronize(device)
        if busy:
            torch.cuda._sleep(_BUSY_CYCLES)  # a finished request's forward, still queued, last touches these blocks
        for layer in kv.layers:
            layer.tensor.index_fill_(1, idx, float("nan"))
        kv.begin_load()
        kv.scatter(payload, dst)
        kv.end_load()
    torch.cuda.synchronize(device)
    got = _flat(blocks_of(kv, dst))
    assert torch.equal(got, payload.cpu()), "the load landed before the forward queued ahead of it"


def check_forward_waits_for_load(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    _, dst = _pick(nb, 4, random.Random(9))
    payload = _host_like(kv, torch.randint(0, 256, (kv.payload_bytes,), dtype=torch.uint8))
    idx = torch.tensor(dst, device=device)
    torch.cuda.synchronize(device)
    kv.begin_load()
    with torch.cuda.stream(kv._load_stream):
        torch.cuda._sleep(_BUSY_CYCLES)  # the load's copies are slow to start
    kv.scatter(payload, dst)
    kv.end_load()
    read = [layer.tensor.index_select(1, idx) for layer in kv.layers]  # the forward, queued at once
    torch.cuda.synchronize(device)
    got = _flat(read)
    assert torch.equal(got, payload.cpu()), "the forward read the blocks before the load had written them"


def check_save_staging_turns(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    ids = random.Random(15).sample(range(nb), 12)
    chunks = [ids[i : i + 4] for i in range(0, 12, 4)]
    bufs = [kv.host_buffer(kv.payload_bytes) for _ in chunks]
    for c, b in zip(chunks, bufs, strict=True):
        kv.gather(c, b).synchronize()  # warm-up: every staging buffer used once
    for b in bufs:
        b.fill_(0xA5)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(kv._save_copy_stream):
        torch.cuda._sleep(_BUSY_CYCLES)  # the copies to the host are slow...
    events = [kv.gather(c, b) for c, b in zip(chunks, bufs, strict=True)]  # ...the third save reuses the first's
    for e in events:
        e.synchronize()
    for i, (c, b) in enumerate(zip(chunks, bufs, strict=True)):
        assert torch.equal(b, _reference(kv, c)), f"save {i}'s staging was selected into before it was copied out"


def check_load_staging_turns(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    ids = random.Random(16).sample(range(nb), 12)
    dsts = [ids[i : i + 4] for i in range(0, 12, 4)]
    payloads = [_host_like(kv, torch.randint(0, 256, (kv.payload_bytes,), dtype=torch.uint8)) for _ in range(len(dsts))]
    for busy in (False, True):  # the first pass warms up: every staging buffer used once
        torch.cuda.synchronize(device)
        kv.begin_load()
        if busy:
            with torch.cuda.stream(kv._load_stream):
                torch.cuda._sleep(_BUSY_CYCLES)  # the scatters are slow; the third value reuses the first's staging
        for payload, dst in zip(payloads, dsts, strict=True):
            kv.scatter(payload, dst)
        kv.end_load()
    torch.cuda.synchronize(device)
    for i, (payload, dst) in enumerate(zip(payloads, dsts, strict=True)):
        got = _flat(blocks_of(kv, dst))
        assert torch.equal(got, payload.cpu()), f"value {i}'s staging was copied into before it was scattered"


def check_host_never_waits(device: torch.device) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    src, dst = _pick(nb, 4, random.Random(12))
    buf = kv.host_buffer(kv.payload_bytes)
    kv.gather(src, buf).synchronize()  # warm: the allocators have what the timed calls need
    compute = torch.cuda.current_stream(device)
    torch.cuda.synchronize(device)
    torch.cuda._sleep(_BUSY_CYCLES)  # the forward
    event = kv.gather(src, buf)
    assert not compute.query(), "the save waited for the forward to finish (the forward thread would block)"
    event.synchronize()
    torch.cuda._sleep(_BUSY_CYCLES)
    kv.begin_load()
    kv.scatter(buf, dst)
    kv.end_load()
    assert not compute.query(), "the load waited on the host for the GPU"
    torch.cuda.synchronize(device)


def load_through(kv: PagedKV, client: KvdClient, buffers: LoadBuffers, keys: list[str], dsts: list[list[int]]) -> None:
    """What ``KvdConnector.start_load_kv`` does, without vLLM: receive into the kept buffers, scatter each."""
    kv.begin_load()
    buffers.trim()
    values = client.get_many(keys, kv.payload_bytes, into=buffers)
    for i, (value, dst) in enumerate(zip(values, dsts, strict=True)):
        assert value is not None and len(value) == kv.payload_bytes, f"value {i} missing or short"
        kv.scatter(buffers.backing(i)[: kv.payload_bytes], dst)
    kv.end_load()


def load_buffers(kv: PagedKV, keep_bytes: int) -> LoadBuffers:
    def allocate(n: int) -> tuple[torch.Tensor, memoryview]:
        t = kv.host_buffer(n)
        return t, memoryview(t.numpy()).cast("B")

    return LoadBuffers(allocate, keep_bytes=keep_bytes)


def check_receive_buffers_outlive_copies(device: torch.device, client: KvdClient) -> None:
    caches, nb, bs = _layouts(device)["flash bf16"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=4)
    rng = random.Random(10)
    first, second = _pick(nb, 4, rng)
    a, b = (torch.randint(0, 256, (kv.payload_bytes,), dtype=torch.uint8) for _ in range(2))
    assert client.put_many([("chk:a", bytes_of(a)), ("chk:b", bytes_of(b))], skip_existing=False)[0] == 2
    buffers = load_buffers(kv, keep_bytes=2**30)
    if kv.cuda:
        torch.cuda.synchronize(device)
        with torch.cuda.stream(kv._load_copy_stream):
            torch.cuda._sleep(_BUSY_CYCLES)  # holds back the first load's copies out of the receive buffer
    load_through(kv, client, buffers, ["chk:a"], [first])
    load_through(kv, client, buffers, ["chk:b"], [second])  # received into the buffer the first load copies from
    _sync(kv)
    for ids, data, name in ((first, a, "first"), (second, b, "second")):
        got = _flat(blocks_of(kv, ids))
        assert torch.equal(got, data), f"the {name} load's blocks hold other bytes"


def check_load_longer_than_kept_buffers(device: torch.device, client: KvdClient) -> None:
    caches, nb, bs = _layouts(device)["cpu fp32"]
    kv = PagedKV(caches, num_blocks=nb, block_size=bs, blocks_per_chunk=2)
    rng = random.Random(11)
    ids = rng.sample(range(nb), 8)
    dsts = [ids[i : i + 2] for i in range(0, 8, 2)]
    data = [torch.randint(0, 256, (kv.payload_bytes,), dtype=torch.uint8) for _ in dsts]
    keys = [f"chk:long{i}" for i in range(len(dsts))]
    items = [(k, bytes_of(d)) for k, d in zip(keys, data, strict=True)]
    assert client.put_many(items, skip_existing=False)[0] == 4
    buffers = load_buffers(kv, keep_bytes=kv.payload_bytes)  # keeps one value's buffer between loads; the load has 4
    for _ in range(2):
        load_through(kv, client, buffers, keys, dsts)
        _sync(kv)
        for dst, d in zip(dsts, data, strict=True):
            got = _flat(blocks_of(kv, dst))
            assert torch.equal(got, d), "a value past the kept buffers was let go before it was copied"
    buffers.trim()
    assert buffers.nbytes <= kv.payload_bytes + 64


def _mapped(address: int) -> bool:
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return True
    return False


def check_locked_pages_unlock_while_mapped() -> None:
    """``locked_pages``' lifetime with ``lock``/``unlock`` that record instead of calling the driver (the same
    function ``_page_locked`` hands ``cudaHostRegister``/``cudaHostUnregister``): unlocked once, after the last
    tensor over the pages is gone, while the pages are still mapped; unmapped after that."""
    events: list[tuple[str, int, bool]] = []

    def lock(ptr: int, length: int) -> bool:
        events.append(("lock", length, _mapped(ptr)))
        return True

    def unlock(ptr: int) -> None:
        events.append(("unlock", ptr, _mapped(ptr)))

    buf = locked_pages(5000, lock, unlock)
    assert buf is not None and buf.numel() == 5000 and not bool(buf.any()), "not 5000 zeroed bytes"
    ptr = buf.data_ptr()
    assert events == [("lock", -(-5000 // mmap.PAGESIZE) * mmap.PAGESIZE, True)], events  # whole pages
    part = buf[100:200]
    del buf
    gc.collect()
    assert len(events) == 1, "unlocked while a tensor still used the pages"
    part.fill_(7)
    del part
    gc.collect()
    assert events[1:] == [("unlock", ptr, True)], f"unlock ran {events[1:]} (False: after the pages were unmapped)"
    assert not _mapped(ptr), "the pages stayed mapped after the last tensor and the unlock"
    assert locked_pages(10, lambda ptr, n: False, lambda ptr: None) is None, "a refused lock must give None"


_CUDA_CASES: list[tuple[str, Callable[[torch.device], None]]] = [
    ("gather waits for the forward", check_gather_waits_for_forward),
    ("load waits for the forward", check_load_waits_for_forward),
    ("forward waits for the load", check_forward_waits_for_load),
    ("next forward waits for the save's reads", check_forward_waits_for_gather),
    ("a load does not queue behind saves", check_load_skips_queued_saves),
    ("the host never waits for the GPU", check_host_never_waits),
    ("a save's staging is reused after its copy out", check_save_staging_turns),
    ("a load's staging is reused after its scatters", check_load_staging_turns),
]
_NETWORK_CASES: list[tuple[str, Callable[[torch.device, KvdClient], None]]] = [
    ("receive buffers outlive their copies", check_receive_buffers_outlive_copies),
    ("load longer than the kept buffers", check_load_longer_than_kept_buffers),
]


def run_checks(devices: list[torch.device], client: KvdClient) -> list[dict[str, Any]]:
    results = []
    for device in devices:
        cases: list[tuple[str, Callable[[], None]]] = [
            (f"round trip {layout} skip={skip}", partial(check_round_trip, device, layout, skip))
            for layout in _layouts(torch.device("cpu"))
            for skip in (0, 1)
        ]
        if device.type == "cpu":  # host memory: the same on every machine
            cases.append(("page-locked buffers unlock while mapped", check_locked_pages_unlock_while_mapped))
        if device.type == "cuda":
            cases += [
                (
                    f"round trip {layout} skip={skip} without graphs",
                    partial(check_round_trip, device, layout, skip, False),
                )
                for layout in _layouts(torch.device("cpu"))
                for skip in (0, 1)
            ]
            cases += [(name, partial(fn, device)) for name, fn in _CUDA_CASES]
        cases += [(name, partial(fn, device, client)) for name, fn in _NETWORK_CASES]
        for name, fn in cases:
            try:
                fn()
                results.append({"device": device.type, "case": name, "ok": True})
            except Exception as exc:  # every failure is reported, then the exit status says it
                results.append(
                    {"device": device.type, "case": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                )
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)

    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print("no CUDA device", file=sys.stderr)
        return 1
    devices = [torch.device("cpu")] if args.device in ("cpu", "all") else []
    if args.device in ("cuda", "all") and cuda:
        devices.append(torch.device("cuda"))
    with tempfile.TemporaryDirectory(prefix="kvd-paged-kv-") as tmp:
        server = Server(Path(tmp), persistence=False).start()
        try:
            client = KvdClient(ClientConfig(url=server.url, timeout_ms=60_000))
            checks = run_checks(devices, client)
            client.close()
        finally:
            server.stop()
    for r in checks:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['device']:4s} {r['case']}" + ("" if r["ok"] else f": {r['error']}"))
    if args.json:
        out = {"torch": torch.__version__, "server": server.kind, "checks": checks}
        if cuda:
            out["gpu"] = torch.cuda.get_device_name()
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if all(r["ok"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
