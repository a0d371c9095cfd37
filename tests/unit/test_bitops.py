"""The bitmap commands' byte loops: C (``_bitops.c``) and Python agree, and both agree with a bit-by-bit model.

The model reads a value as Redis documents it (bit 0 is the most significant bit of byte 0), one bit at a time,
so that neither version is checked only against the other. BITFIELD's field arithmetic is checked against the
overflow rules written out case by case. The commands themselves are compared with redis-server in
tests/compat/test_differential.py.
"""

from __future__ import annotations

import functools
import operator
import random

import pytest

from kvd.commands import bitops

C = pytest.mark.skipif(bitops._popcount_c is None, reason="kvd/commands/_bitops.c was not built")


def bits_of(data: bytes) -> list[int]:
    return [byte >> (7 - i) & 1 for byte in data for i in range(8)]


def model_bitpos(data: bytes, bit: int) -> int:
    bits = bits_of(data)
    if bit in bits:
        return bits.index(bit)
    return -1 if bit else len(data) * 8


def samples() -> list[bytes]:
    rng = random.Random(11)
    out = [b"", b"\x00", b"\xff", b"\x00" * 9 + b"\x01", b"\xff" * 17 + b"\xfe", b"\x80", b"\x00" * 64, b"\xff" * 64]
    for n in (1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000):
        out.append(rng.randbytes(n))
        out.append(bytes(n - 1) + bytes([1 << rng.randrange(8)]))  # one set bit, at the end
        out.append(b"\xff" * (n - 1) + bytes([0xFF ^ (1 << rng.randrange(8))]))  # one clear bit, at the end
    return out


@pytest.mark.parametrize("version", ["c", "python"])
def test_popcount_and_bitpos_match_the_model(version: str) -> None:
    if version == "c" and bitops._popcount_c is None:
        pytest.skip("kvd/commands/_bitops.c was not built")
    popcount = bitops._popcount_c if version == "c" else bitops.popcount_python
    bitpos = bitops._bitpos_c if version == "c" else bitops.bitpos_python
    for data in samples():
        assert popcount(data) == sum(bits_of(data)), data
        for offset in (0, 1, 3):  # unaligned starts, through a memoryview as the commands pass them
            view = memoryview(data)[offset:]
            assert popcount(view) == sum(bits_of(data[offset:]))
            for bit in (0, 1):
                assert bitpos(view, bit) == model_bitpos(data[offset:], bit), (data, offset, bit)


@pytest.mark.parametrize("version", ["c", "python"])
def test_bitop_matches_the_model(version: str) -> None:
    if version == "c" and bitops._bitop_c is None:
        pytest.skip("kvd/commands/_bitops.c was not built")
    bitop = bitops._bitop_c if version == "c" else bitops.bitop_python
    rng = random.Random(5)
    for _ in range(200):
        sources = [rng.choice([None, rng.randbytes(rng.randrange(0, 40))]) for _ in range(rng.randint(1, 4))]
        size = max((len(s) for s in sources if s is not None), default=0)
        padded = [(s or b"").ljust(size, b"\x00") for s in sources]
        columns = list(zip(*padded, strict=True))
        expect = {
            bitops.AND: bytes(functools.reduce(operator.and_, col) for col in columns),
            bitops.OR: bytes(functools.reduce(operator.or_, col) for col in columns),
            bitops.XOR: bytes(functools.reduce(operator.xor, col) for col in columns),
        }
        for op, want in expect.items():
            assert bytes(bitop(op, sources)) == want, (op, sources)
        first = (sources[0] or b"").ljust(len(sources[0] or b""), b"\x00")
        assert bytes(bitop(bitops.NOT, sources[:1])) == bytes(b ^ 0xFF for b in first)


@C
def test_c_bitop_refuses_bad_arguments_without_crashing() -> None:
    with pytest.raises(ValueError):
        bitops._bitop_c(9, [b"a"])
    with pytest.raises(ValueError):
        bitops._bitop_c(bitops.NOT, [b"a", b"b"])
    with pytest.raises(ValueError):
        bitops._bitop_c(bitops.AND, [])
    with pytest.raises(TypeError):
        bitops._bitop_c(bitops.OR, [b"a", 5])
    assert bitops._bitop_c(bitops.OR, [None, None]) == bytearray()


@C
def test_c_loops_over_a_large_value_release_the_gil_and_agree() -> None:
    data = random.Random(2).randbytes((1 << 20) + 13)  # past RELEASE_GIL_FROM
    assert bitops._popcount_c(data) == bitops.popcount_python(data)
    tail = bytes(1 << 20) + b"\x10"
    assert bitops._bitpos_c(tail, 1) == (1 << 20) * 8 + 3
    assert bitops._bitop_c(bitops.XOR, [data, data]) == bytearray(len(data))


def test_fields_read_and_write_most_significant_bit_first() -> None:
    data = bytearray(b"\x00\x00\x00")
    bitops.set_field(data, 4, 8, 0xAB)  # straddles bytes 0 and 1
    assert data == bytearray(b"\x0a\xb0\x00")
    assert bitops.get_field(data, 4, 8, signed=False) == 0xAB
    assert bitops.get_field(data, 4, 8, signed=True) == 0xAB - 256
    assert bitops.get_field(b"\x80", 0, 1, signed=True) == -1
    assert bitops.get_field(b"\x80", 5, 64, signed=False) == 0  # past the end reads as zeros
    model = random.Random(9)
    for _ in range(300):
        data = bytearray(model.randbytes(12))
        offset, bits = model.randrange(0, 30), model.randint(1, 64)
        value = model.getrandbits(bits)
        bitops.set_field(data, offset, bits, value)
        assert bitops.get_field(data, offset, bits, signed=False) == value
        assert bits_of(bytes(data))[offset : offset + bits] == [value >> (bits - 1 - i) & 1 for i in range(bits)]


@pytest.mark.parametrize(
    ("value", "increment", "bits", "signed", "wrap", "sat", "fits"),
    [
        (100, 27, 8, True, 127, 127, True),
        (100, 28, 8, True, -128, 127, False),  # one past the top
        (-100, -29, 8, True, 127, -128, False),  # one past the bottom
        (255, 1, 8, False, 0, 255, False),
        (0, -1, 8, False, 255, 0, False),
        (2**63 - 1, 1, 64, True, -(2**63), 2**63 - 1, False),
        (-(2**63), -1, 64, True, 2**63 - 1, -(2**63), False),
        (2**64 - 1, 0, 8, False, 255, 255, False),  # SET u8 -1: the operand as a 64-bit pattern
        (0, 0, 1, False, 0, 0, True),
    ],
)
def test_overflow_rules(value: int, increment: int, bits: int, signed: bool, wrap: int, sat: int, fits: bool) -> None:
    assert bitops.add_field(value, increment, bits, signed, bitops.WRAP) == wrap
    assert bitops.add_field(value, increment, bits, signed, bitops.SAT) == sat
    assert bitops.add_field(value, increment, bits, signed, bitops.FAIL) == (wrap if fits else None)
