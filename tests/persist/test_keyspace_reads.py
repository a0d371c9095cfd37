"""The keyspace's reads of values on disk, with the real segment log: a read whose record stops being the key's
while it is in flight (the key's write failed and was undone, compaction moved it and its copy failed) answers
the key's value as it is now, never null for a key that is there."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest
from persist_helpers import inject_fault, now_ms, settle, wait_for

from kvd.persist import PersistError, SegmentLog
from kvd.store.keyspace import Keyspace

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def _open(seg_dir: Path, maxmemory: int = 1 << 20) -> tuple[SegmentLog, Keyspace]:
    log = SegmentLog(seg_dir, segment_size=1 << 20)
    keys, _ = log.recover(now_ms())
    ks = Keyspace(maxmemory=maxmemory, seg_log=log)
    ks.restore(keys)
    log.start(asyncio.get_running_loop(), ks)
    return log, ks


async def test_a_read_of_a_write_that_fails_answers_the_value_the_key_goes_back_to(seg_dir: Path) -> None:
    log, ks = await _open(seg_dir)
    old = b"o" * 1000
    ks.set(b"k", old)
    await settle(log)
    ks._demote(ks.lookup(b"k"))  # on disk only
    inject_fault(log, ENOSPC)
    ks.set(b"k", b"n" * 600_000)  # more than half the RAM tier: on disk only, and its write will fail
    pending = ks.get(b"k")  # a read of that record, which waits for it to be written
    assert not isinstance(pending, bytes | bytearray)
    assert bytes(await pending) == old  # the write failed, the key went back to its previous record
    assert ks.stats.corrupt_reads == 0
    again = ks.get(b"k")
    assert bytes(again if isinstance(again, bytes | bytearray) else await again) == old
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    await log.close()


async def test_a_read_whose_task_starts_after_the_failure_is_reported(seg_dir: Path) -> None:
    """The same when the failure is reported before the read's task first runs (GET looks the key up, the task
    starts at the next step): the entry it was handed is a lost write's, with no record any more, which it must
    not take for a missing key (nor assert on)."""
    log, ks = await _open(seg_dir)
    old = b"o" * 1000
    ks.set(b"k", old)
    await settle(log)
    ks._demote(ks.lookup(b"k"))
    inject_fault(log, ENOSPC)
    ks.set(b"k", b"n" * 600_000)
    lost = ks.peek(b"k")
    fut = log.barrier()
    assert fut is not None
    with pytest.raises(PersistError):
        await fut
    assert lost.loc is None and ks.peek(b"k") is not lost  # undone: the key is at its previous record again
    assert bytes(await ks._load(b"k", lost)) == old
    assert ks.stats.corrupt_reads == 0
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    await log.close()
