"""A damaged record (its header checks, its key + value do not) never lets its key fall back to an older version:
a damaged SET drops the key, a damaged DEL / EXPIRE is matched to its key by the checksum in its header and
applied, and what recovery decided is written back to the log so the next start decides the same (recovery.py,
"Damaged records"). Also: only names kvd writes are kvd's, and recovery's OSErrors name their file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from persist_helpers import flip_byte, now_ms, open_log, settle, wait_for

from kvd.persist import PersistError, SegmentLog
from kvd.persist import recovery as recovery_mod
from kvd.persist.record import DEL, EXPIRE, FILE_HDR_SIZE, HDR_SIZE, SET, scan

SEG = 64 << 10


def _records(path: Path):
    data = path.read_bytes()
    return scan(data, FILE_HDR_SIZE, len(data)).records


def _find(path: Path, rtype: int, key: bytes):
    return [r for r in _records(path) if r.rtype == rtype and r.key == key][-1]


async def _history(directory: Path, *, close: bool = True) -> SegmentLog:
    """``k``, ``gone`` and ``ttl`` written in segment 1; segment 1 sealed by fillers; then in segment 2 ``k``
    overwritten, ``gone`` deleted, ``ttl`` given a TTL, and one more key after them."""
    log, owner, _ = await open_log(directory, segment_size=SEG)
    owner.set(b"k", b"OLD" * 1000)
    owner.set(b"gone", b"G" * 1000)
    owner.set(b"ttl", b"T" * 1000)
    for i in range(30):
        owner.set(b"fill-%02d" % i, os.urandom(3000))
    await settle(log)
    owner.set(b"k", b"NEW" * 1000)
    owner.delete(b"gone")
    owner.expire(b"ttl", now_ms() + 3_600_000)
    owner.set(b"after", b"A" * 1000)
    await settle(log)
    if close:
        await log.close()
    return log


def _last_segment(directory: Path) -> Path:
    return sorted(directory.glob("*.seg"))[-1]


async def _restart(directory: Path):
    log, owner, report = await open_log(directory, segment_size=SEG)
    return log, owner, report


@pytest.mark.parametrize("hinted_next", [False, True])
async def test_damaged_set_drops_the_key_instead_of_serving_its_older_version(seg_dir: Path, hinted_next: bool) -> None:
    await _history(seg_dir)
    seg = _last_segment(seg_dir)
    assert seg.name != "0000000001.seg"
    rec = _find(seg, SET, b"k")
    flip_byte(seg, rec.offset + rec.record_len - 100)  # inside the NEW value
    seg.with_suffix(".hint").unlink()  # the clean close's hint would hide the damage: scan it
    log, owner, report = await _restart(seg_dir)
    assert b"k" not in owner.entries  # not b"OLD..."
    assert bytes(await owner.get(b"after")) == b"A" * 1000
    assert report.damaged_records == 1 and report.skipped_records == 1 and report.truncated_bytes == 0
    assert any("b'k'" in w and "dropped" in w for w in report.warnings), report.warnings
    if hinted_next:
        # The damaged segment gets sealed: its hint is built from its headers, which list the damaged SET as a
        # good one. The DEL recovery appended after it (fresh LSN) still keeps the key dropped.
        for i in range(30):
            owner.set(b"more-%02d" % i, os.urandom(3000))
        await settle(log)
        await wait_for(seg.with_suffix(".hint").exists)
    await log.close()
    if not hinted_next:  # scanned again: the damaged record and the DEL both say so
        for hint in seg_dir.glob("*.hint"):
            hint.unlink()
    size = seg.stat().st_size
    log, owner, report = await _restart(seg_dir)
    assert b"k" not in owner.entries
    await log.close()
    if not hinted_next:  # a third start scans it again and appends nothing more
        for hint in seg_dir.glob("*.hint"):
            hint.unlink()
        log, owner, report = await _restart(seg_dir)
        assert b"k" not in owner.entries
        await log.close()
        assert seg.stat().st_size == size


async def test_damaged_del_is_repaired_from_its_checksum(seg_dir: Path) -> None:
    await _history(seg_dir)
    seg = _last_segment(seg_dir)
    rec = _find(seg, DEL, b"gone")
    flip_byte(seg, rec.offset + HDR_SIZE + 1)  # the key's bytes: the header still checks
    seg.with_suffix(".hint").unlink()
    log, owner, report = await _restart(seg_dir)
    assert b"gone" not in owner.entries  # not resurrected
    assert bytes(await owner.get(b"k")) == b"NEW" * 1000
    assert any("b'gone'" in w and "checksum" in w for w in report.warnings), report.warnings
    await log.close()
    for hint in seg_dir.glob("*.hint"):
        hint.unlink()
    # The damaged record is still there, and so is the DEL recovery wrote: either way the key stays deleted.
    log, owner, _ = await _restart(seg_dir)
    assert b"gone" not in owner.entries
    await log.close()


async def test_damaged_expire_is_repaired_from_its_checksum(seg_dir: Path) -> None:
    await _history(seg_dir)
    seg = _last_segment(seg_dir)
    rec = _find(seg, EXPIRE, b"ttl")
    flip_byte(seg, rec.offset + HDR_SIZE)
    seg.with_suffix(".hint").unlink()
    log, owner, report = await _restart(seg_dir)
    assert owner.entries[b"ttl"][1] == rec.expire  # the TTL the damaged EXPIRE set
    assert any("b'ttl'" in w for w in report.warnings), report.warnings
    await log.close()
    log, owner, _ = await _restart(seg_dir)
    assert owner.entries[b"ttl"][1] == rec.expire
    await log.close()


async def test_a_damaged_last_record_of_the_active_segment_is_a_torn_write(seg_dir: Path) -> None:
    """A last record of the active segment whose header checks and payload does not is most likely a write the
    crash tore: it is cut off as a torn tail (its key falls back to what it was before), not logged as damage,
    and the next start finds nothing to do (a DEL was once appended for it at every start)."""
    await _history(seg_dir)
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    owner.set(b"k", b"TORN" * 1000)  # the last record: "k" was b"NEW" * 1000 before it
    await settle(log)
    await log.close()
    seg = _last_segment(seg_dir)
    rec = _find(seg, SET, b"k")
    assert rec.offset + rec.record_len == seg.stat().st_size
    flip_byte(seg, rec.offset + rec.record_len - 1)
    seg.with_suffix(".hint").unlink()
    log, owner, report = await _restart(seg_dir)
    assert bytes(await owner.get(b"k")) == b"NEW" * 1000
    assert report.truncated_bytes == rec.record_len and report.damaged_records == 0
    assert any("torn write" in w for w in report.warnings), report.warnings
    await log.close()
    size = seg.stat().st_size
    seg.with_suffix(".hint").unlink(missing_ok=True)
    log, owner, report = await _restart(seg_dir)
    assert bytes(await owner.get(b"k")) == b"NEW" * 1000 and report.truncated_bytes == 0
    await log.close()
    assert seg.stat().st_size == size


async def test_torn_tail_is_called_a_torn_write(seg_dir: Path) -> None:
    await _history(seg_dir)
    seg = _last_segment(seg_dir)
    seg.with_suffix(".hint").unlink()
    os.truncate(seg, seg.stat().st_size - 10)
    log, owner, report = await _restart(seg_dir)
    assert b"after" not in owner.entries
    assert report.truncated_bytes > 0 and report.damaged_records == 0
    assert any("incomplete last record" in w for w in report.warnings), report.warnings
    await log.close()


async def test_unreadable_region_warns_that_keys_may_be_at_their_previous_state(seg_dir: Path) -> None:
    await _history(seg_dir)
    seg = _last_segment(seg_dir)
    rec = _find(seg, DEL, b"gone")
    flip_byte(seg, rec.offset + 10)  # the DEL's header: nothing of it can be read
    seg.with_suffix(".hint").unlink()
    log, owner, report = await _restart(seg_dir)
    assert b"gone" in owner.entries  # the documented cost of an unreadable region
    assert any("unreadable" in w and "previous state" in w for w in report.warnings), report.warnings
    await log.close()


async def test_only_kvds_own_names_are_kvds(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    owner.set(b"x", b"1" * 100)
    await settle(log)
    await log.close()
    strangers = ["12.seg", "00000000001.seg", "notes.tmp", "x.bak.tmp", "0000000003.seg.bak", "garbage.seg"]
    for name in strangers:
        (seg_dir / name).write_bytes(os.urandom(3000))
    (seg_dir / "0000000009.hint.part.tmp").write_bytes(b"partial")  # kvd's own leftover: removed
    (seg_dir / "0000000001.seg.tmp").write_bytes(b"partial")
    (seg_dir / "notes.txt").write_text("hello")
    log, owner, report = await open_log(seg_dir, segment_size=SEG)
    assert bytes(await owner.get(b"x")) == b"1" * 100
    await log.close()
    for name in strangers:
        assert (seg_dir / name).exists(), name
        assert sum(name in w for w in report.warnings) == 1, (name, report.warnings)
    assert (seg_dir / "notes.txt").exists() and not any("notes.txt" in w for w in report.warnings)
    assert not (seg_dir / "0000000009.hint.part.tmp").exists()
    assert not (seg_dir / "0000000001.seg.tmp").exists()
    assert report.segments == 1


async def test_recovery_errors_name_the_file(seg_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    owner.set(b"x", b"1" * 100)
    await settle(log)
    await log.close()
    seg = _last_segment(seg_dir)
    seg.with_suffix(".hint").unlink()
    os.truncate(seg, seg.stat().st_size - 5)  # a torn tail to cut: ftruncate on the fd fails below

    def failing(fd: int, length: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    log = SegmentLog(seg_dir, segment_size=SEG)
    log.open_directory()
    monkeypatch.setattr(recovery_mod.os, "ftruncate", failing)
    with pytest.raises(PersistError, match=rf"{seg.name}: Operation not permitted"):
        log.recover(now_ms())
