"""Rebuilding the key index from the segment files at start-up.

Order of work: every segment in id order; a sealed segment through its hint file when the hint is valid (no
value is read), otherwise by a verifying scan; the last segment always by a verifying scan, because it may end
in a torn write. Records are applied in log order (later wins): SET installs a location, DEL removes, EXPIRE
changes the deadline of the current record, FLUSH forgets everything before it. Keys whose deadline has passed
are left out. A torn tail of the last segment is cut off with ``ftruncate`` (and fsynced) so new appends start
on a clean boundary; a corrupt record anywhere else is skipped and counted, and never served.

Whether appends continue in the last segment or in a new one: a last segment that already has a valid hint
(kvd closed cleanly and sealed it, or it crashed right after sealing) stays sealed and a new segment is
started; otherwise appends continue after the last good record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .record import DEL, EXPIRE, FILE_HEADER_SIZE, FLUSH, SET, Location
from .segment import HintEntry, fsync_dir, hint_path, list_segments, read_hint, scan, segment_path


@dataclass
class RecoveryReport:
    keys: int = 0
    bytes: int = 0  # bytes of segment files processed
    seconds: float = 0.0
    segments: int = 0
    hint_files_used: int = 0
    skipped_records: int = 0
    skipped_bytes: int = 0
    truncated_bytes: int = 0
    expired_dropped: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class Recovered:
    index: dict[bytes, tuple[Location, int]]
    sizes: dict[int, int]  # segment id -> file size
    live: dict[int, int]  # segment id -> live bytes
    active: int  # segment to append to
    active_offset: int
    active_entries: list[HintEntry]
    create_active: bool
    flushed_before: int  # segments below this id are wholly dead (an earlier FLUSH), safe to delete
    report: RecoveryReport


def recover(directory: Path, now_ms: int, progress: Callable[[int, int], None] | None = None) -> Recovered:
    started = time.monotonic()
    report = RecoveryReport()
    ids = list_segments(directory)
    sizes = {seg: segment_path(directory, seg).stat().st_size for seg in ids}
    total = sum(sizes.values())
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    index: dict[bytes, tuple[Location, int]] = {}
    flushed_before = 0
    active, active_offset, active_entries, create_active = (ids[-1] + 1 if ids else 1), FILE_HEADER_SIZE, [], True
    for position, seg in enumerate(ids):
        is_last = position == len(ids) - 1
        entries = read_hint(directory, seg, sizes[seg])
        if entries is not None:
            report.hint_files_used += 1
            advance(sizes[seg])
            if is_last:  # sealed already: keep it sealed and start a new segment
                active, create_active = seg + 1, True
        else:
            if hint_path(directory, seg).exists():
                report.warnings.append(f"segment {seg}: hint file is corrupt or stale; scanned the segment instead")
            before = done
            result = scan(segment_path(directory, seg), seg, advance)
            advance(sizes[seg] - (done - before))
            entries = result.entries
            if not result.header_ok:
                report.warnings.append(f"segment {seg}: bad file header; its {sizes[seg]} bytes are ignored")
            if result.skipped_records:
                report.skipped_records += result.skipped_records
                report.skipped_bytes += result.skipped_bytes
                report.warnings.append(
                    f"segment {seg}: skipped {result.skipped_records} corrupt region(s), {result.skipped_bytes} bytes"
                )
            if is_last and result.header_ok:
                if result.torn_bytes:
                    _truncate(segment_path(directory, seg), result.good_end)
                    report.truncated_bytes += result.torn_bytes
                    report.warnings.append(
                        f"segment {seg}: truncated a torn tail of {result.torn_bytes} bytes at offset {result.good_end}"
                    )
                    sizes[seg] = result.good_end
                active, active_offset, active_entries, create_active = seg, result.good_end, entries, False
            elif result.torn_bytes:
                report.skipped_records += 1
                report.skipped_bytes += result.torn_bytes
                report.warnings.append(f"segment {seg}: {result.torn_bytes} unreadable bytes at its end were skipped")
        for e in entries:
            if e.type == SET:
                index[e.key] = (Location(seg, e.offset, e.record_len, e.value_len), e.expire_at)
            elif e.type == DEL:
                index.pop(e.key, None)
            elif e.type == EXPIRE:
                current = index.get(e.key)
                if current is not None:
                    index[e.key] = (current[0], e.expire_at)
            elif e.type == FLUSH:
                index.clear()
                flushed_before = seg
    expired = [k for k, (_loc, exp) in index.items() if exp and exp <= now_ms]
    for key in expired:
        del index[key]
    live = dict.fromkeys(ids, 0)
    for loc, _exp in index.values():
        live[loc.segment] += loc.record_len
    report.expired_dropped = len(expired)
    report.keys = len(index)
    report.bytes = total
    report.segments = len(ids)
    report.seconds = time.monotonic() - started
    return Recovered(index, sizes, live, active, active_offset, active_entries, create_active, flushed_before, report)


def _truncate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
