"""On-disk record format: segment file header, record header, checksums, and the verifying scanner.

Segment file layout::

    file header (24 bytes)   magic "KVDSEG\\r\\n" | u16 version | u16 reserved | u64 segment id | u32 crc32
    record*                  header (44 bytes) | key | value

Record header (little endian)::

    0  magic     4s   b"\\xabKVR"   (lets a scanner resync after a corrupt region with a fast find())
    4  type      u8   SET / DEL / EXPIRE / FLUSH / PAD
    5  flags     u8   reserved, 0
    6  reserved  u16
    8  klen      u32
    12 vlen      u32  values are < 4 GiB
    16 expire    i64  absolute unix ms, 0 = no TTL (SET: the TTL; EXPIRE: the new TTL)
    24 lsn       u64  log sequence number, see below
    32 checksum  u64  xxh3_64 of key + value
    40 hcrc      u32  crc32 of bytes 0..39

The header has its own CRC so a torn or flipped header is rejected *before* its lengths are trusted (a corrupt
vlen must never make a scanner skip over good records or allocate 4 GiB). The payload checksum is xxh3_64: about
18 GB/s here against 3.4 GB/s for zlib.crc32, so verifying a 32 MiB value costs under 2 ms, and it releases the
GIL. Key and value are hashed as one stream, so the writer hashes them separately without joining buffers and
the scanner hashes the contiguous slice in one call.

LSN. Records apply in LSN order, not file order. Normally the two agree; they differ only for tombstones (DEL,
EXPIRE, FLUSH) that compaction carries forward to the tail: a carried tombstone keeps its original LSN, so it
still cancels the older SET it was written for but can never cancel a SET written after it. Carried SETs get a
fresh LSN (they are re-validated against the keyspace first, so they are the current state). Hence a SET always
has a higher LSN than every record before it in file order, which keeps recovery a single forward pass.

Damage. A record whose header checks at the place a record must start (the file's first record, or right after
a record whose header checked) but whose payload checksum does not is a *damaged* record: its type, key length,
LSN, expire and checksum are known (the header CRC vouches for them), its key and value bytes are not. Its length
is trusted, so the scan goes on right after it; it is reported apart (``ScanResult.damaged``) so that recovery
can keep the key from falling back to an older version (recovery.py, "Damaged records").

Resync. A scanner that hits a record whose header does not check searches forward for the next magic whose
header CRC *and* payload checksum validate (Bitcask skips bad records the same way). A false match would need a
32-bit header CRC and a 64-bit payload hash to collide, i.e. a value that embeds a whole valid record. A magic
whose header checks but whose payload does not is not taken as a resync point (a value may embed a header), but
it is reported as damaged too: it is most likely a record of the unreadable region.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import xxhash

SET, DEL, EXPIRE, FLUSH, PAD = 1, 2, 3, 4, 5
TYPE_NAMES = {SET: "SET", DEL: "DEL", EXPIRE: "EXPIRE", FLUSH: "FLUSH", PAD: "PAD"}

FORMAT_VERSION = 1
FILE_MAGIC = b"KVDSEG\r\n"
_FILE_HDR = struct.Struct("<8sHHQ")
FILE_HDR_SIZE = _FILE_HDR.size + 4  # 24

REC_MAGIC = b"\xabKVR"
_REC_HDR = struct.Struct("<4sBBHIIqQQ")
HDR_SIZE = _REC_HDR.size + 4  # 44
REC_HDR_FIELDS = _REC_HDR  # the header up to its CRC, for code that walks headers itself (hint_of_written)
MAX_VALUE = (1 << 32) - 1
MAX_KEY = (1 << 32) - 1

_crc32 = zlib.crc32
_pack_crc = struct.Struct("<I").pack
_unpack_crc = struct.Struct("<I").unpack_from


class Record(NamedTuple):
    """A record as found by a scan or listed in a hint file (no value bytes)."""

    rtype: int
    key: bytes
    offset: int
    record_len: int
    value_len: int
    expire: int
    lsn: int


def encode_file_header(segment_id: int) -> bytes:
    head = _FILE_HDR.pack(FILE_MAGIC, FORMAT_VERSION, 0, segment_id)
    return head + _pack_crc(_crc32(head))


def decode_file_header(buf: Any) -> int | None:
    """The segment id, or None if the header is torn, corrupt or of another format version."""
    if len(buf) < FILE_HDR_SIZE:
        return None
    head = bytes(buf[: _FILE_HDR.size])
    if _crc32(head) != _unpack_crc(buf, _FILE_HDR.size)[0]:
        return None
    magic, version, _, seg_id = _FILE_HDR.unpack(head)
    if magic != FILE_MAGIC or version != FORMAT_VERSION:
        return None
    return int(seg_id)


def checksum(key: bytes | memoryview, value: bytes | bytearray | memoryview) -> int:
    h = xxhash.xxh3_64()
    h.update(key)
    h.update(value)
    return int(h.intdigest())


def encode_header(rtype: int, klen: int, vlen: int, expire: int, lsn: int, csum: int) -> bytes:
    head = _REC_HDR.pack(REC_MAGIC, rtype, 0, 0, klen, vlen, expire, lsn, csum)
    return head + _pack_crc(_crc32(head))


def decode_header(buf: Any, off: int = 0) -> tuple[int, int, int, int, int, int] | None:
    """(type, klen, vlen, expire, lsn, checksum) if the 44 bytes at ``off`` are a valid header, else None."""
    if len(buf) - off < HDR_SIZE:
        return None
    magic, rtype, _flags, _res, klen, vlen, expire, lsn, csum = _REC_HDR.unpack_from(buf, off)
    if magic != REC_MAGIC or rtype not in TYPE_NAMES:
        return None
    if _crc32(memoryview(buf)[off : off + _REC_HDR.size]) != _unpack_crc(buf, off + _REC_HDR.size)[0]:
        return None
    return rtype, klen, vlen, expire, lsn, csum


class Damaged(NamedTuple):
    """A record whose header checks but whose key + value do not match the header's checksum."""

    rtype: int
    key: bytes  # as read: not verified (for a DEL or EXPIRE, whose payload is the key alone, known to be wrong)
    offset: int
    record_len: int
    expire: int
    lsn: int
    checksum: int  # xxh3_64 of the key + value that were written (of the key alone for DEL / EXPIRE)
    in_region: bool  # found inside an unreadable region (``skipped`` or the tail) rather than on a record boundary


class ScanResult(NamedTuple):
    records: list[Record]
    skipped: list[tuple[int, int]]  # (offset, length) of unreadable regions (no header checks) skipped in the middle
    good_end: int  # end of the last good or damaged record: everything after it is a torn/corrupt tail
    damaged: list[Damaged]  # whole records whose header checks and payload does not (see "Damage" above)


def _valid_at(
    buf: Any,
    mv: memoryview,
    pos: int,
    end: int,
    verify: bool,
    damaged: list[Damaged] | None = None,
    region: bool = False,
) -> Record | None:
    """The record at ``pos`` if its header and payload check; None otherwise, after adding it to ``damaged``
    when its header checks, it fits before ``end`` and only the payload does not."""
    head = decode_header(buf, pos)
    if head is None:
        return None
    rtype, klen, vlen, expire, lsn, csum = head
    rec_len = HDR_SIZE + klen + vlen
    if pos + rec_len > end:
        return None
    koff = pos + HDR_SIZE
    if verify and xxhash.xxh3_64_intdigest(mv[koff : pos + rec_len]) != csum:
        if damaged is not None:
            damaged.append(Damaged(rtype, bytes(mv[koff : koff + klen]), pos, rec_len, expire, lsn, csum, region))
        return None
    return Record(rtype, bytes(mv[koff : koff + klen]), pos, rec_len, vlen, expire, lsn)


def scan(
    buf: Any,
    start: int,
    end: int,
    *,
    verify: bool = True,
    progress: Callable[[int], None] | None = None,
) -> ScanResult:
    """Walk the records of ``buf[start:end]`` (an mmap or bytes: anything with ``find`` and the buffer protocol).

    With ``verify`` every payload checksum is checked. A record whose header checks but whose payload does not
    is reported in ``damaged`` and stepped over (its length is vouched for by the header CRC). Unreadable regions
    (no header checks) followed by a valid record are skipped and reported; an unreadable region with no valid
    record after it is the tail (``good_end`` stops before it).
    """
    mv = memoryview(buf)
    records: list[Record] = []
    skipped: list[tuple[int, int]] = []
    damaged: list[Damaged] = []
    pos = start
    good_end = start
    reported = start
    try:
        while pos < end:
            n_damaged = len(damaged)
            rec = _valid_at(buf, mv, pos, end, verify, damaged)
            if rec is None:
                if len(damaged) > n_damaged:  # a whole record, damaged: step over it
                    pos += damaged[-1].record_len
                    good_end = pos
                    continue
                nxt = _resync(buf, mv, pos + 1, end, verify, damaged)
                if nxt is None:
                    break
                skipped.append((pos, nxt - pos))
                pos = nxt
                continue
            records.append(rec)
            pos += rec.record_len
            good_end = pos
            if progress is not None and pos - reported >= 64 << 20:
                progress(pos - reported)
                reported = pos
    finally:
        mv.release()
    if progress is not None and good_end > reported:
        progress(good_end - reported)
    return ScanResult(records, skipped, good_end, damaged)


def _resync(buf: Any, mv: memoryview, pos: int, end: int, verify: bool, damaged: list[Damaged]) -> int | None:
    # Only where a whole header still fits can a record start. The bound is also what keeps this safe on an
    # mmap: CPython 3.11.0-3.11.4 (Debian bookworm ships 3.11.2) reads one byte past the ``end`` given to
    # ``mmap.find`` (gh-105235), which is a SIGSEGV when ``end`` is the end of a file whose size is a multiple
    # of the page size, as a torn tail after ``kill -9`` can be. Searching up to the last place a header can
    # start keeps that extra byte inside the header's room, so inside the mapping.
    last = max(pos, end - HDR_SIZE + len(REC_MAGIC))  # never negative: find would count it from the end
    while True:
        pos = buf.find(REC_MAGIC, pos, last)
        if pos < 0:
            return None
        if _valid_at(buf, mv, pos, end, verify, damaged, region=True) is not None:
            return pos
        pos += 1
