"""Recycling of large value buffers: a SET reuses the memory of a value that was just overwritten or evicted.

Receiving a 4 MiB value into a fresh ``bytearray(n)`` costs a zero-fill (CPython always clears it) before the
kernel copies the bytes in; for a newly mapped buffer it also costs a page fault per 4 KiB. KV-cache chunks of
one deployment all have the same size, and a full cache replaces values all the time (overwrites, evictions
from RAM), so the buffer a new value needs was very often freed a moment before. The keyspace hands dropped
values to this pool; the parser takes an exact-size buffer from it and receives into it, skipping both costs.

A buffer is taken in only if nothing else can still see it: CPython's reference count must show that the
caller's variable is the last reference (no reply view in a transport, no pending disk write, no in-flight
read holds it). The pool is bounded in bytes and keeps at most a few buffers per size; it never holds more than
``max_bytes`` of memory that the RAM tier has already stopped counting.

A pool miss allocates with ``uninitialized()`` (``kvd/buffers.py``): a bytearray that is not cleared first, for
memory the kernel is about to overwrite anyway (zeroing 1 MiB measured 17 us, the uninitialised allocation 1 us).

Complexity: take and give are O(1).
"""

from __future__ import annotations

import sys

MIN_SIZE = 32 * 1024  # the parser receives values of this size and up in place
_OWNER_REFS = 3  # the caller's variable, give()'s parameter, getrefcount()'s argument
_EXACT = sys.getsizeof(bytearray(1)) - 1  # getsizeof of a bytearray allocated for exactly its length, less it


class BufferPool:
    __slots__ = ("_free", "held", "max_bytes", "per_size", "recycled", "reused")

    def __init__(self, max_bytes: int = 256 << 20, per_size: int = 8) -> None:
        self.max_bytes = max_bytes
        self.per_size = per_size
        self._free: dict[int, list[bytearray]] = {}
        self.held = 0
        self.recycled = 0
        self.reused = 0

    def take(self, size: int) -> bytearray | None:
        """A buffer of exactly ``size`` bytes with stale contents (the caller overwrites all of it), or None."""
        stack = self._free.get(size)
        if not stack:
            return None
        self.held -= size
        self.reused += 1
        return stack.pop()

    def give(self, buf: object) -> None:
        """Offer a value that the keyspace just dropped; kept only if unreferenced elsewhere and it fits."""
        if type(buf) is not bytearray:
            return
        size = len(buf)
        if size < MIN_SIZE or sys.getrefcount(buf) > _OWNER_REFS or self.held + size > self.max_bytes:
            return
        if sys.getsizeof(buf) != _EXACT + size:
            return  # a value that landed with its header (kvd/protocol/landing.py): malloc reuses it, we cannot

        stack = self._free.setdefault(size, [])
        if len(stack) < self.per_size:
            stack.append(buf)
            self.held += size
            self.recycled += 1

    def set_max_bytes(self, max_bytes: int) -> None:
        """A new bound (CONFIG SET maxmemory): buffers past it are let go, the largest sizes first."""
        self.max_bytes = max_bytes
        for size in sorted(self._free, reverse=True):
            stack = self._free[size]
            while stack and self.held > max_bytes:
                stack.pop()
                self.held -= size
            if not stack:
                del self._free[size]

    def clear(self) -> None:
        self._free.clear()
        self.held = 0
