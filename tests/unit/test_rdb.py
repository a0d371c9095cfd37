"""kvd/persist/rdb.py: sizes computed without building entries, and the reader's checks."""

from __future__ import annotations

import io

import pytest

from kvd.persist import rdb
from kvd.persist.dump import crc64_update


@pytest.mark.parametrize("value_len", [0, 63, 64, 16383, 16384, 0xFFFFFFFF, 0x100000000])
@pytest.mark.parametrize("key", [b"k", b"x" * 63, b"y" * 64, b"z" * 16384])
@pytest.mark.parametrize("expire_at", [0, 1_700_000_000_000])
def test_entry_size_is_what_key_header_and_the_value_take(key, value_len, expire_at):
    assert rdb.entry_size(len(key), value_len, expire_at) == len(rdb.key_header(key, value_len, expire_at)) + value_len


def file_of(entries, version: int = rdb.VERSION, db: int = 0, crc: bool = True) -> bytes:
    body = bytearray(rdb.preamble(len(entries), 0, [(b"redis-ver", b"7.2.0"), (b"redis-bits", b"64")]))
    body[5:9] = b"%04d" % version
    if db:
        body += bytes([rdb.OP_SELECTDB, db])
    for key, value, expire_at in entries:
        body += rdb.key_header(key, len(value), expire_at) + value
    body += rdb.EOF
    return bytes(body) + rdb.trailer(crc64_update(body, 0) if crc else 0)


def read(data: bytes) -> list[tuple[bytes, bytes, int]]:
    return list(rdb.RdbReader(io.BytesIO(data)))


def test_what_is_written_reads_back():
    entries = [(b"a", b"", 0), (b"b", b"v" * 70_000, 1_800_000_000_123), (b"12", b"34", 0)]
    reader = rdb.RdbReader(io.BytesIO(file_of(entries)))
    assert list(reader) == entries
    assert reader.version == rdb.VERSION and reader.aux[b"redis-ver"] == b"7.2.0" and reader.aux[b"redis-bits"] == b"64"
    assert read(file_of(entries, crc=False)) == entries  # a zero checksum: saved with rdbchecksum no


def test_the_reader_says_why_it_stops():
    with pytest.raises(rdb.RdbError, match="not an RDB file"):
        read(b"REDIX0009")
    with pytest.raises(rdb.RdbError, match="RDB version 12 is newer than kvd reads"):
        read(file_of([], version=12))
    with pytest.raises(rdb.RdbError, match="database 3 .*kvd has database 0 only"):
        read(file_of([(b"a", b"b", 0)], db=3))
    with pytest.raises(rdb.RdbError, match="is a hash; kvd stores strings only"):
        read(rdb.preamble(1, 0, []) + bytes([4]) + b"\x01k")
    with pytest.raises(rdb.RdbError, match="unknown opcode 0xf0 at byte"):
        read(rdb.preamble(1, 0, []) + b"\xf0")
    with pytest.raises(rdb.RdbError, match="ends before its checksum"):
        read(file_of([(b"a", b"b", 0)])[:-3])


def test_other_databases_are_passed_over_when_asked():
    """A Redis file with keys in databases 0, 1 and 2 (strings and a hash): refused by default, and with
    ``skip_other_databases`` only database 0's strings come back, the others counted by database."""
    body = bytearray(rdb.preamble(2, 0, []))
    body += rdb.key_header(b"a", 1, 0) + b"1"
    body += bytes([rdb.OP_SELECTDB, 1]) + rdb.key_header(b"a", 2, 0) + b"db"
    body += bytes([4]) + b"\x01h\x01\x01f\x01v"  # a hash {f: v}
    body += bytes([rdb.OP_SELECTDB, 2]) + rdb.key_header(b"c", 1, 99) + b"3"
    body += bytes([rdb.OP_SELECTDB, 0]) + rdb.key_header(b"b", 1, 0) + b"2"
    body += rdb.EOF
    data = bytes(body) + rdb.trailer(crc64_update(bytes(body), 0))
    with pytest.raises(rdb.RdbError, match="database 1 .*kvd has database 0 only"):
        read(data)
    reader = rdb.RdbReader(io.BytesIO(data), skip_other_databases=True)
    assert list(reader) == [(b"a", b"1", 0), (b"b", b"2", 0)]
    assert reader.other_databases == {1: 2, 2: 1} and not reader.skipped


def test_function_libraries_are_passed_over_when_asked():
    """A Redis 7 file holds its function libraries before the keys: the code alone (7.0 GA on), or before 7.0 GA
    name, engine, an optional description and the code. Refused by default (kvd has no scripting), and with
    ``skip_functions`` read past and counted."""
    code = b"#!lua name=lib\nredis.register_function('f', function() return 1 end)"
    body = bytearray(rdb.preamble(1, 0, [(b"redis-ver", b"7.0.15")]))
    body += bytes([rdb.OP_FUNCTION]) + rdb.encode_string(code)
    body += bytes([rdb.OP_FUNCTION_PRE_GA]) + b"\x03old\x03LUA\x01\x04desc" + rdb.encode_string(b"return 1")
    body += bytes([rdb.OP_FUNCTION_PRE_GA]) + b"\x04old2\x03LUA\x00" + rdb.encode_string(b"return 2")
    body += rdb.key_header(b"a", 1, 0) + b"1"
    body += rdb.EOF
    data = bytes(body) + rdb.trailer(crc64_update(bytes(body), 0))
    with pytest.raises(rdb.RdbError, match="holds a function library .*kvd has no scripting"):
        read(data)
    reader = rdb.RdbReader(io.BytesIO(data), skip_functions=True)
    assert list(reader) == [(b"a", b"1", 0)]
    assert reader.functions == 3
