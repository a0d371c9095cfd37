"""Value format of one KV chunk in kvd: a small self-describing header followed by the raw payload.

Layout (little-endian; ``hdr_len`` is a multiple of 64 so the payload stays aligned for any dtype)::

    off  size  field
      0     4  magic  b"KVDC"
      4     2  format version (1)
      6     2  hdr_len: bytes before the payload
      8     2  checksum algorithm (1 = xxh3-64, 2 = blake2b-64)
     10    16  dtype name, ASCII, NUL padded ("float32", "bfloat16", ...)
     26     2  ndim
     28     2  reserved (0)
     30    16  layout fingerprint (what the bytes mean: model, per-layer block shape, ...)
     46    16  chunk hash (the key's own hash: a value copied under another key is refused)
     62     8  payload length in bytes
     70  8*nd  shape (uint64 each)
      …        zero padding
    hdr-8   8  checksum over header[0:hdr_len-8] + payload

One key holds one whole value (LMCache's Redis path splits metadata and bytes over two keys, which can be evicted
or overwritten independently). Decoding checks every field against what the reader expects, and the checksum
covers the header as well as the payload, so a torn, truncated, stale-format, foreign-layout or bit-flipped value is
refused: :class:`CodecError`, which callers treat as a cache miss. It is never loaded as wrong KV.

Copies: :func:`header_size` lets the writer allocate one buffer of ``header + payload`` and gather the KV blocks
straight into its payload area; :func:`seal` then fills the header in place. A value goes to the socket from that
one buffer. :func:`decode` returns a ``memoryview`` of the received value's payload, from which the caller copies
into the KV cache directly. This module is plain Python (no torch): it works on buffers.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

try:  # xxh3 hashes at memory speed; blake2b (stdlib) is the fallback.
    import xxhash

    _HAVE_XXH3 = True
except ImportError:  # pragma: no cover - both shipped environments have xxhash
    _HAVE_XXH3 = False

MAGIC = b"KVDC"
VERSION = 1
ALGO_XXH3 = 1
ALGO_BLAKE2B = 2
DEFAULT_ALGO = ALGO_XXH3 if _HAVE_XXH3 else ALGO_BLAKE2B
_FIXED = struct.Struct("<4sHHH16sHH16s16sQ")
_ALIGN = 64
MAX_NDIM = 8


class CodecError(ValueError):
    """A stored value that must not be loaded (a miss for the caller); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Header:
    dtype: str
    shape: tuple[int, ...]
    layout_fp: bytes
    chunk_hash: bytes
    payload_len: int
    hdr_len: int
    algo: int


def header_size(ndim: int) -> int:
    """Bytes of the header for a payload of ``ndim`` dimensions."""
    if not 0 <= ndim <= MAX_NDIM:
        raise ValueError(f"ndim must be 0..{MAX_NDIM}")
    raw = _FIXED.size + 8 * ndim + 8
    return -(-raw // _ALIGN) * _ALIGN


def _checksum(algo: int, header_part: memoryview, payload: memoryview) -> int:
    if algo == ALGO_XXH3:
        if not _HAVE_XXH3:
            raise CodecError("value uses xxh3 but xxhash is not installed")
        h = xxhash.xxh3_64()
        h.update(header_part)
        h.update(payload)
        return h.intdigest()
    if algo == ALGO_BLAKE2B:
        b = hashlib.blake2b(digest_size=8)
        b.update(header_part)
        b.update(payload)
        return int.from_bytes(b.digest(), "little")
    raise CodecError(f"unknown checksum algorithm {algo}")


def _pad16(b: bytes, what: str) -> bytes:
    if len(b) > 16:
        raise ValueError(f"{what} longer than 16 bytes")
    return b.ljust(16, b"\0")


def seal(
    buf: bytearray | memoryview,
    *,
    dtype: str,
    shape: Sequence[int],
    layout_fp: bytes,
    chunk_hash: bytes,
    algo: int = DEFAULT_ALGO,
) -> None:
    """Write the header into ``buf[:header_size]`` for the payload already in ``buf[header_size:]``."""
    mv = memoryview(buf).cast("B")
    hdr_len = header_size(len(shape))
    payload_len = len(mv) - hdr_len
    if payload_len < 0:
        raise ValueError("buffer smaller than its header")
    _FIXED.pack_into(
        mv,
        0,
        MAGIC,
        VERSION,
        hdr_len,
        algo,
        _pad16(dtype.encode("ascii"), "dtype"),
        len(shape),
        0,
        _pad16(layout_fp, "layout fingerprint"),
        _pad16(chunk_hash, "chunk hash"),
        payload_len,
    )
    off = _FIXED.size
    for dim in shape:
        struct.pack_into("<Q", mv, off, dim)
        off += 8
    mv[off : hdr_len - 8] = bytes(hdr_len - 8 - off)
    csum = _checksum(algo, mv[: hdr_len - 8], mv[hdr_len:])
    struct.pack_into("<Q", mv, hdr_len - 8, csum)


def encode(
    payload: bytes | bytearray | memoryview,
    *,
    dtype: str,
    shape: Sequence[int],
    layout_fp: bytes,
    chunk_hash: bytes,
    algo: int = DEFAULT_ALGO,
) -> bytearray:
    """Header + a copy of ``payload`` (convenience for tests and tools; the hot path gathers in place)."""
    hdr = header_size(len(shape))
    pv = memoryview(payload).cast("B")
    buf = bytearray(hdr + len(pv))
    buf[hdr:] = pv
    seal(buf, dtype=dtype, shape=shape, layout_fp=layout_fp, chunk_hash=chunk_hash, algo=algo)
    return buf


def read_header(value: bytes | bytearray | memoryview) -> Header:
    """Parse (not verify) a header; raises :class:`CodecError` on anything malformed."""
    mv = memoryview(value).cast("B")
    if len(mv) < _FIXED.size:
        raise CodecError("value shorter than a header")
    magic, version, hdr_len, algo, dtype_raw, ndim, _res, layout_fp, chash, payload_len = _FIXED.unpack_from(mv, 0)
    if magic != MAGIC:
        raise CodecError("bad magic (not a kvd connector value)")
    if version != VERSION:
        raise CodecError(f"format version {version}, expected {VERSION}")
    if ndim > MAX_NDIM or hdr_len != header_size(ndim) or hdr_len > len(mv):
        raise CodecError("bad header length")
    if payload_len != len(mv) - hdr_len:
        raise CodecError(f"payload is {len(mv) - hdr_len} bytes, header says {payload_len} (truncated?)")
    shape = struct.unpack_from(f"<{ndim}Q", mv, _FIXED.size)
    try:
        dtype = dtype_raw.rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError as exc:
        raise CodecError("bad dtype field") from exc
    return Header(dtype, tuple(shape), layout_fp, chash, payload_len, hdr_len, algo)


def decode(
    value: bytes | bytearray | memoryview,
    *,
    dtype: str,
    shape: Sequence[int],
    itemsize: int,
    layout_fp: bytes,
    chunk_hash: bytes,
    verify_checksum: bool = True,
) -> memoryview:
    """Verify ``value`` against what the reader expects; return a view of its payload (no copy).

    Raises :class:`CodecError` on any mismatch: wrong magic/version, dtype, shape, layout, key, length or checksum.
    """
    mv = memoryview(value).cast("B")
    h = read_header(mv)
    if h.dtype != dtype:
        raise CodecError(f"dtype {h.dtype}, expected {dtype}")
    if h.shape != tuple(shape):
        raise CodecError(f"shape {h.shape}, expected {tuple(shape)}")
    if h.layout_fp != _pad16(layout_fp, "layout fingerprint"):
        raise CodecError("layout fingerprint differs (another model or KV layout)")
    if h.chunk_hash != _pad16(chunk_hash, "chunk hash"):
        raise CodecError("chunk hash differs (value stored under another key)")
    if h.payload_len != math.prod(shape) * itemsize:
        raise CodecError("payload length does not match shape and dtype")
    if verify_checksum:
        (stored,) = struct.unpack_from("<Q", mv, h.hdr_len - 8)
        if _checksum(h.algo, mv[: h.hdr_len - 8], mv[h.hdr_len :]) != stored:
            raise CodecError("checksum mismatch (corrupt value)")
    return mv[h.hdr_len :]
