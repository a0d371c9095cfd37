"""Loads and saves through shared memory (``connectors/shm.py``, ``KVD.GETINTO`` and ``KVD.SETFROM``) against a
real server: kvd copies the values into and out of the client's /dev/shm file itself; redis-server does not know
the commands, and the same buffers take an MGET or SETs. Either way the values, the misses and the buffers' life
(growth, trim, removal) are the same."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from connectors.client import ClientConfig, KvdClient
from connectors.shm import SHM_DIR, SharedBuffers, remove_orphans
from connectors.testing import Server


def _calls(r: redis.Redis, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_values_land_in_shared_memory(kv_server: Server, kv_url: str) -> None:
    client = KvdClient(ClientConfig(url=kv_url, timeout_ms=20_000, max_batch_bytes=3 << 20))
    values = [os.urandom(1 << 20) for _ in range(7)] + [b"short"]
    keys = [f"shm:{i}" for i in range(len(values))]
    assert client.put_many(list(zip(keys, values, strict=True)), skip_existing=False)[0] == len(values)
    buffers = SharedBuffers((1 << 20) + 2, keep_bytes=2 * ((1 << 20) + 4096))
    try:
        assert buffers.slot == (1 << 20) + 4096  # whole pages: every value starts aligned
        assert buffers.capacity == 2
        r = kv_server.client()
        before = _calls(r, "kvd.getinto")
        wanted = [*keys[:4], "shm:none", *keys[4:]]
        got = client.get_many(wanted, 1 << 20, into=buffers)  # three batches: offsets past the first slot
        assert [bytes(v) if v is not None else None for v in got] == [*values[:4], None, *values[4:]]
        assert buffers.capacity >= len(wanted)  # grown for the load
        for i, value in enumerate([*values[:4], None, *values[4:]]):
            if value is not None:  # backing(i) starts with value i: what the connector scatters from
                assert bytes(memoryview(buffers.backing(i))[: len(value)]) == value
        if kv_server.kind == "kvd":
            assert _calls(r, "kvd.getinto") - before == 3
            assert client._has_getinto is True
        else:  # Redis: unknown command once, then MGET into the same buffers for good
            assert client._has_getinto is False
        buffers.trim()
        assert buffers.capacity == 2  # keep_bytes // slot
        again = client.get_many(keys[:2], 1 << 20, into=buffers)
        assert [bytes(v) for v in again] == values[:2]
        path = os.path.join(SHM_DIR, buffers.name)
        assert os.stat(path).st_mode & 0o777 == 0o600
    finally:
        buffers.close()
        client.close()
    assert not os.path.exists(path)


def test_buffers_for_one_load_allocate_its_values_only(kv_url: str) -> None:
    """An async fetch's buffers (``count``): the file holds that load's slots, not ``keep_bytes`` of them, and grows
    for a longer load like any other; several fetches in flight each take what they need."""
    client = KvdClient(ClientConfig(url=kv_url, timeout_ms=20_000))
    values = [os.urandom(5000) for _ in range(5)]
    keys = [f"one-load:{i}" for i in range(len(values))]
    assert client.put_many(list(zip(keys, values, strict=True)), skip_existing=False)[0] == len(values)
    buffers = SharedBuffers(5002, keep_bytes=64 << 20, count=3)
    try:
        path = os.path.join(SHM_DIR, buffers.name)
        assert buffers.capacity == 3
        assert os.stat(path).st_size == 3 * buffers.slot  # 24 KiB, where keep_bytes alone would take 64 MiB
        got = client.get_many(keys, 5000, into=buffers)
        assert [bytes(v) for v in got] == values
        assert buffers.capacity == 5 and os.stat(path).st_size == 5 * buffers.slot
        buffers.trim()  # under keep_bytes: kept as it is for the next load
        assert buffers.capacity == 5
    finally:
        buffers.close()
        client.close()


def test_a_value_longer_than_its_slot_is_a_miss(kv_url: str) -> None:
    client = KvdClient(ClientConfig(url=kv_url, timeout_ms=20_000))
    client.put_many([("shm:long", b"x" * 5000), ("shm:fits", b"y" * 100)], skip_existing=False)
    buffers = SharedBuffers(502, keep_bytes=4096)
    assert buffers.slot == 4096
    try:
        got = client.get_many(["shm:long", "shm:fits"], 100, into=buffers)
        if client._has_getinto:  # kvd copies what fits and says how long the rest is: not the connector's
            assert got[0] is None
        else:  # MGET puts a longer value in a buffer of its own, as LoadBuffers would
            assert bytes(got[0]) == b"x" * 5000 and bytes(buffers.backing(0)[:5000]) == b"x" * 5000
        assert bytes(got[1]) == b"y" * 100
    finally:
        buffers.close()
        client.close()


def test_saves_from_shared_memory(kv_server: Server, kv_url: str) -> None:
    client = KvdClient(ClientConfig(url=kv_url, timeout_ms=20_000, max_batch_bytes=3 << 20))
    values = [os.urandom((1 << 20) - i) for i in range(6)] + [b"short"]
    buffers = SharedBuffers(1 << 20, keep_bytes=len(values) << 20)
    try:
        order = [3, 0, 6, 5, 1, 4, 2]  # any slot for any key, as a queue of saves hands them out
        for slot, value in zip(order, values, strict=True):
            buffers.view(slot, len(value))[:] = value
        items = [(f"save:{i}", slot, len(v)) for i, (slot, v) in enumerate(zip(order, values, strict=True))]
        r = kv_server.client()
        before = _calls(r, "kvd.setfrom")
        client.put_many([("save:6", b"already there")], skip_existing=False)
        assert client.put_shared(items, buffers) == (6, sum(len(v) for v in values[:6]))  # save:6 existed
        assert r.mget([k for k, _, _ in items]) == [*values[:6], b"already there"]
        buffers.view(3, 4)[:] = b"next"  # the slot is reused at once: the server's copy is its own
        assert r.get("save:0") == values[0]
        if kv_server.kind == "kvd":
            assert _calls(r, "kvd.setfrom") - before == 2  # batches of 3 MiB or just over: 4 values, then 2
            assert client._has_setfrom is True
        else:  # Redis: unknown command once, then SETs of the same bytes for good
            assert client._has_setfrom is False
        assert client.put_shared([("save:x", 3, 4)], buffers, skip_existing=False) == (1, 4)
        assert r.get("save:x") == b"next"
        with pytest.raises(ValueError, match="outside the 7 slots"):
            client.put_shared([("save:y", 7, 1)], buffers)
    finally:
        buffers.close()
        client.close()


def test_files_of_dead_processes_are_removed() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # exited: nobody has this pid for now
    namespace = os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
    orphan = os.path.join(SHM_DIR, f"kvd-{namespace}-{pid}-0123abcd")
    elsewhere = os.path.join(SHM_DIR, f"kvd-1{namespace}-{pid}-0123abcd")  # another container's pids
    other = os.path.join(SHM_DIR, "kvd-not-ours")
    mine = SharedBuffers(64, keep_bytes=64)
    try:
        for path in (orphan, elsewhere, other):
            with open(path, "wb") as f:
                f.write(b"left by someone")
        assert remove_orphans() == [os.path.basename(orphan)]
        assert not os.path.exists(orphan)
        assert mine.name.startswith(f"kvd-{namespace}-{os.getpid()}-")
        assert os.path.exists(os.path.join(SHM_DIR, mine.name))  # a live process's file stays
        assert os.path.exists(elsewhere) and os.path.exists(other)
    finally:
        mine.close()
        os.unlink(elsewhere)
        os.unlink(other)


_NO_ROOM = """
import os, resource, signal, sys
from connectors.client import ClientConfig, KvdClient
from connectors.shm import SharedBuffers

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, as ENOSPC on a full /dev/shm
resource.setrlimit(resource.RLIMIT_FSIZE, (3 * 4096, 3 * 4096))
try:
    SharedBuffers(4096, keep_bytes=4 * 4096)
    sys.exit("a file larger than there is room for was made")
except OSError:
    pass
client = KvdClient(ClientConfig(url=sys.argv[1], timeout_ms=20_000))
values = [os.urandom(3000) for _ in range(5)]
keys = [f"noroom:{i}" for i in range(5)]
client.put_many(list(zip(keys, values)), skip_existing=False)
class Own(bytearray):  # what the caller's allocate makes (the connector: host tensors, as the slots' backing)
    pass
def allocate(size):
    buf = Own(size)
    return buf, memoryview(buf)
buffers = SharedBuffers(4096, keep_bytes=2 * 4096, allocate=allocate)
got = client.get_many(keys, 3000, into=buffers)  # 5 slots do not fit: this load comes through the socket
assert buffers.capacity == 2, buffers.capacity
assert [bytes(v) for v in got] == values
assert [bytes(buffers.backing(i)[:3000]) for i in range(5)] == values
assert [type(buffers.backing(i)) for i in range(5)] == [memoryview] * 2 + [Own] * 3
got = client.get_many(keys[:2], 3000, into=buffers)  # two fit: kvd copies them
assert [bytes(v) for v in got] == values[:2]
print("getinto" if client._has_getinto else "mget")
buffers.close()
"""


def test_no_room_in_dev_shm_means_the_socket(kv_server: Server, kv_url: str) -> None:
    """Where /dev/shm has no room (a container's is often 64 MiB), the buffers are not made, or a long load's
    values past the slots come through the socket into buffers of their own, made by the caller's ``allocate``
    (the connector copies out of them as out of the slots); nothing is lost either way."""
    r = subprocess.run([sys.executable, "-c", _NO_ROOM, kv_url], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("getinto" if kv_server.kind == "kvd" else "mget")
