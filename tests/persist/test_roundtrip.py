"""Round trip: a random mix of SET/DEL/EXPIRE/FLUSH survives close + recover exactly, values byte-identical."""

from __future__ import annotations

import random
from pathlib import Path

from persist_helpers import now_ms, open_log, reopen, settle


def _value(rng: random.Random, i: int) -> bytes:
    size = rng.choice([0, 1, 17, 900, 5000, 40_000])
    return rng.randbytes(size) if size else b""


async def test_random_ops_round_trip(seg_dir: Path) -> None:
    rng = random.Random(7)
    log, owner, report = await open_log(seg_dir, segment_size=64 << 10, appendfsync="everysec")
    assert report.keys == 0
    model: dict[bytes, tuple[bytes, int]] = {}
    far = now_ms() + 3_600_000
    for i in range(1500):
        key = b"key:%d" % rng.randrange(200)
        op = rng.random()
        if op < 0.6:
            value = _value(rng, i)
            expire = rng.choice([0, 0, far + i])
            owner.set(key, value, expire)
            model[key] = (value, expire)
        elif op < 0.8:
            if key in model:
                owner.delete(key)
                del model[key]
        elif op < 0.97:
            if key in model:
                expire = rng.choice([0, far + 2 * i])
                owner.expire(key, expire)
                model[key] = (model[key][0], expire)
        elif i > 500 and i < 1400:
            owner.flush()
            model.clear()
        if i % 100 == 0:
            await settle(log)
    # A few keys whose TTL has already passed are left out on recovery.
    owner.set(b"gone", b"x", now_ms() - 1)
    await settle(log)
    owner.demote_all()  # every value now comes from disk
    for key, (value, _) in model.items():
        assert bytes(await owner.get(key)) == value

    for _round in range(2):
        log, owner, report = await reopen(log, segment_size=64 << 10)
        assert report.keys == len(model)
        assert set(owner.entries) == set(model)
        for key, (value, expire) in model.items():
            assert owner.entries[key][1] == expire, key
            assert bytes(await owner.get(key)) == value, key
    await log.close()


async def test_large_values_and_memoryview(seg_dir: Path) -> None:
    log, owner, _ = await open_log(seg_dir, segment_size=1 << 20)
    big = random.Random(1).randbytes(3 << 20)  # bigger than a segment: gets one of its own
    owner.set(b"big", memoryview(big))
    owner.set(b"small", b"s" * 100)
    owner.set(b"big2", bytearray(big[::-1]))
    await settle(log)
    log, owner, report = await reopen(log, segment_size=1 << 20)
    assert report.keys == 3
    assert bytes(await owner.get(b"big")) == big
    assert bytes(await owner.get(b"big2")) == big[::-1]
    assert bytes(await owner.get(b"small")) == b"s" * 100
    await log.close()


async def test_cold_read_before_write_completes(seg_dir: Path) -> None:
    """A value demoted before the writer got to it is read back correctly (the read waits for the write)."""
    log, owner, _ = await open_log(seg_dir)
    value = random.Random(2).randbytes(8 << 20)
    owner.set(b"k", value, hot=False)
    assert bytes(await owner.get(b"k")) == value
    await log.close()
