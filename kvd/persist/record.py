"""The on-disk record format: fixed header, key, value; every byte covered by a checksum.

Segment file::

    file header (24 bytes): b"KVDSEG01" | segment id u64 | crc32 of the previous 16 bytes u32 | 4 pad
    record*

Record::

    magic b"KVR1" | hcrc u32 | type u8 | flags u8 | pad u16 | klen u32 | vlen u64 | expire_at_ms i64 | vsum u64
    key (klen bytes) | value (vlen bytes)

``hcrc`` (zlib crc32 of the 32 header bytes after it) lets recovery trust ``klen``/``vlen`` before reading a
payload, so a torn or flipped header is recognised without reading megabytes of garbage, and a scan can
resynchronise on the next valid header after a corrupt region. ``vsum`` is xxh3-64 over key and value: xxh3
runs at memory speed (tens of GB/s) where zlib's crc32 manages a few, and covering the key means a record can
never be served for another key. Types: SET, DEL, EXPIRE (expire_at 0 = persist), FLUSH (everything before it
is gone) and PAD (written by the disk-full probe; ignored).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import xxhash

FILE_MAGIC = b"KVDSEG01"
FILE_HEADER = struct.Struct("<8sQI4x")
FILE_HEADER_SIZE = FILE_HEADER.size  # 24

MAGIC = b"KVR1"
HEADER = struct.Struct("<4sIBBHIQqQ")
HEADER_SIZE = HEADER.size  # 40
_BODY = struct.Struct("<BBHIQqQ")  # the part covered by hcrc

SET, DEL, EXPIRE, FLUSH, PAD = 1, 2, 3, 4, 5
TYPES = (SET, DEL, EXPIRE, FLUSH, PAD)


class Location(NamedTuple):
    """Where a SET record lives. Small and immutable: the keyspace keeps one per key."""

    segment: int
    offset: int  # of the record's first byte in the segment file
    record_len: int
    value_len: int

    @property
    def value_offset(self) -> int:
        return self.offset + self.record_len - self.value_len


class Header(NamedTuple):
    type: int
    klen: int
    vlen: int
    expire_at: int
    vsum: int

    @property
    def record_len(self) -> int:
        return HEADER_SIZE + self.klen + self.vlen


def checksum(key: bytes, value: bytes | bytearray | memoryview) -> int:
    h = xxhash.xxh3_64()
    h.update(key)
    h.update(value)
    return h.intdigest()


def encode_header(rtype: int, key: bytes, value: bytes | bytearray | memoryview, expire_at: int) -> bytes:
    body = _BODY.pack(rtype, 0, 0, len(key), len(value), expire_at, checksum(key, value))
    return MAGIC + struct.pack("<I", zlib.crc32(body)) + body


def decode_header(raw: bytes | bytearray | memoryview) -> Header | None:
    """The header at the start of ``raw`` (≥ HEADER_SIZE bytes), or None if it is not a valid header."""
    if bytes(raw[:4]) != MAGIC:
        return None
    (hcrc,) = struct.unpack_from("<I", raw, 4)
    body = bytes(raw[8:HEADER_SIZE])
    if zlib.crc32(body) != hcrc:
        return None
    rtype, _flags, _pad, klen, vlen, expire_at, vsum = _BODY.unpack(body)
    if rtype not in TYPES:
        return None
    return Header(rtype, klen, vlen, expire_at, vsum)


def encode_file_header(segment: int) -> bytes:
    head = FILE_MAGIC + struct.pack("<Q", segment)
    return FILE_HEADER.pack(FILE_MAGIC, segment, zlib.crc32(head))


def decode_file_header(raw: bytes) -> int | None:
    if len(raw) < FILE_HEADER_SIZE:
        return None
    magic, segment, crc = FILE_HEADER.unpack_from(raw)
    if magic != FILE_MAGIC or zlib.crc32(raw[:16]) != crc:
        return None
    return segment
