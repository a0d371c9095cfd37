"""SAVE, BGSAVE and LASTSAVE over the segment log.

kvd keeps no snapshot file: the log is the data. Redis's clients and tools still use SAVE and BGSAVE to make
what was written so far durable, and LASTSAVE to see when that last happened (backup scripts poll it after a
BGSAVE). Here a save is an fsync of everything appended so far, sealed segments included (``SegmentLog.durable``):
once it has completed, a crash or a power cut loses nothing that was acknowledged before it started, whatever
``appendfsync`` says; it fails while the log holds records an earlier failed fsync covered (``fsync_lost``).
It blocks no client (Redis's SAVE blocks the whole server; kvd's only its caller), and
saves asked for while one runs share the next one. With persistence off there is nothing to make durable, and
the commands say so.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .log import SegmentLog


class Saves:
    def __init__(self, seg_log: SegmentLog | None, started_at: float) -> None:
        self.log = seg_log
        self.last_save = int(started_at)  # as Redis: the start (what recovery loaded was on disk already)
        self.last_ok = True
        self.done = 0  # saves that completed (INFO rdb_saves)
        self.last_seconds = -1  # how long the last one took (rdb_last_bgsave_time_sec)
        self._started_at = 0.0
        self._records_at_save = _written_by_clients(seg_log) if seg_log is not None else 0
        self._running: asyncio.Future[bool] | None = None
        self._next: asyncio.Future[bool] | None = None

    @property
    def in_progress(self) -> bool:
        return self._running is not None

    def running_seconds(self) -> int:
        """How long the running save has taken, -1 if none runs (rdb_current_bgsave_time_sec)."""
        return int(time.monotonic() - self._started_at) if self._running is not None else -1

    def changes_since_last_save(self) -> int:
        return _written_by_clients(self.log) - self._records_at_save if self.log is not None else 0

    def save(self) -> asyncio.Future[bool]:
        """A future for a save that covers everything appended up to now: True once it is fsynced. A save
        already running may have started before some of it, so a request made meanwhile gets the next one."""
        assert self.log is not None
        if self._running is None:
            self._running = self._start()
            return self._running
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        return self._next

    def _start(self) -> asyncio.Future[bool]:
        assert self.log is not None
        records = _written_by_clients(self.log)
        self._started_at = time.monotonic()
        future = self.log.durable()
        future.add_done_callback(lambda f: self._done(f, records))
        return future

    def _done(self, future: asyncio.Future[bool], records: int) -> None:
        ok = _succeeded(future)
        self.last_ok = ok
        self.last_seconds = int(time.monotonic() - self._started_at)
        if ok:
            self.done += 1
            self.last_save = int(time.time())
            self._records_at_save = records
        self._running, waiting, self._next = None, self._next, None
        if waiting is not None:  # the requests that came during this save get one more, started now
            self._running = self._start()
            self._running.add_done_callback(lambda f: waiting.done() or waiting.set_result(_succeeded(f)))


def _succeeded(future: asyncio.Future[bool]) -> bool:
    return not future.cancelled() and future.result()


def _written_by_clients(seg_log: SegmentLog) -> int:
    """Records appended for clients' writes: compaction's copies are not changes (INFO rdb_changes_since_...)."""
    return seg_log.appended_records - seg_log.carried_records
