"""The keyspace's per-key record, and the exact LRU lists the RAM tier threads through those records.

An ``Entry`` is what the keyspace keeps for each key: the value (None while it lives only on disk), its
deadline, its disk ``Location`` and its SCAN sequence number. It also carries the key and two links, ``prev``
and ``next``, so that the RAM tier's recency order is a doubly linked list through the entries themselves
(an *intrusive* list), with no second table keyed by the key.

Why not ``OrderedDict``, which kept this order until 2026-11-23. An ``OrderedDict`` is a dict plus a C linked
list: per key a hash-table slot, an index slot, a list node and a slot in its node array, about 75 bytes (a
million keys in a plain script: 214 against 138 bytes per key for entries plus order, RSS). Like every CPython
dict it grows in one step: the insert that crosses a threshold rebuilds the table *and* the node array, 55 ms
at a million keys and 384 ms at 2.8 million, a pause every client waits through (docs/operations.md, "Pauses").
Links never resize. A move to the end now runs in Python, yet costs less in the server: ``move_to_end(key)``
hashed the key into a second table (a cache miss), where the links start from the entry the GET already holds
(``scripts/bench_python_cost.py``, GET of 64 bytes ``-P 16``: 3.08-3.16 -> 2.68-2.70 us).

Links and reference cycles: a linked entry is in a cycle (its neighbours point back at it), which is fine
while the keyspace holds it anyway. ``remove`` clears both links, so a dropped entry is freed by reference
counting at once; kvd freezes long-lived objects out of the cyclic collector (kvd/memory.py), so an entry
left linked to a dropped one would never be freed. ``clear`` unlinks every entry for the same reason.

``head`` is a sentinel Entry (every node has one type, which keeps CPython's attribute caches monomorphic):
``head.next`` is the least recently used entry and ``head.prev`` the most recent.

Complexity: append, remove, move_to_end, oldest O(1); clear O(n); len O(1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvd.persist import Location

Value = bytes | bytearray | memoryview


LRU_CLOCK_MAX = (1 << 24) - 1  # Redis keeps its LRU clock in 24 bits: what INFO's lru_clock and DEBUG OBJECT show


class Entry:
    __slots__ = ("atime", "expire_at", "key", "loc", "next", "prev", "seq", "value")

    def __init__(self, key: bytes, value: Value | None, expire_at: int, loc: Location | None, seq: int) -> None:
        self.key = key
        self.value = value
        self.expire_at = expire_at  # absolute unix ms; 0 = no TTL
        self.loc = loc
        self.seq = seq
        self.prev: Any = None  # the RAM tier's links (Entry | None); None: on no list
        self.next: Any = None
        self.atime = 0  # the LRU clock (monotonic seconds) when last written or read: OBJECT IDLETIME

    @property
    def value_len(self) -> int:
        """The value's length, resident or not (the disk index knows a cold one's): no read needed."""
        return len(self.value) if self.value is not None else self.loc.value_len


class LruList:
    """Entries from least to most recently used. An entry is on at most one list at a time. Linking an entry
    stamps it with ``now``, the LRU clock the owner keeps (whole seconds, as Redis's LRU clock)."""

    __slots__ = ("_head", "count", "now")

    def __init__(self) -> None:
        head = self._head = Entry(b"", None, 0, None, 0)
        head.prev = head.next = head
        self.count = 0
        self.now = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[Entry]:
        """Oldest first. The list must not change during the iteration."""
        head = self._head
        entry = head.next
        while entry is not head:
            yield entry
            entry = entry.next

    def append(self, entry: Entry) -> None:
        """Link an unlinked ``entry`` as the most recent."""
        head = self._head
        last = head.prev
        last.next = entry
        entry.prev = last
        entry.next = head
        head.prev = entry
        entry.atime = self.now
        self.count += 1

    def extend(self, entries: list[Entry]) -> None:
        """Link unlinked ``entries``, in order, as the most recent (a recovered keyspace, in one pass)."""
        head = self._head
        last = head.prev
        now = self.now
        for entry in entries:
            last.next = entry
            entry.prev = last
            entry.atime = now
            last = entry
        last.next = head
        head.prev = last
        self.count += len(entries)

    def remove(self, entry: Entry) -> None:
        """Unlink ``entry``, which must be on this list."""
        prev, nxt = entry.prev, entry.next
        prev.next = nxt
        nxt.prev = prev
        entry.prev = entry.next = None
        self.count -= 1

    def move_to_end(self, entry: Entry) -> None:
        """``entry``, on this list, becomes the most recent."""
        entry.atime = self.now
        head = self._head
        last = head.prev
        if last is entry:
            return
        prev, nxt = entry.prev, entry.next
        prev.next = nxt
        nxt.prev = prev
        last.next = entry
        entry.prev = last
        entry.next = head
        head.prev = entry

    def oldest(self) -> Entry | None:
        entry = self._head.next
        return None if entry is self._head else entry

    def clear(self) -> None:
        head = self._head
        entry = head.next
        while entry is not head:
            nxt = entry.next
            entry.prev = entry.next = None
            entry = nxt
        head.prev = head.next = head
        self.count = 0
