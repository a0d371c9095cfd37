"""Bit arithmetic on string values, for the bitmap commands (``bitmaps.py``); Redis's ``bitops.c`` below the
command layer.

Bits are numbered as Redis numbers them: bit 0 is the most significant bit of byte 0, so a bitmap reads left to
right. The three loops over whole ranges (``popcount``, ``bitpos``, ``bitop``) are C (``_bitops.c``) where it was
built, with the same here in Python, correct and slower (big-integer arithmetic: 86 ms for BITCOUNT of 32 MiB,
against a few in C). BITFIELD's integers touch at most 9 bytes each and are Python everywhere.

Complexity: ``popcount``, ``bitpos`` and ``bitop`` are O(N) in the bytes they read; ``get_field`` and
``set_field`` O(1).
"""

from __future__ import annotations

from collections.abc import Sequence

try:
    from kvd.commands._bitops import bitop as _bitop_c
    from kvd.commands._bitops import bitpos as _bitpos_c
    from kvd.commands._bitops import popcount as _popcount_c
except ImportError:  # pragma: no cover - exercised by tests/unit/test_bitops.py through the Python versions
    _bitop_c = _bitpos_c = _popcount_c = None  # type: ignore[assignment]

Buffer = bytes | bytearray | memoryview

AND, OR, XOR, NOT = 0, 1, 2, 3
OPS = {b"and": AND, b"or": OR, b"xor": XOR, b"not": NOT}

# BITFIELD overflow behaviours (OVERFLOW WRAP|SAT|FAIL)
WRAP, SAT, FAIL = 0, 1, 2


def popcount(data: Buffer) -> int:
    """The number of set bits in ``data``."""
    if _popcount_c is not None:
        return _popcount_c(data)
    return popcount_python(data)


def bitpos(data: Buffer, bit: int) -> int:
    """Redis's ``redisBitpos``: the first position holding ``bit``; if none, -1 for a 1 and ``len * 8`` for a 0."""
    if _bitpos_c is not None:
        return _bitpos_c(data, bit)
    return bitpos_python(data, bit)


def bitop(op: int, sources: Sequence[Buffer | None]) -> bytearray:
    """AND, OR, XOR or NOT of ``sources`` (None: a missing key, no bytes), as long as the longest one."""
    if _bitop_c is not None:
        return _bitop_c(op, sources)
    return bitop_python(op, sources)


def popcount_python(data: Buffer) -> int:
    return int.from_bytes(data, "big").bit_count()


def bitpos_python(data: Buffer, bit: int) -> int:
    raw = bytes(data)
    rest = raw.lstrip(b"\x00" if bit else b"\xff")
    if not rest:
        return -1 if bit else len(raw) * 8
    byte = rest[0] if bit else rest[0] ^ 0xFF
    return (len(raw) - len(rest)) * 8 + 8 - byte.bit_length()


def bitop_python(op: int, sources: Sequence[Buffer | None]) -> bytearray:
    size = max((len(s) for s in sources if s is not None), default=0)
    if not size:
        return bytearray()

    def number(src: Buffer | None) -> int:  # padded with zero bytes on the right, as Redis pads
        return int.from_bytes(bytes(src or b"").ljust(size, b"\x00"), "big")

    result = number(sources[0])
    if op == NOT:
        result = ~result & ((1 << (size * 8)) - 1)
    for src in sources[1:]:
        if op == AND:
            result &= number(src)
        elif op == OR:
            result |= number(src)
        else:
            result ^= number(src)
    return bytearray(result.to_bytes(size, "big"))


def get_field(data: Buffer, offset: int, bits: int, signed: bool) -> int:
    """The ``bits``-wide integer at bit ``offset`` (most significant bit first); bytes past the end read as 0."""
    first = offset >> 3
    last = (offset + bits - 1) >> 3
    chunk = bytes(data[first : last + 1]).ljust(last - first + 1, b"\x00")
    span = (last - first + 1) * 8
    value = (int.from_bytes(chunk, "big") >> (span - (offset & 7) - bits)) & ((1 << bits) - 1)
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def set_field(data: bytearray, offset: int, bits: int, value: int) -> None:
    """Write the low ``bits`` bits of ``value`` at bit ``offset``; ``data`` already reaches that far."""
    first = offset >> 3
    last = (offset + bits - 1) >> 3
    span = (last - first + 1) * 8
    shift = span - (offset & 7) - bits
    mask = ((1 << bits) - 1) << shift
    current = int.from_bytes(data[first : last + 1], "big")
    current = (current & ~mask) | ((value << shift) & mask)
    data[first : last + 1] = current.to_bytes(last - first + 1, "big")


def add_field(value: int, increment: int, bits: int, signed: bool, overflow: int) -> int | None:
    """``value + increment`` in a ``bits``-wide field under an OVERFLOW rule, as ``checkSignedBitfieldOverflow``
    and ``checkUnsignedBitfieldOverflow`` decide it: WRAP wraps modulo 2**bits (two's complement when signed),
    SAT clamps to the field's range, FAIL gives None. SET is the same with ``value`` the new one and 0 added.
    In Python the sum is exact, so "it overflowed" is a comparison, not Redis's careful 64-bit arithmetic."""
    total = value + increment
    if signed:
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    else:
        low, high = 0, (1 << bits) - 1
    if low <= total <= high:
        return total
    if overflow == FAIL:
        return None
    if overflow == SAT:
        return high if total > high else low
    wrapped = total & ((1 << bits) - 1)
    if signed and wrapped >> (bits - 1):
        wrapped -= 1 << bits
    return wrapped
