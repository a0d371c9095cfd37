"""Bitmap commands: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD, BITFIELD_RO (Redis ``bitops.c``).

A bitmap is an ordinary string value read as bits, bit 0 being the most significant bit of the first byte.
Arguments are checked in Redis's order, with its error texts, because clients and the differential test see
the order: SETBIT and GETBIT check the offset before the key, BITCOUNT looks the key up first (a missing key
answers 0 whatever follows), BITPOS checks the bit first, BITFIELD parses every operation before it touches
the key.

What differs from Redis is the cost of a write. Redis flips the bit inside the stored string; kvd never mutates
a stored value (a reply or a disk write may still hold a view of it, see ``strings.py``), so SETBIT and a
writing BITFIELD build a new value, and with the log on append the whole value as a new record. A write to a
bitmap of N bytes therefore costs O(N) in memory copies and log bytes, where Redis's costs O(1) and an AOF line;
bitmaps are not what kvd is built to hold, and a KV-cache chunk is never written this way. SETBIT and BITFIELD
that change nothing write nothing. Reads cost what Redis's do: the loops over a range are C (``bitops.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.notify import GENERIC, STRING, notify
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.keyspace import KEPT, Value

from . import bitops
from .args import c_word, option, parse_int
from .registry import DENYOOM, FAST, READONLY, WRITE, KeySpec, command
from .values import then, with_all, with_current

if TYPE_CHECKING:
    from kvd.connection import Client

G = "bitmap"
BAD_OFFSET = "ERR bit offset is not an integer or out of range"
BAD_BIT = "ERR bit is not an integer or out of range"
BAD_FIELD_TYPE = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."
_U64 = (1 << 64) - 1


def _bit_offset(c: Client, raw: Any, bits: int = 0) -> int:
    """``getBitOffsetFromArgument``: a bit offset below 8 * proto-max-bulk-len. With ``bits`` (BITFIELD), the
    form ``#n`` means n * bits, multiplied in 64 bits as Redis does."""
    raw = bytes(raw)
    by_index = bits > 0 and raw[:1] == b"#"
    offset = parse_int(raw[1:] if by_index else raw, BAD_OFFSET)
    if by_index:
        offset = ((offset * bits + (1 << 63)) & _U64) - (1 << 63)
    if offset < 0 or offset >> 3 >= c.server.settings.proto_max_bulk_len:
        raise CommandError(BAD_OFFSET)
    return offset


@command(
    "setbit",
    4,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="2.2.0",
    summary="Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.",
    usage="key offset value",
    key_flags="RW access update",
)
def setbit(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    offset = _bit_offset(c, argv[2])
    on = parse_int(argv[3], BAD_BIT)
    if on not in (0, 1):
        raise CommandError(BAD_BIT)
    byte, shift = offset >> 3, 7 - (offset & 7)

    def store(old: Value | None, deadline: int) -> None:
        was = old[byte] >> shift & 1 if old is not None and byte < len(old) else 0
        if old is not None and byte < len(old) and was == on:
            c.keyspace.unshare(key)  # nothing changes and nothing is written; the value is now Redis's "raw"
            c.reply.integer(was)
            return
        new = bytearray(old if old is not None else b"")  # a new object: the stored one may still be in flight
        if len(new) <= byte:
            new += bytes(byte + 1 - len(new))
        new[byte] = (new[byte] & ~(1 << shift)) | (on << shift)
        c.keyspace.set(key, new, deadline, history=KEPT)  # the read above counted the access
        notify(c.keyspace, STRING, b"setbit", key)
        c.reply.integer(was)

    return with_current(c, key, store)


@command(
    "getbit",
    3,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.2.0",
    summary="Returns a bit value by offset.",
    usage="key offset",
    key_flags="RO access",
)
def getbit(c: Client, argv: list[Any]) -> Any:
    offset = _bit_offset(c, argv[2])
    byte, shift = offset >> 3, 7 - (offset & 7)

    def reply(value: Value | None) -> None:
        c.reply.integer(value[byte] >> shift & 1 if value is not None and byte < len(value) else 0)

    return then(c.keyspace.get(bytes(argv[1])), reply)


def _unit(argv: list[Any], at: int) -> bool:
    """``BIT`` (True) or ``BYTE`` (False, also when absent) at ``argv[at]``."""
    unit = option(argv[at]) if len(argv) > at else b"byte"
    if unit not in (b"bit", b"byte"):
        raise CommandError(errors.SYNTAX)
    return unit == b"bit"


def _span(start: int, end: int | None, in_bits: bool, length: int) -> tuple[int, int, int, int]:
    """BITCOUNT's and BITPOS's range, resolved against a value of ``length`` bytes as Redis resolves it: (first
    byte, last byte, mask of the first byte's bits before ``start``, mask of the last byte's bits after ``end``),
    the masks 0 in BYTE mode. ``end`` None: to the end of the value. first > last: an empty range."""
    total = length * 8 if in_bits else length
    if end is None:
        end = total - 1
    if start < 0:
        start += total
    if end < 0:
        end += total
    start, end = max(start, 0), min(max(end, 0), total - 1)
    if not in_bits or start > end:
        return start, end, 0, 0
    first_mask = ~((1 << (8 - (start & 7))) - 1) & 0xFF
    last_mask = (1 << (7 - (end & 7))) - 1
    return start >> 3, end >> 3, first_mask, last_mask


@command(
    "bitcount",
    -2,
    READONLY,
    (1, 1, 1),
    group=G,
    since="2.6.0",
    complexity="O(N)",
    summary="Counts the number of set bits (population counting) in a string.",
    usage="key [start end [BYTE | BIT]]",
    key_flags="RO access",
)
def bitcount(c: Client, argv: list[Any]) -> Any:
    entry = c.keyspace.lookup_read(bytes(argv[1]))
    if entry is None:
        c.reply.integer(0)
        return None
    if len(argv) not in (2, 4, 5):
        raise CommandError(errors.SYNTAX)
    start, end, in_bits = 0, None, False
    if len(argv) > 2:
        start, end = parse_int(argv[2]), parse_int(argv[3])
        if start < 0 and end < 0 and start > end:
            c.reply.integer(0)  # Redis answers this before it reads the unit
            return None
        in_bits = _unit(argv, 4)
    start, end, first_mask, last_mask = _span(start, end, in_bits, entry.value_len)

    def reply(value: Value | None) -> None:
        if value is None or start > end:
            c.reply.integer(0)  # None: the value could not be read from disk and the key is gone
            return
        count = bitops.popcount(memoryview(value)[start : end + 1])
        count -= (value[start] & first_mask).bit_count() + (value[end] & last_mask).bit_count()
        c.reply.integer(count)

    return then(c.keyspace.value_of(bytes(argv[1]), entry), reply)


@command(
    "bitpos",
    -3,
    READONLY,
    (1, 1, 1),
    group=G,
    since="2.8.7",
    complexity="O(N)",
    summary="Finds the first set (1) or clear (0) bit in a string.",
    usage="key bit [start [end [BYTE | BIT]]]",
    key_flags="RO access",
)
def bitpos(c: Client, argv: list[Any]) -> Any:
    bit = parse_int(argv[2])
    if bit not in (0, 1):
        raise CommandError("ERR The bit argument must be 1 or 0.")
    entry = c.keyspace.lookup_read(bytes(argv[1]))
    if entry is None:
        c.reply.integer(-1 if bit else 0)  # a missing key is an endless run of zeros
        return None
    if len(argv) > 6:
        raise CommandError(errors.SYNTAX)
    start, end, in_bits = 0, None, False
    if len(argv) > 3:  # Redis's order: start, the unit, then end
        start = parse_int(argv[3])
        in_bits = _unit(argv, 5)
        end = parse_int(argv[4]) if len(argv) > 4 else None
    span = _span(start, end, in_bits, entry.value_len)
    end_given = end is not None

    def reply(value: Value | None) -> None:
        if value is None:
            c.reply.integer(-1 if bit else 0)  # the value could not be read from disk and the key is gone
            return
        c.reply.integer(_find_bit(value, bit, *span, end_given))

    return then(c.keyspace.value_of(bytes(argv[1]), entry), reply)


def _find_bit(data: Value, bit: int, start: int, end: int, first_mask: int, last_mask: int, end_given: bool) -> int:
    """The end of ``bitposCommand``: the first ``bit`` in bytes start..end, the edge bytes masked in BIT mode.
    Without an explicit end, a search for a 0 that finds none answers the bit just past the string."""
    if start > end:
        return -1
    left = end - start + 1  # bytes still to search, from ``start``
    pos = -1

    def edge(byte: int, mask: int) -> int:
        return byte & ~mask & 0xFF if bit else byte | mask

    done = False
    if first_mask:
        byte = edge(data[start], first_mask)
        if last_mask and left == 1:
            byte = edge(byte, last_mask)
        pos = bitops.bitpos(bytes((byte,)), bit)
        done = left == 1 or pos not in (-1, 8)
        if not done:
            start, left = start + 1, left - 1
    if not done:
        middle = left - (1 if last_mask else 0)
        if middle > 0:
            pos = bitops.bitpos(memoryview(data)[start : start + middle], bit)
            done = left == middle or pos not in (-1, middle * 8)
            if not done:
                start, left = start + middle, left - middle
    if not done:
        pos = bitops.bitpos(bytes((edge(data[end], last_mask),)), bit)
    if end_given and bit == 0 and pos == left * 8:
        return -1
    return pos + start * 8 if pos != -1 else -1


@command(
    "bitop",
    -4,
    f"{WRITE} {DENYOOM}",
    (2, -1, 1),
    group=G,
    since="2.6.0",
    complexity="O(N)",
    summary="Performs bitwise operations on multiple strings, and stores the result.",
    usage="operation destkey key [key ...]",
    key_specs=(KeySpec(("OW", "update"), 2), KeySpec(("RO", "access"), 3, -1)),
)
def bitop(c: Client, argv: list[Any]) -> Any:
    op = bitops.OPS.get(option(argv[1]))
    if op is None:
        raise CommandError(errors.SYNTAX)
    if op == bitops.NOT and len(argv) != 4:
        raise CommandError("ERR BITOP NOT must be called with a single source key.")
    dest = bytes(argv[2])

    def store(values: list[Value | None]) -> None:
        result = bitops.bitop(op, values)
        ks = c.keyspace
        if result:
            ks.set(dest, result)
            notify(ks, STRING, b"set", dest)
        elif ks.delete(dest):  # every source empty or missing: the destination goes, as in Redis
            notify(ks, GENERIC, b"del", dest)
        c.reply.integer(len(result))

    return with_all(c, [bytes(k) for k in argv[3:]], store)


# -- BITFIELD ---------------------------------------------------------------------------------------------------

_GET, _SET, _INCRBY = 0, 1, 2
_OPS = {b"get": (_GET, 2), b"set": (_SET, 3), b"incrby": (_INCRBY, 3)}  # name -> (opcode, arguments)
_OVERFLOW = {b"wrap": bitops.WRAP, b"sat": bitops.SAT, b"fail": bitops.FAIL}


def _field_type(raw: Any) -> tuple[bool, int]:
    """``i1``..``i64`` or ``u1``..``u63`` -> (signed, bits); u64 is refused, its values do not fit a reply."""
    word = c_word(raw)
    sign = word[:1]
    if sign not in (b"i", b"u"):
        raise CommandError(BAD_FIELD_TYPE)
    bits = parse_int(word[1:], BAD_FIELD_TYPE)
    if not 1 <= bits <= (64 if sign == b"i" else 63):
        raise CommandError(BAD_FIELD_TYPE)
    return sign == b"i", bits


def _parse_fields(c: Client, argv: list[Any]) -> tuple[list[tuple[int, bool, int, int, int, int]], int]:
    """Every operation of BITFIELD, checked before the key is touched: (opcode, signed, bits, offset, operand,
    overflow rule) each, and the highest bit a SET or INCRBY reaches (-1: none writes)."""
    ops = []
    overflow = bitops.WRAP
    highest = -1
    j = 2
    while j < len(argv):
        name = option(argv[j])
        remaining = len(argv) - j - 1
        if name == b"overflow" and remaining >= 1:
            rule = _OVERFLOW.get(option(argv[j + 1]))
            if rule is None:
                raise CommandError("ERR Invalid OVERFLOW type specified")
            overflow = rule
            j += 2
            continue
        opcode, needs = _OPS.get(name, (None, 0))
        if opcode is None or remaining < needs:
            raise CommandError(errors.SYNTAX)
        signed, bits = _field_type(argv[j + 1])
        offset = _bit_offset(c, argv[j + 2], bits)
        operand = 0
        if opcode != _GET:
            highest = max(highest, offset + bits - 1)
            operand = parse_int(argv[j + 3])
        ops.append((opcode, signed, bits, offset, operand, overflow))
        j += 1 + needs
    return ops, highest


def _bitfield(c: Client, argv: list[Any], read_only: bool) -> Any:
    key = bytes(argv[1])
    ops, highest = _parse_fields(c, argv)
    if highest < 0:  # only GETs: a read, and a missing key reads as zeros
        value = c.keyspace.get(key)

        def reply(value: Value | None) -> None:
            data = value if value is not None else b""
            c.reply.array(len(ops))
            for _, signed, bits, offset, _, _ in ops:
                c.reply.integer(bitops.get_field(data, offset, bits, signed))

        return then(value, reply)
    if read_only:
        raise CommandError("ERR BITFIELD_RO only supports the GET subcommand")

    def store(old: Value | None, deadline: int) -> None:
        data = bytearray(old if old is not None else b"")  # a new object: the stored one may still be in flight
        need = (highest >> 3) + 1
        grown = old is None or len(data) < need  # Redis creates or zero-pads the string before any operation
        if len(data) < need:
            data += bytes(need - len(data))
        changes = 0
        results: list[int | None] = []
        for opcode, signed, bits, offset, operand, overflow in ops:
            current = bitops.get_field(data, offset, bits, signed)
            if opcode == _GET:
                results.append(current)
                continue
            if opcode == _INCRBY:
                new = bitops.add_field(current, operand, bits, signed, overflow)
                answer = new
            else:  # SET answers the old value; an unsigned field takes the operand as a 64-bit pattern
                new = bitops.add_field(operand if signed else operand & _U64, 0, bits, signed, overflow)
                answer = current
            if new is None:  # OVERFLOW FAIL: nothing written, a null answered
                results.append(None)
                continue
            bitops.set_field(data, offset, bits, new)
            results.append(answer)
            if grown or new != current:
                changes += 1
        if grown or changes:
            c.keyspace.set(key, data, deadline, history=KEPT)
        else:
            c.keyspace.unshare(key)
        if changes:
            notify(c.keyspace, STRING, b"setbit", key)
        c.reply.array(len(results))
        for result in results:
            if result is None:
                c.reply.null()
            else:
                c.reply.integer(result)

    return with_current(c, key, store)


def _bitfield_reads_only(argv: list[Any]) -> bool:
    """Whether BITFIELD's operations are all GETs (OVERFLOW aside), as Redis's bitfieldGetKeys decides: the
    first SET or INCRBY, or anything it cannot read, makes it a write."""
    i = 2
    while i < len(argv):
        op, rest = option(argv[i]), len(argv) - i - 1
        if op == b"get" and rest >= 2:
            i += 3
        elif op == b"overflow" and rest >= 1:
            i += 2
        else:
            return False
    return True


@command(
    "bitfield",
    -2,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="3.2.0",
    complexity="O(1) for each subcommand specified",
    summary="Performs arbitrary bitfield integer operations on strings.",
    usage="key [GET encoding offset | [OVERFLOW WRAP | SAT | FAIL] SET encoding offset value | INCRBY encoding "
    "offset increment ...]",
    key_specs=(
        KeySpec(
            ("RW", "access", "update", "variable_flags"),
            1,
            notes="This command allows both access and modification of the key",
        ),
    ),
    get_keys=lambda argv: [(1, ("RO", "access") if _bitfield_reads_only(argv) else ("RW", "access", "update"))],
)
def bitfield(c: Client, argv: list[Any]) -> Any:
    return _bitfield(c, argv, read_only=False)


@command(
    "bitfield_ro",
    -2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    since="6.0.0",
    complexity="O(1) for each subcommand specified",
    summary="Performs arbitrary read-only bitfield integer operations on strings.",
    usage="key [GET encoding offset ...]",
    key_flags="RO access",
)
def bitfield_ro(c: Client, argv: list[Any]) -> Any:
    return _bitfield(c, argv, read_only=True)
