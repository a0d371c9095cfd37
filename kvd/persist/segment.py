"""Segment files and their hint (index) files.

A segment ``<id:010d>.seg`` is appended to until it reaches ``segment_size``, then sealed: fsynced, never written
again, and given a hint file ``<id:010d>.hint`` that lists every record (type, key, offset, lengths, expire, LSN)
so a restart folds the index without reading any value (Bitcask's hint files). The hint is written to a ``.tmp``
file, fsynced, renamed over, and the directory fsynced, so a crash leaves either no hint or a complete one; it
ends with an xxh3_64 of its whole content and records the data length it covers, so a hint that is corrupt,
truncated or does not match its segment's size is ignored (the segment is scanned instead).

Hint layout: header ``magic | u16 version | u16 reserved | u64 segment id | u64 data_len | u64 count``, then per
record ``u8 type | u32 klen | u64 offset | u64 record_len | u32 value_len | i64 expire | u64 lsn | key``, then an
u64 xxh3_64 of everything before it.

The writer builds the hint as it writes (``HintBuilder``): one packed entry per record, spilled to
``<id>.hint.part.tmp`` every ``HINT_SPILL`` bytes, so its memory stays bounded. Sealing then writes the header
into the reserved space, appends the hash, fsyncs and renames: no record is visited again. (Walking the headers
at seal instead held the GIL the event loop needs for about 3 s per 256 MiB segment of small values, and cost
small persisted writes about a tenth of their throughput: docs/operations.md, "Hints built while writing".)
A segment whose records the writer did not all see (the one recovery continues appending to, one cut short by
a write error, a probe's) gets its hint from its headers (``hint_of_written``), or from a scan if a header
does not check out. A spill made by a batch the event loop writes inline is a page-cache write of 1 MiB on
the loop, once per about 16 000 small records.

One fd per segment, opened O_RDWR for the active one and O_RDONLY for sealed ones, serves every pread. It is
closed only when the segment has been unlinked *and* no read is in flight (``Segment.readers``), so a GET that
raced with compaction still reads the old, intact bytes.

Rewriting in place (``rewrite``, compaction's main path, see maintenance.py). The records a sealed segment keeps
are copied verbatim, in file order, into ``<id>.seg.tmp`` (``copy_file_range``: the bytes never enter the
process), which is fdatasync'ed and given its hint (``<id>.hint.tmp``, fsynced). Then the old hint is unlinked,
the new file renamed over the segment, the new hint renamed over the hint, and the directory fsynced. A record
keeps its LSN, checksum and relative order, so recovery folds the new file exactly as it folded the old one,
minus the records compaction dropped. A crash between any two steps leaves one of: the old segment with its
hint, the old segment without a hint (scanned), the new segment without a hint (scanned), or the new segment
with its hint; a stale hint is never used because its data length no longer matches (and if nothing was
dropped, the two files are the same bytes). Leftover ``.tmp`` files are removed by recovery. The old file's
inode stays open (and readable) through its ``Segment`` object until the last read that started on it ends.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import xxhash

from .keyfilter import KeyFilter
from .record import FILE_HDR_SIZE, HDR_SIZE, REC_HDR_FIELDS, REC_MAGIC, TYPE_NAMES, Record, encode_file_header, scan

HINT_MAGIC = b"KVDHINT\n"
_HINT_HDR = struct.Struct("<8sHHQQQ")
_HINT_ENT = struct.Struct("<BIQQIqQ")
_U64 = struct.Struct("<Q")
_CRC = struct.Struct("<I")


def seg_name(seg_id: int) -> str:
    return f"{seg_id:010d}.seg"


def hint_name(seg_id: int) -> str:
    return f"{seg_id:010d}.hint"


class Segment:
    """Loop-side bookkeeping for one segment file (threads only read ``fd``/``path``)."""

    __slots__ = (
        "closed",
        "doomed",
        "fd",
        "hint_path",
        "id",
        "key",
        "live",
        "path",
        "readers",
        "ready",
        "sealed",
        "set_keys",
        "size",
    )

    def __init__(self, directory: Path, seg_id: int, size: int = FILE_HDR_SIZE, key: int | None = None) -> None:
        self.id = seg_id  # the file's name and its place in recovery's order
        # What a Location's ``segment`` names: the id, except for a file that replaced its segment by a rewrite in
        # place, which gets a fresh negative key so that locations in the old file and in the new one never mix.
        self.key = seg_id if key is None else key
        self.path = directory / seg_name(seg_id)
        self.hint_path = directory / hint_name(seg_id)
        self.fd = -1
        self.size = size  # bytes allocated to records so far (== file size once written)
        self.live = 0  # bytes of SET records the keyspace still points at
        self.sealed = False  # no more appends
        self.ready = False  # sealed and its hint written: a candidate for compaction / eviction
        self.set_keys = KeyFilter()  # hash(key) of every SET record: whether a tombstone is still needed
        self.readers = 0
        self.doomed = False  # unlinked (or about to be): close the fd once readers drop to 0
        self.closed = False

    @property
    def dead(self) -> int:
        return max(0, self.size - FILE_HDR_SIZE - self.live)

    def dead_ratio(self) -> float:
        body = self.size - FILE_HDR_SIZE
        return self.dead / body if body > 0 else 1.0

    def close_fd(self) -> None:
        if not self.closed and self.fd >= 0:
            self.closed = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode_hint(seg_id: int, data_len: int, records: list[Record]) -> bytes:
    parts = []
    ent = _HINT_ENT.pack
    for r in records:
        parts.append(ent(r.rtype, len(r.key), r.offset, r.record_len, r.value_len, r.expire, r.lsn))
        parts.append(r.key)
    return _hint_file(seg_id, data_len, len(records), parts)


def _hint_file(seg_id: int, data_len: int, count: int, entries: list[bytes]) -> bytes:
    """Header, the ``count`` entries (each a packed ``_HINT_ENT`` followed by its key) and the trailing hash."""
    body = _HINT_HDR.pack(HINT_MAGIC, 1, 0, seg_id, data_len, count) + b"".join(entries)
    return body + _U64.pack(xxhash.xxh3_64_intdigest(body))


def decode_hint(data: bytes, seg_id: int, data_len: int) -> list[Record] | None:
    """The records of a hint, or None if it is corrupt or describes another segment/size."""
    if len(data) < _HINT_HDR.size + 8:
        return None
    if xxhash.xxh3_64_intdigest(memoryview(data)[:-8]) != _U64.unpack_from(data, len(data) - 8)[0]:
        return None
    magic, version, _, hid, hlen, count = _HINT_HDR.unpack_from(data, 0)
    if magic != HINT_MAGIC or version != 1 or hid != seg_id or hlen != data_len:
        return None
    records: list[Record] = []
    pos = _HINT_HDR.size
    end = len(data) - 8
    unpack = _HINT_ENT.unpack_from
    size = _HINT_ENT.size
    new = tuple.__new__  # Record(...) without its Python frame: once per record of every hint at start-up
    try:
        for _ in range(count):
            rtype, klen, off, rlen, vlen, expire, lsn = unpack(data, pos)
            pos += size
            records.append(new(Record, (rtype, data[pos : pos + klen], off, rlen, vlen, expire, lsn)))
            pos += klen
    except struct.error:
        return None
    return records if pos == end else None


def read_hint(seg: Segment, data_len: int) -> list[Record] | None:
    try:
        data = seg.hint_path.read_bytes()
    except OSError:
        return None
    return decode_hint(data, seg.id, data_len)


def hint_of_written(fd: int, seg_id: int, data_len: int) -> bytes | None:
    """The hint of a segment this process has just written, straight from its record headers: the same bytes as
    ``encode_hint(scan_headers(...))`` without building a ``Record`` per record. It runs on the maintenance
    thread, under the GIL the event loop needs, once per sealed segment: measured on 64 MiB of small records
    (555 036), 0.76 s against 1.67 s for the scan and encode, so a 256 MiB segment of small values holds the
    GIL for about 3 s instead of 6.7. None if a header does not check out (the caller then scans, which also
    skips damage)."""
    if data_len <= FILE_HDR_SIZE:
        return encode_hint(seg_id, data_len, [])
    unpack = REC_HDR_FIELDS.unpack_from
    crc_at = _CRC.unpack_from
    ent = _HINT_ENT.pack
    parts: list[bytes] = []
    append = parts.append
    count = 0
    with mmap.mmap(fd, data_len, prot=mmap.PROT_READ) as mm:
        mv = memoryview(mm)
        try:
            pos = FILE_HDR_SIZE
            while pos < data_len:
                if pos + HDR_SIZE > data_len:
                    return None
                magic, rtype, _flags, _res, klen, vlen, expire, lsn, _csum = unpack(mm, pos)
                crc_pos = pos + REC_HDR_FIELDS.size
                if (
                    magic != REC_MAGIC
                    or rtype not in TYPE_NAMES
                    or zlib.crc32(mv[pos:crc_pos]) != crc_at(mm, crc_pos)[0]
                ):
                    return None
                rec_len = HDR_SIZE + klen + vlen
                if pos + rec_len > data_len:
                    return None
                append(ent(rtype, klen, pos, rec_len, vlen, expire, lsn))
                append(mm[pos + HDR_SIZE : pos + HDR_SIZE + klen])
                count += 1
                pos += rec_len
        finally:
            mv.release()
    return _hint_file(seg_id, data_len, count, parts)


HINT_SPILL = 1 << 20


class HintBuilder:
    """The hint of the segment the writer is appending to, built entry by entry (writer thread; ``install`` runs
    in the maintenance thread once the writer has moved on). Costs one struct pack per record, where building
    it from the file at seal cost a header walk per record, all of it under the GIL."""

    __slots__ = ("buf", "count", "end", "fd", "path", "spilled")

    def __init__(self, seg: Segment) -> None:
        self.path = seg.hint_path.with_name(seg.hint_path.name + ".part.tmp")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buf = bytearray(_HINT_HDR.size)  # room for the header, written at the end
        self.spilled = 0  # bytes of buf already in the file
        self.count = 0
        self.end = FILE_HDR_SIZE  # the segment offset after the last record added

    def add(self, rtype: int, key: bytes, offset: int, rec_len: int, vlen: int, expire: int, lsn: int) -> None:
        if self.fd < 0:  # abandoned: the segment gets its hint from the file at seal
            return
        buf = self.buf
        buf += _HINT_ENT.pack(rtype, len(key), offset, rec_len, vlen, expire, lsn)
        buf += key
        self.count += 1
        self.end = offset + rec_len
        if len(buf) >= HINT_SPILL:
            try:
                self.spill()
            except OSError:  # never a reason to fail the segment's writes
                self.abandon()

    def added(self, count: int, end: int) -> None:
        """``count`` entries were appended to ``buf`` directly (the writer's C packer, ``_records.c``); the last
        record ends at ``end``."""
        self.count += count
        self.end = end
        if len(self.buf) >= HINT_SPILL:
            try:
                self.spill()
            except OSError:
                self.abandon()

    def spill(self) -> None:
        view = memoryview(self.buf)
        while view:
            n = os.pwrite(self.fd, view, self.spilled)
            self.spilled += n
            view = view[n:]
        view.release()
        self.buf.clear()

    def install(self, seg: Segment, data_len: int) -> bool:
        """Finish the hint of ``seg`` (fsynced up to ``data_len``) and put it in place; False, having done
        nothing, if the entries do not cover exactly ``data_len`` (the caller builds it from the file)."""
        if self.fd < 0 or self.end != data_len:
            self.abandon()
            return False
        try:
            self.spill()
            os.pwrite(self.fd, _HINT_HDR.pack(HINT_MAGIC, 1, 0, seg.id, data_len, self.count), 0)
            with mmap.mmap(self.fd, self.spilled, prot=mmap.PROT_READ) as mm:
                digest = xxhash.xxh3_64_intdigest(mm)
            os.pwrite(self.fd, _U64.pack(digest), self.spilled)
            os.fsync(self.fd)
        except BaseException:
            self.abandon()
            raise
        os.close(self.fd)
        self.fd = -1
        os.replace(self.path, seg.hint_path)
        fsync_dir(seg.path.parent)
        return True

    def abandon(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def write_hint(seg: Segment, data_len: int, records: list[Record]) -> None:
    _write_hint_bytes(seg, encode_hint(seg.id, data_len, records))


def _hint_of(fd: int, seg_id: int, data_len: int) -> bytes:
    data = hint_of_written(fd, seg_id, data_len)
    return data if data is not None else encode_hint(seg_id, data_len, scan_headers(fd, data_len))


def _tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_hint_bytes(seg: Segment, data: bytes) -> None:
    tmp = _tmp_path(seg.hint_path)
    _write_synced(tmp, data)
    os.replace(tmp, seg.hint_path)
    fsync_dir(seg.path.parent)


def copy_range(src: int, dst: int, src_off: int, dst_off: int, count: int) -> None:
    """Copy ``count`` bytes between files at the given offsets: ``copy_file_range`` (in the kernel, no copy
    through this process), or pread/pwrite where the file system does not support it."""
    while count:
        try:
            n = os.copy_file_range(src, dst, count, src_off, dst_off)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = -1
        if n < 0:
            buf = os.pread(src, min(count, 8 << 20), src_off)
            n = os.pwrite(dst, buf, dst_off) if buf else 0
        if n == 0:
            raise OSError(errno.EIO, f"unexpected end of file copying {count} bytes at offset {src_off}")
        src_off += n
        dst_off += n
        count -= n


def rewrite(seg: Segment, ranges: list[tuple[int, int]], aborted: Callable[[], bool]) -> tuple[int, int] | None:
    """Replace a sealed segment's file by one holding only ``ranges`` (offset, length) of it, in that order
    (see "Rewriting in place" above). Runs in the maintenance thread. Returns the new file's fd (read-only) and
    size; None, with nothing changed, if ``aborted()`` says so before the switch; OSError, with nothing changed
    either, if a step before the switch fails. Once the new file has replaced the old one, a failure to install
    its hint is ignored: the segment is right, and the next start scans it."""
    tmp = _tmp_path(seg.path)
    hint_tmp = _tmp_path(seg.hint_path)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    switched = False
    try:
        os.pwrite(fd, encode_file_header(seg.id), 0)
        size = FILE_HDR_SIZE
        for offset, length in ranges:
            copy_range(seg.fd, fd, offset, size, length)
            size += length
        os.fdatasync(fd)
        _write_synced(hint_tmp, _hint_of(fd, seg.id, size))
        if aborted():
            return None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.hint_path)
        os.replace(tmp, seg.path)
        switched = True
        with contextlib.suppress(OSError):  # without it the new segment is scanned at the next start: still right
            os.replace(hint_tmp, seg.hint_path)
            fsync_dir(seg.path.parent)
        return os.open(seg.path, os.O_RDONLY), size
    finally:
        os.close(fd)
        if not switched:
            for path in (tmp, hint_tmp):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def scan_headers(fd: int, data_len: int) -> list[Record]:
    """Walk the record headers of a segment that is known good (just written), without hashing payloads."""
    if data_len <= FILE_HDR_SIZE:
        return []
    with mmap.mmap(fd, data_len, prot=mmap.PROT_READ) as mm:
        return scan(mm, FILE_HDR_SIZE, data_len, verify=False).records


def list_records(seg: Segment) -> list[Record]:
    """Every record of a sealed segment: from its hint, else by walking headers (verifying payloads then,
    since without a hint the segment may be one that recovery found damaged)."""
    size = os.fstat(seg.fd).st_size
    records = read_hint(seg, size)
    if records is not None:
        return records
    if size <= FILE_HDR_SIZE:
        return []
    with mmap.mmap(seg.fd, size, prot=mmap.PROT_READ) as mm:
        return scan(mm, FILE_HDR_SIZE, size, verify=True).records


def seal(seg: Segment, data_len: int, hint: HintBuilder | None = None) -> None:
    """Make a segment immutable on disk: fsync it, then write its hint (the writer's, if it has one)."""
    sync_segment(seg)
    seal_hint(seg, data_len, hint)


def sync_segment(seg: Segment) -> None:
    """A seal's fsync: what it fails to do leaves records that may not be on disk (``SegmentLog.sync_then``)."""
    os.fdatasync(seg.fd)


def seal_hint(seg: Segment, data_len: int, hint: HintBuilder | None = None) -> None:
    """A seal's hint: what it fails to do costs the next start a scan of the segment, and loses nothing."""
    if hint is None or not hint.install(seg, data_len):
        _write_hint_bytes(seg, _hint_of(seg.fd, seg.id, data_len))


def read_exact_into(fd: int, bufs: list[memoryview], offset: int) -> int:
    """preadv until every buffer is full or EOF; returns bytes read."""
    total = 0
    bufs = [b for b in bufs if len(b)]
    while bufs:
        n = os.preadv(fd, bufs, offset)
        if n <= 0:
            break
        total += n
        offset += n
        while n and bufs:
            first = bufs[0]
            if n >= len(first):
                n -= len(first)
                bufs.pop(0)
            else:
                bufs[0] = first[n:]
                n = 0
    return total
