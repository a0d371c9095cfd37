"""Segment files and their hint files: naming, scanning with verification, and the sealed-segment index.

A segment (``0000000042.seg``) is appended to until it reaches ``segment-size``, then sealed: fsynced, never
written again, and given a hint file (``0000000042.hint``) listing every record's type, key, offset, lengths
and deadline. Restart reads the hint instead of the segment, so it costs O(keys), not O(bytes of values). A
hint ends with an xxh3 of its contents and names the segment size it describes; a hint that fails either check
is ignored and the segment is scanned instead (the Bitcask rule: a hint is an optimisation, never the truth).

``scan()`` walks a segment verifying every header and checksum. On a bad record it searches forward for the
next valid one (a header whose crc checks and whose payload checksum matches); what lies between is skipped
and counted. If no valid record follows, the bad bytes are a torn tail and ``scan`` reports where the good
data ends, so the caller can truncate the active segment there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from .record import FILE_HEADER_SIZE, HEADER_SIZE, MAGIC, SET, Header, checksum, decode_file_header, decode_header

SEG_SUFFIX = ".seg"
HINT_SUFFIX = ".hint"
HINT_MAGIC = b"KVDHINT1"
_HINT_HEAD = struct.Struct("<8sQQQ")  # magic, segment id, segment size, entry count
_HINT_ENTRY = struct.Struct("<BIQQQq")  # type, klen, offset, record_len, vlen, expire_at
_RESYNC_CHUNK = 1 << 20


def segment_path(directory: Path, segment: int) -> Path:
    return directory / f"{segment:010d}{SEG_SUFFIX}"


def hint_path(directory: Path, segment: int) -> Path:
    return directory / f"{segment:010d}{HINT_SUFFIX}"


def list_segments(directory: Path) -> list[int]:
    ids = []
    for entry in directory.iterdir():
        if entry.suffix == SEG_SUFFIX and entry.stem.isdigit():
            ids.append(int(entry.stem))
    return sorted(ids)


@dataclass(slots=True)
class HintEntry:
    type: int
    key: bytes
    offset: int
    record_len: int
    value_len: int
    expire_at: int


@dataclass
class ScanResult:
    entries: list[HintEntry] = field(default_factory=list)
    good_end: int = FILE_HEADER_SIZE  # end of the last valid record
    skipped_records: int = 0  # corrupt regions skipped (each counted once)
    skipped_bytes: int = 0
    torn_bytes: int = 0  # bytes after good_end that hold no valid record
    header_ok: bool = True


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_hint(directory: Path, segment: int, segment_size: int, entries: list[HintEntry]) -> None:
    """Write the hint atomically: tmp file, fsync, rename, fsync the directory."""
    parts = [_HINT_HEAD.pack(HINT_MAGIC, segment, segment_size, len(entries))]
    for e in entries:
        parts.append(_HINT_ENTRY.pack(e.type, len(e.key), e.offset, e.record_len, e.value_len, e.expire_at))
        parts.append(e.key)
    body = b"".join(parts)
    data = body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))
    final = hint_path(directory, segment)
    tmp = final.with_suffix(".hint.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_dir(directory)


def read_hint(directory: Path, segment: int, segment_size: int) -> list[HintEntry] | None:
    """The hint's entries, or None if it is missing, corrupt or describes another size of segment."""
    try:
        data = hint_path(directory, segment).read_bytes()
    except OSError:
        return None
    if len(data) < _HINT_HEAD.size + 8:
        return None
    body, (digest,) = data[:-8], struct.unpack("<Q", data[-8:])
    if xxhash.xxh3_64_intdigest(body) != digest:
        return None
    magic, seg, size, count = _HINT_HEAD.unpack_from(body)
    if magic != HINT_MAGIC or seg != segment or size != segment_size:
        return None
    entries = []
    pos = _HINT_HEAD.size
    try:
        for _ in range(count):
            rtype, klen, offset, record_len, vlen, expire_at = _HINT_ENTRY.unpack_from(body, pos)
            pos += _HINT_ENTRY.size
            key = body[pos : pos + klen]
            pos += klen
            entries.append(HintEntry(rtype, key, offset, record_len, vlen, expire_at))
    except struct.error:
        return None
    return entries if pos == len(body) else None


def _read_record(fd: int, offset: int, size: int) -> tuple[Header, bytes] | None:
    """Verify the record at ``offset``; its header and key if it is whole and its checksum matches."""
    raw = os.pread(fd, HEADER_SIZE, offset)
    if len(raw) < HEADER_SIZE:
        return None
    header = decode_header(raw)
    if header is None or offset + header.record_len > size:
        return None
    key = os.pread(fd, header.klen, offset + HEADER_SIZE)
    value = bytearray(header.vlen)
    if header.vlen and os.preadv(fd, [value], offset + HEADER_SIZE + header.klen) != header.vlen:
        return None
    if len(key) != header.klen or checksum(key, value) != header.vsum:
        return None
    return header, key


def _resync(fd: int, start: int, size: int) -> int | None:
    """The offset of the next valid record after ``start``, or None."""
    pos = start
    while pos < size:
        chunk = os.pread(fd, _RESYNC_CHUNK + len(MAGIC), pos)
        at = chunk.find(MAGIC, 1 if pos == start else 0)
        while at >= 0:
            if _read_record(fd, pos + at, size) is not None:
                return pos + at
            at = chunk.find(MAGIC, at + 1)
        pos += _RESYNC_CHUNK
    return None


def scan(path: Path, segment: int, progress: Callable[[int], None] | None = None) -> ScanResult:
    """Read every record of a segment, verifying checksums; see the module docstring."""
    result = ScanResult()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if decode_file_header(os.pread(fd, FILE_HEADER_SIZE, 0)) != segment:
            result.header_ok = False
            result.good_end = 0
            result.torn_bytes = size
            return result
        pos = FILE_HEADER_SIZE
        while pos < size:
            found = _read_record(fd, pos, size)
            if found is None:
                nxt = _resync(fd, pos, size)
                if nxt is None:
                    result.torn_bytes = size - pos
                    break
                result.skipped_records += 1
                result.skipped_bytes += nxt - pos
                pos = nxt
                continue
            header, key = found
            result.entries.append(HintEntry(header.type, key, pos, header.record_len, header.vlen, header.expire_at))
            pos += header.record_len
            result.good_end = pos
            if progress is not None:
                progress(header.record_len)
    finally:
        os.close(fd)
    return result


def iter_sets(entries: list[HintEntry]) -> Iterator[HintEntry]:
    return (e for e in entries if e.type == SET)
