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
    with pytest.raises(rdb.RdbError, match="RDB version 13 is newer than kvd reads"):
        read(file_of([], version=13))
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


def sealed(body: bytes | bytearray) -> bytes:
    body = bytes(body) + rdb.EOF
    return body + rdb.trailer(crc64_update(body, 0))


def refused_then_skipped(data: bytes, kind: str) -> rdb.RdbReader:
    """``data`` is refused for a key of type ``kind``; read with ``skip_other_types``, the reader it passed over."""
    with pytest.raises(rdb.RdbError, match=f"the key at byte .* is a {kind}; kvd stores strings only"):
        read(data)
    return rdb.RdbReader(io.BytesIO(data), skip_other_types=True)


def hash_with_field_ttls(kind: int) -> bytes:
    """A Redis 7.4 hash {f: v, g: w} whose field f expires, in each of its four forms: TTL, field and value per
    field, the TTL absolute (22, 7.4's release candidates) or relative to the least deadline, which comes first
    (24; 0 = no TTL); or a listpack (23), after the least deadline (25). The listpack's bytes do not matter to a
    reader that passes it over."""
    least = 1_900_000_000_000
    if kind in (22, 24):
        body = (least.to_bytes(8, "little") if kind == 24 else b"") + b"\x02"
        ttl = rdb.encode_length(least if kind == 22 else 1)
        return body + ttl + b"\x01f\x01v" + b"\x00\x01g\x01w"
    listpack = rdb.encode_string(b"\x1b\x00\x00\x00\x06\x00" + b"\x81f\x02\x81v\x02\xf4" + bytes(8) + b"\xff")
    return (least.to_bytes(8, "little") if kind == 25 else b"") + listpack


def test_version_12_slot_info_and_hashes_with_field_ttls():
    """Redis 7.4's RDB 12: the cluster slot info opcode (slot, keys, keys with a deadline) is read past; the
    hashes with field TTLs (types 22 to 25) are refused by name, or passed over and counted as hashes."""
    body = bytearray(rdb.preamble(6, 1, [(b"redis-ver", b"7.4.1")]))
    body[5:9] = b"0012"
    body += bytes([rdb.OP_SLOT_INFO]) + rdb.encode_length(15495) + rdb.encode_length(6) + rdb.encode_length(1)
    body += rdb.key_header(b"a", 1, 0) + b"1"
    for kind in (22, 23, 24, 25):
        if kind == 24:  # a deadline of the key's own, as any key may have
            body += bytes([rdb.OP_EXPIRETIME_MS]) + (1_800_000_000_000).to_bytes(8, "little")
        body += bytes([kind]) + rdb.encode_string(b"h%d" % kind) + hash_with_field_ttls(kind)
    body += rdb.key_header(b"b", 1, 1_800_000_000_000) + b"2"
    data = sealed(body)
    reader = refused_then_skipped(data, "hash")
    assert list(reader) == [(b"a", b"1", 0), (b"b", b"2", 1_800_000_000_000)]
    assert reader.version == 12 and reader.skipped == {"hash": 4}


def test_valkey_9_files_and_the_versions_past_what_kvd_reads():
    """Valkey 9.0's "VALKEY080": strings as ever, its own hash with field TTLs in type 22 (field, value, an
    8-byte deadline, -1 for none) passed over when asked, and a slot import under way refused. Valkey's 81 and
    Redis's 13 are refused: kvd does not know what they added."""
    head = b"VALKEY080" + rdb.preamble(2, 0, [(b"valkey-ver", b"9.0.0")])[9:]
    body = bytearray(head) + rdb.key_header(b"a", 1, 0) + b"1"
    body += b"\x16\x01h\x02" + b"\x01f\x01v" + (-1).to_bytes(8, "little", signed=True)
    body += b"\x01g\x01w" + (1_900_000_000_000).to_bytes(8, "little")
    body += rdb.key_header(b"b", 1, 0) + b"2"
    data = sealed(body)
    reader = refused_then_skipped(data, "hash")
    assert list(reader) == [(b"a", b"1", 0), (b"b", b"2", 0)]
    assert reader.valkey and reader.version == 80 and reader.skipped == {"hash": 1}
    with pytest.raises(rdb.RdbError, match="a cluster slot import under way"):
        read(sealed(head + bytes([rdb.OP_SLOT_IMPORT])))
    with pytest.raises(rdb.RdbError, match="unknown opcode 0x19"):  # Redis's type 25 is not Valkey's
        list(rdb.RdbReader(io.BytesIO(sealed(head + b"\x19\x01h")), skip_other_types=True))
    with pytest.raises(rdb.RdbError, match="Valkey RDB version 81 is not one kvd reads"):
        read(sealed(b"VALKEY081"))
    with pytest.raises(rdb.RdbError, match="RDB version 13 is newer than kvd reads"):
        read(sealed(b"REDIS0013"))


def test_a_set_listpack_is_a_set():
    """Type 20 is Redis 7.2's listpack of a small set (RDB_TYPE_SET_LISTPACK), not a hash: counted as a set, and
    named so when refused."""
    data = sealed(rdb.preamble(1, 0, []) + b"\x14\x01s" + rdb.encode_string(b"listpack bytes"))
    reader = refused_then_skipped(data, "set")
    assert list(reader) == [] and reader.skipped == {"set": 1}
