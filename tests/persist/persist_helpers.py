"""Helpers for the storage-engine tests: a tiny in-RAM owner with the keyspace's semantics, real files only.

(A module of its own, not conftest.py: ``from conftest import`` would clash with tests/server/conftest.py.)
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kvd.persist import Before, Location, RecoveredKeys, RecoveryReport, SegmentLog


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Owner:
    """Implements ``LogOwner`` like kvd's keyspace: key -> [loc, expire, value or None (cold)]."""

    def __init__(self, log: SegmentLog) -> None:
        self.log = log
        self.entries: dict[bytes, list[Any]] = {}
        self.undo_calls: list[tuple[bytes, Before]] = []
        self.dropped_calls: list[tuple[bytes, Location]] = []
        self.relocations = 0

    # -- what the keyspace does when clients write ---------------------------------------------------------
    def before(self, key: bytes) -> Before:
        e = self.entries.get(key)
        return (e[0], e[1]) if e is not None else (None, 0)

    def set(self, key: bytes, value: bytes, expire: int = 0, hot: bool = True) -> Location:
        loc = self.log.append_set(key, value, expire, self.before(key))
        old = self.entries.get(key)
        if old is not None and old[0] is not None:
            self.log.mark_dead(old[0])
        self.entries[key] = [loc, expire, value if hot else None]
        return loc

    def delete(self, key: bytes) -> None:
        before = self.before(key)
        old = self.entries.pop(key, None)
        if old is not None:
            if old[0] is not None:
                self.log.mark_dead(old[0])
            self.log.append_delete(key, before)

    def expire(self, key: bytes, expire: int) -> None:
        self.log.append_expire(key, expire, self.before(key))
        self.entries[key][1] = expire

    def flush(self) -> None:
        flushed, self.entries = self.entries, {}
        self.log.append_flush(lambda: self.unflush(flushed))

    def unflush(self, flushed: dict[bytes, list[Any]]) -> None:
        """The keyspace's ``_unflush``: a lost FLUSH puts back every key that has a record, cold."""
        self.entries = {key: [e[0], e[1], None] for key, e in flushed.items() if e[0] is not None and e[0].segment}

    def demote_all(self) -> None:
        for entry in self.entries.values():
            entry[2] = None

    def restore(self, keys: RecoveredKeys) -> None:
        for key, (loc, expire, _, _) in keys.items():
            self.entries[key] = [loc, expire, None]

    async def get(self, key: bytes) -> bytes | bytearray | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry[2] is not None:
            return entry[2]
        return await self.log.read_value(key, entry[0])

    # -- LogOwner --------------------------------------------------------------------------------------------
    def live_expire(self, key: bytes, loc: Location) -> int | None:
        e = self.entries.get(key)
        return e[1] if e is not None and e[0] == loc else None

    def current_record(self, key: bytes) -> tuple[Location | None, int] | None:
        e = self.entries.get(key)
        return (e[0], e[1]) if e is not None else None

    def hot_value(self, key: bytes, loc: Location) -> bytes | None:
        e = self.entries.get(key)
        return e[2] if e is not None and e[0] == loc else None

    def relocated(self, key: bytes, old: Location, new: Location) -> None:
        e = self.entries.get(key)
        if e is not None and e[0] == old:
            e[0] = new
            self.relocations += 1

    def dropped(self, key: bytes, loc: Location) -> None:
        self.dropped_calls.append((key, loc))
        e = self.entries.get(key)
        if e is None or e[0] != loc:
            return
        if e[2] is None:
            del self.entries[key]
        else:
            e[0] = None

    def undo(self, key: bytes, before: Before) -> bool:
        self.undo_calls.append((key, before))
        loc, expire = before
        e = self.entries.get(key)
        if loc is None or loc.segment == 0:
            self.entries.pop(key, None)
            return False
        if e is not None and e[0] == loc:
            e[1] = expire
            return False
        self.entries[key] = [loc, expire, None]
        return True


async def open_log(directory: Path, **kwargs: Any) -> tuple[SegmentLog, Owner, RecoveryReport]:
    log = SegmentLog(directory, **kwargs)
    keys, report = log.recover(now_ms())
    owner = Owner(log)
    owner.restore(keys)
    log.start(asyncio.get_running_loop(), owner)
    return log, owner, report


async def reopen(log: SegmentLog, **kwargs: Any) -> tuple[SegmentLog, Owner, RecoveryReport]:
    await log.close()
    return await open_log(log.directory, **kwargs)


def inject_fault(log: SegmentLog, exc: OSError | None) -> None:
    """Make the writer thread's writes fail (None: heal)."""
    if hasattr(log, "inject_fault"):
        log.inject_fault(exc)
        return
    import os

    writer = log._writer  # the committed engine's documented hook: ``Writer.write`` replaces os.writev
    if exc is None:
        writer.write = os.writev
    else:

        def failing(fd: int, bufs: Any) -> int:
            raise exc

        writer.write = failing


def flip_byte(path: Path, offset: int) -> None:
    """Damage a file in place: one bit of the byte at ``offset`` flipped."""
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.seg"))


async def settle(log: SegmentLog) -> None:
    fut = log.barrier()
    if fut is not None:
        await fut


async def wait_for(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)
