"""Persistence against real kvd processes: kill -9, restarts, torn and corrupt segments, disk tier, budgets."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from support.raw import encode

KiB, MiB = 1 << 10, 1 << 20


def value_for(key: str, size: int) -> bytes:
    """Deterministic content per key, so a reader can check any value without a model."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // 32 + 1))[:size]


def segments(srv) -> list[Path]:
    return sorted(srv.dir.glob("*.seg"))


def segment_bytes(srv) -> int:
    """Bytes in the server's segment files; a file that compaction deletes while they are counted adds none."""
    total = 0
    for path in segments(srv):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


def write_load(srv, acked: dict[str, int], stop: threading.Event, sizes=(100, 4 * KiB, 64 * KiB, 700 * KiB)) -> None:
    """SET keys until stopped or killed; record every acknowledged (key -> size)."""
    r = srv.client(socket_timeout=10)
    rng = random.Random(1)
    i = 0
    try:
        while not stop.is_set() and i < 50_000:
            key = f"k{i}"
            size = rng.choice(sizes)
            r.set(key, value_for(key, size))
            acked[key] = size
            i += 1
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        pass  # the server was killed under us: everything acknowledged so far must survive


def kill9_during(srv, load: Callable[..., None], wait: Callable[[], None]) -> tuple[dict[str, int], redis.Redis]:
    """Run ``load(srv, acked, stop)`` in a thread, kill -9 kvd once ``wait()`` returns, start it again. Returns
    what the load saw acknowledged and a client of the restarted server."""
    acked: dict[str, int] = {}
    stop = threading.Event()
    writer = threading.Thread(target=load, args=(srv, acked, stop))
    writer.start()
    try:
        wait()
    finally:
        srv.kill9()
        stop.set()
        writer.join(20)
    srv.start()
    return acked, srv.client()


@pytest.mark.parametrize("policy", ["always", "everysec"])
def test_kill9_during_writes_loses_nothing_acknowledged(server_factory, policy):
    srv = server_factory("--persistence", "yes", "--appendfsync", policy, "--segment-size", "2mb", "--maxmemory", "8mb")
    for round_ in range(3):
        acked, r = kill9_during(srv, write_load, lambda d=1.0 + round_ * 0.3: time.sleep(d))
        assert acked, "the load wrote nothing"
        for key, size in acked.items():
            got = r.get(key)
            assert got is not None, f"round {round_}: acknowledged {key} is missing"
            assert got == value_for(key, size), f"round {round_}: {key} is corrupt"
        # nothing that was never written appears: every key is one the load could have written
        assert all(k.startswith(b"k") for k in r.scan_iter(count=1000))
        r.flushall()


def overwrite_load(srv, acked: dict[str, int], stop: threading.Event) -> None:
    """Overwrite 8 hot keys with numbered generations until stopped or killed; record the last acknowledged."""
    r = srv.client(socket_timeout=10)
    gen = 0
    try:
        while not stop.is_set() and gen < 20_000:
            key = f"hot{gen % 8}"
            r.set(key, value_for(f"{key}:{gen}", 100 * KiB))
            acked[key] = gen
            gen += 1
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        pass


def test_kill9_during_compaction_loses_nothing_acknowledged(server_factory):
    """Cold keys share segments with overwritten hot ones, so compaction keeps rewriting segments in place
    (and carrying few survivors forward) while kvd is killed: every cold key and the last acknowledged
    generation of every hot key (or the one in flight) must come back."""
    srv = server_factory(
        "--persistence", "yes", "--appendfsync", "everysec", "--segment-size", "1mb", "--maxmemory", "2mb"
    )
    r = srv.client()
    for i in range(40):  # 800 KiB of cold values, a few in each of the first segments, between hot writes
        r.set(f"cold{i}", value_for(f"cold{i}", 20 * KiB))
        for j in range(2):
            r.set(f"hot{j}", value_for(f"hot{j}:setup", 100 * KiB))
    for round_ in range(3):

        def rewritten_then_a_while(client: redis.Redis = r, delay: float = 0.3 + round_ * 0.4) -> None:
            deadline = time.time() + 20
            while client.info("persistence")["aof_rewritten_bytes"] == 0 and time.time() < deadline:
                time.sleep(0.05)
            assert client.info("persistence")["aof_rewritten_bytes"] > 0, "no segment was rewritten in place"
            time.sleep(delay)

        acked, r = kill9_during(srv, overwrite_load, rewritten_then_a_while)
        assert len(acked) == 8, acked
        for i in range(40):
            assert r.get(f"cold{i}") == value_for(f"cold{i}", 20 * KiB), f"round {round_}: cold{i}"
        for key, gen in acked.items():
            got = r.get(key)
            allowed = {value_for(f"{key}:{g}", 100 * KiB) for g in (gen, gen + 8)}  # + the write in flight
            assert got in allowed, f"round {round_}: {key} is not generation {gen} (or the next)"
        assert r.dbsize() == 48


@pytest.mark.kvd_only  # INFO's recovery_* fields
def test_restart_keeps_values_ttls_and_deletes(server_factory):
    srv = server_factory("--persistence", "yes")
    r = srv.client()
    r.set("plain", "v1")
    r.set("gone", "x")
    r.delete("gone")
    r.set("ttl", "v", ex=1000)
    r.set("short", "v", px=300)
    r.set("persisted", "v", ex=1000)
    r.persist("persisted")
    r.set("big", value_for("big", 5 * MiB))
    r.set("over", "a")
    r.set("over", "b")
    time.sleep(0.4)
    srv.stop()
    srv.start()
    r = srv.client()
    assert r.get("plain") == b"v1"
    assert r.get("gone") is None
    assert 990 <= r.ttl("ttl") <= 1000
    assert r.get("short") is None  # expired keys are not brought back
    assert r.ttl("persisted") == -1
    assert r.get("big") == value_for("big", 5 * MiB)
    assert r.get("over") == b"b"
    assert r.info("persistence")["recovery_keys"] == 5


def test_flushall_empties_the_disk(server_factory):
    srv = server_factory("--persistence", "yes", "--segment-size", "1mb")
    r = srv.client()
    for i in range(20):
        r.set(f"k{i}", value_for(f"k{i}", 200 * KiB))
    assert len(segments(srv)) > 2
    r.flushall()
    deadline = time.time() + 5
    while len(segments(srv)) > 1 and time.time() < deadline:
        time.sleep(0.05)
    assert len(segments(srv)) == 1
    r.set("after", "1")
    srv.stop()
    srv.start()
    r = srv.client()
    assert r.dbsize() == 1 and r.get("after") == b"1"


def test_more_data_than_ram_reads_back_from_disk_also_after_restart(server_factory):
    srv = server_factory("--persistence", "yes", "--maxmemory", "16mb", "--segment-size", "8mb")
    r = srv.client()
    keys = [f"chunk:{i}" for i in range(40)]  # 40 MiB through a 16 MiB RAM tier
    for key in keys:
        r.set(key, value_for(key, MiB))
    assert r.info("kvd")["disk_only_keys"] > 0
    for key in reversed(keys):
        assert r.get(key) == value_for(key, MiB)
    srv.restart(["--maxmemory", "4mb"])  # a smaller RAM tier than the data it had
    r = srv.client()
    for key in keys:
        assert r.get(key) == value_for(key, MiB)
    assert r.info()["used_memory"] <= 4 * MiB
    # one round trip says how much of a prefix is cached, and starts loading cold hits into RAM
    assert r.execute_command("KVD.PREFIXLEN", *keys, "missing") == 40


def test_torn_active_segment_is_truncated(server_factory):
    srv = server_factory("--persistence", "yes", "--segment-size", "64mb")
    r = srv.client()
    for i in range(30):
        r.set(f"k{i}", value_for(f"k{i}", 10 * KiB))
    srv.kill9()
    active = segments(srv)[-1]
    full = active.stat().st_size
    rng = random.Random(5)
    for cut in sorted(rng.sample(range(100, full), 4), reverse=True):
        with open(active, "r+b") as f:
            f.truncate(cut)
        srv.start()
        r = srv.client()
        present = [i for i in range(30) if r.exists(f"k{i}")]
        assert present == list(range(len(present)))  # exactly a prefix of the writes survives
        for i in present:
            assert r.get(f"k{i}") == value_for(f"k{i}", 10 * KiB)
        info = r.info("persistence")
        r.set("after-truncate", "ok")  # appends continue on a clean boundary
        srv.stop()
        srv.start()
        assert srv.client().get("after-truncate") == b"ok"
        assert info["recovery_keys"] == len(present)
        srv.kill9()


def test_corrupt_sealed_segments_and_missing_hints(server_factory):
    srv = server_factory("--persistence", "yes", "--segment-size", "1mb")
    r = srv.client()
    keys = [f"k{i}" for i in range(60)]
    for key in keys:
        r.set(key, value_for(key, 100 * KiB))
    srv.stop()
    segs = segments(srv)
    assert len(segs) >= 5
    # flip bytes inside the values of two sealed segments (their hints stay valid)
    rng = random.Random(9)
    for seg in segs[1:3]:
        data = bytearray(seg.read_bytes())
        for _ in range(3):
            pos = rng.randrange(200, len(data))
            data[pos] ^= 0xFF
        seg.write_bytes(bytes(data))
    # delete one hint file and corrupt another: those segments are scanned instead
    segs[3].with_suffix(".hint").unlink()
    hint = segs[4].with_suffix(".hint")
    hint.write_bytes(hint.read_bytes()[:-3] + b"xyz")
    srv.start()
    r = srv.client()
    served = 0
    for key in keys:
        got = r.get(key)
        if got is not None:
            assert got == value_for(key, 100 * KiB)  # never a corrupt byte
            served += 1
    assert 40 <= served < 60
    info = r.info("kvd")
    assert info["disk_corrupt_reads"] >= 1
    assert "hint file" in srv.stderr_text()


def test_compaction_and_disk_budget(server_factory):
    srv = server_factory("--persistence", "yes", "--segment-size", "1mb", "--max-disk", "6mb", "--maxmemory", "2mb")
    r = srv.client()
    for rnd in range(6):  # overwrite the same keys: most of the log becomes dead
        for i in range(10):
            r.set(f"k{i}", value_for(f"k{i}{rnd}", 200 * KiB))
    deadline = time.time() + 20
    while time.time() < deadline:
        if segment_bytes(srv) <= 6 * MiB:
            break
        time.sleep(0.2)
    assert segment_bytes(srv) <= 6 * MiB
    persistence = r.info("persistence")
    assert persistence["aof_compactions"] >= 1
    for i in range(10):  # the kept keys stay readable and correct
        got = r.get(f"k{i}")
        assert got is None or got == value_for(f"k{i}5", 200 * KiB)
    assert r.dbsize() >= 1


@pytest.mark.kvd_only  # kvd's disk budget
def test_the_disk_budget_holds_writers_it_cannot_keep_up_with(server_factory):
    """max-disk under a stream of writes faster than eviction retires segments (1 MB segments, 200 KB values,
    pipelined): the files stayed far past the budget (2.8 GB against 8 MB after 15 s) until the writes stopped.
    Write replies now wait while the files are past max-disk + max(max-disk / 8, 4 segments), so the files stay
    within that, plus what the writer had sent (here 2 MB) and the segment being written."""
    srv = server_factory(
        "--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "1mb", "--max-disk", "8mb",
    )  # fmt: skip
    r = srv.client()
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, segment_bytes(srv))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    value = value_for("v", 200 * KiB)
    n = 0
    try:
        start = time.monotonic()
        while time.monotonic() - start < 4:
            pipe = r.pipeline(transaction=False)
            for i in range(10):
                pipe.set(f"k{n + i}", value)
            assert all(pipe.execute())
            n += 10
    finally:
        stop.set()
        watcher.join()
    assert n * 200 * KiB > 100 * MiB  # far more than the budget was written
    assert peak <= (8 + 4 + 2 + 1) * MiB, f"{peak / MiB:.1f} MB of segment files"
    assert r.info("persistence")["aof_disk_budget_holds"] > 0
    assert r.get(f"k{n - 1}") == value
    deadline = time.monotonic() + 20
    while segment_bytes(srv) > 8 * MiB:
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.kvd_only  # kvd's disk tier
def test_config_set_max_disk_and_compaction_dead_ratio_take_effect(server_factory):
    """Both are run-time settings, which CONFIG SET accepted and the log never heard of."""
    srv = server_factory(
        "--persistence", "yes", "--maxmemory", "4mb", "--segment-size", "1mb", "--max-disk", "0",
        "--compaction-dead-ratio", "1",
    )  # fmt: skip
    r = srv.client()
    for i in range(50):
        r.set(f"k{i}", value_for(f"k{i}:0", 200 * KiB))
    for i in range(0, 50, 2):  # half of each segment dead: 1.0 (only whole dead ones) never compacts them
        r.set(f"k{i}", value_for(f"k{i}:1", 200 * KiB))
    time.sleep(1)
    assert r.info("persistence")["aof_compactions"] == 0
    assert r.config_set("compaction-dead-ratio", "0.5") is True
    deadline = time.monotonic() + 20
    while r.info("persistence")["aof_compactions"] == 0:
        assert time.monotonic() < deadline, "no compaction after compaction-dead-ratio 0.5"
        time.sleep(0.1)
    assert r.config_set("max-disk", "8mb") is True
    for i in range(50, 100):
        r.set(f"k{i}", value_for(f"k{i}:0", 200 * KiB))
    deadline = time.monotonic() + 20
    while segment_bytes(srv) > 8 * MiB:
        assert time.monotonic() < deadline, f"{segment_bytes(srv) / MiB:.1f} MB of segments after max-disk 8mb"
        time.sleep(0.1)
    assert r.get("k99") == value_for("k99:0", 200 * KiB)


def test_unusable_dir_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "kvd", "--port", "7392", "--dir", str(blocker / "data")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "dir" in proc.stderr


@pytest.mark.kvd_only  # kvd's segment directory
def test_files_kvd_did_not_write_are_left_alone_with_a_warning(server_factory):
    """A stray ``12.seg`` once stopped kvd from starting (it looked up ``0000000012.seg``), ``00000000001.seg``
    was read as a second copy of segment 1, and every ``*tmp`` file in the directory was deleted."""
    srv = server_factory("--persistence", "yes")
    srv.client().set("x", "1")
    srv.stop()
    strangers = ["12.seg", "00000000001.seg", "notes.tmp", "x.bak.tmp"]
    for name in strangers:
        (srv.dir / name).write_bytes(b"not kvd's" * 100)
    srv.start()
    assert srv.client().get("x") == b"1"
    srv.stop()
    log = srv.stderr_text()
    for name in strangers:
        assert (srv.dir / name).exists()
        assert f"ignoring {srv.dir / name}: not a name kvd writes" in log


def test_unreadable_segment_is_a_one_line_error_naming_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "0000000001.seg").symlink_to(tmp_path / "missing")  # a segment recovery cannot open
    proc = subprocess.run(
        [sys.executable, "-m", "kvd", "--port", "7394", "--dir", str(data)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"{data / '0000000001.seg'}: No such file" in proc.stderr, proc.stderr


@pytest.mark.kvd_only  # starts kvd itself on the directory
def test_second_daemon_on_same_dir_is_refused(server_factory):
    srv = server_factory("--persistence", "yes")
    proc = subprocess.run(
        [sys.executable, "-m", "kvd", "--port", "7393", "--dir", str(srv.dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "in use" in proc.stderr


@pytest.mark.kvd_only  # kvd's SAVE is an fsync of its log
def test_save_and_bgsave_fsync_the_log_and_move_lastsave(server_factory):
    """With appendfsync no nothing is fsynced by itself; SAVE and BGSAVE do it for what was written so far,
    and LASTSAVE and INFO's rdb_* fields tell when (backup scripts poll LASTSAVE after BGSAVE)."""
    srv = server_factory("--persistence", "yes", "--appendfsync", "no")
    r = srv.client()
    started = r.lastsave()
    r.mset({f"k{i}": "v" for i in range(10)})
    info = r.info("persistence")
    assert info["rdb_changes_since_last_save"] == 10
    fsyncs = info["aof_fsyncs"]
    time.sleep(1.1)  # LASTSAVE counts seconds
    assert r.save() is True
    info = r.info("persistence")
    assert info["aof_fsyncs"] > fsyncs
    assert info["rdb_changes_since_last_save"] == 0
    assert r.lastsave() > started and info["rdb_last_save_time"] == int(r.lastsave().timestamp())
    assert info["rdb_last_bgsave_status"] == "ok"
    r.set("after", "1")
    before = r.lastsave()
    time.sleep(1.1)
    assert r.bgsave() is True
    deadline = time.monotonic() + 10
    while r.lastsave() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.lastsave() > before
    assert r.info("persistence")["rdb_bgsave_in_progress"] == 0
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("BGSAVE", "NOW")
    # Requests that arrive while a save runs share the next one, and every one of them completes.
    r.set("more", "1")
    with srv.raw() as conn:  # one write: the first save is still running when the others arrive
        conn.send(encode("BGSAVE") + encode("BGSAVE") + encode("BGSAVE", "SCHEDULE") + encode("SAVE"))
        assert conn.read_replies(4) == [
            b"+Background saving started\r\n",
            b"-ERR Background save already in progress\r\n",
            b"+Background saving scheduled\r\n",
            b"+OK\r\n",
        ]
    assert r.info("persistence")["rdb_changes_since_last_save"] == 0


@pytest.mark.kvd_only
def test_save_without_persistence_says_why(server_factory):
    r = server_factory("--persistence", "no").client()
    for command in ("SAVE", "BGSAVE"):
        with pytest.raises(redis.ResponseError, match="^persistence is off: kvd writes nothing to disk"):
            r.execute_command(command)
    info = r.info("persistence")
    assert info["rdb_changes_since_last_save"] == 0 and info["rdb_last_save_time"] == int(r.lastsave().timestamp())


@pytest.mark.kvd_only  # BGREWRITEAOF compacts kvd's segments
def test_bgrewriteaof_compacts_segments_below_the_dead_ratio(server_factory):
    """Segments 30 % dead stay as they are under a 90 % threshold; BGREWRITEAOF compacts every segment with dead
    bytes (the active one is sealed first), and what it kept reads back, also after kill -9."""
    srv = server_factory(
        "--persistence", "yes", "--segment-size", "1mb", "--compaction-dead-ratio", "0.9", "--appendfsync", "always"
    )
    r = srv.client()
    for i in range(20):
        r.set(f"k{i}", value_for(f"k{i}", 100 * KiB))
    for i in range(0, 20, 3):  # a third of the keys overwritten: about a third of the old bytes dead
        r.set(f"k{i}", value_for(f"k{i}new", 100 * KiB))
    time.sleep(1.5)  # a few maintenance ticks: nothing reaches 90 % dead
    assert r.info("persistence")["aof_compactions"] == 0
    before = segment_bytes(srv)
    assert r.bgrewriteaof() is True
    with pytest.raises(redis.ResponseError, match="^Background append only file rewriting already in progress$"):
        r.bgrewriteaof()
    deadline = time.monotonic() + 30
    while r.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.1)
    info = r.info("persistence")
    assert info["aof_rewrite_in_progress"] == 0 and info["aof_compactions"] >= 1 and info["aof_rewrites"] == 1
    live = 20 * 100 * KiB
    assert segment_bytes(srv) < before and segment_bytes(srv) < live * 1.15, (before, segment_bytes(srv))
    srv.kill9()
    srv.restart()
    r = srv.client()
    for i in range(20):
        assert r.get(f"k{i}") == value_for(f"k{i}new" if i % 3 == 0 else f"k{i}", 100 * KiB)


@pytest.mark.kvd_only
def test_bgrewriteaof_reaches_segments_already_rewritten_in_place(server_factory):
    """A segment compacted in place gets a new key in the log's table but keeps its id; BGREWRITEAOF must still
    find it (it once looked the ids up as keys and skipped such segments, reporting the rewrite done)."""
    srv = server_factory("--persistence", "yes", "--segment-size", "1mb", "--appendfsync", "always")
    r = srv.client()
    for i in range(9):
        r.set(f"k{i}", value_for(f"k{i}", 100 * KiB))
    for i in range(5):  # segment 1 is more than half dead: compacted in place by itself
        r.set(f"k{i}", value_for(f"k{i}b", 100 * KiB))
    deadline = time.monotonic() + 20
    while r.info("persistence")["aof_compactions"] < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    compactions = r.info("persistence")["aof_compactions"]
    assert compactions >= 1
    r.set("k5", value_for("k5c", 100 * KiB))  # a survivor of that rewrite dies: dead bytes below the threshold
    assert r.info("persistence")["aof_dead_bytes"] > 50 * KiB
    assert r.bgrewriteaof() is True
    deadline = time.monotonic() + 30
    while r.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.1)
    info = r.info("persistence")
    assert info["aof_compactions"] > compactions
    assert info["aof_dead_bytes"] < 10 * KiB, info["aof_dead_bytes"]
    assert r.get("k5") == value_for("k5c", 100 * KiB) and r.get("k6") == value_for("k6", 100 * KiB)


@pytest.mark.kvd_only  # BGREWRITEAOF compacts kvd's segments
def test_ttl_changes_survive_a_rewrite_in_place_of_their_segment(server_factory):
    """PERSIST, EXPIRE and a longer EXPIRE after a SET in the same segment: a rewrite in place copies the SET with
    the TTL it was written with, so the EXPIRE records after it must stay (they were once dropped, and after a
    restart the keys expired on their first TTL or lived without the new one)."""
    srv = server_factory("--persistence", "yes", "--segment-size", "1mb", "--appendfsync", "always")
    r = srv.client()
    big = b"x" * 40_000
    r.set("persisted", big, ex=4)
    r.persist("persisted")
    r.set("willexpire", big)
    r.expire("willexpire", 3)
    r.set("ttlchanged", big, ex=4)
    r.expire("ttlchanged", 100_000)
    for i in range(30):  # fill the segment past 1 MiB, so that it is sealed, then make it mostly dead
        r.set(f"filler{i}", b"f" * 30_000)
    r.delete(*[f"filler{i}" for i in range(30)])
    assert r.bgrewriteaof() is True
    deadline = time.monotonic() + 30
    while r.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert r.info("persistence")["aof_rewritten_bytes"] > 0  # rewritten in place, not carried forward
    srv.kill9()
    srv.restart()
    r = srv.client()
    assert r.ttl("persisted") == -1 and r.get("persisted") == big
    assert 0 < r.ttl("willexpire") <= 3
    assert 99_000 < r.ttl("ttlchanged") <= 100_000 and r.get("ttlchanged") == big
    time.sleep(4.5)  # past the first TTLs: only the key given one that short is gone
    assert r.exists("persisted", "willexpire", "ttlchanged") == 2
