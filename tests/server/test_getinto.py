"""KVD.GETINTO: values copied into a client's /dev/shm file at ``offset + i * slot``, their lengths replied;
what kvd refuses to write into, and that a file changed under it is never written past its end."""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path

import pytest
import redis
from support.shm import SHM, grow

pytestmark = pytest.mark.kvd_only


def getinto(r: redis.Redis, name: str, offset: int, slot: int, *keys: str):
    return r.execute_command("KVD.GETINTO", name, offset, slot, *keys)


def test_values_land_at_their_slots(server, shm_file):
    r = server.client()
    r.set("a", b"alpha")
    r.set("b", b"b" * 300)
    r.set("c", b"gamma")
    assert getinto(r, shm_file.name, 100, 256, "a", "missing", "b", "c") == [5, -1, 300, 5]
    data = shm_file.read_bytes()
    assert data[100:105] == b"alpha"
    assert data[356:612] == bytes(256)  # the missing key's slot is untouched
    assert data[612:868] == bytes(256)  # 300 bytes do not fit a 256-byte slot: not copied, length told
    assert data[868:873] == b"gamma"
    assert r.info("stats")["keyspace_hits"] == 3 and r.info("stats")["keyspace_misses"] == 1
    assert r.info("kvd")["shm_loaded_bytes"] == 5 + 5  # what was copied: not the value too long for its slot


@pytest.mark.parametrize(
    ("name", "offset", "slot", "error"),
    [
        ("other-name", 0, 16, "invalid shared memory name 'other-name': kvd writes only into /dev/shm/kvd-*"),
        ("kvd-../etc", 0, 16, "invalid shared memory name 'kvd-../etc'"),
        ("kvd-absent-xyz", 0, 16, "no shared memory 'kvd-absent-xyz' in /dev/shm: the client creates it first"),
        (None, 0, 0, "slot is not an integer or out of range"),
        (None, -1, 16, "offset is not an integer or out of range"),
        (None, "x", 16, "offset is not an integer or out of range"),
        (None, 4000, 100, "holds 4096 bytes, 4100 needed"),
    ],
)
def test_refusals(server, shm_file, name, offset, slot, error):
    r = server.client()
    r.set("k", b"v")
    with pytest.raises(redis.ResponseError) as exc:
        getinto(r, name or shm_file.name, offset, slot, "k")
    assert error in str(exc.value)
    assert shm_file.read_bytes() == bytes(4096)


def test_links_and_directories_are_not_written(server, shm_file, tmp_path):
    r = server.client()
    r.set("k", b"v")
    target = tmp_path / "elsewhere"
    target.write_bytes(bytes(64))
    link = SHM / f"kvd-link-{secrets.token_hex(4)}"
    folder = SHM / f"kvd-dir-{secrets.token_hex(4)}"
    link.symlink_to(target)
    folder.mkdir()
    try:
        with pytest.raises(redis.ResponseError, match="symbolic links"):
            getinto(r, link.name, 0, 8, "k")
        with pytest.raises(redis.ResponseError, match="is not a regular file|Is a directory"):
            getinto(r, folder.name, 0, 8, "k")
        assert target.read_bytes() == bytes(64)
    finally:
        link.unlink()
        folder.rmdir()


def test_only_clients_on_this_host(server, shm_file):
    """Redis's islocalClient: 127.0.0.1 is local, 127.0.0.2 (loopback, but not that address) is not."""
    with socket.create_connection((server.host, server.port), timeout=10, source_address=("127.0.0.2", 0)) as s:
        name = shm_file.name.encode()
        s.sendall(b"*5\r\n$11\r\nKVD.GETINTO\r\n$%d\r\n%s\r\n$1\r\n0\r\n$1\r\n8\r\n$1\r\nk\r\n" % (len(name), name))
        reply = s.recv(4096)
    assert reply.startswith(b"-ERR KVD.GETINTO is for clients on kvd's host (the unix socket or loopback); use MGET")


def test_a_resized_or_replaced_file_is_mapped_afresh_and_never_written_past_its_end(server, shm_file):
    r = server.client()
    r.set("k", b"K" * 1000)
    assert getinto(r, shm_file.name, 0, 1000, "k") == [1000]
    grow(shm_file, 1 << 20)  # grown: the mapping follows
    assert getinto(r, shm_file.name, (1 << 20) - 1000, 1000, "k") == [1000]
    assert shm_file.read_bytes()[-1000:] == b"K" * 1000
    with open(shm_file, "r+b") as f:
        f.truncate(512)  # shrunk under kvd: refused, where a write would have been SIGBUS
    with pytest.raises(redis.ResponseError, match="holds 512 bytes, 1000 needed"):
        getinto(r, shm_file.name, 0, 1000, "k")
    shm_file.unlink()
    shm_file.write_bytes(bytes(2000))  # another file under the same name
    assert getinto(r, shm_file.name, 0, 1000, "k") == [1000]
    assert shm_file.read_bytes()[:1000] == b"K" * 1000
    assert r.ping()


def test_values_on_disk_are_read_then_copied(server_factory, shm_file):
    srv = server_factory(persistence=True, maxmemory="4mb")
    r = srv.client()
    values = {f"d{i}": os.urandom(512 << 10) for i in range(24)}  # 12 MiB: most leave RAM for the disk tier
    for k, v in values.items():
        r.set(k, v)
    cold = r.info("kvd")["disk_only_keys"]
    assert cold >= 8, "the values were meant to be on disk"
    slot = 512 << 10
    grow(shm_file, slot * len(values))
    assert getinto(r, shm_file.name, 0, slot, *values) == [slot] * len(values)
    data = shm_file.read_bytes()
    for i, v in enumerate(values.values()):
        assert data[i * slot : (i + 1) * slot] == v, f"value {i}"
    assert r.info("kvd")["disk_hits"] >= cold  # read from the segment files, then copied


def test_mappings_go_with_the_connection(server, shm_file):
    r = redis.Redis(port=server.port, single_connection_client=True)
    r.set("k", b"v")
    getinto(r, shm_file.name, 0, 8, "k")
    maps = Path(f"/proc/{server.pid}/maps")
    assert shm_file.name in maps.read_text()
    r.close()
    deadline = time.monotonic() + 10
    while shm_file.name in maps.read_text():
        assert time.monotonic() < deadline, "kvd kept the file mapped after the client left"
        time.sleep(0.05)


def test_large_values_are_split_across_copy_threads_and_arrive_whole(server, shm_file):
    r = server.client()
    values = [os.urandom((9 << 20) + i) for i in range(3)]  # parts of 4 MiB and more, not whole values
    for i, v in enumerate(values):
        r.set(f"big{i}", v)
    slot = 10 << 20
    grow(shm_file, 3 * slot)
    assert getinto(r, shm_file.name, 0, slot, "big0", "big1", "big2") == [len(v) for v in values]
    data = shm_file.read_bytes()
    for i, v in enumerate(values):
        assert data[i * slot : i * slot + len(v)] == v


def test_a_client_gone_during_its_copies_costs_nothing(server, shm_file):
    r = server.client()
    r.set("big", os.urandom(32 << 20))
    grow(shm_file, 8 * (32 << 20))
    name = shm_file.name.encode()
    request = [b"KVD.GETINTO", name, b"0", str(32 << 20).encode()] + [b"big"] * 8
    wire = b"*%d\r\n" % len(request) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in request)
    for _ in range(3):
        with socket.create_connection((server.host, server.port), timeout=10) as s:
            s.sendall(wire)  # and gone before the reply
    assert r.ping() and r.get("big") is not None
    maps = Path(f"/proc/{server.pid}/maps")
    deadline = time.monotonic() + 20
    while shm_file.name in maps.read_text():
        assert time.monotonic() < deadline, "the mappings of the clients that left stayed"
        time.sleep(0.05)


def test_a_sparse_file_is_refused(server, shm_file):
    """A hole in a /dev/shm file is only given memory when written; on a full /dev/shm (a container's 64 MiB)
    that write is SIGBUS. So kvd writes only into files whose blocks are all allocated."""
    r = server.client()
    r.set("k", b"v" * 100)
    with open(shm_file, "r+b") as f:
        f.truncate(1 << 20)  # the first 4096 bytes allocated, the rest a hole
    with pytest.raises(redis.ResponseError, match="is not allocated \\(the client posix_fallocates it\\)"):
        getinto(r, shm_file.name, 0, 4096, "k", "k")
    grow(shm_file, 1 << 20)
    assert getinto(r, shm_file.name, 0, 4096, "k", "k") == [100, 100]
