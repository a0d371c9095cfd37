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

Damaged records. A record whose header still checks but whose key + value fail their checksum (record.py,
"Damage") must not let the key fall back to an older version: a damaged SET drops the key (it is lost, not
served at the version it overwrote). A damaged DEL or EXPIRE (its payload is the key alone, so the key bytes are
the damaged part) is repaired: the header keeps the checksum of the key it was written for, so the live key
whose xxh3 matches it is the one it applied to, and the tombstone is applied to that key. Because the damaged
record itself cannot be trusted at the next start (a sealed segment's fresh hint leaves it out, compaction drops
it), recovery then appends, with fresh LSNs, a DEL for every such key that ended up absent and an EXPIRE carrying
the TTL a repaired EXPIRE decided; the warning names the keys. What recovery cannot undo is a region in which no
header checks at all (``ScanResult.skipped`` and unreadable tails): nothing says which keys were written there,
so a key whose newest record was in it is served at its previous state (older value, or back after a DEL). The
warning says so. The active segment's damaged records with no good record after them are the exception: they
are what a crash tears, a write that was not yet durable, so they are cut off as a torn tail and their keys fall
back, as after any torn write.

Names. Only names kvd writes are kvd's: ``<10 digits>.seg`` / ``.hint`` and the temporary files of hints and
compaction (``<10 digits>.seg.tmp``, ``.hint.tmp``, ``.hint.part.tmp``), which recovery removes. Any other file
that looks like one (a digit stem, ``.seg`` / ``.hint`` in the name, a ``tmp`` extension) is left alone with a
one-line warning naming it. Every OSError raised while recovering names the file it concerns.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import re
import resource
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from .base import Location, PersistError, RecoveredKeys, RecoveryReport
from .keyfilter import KeyFilter
from .record import (
    DEL,
    EXPIRE,
    FILE_HDR_SIZE,
    FLUSH,
    HDR_SIZE,
    SET,
    TYPE_NAMES,
    Damaged,
    Record,
    checksum,
    decode_file_header,
    decode_header,
    encode_file_header,
    encode_header,
    scan,
)
from .segment import Segment, fsync_dir, read_hint, write_hint

State = RecoveredKeys  # key -> (loc, expire, set_lsn, expire_lsn)


_new = tuple.__new__  # Location(...) without its Python frame: once per recovered record

_OURS = re.compile(r"(\d{10})\.(seg|hint)")
_OUR_TMP = re.compile(r"\d{10}\.(seg\.tmp|hint\.tmp|hint\.part\.tmp)")  # segment.py's _tmp_path, HintBuilder
# Other files kvd keeps in its directory (the lock, kvd/replication.py's identity files), never warned about.
_OTHER_KVD = re.compile(r"LOCK|(replication|replica-link)\.id(\.tmp)?")


def _looks_like_ours(name: str) -> bool:
    stem, _, ext = name.partition(".")
    return stem.isdigit() or ".seg" in name or ".hint" in name or ext.endswith("tmp")


def _show(key: bytes) -> str:
    return repr(key) if len(key) <= 64 else f"{key[:60]!r}... ({len(key)} bytes)"


def _named(path: Path, exc: OSError) -> OSError:
    """``exc`` with the file it concerns (an fd-based call's error names none)."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


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
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise _named(path, exc) from None
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


def apply_damaged(state: State, damaged: list[Damaged], touched: dict[bytes, int]) -> list[str]:
    """Apply a segment's damaged records (after ``apply`` of its good ones: every rule below compares LSNs, so
    the order within the segment does not matter). A damaged SET drops its key if the state holds an older
    version; a damaged DEL / EXPIRE is matched to its key by the checksum in its header and applied. The keys
    concerned go into ``touched`` (key -> the damaged record's LSN). Returns what was done, one phrase per record."""
    notes: list[str] = []
    by_hash: dict[int, bytes] | None = None
    for d in damaged:
        name = TYPE_NAMES.get(d.rtype, "?")
        where = f"{name} at offset {d.offset}"
        if d.rtype == SET:
            key = d.key
            cur = state.get(key)
            if cur is not None and cur[2] < d.lsn:
                touched[key] = max(touched.get(key, 0), d.lsn)  # a DEL is logged for it (once: it then holds)
                del state[key]
                notes.append(f"{where}: key {_show(key)} dropped (not served at its older version)")
            else:
                notes.append(f"{where}: key {_show(key)} (as read; no older version of it to drop)")
        elif d.rtype in (DEL, EXPIRE):
            if by_hash is None:
                lengths = {len(x.key) for x in damaged if x.rtype in (DEL, EXPIRE)}
                by_hash = {xxhash.xxh3_64_intdigest(k): k for k in state if len(k) in lengths}
            key = by_hash.get(d.checksum)  # type: ignore[assignment]
            cur = state.get(key) if key is not None else None
            if key is None or cur is None or cur[2] >= d.lsn:
                notes.append(f"{where}: no live key it could apply to (nothing older comes back)")
                continue
            touched[key] = max(touched.get(key, 0), d.lsn)
            if d.rtype == DEL:
                del state[key]
                notes.append(f"{where}: key {_show(key)} found by its checksum, deleted")
            elif cur[3] < d.lsn:
                state[key] = (cur[0], d.expire, cur[2], d.lsn)
                notes.append(f"{where}: key {_show(key)} found by its checksum, TTL applied")
        else:
            notes.append(f"{where}: ignored")
    return notes


def _record_fixes(state: State, touched: dict[bytes, int], next_lsn: int) -> tuple[bytes, int]:
    """Durable records of what damaged records decided (see "Damaged records"): a DEL for each touched key that
    is absent now, an EXPIRE with the current TTL where a repaired EXPIRE set it. Fresh LSNs from ``next_lsn``."""
    out: list[bytes] = []
    lsn = next_lsn
    for key, dlsn in touched.items():
        cur = state.get(key)
        if cur is None:
            rtype, expire = DEL, 0
        elif cur[3] == dlsn and cur[2] < dlsn:
            rtype, expire = EXPIRE, cur[1]
        else:
            continue  # a newer record decides the key, and is on disk
        out.append(encode_header(rtype, len(key), 0, expire, lsn, checksum(key, b"")) + key)
        lsn += 1
    return b"".join(out), len(out)


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
    for name in sorted(os.listdir(directory)):
        m = _OURS.fullmatch(name)
        if m is not None:
            (seg_ids.append if m[2] == "seg" else hints.add)(int(m[1]))
        elif _OUR_TMP.fullmatch(name):
            with contextlib.suppress(OSError):
                os.unlink(directory / name)
        elif _looks_like_ours(name) and not _OTHER_KVD.fullmatch(name):
            warn(f"ignoring {directory / name}: not a name kvd writes (left as it is)")
    seg_ids.sort()
    for orphan in hints - set(seg_ids):  # the segment was unlinked before its hint
        with contextlib.suppress(OSError):
            os.unlink(directory / f"{orphan:010d}.hint")
    _raise_fd_limit(len(seg_ids))

    sizes: dict[int, int] = {}
    for sid in list(seg_ids):
        path = directory / f"{sid:010d}.seg"
        st = os.stat(path)  # its error names the file
        if not stat.S_ISREG(st.st_mode):
            warn(f"ignoring {path}: not a regular file (left as it is)")
            seg_ids.remove(sid)
            continue
        sizes[sid] = st.st_size
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
    last_records: list[Record] | None = None  # the last segment's verified records, when it was scanned
    touched: dict[bytes, int] = {}  # keys decided by damaged records (apply_damaged)
    for i, sid in enumerate(seg_ids):
        last = i == len(seg_ids) - 1
        seg = Segment(directory, sid)
        try:
            seg.fd = os.open(seg.path, os.O_RDWR if last else os.O_RDONLY)
            size = sizes[sid]
            records = read_hint(seg, size) if sid in hints else None
            damaged: list[Damaged] = []
            if records is not None:
                report.hint_files_used += 1
                advance(size)
                last_unsealed = last  # a clean close indexed it; appends may still continue in it
            else:
                records, damaged, size = _scan_segment(seg, size, last, sid in hints, report, warn, advance)
                if last:
                    last_unsealed = True
                    last_records = records
                else:
                    try:
                        write_hint(seg, size, records)
                    except OSError as exc:
                        warn(f"could not rewrite hint for {seg.path.name}: {exc.strerror}")
        except OSError as exc:
            raise _named(seg.path, exc) from None
        for r in records:
            if r.lsn > max_lsn:
                max_lsn = r.lsn
        state = apply(state, records, sid, flush_lsn)
        if damaged:
            max_lsn = max(max_lsn, *(d.lsn for d in damaged))
            notes = apply_damaged(state, damaged, touched)
            shown = "; ".join(notes[:8]) + (f"; and {len(notes) - 8} more" if len(notes) > 8 else "")
            warn(
                f"{seg.path.name}: {len(damaged)} damaged record(s) (header intact, key + value fail their "
                f"checksum): {shown}"
            )
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
                write_hint(cand, cand.size, last_records if last_records is not None else _records_for_hint(cand))
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

    next_lsn = max_lsn + 1
    if touched:
        fixes, count = _record_fixes(state, touched, next_lsn)
        if count and _write_fixes(active, fixes, count, warn):
            next_lsn += count

    report.keys = len(state)
    report.bytes = total
    report.segments = len(segments)
    report.seconds = time.monotonic() - started
    return Recovered(state, report, segments, active, active.size, next_lsn)


_REGION_COST = (
    "no record header in them checks, so which keys were written there is unknown: a key whose newest record was "
    "there is served at its previous state (an older value, or back after a DEL)"
)


def _scan_segment(
    seg: Segment,
    size: int,
    last: bool,
    had_hint: bool,
    report: RecoveryReport,
    warn: Callable[[str], None],
    advance: Callable[[int], None],
) -> tuple[list[Record], list[Damaged], int]:
    """Scan a segment that has no usable hint: its verified records, its damaged ones, and its size after
    repair (the last segment's torn tail is cut off)."""
    name = seg.path.name
    if had_hint:
        warn(f"hint file {seg.hint_path.name} is invalid; scanning {name}")
    head_ok = size >= FILE_HDR_SIZE and decode_file_header(os.pread(seg.fd, FILE_HDR_SIZE, 0)) == seg.id
    if not head_ok:
        warn(f"{name}: bad or torn file header")
    if size > FILE_HDR_SIZE:
        with mmap.mmap(seg.fd, size, prot=mmap.PROT_READ) as mm:
            res = scan(mm, FILE_HDR_SIZE, size, verify=True, progress=advance)
            tail_head = decode_header(mm, res.good_end) if res.good_end + HDR_SIZE <= size else None
        advance(size - (res.good_end - FILE_HDR_SIZE))  # the scan reported the good part
    else:
        res = scan(b"", 0, 0)
        tail_head = None
        advance(size)
    for off, length in res.skipped:
        warn(f"{name}: skipped {length} unreadable bytes at offset {off}: {_REGION_COST}")
    damaged = res.damaged
    good_end = max(res.good_end, FILE_HDR_SIZE)
    torn_record = False
    if last and damaged:
        # Damaged records at the very end of the active segment, with no good record after them, are most
        # likely a write the crash tore (never acknowledged, or acknowledged before an fsync that never came):
        # cut off as a torn tail, so the key falls back to what it was before, rather than dropped.
        after = max((r.offset + r.record_len for r in res.records), default=FILE_HDR_SIZE)
        tail = [d for d in damaged if d.offset >= after and not d.in_region]
        if tail:
            good_end = min(d.offset for d in tail)
            damaged = [d for d in damaged if d not in tail]
            torn_record = True
    # One per damaged record, one per unreadable region (it held at least one record: how many is unknown).
    report.skipped_records += len(res.skipped) + len(damaged)
    report.damaged_records += len(damaged)
    if good_end < size:
        if torn_record:
            what = "a last record whose key + value fail their checksum: a torn write"
        elif tail_head is not None:
            what = "an incomplete last record (its header checks, the file ends inside it): a torn write"
        elif size - good_end < HDR_SIZE:
            what = "an incomplete last record header: a torn write"
        else:
            what = (
                "no record header checks in them: a torn write, or damage to the records there; "
                "if those were acknowledged, their keys may be served at their previous state"
            )
    if last:
        if not head_ok and not res.records and not res.damaged:
            # Crashed while creating it: start the file over.
            report.truncated_bytes += size
            os.ftruncate(seg.fd, 0)
            os.pwrite(seg.fd, encode_file_header(seg.id), 0)
            os.fdatasync(seg.fd)
            warn(f"{name}: rewrote a torn segment file ({size} bytes)")
            size = FILE_HDR_SIZE
        elif good_end < size:
            warn(f"!!! truncating the tail of {name} at offset {good_end} ({size - good_end} bytes): {what}")
            report.truncated_bytes += size - good_end
            os.ftruncate(seg.fd, good_end)
            os.fdatasync(seg.fd)
            size = good_end
    elif good_end < size:
        report.skipped_records += 1
        warn(f"{name}: ignored {size - good_end} corrupt trailing bytes at offset {good_end}: {what}")
    return res.records, damaged, size


def _write_fixes(active: Segment, data: bytes, count: int, warn: Callable[[str], None]) -> bool:
    """Append the records of ``_record_fixes`` to the active segment and sync them; False (warned) on error."""
    try:
        view = memoryview(data)
        off = active.size
        while view:
            n = os.pwrite(active.fd, view, off)
            off += n
            view = view[n:]
        os.fdatasync(active.fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(active.fd, active.size)
        warn(
            f"could not record the {count} key(s) that damaged records decided in {active.path.name}: "
            f"{exc.strerror}; at the next start they may be served at their previous state"
        )
        return False
    active.size += len(data)
    return True


def _records_for_hint(seg: Segment) -> list[Record]:
    from .segment import scan_headers

    return scan_headers(seg.fd, seg.size)
