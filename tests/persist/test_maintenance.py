"""Compaction and the disk budget: space is reclaimed, every kept key stays readable and byte-identical,
deleted keys never come back, reads racing with compaction still work."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from persist_helpers import Owner, now_ms, open_log, reopen, settle, wait_for

from kvd.persist import CorruptRecord, SegmentLog, maintenance, record, segment
from kvd.persist import log as log_module
from kvd.persist.writer import STALL_BUDGET

SEG = 64 << 10


def _val(key: bytes, size: int, gen: int = 0) -> bytes:
    return random.Random(key + bytes([gen])).randbytes(size)


async def _check_all(owner: Owner, model: dict[bytes, bytes]) -> None:
    owner.demote_all()
    assert set(owner.entries) == set(model)
    for key, value in model.items():
        assert bytes(await owner.get(key)) == value, key


async def test_compaction_reclaims_dead_space(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, compaction_dead_ratio=0.5)
    model = {}
    for i in range(120):
        key = b"k%03d" % i
        model[key] = _val(key, 4000)
        owner.set(key, model[key], hot=i % 2 == 0)  # half the copies need a disk read
    for i in range(0, 120):
        if i % 5:  # overwrite 80 %: the old segments are now mostly dead
            key = b"k%03d" % i
            model[key] = _val(key, 4000, 1)
            owner.set(key, model[key], hot=False)
    await settle(log)
    written = log.stats()["disk_bytes"]
    await wait_for(lambda: log.stats()["compactions"] >= 3, timeout=20)
    await wait_for(lambda: log.stats()["disk_bytes"] < 0.75 * written, timeout=20)
    await _check_all(owner, model)
    log, owner, _ = await reopen(log, segment_size=SEG)
    await _check_all(owner, model)
    await log.close()


async def _compact_segment(
    log: SegmentLog, owner: Owner, model: dict[bytes, bytes], junk: list[bytes], tomb_file: Path, path: str
) -> Path:
    """Overwrite ``junk`` so that the segment holding it becomes mostly dead, fill the next one so that it is
    sealed, and wait until compaction has handled it: rewritten in place, or carried forward and retired."""
    for key in junk:
        model[key] = _val(key, 5000, 1)
        owner.set(key, model[key])
    for j in range(14):
        key = b"more%03d" % j
        model[key] = _val(key, 5000)
        owner.set(key, model[key])
    await settle(log)
    if path == "carry_forward":
        await wait_for(lambda: not tomb_file.exists(), timeout=20)
    else:
        await wait_for(lambda: log.stats()["rewritten_bytes"] > 0, timeout=20)
    return tomb_file


@pytest.mark.parametrize("path", ["in_place", "carry_forward"])
async def test_deleted_key_does_not_resurrect_after_compaction(
    seg_dir: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "carry_forward":  # survivors of less than a whole segment are carried, not rewritten in place
        monkeypatch.setattr(maintenance, "IN_PLACE_FRACTION", 1)
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, compaction_dead_ratio=0.5)
    model: dict[bytes, bytes] = {}
    far = now_ms() + 3_600_000
    for key in (b"victim", b"phoenix", b"ttl"):
        owner.set(key, _val(key, 200))
        model[key] = _val(key, 200)
    first = owner.entries[b"victim"][0].segment
    i = 0
    while True:  # fill the first segment with live data so it is never compacted
        key = b"keep%03d" % i
        model[key] = _val(key, 5000)
        if owner.set(key, model[key]).segment != first:
            break
        i += 1
    owner.delete(b"victim")
    del model[b"victim"]
    owner.delete(b"phoenix")
    owner.expire(b"ttl", far)
    junk = [b"junk%03d" % j for j in range(14)]
    for key in junk:
        owner.set(key, _val(key, 5000))
    tomb_seg = owner.entries[junk[0]][0].segment
    owner.set(b"phoenix", _val(b"phoenix", 300, 2))  # re-created after its DEL
    model[b"phoenix"] = _val(b"phoenix", 300, 2)
    tomb_file = await _compact_segment(log, owner, model, junk, seg_dir / f"{tomb_seg:010d}.seg", path)
    if path == "in_place":  # the tombstones and the live records stay where they are, in a file of their own
        assert tomb_file.stat().st_size < SEG // 2
    assert (seg_dir / f"{first:010d}.seg").exists()
    await _check_all(owner, model)
    for _ in range(2):
        log, owner, _ = await reopen(log, segment_size=SEG, compaction_dead_ratio=0.5)
        assert b"victim" not in owner.entries
        assert owner.entries[b"ttl"][1] == far
        await _check_all(owner, model)
    await log.close()


@pytest.mark.parametrize("path", ["in_place", "carry_forward"])
async def test_tombstones_without_an_older_set_are_dropped(
    seg_dir: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys SET and deleted within one segment: once it is compacted, nothing older can hold them, so their DEL
    records go. An older segment exists, so each drop is the key filter's answer (keyfilter.py), not an empty
    list; its false positives (about 1.4 % per key) may keep a few."""
    if path == "carry_forward":
        monkeypatch.setattr(maintenance, "IN_PLACE_FRACTION", 1)
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, compaction_dead_ratio=0.5)
    model: dict[bytes, bytes] = {}
    owner.set(b"anchor", _val(b"anchor", 200))
    model[b"anchor"] = _val(b"anchor", 200)
    first = owner.entries[b"anchor"][0].segment
    i = 0
    while True:  # an older segment full of live data, never compacted
        key = b"keep%03d" % i
        model[key] = _val(key, 5000)
        if owner.set(key, model[key]).segment != first:
            break
        i += 1
    gone = [b"gone%02d" % j for j in range(20)]
    for key in gone:
        owner.set(key, _val(key, 200))
    tomb_seg = owner.entries[gone[0]][0].segment
    for key in gone:
        owner.delete(key)
    junk = [b"junk%03d" % j for j in range(12)]
    for key in junk:
        owner.set(key, _val(key, 5000))
    await _compact_segment(log, owner, model, junk, seg_dir / f"{tomb_seg:010d}.seg", path)
    await settle(log)
    deletes = 0
    for seg_file in sorted(seg_dir.glob("*.seg")):
        data = seg_file.read_bytes()
        deletes += sum(r.rtype == record.DEL for r in record.scan(data, record.FILE_HDR_SIZE, len(data)).records)
    assert deletes <= 5, f"{deletes} of 20 tombstones kept with no older SET of their keys"
    await _check_all(owner, model)
    log, owner, _ = await reopen(log, segment_size=SEG, compaction_dead_ratio=0.5)
    assert not set(gone) & set(owner.entries)
    await _check_all(owner, model)
    # The recovered segments' filters are built again (their hashes are salted per process): the oldest one holds
    # every key it held before, and, once its filter is in, few of 50 keys it never held.
    oldest = log._segments[first].set_keys
    never = [hash(b"never%02d" % j) for j in range(50)]
    await wait_for(lambda: sum(h in oldest for h in never) <= 10, timeout=10)
    assert all(hash(key) in oldest for key in [b"anchor", *(b"keep%03d" % j for j in range(i))])
    await log.close()


async def test_disk_budget(seg_dir: Path) -> None:
    budget = 4 * SEG
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, max_disk=budget)
    model = {}
    hot_keys = set()
    for i in range(80):
        key = b"k%03d" % i
        model[key] = _val(key, 8000)
        hot = i % 8 == 0
        owner.set(key, model[key], hot=hot)
        if hot:
            hot_keys.add(key)
        if i % 10 == 9:
            await settle(log)
    await settle(log)
    await wait_for(lambda: log.stats()["disk_bytes"] <= budget, timeout=20)
    assert log.stats()["disk_evictions"] > 0
    dropped = {k for k, _ in owner.dropped_calls}
    assert not dropped & hot_keys  # RAM-resident values were carried forward, not dropped
    assert hot_keys <= set(owner.entries)
    kept = {k: v for k, v in model.items() if k in owner.entries}
    assert set(kept) == set(model) - dropped
    for key, value in kept.items():
        assert bytes(await owner.get(key)) == value
    log, owner, _ = await reopen(log, segment_size=SEG, max_disk=budget)
    assert set(owner.entries) <= set(kept)
    assert hot_keys <= set(owner.entries)
    for key in owner.entries:
        assert bytes(await owner.get(key)) == model[key]
    await log.close()


async def test_the_disk_budget_retires_as_many_oldest_segments_as_needed_in_one_job(seg_dir: Path) -> None:
    """One job per segment (each waiting for durability) fell behind a writer filling small segments: a job now
    retires the oldest segments that bring the files back under the budget, up to EVICT_BATCH."""
    budget = 4 * SEG
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, max_disk=budget)
    log.maint_resume_at = float("inf")  # no job starts by itself until the files are written
    model = {}
    for i in range(100):
        key = b"k%03d" % i
        model[key] = _val(key, 8000)
        owner.set(key, model[key], hot=i >= 95)
    await settle(log)
    await wait_for(lambda: sum(s.ready for s in log._segments.values()) == len(log._segments) - 1)
    over = log.disk_bytes() - budget
    job = maintenance.pick_job(log)
    assert job is not None and job.mode == "evict"
    victims = [job.seg, *job.more]
    assert len(victims) > 1
    assert [s.id for s in victims] == sorted(s.id for s in log._segments.values())[: len(victims)]
    assert sum(s.size for s in victims[:-1]) < over <= sum(s.size for s in victims)
    log.maint_resume_at = 0.0
    await wait_for(lambda: log.disk_bytes() <= budget, timeout=20)
    assert log.stats()["disk_evictions"] > 0
    assert {b"k%03d" % i for i in range(95, 100)} <= set(owner.entries)  # in RAM: carried forward
    for key in owner.entries:
        assert bytes(await owner.get(key)) == model[key]
    await log.close()


async def test_a_batch_past_the_hold_limit_waits_for_eviction(seg_dir: Path) -> None:
    """when_stored: a client batch written while the files are past max-disk and its margin is answered once
    eviction brings them back under it (here: once the budget is lifted; with it, once segments are retired)."""
    budget = 4 * SEG
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, max_disk=budget)
    assert log.hard_limit == budget + log_module.HARD_LIMIT_SEGMENTS * SEG
    log.maint_resume_at = float("inf")  # no eviction for now
    for i in range(120):
        owner.set(b"k%03d" % i, _val(b"k%03d" % i, 8000), hot=False)
    await settle(log)
    released: list[BaseException | None] = []
    owner.set(b"x", b"v")
    assert log.when_stored(released.append)
    await asyncio.sleep(0.3)  # written, and a few ticks: still past the limit
    assert released == [] and log.stats()["disk_budget_held"] == 1
    log.set_max_disk(0)  # CONFIG SET max-disk 0: nothing to wait for
    assert released == [None] and log.stats()["disk_budget_holds"] == 1
    log.set_max_disk(budget)
    owner.set(b"y", b"v")
    assert log.when_stored(released.append)
    log.maint_resume_at = 0.0  # eviction runs: the batch goes once the files are back under the limit
    await wait_for(lambda: len(released) == 2, timeout=20)
    assert released[1] is None and log.disk_bytes() <= log.hard_limit
    await log.close()


@pytest.mark.parametrize("path", ["in_place", "carry_forward"])
async def test_reads_race_with_compaction(seg_dir: Path, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers hammer the survivors while their segments are compacted. In place, the keyspace moves over a
    few keys per loop iteration here, so reads land on both files while both are registered."""
    if path == "carry_forward":
        monkeypatch.setattr(maintenance, "IN_PLACE_FRACTION", 1)
    else:
        monkeypatch.setattr(maintenance, "SCAN_YIELD_EVERY", 2)
    log, owner, _ = await open_log(seg_dir, segment_size=4 << 20, compaction_dead_ratio=0.3)
    model = {}
    for i in range(24):
        key = b"big%02d" % i
        model[key] = _val(key, 1 << 20)
        owner.set(key, model[key], hot=False)
    for i in range(0, 24, 2):  # half dead everywhere
        owner.delete(b"big%02d" % i)
        del model[b"big%02d" % i]
    errors: list[BaseException] = []
    reads = 0
    stop = asyncio.Event()

    async def reader(key: bytes) -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                got = await owner.get(key)
            except CorruptRecord as exc:
                errors.append(exc)
                return
            assert bytes(got) == model[key]
            reads += 1

    tasks = [asyncio.create_task(reader(k)) for k in model]
    await wait_for(lambda: log.stats()["compactions"] >= 2, timeout=30)
    await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*tasks)
    assert not errors
    assert reads > len(model)
    assert (log.stats()["rewritten_bytes"] > 0) == (path == "in_place")
    await log.close()


async def test_flushall_frees_disk(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    for i in range(50):
        owner.set(b"k%d" % i, _val(b"k", 5000))
    await settle(log)
    owner.flush()
    owner.set(b"new", b"n")
    await settle(log)
    # the files go first, the bookkeeping a moment later (the unlink runs off the loop)
    await wait_for(lambda: len(list(seg_dir.glob("*.seg"))) <= 2 and log.stats()["disk_bytes"] < SEG, timeout=10)
    log, owner, _ = await reopen(log, segment_size=SEG)
    assert set(owner.entries) == {b"new"}
    await log.close()


async def test_cold_survivors_are_copied_once_not_at_every_generation(seg_dir: Path) -> None:
    """Values that stay live next to a stream of overwrites: compaction rewrites their segment in place once,
    then leaves them alone; later segments die whole and the cold values are not copied again at each of them
    (appended among new writes, as kvd once did, they were)."""
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, compaction_dead_ratio=0.5)
    model = {}
    for i in range(6):  # 18 KB of cold values in the first segment, far above SEG / IN_PLACE_FRACTION
        key = b"cold%d" % i
        model[key] = _val(key, 3000)
        owner.set(key, model[key])
    homes: dict[bytes, set[int]] = {key: {owner.entries[key][0].segment} for key in model}

    def compacted() -> bool:  # no job running and no candidate left
        sealed = [s for s in log._segments.values() if s is not log._active and s.id not in log._retiring]
        return log.job is None and all(s.ready and s.dead_ratio() < 0.5 for s in sealed)

    for gen in range(8):  # each round overwrites more than a segment's worth, then lets compaction finish
        for j in range(20):
            key = b"hot%d" % (j % 2)
            model[key] = _val(key, 4000, gen * 20 + j)
            owner.set(key, model[key])
        await settle(log)
        await wait_for(compacted, timeout=20)
        for key in homes:
            homes[key].add(owner.entries[key][0].segment)
    assert all(len(segs) <= 2 for segs in homes.values()), homes  # moved once at most, then left alone
    await _check_all(owner, model)
    log, owner, _ = await reopen(log, segment_size=SEG)
    await _check_all(owner, model)
    await log.close()


def _rewrite_leftovers(directory: Path) -> list[Path]:
    """A rewrite's temporary files (the active segment's ``.hint.part.tmp`` is the writer's, and expected)."""
    return [*directory.glob("*.seg.tmp"), *directory.glob("*.hint.tmp")]


async def _one_dead_segment(seg_dir: Path, **kwargs: object) -> tuple[SegmentLog, Owner, dict[bytes, bytes], int]:
    """A log whose first segment holds cold keys, a deleted key and overwritten keys: about 70 % dead, a
    candidate for a rewrite in place. Returns (log, owner, model, the first segment's id)."""
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, **kwargs)
    model: dict[bytes, bytes] = {}
    for i in range(12):
        key = b"k%02d" % i
        model[key] = _val(key, 4000)
        owner.set(key, model[key], hot=i % 2 == 0)
    first = owner.entries[b"k00"][0].segment
    owner.delete(b"k01")
    del model[b"k01"]
    for i in range(2, 10):
        key = b"k%02d" % i
        model[key] = _val(key, 4000, 1)
        owner.set(key, model[key])
    for j in range(16):  # the overwrites and these roll the first segment, which is then sealed
        key = b"fill%02d" % j
        model[key] = _val(key, 4000)
        owner.set(key, model[key])
    await settle(log)
    return log, owner, model, first


async def test_a_crash_at_any_step_of_a_rewrite_loses_nothing(seg_dir: Path, tmp_path: Path) -> None:
    """Snapshot the directory before and after each rename/unlink of the rewrite (what a crash at that moment
    leaves on disk), then recover every snapshot: each holds exactly the data, and no temporary file survives."""
    log, owner, model, first = await _one_dead_segment(seg_dir, compaction_dead_ratio=0.5)
    stem = f"{first:010d}."
    snapshots: list[Path] = []
    real_replace, real_unlink = os.replace, os.unlink

    def snap() -> None:
        dest = tmp_path / f"crash{len(snapshots)}"
        shutil.copytree(seg_dir, dest, ignore=shutil.ignore_patterns("LOCK"))
        snapshots.append(dest)

    rewriting = threading.Event()  # only the rewrite's own steps (the segment's seal renames its hint too)

    def hooked(real: Callable[..., None]) -> Callable[..., None]:
        def step(*args: Any, **kw: Any) -> None:
            mine = rewriting.is_set() and Path(args[0]).name.startswith(stem)
            if mine:
                snap()
            real(*args, **kw)
            if mine:
                snap()

        return step

    def traced_rewrite(*args: Any) -> Any:
        rewriting.set()
        try:
            return real_rewrite(*args)
        finally:
            rewriting.clear()

    real_rewrite = maintenance.rewrite
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(segment.os, "replace", hooked(real_replace))
        mp.setattr(segment.os, "unlink", hooked(real_unlink))
        mp.setattr(maintenance, "rewrite", traced_rewrite)
        await wait_for(lambda: log.stats()["rewritten_bytes"] > 0, timeout=20)
        await wait_for(lambda: log.job is None, timeout=20)
    # unlink hint, replace segment, replace hint: a snapshot before and after each
    assert len(snapshots) == 6, snapshots
    assert (seg_dir / f"{stem}seg").stat().st_size < SEG // 2
    await _check_all(owner, model)
    await log.close()
    for snapshot in [*snapshots, seg_dir]:
        log, owner, _ = await open_log(snapshot, segment_size=SEG)
        assert list(snapshot.glob("*.part.tmp")) == [], snapshot  # the crashed writer's hint in progress, too
        assert not _rewrite_leftovers(snapshot), snapshot
        await _check_all(owner, model)
        await log.close()


async def test_flushall_during_a_rewrite(seg_dir: Path) -> None:
    """FLUSHALL while the survivors are being copied: the rewrite is abandoned or its file unlinked with the
    rest, and nothing from before the FLUSHALL comes back."""
    log, owner, _, first = await _one_dead_segment(seg_dir, compaction_dead_ratio=0.5)
    entered, release = threading.Event(), threading.Event()
    real = maintenance.rewrite

    def slow_rewrite(*args: Any) -> Any:
        entered.set()
        release.wait(10)
        return real(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(maintenance, "rewrite", slow_rewrite)
        await wait_for(entered.is_set, timeout=20)
        owner.flush()
        owner.set(b"after", b"1")
        release.set()
        await settle(log)
        await wait_for(lambda: log.job is None and not (seg_dir / f"{first:010d}.seg").exists(), timeout=10)
    assert not _rewrite_leftovers(seg_dir)
    log, owner, _ = await reopen(log, segment_size=SEG)
    assert set(owner.entries) == {b"after"}
    await log.close()


async def test_a_failed_rewrite_changes_nothing_and_is_retried(seg_dir: Path) -> None:
    """A full disk during the copy: the segment stays as it was, no temporary file is left, maintenance pauses,
    then the rewrite succeeds."""
    log, owner, model, _ = await _one_dead_segment(seg_dir, compaction_dead_ratio=0.5)
    failures = 0
    real = segment.copy_range

    def full_disk(*args: Any) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(segment, "copy_range", full_disk)
        mp.setattr(maintenance, "RETRY_AFTER_FAILURE", 0.3)
        await wait_for(lambda: failures == 1, timeout=20)
        await wait_for(lambda: log.job is None, timeout=5)
        assert log.maint_resume_at > asyncio.get_running_loop().time()  # paused, not retrying every tick
        assert log.stats()["rewritten_bytes"] == 0
        failed = log.redis_stats()  # INFO: the last rewrite failed, once in a row
        assert failed["aof_last_bgrewrite_status"] == "err" and failed["aof_rewrites_consecutive_failures"] == 1
        assert not _rewrite_leftovers(seg_dir)
        await _check_all(owner, model)
        await wait_for(lambda: log.stats()["rewritten_bytes"] > 0, timeout=20)
    await wait_for(lambda: log.job is None, timeout=5)
    done = log.redis_stats()
    assert done["aof_last_bgrewrite_status"] == "ok" and done["aof_rewrites_consecutive_failures"] == 0
    assert done["aof_last_rewrite_time_sec"] >= 0 and done["aof_base_size"] == done["aof_current_size"]
    assert failures == 2
    await _check_all(owner, model)
    log, owner, _ = await reopen(log, segment_size=SEG)
    await _check_all(owner, model)
    await log.close()


async def test_a_rewrite_waits_until_what_made_records_dead_is_on_disk(seg_dir: Path, tmp_path: Path) -> None:
    """k00 is overwritten while the writer is stuck: its old record is dead in RAM, the new one is not on disk
    yet. A rewrite that dropped the old record now would lose the key in a crash; it must wait for the write."""
    log, owner, model, first = await _one_dead_segment(seg_dir, compaction_dead_ratio=0.99)
    await wait_for(lambda: log._segments[first].ready, timeout=10)
    writer = log._writer
    gate = threading.Event()

    real_pwritev = writer._pwritev

    def stuck(fd: int, bufs: Any, offset: int) -> int:
        gate.wait(10)
        return real_pwritev(fd, bufs, offset)

    snapshots: list[Path] = []

    def snap() -> None:
        dest = tmp_path / f"crash{len(snapshots)}"
        shutil.copytree(seg_dir, dest, ignore=shutil.ignore_patterns("LOCK", "*.tmp"))
        snapshots.append(dest)

    real_rewrite = maintenance.rewrite

    def traced_rewrite(*args: Any) -> Any:
        done = real_rewrite(*args)
        if not gate.is_set():
            snap()  # a crash right after the rewrite, with the overwrite still unwritten
        return done

    old_k00 = model[b"k00"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(maintenance, "rewrite", traced_rewrite)
        writer.stall_credit = float("-inf")  # no budget for slow writes: every batch goes to the (stuck) thread
        mp.setattr(writer, "_pwritev", stuck)
        model[b"k00"] = _val(b"k00", 4000, 7)
        owner.set(b"k00", model[b"k00"])
        log.compaction_dead_ratio = 0.5  # the first segment is a candidate from now on
        await wait_for(lambda: log.job is not None, timeout=5)
        await asyncio.sleep(0.5)
        if not snapshots:
            snap()  # the job is waiting for the write: a crash now finds the old record
        gate.set()
        writer.stall_credit = STALL_BUDGET
        await wait_for(lambda: log.stats()["rewritten_bytes"] > 0, timeout=20)
    await _check_all(owner, model)
    await log.close()
    for snapshot in snapshots:
        log, owner, _ = await open_log(snapshot, segment_size=SEG)
        assert b"k00" in owner.entries, snapshot
        assert bytes(await owner.get(b"k00")) in (old_k00, model[b"k00"])
        await log.close()


async def test_jobs_follow_each_other_without_waiting_for_the_tick(
    seg_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One job per 100 ms tick fell behind a stream of overwrites that fills small segments; the next job now
    starts as soon as one ends. Here the tick never comes: one start must work through every candidate."""
    monkeypatch.setattr(log_module, "TICK_INTERVAL", 3600.0)
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, compaction_dead_ratio=0.5)
    for gen in range(10):  # about 9 segments, each mostly overwritten by the next
        for i in range(14):
            owner.set(b"k%02d" % i, _val(b"k", 4000, gen))
    await settle(log)
    await wait_for(lambda: all(s.ready for s in log._segments.values() if s is not log._active), timeout=10)
    assert len(log._segments) >= 8
    log._start_job()

    def caught_up() -> bool:
        sealed = [s for s in log._segments.values() if s is not log._active and s.id not in log._retiring]
        return log.job is None and all(s.ready and s.dead_ratio() < 0.5 for s in sealed)

    await wait_for(caught_up, timeout=10)
    assert log.stats()["compactions"] >= 6
    await log.close()
