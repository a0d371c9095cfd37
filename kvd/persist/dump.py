"""DUMP and RESTORE payloads: one string value in Redis's serialization format (``rdb.c``, ``cluster.c``).

A payload is ``<type byte> <value> <RDB version, 2 bytes LE> <CRC-64 of all before it, 8 bytes LE>``, so a
value DUMPed from Redis RESTOREs into kvd and the other way round (``tests/compat/test_dump.py`` moves values
both ways). kvd stores strings only (type 0). Their encodings:

* a length, then the bytes: ``00xxxxxx`` (< 64), ``01xxxxxx xxxxxxxx`` (< 16384, big-endian), ``0x80`` + 4
  bytes or ``0x81`` + 8 bytes (big-endian);
* an integer: ``0xC0`` int8, ``0xC1`` int16, ``0xC2`` int32 (little-endian), for values that print back as
  the same text (``"12"``, not ``"012"``);
* ``0xC3`` LZF: compressed length, original length, the LZF stream.

DUMP writes what Redis writes except LZF (Redis compresses strings over 20 bytes when it saves space; kvd
sends them as they are, which every Redis RESTOREs), and version 10, Redis 7.0's, so 7.0 and later accept it.
RESTORE takes versions up to 12 (Redis 7.4 and 8), as Redis takes those up to its own, and Valkey 9.0's 80: a
payload has no magic, only this number, and Valkey numbers its formats from 80 on (12 to 79 are Redis's), whose
strings are as ever (kvd/persist/rdb.py). The CRC-64 and LZF loops are C (``_dump.c``), with the same in Python
here where that was not built.
"""

from __future__ import annotations

import struct

try:
    from kvd.persist._dump import crc64, lzf_decompress
except ImportError:  # pragma: no cover - exercised by tests/unit/test_dump_payload.py through the Python versions
    crc64 = lzf_decompress = None  # type: ignore[assignment]

STRING = 0
DUMP_VERSION = 10
MAX_VERSION = 12  # Redis 7.4
VALKEY_VERSION = 80  # Valkey 9.0
_TYPES = {1: "list", 2: "set", 3: "zset", 4: "hash", 5: "zset", 6: "module", 7: "module", 9: "hash",
          10: "list", 11: "set", 12: "zset", 13: "hash", 14: "list", 15: "stream", 16: "hash", 17: "zset",
          18: "list", 19: "stream", 20: "set", 21: "stream",
          22: "hash", 23: "hash", 24: "hash", 25: "hash"}  # fmt: skip
_VALKEY_TYPES = {t: name for t, name in _TYPES.items() if t <= 22}  # Valkey 9.0: 22 is its own hash with TTLs


class PayloadError(ValueError):
    """``message`` is the error RESTORE answers."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def dump_payload(value: bytes | bytearray | memoryview) -> bytes:
    body = bytearray([STRING])
    body += encode_string(value)
    body += struct.pack("<H", DUMP_VERSION)
    body += struct.pack("<Q", _crc64(body))
    return bytes(body)


def load_payload(payload: bytes | bytearray | memoryview) -> bytes:
    """The string a payload holds; PayloadError with Redis's words when it is not one kvd can store."""
    body = _payload_body(payload)
    kind = body[0]
    if kind != STRING:
        name = _TYPES.get(kind)
        if name is None:
            raise PayloadError("ERR Bad data format")
        raise PayloadError(f"ERR Bad data format: the payload holds a {name}, and kvd stores strings only")
    value, _ = decode_string(body, 1)
    return value


def other_type(payload: bytes | bytearray | memoryview) -> str | None:
    """The type of the value a whole, checksummed payload holds when it is one kvd does not store ("list",
    "hash"...); None for a string or a payload RESTORE refuses anyway (a wrong checksum, an unknown type)."""
    try:
        return _TYPES.get(_payload_body(payload)[0])
    except PayloadError:
        return None


def _payload_body(payload: bytes | bytearray | memoryview) -> memoryview:
    data = memoryview(payload)
    if len(data) < 10:
        raise PayloadError("ERR DUMP payload version or checksum are wrong")
    version = int.from_bytes(data[-10:-8], "little")
    known = version <= MAX_VERSION or version == VALKEY_VERSION
    if not known or _crc64(data[:-8]) != int.from_bytes(data[-8:], "little"):
        raise PayloadError("ERR DUMP payload version or checksum are wrong")
    body = data[:-10]
    if not len(body):
        raise PayloadError("ERR Bad data format")
    return body


# -- string encodings (shared with RDB files, kvd/persist/rdb.py) -------------------------------------------


def encode_string(value: bytes | bytearray | memoryview) -> bytes:
    n = len(value)
    if n <= 11:
        text = bytes(value)
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is not None and b"%d" % number == text:
            if -(1 << 7) <= number < 1 << 7:
                return b"\xc0" + struct.pack("<b", number)
            if -(1 << 15) <= number < 1 << 15:
                return b"\xc1" + struct.pack("<h", number)
            if -(1 << 31) <= number < 1 << 31:
                return b"\xc2" + struct.pack("<i", number)
    return encode_length(n) + bytes(value)


def encode_length(n: int) -> bytes:
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n <= 0xFFFFFFFF:
        return b"\x80" + struct.pack(">I", n)
    return b"\x81" + struct.pack(">Q", n)


def decode_length(data: memoryview, pos: int) -> tuple[int, bool, int]:
    """(length or encoding type, whether it is an encoding type, position after it)."""
    if pos >= len(data):
        raise PayloadError("ERR Bad data format")
    first = data[pos]
    kind = first >> 6
    if kind == 0:
        return first & 0x3F, False, pos + 1
    if kind == 1:
        if pos + 2 > len(data):
            raise PayloadError("ERR Bad data format")
        return ((first & 0x3F) << 8) | data[pos + 1], False, pos + 2
    if kind == 3:
        return first & 0x3F, True, pos + 1
    width = {0x80: 4, 0x81: 8}.get(first)
    if width is None or pos + 1 + width > len(data):
        raise PayloadError("ERR Bad data format")
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "big"), False, pos + 1 + width


def decode_string(data: memoryview, pos: int) -> tuple[bytes, int]:
    n, encoded, pos = decode_length(data, pos)
    if not encoded:
        if pos + n > len(data):
            raise PayloadError("ERR Bad data format")
        return bytes(data[pos : pos + n]), pos + n
    if n in (0, 1, 2):  # int8, int16, int32
        width = 1 << n
        if pos + width > len(data):
            raise PayloadError("ERR Bad data format")
        return b"%d" % int.from_bytes(data[pos : pos + width], "little", signed=True), pos + width
    if n == 3:  # LZF
        compressed, _, pos = decode_length(data, pos)
        plain, _, pos = decode_length(data, pos)
        if pos + compressed > len(data):
            raise PayloadError("ERR Bad data format")
        try:
            return _lzf_decompress(data[pos : pos + compressed], plain), pos + compressed
        except ValueError:
            raise PayloadError("ERR Bad data format") from None
    raise PayloadError("ERR Bad data format")


# -- the byte loops, in Python where _dump.c was not built ----------------------------------------------------

_POLY_REFLECTED = 0x95AC9329AC4BC9B5
_TABLE: list[int] = []


def _crc64(data: bytes | bytearray | memoryview) -> int:
    return crc64_update(data, 0)


def crc64_update(data: bytes | bytearray | memoryview, crc: int) -> int:
    """The CRC-64 of what ``crc`` covered followed by ``data`` (Redis's ``crc64(crc, data, len)``)."""
    if crc64 is not None:
        return crc64(data, crc)
    return crc64_python(data, crc)


def crc64_python(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    if not _TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ _POLY_REFLECTED if c & 1 else c >> 1
            _TABLE.append(c)
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def _lzf_decompress(data: memoryview, size: int) -> bytes:
    if lzf_decompress is not None:
        return lzf_decompress(data, size)
    return lzf_decompress_python(bytes(data), size)


def lzf_decompress_python(data: bytes, size: int) -> bytes:
    out = bytearray()
    i = 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:
            run = data[i : i + ctrl + 1]
            if len(run) != ctrl + 1 or len(out) + len(run) > size:
                raise ValueError("LZF literal run past the end of its buffer")
            out += run
            i += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            if i >= len(data):
                raise ValueError("LZF input ends inside a length")
            length += data[i]
            i += 1
        if i >= len(data):
            raise ValueError("LZF input ends inside a reference")
        back = ((ctrl & 0x1F) << 8) + data[i] + 1
        i += 1
        length += 2
        if back > len(out) or len(out) + length > size:
            raise ValueError("LZF reference outside the output")
        start = len(out) - back
        for k in range(length):  # may overlap its own output
            out.append(out[start + k])
    if len(out) != size:
        raise ValueError("LZF output shorter than announced")
    return bytes(out)
