"""``kvd-load-rdb``: the string keys of an RDB file (a kvd backup, or a file Redis saved) written into a running
server, from a file or a pipe, and what it says when the file is not one it can load."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.server import ServerProcess
from support.tools import redis_cli, run
from test_rdb_snapshot import contents, fill

from kvd.persist import rdb
from kvd.persist.dump import crc64_update

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def load(srv, *args: str, input: bytes | None = None):
    cmd = [sys.executable, "-m", "kvd.tools.load_rdb", *args, "--port", str(srv.port)]
    return run(cmd, input=input, timeout=120)


@pytest.fixture
def redis(redis_server: ServerProcess) -> ServerProcess:
    return redis_server


def rdb_file(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """An RDB file written with kvd's own writer."""
    body = rdb.preamble(len(entries), sum(1 for e in entries if e[2]), [(b"redis-ver", b"7.2.0")])
    for key, value, expire_at in entries:
        body += rdb.key_header(key, len(value), expire_at) + value
    body += rdb.EOF
    return body + rdb.trailer(crc64_update(body, 0))


def test_a_backup_piped_from_one_server_into_another(server_factory):
    """``redis-cli --rdb - | kvd-load-rdb -``: a live copy, with no file in between."""
    src, dst = server_factory(), server_factory()
    expected = fill(src.client())
    dump = subprocess.Popen(
        [redis_cli(), "-h", src.host, "-p", str(src.port), "--rdb", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        loader = subprocess.run(
            [sys.executable, "-m", "kvd.tools.load_rdb", "-", "--port", str(dst.port)],
            stdin=dump.stdout,
            capture_output=True,
            timeout=120,
        )
    finally:
        dump.stdout.close()
        assert dump.wait(timeout=60) == 0
    assert loader.returncode == 0, loader.stderr
    assert loader.stdout.startswith(b"loaded %d keys" % len(expected)), loader.stdout
    assert contents(dst.client()) == expected


def test_a_file_redis_saved_loads(server, redis):
    """Redis writes integers as integers and compresses long strings with LZF (RDB version 10): read both."""
    expected = fill(redis.client())
    assert redis.client().save()
    r = load(server, str(redis.dir / "dump.rdb"))
    assert r.returncode == 0, r.stderr
    assert contents(server.client()) == expected


def test_expired_keys_are_skipped_and_no_replace_keeps_what_is_there(server, tmp_path: Path):
    path = tmp_path / "crafted.rdb"
    path.write_bytes(rdb_file([(b"old", b"x", 1000), (b"new", b"y", 0), (b"kept", b"from-file", 0)]))
    c = server.client()
    c.set("kept", "already")
    r = load(server, str(path), "--no-replace")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        b"loaded 1 keys (4 bytes of keys and values) from %s into 127.0.0.1:%d; skipped 1 expired, "
        b"1 already there (--no-replace)\n" % (str(path).encode(), server.port)
    )
    assert (c.get("old"), c.get("new"), c.get("kept")) == (None, b"y", b"already")
    assert load(server, str(path)).returncode == 0
    assert c.get("kept") == b"from-file"


def test_files_it_cannot_load_are_refused_with_the_reason(server, redis, tmp_path: Path):
    r = load(server, str(tmp_path / "missing.rdb"))
    assert (r.returncode, r.stderr) == (
        1,
        b"kvd-load-rdb: %s: No such file or directory\n" % str(tmp_path / "missing.rdb").encode(),
    )

    good = rdb_file([(b"a", b"1" * 100, 0), (b"b", b"2" * 100, 0)])
    damaged = bytearray(good)
    damaged[-20] ^= 0xFF  # a byte of b's value
    (tmp_path / "damaged.rdb").write_bytes(damaged)
    r = load(server, str(tmp_path / "damaged.rdb"))
    assert r.returncode == 1 and b"checksum mismatch" in r.stderr and b"written before it" not in r.stderr
    assert server.client().dbsize() == 0  # a file is checked whole before its first key is written
    r = load(server, "-", input=bytes(damaged))  # from a pipe, the last batch waits for the checksum too
    assert r.returncode == 1 and b"checksum mismatch" in r.stderr and server.client().dbsize() == 0

    (tmp_path / "short.rdb").write_bytes(good[:-50])
    r = load(server, str(tmp_path / "short.rdb"))
    assert r.returncode == 1 and b"truncated" in r.stderr, r.stderr

    (tmp_path / "text.rdb").write_bytes(b"*1\r\n$4\r\nPING\r\n")
    r = load(server, str(tmp_path / "text.rdb"))
    assert r.returncode == 1 and b"not an RDB file" in r.stderr

    c = redis.client()
    c.set("first", "1")
    c.rpush("a-list", "x", "y")
    assert c.save()
    r = load(server, str(redis.dir / "dump.rdb"))
    assert r.returncode == 1 and b"is a list; kvd stores strings only" in r.stderr, r.stderr


def test_a_server_that_refuses_writes_stops_the_load(server_factory, tmp_path: Path):
    """Batches of 4 x 512 KiB against a 3 MiB noeviction server: the load stops at the first refused MSET (which
    batch that is depends on the server: kvd refuses a write that would not fit, Redis one that arrives over the
    limit, its query buffer counted), says how many keys were written, and that is all the server holds."""
    srv = server_factory(maxmemory="3mb", **{"maxmemory-policy": "noeviction"})
    path = tmp_path / "big.rdb"
    path.write_bytes(rdb_file([(b"k%d" % i, os.urandom(512 * 1024), 0) for i in range(12)]))
    r = load(srv, str(path), "--batch-bytes", str(2 << 20))
    assert r.returncode == 1, r.stderr
    refused = re.search(rb"the server refused an MSET of 4 keys from b'k(\d+)': .*used memory > 'maxmemory'", r.stderr)
    assert refused, r.stderr
    done = re.search(rb"\((\d+) keys were written before it\)", r.stderr)
    written = int(done.group(1)) if done else 0
    assert int(refused.group(1)) == written and srv.client().dbsize() == written, r.stderr


def test_the_installed_command_is_there():
    """``kvd-load-rdb`` as the README runs it: the console script ``pip install`` puts beside the interpreter."""
    exe = Path(sys.executable).with_name("kvd-load-rdb")
    r = run([str(exe), "--help"], timeout=60)
    assert r.returncode == 0 and b"usage: kvd-load-rdb" in r.stdout


def test_keys_of_other_types_can_be_passed_over(server, redis):
    """A Redis dataset of every type and encoding 7.0 writes (listpack and quicklist lists, intset and hash
    sets, listpack and skiplist sorted sets, listpack and hash-table hashes, a stream with a consumer group and
    pending entries): with --skip-other-types the strings load and the rest is counted by type."""
    c = redis.client()
    c.set("s1", "one")
    c.set("s2", "two", ex=1000)
    c.rpush("list-small", "a", "b")
    c.rpush("list-big", *[f"e{i}" * 20 for i in range(2000)])
    c.sadd("set-ints", 1, 2, 3)
    c.sadd("set-strings", *[f"m{i}" for i in range(600)])
    c.zadd("zset-small", {"a": 1.5, "b": float("inf")})
    c.zadd("zset-big", {f"m{i}": i / 3 for i in range(300)})
    c.hset("hash-small", mapping={"f": "v"})
    c.hset("hash-big", mapping={f"f{i}": "v" * 100 for i in range(600)})
    for i in range(5):
        c.xadd("stream", {"n": i})
    c.xgroup_create("stream", "group", id="0")
    c.xreadgroup("group", "consumer", {"stream": ">"}, count=3)
    c.set("s3", "three")
    assert c.save()
    path = str(redis.dir / "dump.rdb")
    r = load(server, path)
    assert r.returncode == 1 and b"kvd stores strings only" in r.stderr
    r = load(server, path, "--skip-other-types")
    assert r.returncode == 0, r.stderr
    assert b"skipped 9 of other types (2 hash, 2 list, 2 set, 1 stream, 2 zset)" in r.stdout, r.stdout
    k = server.client()
    assert sorted(k.keys("*")) == [b"s1", b"s2", b"s3"] and k.get("s3") == b"three" and k.ttl("s2") > 900


def test_keys_of_other_databases_can_be_passed_over(server, redis):
    """A Redis dataset in databases 0 and 3: refused as it is (kvd has database 0 only, and would mix the two),
    and with --skip-other-databases database 0's keys load and the others are counted."""
    c = redis.client()
    c.mset({"a": "1", "b": "2"})
    c3 = redis.client(db=3)
    c3.mset({"a": "three", "c": "3"})
    assert c.save()
    path = str(redis.dir / "dump.rdb")
    r = load(server, path)
    assert r.returncode == 1 and b"the file has keys in database 3" in r.stderr, r.stderr
    r = load(server, path, "--skip-other-databases")
    assert r.returncode == 0, r.stderr
    assert b"skipped 2 of other databases (2 in database 3)" in r.stdout, r.stdout
    k = server.client()
    assert sorted(k.keys("*")) == [b"a", b"b"] and k.get("a") == b"1"


def test_function_libraries_can_be_passed_over(server, redis):
    """Redis 7 writes every library FUNCTION LOAD made into each file: refused as it is (kvd has no scripting),
    and with --skip-functions the strings load and the libraries are counted."""
    c = redis.client()
    c.set("s", "v")
    c.function_load("#!lua name=lib\nredis.register_function('f', function() return 1 end)")
    assert c.save()
    path = str(redis.dir / "dump.rdb")
    r = load(server, path)
    assert r.returncode == 1 and b"holds a function library" in r.stderr and b"kvd has no scripting" in r.stderr
    r = load(server, path, "--skip-functions")
    assert r.returncode == 0, r.stderr
    assert b"skipped 1 function library" in r.stdout, r.stdout
    assert server.client().keys("*") == [b"s"]
