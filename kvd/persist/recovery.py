"""Startup: lock the directory, rebuild the key index from the segments, repair the torn tail.

Segments are processed in id order. A sealed segment with a valid hint file (its trailing hash checks and it
covers exactly the segment's current size) is folded from the hint alone: no value is read, so a restart costs
O(keys), not O(bytes). Every other segment is scanned through an mmap with every payload checksum verified;
corrupt regions are skipped with a warning (resync on the next valid header, like Bitcask) and, for sealed
segments, a fresh hint is written so the next restart is fast again.

The last segment is the one that was being appended to. Its torn tail (a record cut by a crash, or garbage
after the last good record) is physically truncated with ftruncate + fsync, like Redis' ``aof-load-truncated
yes``, so later appends never sit behind garbage. Appends then continue *in that same segment* while it has
room (so restarts do not leave a trail of small segments). One exception to "the last segment is scanned": a
clean ``close()`` fsyncs it and writes its hint, and a valid hint (its hash checks and it covers exactly the
file's size) proves that, so the restart folds the hint and reads no values at all. The hint is deleted before
appends resume, since the next append makes it stale (a stale hint would be rejected by its size anyway).

Records are applied in LSN order (see ``record.py``): later wins; DEL removes an older SET; EXPIRE changes the
TTL of an older SET; FLUSH removes every older SET. Keys whose TTL passed are left out (their records count as
dead). The per-segment live byte counts and key hashes that maintenance needs are rebuilt from the final index.

Trade-off: corruption in the *middle* of the active segment is skipped rather than fatal (Redis refuses to
start); kvd is a cache, so serving everything that verifies beats refusing to start.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .base import Location, PersistError, RecoveredKeys, RecoveryReport
from .keyfilter import KeyFilter
from .record import DEL, EXPIRE, FILE_HDR_SIZE, FLUSH, SET, Record, decode_file_header, encode_file_header, scan
from .segment import Segment, fsync_dir, read_hint, write_hint

State = RecoveredKeys  # key -> (loc, expire, set_lsn, expire_lsn)


_new = tuple.__new__  # Location(...) without its Python frame: once per recovered record


@dataclass
class Recovered:
    keys: State  # the live keys; the caller owns the dict
    report: RecoveryReport
    segments: dict[int, Segment] = field(default_factory=dict)
    active: Segment | None = None
    tail: int = FILE_HDR_SIZE
    next_lsn: int = 1


def lock_directory(directory: Path) -> int:
    path = directory / "LOCK"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise PersistError(f"cannot open lock file {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        except OSError:
            holder = "?"
        os.close(fd)
        raise PersistError(f"{directory} is in use by another kvd process (pid {holder} holds {path})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _raise_fd_limit(needed: int) -> None:
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < needed + 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def create_segment(directory: Path, seg_id: int) -> Segment:
    seg = Segment(directory, seg_id)
    fd = os.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, encode_file_header(seg_id), 0)
    os.fdatasync(fd)
    fsync_dir(directory)
    seg.fd = fd
    return seg


def apply(state: State, records: list[Record], seg_id: int, flush_lsn: list[int]) -> State:
    for r in records:
        t = r.rtype
        lsn = r.lsn
        if t == SET:
            cur = state.get(r.key)
            if (cur is None or cur[2] < lsn) and lsn > flush_lsn[0]:
                state[r.key] = (_new(Location, (seg_id, r.offset, r.record_len, r.value_len)), r.expire, lsn, lsn)
        elif t == DEL:
            cur = state.get(r.key)
            if cur is not None and cur[2] < lsn:
                del state[r.key]
        elif t == EXPIRE:
            cur = state.get(r.key)
            if cur is not None and cur[2] < lsn and cur[3] < lsn:
                state[r.key] = (cur[0], r.expire, cur[2], lsn)
        elif t == FLUSH and lsn > flush_lsn[0]:
            flush_lsn[0] = lsn
            state = {k: v for k, v in state.items() if v[2] > lsn}
    return state


def recover(
    directory: Path,
    segment_size: int,
    now_ms: int,
    progress: Callable[[int, int], None] | None,
    logger_warn: Callable[[str], None],
) -> Recovered:
    started = time.monotonic()
    report = RecoveryReport()

    def warn(msg: str) -> None:
        report.warnings.append(msg)
        logger_warn(msg)

    seg_ids: list[int] = []
    hints: set[int] = set()
    for name in os.listdir(directory):
        stem, _, ext = name.partition(".")
        if ext.endswith("tmp"):
            with contextlib.suppress(OSError):
                os.unlink(directory / name)
        elif ext in ("seg", "hint") and stem.isdigit():
            (seg_ids.append if ext == "seg" else hints.add)(int(stem))
    seg_ids.sort()
    for orphan in hints - set(seg_ids):  # the segment was unlinked before its hint
        with contextlib.suppress(OSError):
            os.unlink(directory / f"{orphan:010d}.hint")
    _raise_fd_limit(len(seg_ids))

    sizes = {sid: os.stat(directory / f"{sid:010d}.seg").st_size for sid in seg_ids}
    total = sum(sizes.values())
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    state: State = {}
    flush_lsn = [0]
    max_lsn = 0
    segments: dict[int, Segment] = {}
    last_unsealed = False
    for i, sid in enumerate(seg_ids):
        last = i == len(seg_ids) - 1
        seg = Segment(directory, sid)
        seg.fd = os.open(seg.path, os.O_RDWR if last else os.O_RDONLY)
        size = sizes[sid]
        records = read_hint(seg, size) if sid in hints else None
        if records is not None:
            report.hint_files_used += 1
            advance(size)
            last_unsealed = last  # a clean close indexed it; appends may still continue in it
        else:
            if sid in hints:
                warn(f"hint file {seg.hint_path.name} is invalid; scanning {seg.path.name}")
            head_ok = size >= FILE_HDR_SIZE and decode_file_header(os.pread(seg.fd, FILE_HDR_SIZE, 0)) == sid
            if not head_ok:
                warn(f"{seg.path.name}: bad or torn file header")
            if size > FILE_HDR_SIZE:
                with mmap.mmap(seg.fd, size, prot=mmap.PROT_READ) as mm:
                    res = scan(mm, FILE_HDR_SIZE, size, verify=True, progress=advance)
                advance(size - (res.good_end - FILE_HDR_SIZE))  # the scan reported the good part
            else:
                res = scan(b"", 0, 0)
                advance(size)
            records = res.records
            for off, length in res.skipped:
                warn(f"{seg.path.name}: skipped {length} corrupt bytes at offset {off}")
            report.skipped_records += len(res.skipped)
            good_end = max(res.good_end, FILE_HDR_SIZE)
            if last:
                if not head_ok and not records:
                    # Crashed while creating it: start the file over.
                    report.truncated_bytes += size
                    os.ftruncate(seg.fd, 0)
                    os.pwrite(seg.fd, encode_file_header(sid), 0)
                    os.fdatasync(seg.fd)
                    size = FILE_HDR_SIZE
                    warn(f"{seg.path.name}: rewrote a torn segment file ({sizes[sid]} bytes)")
                elif good_end < size:
                    warn(
                        f"!!! truncating the torn tail of {seg.path.name} at offset {good_end} "
                        f"({size - good_end} bytes)"
                    )
                    report.truncated_bytes += size - good_end
                    os.ftruncate(seg.fd, good_end)
                    os.fdatasync(seg.fd)
                    size = good_end
                last_unsealed = True
            else:
                if good_end < size:
                    report.skipped_records += 1
                    warn(f"{seg.path.name}: ignored {size - good_end} corrupt trailing bytes at offset {good_end}")
                try:
                    write_hint(seg, size, records)
                except OSError as exc:
                    warn(f"could not rewrite hint for {seg.path.name}: {exc.strerror}")
        for r in records:
            if r.lsn > max_lsn:
                max_lsn = r.lsn
        state = apply(state, records, sid, flush_lsn)
        seg.size = size
        seg.set_keys = KeyFilter(hash(r.key) for r in records if r.rtype == SET)  # sealed once the log starts
        segments[sid] = seg

    # The state becomes the result in place (base.py, RecoveredKeys): expired keys leave it, nothing is copied.
    expired: list[bytes] = []
    live_bytes = 0
    for key, (loc, expire, _, _) in state.items():
        if expire and expire <= now_ms:
            expired.append(key)
            continue
        segments[loc.segment].live += loc.record_len
        live_bytes += loc.record_len
    for key in expired:
        del state[key]
    report.expired_keys += len(expired)
    report.live_bytes += live_bytes

    # Choose where appends continue (see the module docstring).
    active: Segment | None = None
    if seg_ids and last_unsealed:
        cand = segments[seg_ids[-1]]
        if cand.size < segment_size:
            active = cand
            with contextlib.suppress(FileNotFoundError):  # its index goes stale with the next append
                os.unlink(cand.hint_path)
        else:
            try:
                write_hint(cand, cand.size, _records_for_hint(cand))
            except OSError as exc:
                warn(f"could not write hint for {cand.path.name}: {exc.strerror}")
    if active is None:
        try:
            active = create_segment(directory, (seg_ids[-1] + 1) if seg_ids else 1)
        except OSError as exc:
            raise PersistError(f"cannot create a segment in {directory}: {exc.strerror}") from None
        segments[active.id] = active
    for seg in segments.values():
        if seg is not active:
            seg.sealed = seg.ready = True

    report.keys = len(state)
    report.bytes = total
    report.segments = len(segments)
    report.seconds = time.monotonic() - started
    return Recovered(state, report, segments, active, active.size, max_lsn + 1)


def _records_for_hint(seg: Segment) -> list[Record]:
    from .segment import scan_headers

    return scan_headers(seg.fd, seg.size)
