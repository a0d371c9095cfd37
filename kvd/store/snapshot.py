"""A point-in-time view of the keyspace, read out while the keyspace moves on: what SYNC streams as an RDB file.

Redis forks to take a snapshot: the child sees the memory of one instant, and the kernel copies each page the
parent changes meanwhile. kvd is one process, so a snapshot rests on two facts of its storage instead. A stored
value is never changed in place (every write stores a new object, ``Keyspace.set``), so a reference to a value
holds that instant's bytes. And a record in the append-only log never changes either, so a ``Location`` holds
them too, as long as its segment file stays open (``SegmentLog.pin_all``: compaction or FLUSHALL may unlink it
meanwhile, the open file keeps its blocks).

``take`` walks every key once, in one event-loop step: that walk is the snapshot's only pause, O(keys), about
0.3-0.5 us per key (64-101 ms for 200 000 keys; docs/operations.md, "Backups"). Reading out (``items``) is
asynchronous, and every other client is served meanwhile.

What a snapshot holds until it has been read out:

* with persistence on: each key's entry and its record's Location, and a pin on every segment that existed when
  it was taken. When the key's turn comes, the entry's resident value is used if the entry still points at that
  record; otherwise (overwritten, deleted or evicted from RAM since) the record is read from its pinned segment.
  So a snapshot holds no value memory; segments that compaction or FLUSHALL retire meanwhile keep their disk
  space until it is closed.
* with persistence off (or a write the log refused): the value itself, as Redis's fork keeps an old page: a
  value overwritten during the read-out stays in memory until it has been read out.

Keys whose deadline has passed when the snapshot is taken are left out; keys that expire during the read-out
are in it, with their deadline (a loader drops them, as Redis's does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from .lru import Entry

if TYPE_CHECKING:
    from kvd.persist import Location, SegmentLog
    from kvd.persist.segment import Segment

    from .keyspace import Value

# key, deadline (unix ms, 0 = none), value length, then either (entry, location) or the value
_Item = tuple[bytes, int, int, "Entry | None", "Location | None", "Value | None"]


class Snapshot:
    __slots__ = ("_items", "_log", "_next", "_pinned", "expires")

    def __init__(
        self, items: list[_Item | None], expires: int, seg_log: SegmentLog | None, pinned: dict[int, Segment]
    ) -> None:
        self._items = items
        self.expires = expires  # keys with a deadline
        self._log = seg_log
        self._pinned = pinned
        self._next = 0

    @classmethod
    def empty(cls) -> Snapshot:
        """A snapshot with no keys (what a client that asked for functions only gets: kvd has none)."""
        return cls([], 0, None, {})

    def __len__(self) -> int:
        return len(self._items)

    def layout(self) -> Iterator[tuple[int, int, int]]:
        """(key length, value length, deadline) of every key not read out yet, in the order of ``items``."""
        for item in self._items:
            if item is not None:
                yield len(item[0]), item[2], item[1]

    async def items(self) -> AsyncIterator[tuple[bytes, Value, int]]:
        """(key, value, deadline) of every key, values as they were when the snapshot was taken. Each key's
        references are dropped as it is returned."""
        items = self._items
        pinned = self._pinned
        while self._next < len(items):
            i = self._next
            item, items[i] = items[i], None
            self._next = i + 1
            assert item is not None
            key, expire_at, value_len, entry, loc, value = item
            if loc is not None:
                assert entry is not None and self._log is not None
                value = entry.value if entry.loc is loc else None
                if value is None:
                    value = await self._log.read_pinned(pinned[loc.segment], key, loc)
            if value is None or len(value) != value_len:  # a broken invariant: stop rather than send a wrong file
                raise RuntimeError(f"snapshot of key {key[:100]!r}: its value changed size since it was taken")
            yield key, value, expire_at

    def in_memory(self) -> list[tuple[bytes, Value, int]] | None:
        """(key, value, deadline) of every key not read out yet, if none of the values needs a read from disk
        (what a command inside EXEC, which must not yield, can use at once); else None."""
        out = []
        for item in self._items[self._next :]:
            if item is None:
                continue
            key, expire_at, _, entry, loc, value = item
            if loc is not None:
                assert entry is not None
                if entry.loc is not loc or entry.value is None:
                    return None
                value = entry.value
            assert value is not None
            out.append((key, value, expire_at))
        return out

    def close(self) -> None:
        """Drop what the keys not read out yet hold, and the pins on the segments."""
        self._items.clear()
        self._next = 0
        pinned, self._pinned = self._pinned, {}
        if self._log is not None:
            for seg in pinned.values():
                self._log.unpin(seg)


def take(entries: dict[bytes, Entry], seg_log: SegmentLog | None, now: int) -> Snapshot:
    """The live keys of ``entries`` as they are now (``now``: unix ms). Keys whose value lives nowhere any more
    (a cold value whose segment is gone, which a GET could not serve either) are left out."""
    pinned = seg_log.pin_all() if seg_log is not None else {}
    items: list[_Item | None] = []
    append = items.append
    expires = 0
    for key, entry in entries.items():
        expire_at = entry.expire_at
        if expire_at:
            if expire_at <= now:
                continue
            expires += 1
        loc = entry.loc
        if loc is not None and loc.segment in pinned:
            append((key, expire_at, loc.value_len, entry, loc, None))
        elif (value := entry.value) is not None:
            append((key, expire_at, len(value), None, None, value))
    return Snapshot(items, expires, seg_log, pinned)
