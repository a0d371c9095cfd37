"""DUMP and RESTORE move values between kvd and redis-server, both ways, at KV-chunk sizes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.server import ServerProcess
from support.tools import find_tool

from kvd.persist.dump import crc64_python

pytestmark = [pytest.mark.compat, pytest.mark.kvd_only, pytest.mark.timeout(120)]

VALUES = {
    "int": b"-70000",
    "short": b"hello",
    "compressible": b"kv-cache " * 120_000,  # ~1 MiB: Redis sends it LZF-compressed
    "random": os.urandom(4 << 20),
}


@pytest.fixture
def pair(tmp_path: Path, server_factory) -> Iterator[tuple[object, object]]:
    find_tool("redis-server")
    kvd = server_factory(persistence="yes", maxmemory="8mb")
    redis = ServerProcess(tmp_path / "redis", kind="redis")
    redis.start()
    try:
        yield kvd.client(), redis.client()
    finally:
        redis.stop()


def test_values_dumped_by_redis_restore_into_kvd_and_back(pair):
    kvd, redis = pair
    for name, value in VALUES.items():
        redis.set(name, value)
        assert kvd.restore(name, 0, redis.dump(name)) == b"OK"
        assert kvd.get(name) == value
        assert redis.restore(f"{name}:back", 0, kvd.dump(name)) == b"OK"
        assert redis.get(f"{name}:back") == value
    assert len(redis.dump("compressible")) < len(VALUES["compressible"]) // 10  # it was compressed


def test_restore_keeps_redis_s_rules(pair):
    kvd, redis = pair
    redis.set("s", "v")
    payload = redis.dump("s")
    assert kvd.restore("k", 100_000, payload) == b"OK"
    assert 90_000 < kvd.pttl("k") <= 100_000
    with pytest.raises(Exception, match="BUSYKEY Target key name already exists."):
        kvd.restore("k", 0, payload)
    assert kvd.restore("k", 0, payload, replace=True) == b"OK" and kvd.pttl("k") == -1
    for server in (kvd, redis):  # a relative TTL past 2**63 - 1 ms wraps in Redis: the key is expired at once
        assert server.execute_command("RESTORE", "huge", 2**63 - 1, payload) == b"OK"
        assert server.exists("huge") == 0
    redis.rpush("list", "a", "b")
    with pytest.raises(Exception, match="holds a list, and kvd stores strings only"):
        kvd.restore("l", 0, redis.dump("list"))
    assert kvd.exists("l") == 0


def test_a_cold_value_dumps_from_disk(pair):
    kvd, redis = pair
    chunks = {f"chunk:{i}": os.urandom(1 << 20) for i in range(16)}  # twice the RAM tier
    for key, value in chunks.items():
        kvd.set(key, value)
    assert int(kvd.info("kvd")["disk_only_keys"]) > 0
    for key, value in chunks.items():
        assert redis.restore(key, 0, kvd.dump(key), replace=True) == b"OK"
        assert redis.get(key) == value


def payload(body: bytes, version: int) -> bytes:
    """A DUMP payload as a server of that RDB version writes it: the body, the version, the CRC-64."""
    body += version.to_bytes(2, "little")
    return body + crc64_python(body).to_bytes(8, "little")


def test_restore_takes_payloads_of_redis_7_4_and_valkey_9(server_factory):
    """Redis 7.4 and 8 DUMP with RDB version 12, Valkey 9.0 with 80: their strings RESTORE (a raw string, an
    int8, LZF); a hash with field TTLs (Redis's types 24 and 25, Valkey's 22) is refused by name; versions kvd
    does not know (13, Valkey 9.2's 81) get Redis's error for a newer payload."""
    kvd = server_factory().client()
    lzf = bytes.fromhex("c3094064016161e0570001616100")  # 100 'a's, as redis-server compresses them
    for version in (12, 80):
        for name, body, value in (("raw", b"\x05hello", b"hello"), ("int", b"\xc0\x7f", b"127"), ("lzf", lzf, None)):
            key = f"{name}:{version}"
            assert kvd.restore(key, 0, payload(b"\x00" + body, version)) == b"OK"
            assert kvd.get(key) == (value if value is not None else b"a" * 100)
    hashes = {12: [b"\x18" + bytes(8) + b"\x01" + b"\x00\x01f\x01v", b"\x19" + bytes(8) + b"\x02lp"]}
    hashes[80] = [b"\x16\x01\x01f\x01v" + bytes(8)]
    for version, bodies in hashes.items():
        for body in bodies:
            with pytest.raises(Exception, match="holds a hash, and kvd stores strings only"):
                kvd.restore("h", 0, payload(body, version))
    for version in (13, 79, 81):
        with pytest.raises(Exception, match="DUMP payload version or checksum are wrong"):
            kvd.restore("newer", 0, payload(b"\x00\x05hello", version))
    assert kvd.exists("h", "newer") == 0
