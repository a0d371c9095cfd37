"""Torn tails: cut the active segment at many offsets; recovery keeps exactly the whole records before the cut,
truncates the file there, and an append after recovery survives the next recovery."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from persist_helpers import open_log, reopen, segment_files, settle

from kvd.persist import Location


async def _build(directory: Path, sizes: list[int]) -> tuple[list[tuple[bytes, bytes, Location]], bytes, str]:
    """Write one SET per size into a single segment; return (key, value, loc) per record and the segment bytes."""
    log, owner, _ = await open_log(directory, segment_size=64 << 20)
    rng = random.Random(len(sizes))
    recs = []
    for i, size in enumerate(sizes):
        key, value = b"k%03d" % i, rng.randbytes(size)
        recs.append((key, value, owner.set(key, value)))
    await settle(log)
    seg = segment_files(directory)[-1]
    data = seg.read_bytes()  # exactly what a kill -9 right now would leave (no close-time hint)
    await log.close()
    return recs, data, seg.name


async def _check_cut(tmp: Path, name: str, data: bytes, cut: int, recs: list, append_after: bool) -> None:
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    (tmp / name).write_bytes(data[:cut])
    log, owner, report = await open_log(tmp, segment_size=64 << 20)
    whole = [(k, v, loc) for k, v, loc in recs if loc.offset + loc.record_len <= cut]
    assert set(owner.entries) == {k for k, _, _ in whole}, cut
    good_end = max((loc.offset + loc.record_len for _, _, loc in whole), default=None)
    if good_end is not None:
        assert (tmp / name).stat().st_size == good_end, cut
        assert report.truncated_bytes == cut - good_end, cut
    for k, v, _ in whole[-2:]:
        assert bytes(await owner.get(k)) == v
    if append_after:
        owner.set(b"after", b"survives")
        await settle(log)
        log, owner, report = await reopen(log, segment_size=64 << 20)
        assert bytes(await owner.get(b"after")) == b"survives", cut
        assert set(owner.entries) == {k for k, _, _ in whole} | {b"after"}, cut
        assert report.skipped_records == 0, cut
    await log.close()


async def test_every_cut_of_a_small_log(tmp_path: Path) -> None:
    recs, data, name = await _build(tmp_path / "src", [0, 1, 5, 30, 0, 64, 7, 100])
    first = recs[0][2].offset  # file header end
    for cut in range(first, len(data) + 1):
        await _check_cut(tmp_path / "cut", name, data, cut, recs, append_after=cut % 7 == 0)


async def test_random_cuts_of_a_larger_log(tmp_path: Path) -> None:
    rng = random.Random(3)
    recs, data, name = await _build(tmp_path / "src", [rng.choice([10, 4000, 70_000, 300_000]) for _ in range(40)])
    cuts = sorted({rng.randrange(recs[0][2].offset, len(data) + 1) for _ in range(25)})
    cuts += [loc.offset + d for _, _, loc in recs[5:8] for d in (0, 1, 43, 44, 45, loc.record_len - 1)]
    for cut in cuts:
        await _check_cut(tmp_path / "cut", name, data, cut, recs, append_after=True)


async def test_garbage_after_the_tail_is_cut(tmp_path: Path) -> None:
    recs, data, name = await _build(tmp_path / "src", [100, 200, 300])
    await _check_cut(tmp_path / "cut", name, data + b"\x00" * 4096, len(data) + 4096, recs, append_after=True)
