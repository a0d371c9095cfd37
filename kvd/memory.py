"""Allocator and garbage-collector tuning for a process that holds a large, long-lived keyspace.

Allocator. kvd's objects are mostly multi-megabyte values.

glibc serves allocations above ``M_MMAP_THRESHOLD`` (dynamic, at most 32 MiB) with a fresh ``mmap`` and returns
them with ``munmap`` on free. For kvd that means every new 32 MiB value (each SET receives into a new
bytearray) page-faults 8192 fresh, zero-filled pages, and every overwritten one is handed back to the kernel
only to be asked for again. Measured on this machine (``python -m kvd.memory``): allocating and touching
32 MiB buffers runs at about 1.5 GB/s through mmap and about 10 GB/s when the heap reuses freed memory, so
the allocator, not the network, would cap large SETs.

kvd therefore raises the mmap threshold so values come from the heap and freed values are reused, and raises
the trim threshold so a burst of frees does not hand memory back that the next burst needs again. The cost:
RSS stays near its high-water mark instead of shrinking after deletes. The RAM tier's byte budget bounds that
high-water mark (``maxmemory`` plus buffers in flight), which is the trade a cache wants.

Collector. Every key is one tracked object (``Entry``), and CPython's full collection (generation 2) walks
every tracked object, to free reference cycles, each time the old generation has grown by a quarter. Its pause
grew with the keyspace: 2.4 s at 2.2 million keys, under ``redis-benchmark -t set -d 64 -P 16 -r 10000000``,
and it found nothing to free. kvd makes almost no cycles: with the collector off, a run of redis-benchmark's
whole suite, 40 000 connections, 226 compactions, errors and MULTI left 493 cyclic objects behind. So
``tune_collector`` freezes (``gc.freeze``, the permanent generation no collection looks at) whatever survives
a collection of the younger generations: the young ones still free the short-lived cycles of a request (an
exception's traceback), and no pause grows with the keyspace. The cost: a cycle among objects that lived
through a generation-1 collection is never freed (the 493 objects above, after a million requests). Measured
(docs/operations.md, "Pauses"; everysec, 64 MiB segments, 4 million SETs of mostly new keys), before/after
alternated twice: 59.1-62.9k -> 82.4-84.4k req/s, p99 17.9-18.8 -> 16.3-18.0 ms, longest request 3.0 -> 0.8 s,
kvd CPU 64-68 -> 47-48 s.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import resource
from typing import Any

log = logging.getLogger("kvd.memory")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  # values up to 1 GiB come from the heap
TRIM_THRESHOLD = 256 << 20  # keep up to 256 MiB of freed heap for reuse


def tune_allocator() -> bool:
    """Apply the thresholds above; False (and nothing changed) where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        log.debug("mallopt refused the thresholds; using the allocator's defaults")
    return ok


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]  # fmt: skip


def rss_bytes() -> int:
    """The process's resident memory (INFO's used_memory_rss)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def total_system_memory() -> int:
    """The machine's RAM (``MemTotal``; INFO's total_system_memory), 0 if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 0


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def allocator_stats() -> dict[str, int] | None:
    """glibc's ``mallinfo2()``: heap bytes from the kernel (``arena``), in ``mmap`` blocks (``hblkhd``), in use
    (``uordblks``), free inside the heap (``fordblks``) and releasable at its top (``keepcost``). None where
    the C library has no ``mallinfo2`` (not glibc, or glibc before 2.33)."""
    libc = _libc()
    fn = getattr(libc, "mallinfo2", None) if libc is not None else None
    if fn is None:
        return None
    fn.restype = _MallInfo2
    info = fn()
    return {name: int(getattr(info, name)) for name, _ in _MallInfo2._fields_}


def release_free_memory() -> bool:
    """glibc's ``malloc_trim(0)``: give the heap's free pages back to the kernel (the trim threshold above keeps
    up to 256 MiB of them otherwise). True if memory was released."""
    libc = _libc()
    fn = getattr(libc, "malloc_trim", None) if libc is not None else None
    return bool(fn(0)) if fn is not None else False


def tune_collector() -> None:
    """Freeze what survives the young generations (see "Collector" above); idempotent."""
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)
    gc.freeze()  # what start-up built: modules, settings, the recovered keyspace


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] >= 1:
        gc.freeze()  # O(1): splices the generations' lists onto the permanent one


def _measure(size: int = 32 << 20, rounds: int = 40) -> float:
    import time

    live: list[bytearray] = []
    start = time.perf_counter()
    for _ in range(rounds):
        buf = bytearray(size)
        buf[::4096] = b"\x01" * (size // 4096)
        live.append(buf)
        if len(live) > 4:
            live.pop(0)
    return rounds * size / (time.perf_counter() - start) / 1e9


if __name__ == "__main__":
    print(f"default allocator: {_measure():.2f} GB/s allocating+touching 32 MiB buffers")
    print(f"tuned ({tune_allocator()}): {_measure():.2f} GB/s")
