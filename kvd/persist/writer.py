"""The writer thread: group commit, the fsync policies, and the error state.

The event loop never touches a file. ``SegmentLog`` assigns every record its location on the loop (the tail
offset is deterministic), collects all records appended during one loop iteration into one batch, and hands the
batch to this thread with a single lock/notify. The thread hashes each payload (xxh3, GIL released), builds the
44-byte header and writes ``[header, key, value]`` triples straight from the caller's buffers with ``pwritev``
(a 32 MiB value is never copied or joined), in chunks of IOV_MAX iovecs and resuming after partial writes.
Records with values up to ``SMALL_RECORD`` are instead packed back to back into one staging buffer (one iovec for
a run of them): per-record Python work and per-iovec kernel work, not bytes, are what small writes cost, and this
thread shares the GIL with the event loop. Where ``kvd/persist/_records.c`` is built, a whole run of them is packed
by one C call (``pack_run``), hint entries included; redis-benchmark ``-P 16`` SET with the log on measured 0.23x
-> 0.27x of redis-server with it (docs/benchmarks.md). Without it the same steps run here in Python.

Small batches skip the thread: with ``everysec``/``no``, a batch of records only, up to ``INLINE_BYTES``, that
finds this thread idle is written by the event loop itself (``write_inline``), as Redis writes its AOF buffer
before replying. A page-cache write of a few KiB costs less than the thread wake-up and the loop wake-up it
replaces; larger batches, segment rolls and every ``always`` batch (an fsync) still go through the thread, so
the loop never waits for the disk itself. If
the thread falls behind, every batch queued meanwhile is merged into the next write: the group commit widens
under load instead of queueing syscalls. Then it reports the last written ticket back to the loop, which
wakes the barrier's waiters (``SegmentLog.when_written``); a batch written inline reports at once.

fsync policies (what a reply means, since replies wait for the barrier):

* ``always``: one ``fdatasync`` per group commit, before the barrier resolves (a segment that rolls within the
  batch is fdatasync'ed before it is handed to the sealer). kill -9: nothing acknowledged is lost. Power loss:
  nothing acknowledged is lost, if the drive honours flushes.
* ``everysec``: the barrier resolves after ``write()``; a separate fsync thread fdatasyncs the active segment
  about once per second when it is dirty, so a slow disk never stalls appends (Redis instead postpones writes
  for up to 2 s). An fsync that takes over 2 s is counted in ``delayed_fsyncs`` and logged, like Redis' "fsync
  is taking too long". kill -9: nothing acknowledged is lost (the bytes are in the page cache). Power loss: up
  to ~1 s of acknowledged writes (~2 s+ if fsyncs are slow), never a torn record that recovery would accept.
* ``no``: the barrier resolves after ``write()``; the kernel writes back when it likes (~30 s dirty expiry).
  kill -9: nothing acknowledged is lost. Power loss: up to ~30 s of writes.

In every mode a sealed segment is fsynced once by the maintenance thread before its hint is written (so a hint
never describes bytes that are not durable), and new segment files are made durable with a directory fsync.

Errors (ENOSPC, EIO, ...). The failing segment is ``ftruncate``d back to the last good offset (the end of the
last acknowledged record; with ``always`` the last fsynced one), the thread enters the *failed* state and tells
the loop which ticket was the last good one. Everything queued behind the failure is dropped (the loop reports
those SETs lost to the keyspace and fails their barriers with ``MISCONF ...``). While failed the thread only
accepts *probes*: about once per second the loop asks it to open a fresh segment and write + fdatasync a PAD
record into it; when that works the old segment is sealed at its good length and appends resume in the new
one (a fresh segment keeps "sealed segments are immutable" true even if the failure hit mid-roll). An error
from the everysec fsync thread only puts the log in the refusing state: those bytes were already acknowledged,
and after a failed fsync Linux may have dropped the dirty pages, so nothing better than reporting is possible.
A segment whose records a failed fsync (this thread's, the fsync thread's or a seal's) leaves in the file is
reported (``on_fsync_lost``): ``SegmentLog.sync_then`` vouches for no sync while it holds them.

Fault injection for tests: set ``fault`` to an OSError and every write/fsync of this thread raises it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from xxhash import xxh3_64_intdigest

from .record import FILE_HDR_SIZE, HDR_SIZE, PAD, checksum, encode_file_header, encode_header
from .segment import HintBuilder, Segment, fsync_dir

try:
    from ._records import pack_run
except ImportError:  # pragma: no cover - no C compiler or no libxxhash-dev at install time
    pack_run = None

IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)
FLUSH_CHUNK = 64 << 20  # write out a batch every 64 MiB so memory pinned by pending iovecs stays bounded

SMALL_RECORD = 16 << 10  # values up to this size are copied into one staging buffer per write
PACK_LIMIT = 256 << 10  # bytes one pack_run call packs while holding the GIL (_records.c)
INLINE_BYTES = 1 << 20  # batches up to this size may be written by the event loop itself (write_inline)
INLINE_SLOW = 0.001  # an inline write slower than this (a journal commit, dirty-page throttling, a stalled disk)
STALL_BUDGET = 0.05  # ... is charged to a budget of this many seconds the loop may spend in slow writes ...
STALL_REFILL = 0.01  # ... which refills at this rate (1 % of the loop's time); an empty budget means the thread

OP_REC, OP_ROLL, OP_SYNC, OP_PROBE, OP_STOP, OP_FAIL = range(6)
PROBE_PAD = 4096  # the probe writes a real block, so "disk full" is noticed


def _new_hint(seg: Segment, logger: logging.Logger) -> HintBuilder | None:
    try:
        return HintBuilder(seg)
    except OSError as exc:  # the seal will walk the segment's headers instead
        logger.warning("cannot start the hint of %s (%s)", seg.path.name, exc)
        return None


def strerror(exc: OSError) -> str:
    return exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))


class Writer(threading.Thread):
    """Owns the active segment's file offset; see the module docstring."""

    def __init__(
        self,
        active: Segment,
        end: int,
        *,
        always: bool,
        post: Callable[..., Any],
        maint: Executor,
        log: SegmentLogHooks,
        logger: logging.Logger,
    ) -> None:
        super().__init__(name="kvd-aof-writer", daemon=True)
        self.cur = active
        self.end = end  # written (and, with always, fsynced) end of the active segment
        # The active segment's hint, built as records are written (segment.py); None where this writer did not
        # write the segment from its start (recovery continues one): its seal walks the headers instead.
        self.hint = _new_hint(active, logger) if end == FILE_HDR_SIZE else None
        self.synced_end = end
        self.always = always
        self.post = post  # loop.call_soon_threadsafe
        self.maint = maint
        self.hooks = log
        self.logger = logger
        self.cond = threading.Condition()
        self.queue: list[tuple[Any, ...]] = []
        self.busy = False  # a batch is being written (by this thread, or inline by the loop)
        self.stall_credit = STALL_BUDGET  # seconds of slow inline writes the loop can still absorb ...
        self.credit_at = time.monotonic()  # ... as of this time (see write_inline)
        self.slow_inline_writes = 0
        self.write_seconds = 0.0  # time spent in the kernel writing, all of it (write_inline looks at its part)
        self.failed = False
        self.fault: OSError | None = None
        self.stopped = False
        self.latency: Callable[[str, float], None] | None = None  # the latency monitor's add (kvd/latency.py)
        # counters (written here, read on the loop: plain ints are fine under the GIL)
        self.write_batches = 0
        self.writev_calls = 0
        self.bytes_written = 0
        self.fsyncs = 0
        self.write_errors = 0
        self.last_fsync = time.monotonic()

    # -- called on the loop ------------------------------------------------------------------------------------

    def submit(self, ops: list[tuple[Any, ...]]) -> None:
        with self.cond:
            self.queue.extend(ops)
            self.cond.notify()

    def write_inline(self, ops: list[tuple[Any, ...]], nbytes: int) -> bool:
        """Write a small batch of records on the calling thread (the event loop) if this thread is idle.

        What Redis does for every write (the AOF buffer is written before replies go out), and kvd only where it
        is cheap: ``everysec``/``no`` (no fsync on the loop), at most ``INLINE_BYTES``, records only (no segment
        roll, which creates a file and fsyncs a directory). It saves a thread wake-up and a loop wake-up per
        batch: for a client waiting on its reply, most of the cost of a small persisted write. Returns False
        (nothing done) when the batch must go through the thread.

        A write into the page cache can still block: ext4 makes a write wait while the journal commits (every
        5 s, and for each fsync), the kernel throttles dirty pages, a disk stalls. Measured under redis-benchmark
        ``-P 1``: a few writes of 1-20 ms in every 10 s, and the thread path costs about 50 % more CPU per request
        than the inline one (a wake-up each way, and replies one loop iteration later). So slow writes are
        charged to a budget instead of ending inline writing at the first one: the loop absorbs up to
        ``STALL_BUDGET`` seconds of them at once and ``STALL_REFILL`` of its time in the long run, and while the
        budget is spent every batch goes through the thread. A disk that stalls for seconds stalls the loop
        once, then keeps it off the disk until the budget has refilled."""
        if self.always or self.failed or nbytes > INLINE_BYTES:
            return False
        started = time.monotonic()
        waited = self.write_seconds
        credit = min(STALL_BUDGET, self.stall_credit + (started - self.credit_at) * STALL_REFILL)
        self.stall_credit, self.credit_at = credit, started
        if credit <= 0:
            return False
        for op in ops:
            if op[0] != OP_REC:
                return False
        with self.cond:
            if self.queue or self.busy:
                return False
            self.busy = True
        report = None
        try:
            report, _ = self._process(ops)
        except Exception:
            self.logger.exception("segment writer crashed")
            self._fail(OSError(errno.EIO, "internal writer error"), self.end)
        finally:
            with self.cond:
                self.busy = False
                if self.queue:
                    self.cond.notify()
        took = self.write_seconds - waited  # in the kernel: the Python part of a large batch is not a stall
        if took > INLINE_SLOW:
            self.slow_inline_writes += 1
            self.stall_credit -= took
            if self.stall_credit <= 0:
                self.logger.info(
                    "a %d-byte write took %.1f ms on the event loop, which has spent its budget for slow writes;"
                    " writing on the thread for about %.1f s",
                    nbytes,
                    took * 1000,
                    -self.stall_credit / STALL_REFILL,
                )
        if report is not None:  # reported now, in the caller's callback: no extra loop iteration
            self.hooks.on_written(*report)
        return True

    # -- the thread --------------------------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.queue or self.busy:  # busy: the loop is writing a batch inline
                    self.cond.wait()
                batch, self.queue = self.queue, []
                self.busy = True
            report = stop_cb = None
            try:
                report, stop_cb = self._process(batch)
            except Exception:  # a bug here must not silently stop persistence
                self.logger.exception("segment writer crashed")
                self._fail(OSError(errno.EIO, "internal writer error"), self.end)
            finally:
                with self.cond:
                    self.busy = False
            # Reported once this thread is idle again, so the writes that the released replies bring back can be
            # written inline (write_inline declines while this thread is busy).
            if report is not None:
                self.post(self.hooks.on_written, *report)
            if stop_cb is not None:
                self._finish(stop_cb)
                return

    def _pwritev(self, fd: int, bufs: list[memoryview], offset: int) -> int:
        if self.fault is not None:
            raise self.fault
        self.writev_calls += 1
        return os.pwritev(fd, bufs, offset)

    def _fdatasync(self, fd: int) -> None:
        if self.fault is not None:
            raise self.fault
        started = time.monotonic()
        os.fdatasync(fd)
        self.fsyncs += 1
        self.last_fsync = time.monotonic()
        if self.always and self.latency is not None:
            self.latency("aof-fsync-always", self.last_fsync - started)

    def _write_all(self, fd: int, bufs: list[memoryview], offset: int) -> None:
        started = time.monotonic()
        try:
            self._write_bufs(fd, bufs, offset)
        finally:
            took = time.monotonic() - started
            self.write_seconds += took
            if self.latency is not None:
                self.latency("aof-write", took)

    def _write_bufs(self, fd: int, bufs: list[memoryview], offset: int) -> None:
        i = 0
        while i < len(bufs):
            n = self._pwritev(fd, bufs[i : i + IOV_MAX], offset)
            if n <= 0:
                raise OSError(errno.EIO, "pwritev wrote nothing")
            offset += n
            while n:
                first = bufs[i]
                if n >= len(first):
                    n -= len(first)
                    i += 1
                else:  # partial write: resume inside this buffer
                    bufs[i] = first[n:]
                    n = 0

    def _process(
        self, batch: list[tuple[Any, ...]]
    ) -> tuple[tuple[int, int, int] | None, Callable[[bool], None] | None]:
        """Write a batch. Returns the report for the loop (last written ticket, segment, end) if it wrote records,
        and the stop callback if the batch ended with OP_STOP; the caller delivers both."""
        iov: list[memoryview] = []
        staged: bytearray | None = None  # small records packed back to back, not yet in iov
        pending = 0
        written_ticket = -1  # last ticket whose bytes are in the file
        stop_cb: Callable[[], None] | None = None
        syncing = False  # an OP_SYNC's fdatasync is under way

        def flush() -> None:
            nonlocal iov, pending, staged
            if staged is not None:
                iov.append(memoryview(staged))
                staged = None
            if iov:
                self._write_all(self.cur.fd, iov, self.end)
                self.end += pending
                self.bytes_written += pending
                iov, pending = [], 0

        i = -1
        n = len(batch)
        try:
            while i + 1 < n:
                i += 1
                op = batch[i]
                kind = op[0]
                if self.failed and kind not in (OP_PROBE, OP_STOP):
                    if kind == OP_SYNC:
                        self.post(op[1], False)
                    continue
                if kind == OP_REC and pack_run is not None:
                    # The run of small records from here, packed in C (_records.c); what it stops at (a large
                    # value, another op, a record out of place) is handled below as without it.
                    if staged is None:
                        staged = bytearray()
                    hint = self.hint
                    hint_buf = hint.buf if hint is not None and hint.fd >= 0 else None
                    nxt, ticket, added = pack_run(
                        batch, i, self.cur.id, self.end + pending, staged, hint_buf, SMALL_RECORD, PACK_LIMIT
                    )
                    if nxt > i:
                        pending += added
                        written_ticket = ticket
                        if hint_buf is not None:
                            hint.added(nxt - i, self.end + pending)
                        i = nxt - 1
                        if pending >= FLUSH_CHUNK:
                            flush()
                        continue
                    if not staged:
                        staged = None
                if kind == OP_REC:
                    _, ticket, seg_id, offset, rtype, key, value, expire, lsn = op[:9]  # 4 more for the loop
                    if seg_id != self.cur.id or offset != self.end + pending:
                        raise RuntimeError(f"record for {seg_id}@{offset} but tail is {self.cur.id}@{self.end}")
                    hint = self.hint
                    if type(value) is not memoryview and len(value) <= SMALL_RECORD:
                        # Small records are packed into one buffer: one hash call over key + value, and one
                        # iovec for a whole run of them instead of three each.
                        kv = key + value
                        if staged is None:
                            staged = bytearray()
                        staged += encode_header(rtype, len(key), len(value), expire, lsn, xxh3_64_intdigest(kv))
                        staged += kv
                        pending += HDR_SIZE + len(kv)
                        if hint is not None:
                            hint.add(rtype, key, offset, HDR_SIZE + len(kv), len(value), expire, lsn)
                        written_ticket = ticket
                        if pending >= FLUSH_CHUNK:
                            flush()
                        continue
                    if staged is not None:
                        iov.append(memoryview(staged))
                        staged = None
                    vmv = memoryview(value)
                    if vmv.format != "B" or vmv.ndim != 1:
                        vmv = vmv.cast("B")
                    header = encode_header(rtype, len(key), vmv.nbytes, expire, lsn, checksum(key, vmv))
                    iov.append(memoryview(header))
                    if key:
                        iov.append(memoryview(key))
                    if vmv.nbytes:
                        iov.append(vmv)
                    pending += HDR_SIZE + len(key) + vmv.nbytes
                    if hint is not None:
                        hint.add(rtype, key, offset, HDR_SIZE + len(key) + vmv.nbytes, vmv.nbytes, expire, lsn)
                    written_ticket = ticket
                    if pending >= FLUSH_CHUNK:
                        flush()
                elif kind == OP_ROLL:
                    flush()
                    self._roll(op[1])
                elif kind == OP_SYNC:
                    flush()
                    syncing = True
                    self._fdatasync(self.cur.fd)
                    syncing = False
                    self.synced_end = self.end
                    # The maintenance executor is FIFO: running the callback there means every seal (fsync +
                    # hint) queued before it has finished, so the whole log is durable up to this point.
                    cb = op[1]
                    self.maint.submit(self.post, cb, True)
                elif kind == OP_PROBE:
                    self._probe(op[1])
                elif kind == OP_STOP:
                    stop_cb = op[1]
                elif kind == OP_FAIL:  # the fsync thread failed: stop accepting writes until a probe works
                    flush()
                    raise OSError(errno.EIO, op[1])
            flush()
            if self.always and self.end > self.synced_end:
                self._fdatasync(self.cur.fd)
                self.synced_end = self.end
        except OSError as exc:
            if syncing and not self.always and self.end > self.synced_end:
                # The records it was to make durable stay in the file (acknowledged): not known to be on disk.
                self.post(self.hooks.on_fsync_lost, self.cur.key)
            self._fail(exc, self.synced_end if self.always else self.end)
            written_ticket = -1
            # What the failure skipped still needs an answer: a sync waiter (a compaction job, FLUSHALL's unlinks)
            # would wait forever, and a stop request would never stop this thread.
            for op in batch[max(i, 0) :]:
                if op[0] == OP_SYNC:
                    self.post(op[1], False)
                elif op[0] == OP_STOP:
                    stop_cb = op[1]
        if written_ticket < 0:
            return None, stop_cb
        self.write_batches += 1
        return (written_ticket, self.cur.id, self.end), stop_cb

    def _open_new(self, seg: Segment, pad: int = 0) -> int:
        """Create ``seg``'s file with its header (and a PAD record); returns its end offset."""
        fd = os.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            bufs = [memoryview(encode_file_header(seg.id))]
            end = FILE_HDR_SIZE
            if pad:
                body = bytes(pad - HDR_SIZE)
                bufs += [memoryview(encode_header(PAD, 0, len(body), 0, 0, checksum(b"", body))), memoryview(body)]
                end += pad
            self._write_all(fd, bufs, 0)
            if self.always or pad:
                self._fdatasync(fd)
            fsync_dir(seg.path.parent)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(seg.path)
            raise
        seg.fd = fd
        return end

    def _roll(self, new: Segment) -> None:
        old = self.cur
        if self.always and self.end > self.synced_end:
            self._fdatasync(old.fd)
            self.synced_end = self.end
        end = self._open_new(new)
        self.maint.submit(self.hooks.seal_job, old, self.end, self.hint, self.end > self.synced_end)
        self.cur, self.end, self.synced_end = new, end, end
        self.hint = _new_hint(new, self.logger)

    def _probe(self, new: Segment) -> None:
        if not self.failed:
            self.post(self.hooks.on_probe, None, self.cur.id, self.end)
            return
        try:
            end = self._open_new(new, pad=PROBE_PAD)
        except OSError as exc:
            self.post(self.hooks.on_probe, f"{strerror(exc)}", new.id, 0)
            return
        # its hint went with the failure
        self.maint.submit(self.hooks.seal_job, self.cur, self.end, None, self.end > self.synced_end)
        self.cur, self.end, self.synced_end = new, end, end
        self.hint = None  # starts with the probe's PAD record: the seal walks its headers
        self.failed = False
        self.post(self.hooks.on_probe, None, new.id, end)

    def _fail(self, exc: OSError, good_end: int) -> None:
        self.write_errors += 1
        with contextlib.suppress(OSError):
            os.ftruncate(self.cur.fd, good_end)
        self.end = good_end
        self.synced_end = min(self.synced_end, good_end)  # what the probe's seal is the first fsync of
        self.failed = True
        if self.hint is not None:  # it lists records that were cut off; the seal walks the headers instead
            self.hint.abandon()
            self.hint = None
        self.logger.error("writing segment %s failed: %s; truncated back to offset %d", self.cur.path, exc, good_end)
        self.post(self.hooks.on_failed, self.cur.id, good_end, strerror(exc))

    def _finish(self, cb: Callable[[bool], None]) -> None:
        # The last fsync, also of a segment a failed write cut back: what was acknowledged in it is made durable.
        # ok: every acknowledged record is on disk (what the stop reports, kvd/server.py).
        ok = True
        try:
            self._fdatasync(self.cur.fd)
        except OSError as exc:
            self.logger.error("final fsync of %s failed: %s", self.cur.path, exc)
            ok = False
        if ok and not self.failed:  # clean shutdown: the active segment gets its hint, so the restart reads no values
            self.maint.submit(self.hooks.seal_job, self.cur, self.end, self.hint, False)  # fsynced just above
            self.hint = None
        if self.hint is not None:
            self.hint.abandon()
            self.hint = None
        self.maint.submit(self.post, cb, ok)


class SegmentLogHooks:
    """What the writer calls back (through ``post``, so on the loop) or runs in the maintenance executor."""

    def on_written(self, ticket: int, seg_id: int, end: int) -> None: ...
    def on_failed(self, seg_id: int, good_end: int, text: str) -> None: ...
    def on_probe(self, error: str | None, seg_id: int, end: int) -> None: ...
    def seal_job(self, seg: Segment, data_len: int, hint: HintBuilder | None, unsynced: bool = True) -> None: ...
    def on_fsync_lost(self, seg_key: int) -> None: ...


class Syncer(threading.Thread):
    """appendfsync everysec: fdatasync the active segment about once per second when it is dirty."""

    def __init__(self, writer: Writer, on_error: Callable[[str, int], None], logger: logging.Logger) -> None:
        super().__init__(name="kvd-aof-fsync", daemon=True)
        self.writer = writer
        self.on_error = on_error
        self.logger = logger
        self.stop_event = threading.Event()
        self.delayed_fsyncs = 0
        self.syncing = False  # an fdatasync is under way (INFO aof_pending_bio_fsync)

    def run(self) -> None:
        w = self.writer
        while not self.stop_event.wait(1.0):
            seg, end = w.cur, w.end
            if end <= w.synced_end or seg.closed or w.failed:
                continue
            started = time.monotonic()
            self.syncing = True
            try:
                w._fdatasync(seg.fd)
            except OSError as exc:
                if exc.errno == errno.EBADF:  # the segment was compacted away meanwhile
                    continue
                w.write_errors += 1
                self.logger.error("background fsync of %s failed: %s", seg.path, exc)
                w.post(self.on_error, strerror(exc), seg.key)
                continue
            finally:
                self.syncing = False
            if w.cur is seg and w.synced_end < end:
                w.synced_end = end
            took = time.monotonic() - started
            if took > 2.0:
                self.delayed_fsyncs += 1
                self.logger.warning(
                    "Asynchronous AOF fsync is taking too long (%.1f s, disk is busy?). Writing the AOF buffer "
                    "without waiting for fsync to complete, this may slow down kvd.",
                    took,
                )
