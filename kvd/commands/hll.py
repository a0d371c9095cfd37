"""HyperLogLog sketches in Redis's string layout: what PFADD, PFCOUNT, PFMERGE and PFDEBUG read and write.

A HyperLogLog is an ordinary string value, so it is stored, logged, replicated and dumped as any other; what
makes one is its layout, which is Redis's to the byte (a sketch moves between kvd and Redis through RDB files,
DUMP/RESTORE and replication, and GET returns the same bytes on both):

    "HYLL" | encoding (0 dense, 1 sparse) | 3 unused bytes | cached cardinality, 8 bytes little endian | registers

16384 registers (P = 14) each hold the longest run of zeros (plus one) seen in the 50 hash bits past the
register's index; a 64-bit MurmurHash2 (``MurmurHash64A``, seed 0xadc83b19) of the element picks both. The top
bit of the cache's last byte marks the cache stale. Two encodings:

* dense: the registers as 6-bit fields packed from the least significant bit up, 12 288 bytes;
* sparse: run-length opcodes, ZERO (``00xxxxxx``, 1-64 zero registers), XZERO (``01xxxxxx xxxxxxxx``, 1-16384
  zero registers) and VAL (``1vvvvvxx``, 1-4 registers of value 1-32). A fresh sketch is one XZERO (18 bytes).
  A write that needs a value above 32, or would grow the string past ``hll-sparse-max-bytes``, turns it dense.

Sparse writes follow Redis's ``hllSparseSet`` step for step (split the opcode that covers the register, then
merge equal VAL neighbours within five opcodes of it) rather than re-encoding the registers, because the sparse
form is not canonical: the bytes depend on the order of the writes, and kvd's must be Redis's for the same
commands. The cardinality is Otmar Ertl's estimator (arXiv:1702.01284) as Redis 7 computes it, in doubles.

Cost. A PFADD to a dense sketch copies its 12 KiB (kvd never changes a stored value in place) and raises the
6-bit registers in the copy; a count or a merge unpacks them to one byte each. Those loops, the hash, the register
histogram of a count and the maximum of a merge are C (``_hll.c``) where it was built, and the same here in Python
where it was not (``*_python``; tests/unit/test_hll.py compares them): in Python a hash is about 1 us, unpacking
or packing 0.1 ms (``bytes.translate`` does the bit work), a histogram 0.8 ms and a merge 1.3 ms. A write to a
sparse sketch finds its opcode by bisection (O(log n)) and inserts into a list (O(n) memmove), in Python either
way: a sparse sketch holds at most ``hll-sparse-max-bytes`` opcodes.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_right
from collections import Counter

from kvd.protocol.errors import CommandError

try:
    from kvd.commands import _hll
except ImportError:  # pragma: no cover - the Python versions below are tested in tests/unit/test_hll.py
    _hll = None  # type: ignore[assignment]

MAGIC = b"HYLL"
HEADER = 16
P = 14
REGISTERS = 1 << P
Q = 64 - P  # the hash bits that give the run of zeros
DENSE_SIZE = HEADER + REGISTERS * 6 // 8
DENSE, SPARSE = 0, 1
SPARSE_VAL_MAX = 32
SPARSE_VAL_MAX_LEN = 4
SPARSE_ZERO_MAX_LEN = 64
SPARSE_XZERO_MAX_LEN = 16384
ALPHA_INF = 0.721347520444481703680  # 0.5 / ln(2)

# Opcode kinds of the sparse encoding.
ZERO, XZERO, VAL = 0, 1, 2

WRONGTYPE = "WRONGTYPE Key is not a valid HyperLogLog string value."
INVALID = "INVALIDOBJ Corrupted HLL object detected"

_M = 0xC6A4A7935BD1E995
_MASK = (1 << 64) - 1
_SEED = 0xADC83B19


class NotASketch(CommandError):
    """The string is not a HyperLogLog (magic, encoding or a dense one's length): Redis's WRONGTYPE. Both errors
    are command errors: the reply is the message, and the command stores nothing."""


class Corrupt(CommandError):
    """A sparse sketch whose opcodes do not cover the registers a command needs: Redis's INVALIDOBJ."""


def murmur64a(data: bytes) -> int:
    """MurmurHash64A (Austin Appleby) with Redis's seed, reading 8-byte blocks little endian as Redis does."""
    n = len(data)
    h = (_SEED ^ (n * _M)) & _MASK
    whole = n & ~7
    for (k,) in struct.iter_unpack("<Q", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 47
        h ^= (k * _M) & _MASK
        h = (h * _M) & _MASK
    if n & 7:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * _M) & _MASK
    h ^= h >> 47
    h = (h * _M) & _MASK
    return h ^ (h >> 47)


def pattern_python(element: bytes) -> tuple[int, int]:
    """``hllPatLen``: the register ``element`` falls in, and the count it brings (trailing zeros + 1 of the
    hash's upper 50 bits, a sentinel bit at 50 bounding it at 51)."""
    h = murmur64a(element)
    rest = (h >> P) | (1 << Q)
    return h & (REGISTERS - 1), (rest & -rest).bit_length()


# -- dense registers: 6-bit fields, four registers in three bytes ------------------------------------------------

_T_LOW6 = bytes(b & 63 for b in range(256))
_T_SHR6 = bytes(b >> 6 for b in range(256))
_T_LOW4_SHL2 = bytes((b & 15) << 2 for b in range(256))
_T_SHR4 = bytes(b >> 4 for b in range(256))
_T_LOW2_SHL4 = bytes((b & 3) << 4 for b in range(256))
_T_SHR2 = bytes(b >> 2 for b in range(256))
_T_LOW2_SHL6 = bytes(((b & 3) << 6) for b in range(256))
_T_LOW4_SHL4 = bytes(((b & 15) << 4) & 0xFF for b in range(256))
_T_SHL2 = bytes((b << 2) & 0xFF for b in range(256))
_QUARTER = REGISTERS // 4


def _or(a: bytes, b: bytes) -> bytes:
    """Bytewise OR of two equal-length strings whose set bits do not overlap, in C (one big-integer OR)."""
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def unpack_python(packed: bytes | bytearray | memoryview) -> bytearray:
    """The dense registers (12 288 bytes) as one byte per register."""
    data = bytes(packed)
    b0, b1, b2 = data[0::3], data[1::3], data[2::3]
    regs = bytearray(REGISTERS)
    regs[0::4] = b0.translate(_T_LOW6)
    regs[1::4] = _or(b0.translate(_T_SHR6), b1.translate(_T_LOW4_SHL2))
    regs[2::4] = _or(b1.translate(_T_SHR4), b2.translate(_T_LOW2_SHL4))
    regs[3::4] = b2.translate(_T_SHR2)
    return regs


def pack_python(regs: bytearray) -> bytes:
    """One byte per register (each at most 63) packed as the dense encoding's 12 288 bytes."""
    r0, r1, r2, r3 = bytes(regs[0::4]), bytes(regs[1::4]), bytes(regs[2::4]), bytes(regs[3::4])
    out = bytearray(REGISTERS * 6 // 8)
    out[0::3] = _or(r0, r1.translate(_T_LOW2_SHL6))
    out[1::3] = _or(r1.translate(_T_SHR2), r2.translate(_T_LOW4_SHL4))
    out[2::3] = _or(r2.translate(_T_SHR4), r3.translate(_T_SHL2))
    return bytes(out)


# -- the estimate --------------------------------------------------------------------------------------------------


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        before = z
        z += x * y
        y += y
        if z == before:
            return z


def _tau(x: float) -> float:
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1 - x
    while True:
        x = math.sqrt(x)
        before = z
        y *= 0.5
        z -= (1 - x) ** 2 * y
        if z == before:
            return z / 3


def estimate(histogram: list[int]) -> int:
    """``hllCount``'s estimate from the number of registers holding each value 0..63."""
    m = float(REGISTERS)
    z = m * _tau((m - histogram[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histogram[j]
        z *= 0.5
    z += m * _sigma(histogram[0] / m)
    e = ALPHA_INF * m * m / z
    whole = int(e)
    return whole + (1 if e - whole >= 0.5 else 0)  # llroundl: halves away from zero (e >= 0)


def dense_set_python(packed: bytearray, index: int, count: int) -> bool:
    """Raise the 6-bit register ``index`` of the packed registers to ``count``; True if it grew."""
    bit = index * 6
    at, shift = bit >> 3, bit & 7
    pair = packed[at] | (packed[at + 1] << 8 if at + 1 < len(packed) else 0)
    if (pair >> shift) & 63 >= count:
        return False
    pair = (pair & ~(63 << shift)) | (count << shift)
    packed[at] = pair & 0xFF
    if at + 1 < len(packed):
        packed[at + 1] = pair >> 8
    return True


def histogram_python(regs: bytes | bytearray) -> list[int]:
    """How many of ``regs`` (one byte each) hold each value 0..63."""
    counts = Counter(regs)
    return [counts[v] for v in range(64)]


def merge_max_python(into: bytearray, regs: bytes | bytearray) -> None:
    """``into[i] = max(into[i], regs[i])`` for every register."""
    into[:] = bytes(map(max, into, regs)) if any(into) else regs


if _hll is not None:
    pattern, unpack, pack, dense_set = _hll.pattern, _hll.unpack, _hll.pack, _hll.dense_set
    histogram, merge_max = _hll.histogram, _hll.merge_max
else:  # pragma: no cover - where _hll.c was not built
    pattern, unpack, pack, dense_set = pattern_python, unpack_python, pack_python, dense_set_python
    histogram, merge_max = histogram_python, merge_max_python


# -- a sketch being read or changed ----------------------------------------------------------------------------------


def check(value: bytes | bytearray | memoryview) -> None:
    """``isHLLObjectOrReply``: raise NotASketch unless ``value`` has the header of a HyperLogLog."""
    if len(value) < HEADER or bytes(value[:4]) != MAGIC or value[4] > SPARSE:
        raise NotASketch(WRONGTYPE)
    if value[4] == DENSE and len(value) != DENSE_SIZE:
        raise NotASketch(WRONGTYPE)


def cached(value: bytes | bytearray | memoryview) -> int | None:
    """The cardinality cached in a sketch's header, None while stale (the top bit of its last byte set). Read
    from the header alone, as Redis's PFCOUNT reads it: the registers are not checked."""
    check(value)
    return None if value[15] & 0x80 else int.from_bytes(value[8:16], "little")


class Sketch:
    """One HyperLogLog value: its 16-byte header as stored (unused bytes and a stale cache's other bits are kept,
    as Redis keeps them) and either the sparse opcodes or the dense registers, packed as stored (``packed``, a
    copy of the stored bytes: a PFADD raises registers in it without unpacking them).

    Sparse opcodes are ``[kind, value, run]`` lists with ``starts``, the first register each covers, beside
    them for bisection; ``size`` is the encoded string's length, which ``hll-sparse-max-bytes`` bounds, and
    ``covered`` how many registers the opcodes add up to.

    A sparse string whose opcodes do not add up to 16384 registers is corrupt, and each operation finds out as
    Redis's does: a count needs them to add up exactly; a write needs the register it raises covered (opcodes
    past the 16384th are kept as they are); turning dense, and merging, stop at a VAL that runs past the last
    register and need exactly 16384 by then. Whatever finds it raises Corrupt and the command stores nothing
    (Redis keeps in memory, unlogged, what a PFADD wrote before it met the corruption; kvd keeps none of it)."""

    __slots__ = ("covered", "header", "ops", "packed", "size", "starts", "truncated")

    def __init__(self, header: bytearray, ops: list[list[int]] | None, packed: bytearray | None) -> None:
        self.header = header
        self.ops = ops
        self.packed = packed
        self.starts: list[int] = []
        self.size = DENSE_SIZE
        self.covered = REGISTERS
        # A sparse string that ends in half an XZERO: Redis reads the NUL after the string as its second byte, and
        # writes before it leave it cut; a write inside it is refused (Redis's would cut the opcode it writes).
        self.truncated = False
        if ops is not None:
            first = 0
            for _, _, run in ops:
                self.starts.append(first)
                first += run
            self.covered = first
            self.size = HEADER + sum(2 if kind == XZERO else 1 for kind, _, _ in ops)

    @classmethod
    def new(cls) -> Sketch:
        """``createHLLObject``: sparse, every register zero in one XZERO, the cache valid at 0."""
        return cls(bytearray(MAGIC + bytes([SPARSE]) + bytes(11)), [[XZERO, 0, REGISTERS]], None)

    @classmethod
    def parse(cls, value: bytes | bytearray | memoryview) -> Sketch:
        """Raises NotASketch or Corrupt (see ``check``, ``decode_sparse``)."""
        check(value)
        header = bytearray(value[:HEADER])
        if value[4] == DENSE:
            return cls(header, None, bytearray(value[HEADER:]))
        sketch = cls(header, decode_sparse(value[HEADER:]), None)
        if sketch.size != len(value):
            sketch.truncated, sketch.size = True, len(value)
        return sketch

    @property
    def dense(self) -> bool:
        return self.ops is None

    def cache(self, card: int) -> None:
        self.header[8:16] = card.to_bytes(8, "little")

    def invalidate(self) -> None:
        self.header[15] |= 0x80

    def registers(self) -> bytearray:
        """One byte per register, whichever the encoding (a new bytearray)."""
        if self.packed is not None:
            return unpack(self.packed)
        if self.covered != REGISTERS:
            raise Corrupt(INVALID)
        regs = bytearray(REGISTERS)
        assert self.ops is not None
        for (kind, value, run), first in zip(self.ops, self.starts, strict=True):
            if kind == VAL:
                regs[first : first + run] = bytes((value,)) * run
        return regs

    def histogram(self) -> list[int]:
        if self.packed is not None:
            return histogram(unpack(self.packed))
        if self.covered != REGISTERS:
            raise Corrupt(INVALID)
        counts = [0] * 64
        assert self.ops is not None
        for kind, value, run in self.ops:
            counts[value if kind == VAL else 0] += run
        return counts

    def to_dense(self) -> bool:
        """``hllSparseToDense``: True if it was sparse. The header (cache included) stays as it was."""
        if self.ops is None:
            return False
        self.packed = bytearray(pack(self.registers()))
        self.ops, self.starts = None, []
        self.header[4] = DENSE
        self.size, self.truncated = DENSE_SIZE, False
        return True

    def add(self, element: bytes, sparse_max_bytes: int) -> bool:
        """``hllAdd``: True if a register grew."""
        index, count = pattern(element)
        return self.set(index, count, sparse_max_bytes)

    def set(self, index: int, count: int, sparse_max_bytes: int) -> bool:
        """Raise register ``index`` to ``count``; True if it grew. A sparse sketch that cannot hold it within
        ``sparse_max_bytes`` (or at all: count above 32) turns dense first, as ``hllSparseSet`` does."""
        if self.packed is not None:
            return dense_set(self.packed, index, count)
        if count > SPARSE_VAL_MAX:
            return self._promote(index, count)
        ops, starts = self.ops, self.starts
        assert ops is not None
        if index >= self.covered:
            raise Corrupt(INVALID)
        at = bisect_right(starts, index) - 1
        if self.truncated and at == len(ops) - 1:
            raise Corrupt(INVALID)
        kind, value, run = ops[at]
        first = starts[at]
        if kind == VAL:
            if value >= count:
                return False
            if run == 1:
                ops[at][1] = count
                self._merge(at)
                return True
        elif kind == ZERO and run == 1:
            ops[at] = [VAL, count, 1]
            self._merge(at)
            return True
        # Split the opcode into (before, the register, after).
        last = first + run - 1
        seq: list[list[int]] = []
        firsts: list[int] = []
        if index != first:
            seq.append(_run_op(kind, value, index - first))
            firsts.append(first)
        seq.append([VAL, count, 1])
        firsts.append(index)
        if index != last:
            seq.append(_run_op(kind, value, last - index))
            firsts.append(index + 1)
        delta = sum(2 if op[0] == XZERO else 1 for op in seq) - (2 if kind == XZERO else 1)
        if delta > 0 and self.size + delta > sparse_max_bytes:
            return self._promote(index, count)
        ops[at : at + 1] = seq
        starts[at : at + 1] = firsts
        self.size += delta
        self._merge(at)
        return True

    def _merge(self, at: int) -> None:
        """Step 4 of ``hllSparseSet``: from the opcode before the changed one, five steps at most, fold a VAL
        into the next when both hold the same value and together cover at most four registers."""
        ops, starts = self.ops, self.starts
        assert ops is not None
        i = at - 1 if at > 0 else 0
        for _ in range(5):
            if i >= len(ops):
                return
            if ops[i][0] != VAL:
                i += 1
                continue
            if i + 1 < len(ops):
                here, there = ops[i], ops[i + 1]
                if there[0] == VAL and here[1] == there[1] and here[2] + there[2] <= SPARSE_VAL_MAX_LEN:
                    there[2] += here[2]
                    starts[i + 1] = starts[i]
                    del ops[i], starts[i]
                    self.size -= 1
                    continue
            i += 1

    def _promote(self, index: int, count: int) -> bool:
        self.to_dense()
        assert self.packed is not None
        dense_set(self.packed, index, count)
        return True

    def raise_all(self, regs: bytearray, sparse_max_bytes: int) -> None:
        """Raise every register to at least ``regs``' (PFMERGE's destination): a dense sketch in one pass, a
        sparse one register by register in index order, as Redis's loop of ``hllSparseSet`` does."""
        if self.packed is not None:
            mine = unpack(self.packed)
            merge_max(mine, regs)
            self.packed = bytearray(pack(mine))
            return
        index = -1
        while (index := _next_nonzero(regs, index + 1)) >= 0:
            self.set(index, regs[index], sparse_max_bytes)

    def encode(self) -> bytearray:
        """The string this sketch is stored as (a new bytearray: stored values are never changed in place)."""
        if self.packed is not None:
            return self.header + self.packed
        assert self.ops is not None
        body = encode_sparse(self.ops)
        return self.header + (body[:-1] if self.truncated else body)

    def count(self) -> int:
        return estimate(self.histogram())


def _next_nonzero(regs: bytearray, start: int) -> int:
    """The first register from ``start`` on that is not zero, or -1 (``bytes.lstrip`` skips the zeros in C)."""
    rest = len(regs) - start - len(regs[start:].lstrip(b"\x00"))
    return start + rest if start + rest < len(regs) else -1


def _run_op(kind: int, value: int, run: int) -> list[int]:
    """An opcode for ``run`` registers of what ``kind`` held: a VAL keeps its value, zeros take ZERO up to 64
    registers and XZERO beyond, as Redis chooses."""
    if kind == VAL:
        return [VAL, value, run]
    return [XZERO if run > SPARSE_ZERO_MAX_LEN else ZERO, 0, run]


def decode_sparse(body: bytes | bytearray | memoryview) -> list[list[int]]:
    """The opcodes of a sparse sketch's registers, however many registers they add up to (``Sketch``)."""
    data = bytes(body)
    ops: list[list[int]] = []
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b & 0x80:
            op = [VAL, ((b >> 2) & 0x1F) + 1, (b & 3) + 1]
            i += 1
        elif b & 0x40:  # an XZERO cut by the end of the string: Redis reads the NUL after it as its second byte
            op = [XZERO, 0, (((b & 0x3F) << 8) | (data[i + 1] if i + 1 < n else 0)) + 1]
            i += 2
        else:
            op = [ZERO, 0, (b & 0x3F) + 1]
            i += 1
        ops.append(op)
    return ops


def encode_sparse(ops: list[list[int]]) -> bytes:
    out = bytearray()
    for kind, value, run in ops:
        if kind == VAL:
            out.append(0x80 | ((value - 1) << 2) | (run - 1))
        elif kind == XZERO:
            out += bytes((0x40 | ((run - 1) >> 8), (run - 1) & 0xFF))
        else:
            out.append(run - 1)
    return bytes(out)


def describe_sparse(ops: list[list[int]]) -> str:
    """PFDEBUG DECODE's text: ``z:len``, ``Z:len`` and ``v:value,len`` for each opcode."""
    parts = []
    for kind, value, run in ops:
        if kind == VAL:
            parts.append(f"v:{value},{run}")
        else:
            parts.append(f"{'Z' if kind == XZERO else 'z'}:{run}")
    return " ".join(parts)
