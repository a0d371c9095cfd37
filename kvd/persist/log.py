"""SegmentLog: the disk tier and write-ahead log behind the keyspace, as one facade on the event loop.

Every method here runs on the event-loop thread and does no file I/O: appends assign a ``Location`` (the
tail is known) and queue the record for the writer thread (``writer.py``); reads run ``preadv`` on a worker
thread; recovery (``recovery.py``) runs before the loop serves anyone. The keyspace is the ``LogOwner``: the
log asks it whether a record is still current before copying or dropping it.

What an acknowledged write survives (the connection replies only after ``barrier()`` resolves):

=============  =====================================  ===========================================
appendfsync    kill -9 (the OS survives)              power loss / kernel crash
=============  =====================================  ===========================================
always         nothing lost                           nothing lost (if the device honours flushes)
everysec       nothing lost (write() was done)        up to ~1 s of writes (2 s if fsync lags)
no             nothing lost                           what the kernel had not written back (~30 s)
=============  =====================================  ===========================================

Disk space. ``mark_dead`` keeps per-segment live-byte counts. A maintenance task, at most one segment at a
time and yielding to clients between records, (1) enforces ``max-disk``: while the files exceed it, the oldest
sealed segment goes — records whose value RAM still holds are carried forward (re-appended, no disk read),
the others are dropped and their keys forgotten (``disk_evictions``); and (2) compacts: a sealed segment whose
dead share reaches ``compaction-dead-ratio`` has its live records copied forward. In both cases a DEL or an
EXPIRE whose key still has an older record on disk is carried forward too, so nothing deleted comes back and
no TTL is lost on restart. A segment's files are unlinked only after the copies are fsynced; reads already in
flight keep their descriptor, so they finish normally.

FLUSHALL rolls to a new segment that starts with a FLUSH record and unlinks every older segment once that
record is durable; recovery ignores anything before a FLUSH, so a crash in between loses nothing and
resurrects nothing.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .record import DEL, EXPIRE, FILE_HEADER_SIZE, FLUSH, HEADER_SIZE, PAD, SET, Location, checksum, decode_header
from .recovery import RecoveryReport, recover
from .segment import HintEntry, hint_path, read_hint, scan, segment_path
from .writer import RESET, ROLL, SYNC, Op, Writer

Buffer = bytes | bytearray | memoryview


class PersistError(Exception):
    """A problem with the persistence directory or a failed write; ``str()`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CorruptRecord(Exception):
    """A record failed verification on read; it is never served."""


class LogOwner(Protocol):
    def live_expire(self, key: bytes, loc: Location) -> int | None: ...
    def hot_value(self, key: bytes, loc: Location) -> Buffer | None: ...
    def current_record(self, key: bytes) -> tuple[Location | None, int] | None: ...
    def relocated(self, key: bytes, old: Location, new: Location) -> None: ...
    def dropped(self, key: bytes, loc: Location) -> None: ...
    def lost(self, key: bytes, loc: Location) -> None: ...


class SegmentLog:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = 256 << 20,
        appendfsync: str = "everysec",
        max_disk: int = 0,
        compaction_dead_ratio: float = 0.5,
        logger: logging.Logger | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.appendfsync = appendfsync
        self.max_disk = max_disk
        self.compaction_dead_ratio = compaction_dead_ratio
        self.log = logger or logging.getLogger("kvd.persist")
        self._lock_fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owner: LogOwner | None = None
        self._writer: Writer | None = None
        self._segment = 0
        self._tail = 0
        self._lsn = 0  # last lsn appended
        self._written_lsn = 0
        self._written_pos = (0, 0)  # (segment, offset) known to be in the file
        self._barriers: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._position_waiters: list[tuple[tuple[int, int], asyncio.Future[None]]] = []
        self._misconf: str | None = None
        self._reset_lsn = 0
        self._probe_lsn = 0
        self._sizes: dict[int, int] = {}
        self._live: dict[int, int] = {}
        self._sealed: set[int] = set()
        self._readers: dict[int, int] = collections.defaultdict(int)  # segment -> reads in flight
        self._doomed: set[int] = set()
        self._maintenance: asyncio.Task[None] | None = None
        self._closing = False
        self.compactions = 0
        self.compacted_bytes = 0
        self.disk_evictions = 0
        self.corrupt_reads = 0
        self.carried_forward = 0

    # -- start-up --------------------------------------------------------------------------------------------

    def recover(
        self, now_ms: int, progress: Callable[[int, int], None] | None = None
    ) -> tuple[dict[bytes, tuple[Location, int]], RecoveryReport]:
        if self._lock_fd < 0:
            self.open_directory()
        state = recover(self.directory, now_ms, progress)
        self._sizes = dict(state.sizes)
        self._live = dict(state.live)
        self._segment, self._tail = state.active, state.active_offset
        self._sealed = {s for s in self._sizes if s != state.active}
        for seg in [s for s in self._sizes if s < state.flushed_before]:
            self._unlink_segment(seg)  # wholly dead: a FLUSH came after them
        self._writer = Writer(self.directory, self.appendfsync, self._report)
        self._writer.open(state.active, state.active_offset, state.active_entries, create=state.create_active)
        if state.create_active:
            self._tail = FILE_HEADER_SIZE
        self._sizes[self._segment] = self._tail
        self._live.setdefault(self._segment, 0)
        self._written_pos = (self._segment, self._tail)
        return state.index, state.report

    def open_directory(self) -> None:
        """Create/check the directory and take its lock; PersistError (one line) if unusable or in use."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / ".kvd-write-test"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            raise PersistError(f"cannot use {self.directory}: {exc.strerror or exc}") from None
        self._lock_fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise PersistError(f"{self.directory} is in use by another kvd process (LOCK is held)") from None

    def start(self, loop: asyncio.AbstractEventLoop, owner: LogOwner) -> None:
        assert self._writer is not None, "recover() first"
        self._loop = loop
        self._owner = owner
        self._writer.start()
        self._maintenance = loop.create_task(self._maintain())

    # -- appends (loop thread) -------------------------------------------------------------------------------

    def _append(self, kind: int, key: bytes, value: Buffer, expire_at: int) -> tuple[int, int, int]:
        size = HEADER_SIZE + len(key) + len(value)
        if self._tail + size > self.segment_size and self._tail > FILE_HEADER_SIZE:
            self._roll()
        seg, offset = self._segment, self._tail
        self._tail += size
        self._sizes[seg] = self._tail
        self._lsn += 1
        assert self._writer is not None
        self._writer.submit(Op(self._lsn, kind, seg, offset, key, value, expire_at))
        return seg, offset, size

    def _roll(self) -> None:
        self._sealed.add(self._segment)
        self._segment += 1
        self._tail = FILE_HEADER_SIZE
        self._sizes[self._segment] = self._tail
        self._live[self._segment] = 0
        self._lsn += 1
        assert self._writer is not None
        self._writer.submit(Op(self._lsn, ROLL, self._segment, 0))

    def append_set(self, key: bytes, value: Buffer, expire_at: int) -> Location:
        seg, offset, size = self._append(SET, key, value, expire_at)
        self._live[seg] = self._live.get(seg, 0) + size
        return Location(seg, offset, size, len(value))

    def append_delete(self, key: bytes) -> None:
        self._append(DEL, key, b"", 0)

    def append_expire(self, key: bytes, expire_at: int) -> None:
        self._append(EXPIRE, key, b"", expire_at)

    def append_flush(self) -> None:
        self._roll()
        self._append(FLUSH, b"", b"", 0)
        older = [s for s in self._sizes if s < self._segment]
        for seg in older:
            self._live[seg] = 0
        barrier = self._sync_barrier()
        assert self._loop is not None

        async def drop_older() -> None:
            try:
                await barrier
            except PersistError:
                return  # the FLUSH is not durable: keep the files; recovery will honour the record if it lands
            for seg in older:
                self._unlink_segment(seg)

        self._loop.create_task(drop_older())

    def mark_dead(self, loc: Location) -> None:
        if loc.segment in self._live:
            self._live[loc.segment] -= loc.record_len

    # -- durability ------------------------------------------------------------------------------------------

    def barrier(self) -> asyncio.Future[None] | None:
        if self._written_lsn >= self._lsn:
            return None
        assert self._loop is not None
        future = self._loop.create_future()
        self._barriers.append((self._lsn, future))
        return future

    def _sync_barrier(self) -> asyncio.Future[None]:
        """Resolves once everything so far is written *and* fsynced, whatever appendfsync says."""
        assert self._loop is not None and self._writer is not None
        self._lsn += 1
        future = self._loop.create_future()
        self._barriers.append((self._lsn, future))
        self._writer.submit(Op(self._lsn, SYNC, self._segment, self._tail))
        return future

    def misconf(self) -> str | None:
        return self._misconf

    def set_appendfsync(self, policy: str) -> None:
        self.appendfsync = policy
        if self._writer is not None:
            self._writer.appendfsync = policy

    def _report(self, event: str, args: tuple[Any, ...]) -> None:
        """Called on the writer thread: hand the event to the loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._on_event, event, args)

    def _on_event(self, event: str, args: tuple[Any, ...]) -> None:
        if event in ("written", "synced"):
            lsn, seg, offset = args
            self._written_lsn = max(self._written_lsn, lsn)
            self._written_pos = max(self._written_pos, (seg, offset))
            while self._barriers and self._barriers[0][0] <= lsn:
                _, future = self._barriers.popleft()
                if not future.done():
                    future.set_result(None)
            if self._misconf and self._probe_lsn and lsn >= self._probe_lsn:
                self.log.warning("disk writes work again: accepting writes")
                self._misconf = None
                self._probe_lsn = 0
            self._wake_readers()
        elif event == "failed":
            first, last, ops, reason = args
            self._on_failure(first, last, ops, reason)
        elif event == "sealed":
            seg, size = args
            self._sizes[seg] = size
        elif event == "warning":
            self.log.warning("%s", args[0])

    def _on_failure(self, first: int, last: int, ops: list[Op], reason: str) -> None:
        message = f"MISCONF Errors writing to the AOF file: {reason}"
        if first > self._reset_lsn:  # a new failure, not a straggler refused before our last RESET
            if self._misconf is None:
                self.log.error(
                    "write to %s failed (%s): refusing writes until the disk accepts them", self.directory, reason
                )
            self._misconf = message
            self._segment, self._tail = ops[0].segment, ops[0].offset
            for seg in [s for s in self._sizes if s > self._segment]:  # rolls the writer never made
                self._sizes.pop(seg, None)
                self._live.pop(seg, None)
            self._sealed.discard(self._segment)
            self._sizes[self._segment] = self._tail
            self._lsn += 1
            self._reset_lsn = self._lsn
            assert self._writer is not None and self._loop is not None
            self._writer.submit(Op(self._lsn, RESET, self._segment, self._tail))
            self._written_lsn = max(self._written_lsn, self._lsn)
            self._loop.call_later(1.0, self._probe)
        for op in ops:
            if op.kind == SET and self._owner is not None:
                size = HEADER_SIZE + len(op.key) + len(op.value)
                loc = Location(op.segment, op.offset, size, len(op.value))
                self._live[op.segment] = self._live.get(op.segment, 0) - size
                self._owner.lost(op.key, loc)
        error = PersistError(message)
        for lsn, future in list(self._barriers):
            if lsn >= first and not future.done():
                future.set_exception(error)
        self._barriers = collections.deque((lsn, f) for lsn, f in self._barriers if not f.done())

    def _probe(self) -> None:
        """While refusing writes: try a PAD record; success clears the MISCONF state."""
        if self._misconf is None or self._closing:
            return
        self._append(PAD, b"", b"", 0)
        self._probe_lsn = self._lsn
        assert self._loop is not None
        self._loop.call_later(1.0, self._probe)

    # -- reads -----------------------------------------------------------------------------------------------

    async def read_value(self, key: bytes, loc: Location) -> bytearray:
        if self._written_pos < (loc.segment, loc.offset + loc.record_len):
            await self._wait_written((loc.segment, loc.offset + loc.record_len))
        self._readers[loc.segment] += 1
        try:
            return await asyncio.to_thread(self._read, key, loc)
        finally:
            self._readers[loc.segment] -= 1
            if loc.segment in self._doomed and not self._readers[loc.segment]:
                self._doomed.discard(loc.segment)

    def _read(self, key: bytes, loc: Location) -> bytearray:
        path = segment_path(self.directory, loc.segment)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            self.corrupt_reads += 1
            raise CorruptRecord(f"segment {loc.segment} is gone: {exc.strerror}") from None
        try:
            head = bytearray(HEADER_SIZE + len(key))
            value = bytearray(loc.value_len)
            got = os.preadv(fd, [head, value], loc.offset)
        finally:
            os.close(fd)
        header = decode_header(head)
        if (
            got != loc.record_len
            or header is None
            or header.type != SET
            or header.vlen != loc.value_len
            or bytes(head[HEADER_SIZE:]) != key
            or checksum(key, value) != header.vsum
        ):
            self.corrupt_reads += 1
            raise CorruptRecord(f"record at segment {loc.segment} offset {loc.offset} failed verification")
        return value

    def _wait_written(self, position: tuple[int, int]) -> asyncio.Future[None]:
        assert self._loop is not None
        future = self._loop.create_future()
        self._position_waiters.append((position, future))
        return future

    def _wake_readers(self) -> None:
        if not self._position_waiters:
            return
        keep = []
        for position, future in self._position_waiters:
            if position <= self._written_pos:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((position, future))
        self._position_waiters = keep

    # -- maintenance: disk budget and compaction -------------------------------------------------------------

    def disk_bytes(self) -> int:
        return sum(self._sizes.values())

    async def _maintain(self) -> None:
        while not self._closing:
            await asyncio.sleep(0.5)
            try:
                if self._misconf:
                    continue
                victim = self._pick_victim()
                if victim is not None:
                    seg, over_budget = victim
                    await self._evacuate(seg, drop_cold=over_budget)
            except asyncio.CancelledError:
                raise
            except Exception:  # maintenance must never take the server down
                self.log.exception("disk maintenance failed; will retry")
                await asyncio.sleep(5)

    def _pick_victim(self) -> tuple[int, bool] | None:
        sealed = sorted(s for s in self._sealed if s in self._sizes and s not in self._doomed)
        if not sealed:
            return None
        if self.max_disk and self.disk_bytes() > self.max_disk:
            return sealed[0], True
        best, ratio = None, 0.0
        for seg in sealed:
            size = self._sizes[seg] - FILE_HEADER_SIZE
            if size <= 0:
                continue
            dead = 1.0 - max(self._live.get(seg, 0), 0) / size
            if dead >= self.compaction_dead_ratio and dead > ratio:
                best, ratio = seg, dead
        return (best, False) if best is not None else None

    async def _evacuate(self, seg: int, drop_cold: bool) -> None:
        """Move what is still needed out of sealed segment ``seg``, then delete it."""
        assert self._owner is not None
        owner = self._owner
        size = self._sizes[seg]
        entries = await asyncio.to_thread(self._entries_of, seg, size)
        older_exists = any(s < seg for s in self._sizes)
        moved = 0
        for i, e in enumerate(entries):
            if i % 64 == 63:
                await asyncio.sleep(0)  # let clients in
            if self._misconf or self._closing:
                return
            if e.type == SET:
                loc = Location(seg, e.offset, e.record_len, e.value_len)
                if owner.live_expire(e.key, loc) is None:
                    continue
                value = owner.hot_value(e.key, loc)
                if value is None:
                    if drop_cold:
                        owner.dropped(e.key, loc)
                        self.disk_evictions += 1
                        continue
                    try:
                        value = await self.read_value(e.key, loc)
                    except CorruptRecord:
                        owner.lost(e.key, loc)
                        continue
                expire = owner.live_expire(e.key, loc)
                if expire is None:
                    continue
                new = self.append_set(e.key, value, expire)
                self.mark_dead(loc)
                owner.relocated(e.key, loc, new)
                moved += e.record_len
            elif e.type in (DEL, EXPIRE) and older_exists:
                current = owner.current_record(e.key)
                if current is None:
                    self.append_delete(e.key)
                elif current[0] is not None and current[0].segment < seg:
                    self.append_expire(e.key, current[1])
        try:
            await self._sync_barrier()
        except PersistError:
            return
        self._sealed.discard(seg)
        self._unlink_segment(seg)
        self.compactions += 1
        self.compacted_bytes += size
        self.carried_forward += moved
        self.log.info(
            "%s segment %d: %d bytes freed, %d live bytes carried forward",
            "disk budget dropped" if drop_cold else "compacted",
            seg,
            size,
            moved,
        )

    def _entries_of(self, seg: int, size: int) -> list[HintEntry]:
        entries = read_hint(self.directory, seg, size)
        if entries is None:
            entries = scan(segment_path(self.directory, seg), seg).entries
        return entries

    def _unlink_segment(self, seg: int) -> None:
        for path in (segment_path(self.directory, seg), hint_path(self.directory, seg)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    self.log.warning("could not delete %s: %s", path, exc.strerror)
        self._sizes.pop(seg, None)
        self._live.pop(seg, None)
        self._sealed.discard(seg)
        if self._readers.get(seg):
            self._doomed.add(seg)  # open descriptors keep working; forget it when they finish

    # -- shutdown --------------------------------------------------------------------------------------------

    async def close(self) -> None:
        self._closing = True
        if self._maintenance is not None:
            self._maintenance.cancel()
            try:
                await self._maintenance
            except (asyncio.CancelledError, Exception):
                pass
        if self._writer is not None:
            await asyncio.to_thread(self._writer.stop)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- INFO ------------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, int | float | str]:
        w = self._writer
        live = sum(max(v, 0) for v in self._live.values())
        disk = self.disk_bytes()
        return {
            "aof_last_write_status": "err" if self._misconf else "ok",
            "segments": len(self._sizes),
            "disk_bytes": disk,
            "live_bytes": live,
            "dead_bytes": max(disk - live - FILE_HEADER_SIZE * len(self._sizes), 0),
            "max_disk": self.max_disk,
            "pending_records": self._lsn - self._written_lsn,
            "write_batches": w.batches if w else 0,
            "records_written": w.records if w else 0,
            "bytes_written": w.bytes_written if w else 0,
            "fsyncs": w.fsyncs if w else 0,
            "delayed_fsync": w.delayed_fsyncs if w else 0,
            "last_fsync_seconds_ago": round(time.time() - w.last_fsync, 3) if w else 0,
            "write_errors": w.write_errors if w else 0,
            "compactions": self.compactions,
            "compacted_bytes": self.compacted_bytes,
            "carried_forward_bytes": self.carried_forward,
            "disk_evictions": self.disk_evictions,
            "corrupt_reads": self.corrupt_reads,
        }
