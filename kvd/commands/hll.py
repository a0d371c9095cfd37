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

A sketch is changed as bytes, the way Redis changes it: a sparse write follows ``hllSparseSet`` step for step
(find the opcode that covers the register, split it, fold equal VAL neighbours within five opcodes) rather than
re-encoding the registers, because the sparse form is not canonical (the bytes depend on the order of the writes,
and kvd's must be Redis's for the same commands). kvd never changes a stored value in place, so a command works
on a copy of the string (12 KiB at most) and stores the copy. The cardinality is Otmar Ertl's estimator
(arXiv:1702.01284) as Redis 7 computes it, in doubles.

Corrupt sparse strings, whose opcodes do not add up to 16384 registers, are found as Debian's Redis 7.0.15 finds
them (with the CVE-2025-32023 fix): a count, a merge and turning dense need exactly 16384; a write needs the
register it raises covered (opcodes past the 16384th are kept as they are). A string that ends in half an XZERO is
read as Redis reads it (the NUL after the string as its second byte); a write inside that opcode is refused. The
command then answers ``INVALIDOBJ`` and stores nothing (Redis keeps in memory, unlogged, what a PFADD wrote before
it met the corruption; kvd keeps none of it).

Cost. The loops over bytes and registers (the hash, a sparse write, unpacking and packing dense registers, the
register histogram of a count, the maximum of a merge) are C (``_hll.c``) where it was built, and the same here
in Python where it was not (``*_python``; tests/unit/test_hll.py compares the two). In C, PFADD of one element is
about 4 us of Python around 0.3 us of C, dense or sparse; in Python a sparse write scans the string (up to
``hll-sparse-max-bytes``, 3000 by default) byte by byte, up to about 1 ms, and a count or a merge of dense sketches
takes 1-2 ms.
"""

from __future__ import annotations

import math
import struct
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
# What Redis's estimate becomes when it overflows a long long (registers that no real set of elements makes, but
# that a SET or RESTORE of a dense string can hold): LLONG_MIN as an unsigned count, replied as -2**63.
OVERFLOW = 1 << 63

# What a write to a sparse sketch did (``sparse_set``).
SAME, GREW, PROMOTE, CORRUPT = 0, 1, 2, -1

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
    if len(data) != REGISTERS * 6 // 8:
        raise ValueError(f"packed registers must be {REGISTERS * 6 // 8} bytes, not {len(data)}")
    b0, b1, b2 = data[0::3], data[1::3], data[2::3]
    regs = bytearray(REGISTERS)
    regs[0::4] = b0.translate(_T_LOW6)
    regs[1::4] = _or(b0.translate(_T_SHR6), b1.translate(_T_LOW4_SHL2))
    regs[2::4] = _or(b1.translate(_T_SHR4), b2.translate(_T_LOW2_SHL4))
    regs[3::4] = b2.translate(_T_SHR2)
    return regs


def pack_python(regs: bytearray) -> bytes:
    """One byte per register (each at most 63) packed as the dense encoding's 12 288 bytes."""
    if len(regs) != REGISTERS or max(regs) > 63:
        raise ValueError("registers must be 16384 bytes of at most 63 each")
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
        z -= (1 - x) * (1 - x) * y  # Redis's pow(1 - x, 2), which the compiler makes this product
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
    if z == 0.0:  # every register 51 or more: Redis divides by zero
        return OVERFLOW
    e = ALPHA_INF * m * m / z
    if not e < 2.0**63:  # also infinity: llroundl overflows to LLONG_MIN on x86-64, 2**63 as unsigned
        return OVERFLOW
    whole = int(e)
    return whole + (1 if e - whole >= 0.5 else 0)  # llroundl: halves away from zero (e >= 0)


def signed(card: int) -> int:
    """A cardinality as Redis replies it (``addReplyLongLong`` of the unsigned count): OVERFLOW is negative."""
    return card - (1 << 64) if card >= 1 << 63 else card


def dense_set_python(sketch: bytearray, index: int, count: int) -> bool:
    """Raise the 6-bit register ``index`` of a dense sketch (the whole string) to ``count``; True if it grew."""
    bit = index * 6
    at, shift = HEADER + (bit >> 3), bit & 7
    pair = sketch[at] | (sketch[at + 1] << 8 if at + 1 < DENSE_SIZE else 0)
    if (pair >> shift) & 63 >= count:
        return False
    pair = (pair & ~(63 << shift)) | (count << shift)
    sketch[at] = pair & 0xFF
    if at + 1 < DENSE_SIZE:
        sketch[at + 1] = pair >> 8
    return True


def _opcode(data: bytes | bytearray, p: int) -> tuple[int, int, int]:
    """The sparse opcode at ``p``: (registers it covers, its value (0 for zeros), its length in bytes). An XZERO
    cut by the end of the string reads its second byte as 0, the NUL Redis finds there."""
    b = data[p]
    if b & 0x80:
        return (b & 3) + 1, ((b >> 2) & 0x1F) + 1, 1
    if b & 0x40:
        return (((b & 0x3F) << 8) | (data[p + 1] if p + 1 < len(data) else 0)) + 1, 0, 2
    return (b & 0x3F) + 1, 0, 1


def _zeros(run: int) -> bytes:
    """An opcode for ``run`` zero registers: ZERO up to 64, XZERO beyond, as Redis chooses."""
    if run > SPARSE_ZERO_MAX_LEN:
        return bytes((0x40 | ((run - 1) >> 8), (run - 1) & 0xFF))
    return bytes((run - 1,))


def _val(value: int, run: int) -> int:
    return 0x80 | ((value - 1) << 2) | (run - 1)


def sparse_set_python(sketch: bytearray, index: int, count: int, sparse_max_bytes: int) -> int:
    """``hllSparseSet`` on a sparse sketch (the whole string, changed in place): raise register ``index`` to
    ``count``. SAME, GREW, PROMOTE (the sketch must turn dense first: a count above 32, or a string that would
    grow past ``sparse_max_bytes``; nothing was changed) or CORRUPT (the register is not covered)."""
    if count > SPARSE_VAL_MAX:
        return PROMOTE
    end = len(sketch)
    p, first, prev = HEADER, 0, -1
    while p < end:
        run, value, size = _opcode(sketch, p)
        if index < first + run:
            break
        prev, p, first = p, p + size, first + run
    else:
        return CORRUPT
    if p + size > end:  # the half XZERO at the end
        return CORRUPT
    if value:  # a VAL
        if value >= count:
            return SAME
        if run == 1:
            sketch[p] = _val(count, 1)
            _fold(sketch, prev)
            return GREW
    elif run == 1 and size == 1:
        sketch[p] = _val(count, 1)
        _fold(sketch, prev)
        return GREW
    # Split the opcode into what comes before the register, the register, and what comes after.
    last = first + run - 1
    seq = bytearray()
    if index != first:
        seq += bytes((_val(value, index - first),)) if value else _zeros(index - first)
    seq.append(_val(count, 1))
    if index != last:
        seq += bytes((_val(value, last - index),)) if value else _zeros(last - index)
    if len(seq) > size and end + len(seq) - size > sparse_max_bytes:
        return PROMOTE
    sketch[p : p + size] = seq
    _fold(sketch, prev)
    return GREW


def _fold(sketch: bytearray, prev: int) -> None:
    """Step 4 of ``hllSparseSet``: from the opcode before the changed one (or the first), five steps at most,
    fold a VAL into the next when both hold the same value and together cover at most four registers."""
    p = prev if prev >= 0 else HEADER
    for _ in range(5):
        if p >= len(sketch):
            return
        b = sketch[p]
        if not b & 0x80:
            p += 2 if b & 0x40 else 1
            continue
        if p + 1 < len(sketch) and sketch[p + 1] & 0x80:
            n = sketch[p + 1]
            runs = (b & 3) + (n & 3) + 2
            if (b ^ n) & 0x7C == 0 and runs <= SPARSE_VAL_MAX_LEN:
                sketch[p + 1] = (n & 0xFC) | (runs - 1)
                del sketch[p]
                continue
        p += 1


def sparse_registers_python(sketch: bytes | bytearray | memoryview) -> bytearray | None:
    """A sparse sketch's registers, one byte each; None unless its opcodes cover exactly 16384 registers."""
    data = bytes(sketch)
    regs = bytearray(REGISTERS)
    p, first, end = HEADER, 0, len(data)
    while p < end:
        run, value, size = _opcode(data, p)
        if first + run > REGISTERS:
            return None
        if value:
            regs[first : first + run] = bytes((value,)) * run
        p, first = p + size, first + run
    return regs if first == REGISTERS else None


def histogram_python(regs: bytes | bytearray) -> list[int]:
    """How many of ``regs`` (one byte each) hold each value 0..63."""
    counts = Counter(regs)
    return [counts[v] for v in range(64)]


def merge_max_python(into: bytearray, regs: bytes | bytearray) -> None:
    """``into[i] = max(into[i], regs[i])`` for every register."""
    into[:] = bytes(map(max, into, regs)) if any(into) else regs


def nonzero_python(regs: bytes | bytearray) -> list[int]:
    """The indexes of the registers that are not zero."""
    return [i for i, r in enumerate(regs) if r]


def max_registers_python(sketches: list[bytes | bytearray | memoryview]) -> bytearray | None:
    """The registerwise maximum of whole sketches (headers checked by the caller); None if one is corrupt."""
    regs = bytearray(REGISTERS)
    for sketch in sketches:
        if sketch[4] == DENSE:
            mine = unpack_python(sketch[HEADER:])
        else:
            found = sparse_registers_python(sketch)
            if found is None:
                return None
            mine = found
        merge_max_python(regs, mine)
    return regs


if _hll is not None:
    pattern, unpack, pack, histogram, merge_max = _hll.pattern, _hll.unpack, _hll.pack, _hll.histogram, _hll.merge_max
    dense_set, sparse_set, sparse_registers = _hll.dense_set, _hll.sparse_set, _hll.sparse_registers
    max_registers, nonzero = _hll.max_registers, _hll.nonzero
else:  # pragma: no cover - where _hll.c was not built
    pattern, unpack, pack, histogram = pattern_python, unpack_python, pack_python, histogram_python
    merge_max, dense_set, sparse_set = merge_max_python, dense_set_python, sparse_set_python
    sparse_registers, max_registers, nonzero = sparse_registers_python, max_registers_python, nonzero_python


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


def union(values: list[bytes | bytearray | memoryview | None]) -> bytearray:
    """The registerwise maximum of the sketches among ``values`` (None: a missing key, all zeros), with Redis's
    errors in Redis's order: it checks and merges the keys one by one, so a corrupt sketch before a string that
    is not one is INVALIDOBJ, and the other way round WRONGTYPE."""
    present = [value for value in values if value is not None]
    refused: NotASketch | None = None
    for i, value in enumerate(present):
        try:
            check(value)
        except NotASketch as exc:
            refused, present = exc, present[:i]
            break
    regs = max_registers(present)
    if regs is None:
        raise Corrupt(INVALID)
    if refused is not None:
        raise refused
    return regs


class Sketch:
    """A HyperLogLog being read or changed: a copy of its string (``data``), which the command stores when done.
    The header's unused bytes, and a stale cache's other bits, stay as they were, as in Redis."""

    __slots__ = ("data",)

    def __init__(self, data: bytearray) -> None:
        self.data = data

    @classmethod
    def new(cls) -> Sketch:
        """``createHLLObject``: sparse, every register zero in one XZERO, the cache valid at 0."""
        return cls(bytearray(MAGIC + bytes((SPARSE,)) + bytes(11)) + _zeros(REGISTERS))

    @classmethod
    def parse(cls, value: bytes | bytearray | memoryview) -> Sketch:
        """A copy of ``value``; NotASketch unless it has a sketch's header."""
        check(value)
        return cls(bytearray(value))

    @property
    def dense(self) -> bool:
        return self.data[4] == DENSE

    def cache(self, card: int) -> None:
        self.data[8:16] = card.to_bytes(8, "little")

    def invalidate(self) -> None:
        self.data[15] |= 0x80

    def registers(self) -> bytearray:
        """One byte per register (a new bytearray); Corrupt for a sparse string that does not add up."""
        if self.dense:
            return unpack(memoryview(self.data)[HEADER:])
        regs = sparse_registers(self.data)
        if regs is None:
            raise Corrupt(INVALID)
        return regs

    def count(self) -> int:
        return estimate(histogram(self.registers()))

    def to_dense(self) -> bool:
        """``hllSparseToDense``: True if it was sparse. The header (cache included) stays as it was."""
        if self.dense:
            return False
        regs = self.registers()
        self.data[HEADER:] = pack(regs)
        self.data[4] = DENSE
        return True

    def add(self, element: bytes, sparse_max_bytes: int) -> bool:
        """``hllAdd``: True if a register grew."""
        index, count = pattern(element)
        return self.set(index, count, sparse_max_bytes)

    def set(self, index: int, count: int, sparse_max_bytes: int) -> bool:
        """Raise register ``index`` to ``count``; True if it grew. A sparse sketch that cannot hold it within
        ``sparse_max_bytes`` (or at all: a count above 32) turns dense first, as ``hllSparseSet`` does."""
        if self.dense:
            return dense_set(self.data, index, count)
        done = sparse_set(self.data, index, count, sparse_max_bytes)
        if done == PROMOTE:
            self.to_dense()
            return dense_set(self.data, index, count)
        if done == CORRUPT:
            raise Corrupt(INVALID)
        return done == GREW

    def raise_all(self, regs: bytearray, sparse_max_bytes: int) -> None:
        """Raise every register to at least ``regs``' (PFMERGE's destination): a dense sketch in one pass, a
        sparse one register by register in index order, as Redis's loop of ``hllSparseSet`` does, until it turns
        dense (the dense encoding is the same whatever the order of the writes)."""
        if not self.dense:
            for index in nonzero(regs):
                self.set(index, regs[index], sparse_max_bytes)
                if self.dense:
                    break
        if self.dense:
            mine = self.registers()
            merge_max(mine, regs)
            self.data[HEADER:] = pack(mine)

    def describe(self) -> str:
        """PFDEBUG DECODE's text: ``z:len``, ``Z:len`` and ``v:value,len`` for each opcode of a sparse sketch."""
        parts, p, data = [], HEADER, self.data
        while p < len(data):
            run, value, size = _opcode(data, p)
            if value:
                parts.append(f"v:{value},{run}")
            else:
                parts.append(f"{'Z' if size == 2 else 'z'}:{run}")
            p += size
        return " ".join(parts)
