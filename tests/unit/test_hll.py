"""HyperLogLog loops: the C versions (``_hll.c``) and the Python ones (``hll.py``) agree, and both agree with
models written bit by bit and opcode by opcode. The commands are compared with redis-server byte for byte in
tests/compat/test_hyperloglog.py and in the differential test.
"""

from __future__ import annotations

import random

import pytest

from kvd.commands import hll

C = pytest.mark.skipif(hll._hll is None, reason="kvd/commands/_hll.c was not built")


def model_pack(regs: bytes) -> bytes:
    """Register i at bit 6 * i, counting from the least significant bit of byte 0."""
    n = 0
    for i, r in enumerate(regs):
        n |= r << (6 * i)
    return n.to_bytes(hll.REGISTERS * 6 // 8, "little")


def model_registers(sketch: bytes) -> list[int] | None:
    """A sparse sketch's registers by reading each opcode as the format describes it; None unless 16384."""
    regs: list[int] = []
    p = hll.HEADER
    while p < len(sketch):
        b = sketch[p]
        if b >> 6 == 0:
            regs += [0] * ((b & 63) + 1)
            p += 1
        elif b >> 6 == 1:
            second = sketch[p + 1] if p + 1 < len(sketch) else 0
            regs += [0] * (((b & 63) << 8 | second) + 1)
            p += 2
        else:
            regs += [((b >> 2) & 31) + 1] * ((b & 3) + 1)
            p += 1
    return regs if len(regs) == hll.REGISTERS else None


def random_registers(rng: random.Random, top: int = 64) -> bytearray:
    return bytearray(rng.randrange(top) for _ in range(hll.REGISTERS))


def test_the_python_loops_match_the_models():
    rng = random.Random(1)
    for _ in range(3):
        regs = random_registers(rng)
        packed = hll.pack_python(regs)
        assert packed == model_pack(regs)
        assert hll.unpack_python(packed) == regs
        assert hll.histogram_python(regs) == [regs.count(v) for v in range(64)]
        other = random_registers(rng)
        merged = bytearray(regs)
        hll.merge_max_python(merged, other)
        assert merged == bytearray(map(max, regs, other))


@C
def test_c_and_python_agree():
    rng = random.Random(2)
    for _ in range(5):
        regs = random_registers(rng)
        assert hll._hll.pack(regs) == hll.pack_python(regs)
        assert hll._hll.unpack(hll.pack_python(regs)) == regs
        assert hll._hll.histogram(regs) == hll.histogram_python(regs)
        sparse = bytearray(hll.REGISTERS)
        for i in rng.sample(range(hll.REGISTERS), rng.choice([0, 1, 50, 5000])):
            sparse[i] = rng.randrange(1, 52)
        assert hll._hll.nonzero(sparse) == hll.nonzero_python(sparse) == [i for i, r in enumerate(sparse) if r]
        a, b = random_registers(rng), random_registers(rng)
        a2 = bytearray(a)
        hll._hll.merge_max(a, b)
        hll.merge_max_python(a2, b)
        assert a == a2
    for n in [*range(33), 100, 1000]:
        element = rng.randbytes(n)
        assert hll._hll.pattern(element) == hll.pattern_python(element), n


@C
def test_c_refuses_what_does_not_fit():
    with pytest.raises(ValueError):
        hll._hll.pack(bytearray([64]) + bytearray(hll.REGISTERS - 1))
    with pytest.raises(ValueError):
        hll._hll.unpack(b"short")
    with pytest.raises(ValueError):
        hll._hll.histogram(bytes([200]))
    with pytest.raises(ValueError):
        hll._hll.dense_set(bytearray(hll.DENSE_SIZE), hll.REGISTERS, 1)


def test_pattern_picks_a_register_and_a_count_in_range():
    for i in range(2000):
        index, count = hll.pattern_python(b"%d" % i)
        assert 0 <= index < hll.REGISTERS and 1 <= count <= hll.Q + 1


@pytest.mark.parametrize("impl", ["python", pytest.param("c", marks=C)])
def test_writes_to_sketches_match_the_models(impl):
    """Random registers raised one at a time, in a sparse and a dense sketch side by side: each write reports a
    change exactly when the register grows, the sparse opcodes always decode to the registers written, and the
    sparse sketch turns dense (PROMOTE) only for a count above 32 or past the byte limit."""
    dense_set = hll._hll.dense_set if impl == "c" else hll.dense_set_python
    sparse_set = hll._hll.sparse_set if impl == "c" else hll.sparse_set_python
    registers = hll._hll.sparse_registers if impl == "c" else hll.sparse_registers_python
    rng = random.Random(3)
    for limit in (50, 3000):
        sparse = hll.Sketch.new().data
        dense = bytearray(hll.Sketch.new().data[: hll.HEADER]) + bytes(hll.REGISTERS * 6 // 8)
        dense[4] = hll.DENSE
        truth = [0] * hll.REGISTERS
        for _ in range(3000):
            index = rng.randrange(hll.REGISTERS) if rng.random() < 0.7 else rng.randrange(64)
            count = rng.choice([1, 1, 2, 3, 5, 32, 33, 51])
            grew = count > truth[index]
            assert dense_set(dense, index, count) == grew
            done = sparse_set(sparse, index, count, limit)
            if done == hll.PROMOTE:
                assert count > 32 or len(sparse) >= limit - 3
            else:
                assert done == (hll.GREW if grew else hll.SAME)
            truth[index] = max(truth[index], count)
            if done == hll.PROMOTE:
                break
            assert model_registers(bytes(sparse)) == truth
            assert list(registers(sparse)) == truth
            assert len(sparse) <= max(limit, 18)
        assert list(hll.unpack_python(dense[hll.HEADER :])) == truth


@C
def test_c_and_python_sparse_writes_leave_the_same_bytes():
    rng = random.Random(4)
    for _ in range(20):
        a, b = hll.Sketch.new().data, hll.Sketch.new().data
        for _ in range(rng.choice([10, 100, 1000])):
            index, count = rng.randrange(hll.REGISTERS), rng.choice([1, 1, 1, 2, 3, 4])
            assert hll._hll.sparse_set(a, index, count, 3000) == hll.sparse_set_python(b, index, count, 3000)
            assert a == b


@pytest.mark.parametrize("impl", ["python", pytest.param("c", marks=C)])
def test_corrupt_sparse_sketches(impl):
    """Opcodes past the 16384th register, or short of it, or a string cut inside its last XZERO."""
    sparse_set = hll._hll.sparse_set if impl == "c" else hll.sparse_set_python
    registers = hll._hll.sparse_registers if impl == "c" else hll.sparse_registers_python
    fresh = hll.Sketch.new().data
    assert registers(fresh) == bytearray(hll.REGISTERS)
    past = fresh + b"\x80"  # one VAL beyond the last register
    assert registers(past) is None
    assert sparse_set(bytearray(past), 5, 1, 3000) == hll.GREW  # a write before it still works, as in Redis
    short = bytearray(fresh[: hll.HEADER]) + bytes((0x40 | (99 >> 8), 99 & 0xFF))  # 100 registers only
    assert registers(short) is None
    assert sparse_set(bytearray(short), 50, 1, 3000) == hll.GREW
    assert sparse_set(bytearray(short), 500, 1, 3000) == hll.CORRUPT
    cut = fresh[:-1]  # XZERO 0x7f with its second byte gone: read as 0x7f00, 16129 registers
    assert registers(cut) is None
    assert sparse_set(bytearray(cut), 3, 1, 3000) == hll.CORRUPT  # a write inside the cut opcode


@C
def test_sketches_on_the_python_loops_are_the_c_ones_byte_for_byte(monkeypatch):
    """The same PFADDs, PFMERGE-style raises and counts through ``Sketch`` with hll.py's loops swapped to the
    Python twins (as where _hll.c was not built): the same strings, the same counts."""

    def run() -> list[object]:
        rng = random.Random(5)
        out: list[object] = []
        for limit in (3000, 200):
            a, b = hll.Sketch.new(), hll.Sketch.new()
            for i in range(rng.choice([30, 300, 3000])):
                a.add(b"a%d" % rng.randrange(10**6), limit)
                b.add(b"b%d" % i, limit)
            out += [bytes(a.data), bytes(b.data), a.count(), b.count()]
            a.raise_all(b.registers(), limit)
            out += [bytes(a.data), a.count(), a.to_dense(), bytes(a.data), a.describe() if not a.dense else ""]
        return out

    with_c = run()
    names = ("pattern", "unpack", "pack", "histogram", "merge_max", "dense_set", "sparse_set", "sparse_registers")
    for name in (*names, "max_registers", "nonzero"):
        monkeypatch.setattr(hll, name, getattr(hll, f"{name}_python"))
    assert run() == with_c


@pytest.mark.parametrize("impl", ["python", pytest.param("c", marks=C)])
def test_the_maximum_of_whole_sketches(impl):
    max_registers = hll._hll.max_registers if impl == "c" else hll.max_registers_python
    rng = random.Random(6)
    sketches, truth = [], bytearray(hll.REGISTERS)
    for n, dense in ((20, False), (2000, True), (300, False)):
        s = hll.Sketch.new()
        for _ in range(n):
            s.add(rng.randbytes(8), 3000)
        if dense:
            s.to_dense()
        regs = s.registers()
        truth = bytearray(map(max, truth, regs))
        sketches.append(bytes(s.data))
    assert max_registers(sketches) == truth
    assert max_registers([]) == bytearray(hll.REGISTERS)
    assert max_registers([*sketches, sketches[0] + b"\x80"]) is None  # opcodes past the last register


def test_union_reports_errors_in_redis_s_order():
    good, corrupt, text = bytes(hll.Sketch.new().data), bytes(hll.Sketch.new().data) + b"\x01", b"hello"
    assert hll.union([good, None, good]) == bytearray(hll.REGISTERS)
    with pytest.raises(hll.Corrupt):
        hll.union([good, corrupt, text])  # the corrupt one is met first
    with pytest.raises(hll.NotASketch):
        hll.union([good, text, corrupt])


def test_an_estimate_past_a_long_long_is_redis_s_overflow():
    """Registers no real stream of elements makes (every one 50 or more), which a SET of a dense string can hold:
    Redis's llroundl overflows to LLONG_MIN, replied as -2**63; every register at 51 or more divides by zero."""
    for value in (50, 51, 52, 63):
        assert hll.estimate(hll.histogram_python(bytes([value]) * hll.REGISTERS)) == hll.OVERFLOW, value
    assert hll.signed(hll.OVERFLOW) == -(1 << 63)
    assert hll.signed(12345) == 12345
    assert hll.estimate(hll.histogram_python(bytes(hll.REGISTERS))) == 0
    assert 0 < hll.estimate(hll.histogram_python(bytes([40]) * hll.REGISTERS)) < 1 << 63
