"""The writer thread: ordered appends, group commit, the fsync policy and write-error handling.

The event loop never touches a file. It queues ``Op``s (records with their already-assigned offsets, segment
rolls, resets) and the writer thread drains the queue in batches: everything queued while the previous batch
was being written goes out in one ``os.writev`` (headers, keys and values as separate iovecs: a 32 MiB value
is never copied into a bigger buffer), followed by one ``fdatasync`` under ``appendfsync always``. That is
group commit: N clients writing at once pay for one system call and one flush, not N. Checksums are computed
here too, so hashing a large value never stalls the loop.

Under ``everysec`` a second thread fdatasyncs the active segment about once a second (on a dup'ed descriptor,
so a roll can close the original meanwhile); a flush that takes longer than 2 s is counted as delayed, as in
Redis. Under ``no`` the kernel decides.

Write errors (ENOSPC, EIO, a failed fsync): the batch is cut back with ``ftruncate`` to where it started, the
loop is told which records were lost, and every later op is refused until the loop sends ``RESET``: the loop
answers writes with ``-MISCONF`` meanwhile and probes with a PAD record once a second, so writes resume by
themselves when space is back.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .record import FILE_HEADER_SIZE, HEADER_SIZE, PAD, SET, encode_file_header, encode_header
from .segment import HintEntry, fsync_dir, segment_path, write_hint

ROLL, RESET, SYNC, STOP = 100, 101, 102, 103
IOV_MAX = 1024


@dataclass(slots=True)
class Op:
    lsn: int
    kind: int  # a record type from record.py, or ROLL / RESET / SYNC / STOP
    segment: int
    offset: int
    key: bytes = b""
    value: Any = b""
    expire_at: int = 0


Report = Callable[[str, tuple[Any, ...]], None]


class Writer:
    def __init__(self, directory: Path, appendfsync: str, report: Report) -> None:
        self.directory = directory
        self.appendfsync = appendfsync
        self._report = report  # called on the writer thread; must hand over to the loop itself
        self._cond = threading.Condition()
        self._queue: list[Op] = []
        self._fd = -1
        self._segment = 0
        self._offset = 0
        self._entries: list[HintEntry] = []
        self._failed = False
        self._dirty = False
        self._fd_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kvd-writer", daemon=True)
        self._fsync_thread = threading.Thread(target=self._fsync_loop, name="kvd-fsync", daemon=True)
        self._stopping = False
        self.write = os.writev  # replaced by tests to inject faults
        # counters, read by the loop for INFO (plain ints: torn reads are harmless)
        self.batches = 0
        self.records = 0
        self.bytes_written = 0
        self.fsyncs = 0
        self.delayed_fsyncs = 0
        self.last_fsync = time.time()
        self.write_errors = 0

    def open(self, segment: int, offset: int, entries: list[HintEntry], create: bool) -> None:
        """Adopt the active segment (recovered, already truncated) or create a fresh one."""
        path = segment_path(self.directory, segment)
        if create:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, encode_file_header(segment))
            os.fsync(fd)
            fsync_dir(self.directory)
            offset = FILE_HEADER_SIZE
        else:
            fd = os.open(path, os.O_WRONLY)
        os.lseek(fd, offset, os.SEEK_SET)
        self._fd, self._segment, self._offset, self._entries = fd, segment, offset, entries

    def start(self) -> None:
        self._thread.start()
        self._fsync_thread.start()

    def submit(self, op: Op) -> None:
        with self._cond:
            self._queue.append(op)
            if len(self._queue) == 1:
                self._cond.notify()

    def stop(self) -> None:
        """Drain, fsync, seal nothing (the active segment stays active), and join."""
        self.submit(Op(0, STOP, 0, 0))
        self._thread.join()
        self._stopping = True
        self._fsync_thread.join(timeout=5)

    # -- the writer thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                batch, self._queue = self._queue, []
            if self._process(batch):
                return

    def _process(self, batch: list[Op]) -> bool:
        iov: list[Any] = []
        ops: list[Op] = []
        start_offset = self._offset
        for op in batch:
            kind = op.kind
            if self._failed:
                if kind == RESET:
                    self._failed = False
                    os.lseek(self._fd, self._offset, os.SEEK_SET)
                    start_offset = self._offset
                elif kind == STOP:
                    self._close()
                    return True
                elif kind < ROLL:
                    self._report("failed", (op.lsn, op.lsn, [op], "writes are refused after an earlier error"))
                continue
            if kind < ROLL:
                if op.segment != self._segment or op.offset != self._offset:  # never happens unless a bug
                    raise RuntimeError(f"log out of order: {op.segment}:{op.offset} != {self._segment}:{self._offset}")
                header = encode_header(kind, op.key, op.value, op.expire_at)
                iov.append(header)
                if op.key:
                    iov.append(op.key)
                if len(op.value):
                    iov.append(op.value)
                size = HEADER_SIZE + len(op.key) + len(op.value)
                self._entries.append(HintEntry(kind, op.key, op.offset, size, len(op.value), op.expire_at))
                self._offset += size
                ops.append(op)
                continue
            if not self._flush(iov, ops, start_offset):
                continue
            iov, ops = [], []
            if kind == ROLL:
                try:
                    self._seal_and_open(op.segment)
                except OSError as exc:  # could not start the next segment: refuse writes, keep the old one
                    self.write_errors += 1
                    self._failed = True
                    marker = Op(op.lsn, PAD, self._segment, self._offset)
                    self._report("failed", (op.lsn, op.lsn, [marker], exc.strerror or str(exc)))
            elif kind == SYNC:
                self._sync()
                self._report("synced", (op.lsn, self._segment, self._offset))
            elif kind == STOP:
                self._sync()
                self._close()
                return True
            start_offset = self._offset
        self._flush(iov, ops, start_offset)
        return False

    def _flush(self, iov: list[Any], ops: list[Op], start_offset: int) -> bool:
        """Write one batch; report it written (after fsync for always) or failed. True if it was written."""
        if not ops:
            return not self._failed
        try:
            for i in range(0, len(iov), IOV_MAX):
                self._writev_all(iov[i : i + IOV_MAX])
            self._dirty = True
            if self.appendfsync == "always":
                self._sync()
        except OSError as exc:
            self.write_errors += 1
            self._failed = True
            self._offset = start_offset
            del self._entries[len(self._entries) - len(ops) :]
            try:
                os.ftruncate(self._fd, start_offset)
            except OSError:
                pass  # the next probe will fail again and keep us refusing writes
            self._report("failed", (ops[0].lsn, ops[-1].lsn, ops, exc.strerror or str(exc)))
            return False
        self.batches += 1
        self.records += len(ops)
        self.bytes_written += self._offset - start_offset
        self._report("written", (ops[-1].lsn, self._segment, self._offset))
        return True

    def _writev_all(self, iov: list[Any]) -> None:
        views = [memoryview(b).cast("B") for b in iov]
        while views:
            n = self.write(self._fd, views)
            while n and views:
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][n:]
                    n = 0

    def _sync(self) -> None:
        started = time.monotonic()
        os.fdatasync(self._fd)
        self._note_fsync(started)

    def _note_fsync(self, started: float) -> None:
        self.fsyncs += 1
        self.last_fsync = time.time()
        self._dirty = False
        if time.monotonic() - started > 2.0:
            self.delayed_fsyncs += 1

    def _seal_and_open(self, new_segment: int) -> None:
        """Seal the active segment (fsync, hint file) and start ``new_segment``."""
        old, size, entries, old_fd = self._segment, self._offset, self._entries, self._fd
        os.fdatasync(old_fd)
        with self._fd_lock:
            self.open(new_segment, 0, [], create=True)  # raises before touching the old one if it cannot
        os.close(old_fd)
        try:
            write_hint(self.directory, old, size, entries)
        except OSError as exc:  # a hint only speeds up recovery; without it the segment is scanned
            self._report("warning", (f"could not write the hint file of segment {old}: {exc.strerror}",))
        self._report("sealed", (old, size))

    def _close(self) -> None:
        with self._fd_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    # -- the everysec fsync thread ---------------------------------------------------------------------------

    def _fsync_loop(self) -> None:
        while not self._stopping and self._thread.is_alive():
            time.sleep(0.05)
            if self.appendfsync != "everysec" or not self._dirty or time.time() - self.last_fsync < 1.0:
                continue
            with self._fd_lock:
                if self._fd < 0:
                    continue
                fd = os.dup(self._fd)
            started = time.monotonic()
            try:
                self._dirty = False
                os.fdatasync(fd)
                self._note_fsync(started)
            except OSError:
                self._dirty = True
            finally:
                os.close(fd)


def pad_op(lsn: int, segment: int, offset: int) -> Op:
    return Op(lsn, PAD, segment, offset)


_ = SET
