"""SegmentLog: the engine's facade, owned by the event loop.

Threads and who owns what:

* The **event loop** owns all bookkeeping: the segment table, the tail offset, LSNs, tickets, per-segment
  live/dead bytes, barrier futures. ``append_*`` only assign a location and queue the record, so they cost a few
  microseconds whatever the value size, and never block.
* The **writer thread** (``writer.py``) owns the active segment's file: it hashes, writes and fsyncs.
* The **fsync thread** (everysec only) fdatasyncs the active segment about once per second.
* The **maintenance thread** (a one-worker executor, FIFO) seals segments (fsync + hint), lists records for
  compaction and unlinks retired segments. FIFO matters: a job queued after a seal sees the seal done.
* A small **read pool** serves ``read_value`` (preadv into a preallocated bytearray, then verification).

Tickets. Every append gets the next ticket number. ``when_written(waiter)`` waits for the current ticket (and
``barrier()`` is the same as a future): the writer reports the last ticket it wrote (and fsynced, with ``always``),
so one report wakes every waiter up to it, directly, in ticket order; a client's held replies leave in the callback
that received the report, which for a batch written inline is the very one that wrote it. Records
appended in one loop iteration are submitted to the writer together from a ``call_soon`` callback: that is the
group commit, one ``pwritev`` batch (+ one fdatasync for ``always``) for all clients.

Write errors. The writer truncates back to the last good offset and reports it; every record after it is lost:
its barrier fails with ``MISCONF Errors writing to the AOF file: <strerror>``, and the log refuses appends
(``misconf()``) until a probe (write + fdatasync of a PAD record in a fresh segment, tried about once a second)
succeeds. Reads keep working throughout. A failed write changes nothing: every SET, DEL and EXPIRE carries the
key's state before it (``Before``: its record and TTL), and each key whose writes were lost goes back to the
state before the first of them, ``owner.undo`` (for a copy made by compaction, the keyspace is pointed back at
the old copy). That record is still on disk: compaction waits until everything appended is durable before it
drops a record, so a record made dead by a write that then failed is never gone. Appends made while refusing
get a location in the void segment 0 and are undone right away.

Lost fsyncs. An fsync that fails while records it covered stay in a segment (everysec's fsync thread, an
``OP_SYNC`` under everysec/no, a seal whose fsync is the first of some records) puts the segment in
``fsync_lost``: a strict ``sync_then`` (SAVE, BGSAVE, WAITAOF, a replica's FACK) answers False while the log holds
it, since Linux may have dropped those pages. Compaction and BGREWRITEAOF (which includes such segments) copy the
records to a fresh, fsynced file, and the segment leaves the set; so does a FLUSHALL's unlink. Maintenance
schedules that rewrite itself once writes work again (no ``misconf``): such segments are its first candidates,
whatever their dead ratio, the active one rolled first as BGREWRITEAOF does (``maintenance._lost_job``); it logs
a line when it starts and one when the log holds none any more.

FLUSHALL. ``append_flush`` rolls to a fresh segment and writes the FLUSH record first in it; every older segment
is then entirely dead, and once the FLUSH is durable they are unlinked (FLUSH first, so a crash half way through
the unlinks can never bring old keys back). A FLUSH whose write fails is undone as the other writes are: the older
segments' bookkeeping goes back to what it was (``_Flush``), then the owner puts its keys back (``on_lost``), at
their records in those segments, which are still there; the records appended after it are lost with it and undo
nothing, since the owner's index is the one from before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

from . import maintenance
from .base import Before, CorruptRecord, Location, LogOwner, PersistError, RecoveredKeys, RecoveryReport
from .record import DEL, EXPIRE, FILE_HDR_SIZE, FLUSH, HDR_SIZE, MAX_VALUE, SET, decode_header
from .recovery import lock_directory, recover
from .segment import HintBuilder, Segment, read_exact_into, seal_hint, sync_segment
from .writer import OP_FAIL, OP_PROBE, OP_REC, OP_ROLL, OP_STOP, OP_SYNC, SegmentLogHooks, Syncer, Writer

MISCONF_PREFIX = "MISCONF Errors writing to the AOF file: "
PROBE_INTERVAL = 1.0
TICK_INTERVAL = 0.1
HARD_LIMIT_SEGMENTS = 4  # the disk budget holds writers past max-disk + max(max-disk / 8, this many segments)
Value = bytes | bytearray | memoryview

# One append, from _append() until the writer reports it written: the writer's op (OP_REC, ticket, segment id,
# offset, type, key, value, expire, lsn; writer.py) followed by what only the loop needs: record_len, loc (SETs),
# carried_from, and the key's state before (None for records compaction carries and for FLUSH). One tuple serves
# as the batch entry and the in-flight entry.
_Inflight = tuple[int, int, int, int, int, bytes, Value, int, int, int, Location | None, Location | None, Before | None]


_new_location = tuple.__new__


class _Flush:
    """A FLUSH record until it is written: its ticket, what it did to the older segments' bookkeeping (their live
    bytes, the in-flight records it marked dead), and the owner's callback that puts the keys back."""

    __slots__ = ("live", "marked", "on_lost", "segs", "ticket")

    def __init__(self, ticket: int, segs: list[Segment], marked: list[Location], on_lost: Callable[[], None]) -> None:
        self.ticket = ticket
        self.segs = segs
        self.live = [seg.live for seg in segs]
        self.marked = marked
        self.on_lost = on_lost

    def undo(self, log: SegmentLog) -> None:
        """The bookkeeping as it was before the FLUSH (the keys are the owner's: ``on_lost``)."""
        for seg, live in zip(self.segs, self.live, strict=True):
            log._retiring.discard(seg.id)
            seg.live = live
        log._inflight_dead.difference_update(self.marked)


class SegmentLog(SegmentLogHooks):
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
        if appendfsync not in ("always", "everysec", "no"):
            raise PersistError(f"appendfsync must be always, everysec or no (got {appendfsync!r})")
        if segment_size < 4096:
            raise PersistError(f"segment_size must be at least 4096 bytes (got {segment_size})")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise PersistError(f"{self.directory} is not a directory") from None
        except OSError as exc:
            raise PersistError(f"cannot create directory {self.directory}: {exc.strerror}") from None
        if not self.directory.is_dir() or not os.access(self.directory, os.W_OK | os.X_OK):
            raise PersistError(f"directory {self.directory} is not writable")
        self.segment_size = segment_size
        self.appendfsync = appendfsync
        self.compaction_dead_ratio = compaction_dead_ratio
        self.logger = logger or logging.getLogger("kvd.persist")

        self._lock_fd = -1
        self._recovered = False
        self._segments: dict[int, Segment] = {}
        self._active: Segment | None = None
        self._tail = FILE_HDR_SIZE
        self._next_lsn = 1
        self._next_seg = 1
        self._next_key = -1  # Segment.key of the next file a rewrite in place installs (see segment.py)
        self.ticket = 0  # last ticket handed out, one per record: a write's place in the order (PersistError)
        self._done_ticket = 0  # last ticket written (+ fsynced with always)
        self._failed_upto = 0  # tickets in (done, failed_upto] failed
        self._batch: list[tuple[Any, ...]] = []
        self._batch_bytes = 0  # record bytes in _batch (decides whether the loop may write it inline)
        self._submit_scheduled = False
        self._inflight: deque[_Inflight] = deque()
        self._inflight_dead: set[Location] = set()
        # Records a rewrite in place copied after their key was written again (note_moved), with the ticket of
        # the last append then: a ``Before`` of a write in flight may still name their old place.
        self._moved: deque[tuple[int, dict[Location, Location]]] = deque()
        self._pending_bytes = 0
        self._barriers: deque[tuple[int, Callable[[BaseException | None], None]]] = deque()  # (ticket, waiter)
        self._w_seg = 0  # the writer's last reported position: everything before it is readable
        self._w_end = 0
        self._misconf: str | None = None
        self._probing: Segment | None = None
        self._void = 0
        self._retiring: set[int] = set()
        # FLUSH records appended and not yet written, oldest first: what undoing each takes (``_Flush``)
        self._flushes: deque[_Flush] = deque()
        self._closing = False
        self._closed = False
        self._latency: Callable[[str, float], None] | None = None
        # The disk budget's back-pressure (``when_stored``): client batches whose replies wait until the segment
        # files are back under ``hard_limit``; the files' size as of the last check, and the bytes appended then.
        self._held: deque[Callable[[BaseException | None], None]] = deque()
        self._disk_checked = 0
        self._appended_checked = 0
        self.hard_limit = 0
        self.set_max_disk(max_disk)

        self._loop: asyncio.AbstractEventLoop | None = None
        self._owner: LogOwner | None = None
        self._writer: Writer | None = None
        self._syncer: Syncer | None = None
        self._maint: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._probe_handle: asyncio.TimerHandle | None = None
        self.job: maintenance.Job | None = None
        self.rewrite_pending: set[int] | None = None  # segment ids a BGREWRITEAOF still has to compact
        self.rewrites_started = 0
        self.maint_resume_at = 0.0  # loop time before which no new job starts (after a failed rewrite)
        # How maintenance jobs (compactions and disk evictions, kvd's AOF rewrites) went, for INFO's aof_*rewrite*
        # fields: the last one's seconds and outcome, failures in a row, and the log's size after the last one
        # (or after recovery), Redis's aof_base_size.
        self.job_started_at = 0.0
        self.last_job_seconds = -1
        self.last_job_ok = True
        self.job_failures_in_a_row = 0
        self.base_bytes = 0

        # counters
        self.appended_records = 0
        self.carried_records = 0  # of those, the copies compaction appended (not client writes)
        self.appended_bytes = 0
        self.compactions = 0
        self.compacted_bytes = 0
        self.rewritten_bytes = 0
        self.disk_evictions = 0
        self.budget_holds = 0  # client batches held by the disk budget
        self.corrupt_reads = 0
        self.lost_records = 0
        self.seal_failures = 0  # segments whose seal (fsync + hint) failed
        # Segments (by key) holding records an fsync failed to make durable; a strict ``sync_then`` fails while
        # one is still in the log. A rewrite (compaction, BGREWRITEAOF) or FLUSHALL takes it out.
        self.fsync_lost: set[int] = set()
        self.lost_rewrite = False  # maintenance is rewriting segments in fsync_lost (for its log lines)
        self.flushes = 0

    # -- startup -----------------------------------------------------------------------------------------------

    def recover(
        self, now_ms: int, progress: Callable[[int, int], None] | None = None
    ) -> tuple[RecoveredKeys, RecoveryReport]:
        if self._recovered:
            raise PersistError("recover() was already called")
        self.open_directory()
        try:
            rec = recover(self.directory, self.segment_size, now_ms, progress, self.logger.warning)
        except OSError as exc:
            self._release_lock()
            what = f"{exc.filename}: {exc.strerror or exc}" if exc.filename else (exc.strerror or str(exc))
            raise PersistError(f"recovery of {self.directory} failed: {what}") from None
        except BaseException:
            self._release_lock()
            raise
        assert rec.active is not None
        self._segments = rec.segments
        self._active = rec.active
        self._tail = rec.tail
        self._next_lsn = rec.next_lsn
        self._next_seg = max(self._segments) + 1
        self._w_seg, self._w_end = rec.active.id, rec.tail
        self._recovered = True
        self.base_bytes = self.disk_bytes()
        return rec.keys, rec.report

    def open_directory(self) -> None:
        """Take the directory's lock now (``recover`` does it too); PersistError if another process holds it."""
        if self._lock_fd < 0:
            self._lock_fd = lock_directory(self.directory)

    def set_max_disk(self, max_disk: int) -> None:
        """The disk budget (0: none), and the limit past which it holds writers: ``max_disk`` and a margin of an
        eighth of it, at least ``HARD_LIMIT_SEGMENTS`` segments (``when_stored``)."""
        self.max_disk = max_disk
        margin = max(max_disk // 8, HARD_LIMIT_SEGMENTS * self.segment_size)
        self.hard_limit = max_disk + margin if max_disk else 0
        if self._held:  # CONFIG SET max-disk: held batches may go now
            self._check_disk()

    def set_appendfsync(self, policy: str) -> None:
        """CONFIG SET appendfsync: takes effect from the writer's next batch."""
        if policy not in ("always", "everysec", "no"):
            raise PersistError(f"appendfsync must be always, everysec or no (got {policy!r})")
        self.appendfsync = policy
        if self._writer is None:
            return
        self._writer.always = policy == "always"
        if policy == "everysec" and self._syncer is None:
            self._syncer = Syncer(self._writer, self._on_fsync_error, self.logger)
            self._syncer.start()
        elif policy != "everysec" and self._syncer is not None:
            self._syncer.stop_event.set()  # it exits after at most one fsync; no need to wait for it here
            self._syncer = None

    def start(self, loop: asyncio.AbstractEventLoop, owner: LogOwner) -> None:
        if not self._recovered:
            raise PersistError("SegmentLog.start() needs recover() first")
        assert self._active is not None
        self._loop = loop
        self._owner = owner
        self._disk_checked, self._appended_checked = self.disk_bytes(), self.appended_bytes
        self._maint = ThreadPoolExecutor(1, thread_name_prefix="kvd-aof-maint")
        for seg in self._segments.values():  # recovery collected their key hashes; the filters are built here
            if seg is not self._active:
                self._maint.submit(seg.set_keys.seal)
        self._readers = ThreadPoolExecutor(4, thread_name_prefix="kvd-aof-read")
        self._writer = Writer(
            self._active,
            self._tail,
            always=self.appendfsync == "always",
            post=loop.call_soon_threadsafe,
            maint=self._maint,
            log=self,
            logger=self.logger,
        )
        self._writer.latency = self._latency
        self._writer.start()
        if self.appendfsync == "everysec":
            self._syncer = Syncer(self._writer, self._on_fsync_error, self.logger)
            self._syncer.start()
        self._tick_handle = loop.call_later(TICK_INTERVAL, self._tick)

    def watch_latency(self, record: Callable[[str, float], None]) -> None:
        """Report each segment write and each ``always`` fsync, in seconds, to ``record`` (kvd/latency.py)."""
        self._latency = record
        if self._writer is not None:
            self._writer.latency = record

    # -- appends (loop thread) ---------------------------------------------------------------------------------

    def append_set(self, key: bytes, value: Value, expire_at_ms: int, before: Before) -> Location:
        """Log a SET; ``before``: the key's record and TTL until now, what it returns to if this write fails."""
        loc = self._append(SET, key, value, expire_at_ms, before=before)
        assert loc is not None
        return loc

    def append_delete(self, key: bytes, before: Before) -> None:
        self._append(DEL, key, b"", 0, before=before)

    def append_expire(self, key: bytes, expire_at_ms: int, before: Before) -> None:
        self._append(EXPIRE, key, b"", expire_at_ms, before=before)

    def append_flush(self, on_lost: Callable[[], None] = lambda: None) -> None:
        """Log a FLUSH: every older record is dead. The owner has emptied its index already; if the FLUSH is
        never written (refused, or its write fails), ``on_lost()`` puts the keys back (the older segments are
        unlinked only once it is durable) and the log's bookkeeping of them is restored first."""
        if self._refusing():
            self._append(FLUSH, b"", b"", 0)
            on_lost()  # now: the refused writes that follow it in this batch are undone after it (call_soon)
            return
        assert self._active is not None
        self.flushes += 1
        if self._tail > FILE_HDR_SIZE:
            self._roll()
        self._append(FLUSH, b"", b"", 0)
        older = [s for s in self._segments.values() if s.id < self._active.id and s.id not in self._retiring]
        marked = []
        for entry in self._inflight:  # records not yet written to the older segments are dead too
            loc = entry[10]
            if loc is not None and entry[2] < self._active.id and loc not in self._inflight_dead:
                self._inflight_dead.add(loc)
                marked.append(loc)
        self._flushes.append(_Flush(self.ticket, older, marked, on_lost))
        for seg in older:
            seg.live = 0
            self._retiring.add(seg.id)
        if self.job is not None:
            self.job.aborted = True

        def durable(ok: bool) -> None:
            if ok:
                self.retire(older)
            else:
                for seg in older:
                    self._retiring.discard(seg.id)

        self.sync_then(durable, strict=False)

    def mark_dead(self, loc: Location) -> None:
        seg_id, offset, record_len, _ = loc
        seg = self._segments.get(seg_id)
        if seg is None:
            return
        dead = self._inflight_dead
        if dead and loc in dead:  # (hashing a Location costs more than the test for an empty set)
            return
        live = seg.live - record_len
        seg.live = live if live > 0 else 0
        if seg_id > self._w_seg or (seg_id == self._w_seg and offset + record_len > self._w_end):
            dead.add(loc)  # not _written() yet (inline): remembered, so a failed write does not subtract it twice

    def _refusing(self) -> bool:
        return self._misconf is not None or self._closing

    def _append(
        self,
        rtype: int,
        key: bytes,
        value: Value,
        expire: int,
        lsn: int | None = None,
        carried_from: Location | None = None,
        before: Before | None = None,
    ) -> Location | None:
        if self._loop is None:
            raise PersistError("SegmentLog.start() has not been called")
        vlen = value.nbytes if type(value) is memoryview else len(value)
        if vlen > MAX_VALUE:
            raise PersistError(f"value too large for a segment record ({vlen} bytes)")
        rec_len = HDR_SIZE + len(key) + vlen
        self.ticket += 1
        if self._misconf is not None or self._closing:  # _refusing(), inline: this runs for every write
            self._failed_upto = self.ticket
            self.lost_records += 1
            # Undone at once (after the caller has applied it). Of several refused writes to a key, the first
            # says where it goes back to: the others' ``before`` is a refused write's void location.
            void = before is not None and before[0] is not None and before[0].segment == 0
            if before is not None and not void and self._owner is not None and not self._closing:
                self._loop.call_soon(self._undo, key, before)
            if rtype != SET:
                return None
            self._void += 1
            return Location(0, self._void, rec_len, vlen)
        if self._tail > FILE_HDR_SIZE and self._tail + rec_len > self.segment_size:
            self._roll()
        seg = self._active
        assert seg is not None
        offset = self._tail
        self._tail += rec_len
        seg.size = self._tail
        if lsn is None:
            lsn = self._next_lsn
            self._next_lsn += 1
        loc = None
        if rtype == SET:
            loc = _new_location(Location, (seg.id, offset, rec_len, vlen))  # Location(...) without its Python frame
            seg.live += rec_len
            seg.set_keys.add(hash(key))
        rec = (OP_REC, self.ticket, seg.id, offset, rtype, key, value, expire, lsn, rec_len, loc, carried_from, before)
        self._batch.append(rec)
        self._batch_bytes += rec_len
        self._inflight.append(rec)
        self._pending_bytes += rec_len
        self.appended_records += 1
        self.appended_bytes += rec_len
        if not self._submit_scheduled:  # _schedule_submit(), inline
            self._submit_scheduled = True
            self._loop.call_soon(self._submit)
        return loc

    def _schedule_submit(self) -> None:
        if not self._submit_scheduled:
            self._submit_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._submit)

    def _submit(self) -> None:
        self._submit_scheduled = False
        if self._batch and self._writer is not None:
            batch, self._batch = self._batch, []
            nbytes, self._batch_bytes = self._batch_bytes, 0
            if not self._writer.write_inline(batch, nbytes):
                self._writer.submit(batch)

    def _roll(self) -> None:
        assert self._active is not None
        new = Segment(self.directory, self._next_seg)
        self._next_seg += 1
        self._active.sealed = True
        self._segments[new.id] = new
        self._active = new
        self._tail = FILE_HDR_SIZE
        self._batch.append((OP_ROLL, new))
        self._schedule_submit()

    def sync_then(self, callback: Callable[[bool], None], strict: bool = True) -> None:
        """Call ``callback(ok)`` on the loop once everything appended so far is fsynced (sealed segments too).

        ``ok`` is False if that fsync failed, and (``strict``) also while the log holds a segment whose records
        an fsync failed to make durable (``fsync_lost``: the active segment's, a seal's, everysec's): after a
        failed fsync Linux may have dropped those pages, and a later fsync that succeeds says nothing of them.
        The seals and the writer's fsyncs report a failure before the callback runs (FIFO), so none that it
        depends on is missed. Not strict: the log's own jobs, which only need what they appended (compaction
        rewrites such a segment, FLUSHALL drops it)."""
        if strict:
            inner = callback

            def callback(ok: bool) -> None:
                inner(ok and not self.lost_fsync_segments())

        self._batch.append((OP_SYNC, callback))
        self._schedule_submit()

    def lost_fsync_segments(self) -> list[Segment]:
        """The segments still holding records a failed fsync covered (``fsync_lost``), oldest first; the set
        forgets those rewritten or retired since: what they held is elsewhere, fsynced."""
        lost = self.fsync_lost
        if not lost:
            return []
        lost.intersection_update(self._segments)
        return [s for s in (self._segments[key] for key in sorted(lost)) if s.id not in self._retiring]

    def durable(self, strict: bool = True) -> asyncio.Future[bool]:
        assert self._loop is not None
        fut: asyncio.Future[bool] = self._loop.create_future()

        def done(ok: bool) -> None:
            if not fut.done():
                fut.set_result(ok)

        self.sync_then(done, strict)
        return fut

    # -- barrier and writer reports (loop thread) --------------------------------------------------------------

    def when_written(self, waiter: Callable[[BaseException | None], None]) -> bool:
        """Call ``waiter(None)`` once everything appended so far is written (fsynced with ``always``), or
        ``waiter(error)`` if it never will be. False, without calling it, if that is already the case.

        The writer's report calls waiters directly, in ticket order: a batch written inline by the loop
        releases its clients' replies in the same callback, with no future and no extra loop iteration."""
        t = self.ticket
        if t <= self._done_ticket:
            return False
        assert self._loop is not None
        if t <= self._failed_upto:
            failed = PersistError(self._misconf or MISCONF_PREFIX + "write failed", self._done_ticket)
            self._loop.call_soon(waiter, failed)
        else:
            self._barriers.append((t, waiter))
        return True

    def when_stored(self, waiter: Callable[[BaseException | None], None]) -> bool:
        """``when_written`` for a client's batch of writes, with the disk budget's back-pressure: while the segment
        files are past ``hard_limit`` (``max_disk`` and a margin), the batch's replies wait, once written, until
        eviction has brought them back under it. The connection stops reading from a client whose replies wait,
        so writers cannot fill the disk faster than the budget retires segments; what they had sent already is
        what can pass the limit. Not while the log refuses writes (none are accepted then anyway)."""
        if not self._over_hard_limit():
            return self.when_written(waiter)
        self.budget_holds += 1

        def written(error: BaseException | None) -> None:
            if error is not None or not self._over_hard_limit():
                waiter(error)
            else:
                self._held.append(waiter)

        if not self.when_written(written):
            self._held.append(waiter)
        return True

    def _over_hard_limit(self) -> bool:
        """Whether the files are past ``hard_limit``: their size at the last check (``_check_disk``), plus what
        was appended since, which a check per batch would cost a sum over every segment to know."""
        if not self.hard_limit or self._misconf is not None or self._closing:
            return False
        return self._disk_checked + self.appended_bytes - self._appended_checked > self.hard_limit

    def _check_disk(self) -> None:
        """Measure the files again (each tick, and once retired segments are gone), and release the held
        batches if they are back under ``hard_limit``."""
        self._disk_checked = self.disk_bytes()
        self._appended_checked = self.appended_bytes
        held = self._held
        while held and not self._over_hard_limit():
            self._wake(held.popleft(), None)

    def barrier(self) -> asyncio.Future[None] | None:
        """``when_written`` as a future to await; None if there is nothing to wait for."""
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()

        def settle(error: BaseException | None) -> None:
            if fut.done():
                return
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

        return fut if self.when_written(settle) else None

    def _wake(self, waiter: Callable[[BaseException | None], None], error: BaseException | None) -> None:
        try:
            waiter(error)
        except Exception:  # one waiter's bug must not keep the others (later clients' replies) waiting
            self.logger.exception("a write barrier's waiter failed")

    @property
    def failures(self) -> int:
        """Records lost, write and fsync errors, failed seals so far: a replica's FACK stops at one (kvd/replica.py).
        ``sync_then`` fails while records a failed fsync covered are in the log (``fsync_lost``), not for records
        a write error lost (they were undone)."""
        w = self._writer
        return self.lost_records + self.seal_failures + (w.write_errors if w is not None else 0)

    @property
    def pending_bytes(self) -> int:
        """Bytes appended and not yet written: how far the writer is behind the keyspace."""
        return self._pending_bytes

    def misconf(self) -> str | None:
        return self._misconf

    @property
    def accepting(self) -> bool:
        """Whether an append now goes to disk: not refusing writes (``misconf``) and not closing."""
        return not self._refusing()

    def on_written(self, ticket: int, seg_id: int, end: int) -> None:
        """The writer's report: every record up to ``ticket`` is in the file, which ends at ``seg_id``@``end``.

        A batch the loop wrote inline reports at once, so it can overtake the thread's report of an earlier batch
        still waiting in the loop's queue; that one is then stale and ignored (tickets follow log positions)."""
        if ticket <= self._done_ticket:
            return
        self._w_seg, self._w_end = seg_id, end
        self._done_ticket = ticket
        moved = self._moved
        while moved and moved[0][0] <= ticket:
            moved.popleft()
        inflight = self._inflight
        dead = self._inflight_dead
        pending = self._pending_bytes
        while inflight and inflight[0][1] <= ticket:
            entry = inflight.popleft()
            pending -= entry[9]
            if dead and entry[10] is not None:
                dead.discard(entry[10])
        self._pending_bytes = pending
        flushes = self._flushes
        while flushes and flushes[0].ticket <= ticket:
            flushes.popleft()
        barriers = self._barriers
        while barriers and barriers[0][0] <= ticket:
            self._wake(barriers.popleft()[1], None)

    def on_failed(self, seg_id: int, good_end: int, text: str) -> None:
        message = MISCONF_PREFIX + text
        self._misconf = message
        inflight = self._inflight
        while inflight and (
            inflight[0][2] < seg_id or (inflight[0][2] == seg_id and inflight[0][3] + inflight[0][9] <= good_end)
        ):
            entry = inflight.popleft()
            self._pending_bytes -= entry[9]
            if entry[10] is not None:
                self._inflight_dead.discard(entry[10])
            self._done_ticket = max(self._done_ticket, entry[1])
        failed = list(inflight)
        inflight.clear()
        self._failed_upto = self.ticket
        self._batch = [op for op in self._batch if op[0] == OP_SYNC]  # unsent records can't be written either
        self._batch_bytes = 0
        # A lost FLUSH is undone first: the keys are back as they were when it was appended, the records before it
        # are then undone as any others. What came after it is gone with it (the owner's index is the one from
        # before it), so those records undo nothing; a later lost FLUSH only had that to empty.
        lost = [flush for flush in self._flushes if flush.ticket > self._done_ticket]
        self._flushes.clear()
        for flush in reversed(lost):
            flush.undo(self)
        flush_ticket = lost[0].ticket if lost else self.ticket + 1
        if lost:
            lost[0].on_lost()
        undo: dict[bytes, Before] = {}  # each key's state before the first of its lost writes
        copied: dict[Location, Location | None] = {}  # a lost copy made by compaction -> what it copied (None: gone)
        for _, ticket, sid, _, _, key, _, _, _, rec_len, loc, carried_from, before in failed:
            self._pending_bytes -= rec_len
            self.lost_records += 1
            after_flush = ticket > flush_ticket
            if before is not None and key not in undo and not after_flush:
                undo[key] = before
            if loc is None:
                continue
            seg = self._segments.get(sid)
            if seg is not None and loc not in self._inflight_dead:
                seg.live = max(0, seg.live - rec_len)
            self._inflight_dead.discard(loc)
            if carried_from is None:
                continue
            old = self._segments.get(carried_from.segment)
            if old is not None and old.id not in self._retiring:
                old.live += carried_from.record_len
                copied[loc] = carried_from
                if self._owner is not None:
                    self._owner.relocated(key, loc, carried_from)
            else:  # FLUSHALL or the disk budget retired the original: the key had no other copy
                copied[loc] = None
                if not after_flush:
                    undo.setdefault(key, (None, 0))
        for key, before in undo.items():
            loc = before[0]
            for _, moved in self._moved:  # copied by a rewrite in place while the write was in flight
                loc = moved.get(loc, loc)  # type: ignore[arg-type]
            if loc is not None and loc in copied:  # a later write replaced a lost copy: the original
                self._undo(key, (copied[loc], before[1]), counted=True)
            else:
                self._undo(key, (loc, before[1]))
        self._moved.clear()
        # Segments the loop rolled to but the writer never created are forgotten; the failed one stops at good_end.
        for sid in [s for s in self._segments if s > seg_id]:
            seg = self._segments.pop(sid)
            seg.close_fd()
        cur = self._segments.get(seg_id)
        if cur is not None:
            cur.size = good_end
            cur.sealed = True
            self._active = cur
        self._tail = good_end
        self._w_seg, self._w_end = seg_id, good_end
        err = PersistError(message, self._done_ticket)
        while self._barriers:
            t, waiter = self._barriers.popleft()
            self._wake(waiter, None if t <= self._done_ticket else err)
        if self.job is not None:
            self.job.aborted = True
        self.logger.error("%s; refusing writes until the disk accepts them again", message)
        self._schedule_probe()

    def note_moved(self, moved: dict[Location, Location]) -> None:
        """A rewrite in place copied these records (old place -> new) after their keys were written again. Until
        those writes are done, one that fails must send its key back to the copy, not to the file that is gone."""
        if moved and self._inflight:
            self._moved.append((self.ticket, moved))

    def _undo(self, key: bytes, before: Before, counted: bool = False) -> None:
        """Put a key whose writes were lost back as it was (``owner.undo``). The record it goes back to was made
        dead by the first of those writes: it is live again (``counted``: already, as a compaction's original)."""
        if self._owner is None or not self._owner.undo(key, before) or counted:
            return
        loc = before[0]
        assert loc is not None
        seg = self._segments.get(loc.segment)
        if seg is not None and seg.id not in self._retiring:
            seg.live += loc.record_len

    def _on_fsync_error(self, text: str, seg_key: int) -> None:
        self.on_fsync_lost(seg_key)  # the everysec fsync: what it covered stays in the file, acknowledged
        if self._misconf is None and not self._closing:
            self._batch.append((OP_FAIL, text))
            self._schedule_submit()

    def _schedule_probe(self) -> None:
        if self._probe_handle is None and self._loop is not None and not self._closing:
            self._probe_handle = self._loop.call_later(PROBE_INTERVAL, self._probe)

    def _probe(self) -> None:
        self._probe_handle = None
        if self._misconf is None or self._closing or self._writer is None:
            return
        self._probing = Segment(self.directory, self._next_seg)
        self._next_seg += 1
        self._writer.submit([(OP_PROBE, self._probing)])

    def on_probe(self, error: str | None, seg_id: int, end: int) -> None:
        new, self._probing = self._probing, None
        if error is not None:
            self.logger.warning("disk still refuses writes (%s); retrying in %.0f s", error, PROBE_INTERVAL)
            self._schedule_probe()
            return
        if new is not None and new.id == seg_id:
            new.size = end
            self._segments[new.id] = new
            self._active = new
            self._tail = end
        self._w_seg, self._w_end = seg_id, end
        self._done_ticket = self._failed_upto = self.ticket
        self._misconf = None
        self.logger.warning("writes to %s work again; accepting writes", self.directory)

    def seal_job(self, seg: Segment, data_len: int, hint: HintBuilder | None, unsynced: bool = True) -> None:
        """Runs in the maintenance thread (queued by the writer when a segment is done). ``unsynced``: the seal's
        fsync is the first of some of its records, so if it fails they may not be on disk (``fsync_lost``)."""
        ok = synced = True
        try:
            sync_segment(seg)
        except OSError as exc:
            ok = synced = False
            self.logger.warning("fsync of %s failed (%s): its records may not be on disk", seg.path.name, exc)
            if hint is not None:
                hint.abandon()
        else:
            try:
                seal_hint(seg, data_len, hint)
            except OSError as exc:
                ok = False
                self.logger.warning("sealing %s failed (%s): a restart will scan it", seg.path.name, exc)
        seg.set_keys.seal()  # before _on_sealed makes it a candidate: compaction then asks the filter
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._on_sealed, seg.id, ok, None if synced or not unsynced else seg.key)

    def on_fsync_lost(self, seg_key: int) -> None:
        seg = self._segments.get(seg_key)
        if seg is not None and seg_key not in self.fsync_lost:
            self.fsync_lost.add(seg_key)
            self.logger.error(
                "%s holds records a failed fsync may have left off the disk: SAVE and WAITAOF's local count fail "
                "until it is rewritten (maintenance does it once writes work again)",
                seg.path.name,
            )

    def _on_sealed(self, seg_id: int, ok: bool, lost_key: int | None = None) -> None:
        if not ok:
            self.seal_failures += 1
        if lost_key is not None:
            self.on_fsync_lost(lost_key)
        seg = self._segments.get(seg_id)
        if seg is not None and seg is not self._active and seg_id not in self._retiring:
            seg.ready = True

    def retire(self, segs: list[Segment]) -> asyncio.Future[None]:
        """Unlink segments (maintenance thread), then forget them; fds close once no read uses them."""
        assert self._loop is not None and self._maint is not None
        for seg in segs:
            self._retiring.add(seg.id)
            seg.ready = False

        def unlink() -> None:
            for seg in sorted(segs, key=lambda s: s.id):
                for path in (seg.hint_path, seg.path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            with contextlib.suppress(OSError):
                fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

        fut = self._loop.run_in_executor(self._maint, unlink)

        def forget(_: Any) -> None:
            for seg in segs:
                self._retiring.discard(seg.id)
                if self._segments.get(seg.key) is seg:
                    del self._segments[seg.key]
                seg.doomed = True
                self._maybe_close(seg)
            if (self.hard_limit or self._held) and not self._closing:
                self._check_disk()

        fut.add_done_callback(forget)
        return fut

    def _maybe_close(self, seg: Segment) -> None:
        if seg.doomed and seg.readers == 0 and not seg.closed:
            if self._readers is not None and not self._closed:
                seg.closed = True  # no new reads will start; close off the loop (freeing blocks can take a while)
                fd, seg.fd = seg.fd, -1
                self._readers.submit(os.close, fd)
            else:
                seg.close_fd()

    # -- reads -------------------------------------------------------------------------------------------------

    def _written(self, loc: Location) -> bool:
        return loc.segment < self._w_seg or (loc.segment == self._w_seg and loc.offset + loc.record_len <= self._w_end)

    async def read_value(self, key: bytes, loc: Location) -> bytes | bytearray:
        await self._until_written(loc)
        seg = self.pin(loc)
        if seg is None:
            self.corrupt_reads += 1
            raise CorruptRecord(f"segment {loc.segment} no longer holds {loc}")
        try:
            return await self.read_pinned(seg, key, loc)
        finally:
            self.unpin(seg)

    def pin(self, loc: Location) -> Segment | None:
        """Keep the segment that holds ``loc`` readable until ``unpin``: compaction or FLUSHALL may still unlink
        it, but its file stays open (and its disk space taken) while a pin holds it. None if no segment holds
        ``loc`` any more. A snapshot (``kvd/store/snapshot.py``) pins every value it has yet to read."""
        seg = self._segments.get(loc.segment)
        if seg is None or seg.fd < 0 or seg.closed or loc.offset + loc.record_len > seg.size:
            return None
        seg.readers += 1
        return seg

    def pin_all(self) -> dict[int, Segment]:
        """``pin`` every segment there is (by the key a ``Location`` names it with): what a snapshot needs to
        read any record the keyspace points at now, for one step per segment instead of one per key."""
        pinned = {}
        for key, seg in self._segments.items():
            if seg.fd >= 0 and not seg.closed:
                seg.readers += 1
                pinned[key] = seg
        return pinned

    def unpin(self, seg: Segment) -> None:
        seg.readers -= 1
        self._maybe_close(seg)

    async def read_pinned(self, seg: Segment, key: bytes, loc: Location) -> bytearray:
        """The value of the SET record at ``loc`` in ``seg``, which the caller has pinned."""
        await self._until_written(loc)
        assert self._loop is not None
        try:
            return await self._loop.run_in_executor(self._readers, _read_record, seg.fd, key, loc)
        except CorruptRecord:
            self.corrupt_reads += 1
            raise

    async def _until_written(self, loc: Location) -> None:
        while not self._written(loc):
            fut = self.barrier()
            if fut is None:
                break
            try:
                await fut
            except PersistError:
                self.corrupt_reads += 1
                raise CorruptRecord(f"record {loc} was never written: {self._misconf}") from None

    # -- maintenance -------------------------------------------------------------------------------------------

    def _tick(self) -> None:
        self._tick_handle = None
        if self._closing or self._loop is None:
            return
        try:
            if self.hard_limit or self._held:
                self._check_disk()
            self._start_job()
        finally:
            self._tick_handle = self._loop.call_later(TICK_INTERVAL, self._tick)

    def _start_job(self) -> None:
        assert self._loop is not None
        if self.job is None and self._misconf is None and self._loop.time() >= self.maint_resume_at:
            self.job = maintenance.pick_job(self)
            if self.job is not None:
                self.job_started_at = self._loop.time()
                task = self._loop.create_task(maintenance.run_job(self, self.job))
                self.job.task = task
                task.add_done_callback(self._job_done)

    def _job_done(self, task: asyncio.Task[None]) -> None:
        job, self.job = self.job, None
        failed = not task.cancelled() and task.exception() is not None
        if failed or (job is not None and not job.aborted):
            self._job_outcome(ok=not failed and not (job is not None and job.failed))
        if failed:
            self.logger.error("segment maintenance failed", exc_info=task.exception())
        elif not self._closing and self._loop is not None:
            # The next job starts now, not at the next tick: under a stream of overwrites, one job per tick
            # fell behind the segments the writer filled (with 1 MiB segments), and disk use grew.
            self._loop.call_soon(self._start_job)

    def _job_outcome(self, ok: bool) -> None:
        assert self._loop is not None
        self.last_job_seconds = int(self._loop.time() - self.job_started_at)
        self.last_job_ok = ok
        self.job_failures_in_a_row = 0 if ok else self.job_failures_in_a_row + 1
        if ok:
            self.base_bytes = self.disk_bytes()

    def rewrite(self) -> bool:
        """BGREWRITEAOF: compact every segment with dead bytes now (``maintenance.request_rewrite``); False if
        one is already pending."""
        started = maintenance.request_rewrite(self)
        if started and self._loop is not None:
            self._loop.call_soon(self._start_job)
        return started

    @property
    def rewrite_in_progress(self) -> bool:
        return self.rewrite_pending is not None

    def disk_bytes(self) -> int:
        return sum(s.size for s in self._segments.values())

    # -- shutdown ----------------------------------------------------------------------------------------------

    async def close(self) -> bool:
        """Write and fsync what is appended, stop the threads, close the files. True if every acknowledged record
        is durable; False if the final fsync failed (the log says which file): the last second's writes under
        ``everysec`` may then be lost by a power failure, though not by the process's exit."""
        if self._closed:
            return True
        if self._loop is None:  # recovered but never started
            self._close_files()
            return True
        self._closing = True
        for handle in (self._tick_handle, self._probe_handle):
            if handle is not None:
                handle.cancel()
        while self._held:  # written: only the disk budget held them
            self._wake(self._held.popleft(), None)
        job = self.job
        if job is not None and job.task is not None:
            job.aborted = True
            job.task.cancel()
            with contextlib.suppress(BaseException):
                await job.task
        assert self._writer is not None and self._maint is not None
        stopped: asyncio.Future[bool] = self._loop.create_future()
        self._submit()
        self._writer.submit([(OP_STOP, lambda ok: stopped.done() or stopped.set_result(ok))])
        durable = await stopped
        if self._syncer is not None:
            self._syncer.stop_event.set()
        await asyncio.to_thread(self._join_threads)
        err = PersistError(self._misconf or MISCONF_PREFIX + "log closed", self._done_ticket)
        while self._barriers:  # only possible after a failure
            self._wake(self._barriers.popleft()[1], err)
        self._close_files()
        return durable

    def _join_threads(self) -> None:
        assert self._writer is not None and self._maint is not None and self._readers is not None
        self._writer.join()
        if self._syncer is not None:
            self._syncer.join()
        self._maint.shutdown(wait=True)
        self._readers.shutdown(wait=True)

    def _close_files(self) -> None:
        self._closed = True
        for seg in self._segments.values():
            seg.close_fd()
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = -1

    # -- introspection -----------------------------------------------------------------------------------------

    def inject_fault(self, exc: OSError | None) -> None:
        """Test hook: make every write and fsync of the writer thread raise ``exc`` (None: stop)."""
        assert self._writer is not None
        self._writer.fault = exc

    def stats(self) -> dict[str, int | float | str]:
        w = self._writer
        live = sum(s.live for s in self._segments.values())
        disk = self.disk_bytes()
        return {
            "segments": len(self._segments),
            "active_segment": self._active.id if self._active is not None else 0,
            "disk_bytes": disk,
            "live_bytes": live,
            "dead_bytes": max(0, disk - live),
            "pending_bytes": self._pending_bytes,
            "appended_records": self.appended_records,
            "appended_bytes": self.appended_bytes,
            "write_batches": w.write_batches if w else 0,
            "writev_calls": w.writev_calls if w else 0,
            "slow_inline_writes": w.slow_inline_writes if w else 0,
            "bytes_written": w.bytes_written if w else 0,
            "fsyncs": w.fsyncs if w else 0,
            "last_fsync_ms_ago": int((time.monotonic() - w.last_fsync) * 1000) if w else 0,
            "delayed_fsyncs": self._syncer.delayed_fsyncs if self._syncer else 0,
            "compactions": self.compactions,
            "rewrites": self.rewrites_started,
            "compacted_bytes": self.compacted_bytes,
            "rewritten_bytes": self.rewritten_bytes,
            "disk_evictions": self.disk_evictions,
            "disk_budget_holds": self.budget_holds,
            "disk_budget_held": len(self._held),
            "corrupt_reads": self.corrupt_reads,
            "write_errors": w.write_errors if w else 0,
            "lost_records": self.lost_records,
            "aof_last_write_status": "err" if self._misconf else "ok",
            "rewrite_in_progress": 1 if self.job is not None or self.rewrite_in_progress else 0,
        }

    def redis_stats(self) -> dict[str, int | str]:
        """INFO persistence's aof_* fields by Redis's names, each the quantity of kvd's log closest to Redis's:
        a maintenance job (a compaction or a disk eviction) is a rewrite, the log's bytes on disk its size."""
        running = self.job is not None and self._loop is not None
        return {
            "aof_rewrite_in_progress": 1 if self.job is not None or self.rewrite_in_progress else 0,
            "aof_rewrite_scheduled": 1 if self.rewrite_in_progress and self.job is None else 0,
            "aof_last_rewrite_time_sec": self.last_job_seconds,
            "aof_current_rewrite_time_sec": int(self._loop.time() - self.job_started_at) if running else -1,
            "aof_last_bgrewrite_status": "ok" if self.last_job_ok else "err",
            "aof_rewrites": self.rewrites_started,
            "aof_rewrites_consecutive_failures": self.job_failures_in_a_row,
            "aof_last_write_status": "err" if self._misconf else "ok",
            "aof_current_size": self.disk_bytes(),
            "aof_base_size": self.base_bytes,
            "aof_pending_rewrite": 0,
            "aof_buffer_length": self._pending_bytes,
            "aof_pending_bio_fsync": 1 if self._syncer is not None and self._syncer.syncing else 0,
            "aof_delayed_fsync": self._syncer.delayed_fsyncs if self._syncer else 0,
        }


def _read_record(fd: int, key: bytes, loc: Location) -> bytearray:
    """Runs in the read pool: one preadv straight into the value's final buffer, then verification."""
    if loc.record_len != HDR_SIZE + len(key) + loc.value_len:
        raise CorruptRecord(f"location {loc} does not fit key of {len(key)} bytes")
    head = bytearray(HDR_SIZE)
    kbuf = bytearray(len(key))
    value = bytearray(loc.value_len)
    try:
        n = read_exact_into(fd, [memoryview(head), memoryview(kbuf), memoryview(value)], loc.offset)
    except OSError as exc:
        raise CorruptRecord(f"reading {loc} failed: {exc.strerror}") from None
    if n != loc.record_len:
        raise CorruptRecord(f"short read at {loc}: {n} bytes")
    fields = decode_header(head)
    if fields is None:
        raise CorruptRecord(f"bad record header at {loc}")
    rtype, klen, vlen, _expire, _lsn, csum = fields
    if rtype != SET or klen != len(key) or vlen != loc.value_len:
        raise CorruptRecord(f"record at {loc} is not a SET of this key")
    if kbuf != key:
        raise CorruptRecord(f"record at {loc} belongs to another key")
    h = xxhash.xxh3_64()
    h.update(kbuf)
    h.update(value)
    if h.intdigest() != csum:
        raise CorruptRecord(f"checksum mismatch at {loc}")
    return value
