"""Group commit, barrier semantics per fsync policy, write errors (MISCONF), directory checks and locking."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest
from persist_helpers import inject_fault, now_ms, open_log, reopen, settle, wait_for

from kvd.persist import PersistError, SegmentLog, maintenance
from kvd.persist.record import HDR_SIZE
from kvd.persist.saves import Saves
from kvd.persist.writer import STALL_BUDGET, STALL_REFILL


async def test_group_commit_one_batch_per_loop_iteration(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, appendfsync="always")
    await asyncio.sleep(0.05)
    before = log.stats()
    futures = []
    for i in range(1000):  # all in one loop iteration, like 1000 clients' pipelines
        owner.set(b"k%d" % i, b"v" * 100)
        futures.append(log.barrier())
    await asyncio.gather(*[f for f in futures if f is not None])
    after = log.stats()
    assert after["write_batches"] - before["write_batches"] == 1
    assert after["fsyncs"] - before["fsyncs"] == 1
    assert log.barrier() is None
    await log.close()


@pytest.mark.parametrize("policy", ["always", "everysec"])  # reported by the thread / by the inline write
async def test_pending_and_live_bytes_follow_the_records(seg_dir: Path, policy: str) -> None:
    """INFO's aof_pending_bytes counts appended records until the writer reports them (maintenance paces itself
    by it) and aof_live_bytes the records no later write has replaced."""
    log, owner, _ = await open_log(seg_dir, appendfsync=policy)
    await asyncio.sleep(0.05)
    values = {b"k%d" % i: b"v" * (100 + i) for i in range(50)}
    for key, value in values.items():
        owner.set(key, value)

    def size(items: dict[bytes, bytes]) -> int:
        return sum(HDR_SIZE + len(k) + len(v) for k, v in items.items())

    assert log.stats()["pending_bytes"] == size(values)  # nothing written yet: the batch leaves this iteration
    await settle(log)
    assert log.stats()["pending_bytes"] == 0
    for key in list(values)[:10]:  # overwrites: the first records of these keys die
        values[key] = b"w" * 10
        owner.set(key, values[key])
    await settle(log)
    stats = log.stats()
    assert stats["pending_bytes"] == 0 and stats["live_bytes"] == size(values)
    await log.close()


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
async def test_barrier_semantics(seg_dir: Path, policy: str) -> None:
    log, owner, _ = await open_log(seg_dir, appendfsync=policy)
    assert log.barrier() is None  # nothing appended yet
    await asyncio.sleep(0.05)
    fsyncs = log.stats()["fsyncs"]
    owner.set(b"k", b"v" * 1000)
    fut = log.barrier()
    assert fut is not None and not fut.done()
    await fut
    # Written before the barrier resolved: the bytes are in the file (a kill -9 now loses nothing).
    assert sum(p.stat().st_size for p in seg_dir.glob("*.seg")) >= 1000
    synced = log.stats()["fsyncs"] - fsyncs
    if policy == "always":
        assert synced >= 1
    else:
        assert synced == 0  # the reply did not wait for an fsync
    assert log.barrier() is None
    if policy == "everysec":
        await wait_for(lambda: log.stats()["fsyncs"] > fsyncs, timeout=3)
    await log.close()


async def test_an_inline_write_wakes_its_waiters_in_the_same_callback(seg_dir: Path) -> None:
    """A batch the loop writes itself releases its waiters there: no future, no extra loop iteration, so a
    persisted SET's reply is not held back by loop iterations that do nothing."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    await asyncio.sleep(0.05)
    assert not log.when_written(lambda error: None)  # nothing pending: nothing to wait for
    owner.set(b"k", b"v" * 100)
    woken: list[BaseException | None] = []

    def broken(error: BaseException | None) -> None:
        raise RuntimeError("a waiter's bug")

    assert log.when_written(broken)
    assert log.when_written(woken.append)
    assert woken == []
    await asyncio.sleep(0)  # one iteration: the submit callback writes the batch and wakes the waiters
    assert woken == [None]  # the broken waiter before it did not keep it waiting
    assert sum(p.stat().st_size for p in seg_dir.glob("*.seg")) >= 100
    await log.close()


async def test_a_stale_report_is_ignored(seg_dir: Path) -> None:
    """The thread's report of an earlier batch can arrive after an inline batch's report: it must not move the
    written position back (reads of the newer records would wait for a write that already happened)."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    owner.set(b"a", b"v" * 100)
    await log.barrier()
    first = (log._done_ticket, log._w_seg, log._w_end)
    owner.set(b"b", b"v" * 100)
    await log.barrier()
    second = (log._done_ticket, log._w_seg, log._w_end)
    assert second[0] > first[0] and second[2] > first[2]
    log.on_written(*first)  # late
    assert (log._done_ticket, log._w_seg, log._w_end) == second
    assert log.barrier() is None
    await log.close()


async def test_write_error_misconf_lost_and_resume(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    owner.set(b"before", b"b" * 5000, hot=False)
    await settle(log)
    inject_fault(log, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    owner.set(b"doomed", b"d" * 5000)
    fut = log.barrier()
    assert fut is not None
    with pytest.raises(PersistError) as info:
        await fut
    assert str(info.value) == "MISCONF Errors writing to the AOF file: No space left on device"
    assert log.misconf() == str(info.value)
    assert owner.undo_calls == [(b"doomed", (None, 0))]  # it had no record before: gone
    assert b"doomed" not in owner.entries
    assert log.stats()["aof_last_write_status"] == "err"
    assert bytes(await owner.get(b"before")) == b"b" * 5000  # reads keep working
    await asyncio.sleep(1.5)  # a probe fails while the fault lasts
    assert log.misconf() is not None
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    assert log.stats()["aof_last_write_status"] == "ok"
    owner.set(b"after", b"a" * 5000)
    await settle(log)
    log, owner, _ = await reopen(log)
    assert set(owner.entries) == {b"before", b"after"}
    assert bytes(await owner.get(b"after")) == b"a" * 5000
    assert bytes(await owner.get(b"before")) == b"b" * 5000
    await log.close()


async def test_lost_writes_change_nothing(seg_dir: Path) -> None:
    """An overwrite, a DEL, an EXPIRE and a PERSIST that fail to reach the disk put their keys back as they were:
    the record written before (read from disk), with its TTL. Several lost writes to one key go back to the state
    before the first. The live byte count is what it was, and a restart agrees with what was served."""
    log, owner, _ = await open_log(seg_dir, appendfsync="always")
    far = now_ms() + 3_600_000
    for key in (b"over", b"twice", b"gone", b"timed", b"kept"):
        owner.set(key, key * 1000, expire=far if key in (b"timed", b"kept") else 0, hot=False)
    await settle(log)
    live = {seg.id: seg.live for seg in log._segments.values()}
    inject_fault(log, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    owner.set(b"over", b"new" * 1000)
    owner.set(b"twice", b"1" * 1000)
    owner.expire(b"twice", far)
    owner.set(b"twice", b"2" * 1000)
    owner.delete(b"gone")
    owner.expire(b"timed", far + 60_000)
    owner.expire(b"kept", 0)
    owner.set(b"fresh", b"f" * 1000)
    with pytest.raises(PersistError, match="^MISCONF"):
        await log.barrier()
    assert {seg.id: seg.live for seg in log._segments.values()} == live
    assert set(owner.entries) == {b"over", b"twice", b"gone", b"timed", b"kept"}
    for key in (b"over", b"twice", b"gone", b"timed", b"kept"):
        assert bytes(await owner.get(key)) == key * 1000, key
    assert [owner.entries[k][1] for k in (b"over", b"twice", b"gone", b"timed", b"kept")] == [0, 0, 0, far, far]
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    log, owner, _ = await reopen(log)
    assert set(owner.entries) == {b"over", b"twice", b"gone", b"timed", b"kept"}
    for key in owner.entries:
        assert bytes(await owner.get(key)) == key * 1000, key
    await log.close()


async def test_a_lost_flush_changes_nothing(seg_dir: Path) -> None:
    """A FLUSH that fails to reach the disk is undone as any lost write: every key is back at its record, with its
    TTL (the older segments were not unlinked: that waits until the FLUSH is durable), the writes before it in the
    lost batch are undone too, those after it leave nothing, and the live byte counts are what they were, so
    compaction reclaims nothing that is live. A second lost FLUSH behind the first changes nothing either; a
    restart agrees, and a FLUSH that reaches the disk then empties everything."""
    log, owner, _ = await open_log(seg_dir, appendfsync="always", segment_size=64 << 10)
    far = now_ms() + 3_600_000
    keys = [b"k%d" % i for i in range(40)]  # 40 KiB in 64 KiB segments: a sealed one and the active one
    for key in keys:
        owner.set(key, key * 256, expire=far if key == b"k3" else 0, hot=key != b"k5")
    await settle(log)
    live = {seg.id: seg.live for seg in log._segments.values()}
    inject_fault(log, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    owner.set(b"k0", b"before the flush" * 100)
    owner.delete(b"k1")
    owner.flush()
    owner.set(b"k2", b"after the flush")
    owner.set(b"fresh", b"new")
    owner.flush()
    owner.set(b"k4", b"after the second flush")
    with pytest.raises(PersistError, match="^MISCONF"):
        await log.barrier()
    await asyncio.sleep(0)  # refused appends are undone by call_soon
    assert {seg.id: seg.live for seg in log._segments.values()} == live
    assert not log._retiring and not log._inflight_dead and not log._flushes
    assert set(owner.entries) == set(keys)
    for key in keys:
        assert bytes(await owner.get(key)) == key * 256, key
    assert [owner.entries[k][1] for k in (b"k3", b"k4")] == [far, 0]
    owner.flush()  # refused while the log is failing: undone at once
    assert set(owner.entries) == set(keys)
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    await asyncio.sleep(0.5)  # maintenance ticks: nothing of the older segments is dead, nothing is reclaimed
    assert {seg.id: seg.live for seg in log._segments.values() if seg.id in live} == live
    log, owner, _ = await reopen(log)
    assert set(owner.entries) == set(keys)
    for key in keys:
        assert bytes(await owner.get(key)) == key * 256, key
    owner.flush()
    await settle(log)
    log, owner, _ = await reopen(log)
    assert owner.entries == {}
    await log.close()


async def test_a_lost_write_made_during_a_rewrite_in_place_goes_back_to_the_copy(
    seg_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write appended while compaction rewrites its key's old segment in place, held by a busy writer until
    the rewrite is done, then lost: its ``Before`` names the old file, which is gone; the key must go back to the
    copy in the new file (it once pointed at the old file and every read failed)."""
    log, owner, _ = await open_log(seg_dir, appendfsync="always", segment_size=64 << 10)
    loop = asyncio.get_running_loop()
    held = [False]
    submit = log._submit

    def busy_writer() -> None:
        if held[0]:
            log._submit_scheduled = False
            return
        submit()

    monkeypatch.setattr(log, "_submit", busy_writer)
    rewrite = maintenance.rewrite

    def write_during_the_rewrite(*args: object) -> object:
        done = rewrite(*args)
        appended = threading.Event()

        def on_loop() -> None:
            held[0] = True
            owner.set(b"a0", b"NEW" * 100)  # its Before: a0's record in the segment being rewritten
            appended.set()

        loop.call_soon_threadsafe(on_loop)
        appended.wait(10)
        return done

    monkeypatch.setattr(maintenance, "rewrite", write_during_the_rewrite)
    for i in range(10):
        owner.set(b"a%d" % i, b"%d" % i * 2000, hot=False)
    for _ in range(24):  # one key overwritten: the first segment is mostly dead, rewritten in place
        owner.set(b"d", b"x" * 2000, hot=False)
    await settle(log)
    await wait_for(lambda: log.compactions >= 1 and log.job is None, timeout=20)
    inject_fault(log, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    held[0] = False
    submit()
    with pytest.raises(PersistError, match="^MISCONF"):
        await settle(log)
    loc = owner.entries[b"a0"][0]
    assert loc.segment in log._segments, loc
    assert bytes(await owner.get(b"a0")) == b"0" * 2000
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    log, owner, _ = await reopen(log)
    assert bytes(await owner.get(b"a0")) == b"0" * 2000
    await log.close()


async def test_write_error_always_policy(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, appendfsync="always")
    owner.set(b"a", b"1")
    await settle(log)
    inject_fault(log, OSError(errno.EIO, os.strerror(errno.EIO)))
    for i in range(10):
        owner.set(b"x%d" % i, b"2" * 100)
    with pytest.raises(PersistError, match="^MISCONF Errors writing to the AOF file: Input/output error$"):
        await log.barrier()
    assert len(owner.undo_calls) == 10
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    log, owner, _ = await reopen(log)
    assert set(owner.entries) == {b"a"}
    await log.close()


async def test_missing_directory_is_created(tmp_path: Path) -> None:
    log, _, _ = await open_log(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    await log.close()


def test_unusable_directory_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(PersistError) as info:
        SegmentLog(tmp_path / "file" / "sub").recover(0)
    assert "\n" not in str(info.value)


async def test_second_process_on_same_directory_fails(seg_dir: Path) -> None:
    log, _, _ = await open_log(seg_dir)
    with pytest.raises(PersistError, match="in use"):
        SegmentLog(seg_dir).recover(0)
    await log.close()
    again, _, _ = await open_log(seg_dir)  # the lock is released on close
    await again.close()


async def test_small_batches_stay_on_the_loop_while_slow_writes_fit_the_budget(seg_dir: Path) -> None:
    """everysec: a small batch that finds the writer idle is written by the loop itself (no thread hand-off).
    A write that stalls (simulated: the disk sleeps first) is charged to a budget: a short stall leaves the loop
    writing, stalls beyond the budget send batches through the writer thread until the budget refills."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    await asyncio.sleep(0.05)
    writer = log._writer
    real = writer._pwritev
    threads: list[int] = []
    stall = [0.0]

    def pwritev(fd: int, bufs: list, offset: int) -> int:  # the real write, on a disk that may stall first
        threads.append(threading.get_ident())
        if stall[0]:
            time.sleep(stall[0])
        return real(fd, bufs, offset)

    writer._pwritev = pwritev
    loop_thread = threading.get_ident()

    async def write(key: bytes, stall_s: float) -> int:
        stall[0] = stall_s
        owner.set(key, b"v" * 100)
        await log.barrier()
        return threads[-1]

    # (A real write on a busy machine can take over a millisecond too, so slow writes are counted from here.)
    assert await write(b"a", 0.0) == loop_thread
    slow = log.stats()["slow_inline_writes"]
    assert await write(b"b", STALL_BUDGET / 5) == loop_thread and log.stats()["slow_inline_writes"] > slow
    assert await write(b"c", 0.0) == loop_thread  # one short stall fits the budget: still on the loop
    assert await write(b"d", STALL_BUDGET) == loop_thread  # charged once it has happened ...
    assert await write(b"e", 0.0) != loop_thread  # ... and now the budget is spent: the writer thread did it
    writer.credit_at -= 10 * STALL_BUDGET / STALL_REFILL  # as if long enough had passed to refill the budget
    assert await write(b"f", 0.0) == loop_thread
    log, owner, _ = await reopen(log)
    assert {b"a", b"b", b"c", b"d", b"e", b"f"} <= set(owner.entries)  # all of them recovered from the segment
    await log.close()


async def test_a_failed_write_still_answers_the_sync_behind_it(seg_dir: Path) -> None:
    """A durability wait queued in the same batch as a write that fails gets False (it used to be dropped, and a
    compaction job or FLUSHALL's cleanup waiting on it hung for good)."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    owner.set(b"before", b"b" * 100)
    await settle(log)
    inject_fault(log, OSError(errno.EIO, os.strerror(errno.EIO)))
    owner.set(b"doomed", b"d" * 5000)
    durable = log.durable()  # the same loop iteration: the same batch as the failing record
    assert await asyncio.wait_for(durable, 5) is False
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    log, owner, _ = await reopen(log)
    assert set(owner.entries) == {b"before"}
    await log.close()


async def test_close_says_whether_the_log_ended_durable(seg_dir: Path) -> None:
    """``close`` is True when its last fsync worked, also on a log still refusing writes after a failure (the
    segment the failure cut back is fsynced: what was acknowledged in it is durable); False when that fsync
    fails, which the server turns into its exit status."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    owner.set(b"kept", b"k" * 5000)
    await settle(log)
    assert await log.close() is True

    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    inject_fault(log, OSError(errno.EIO, os.strerror(errno.EIO)))
    owner.set(b"doomed", b"d" * 5000)
    with pytest.raises(PersistError):
        await log.barrier()
    inject_fault(log, None)  # healed before a probe has run: the log still refuses writes
    assert log.misconf() is not None
    assert await log.close() is True

    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    assert set(owner.entries) == {b"kept"}
    owner.set(b"acknowledged", b"a" * 5000)
    await settle(log)
    inject_fault(log, OSError(errno.EIO, os.strerror(errno.EIO)))
    assert await log.close() is False


async def test_failures_count_lost_writes_and_failed_seals(seg_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``failures`` (what a replica's FACK stops at) grows with a segment whose seal failed, and with a write
    error and the records it lost. A seal whose fsync worked and whose hint failed loses nothing: ``sync_then``
    answers True; one whose fsync failed: False (the records may not be on disk), except to the log's own jobs,
    and True again once BGREWRITEAOF has rewritten those segments."""
    import kvd.persist.log as log_module

    def failing(*args: object) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(log_module, "seal_hint", failing)
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec", segment_size=64 << 10)
    assert log.failures == 0
    for i in range(40):  # past one segment: it rolls and is sealed
        owner.set(b"k%d" % i, b"v" * 4000)
    assert await log.durable()
    assert log.seal_failures >= 1 and log.failures == log.seal_failures and not log.fsync_lost
    monkeypatch.setattr(log_module, "sync_segment", failing)
    for i in range(40):
        owner.set(b"j%d" % i, b"v" * 4000)
    assert not await log.durable()  # the seals' fsyncs failed: those records may not be on disk
    assert not await log.durable()  # nor later, while the log holds them
    assert await log.durable(strict=False)
    assert log.fsync_lost
    monkeypatch.undo()
    assert log.rewrite()
    await wait_for(lambda: not log.rewrite_in_progress, timeout=10)
    assert await log.durable() and not log.fsync_lost  # rewritten, and fsynced, elsewhere
    assert all(owner.entries[b"j%d" % i][0] is not None for i in range(40))
    sealed = log.failures
    inject_fault(log, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    owner.set(b"doomed", b"d" * 5000)
    with pytest.raises(PersistError):
        await log.barrier()
    assert log.failures > sealed and log.lost_records >= 1
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    await log.close()


@pytest.mark.parametrize("synced_first", [False, True])
async def test_sync_then_fails_while_records_an_fsync_lost_stay(seg_dir: Path, synced_first: bool) -> None:
    """An everysec fsync that fails leaves the records it covered in the file (they were acknowledged), but after
    a failed fsync they may not be on disk: a later sync, once the disk works again, must not vouch for them
    (SAVE's error, WAITAOF's local 0) until a rewrite has copied them and fsynced the copy. Records fsynced
    before the failure are not in doubt: then the sync after the disk recovers succeeds."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    saves = Saves(log, time.time())  # SAVE (an error when False), BGSAVE and WAITAOF's local fsync
    owner.set(b"acknowledged", b"a" * 5000)
    await settle(log)
    if synced_first:
        assert await log.durable()
    log.maint_resume_at = float("inf")  # maintenance would rewrite the segment by itself (the test after this)
    inject_fault(log, OSError(errno.EIO, os.strerror(errno.EIO)))
    assert not await log.durable()
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    owner.set(b"after", b"b" * 5000)
    assert await saves.save() is synced_first and saves.last_ok is synced_first
    assert saves.changes_since_last_save() > 0 or synced_first  # WAITAOF's local count stays 0
    assert await log.durable() is synced_first
    assert await log.durable(strict=False)
    assert bool(log.fsync_lost) is not synced_first
    log.maint_resume_at = 0.0
    assert log.rewrite()
    await wait_for(lambda: not log.rewrite_in_progress, timeout=10)
    assert await log.durable() and await saves.save() and saves.changes_since_last_save() == 0
    await log.close()
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    assert set(owner.entries) == {b"acknowledged", b"after"}
    await log.close()


async def _durable_within(log: SegmentLog, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not await log.durable():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_lost_fsync_is_rewritten_without_bgrewriteaof(seg_dir: Path) -> None:
    """Once writes work again after a failed fsync, maintenance rewrites the segments in ``fsync_lost`` by itself
    (whatever their dead ratio): a strict sync succeeds again within a few seconds, with no BGREWRITEAOF, and
    every acknowledged key is intact after a reopen."""
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec", compaction_dead_ratio=0.9)
    for i in range(20):
        owner.set(b"k%d" % i, b"a" * 3000)
    await settle(log)
    inject_fault(log, OSError(errno.EIO, os.strerror(errno.EIO)))
    assert not await log.durable()
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)
    owner.set(b"after", b"b" * 3000)
    await settle(log)
    assert await _durable_within(log, 5)
    assert not log.rewrite_in_progress  # no BGREWRITEAOF: maintenance did it
    await log.close()
    log, owner, _ = await open_log(seg_dir, appendfsync="everysec")
    assert set(owner.entries) == {b"k%d" % i for i in range(20)} | {b"after"}
    for i in range(20):
        assert bytes(await log.read_value(b"k%d" % i, owner.entries[b"k%d" % i][0])) == b"a" * 3000
    assert bytes(await log.read_value(b"after", owner.entries[b"after"][0])) == b"b" * 3000
    await log.close()
