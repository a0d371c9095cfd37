"""Flipped bytes in sealed segments, deleted and corrupt hint files: intact records serve byte-identical,
corrupt ones are skipped (scan) or raise CorruptRecord (read), never wrong bytes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from persist_helpers import flip_byte, open_log, reopen, settle

from kvd.persist import CorruptRecord, Location

SEG = 64 << 10


async def _build(directory: Path) -> dict[bytes, tuple[bytes, Location]]:
    log, owner, _ = await open_log(directory, segment_size=SEG)
    rng = random.Random(11)
    model = {}
    for i in range(60):
        key, value = b"key-%02d" % i, rng.randbytes(rng.choice([100, 3000, 9000]))
        model[key] = (value, owner.set(key, value))
    await settle(log)
    await log.close()
    return model


def _sealed_victim(directory: Path, model: dict) -> tuple[bytes, Location]:
    first = min(loc.segment for _, loc in model.values())
    key, (_, loc) = next((k, v) for k, v in model.items() if v[1].segment == first and v[1].value_len > 1000)
    assert (directory / f"{first:010d}.hint").exists()
    return key, loc


async def _check_serves(directory: Path, model: dict, broken: set[bytes], expect_present: bool) -> None:
    log, owner, report = await open_log(directory, segment_size=SEG)
    for key, (value, _) in model.items():
        if key in broken:
            if expect_present:
                assert key in owner.entries
                with pytest.raises(CorruptRecord):
                    await owner.get(key)
            else:
                assert key not in owner.entries
        else:
            assert bytes(await owner.get(key)) == value, key
    if expect_present:
        assert log.stats()["corrupt_reads"] >= 1
    await log.close()
    return report


async def test_flipped_value_with_hint_raises_corrupt_record(seg_dir: Path) -> None:
    model = await _build(seg_dir)
    key, loc = _sealed_victim(seg_dir, model)
    flip_byte(seg_dir / f"{loc.segment:010d}.seg", loc.offset + loc.record_len - 10)
    report = await _check_serves(seg_dir, model, {key}, expect_present=True)
    assert report.hint_files_used >= 1


async def test_flipped_value_without_hint_is_skipped(seg_dir: Path) -> None:
    model = await _build(seg_dir)
    key, loc = _sealed_victim(seg_dir, model)
    flip_byte(seg_dir / f"{loc.segment:010d}.seg", loc.offset + loc.record_len - 10)
    (seg_dir / f"{loc.segment:010d}.hint").unlink()
    report = await _check_serves(seg_dir, model, {key}, expect_present=False)
    assert report.skipped_records >= 1
    assert report.warnings


async def test_flipped_header_without_hint_resyncs(seg_dir: Path) -> None:
    model = await _build(seg_dir)
    key, loc = _sealed_victim(seg_dir, model)
    flip_byte(seg_dir / f"{loc.segment:010d}.seg", loc.offset + 13)  # the value length field
    (seg_dir / f"{loc.segment:010d}.hint").unlink()
    report = await _check_serves(seg_dir, model, {key}, expect_present=False)
    assert report.skipped_records >= 1


async def test_deleted_hint_rescans(seg_dir: Path) -> None:
    model = await _build(seg_dir)
    for hint in seg_dir.glob("*.hint"):
        hint.unlink()
    report = await _check_serves(seg_dir, model, set(), expect_present=False)
    assert report.hint_files_used == 0
    assert report.skipped_records == 0


@pytest.mark.parametrize("where", ["start", "middle", "end", "truncate"])
async def test_corrupt_hint_falls_back_to_scan(seg_dir: Path, where: str) -> None:
    model = await _build(seg_dir)
    hints = sorted(seg_dir.glob("*.hint"))
    assert hints
    hint = hints[0]
    size = hint.stat().st_size
    if where == "truncate":
        hint.write_bytes(hint.read_bytes()[: size // 2])
    else:
        flip_byte(hint, {"start": 0, "middle": size // 2, "end": size - 1}[where])
    report = await _check_serves(seg_dir, model, set(), expect_present=False)
    assert report.hint_files_used == len(hints) - 1
    assert report.warnings


async def test_flipped_byte_never_serves_wrong_bytes(seg_dir: Path) -> None:
    """Flip random bytes all over a sealed segment, with its hint kept: every read is exact or CorruptRecord."""
    model = await _build(seg_dir)
    first = min(loc.segment for _, loc in model.values())
    path = seg_dir / f"{first:010d}.seg"
    rng = random.Random(5)
    for _ in range(20):
        flip_byte(path, rng.randrange(24, path.stat().st_size))
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    for key, (value, _) in model.items():
        if key not in owner.entries:
            continue
        try:
            got = await owner.get(key)
        except CorruptRecord:
            continue
        assert bytes(got) == value
    await log.close()


async def test_corrupt_record_is_dropped_by_next_restart_after_rewrite(seg_dir: Path) -> None:
    """A key rewritten after corruption serves the new value, from a new record."""
    model = await _build(seg_dir)
    key, loc = _sealed_victim(seg_dir, model)
    flip_byte(seg_dir / f"{loc.segment:010d}.seg", loc.offset + loc.record_len - 1)
    log, owner, _ = await open_log(seg_dir, segment_size=SEG)
    owner.set(key, b"fresh")
    await settle(log)
    log, owner, _ = await reopen(log, segment_size=SEG)
    assert bytes(await owner.get(key)) == b"fresh"
    await log.close()


async def test_seal_hint_is_the_scan_hint_and_a_bad_header_falls_back(seg_dir: Path) -> None:
    """The hint written at seal, built straight from the headers, is byte for byte the one a scan would give;
    a header that does not check out makes it give up, so the scan (which skips damage) decides."""
    import os

    from kvd.persist.segment import encode_hint, hint_of_written, scan_headers

    model = await _build(seg_dir)
    first = min(loc.segment for _, loc in model.values())
    path = seg_dir / f"{first:010d}.seg"
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        records = scan_headers(fd, size)
        assert len(records) > 3
        assert hint_of_written(fd, first, size) == encode_hint(first, size, records)
        assert (seg_dir / f"{first:010d}.hint").read_bytes() == encode_hint(first, size, records)
    finally:
        os.close(fd)
    flip_byte(path, records[2].offset + 9)  # inside the third record's header: its CRC no longer matches
    fd = os.open(path, os.O_RDONLY)
    try:
        assert hint_of_written(fd, first, size) is None
    finally:
        os.close(fd)
