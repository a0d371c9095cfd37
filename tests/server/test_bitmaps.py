"""Bitmap commands against a real server through redis-py's own methods: SETBIT, GETBIT, BITCOUNT, BITPOS,
BITOP, BITFIELD (redis-py's ``BitFieldOperation``), BITFIELD_RO; then, kvd only, bitmaps on the disk tier and
across a restart. Every reply and error byte is also compared with redis-server's in
tests/compat/test_differential.py."""

from __future__ import annotations

import os

import pytest
import redis
from support.raw import encode


def test_setbit_getbit_grow_the_string_with_zeros(server):
    r = server.client()
    assert r.setbit("b", 7, 1) == 0  # creates "\x01"
    assert r.get("b") == b"\x01"
    assert r.setbit("b", 7, 1) == 1
    assert r.setbit("b", 23, 1) == 0  # grows to three bytes
    assert r.get("b") == b"\x01\x00\x01"
    assert [r.getbit("b", i) for i in (0, 7, 8, 23, 10_000)] == [0, 1, 0, 1, 0]
    assert r.getbit("missing", 3) == 0
    assert r.setbit("b", 7, 0) == 1
    assert r.get("b") == b"\x00\x00\x01"
    with pytest.raises(redis.ResponseError, match="^bit is not an integer or out of range$"):
        r.execute_command("SETBIT", "b", 1, 2)  # redis-py's setbit() would send 1
    with pytest.raises(redis.ResponseError, match="^bit offset is not an integer or out of range$"):
        r.setbit("b", 4 * 1024**3, 1)  # 512 MB: proto-max-bulk-len
    with pytest.raises(redis.ResponseError, match="^bit offset is not an integer or out of range$"):
        r.getbit("b", -1)


def test_setbit_keeps_the_ttl(server):
    r = server.client()
    r.set("t", b"\x00", ex=100)
    r.setbit("t", 100, 1)
    assert 98 <= r.ttl("t") <= 100


def test_bitcount_in_bytes_and_bits(server):
    r = server.client()
    r.set("s", b"foobar")
    assert r.bitcount("s") == 26
    assert r.bitcount("s", 0, 0) == 4
    assert r.bitcount("s", 1, 1) == 6
    assert r.bitcount("s", -2, -1) == 7
    assert r.bitcount("s", 5, 30, "BIT") == 17
    assert r.bitcount("s", 5, 30, "byte") == 4  # byte 5 only: "r"
    assert r.bitcount("s", -1, -5) == 0
    assert r.bitcount("missing") == 0
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("BITCOUNT", "s", "0")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.bitcount("s", 0, 1, "WORD")


def test_bitpos_finds_set_and_clear_bits(server):
    r = server.client()
    r.set("p", b"\xff\xf0\x00")
    assert r.bitpos("p", 0) == 12
    assert r.bitpos("p", 1, 2) == -1
    assert r.bitpos("p", 0, 2, -1) == 16
    assert r.bitpos("p", 1, 7, 15, "BIT") == 7
    r.set("ones", b"\xff\xff")
    assert r.bitpos("ones", 0) == 16  # no end given: the string reads as padded with zeros
    assert r.bitpos("ones", 0, 0, -1) == -1  # an explicit end: nothing past it
    assert r.bitpos("missing", 0) == 0
    assert r.bitpos("missing", 1) == -1
    with pytest.raises(redis.ResponseError, match="^The bit argument must be 1 or 0.$"):
        r.execute_command("BITPOS", "p", 2)  # redis-py's bitpos() refuses it itself


def test_bitop_combines_and_deletes_on_empty(server):
    r = server.client()
    r.set("a", b"\xf0\x0f")
    r.set("b", b"\xff")
    assert r.bitop("AND", "and", "a", "b") == 2
    assert r.get("and") == b"\xf0\x00"
    assert r.bitop("OR", "or", "a", "b", "missing") == 2
    assert r.get("or") == b"\xff\x0f"
    assert r.bitop("XOR", "xor", "a", "b") == 2
    assert r.get("xor") == b"\x0f\x0f"
    assert r.bitop("NOT", "not", "a") == 2
    assert r.get("not") == b"\x0f\xf0"
    r.set("dest", "x", ex=100)
    assert r.bitop("OR", "dest", "a") == 2
    assert r.ttl("dest") == -1  # a new value: the old deadline goes
    assert r.bitop("AND", "dest", "missing", "missing2") == 0
    assert r.exists("dest") == 0
    with pytest.raises(redis.ResponseError, match="^BITOP NOT must be called with a single source key.$"):
        r.bitop("NOT", "d", "a", "b")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.bitop("NAND", "d", "a")


def test_bitfield_operations_and_overflow_rules(server):
    r = server.client()
    ops = r.bitfield("f").set("u8", 0, 255).get("u8", 0).incrby("u8", 0, 10).get("i4", "#1")
    assert ops.execute() == [0, 255, 9, -7]
    assert r.get("f") == b"\x09"
    sat = r.bitfield("f", default_overflow="SAT").incrby("u8", 0, 1000).incrby("i8", 8, -1000)
    assert sat.execute() == [255, -128]
    fail = r.bitfield("f", default_overflow="FAIL").incrby("u8", 0, 1).incrby("u8", 0, -255)
    assert fail.execute() == [None, 0]
    assert r.get("f") == b"\x00\x80"
    assert r.bitfield_ro("f", "u8", 8, [("i8", 8)]) == [128, -128]
    assert r.execute_command("BITFIELD", "f") == []
    assert r.execute_command("BITFIELD", "missing", "GET", "u8", "0") == [0]
    assert r.exists("missing") == 0  # a read does not create the key
    with pytest.raises(redis.ResponseError, match="^BITFIELD_RO only supports the GET subcommand$"):
        r.execute_command("BITFIELD_RO", "f", "SET", "u8", "0", "1")
    with pytest.raises(redis.ResponseError, match="^Invalid bitfield type"):
        r.execute_command("BITFIELD", "f", "GET", "u64", "0")
    with pytest.raises(redis.ResponseError, match="^Invalid OVERFLOW type specified$"):
        r.execute_command("BITFIELD", "f", "OVERFLOW", "CLAMP", "GET", "u8", "0")


def test_bitmaps_on_a_large_value(server):
    """A 32 MiB value: the C loops' GIL-free path, and a SETBIT that copies the whole value (bitmaps.py)."""
    r = server.client()
    size = 32 << 20
    value = bytearray(size)
    value[-1] = 0x01
    r.set("big", bytes(value))
    assert r.bitcount("big") == 1
    assert r.bitpos("big", 1) == size * 8 - 1
    assert r.setbit("big", 0, 1) == 0
    assert r.bitcount("big") == 2
    assert r.bitop("XOR", "big2", "big", "big") == size
    assert r.bitcount("big2") == 0
    assert r.strlen("big") == size


@pytest.mark.kvd_only  # the disk tier
def test_bitmap_commands_read_cold_values_and_survive_restart(server_factory):
    """Values pushed out of RAM are read back from disk by every bitmap command, and what SETBIT, BITFIELD and
    BITOP wrote is there again after a kill -9 and a restart."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    r = srv.client()
    r.set("a", b"\x0f" * 1000)
    r.set("b", b"\xf0" * 1000)
    r.mset({f"fill{i}": os.urandom(1 << 20) for i in range(8)})  # a and b are now on disk only
    hits = r.info("kvd")["disk_hits"]
    assert r.bitcount("a") == 4000
    assert r.bitop("OR", "c", "a", "b") == 1000
    assert r.info("kvd")["disk_hits"] > hits
    assert r.get("c") == b"\xff" * 1000
    r.mset({f"fill{i}": os.urandom(1 << 20) for i in range(8)})
    assert r.setbit("c", 0, 0) == 1
    assert r.bitfield("a").incrby("u4", 0, 3).execute() == [3]
    assert r.bitpos("b", 0) == 4
    srv.kill9()
    srv.restart()
    r = srv.client()
    assert r.get("c") == b"\x7f" + b"\xff" * 999
    assert r.get("a") == b"\x3f" + b"\x0f" * 999


@pytest.mark.kvd_only  # the disk tier
def test_a_write_during_a_cold_bitop_is_not_lost(server_factory):
    """BITOP reads its sources before it writes; when one is on disk, other clients run meanwhile. Here the
    destination is also the source: a SET that lands during the read must survive (either order gives
    ``\x02``), never be overwritten by a result computed from the value before it."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    r = srv.client()
    filler = {f"fill{i}": os.urandom(1 << 20) for i in range(8)}
    cold_rounds = 0
    with srv.raw() as a, srv.raw() as b:
        for _ in range(20):
            r.set("src", b"\x01")
            r.mset(filler)
            hits = r.info("kvd")["disk_hits"]
            a.send(encode("BITOP", "OR", "src", "src"))
            b.send(encode("SET", "src", b"\x02"))
            assert a.read_reply() == b":1\r\n"
            assert b.read_reply() == b"+OK\r\n"
            cold_rounds += r.info("kvd")["disk_hits"] > hits
            assert r.get("src") == b"\x02"
    assert cold_rounds >= 5
