"""Measure the connector's CUDA data path on a GPU: paged-KV gather/scatter, pinned staging, side streams.

Run on a machine with a CUDA GPU (CI never has one; nothing depends on this):

    python scripts/bench_cuda_path.py [--layers 32 --kv-heads 8 --head-dim 128 --block-size 16 --chunk 256]

The defaults are Llama-3.1-8B's KV shape in bf16: one 256-token chunk is 32 MiB, the value kvd stores per key.
It reports, for the same bytes:

* ceilings: one contiguous pinned->device and device->pinned copy (the PCIe/NVLink-C2C limit);
* save: gather a chunk's blocks from every layer's paged cache (``index_select`` on the GPU) into one pinned
  buffer with non-blocking copies on a side stream (what ``KvdConnector._gather`` does);
* load, as the connector does it since ``e5ff06b``: the received bytes are in a reused pinned buffer (the
  connector's ``LoadBuffers``), then per layer a non-blocking H2D on a side stream and ``index_copy_`` into the
  paged cache;
* load, as the connector did before: the bytes in pageable memory, ``pin_memory()`` (a copy) per layer, then the
  same H2D and scatter;
* load, staged: the received bytes in a reused pinned buffer, one H2D per chunk into a device buffer, then
  per-layer scatter on the GPU (the alternative to per-layer copies);
* end to end through a kvd daemon on loopback, if ``--kvd-port`` is given: gather + SET, and GET straight into a
  pinned buffer (recv_into) + H2D + scatter.

Each figure is GB/s of KV payload and a ratio to the matching ceiling. Correctness is checked: a chunk saved
and loaded back into other blocks must be bit-identical.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

import torch


def timed(fn, repeat: int) -> float:
    """Median seconds of ``fn`` (synchronised), after a warm-up."""
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


class Resp:
    """A minimal RESP client: SET from a buffer with sendmsg, GET with recv_into a caller's (pinned) buffer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _line(self) -> bytes:
        out = bytearray()
        while not out.endswith(b"\r\n"):
            out += self.sock.recv(1)
        return bytes(out)

    def set(self, key: bytes, value: memoryview) -> None:
        head = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value))
        self.sock.sendmsg([head, value, b"\r\n"])
        assert self._line() == b"+OK\r\n"

    def get_into(self, key: bytes, dst: memoryview) -> None:
        self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        head = self._line()
        assert head == b"$%d\r\n" % len(dst), head
        got = 0
        while got < len(dst):
            got += self.sock.recv_into(dst[got:])
        tail = b""
        while len(tail) < 2:
            tail += self.sock.recv(2 - len(tail))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--chunk", type=int, default=256, help="tokens per chunk (one kvd value)")
    p.add_argument("--blocks", type=int, default=4096, help="blocks per layer in the paged cache")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--kvd-port", type=int, default=0)
    a = p.parse_args()

    dev = torch.device("cuda")
    dtype = torch.bfloat16
    blocks_per_chunk = a.chunk // a.block_size
    # vLLM's CUDA flash-attention layout: (2, num_blocks, block_size, num_kv_heads, head_dim); blocks on dim 1.
    caches = [
        torch.randn(2, a.blocks, a.block_size, a.kv_heads, a.head_dim, device=dev, dtype=dtype) for _ in range(a.layers)
    ]
    per_layer = 2 * blocks_per_chunk * a.block_size * a.kv_heads * a.head_dim * 2  # bytes
    total = per_layer * a.layers
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"chunk: {a.chunk} tokens x {a.layers} layers = {total / 2**20:.1f} MiB per value")

    perm = torch.randperm(a.blocks, device=dev)
    src_ids, dst_ids = perm[:blocks_per_chunk], perm[blocks_per_chunk : 2 * blocks_per_chunk]  # disjoint
    side = torch.cuda.Stream()
    pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    device_flat = torch.empty(total, dtype=torch.uint8, device=dev)
    rows: list[tuple[str, float, float]] = []

    # ceilings
    h2d = timed(lambda: device_flat.copy_(pinned, non_blocking=True), a.repeat)
    d2h = timed(lambda: pinned.copy_(device_flat, non_blocking=True), a.repeat)
    rows.append(("ceiling H2D (pinned -> device, one copy)", total / h2d, 1.0))
    rows.append(("ceiling D2H (device -> pinned, one copy)", total / d2h, 1.0))

    def layer_view(buf: torch.Tensor, i: int) -> torch.Tensor:
        shape = (2, blocks_per_chunk, a.block_size, a.kv_heads, a.head_dim)
        return buf[i * per_layer : (i + 1) * per_layer].view(dtype).view(shape)

    def save() -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i, kv in enumerate(caches):
                layer_view(pinned, i).copy_(kv.index_select(1, src_ids), non_blocking=True)
        side.synchronize()

    t = timed(save, a.repeat)
    rows.append(("save: gather -> pinned, side stream", total / t, d2h / t))
    reference = pinned.clone()

    received = reference.numpy().tobytes()  # what a GET returns in pageable memory
    staging = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    staging.copy_(reference)  # as if received into the connector's pinned load buffer

    def load_connector() -> None:
        with torch.cuda.stream(side):
            for i, kv in enumerate(caches):
                staged = layer_view(staging, i).pin_memory().to(dev, non_blocking=True)  # pinned: no copy
                kv.index_copy_(1, dst_ids, staged)
        torch.cuda.current_stream().wait_stream(side)

    t = timed(load_connector, a.repeat)
    rows.append(("load: pinned load buffer, H2D + index_copy_ per layer", total / t, h2d / t))

    def load_pageable() -> None:
        src_all = torch.frombuffer(bytearray(received), dtype=torch.uint8)
        with torch.cuda.stream(side):
            for i, kv in enumerate(caches):
                staged = layer_view(src_all, i).pin_memory().to(dev, non_blocking=True)
                kv.index_copy_(1, dst_ids, staged)
        torch.cuda.current_stream().wait_stream(side)

    t = timed(load_pageable, a.repeat)
    rows.append(("load: pageable, pin_memory() per layer + H2D + index_copy_", total / t, h2d / t))

    def load_staged() -> None:
        staging.numpy()[:] = memoryview(received)  # the one CPU copy (a GET can recv_into staging instead)
        with torch.cuda.stream(side):
            device_flat.copy_(staging, non_blocking=True)
            for i, kv in enumerate(caches):
                kv.index_copy_(1, dst_ids, layer_view(device_flat, i))
        torch.cuda.current_stream().wait_stream(side)

    t = timed(load_staged, a.repeat)
    rows.append(("load: reused pinned staging, one H2D, GPU scatter", total / t, h2d / t))

    # correctness: what was loaded into dst blocks equals what was saved from src blocks
    for kv in caches:
        assert torch.equal(kv.index_select(1, dst_ids), kv.index_select(1, src_ids)), "round trip mismatch"

    if a.kvd_port:
        client = Resp(a.kvd_port)
        key = b"bench:chunk"
        view = memoryview(pinned.numpy()).cast("B")

        def e2e_save() -> None:
            save()
            client.set(key, view)

        t = timed(e2e_save, a.repeat)
        rows.append(("end to end save: gather + SET to kvd", total / t, d2h / t))
        stage_view = memoryview(staging.numpy()).cast("B")

        def e2e_load() -> None:
            client.get_into(key, stage_view)  # straight into pinned memory: no bounce buffer
            with torch.cuda.stream(side):
                device_flat.copy_(staging, non_blocking=True)
                for i, kv in enumerate(caches):
                    kv.index_copy_(1, dst_ids, layer_view(device_flat, i))
            torch.cuda.current_stream().wait_stream(side)

        t = timed(e2e_load, a.repeat)
        rows.append(("end to end load: GET recv_into pinned + H2D + scatter", total / t, h2d / t))
        for kv in caches:
            assert torch.equal(kv.index_select(1, dst_ids), kv.index_select(1, src_ids)), "kvd round trip mismatch"

    print(f"\n{'path':58s} {'GB/s':>8s} {'x ceiling':>10s}")
    for name, rate, ratio in rows:
        print(f"{name:58s} {rate / 1e9:8.2f} {ratio:10.2f}")


if __name__ == "__main__":
    main()
