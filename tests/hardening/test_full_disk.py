"""A full disk: a real 8 MiB tmpfs as kvd's --dir. Writes fail with -MISCONF, reads go on, writes resume once
space is back, and nothing acknowledged is lost across a restart.

Needs root (mount). Skipped with the reason when mounting is not permitted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hardening_support import read_reply_line

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def value_for(i: int, size: int) -> bytes:
    return (b"%08d" % i) * (size // 8)


def test_full_disk_misconf_reads_go_on_writes_resume(small_fs, kvd_factory):
    # kvd_factory is set up after small_fs, so its teardown (stopping kvd) runs before the unmount
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * (3 * MiB))
    srv = kvd_factory("--persistence", "yes", "--maxmemory", "2mb", "--segment-size", "1mb",
                      data_dir=small_fs / "data")  # fmt: skip
    r = srv.client(socket_timeout=30)
    acked: dict[str, bytes] = {}
    for i in range(10):
        acked[f"before:{i}"] = value_for(i, 20 * KiB)
        assert r.set(f"before:{i}", acked[f"before:{i}"])

    # fill the disk with 256 KiB values until a write is refused (bounded: 64 writes, 60 s)
    error = None
    deadline = time.monotonic() + 60
    for i in range(64):
        assert time.monotonic() < deadline
        key, value = f"fill:{i}", value_for(1000 + i, 256 * KiB)
        try:
            r.set(key, value)
        except redis.ResponseError as exc:
            error = str(exc)
            break
        acked[key] = value
    assert error is not None, "8 MiB filesystem never filled up after 64 x 256 KiB"
    print(f"disk full after {len(acked) - 10} fill values: {error}")
    assert error.startswith("MISCONF"), error
    assert "\r" not in error and "\n" not in error

    # while full: further writes are refused the same way, reads of everything acknowledged go on
    with pytest.raises(redis.ResponseError, match=r"^MISCONF"):
        r.set("refused", b"x" * 100)
    with pytest.raises(redis.ResponseError, match=r"^MISCONF"):
        r.delete("before:0")
    for key, value in acked.items():  # most of these were evicted from the 2 MiB RAM tier: read from disk
        assert r.get(key) == value, key
    assert r.ping()
    assert r.info("persistence").get("aof_last_write_status") == "err"

    # free space: writes come back within a few seconds
    filler.unlink()
    deadline = time.monotonic() + 10
    while True:
        try:
            assert r.set("after", b"back")
            break
        except redis.ResponseError as exc:
            assert str(exc).startswith("MISCONF"), exc
            assert time.monotonic() < deadline, "writes did not resume within 10 s of freeing space"
            time.sleep(0.2)
    acked["after"] = b"back"
    assert r.get("after") == b"back"
    assert r.exists("refused") == 0
    assert r.info("persistence").get("aof_last_write_status") == "ok"

    # nothing acknowledged is lost, nothing refused appears, across kill -9 and restart
    srv.kill9()
    srv.start()
    r = srv.client(socket_timeout=30)
    for key, value in acked.items():
        assert r.get(key) == value, key
    assert r.exists("refused") == 0
    with contextlib.suppress(Exception):
        r.close()


def test_a_write_that_read_a_cold_value_gets_misconf_when_its_record_fails(small_fs, kvd_factory):
    """APPEND of a value on disk waits for the read, then appends its record. If that record's write fails,
    the reply must be -MISCONF like any write's: it once went out as success, for a write that was lost."""
    srv = kvd_factory("--persistence", "yes", "--maxmemory", "2mb", "--segment-size", "1mb",
                      data_dir=small_fs / "data")  # fmt: skip
    r = srv.client(socket_timeout=30)
    r.set("c", b"old")
    for i in range(8):  # 4 MiB through a 2 MiB RAM tier: "c", the oldest, is demoted to disk
        r.set(f"fill:{i}", value_for(i, 512 * KiB))
    hits = r.info("kvd")["disk_hits"]
    with pytest.raises(redis.ResponseError, match=r"^MISCONF"):
        r.append("c", value_for(99, 5 * MiB))  # more than the filesystem has left
    assert r.info("kvd")["disk_hits"] > hits  # it did read "c" from disk first
    assert r.info("persistence").get("aof_last_write_status") == "err"
    assert r.get("c") == b"old"  # the failed write changed nothing, while running either
    srv.kill9()
    srv.start()
    assert srv.client(socket_timeout=30).get("c") == b"old"  # the refused APPEND left nothing behind


def test_an_overwrite_that_fails_leaves_the_old_value(small_fs, kvd_factory):
    """A SET over an acknowledged value whose record the disk cannot take gets -MISCONF and changes nothing: the
    old value (and its TTL) is served on, from disk, and is there after a restart. It once deleted the key, and
    compaction could then reclaim the old record for good."""
    srv = kvd_factory("--persistence", "yes", "--maxmemory", "2mb", "--segment-size", "1mb",
                      "--appendfsync", "always", data_dir=small_fs / "data")  # fmt: skip
    r = srv.client(socket_timeout=30)
    old = value_for(7, 256 * KiB)
    r.set("victim", old, ex=3600)
    with pytest.raises(redis.ResponseError, match=r"^MISCONF"):
        r.set("victim", value_for(8, 9 * MiB))  # more than the 8 MiB filesystem holds
    assert r.get("victim") == old
    assert 3500 < r.ttl("victim") <= 3600
    time.sleep(1.5)  # maintenance ticks while refusing: nothing reclaims the old record
    assert r.get("victim") == old
    srv.kill9()
    srv.start()
    r = srv.client(socket_timeout=30)
    assert r.get("victim") == old and 3500 < r.ttl("victim") <= 3600


def test_debug_populate_on_a_full_disk_answers_misconf(small_fs, kvd_factory):
    """DEBUG POPULATE writes like SETs, so its reply is a write's: held until the log has the keys, and
    -MISCONF when the disk cannot take them (16 x 1 MiB into an 8 MiB filesystem), never a +OK for keys that a
    restart would not bring back."""
    srv = kvd_factory("--persistence", "yes", "--maxmemory", "64mb", "--segment-size", "1mb",
                      "--enable-debug-command", "yes", data_dir=small_fs / "data")  # fmt: skip
    r = srv.client(socket_timeout=30)
    with pytest.raises(redis.ResponseError, match=r"^MISCONF"):
        r.execute_command("DEBUG", "POPULATE", 16, "big", MiB)
    assert r.ping()  # reads go on
    with pytest.raises(redis.ResponseError, match=r"^MISCONF"):
        r.set("after", "x")  # and writes are refused the same way until space is back


def fill_up(path: Path) -> None:
    """Write ``path`` until the filesystem has no byte left (ENOSPC)."""
    with open(path, "wb", buffering=0) as f:  # unbuffered: a short write leaves nothing to flush at close
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (64 * KiB))
        with contextlib.suppress(OSError):  # the last partial block too
            while True:
                f.write(b"\0" * 512)


@pytest.mark.parametrize("restart", ["kill9", "sigterm"])
def test_a_flushall_that_fails_changes_nothing(small_fs, kvd_factory, restart):
    """A FLUSHALL whose record the disk cannot take gets -MISCONF and, like any failed write, changes nothing:
    every key is served again as before it (from disk), TTLs included, and so are the keys that writes in the
    same batch touched, before and after it; a key those writes created is gone. A restart agrees. It once
    emptied RAM all the same, while the keys stayed on disk until compaction reclaimed them (a restart brought
    them back)."""
    srv = kvd_factory("--persistence", "yes", "--maxmemory", "2mb", "--segment-size", "1mb",
                      data_dir=small_fs / "data")  # fmt: skip
    r = srv.client(socket_timeout=30)
    acked = {f"k{i}": value_for(i, 128 * KiB) for i in range(24)}  # 3 MiB through a 2 MiB RAM tier: some cold
    for key, value in acked.items():
        assert r.set(key, value, ex=3600 if key == "k3" else None)
    filler = small_fs / "filler"
    fill_up(filler)
    p = r.pipeline(transaction=False)  # one batch: the writes around FLUSHALL fail with it
    p.set("k0", value_for(100, 64 * KiB))  # larger than a page: it cannot go into the last page's slack
    p.flushall()
    p.set("k1", b"written after")
    p.set("fresh", b"new key")
    replies = p.execute(raise_on_error=False)
    assert all(isinstance(x, redis.ResponseError) and str(x).startswith("MISCONF") for x in replies), replies

    def unchanged(r: redis.Redis) -> None:
        assert r.dbsize() == len(acked)
        for key, value in acked.items():
            assert r.get(key) == value, key
        assert r.exists("fresh") == 0
        assert 3500 < r.ttl("k3") <= 3600 and r.ttl("k4") == -1

    unchanged(r)
    time.sleep(1.5)  # the probe and the maintenance tick run while the disk is full: nothing is reclaimed
    unchanged(r)
    filler.unlink()
    deadline = time.monotonic() + 10
    while True:  # writes resume once there is room
        try:
            r.set("probe", b"x")
            break
        except redis.ResponseError as exc:
            assert str(exc).startswith("MISCONF") and time.monotonic() < deadline, exc
            time.sleep(0.2)
    r.delete("probe")
    unchanged(r)
    if restart == "kill9":
        srv.kill9()
    else:
        assert srv.stop() == 0
    srv.start()
    r = srv.client(socket_timeout=30)
    unchanged(r)
    assert r.flushall()  # with room on the disk it empties everything, for good
    assert r.dbsize() == 0
    srv.kill9()
    srv.start()
    assert srv.client(socket_timeout=30).dbsize() == 0


def active_segment(data: Path) -> Path:
    return max(data.glob("*.seg"))


def test_earlier_writes_of_a_failed_batch_keep_their_ok(small_fs, kvd_factory):
    """Pipelined writes share one wait for the log: when a later one's record does not fit, the earlier ones,
    written before it and kept, answer +OK, where they once got -MISCONF with the writes that failed; a restart
    has exactly the writes that got +OK. The batch's first record ends the segment, in the slack of its last page
    (tmpfs allocates whole pages), and the second needs a new segment on a full disk."""
    data = small_fs / "data"
    srv = kvd_factory("--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "1mb",
                      data_dir=data)  # fmt: skip
    r = srv.client(socket_timeout=30)
    size = active_segment(data).stat().st_size
    assert r.set("pad:0", b"p" * 100)
    overhead = active_segment(data).stat().st_size - size - 100  # a record's bytes besides its value (key: 5)
    kept = {"pad:0": b"p" * 100}
    target = MiB - 3996  # 100 bytes into the segment's last page: 3996 bytes of slack, then the roll
    for i in range(1, 5):
        left = target - active_segment(data).stat().st_size - overhead
        kept[f"pad:{i}"] = bytes([64 + i]) * min(left, 300 * KiB)
        assert r.set(f"pad:{i}", kept[f"pad:{i}"])
    assert active_segment(data).stat().st_size == target
    fill_up(small_fs / "filler")
    kept["first"] = value_for(10, 1024)
    requests = [
        (b"first", kept["first"]),  # fits in the slack, the segment's last bytes
        (b"second", value_for(11, 8 * KiB)),  # needs a new segment: no room for it
        (b"third", value_for(12, 512)),  # after the failure: undone
    ]
    with srv.connect() as s:  # one send, one read (10 KiB), one batch: the three records in one write
        s.sendall(
            b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v) for k, v in requests)
        )
        replies = [read_reply_line(s, timeout=30) for _ in requests]
    assert replies[0] == b"+OK\r\n", replies
    assert all(x.startswith(b"-MISCONF ") for x in replies[1:]), replies

    def as_acknowledged(r: redis.Redis) -> None:
        assert r.dbsize() == len(kept)
        for key, value in kept.items():
            assert r.get(key) == value, key

    as_acknowledged(r)
    srv.kill9()
    (small_fs / "filler").unlink()
    srv.start()
    as_acknowledged(srv.client(socket_timeout=30))
