"""Hint files as the writer builds them (segment.HintBuilder): the same bytes a scan of the sealed segment
gives, whatever the record mix and however often the entries were spilled to disk; and where the writer did
not see a segment's every record (a write error cut it short, recovery continues it), the hint still comes out
right, from the segment's headers."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from persist_helpers import inject_fault, now_ms, open_log, reopen, settle, wait_for

from kvd.persist import PersistError, SegmentLog, segment
from kvd.persist.segment import encode_hint, scan_headers

SEG = 64 << 10


def _scan_hint(seg_dir: Path, seg_id: int) -> bytes:
    path = seg_dir / segment.seg_name(seg_id)
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        return encode_hint(seg_id, size, scan_headers(fd, size))
    finally:
        os.close(fd)


def _sealed(log: SegmentLog) -> list[int]:
    return sorted(s.id for s in log._segments.values() if s is not log._active)


async def _all_sealed_and_hinted(log: SegmentLog) -> list[int]:
    await wait_for(lambda: all(s.ready for s in log._segments.values() if s is not log._active), timeout=10)
    ids = _sealed(log)
    for seg_id in ids:
        assert (log.directory / segment.hint_name(seg_id)).read_bytes() == _scan_hint(log.directory, seg_id)
    return ids


async def test_the_writers_hint_is_the_scans_hint(seg_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment, "HINT_SPILL", 300)  # spill every few entries
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    far = now_ms() + 3_600_000
    for i in range(60):
        owner.set(b"small%d" % i, b"s" * (i * 7), expire=far if i % 3 == 0 else 0)
        if i % 5 == 0:
            owner.set(b"big%d" % i, os.urandom(20_000))  # past SMALL_RECORD: the writer's iovec path
            owner.expire(b"small%d" % i, far)
            owner.delete(b"small%d" % i)
        if i % 17 == 0:
            await settle(log)  # several write batches per segment
    await settle(log)
    assert len(await _all_sealed_and_hinted(log)) >= 3
    assert not list(seg_dir.glob("*.part.tmp"))[1:]  # at most the active segment's
    log, _, report = await reopen(log, segment_size=SEG)
    assert report.hint_files_used >= 4  # the sealed ones, and the active one from the clean close
    await log.close()


async def test_a_segment_cut_by_a_write_error_gets_its_hint_from_its_headers(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=SEG, appendfsync="everysec")
    for i in range(5):
        owner.set(b"k%d" % i, b"v" * 3000)
    await settle(log)
    inject_fault(log, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    owner.set(b"lost", b"x" * 3000)
    with pytest.raises(PersistError):  # the write failed; its batch was cut off the file
        await log.barrier()
    inject_fault(log, None)
    await wait_for(lambda: log.misconf() is None, timeout=5)  # the probe moved appends to a fresh segment
    for i in range(30):
        owner.set(b"after%d" % i, b"a" * 3000)
    await settle(log)
    ids = await _all_sealed_and_hinted(log)
    assert ids[:2] == [1, 2]  # 1: cut by the error; 2: the probe's, which starts with a PAD record
    log, owner, report = await reopen(log, segment_size=SEG)
    assert report.hint_files_used == len(ids) + 1
    assert set(owner.entries) == {b"k%d" % i for i in range(5)} | {b"after%d" % i for i in range(30)}
    await log.close()


async def test_a_continued_segment_gets_its_hint_from_its_headers(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    for i in range(5):
        owner.set(b"k%d" % i, b"v" * 3000)
    log, owner, _ = await reopen(log, segment_size=SEG)  # appends continue in segment 1
    assert log._active is not None and log._active.id == 1
    for i in range(40):
        owner.set(b"more%d" % i, b"m" * 3000)
    await settle(log)
    ids = await _all_sealed_and_hinted(log)
    assert 1 in ids
    log, owner, report = await reopen(log, segment_size=SEG)
    assert report.hint_files_used == len(ids) + 1
    assert len(owner.entries) == 45
    await log.close()
