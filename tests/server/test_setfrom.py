"""KVD.SETFROM: keys set to the bytes at their offsets in a client's /dev/shm file, as MSET sets them;
what kvd refuses, and that the values are kvd's own from then on (logged, recovered, replicated, evicted)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
import redis
from support.replication import follow
from support.server import ServerProcess
from support.shm import grow

pytestmark = pytest.mark.kvd_only

MiB = 1 << 20


def setfrom(r: redis.Redis, name: str, *triples: object):
    """KVD.SETFROM name key offset length [key offset length ...]"""
    return r.execute_command("KVD.SETFROM", name, *triples)


def slots(offset: int, slot: int, keys: list[str], lengths: list[int]) -> list[object]:
    """The arguments for values in consecutive slots of ``slot`` bytes from ``offset``."""
    return [x for i, (k, n) in enumerate(zip(keys, lengths, strict=True)) for x in (k, offset + i * slot, n)]


def fill(path: Path, offset: int, slot: int, values: list[bytes]) -> None:
    """Write ``values`` into their slots of ``path``, as the client does before KVD.SETFROM."""
    with open(path, "r+b") as f:
        for i, v in enumerate(values):
            f.seek(offset + i * slot)
            f.write(v)


def test_keys_take_the_bytes_of_their_slots(server, shm_file):
    r = server.client()
    values = [b"alpha", b"", b"b" * 300, os.urandom(40 << 10)]  # small, empty, a slot's worth, pooled size
    slot = 48 << 10
    grow(shm_file, 100 + slot * len(values))
    fill(shm_file, 100, slot, values)
    keys = [f"k{i}" for i in range(len(values))]
    assert setfrom(r, shm_file.name, *slots(100, slot, keys, [len(v) for v in values])) == b"OK"
    assert r.mget([f"k{i}" for i in range(len(values))]) == values
    fill(shm_file, 100, slot, [b"ALPHA"])  # the client reuses its slot: kvd's copy is its own
    assert r.get("k0") == b"alpha"
    assert r.strlen("k3") == 40 << 10
    assert r.object("encoding", "k0") == b"embstr" and r.object("encoding", "k3") == b"raw"
    assert r.info("kvd")["shm_saved_bytes"] == sum(map(len, values))
    r.config_resetstat()
    assert r.info("kvd")["shm_saved_bytes"] == 0


def test_large_values_are_copied_on_the_threads_and_arrive_whole(server, shm_file):
    r = server.client()
    values = [os.urandom((9 * MiB) + i) for i in range(3)]  # 27 MiB: split across copy threads, mid-value
    slot = 10 * MiB
    grow(shm_file, 3 * slot)
    fill(shm_file, 0, slot, values)
    other = server.client()
    assert setfrom(r, shm_file.name, *slots(0, slot, ["big0", "big1", "big2"], [len(v) for v in values]))
    assert other.ping()
    for i, v in enumerate(values):
        assert r.get(f"big{i}") == v
    assert r.info("commandstats")["cmdstat_kvd.setfrom"]["calls"] == 1


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("other-name", "k", 0, 1), "invalid shared memory name 'other-name': kvd writes only into /dev/shm/kvd-*"),
        (("kvd-absent-xyz", "k", 0, 1), "no shared memory 'kvd-absent-xyz' in /dev/shm"),
        ((None, "k", 0, -1), "length is not an integer or out of range"),
        ((None, "k", 0, "x"), "length is not an integer or out of range"),
        ((None, "k", -1, 1), "offset is not an integer or out of range"),
        ((None, "k", "x", 1), "offset is not an integer or out of range"),
        ((None, "j", 0, 1, "k", 4000, 100), "holds 4096 bytes, 4100 needed"),
        ((None, "k", 0, 1, "j"), "wrong number of arguments for 'kvd.setfrom' command"),
        ((None, "k", 0), "wrong number of arguments for 'kvd.setfrom' command"),
    ],
)
def test_refusals_set_nothing(server, shm_file, args, error):
    r = server.client()
    with pytest.raises(redis.ResponseError) as exc:
        setfrom(r, args[0] or shm_file.name, *args[1:])
    assert error in str(exc.value)
    assert r.dbsize() == 0


def test_only_clients_on_this_host(server, shm_file):
    with socket.create_connection((server.host, server.port), timeout=10, source_address=("127.0.0.2", 0)) as s:
        name = shm_file.name.encode()
        s.sendall(b"*5\r\n$11\r\nKVD.SETFROM\r\n$%d\r\n%s\r\n$1\r\nk\r\n$1\r\n0\r\n$1\r\n1\r\n" % (len(name), name))
        reply = s.recv(4096)
    assert reply.startswith(b"-ERR KVD.SETFROM is for clients on kvd's host (the unix socket or loopback); use MSET")
    assert server.client().exists("k") == 0


def test_a_value_over_proto_max_bulk_len_is_refused(server_factory, shm_file):
    srv = server_factory("--proto-max-bulk-len", "1mb")
    r = srv.client()
    grow(shm_file, 2 * MiB)
    with pytest.raises(redis.ResponseError, match="string exceeds maximum allowed size"):
        setfrom(r, shm_file.name, "k", 0, MiB + 1)
    assert setfrom(r, shm_file.name, "k", 0, MiB)
    assert r.strlen("k") == MiB


def test_out_of_memory_sets_none_of_the_keys(server_factory, shm_file):
    srv = server_factory(maxmemory="4mb", maxmemory_policy="noeviction")
    r = srv.client()
    grow(shm_file, 8 * MiB)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        setfrom(r, shm_file.name, *slots(0, 2 * MiB, ["a", "b", "c"], [2 * MiB] * 3))
    assert r.dbsize() == 0
    assert setfrom(r, shm_file.name, "a", 0, MiB)
    assert r.strlen("a") == MiB


def test_values_are_logged_and_recovered_after_kill_9(server_factory, shm_file):
    srv = server_factory(persistence=True, appendfsync="always")
    r = srv.client()
    values = [os.urandom(3 * MiB) for _ in range(4)]  # 12 MiB in all: the copies run on the threads
    slot = 3 * MiB
    grow(shm_file, 4 * slot)
    fill(shm_file, 0, slot, values)
    assert setfrom(r, shm_file.name, *slots(0, slot, [f"c{i}" for i in range(4)], [len(v) for v in values]))
    srv.kill9()
    srv.start()
    r = srv.client()
    assert r.mget([f"c{i}" for i in range(4)]) == values


def test_in_a_transaction_and_seen_by_monitor(server, shm_file):
    r = server.client()
    fill(shm_file, 0, 8, [b"one", b"two"])
    with r.monitor() as m:
        pipe = r.pipeline(transaction=True)
        pipe.execute_command("KVD.SETFROM", shm_file.name, "t1", 0, 3, "t2", 8, 3)
        pipe.get("t1")
        assert pipe.execute() == [b"OK", b"one"]
        seen = [m.next_command()["command"] for _ in range(6)]  # the new connection's HELLO and SETINFOs first
    assert seen[-3:-1] == ["MULTI", f"KVD.SETFROM {shm_file.name} t1 0 3 t2 8 3"], seen
    assert r.get("t2") == b"two"


def test_command_getkeys_names_every_key(server):
    r = server.client()
    assert r.command_getkeys("KVD.SETFROM", "kvd-x", "a", 0, 1, "b", 8, 1) == ["a", "b"]
    info = r.execute_command("COMMAND", "INFO", "kvd.setfrom")["kvd.setfrom"]
    assert (info["arity"], info["first_key_pos"], info["last_key_pos"], info["step_count"]) == (-5, 2, -1, 3)
    assert "write" in info["flags"] and "denyoom" in info["flags"]


def test_a_redis_server_replica_gets_the_values(server, redis_server: ServerProcess, shm_file):
    """The replication stream carries the keys' SETs, not the command: a replica has no such file."""
    follow(redis_server, server)
    replica = redis_server.client()
    values = [os.urandom(MiB), b"small"]
    grow(shm_file, 2 * MiB)
    fill(shm_file, 0, MiB, values)
    p = server.client()
    assert setfrom(p, shm_file.name, "r1", 0, MiB, "r2", MiB, 5)
    assert p.execute_command("WAIT", 1, 10_000) == 1
    assert replica.mget("r1", "r2") == values


def test_a_client_gone_during_its_copies_costs_nothing(server, shm_file):
    r = server.client()
    grow(shm_file, 8 * (4 * MiB))
    name = shm_file.name.encode()
    request = [b"KVD.SETFROM", name]
    for i in range(8):
        request += [b"gone%d" % i, b"%d" % (i * 4 * MiB), b"%d" % (4 * MiB)]
    wire = b"*%d\r\n" % len(request) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in request)
    for _ in range(3):
        with socket.create_connection((server.host, server.port), timeout=10) as s:
            s.sendall(wire)  # and gone before the reply
    assert r.ping()
    deadline = time.monotonic() + 20
    while r.exists(*[f"gone{i}" for i in range(8)]) not in (0, 8):
        assert time.monotonic() < deadline, "some keys of one command were set without the others"
        time.sleep(0.05)


def test_a_sparse_file_is_refused(server, shm_file):
    """Reading a hole of a /dev/shm file gives it a page too, which on a full /dev/shm is SIGBUS: refused."""
    r = server.client()
    with open(shm_file, "r+b") as f:
        f.truncate(1 << 20)  # the first 4096 bytes allocated, the rest a hole
    with pytest.raises(redis.ResponseError, match="is not allocated"):
        setfrom(r, shm_file.name, "k", 8192, 100)
    assert r.exists("k") == 0
    grow(shm_file, 1 << 20)
    assert setfrom(r, shm_file.name, "k", 8192, 100)
    assert r.get("k") == bytes(100)
