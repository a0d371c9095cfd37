"""A point-in-time view of the keyspace, read out while the keyspace moves on: what SYNC streams as an RDB file.

Redis forks to take a snapshot: the child sees the memory of one instant, and the kernel copies each page the
parent changes meanwhile. kvd is one process, so a snapshot rests on two facts of its storage instead. A stored
value is never changed in place (every write stores a new object, ``Keyspace.set``), so a reference to a value
holds that instant's bytes. And a record in the append-only log never changes either, so a ``Location`` holds
them too, as long as its segment file stays open (``SegmentLog.pin``: compaction may unlink it meanwhile, the
open file keeps its blocks).

``take`` walks every key once, in one event-loop step: that walk is the snapshot's only pause, O(keys), about
0.2 s per million keys. Reading out (``items``) is asynchronous, and every other client is served meanwhile.

What a snapshot holds until it has read a key out:

* with persistence on: the key's entry and its record's Location, and a pin on the segment. When the key's turn
  comes, the entry's resident value is used if the entry still points at that record; otherwise (overwritten,
  deleted or evicted from RAM since) the record is read from the pinned segment. So a snapshot holds no value
  memory, and the disk space of segments retired meanwhile comes back only once it has read past them.
* with persistence off (or a write the log refused): the value itself, as Redis's fork keeps an old page: a
  value overwritten during the read-out stays in memory until it has been read out.

Keys whose deadline has passed when the snapshot is taken are left out; keys that expire during the read-out
are in it, with their deadline (a loader drops them, as Redis's does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from .lru import Entry

if TYPE_CHECKING:
    from kvd.persist import Location, SegmentLog
    from kvd.persist.segment import Segment

    from .keyspace import Value

# key, deadline (unix ms, 0 = none), value length, then either (entry, location, pinned segment) or the value
_Item = tuple[bytes, int, int, "Entry | None", "Location | None", "Segment | None", "Value | None"]


class Snapshot:
    __slots__ = ("_items", "_log", "_next", "expires")

    def __init__(self, items: list[_Item | None], seg_log: SegmentLog | None) -> None:
        self._items = items
        self._log = seg_log
        self._next = 0
        self.expires = sum(1 for item in items if item is not None and item[1])

    def __len__(self) -> int:
        return len(self._items)

    def sizes(self) -> list[tuple[bytes, int, int]]:
        """(key, value length, deadline) of every key, in the order ``items`` returns them."""
        return [(item[0], item[2], item[1]) for item in self._items if item is not None]

    async def items(self) -> AsyncIterator[tuple[bytes, Value, int]]:
        """(key, value, deadline) of every key, values as they were when the snapshot was taken. Each key's
        references and pin are dropped as it is returned; ``close`` drops those of keys not reached."""
        items = self._items
        seg_log = self._log
        while self._next < len(items):
            i = self._next
            item, items[i] = items[i], None
            self._next = i + 1
            assert item is not None
            key, expire_at, value_len, entry, loc, seg, value = item
            if seg is not None:
                assert seg_log is not None and entry is not None and loc is not None
                try:
                    value = entry.value if entry.loc is loc else None
                    if value is None:
                        value = await seg_log.read_pinned(seg, key, loc)
                finally:
                    seg_log.unpin(seg)
            if value is None or len(value) != value_len:  # a broken invariant: stop rather than send a wrong file
                raise RuntimeError(f"snapshot of key {key[:100]!r}: its value changed size since it was taken")
            yield key, value, expire_at

    def close(self) -> None:
        """Release what the keys not read out yet hold (their segments' pins)."""
        items = self._items
        for i in range(self._next, len(items)):
            item = items[i]
            items[i] = None
            if item is not None and item[5] is not None and self._log is not None:
                self._log.unpin(item[5])
        self._next = len(items)


def take(entries: dict[bytes, Entry], seg_log: SegmentLog | None, now: int) -> Snapshot:
    """The live keys of ``entries`` as they are now (``now``: unix ms). Keys whose value lives nowhere any more
    (a cold value whose segment is gone, which a GET could not serve either) are left out."""
    items: list[_Item | None] = []
    append = items.append
    pin = seg_log.pin if seg_log is not None else None
    for key, entry in entries.items():
        expire_at = entry.expire_at
        if expire_at and expire_at <= now:
            continue
        loc = entry.loc
        seg = pin(loc) if pin is not None and loc is not None else None
        if seg is not None:
            append((key, expire_at, loc.value_len, entry, loc, seg, None))  # type: ignore[union-attr]
        elif (value := entry.value) is not None:
            append((key, expire_at, len(value), None, None, None, value))
    return Snapshot(items, seg_log)
