"""A real vLLM engine with the kvd connector: loaded KV gives the same greedy tokens as recomputing, the load
really happens (and is used), and server failures never change or stop output.

Model: tiny random Llama (scripts/make_tiny_model.py), float32, block size 32, chunk size 128, vLLM's own prefix
cache off so that every reuse goes through the connector. Baseline outputs come from an engine without the
connector.
"""

from __future__ import annotations

import array
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis

from connectors import codec
from connectors.testing import Server, target_kind

CHUNK = 128
_rng = random.Random(2024)


def _tokens(n: int) -> list[int]:
    return [_rng.randrange(2, 2048) for _ in range(n)]


# Prompt A: 700 tokens = 5 full chunks (640 loadable tokens; the 60-token tail is always computed).
A = _tokens(700)
# Prompt B shares A's first 400 tokens: 3 full chunks (384 tokens) hit, then it diverges: a partial prefix hit.
B = A[:400] + _tokens(300)
# Prompt C: exactly 4 chunks; at least one token must be computed, so 3 chunks (384 tokens) can load.
C = _tokens(512)
D, E, F = _tokens(600), _tokens(450), _tokens(333)
# Prompt G: A's 5 chunks, then 3 chunks of its own and a 16-token tail.
G = A[:640] + _tokens(400)
ALL = {"A": A, "B": B, "C": C, "D": D, "E": E, "F": F, "G": G}


def _conn(srv: Server, **extra: Any) -> dict[str, Any]:
    return {"url": srv.url, "chunk_size": CHUNK, "namespace": "e2e", **extra}


@pytest.fixture(scope="module")
def baseline(make_engine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    eng = make_engine(tmp_path_factory.mktemp("baseline"))
    res = eng.run([{"name": name, "prompts": [p]} for name, p in ALL.items()], connector=None)
    return {ph["name"]: ph["outputs"][0] for ph in res["phases"]}


def _server_hits(srv: Server) -> dict[str, int]:
    r = redis.Redis(port=srv.port)
    if srv.kind == "kvd":
        info = r.info("connector")
        return {k: int(v) for k, v in info.items() if isinstance(v, int)}
    return {"keyspace_hits": int(r.info("stats")["keyspace_hits"])}


def test_full_and_partial_prefix_hits_in_a_fresh_process(engine, store: Server, baseline) -> None:
    # Process 1 computes A and saves its full chunks.
    cold = engine.run([{"name": "cold", "prompts": [A]}], _conn(store))
    ph = cold["phases"][0]
    assert ph["outputs"] == [baseline["A"]]
    assert ph["stats"]["saved_chunks"] == 5 and ph["stats"].get("hit_tokens", 0) == 0
    keys = sorted(k.decode() for k in redis.Redis(port=store.port).keys("kvd:e2e:*"))
    assert len(keys) == 5 and all(len(k.split(":")[2]) == 16 and len(k.split(":")[3]) == 32 for k in keys)

    # Process 2 (a fresh engine, new hash seed) loads them: full hit, partial hit, then noise.
    warm = engine.run(
        [
            {"name": "full", "prompts": [A]},
            {"name": "partial", "prompts": [B]},
            {"name": "noise", "prompts": [A], "before": [{"op": "noise", "url": store.url, "prompt": A}]},
        ],
        _conn(store),
    )
    full, partial, noise = warm["phases"]
    assert full["outputs"] == [baseline["A"]]
    assert full["stats"]["hit_tokens"] == 640 and full["stats"]["loaded_chunks"] == 5
    assert full["stats"]["loaded_bytes"] > 5 * 128 * 4 * 2 * 2 * 64 * 4  # 5 chunks of (layers x K,V x heads ...)
    assert full["stats"].get("load_errors", 0) == 0

    assert partial["outputs"] == [baseline["B"]]
    assert partial["stats"]["hit_tokens"] - full["stats"]["hit_tokens"] == 384
    assert partial["stats"]["loaded_chunks"] == 8

    # Same keys, valid headers and checksums, random numbers: the connector loads it and the output changes,
    # which proves the loaded KV is what the model attends to.
    assert warm["noised"] == [5]
    assert noise["stats"]["loaded_chunks"] == 13 and noise["stats"].get("load_errors", 0) == 0
    assert noise["outputs"] != [baseline["A"]]

    # The server saw the loads too.
    hits = _server_hits(store)
    if store.kind == "kvd":
        # KVD.REPORT: the engine's counters show up in kvd's INFO connector section.
        assert hits.get("connector_hit_tokens") == 640 + 384 + 640
        assert hits.get("connector_loaded_chunks") == 13
        # On kvd's host the loads came through the engine's shared memory (KVD.GETINTO), not MGET, and the saves
        # too (KVD.SETFROM): the only SETs are the test's own noise.
        calls = {k: v["calls"] for k, v in redis.Redis(port=store.port).info("commandstats").items()}
        assert calls.get("cmdstat_kvd.getinto", 0) >= 3 and "cmdstat_mget" not in calls
        assert calls.get("cmdstat_kvd.setfrom", 0) >= 1 and calls.get("cmdstat_set", 0) == 5, calls
    else:
        assert hits["keyspace_hits"] >= 13


def test_prompt_of_whole_chunks_leaves_a_token_to_compute(engine, store: Server, baseline) -> None:
    engine.run([{"name": "cold", "prompts": [C]}], _conn(store))
    res = engine.run([{"name": "warm", "prompts": [C]}], _conn(store))
    ph = res["phases"][0]
    assert ph["outputs"] == [baseline["C"]]
    assert ph["stats"]["hit_tokens"] == 384  # 512 - one chunk: the last token must be computed


def test_load_larger_than_the_kept_load_buffers(engine, store: Server, baseline) -> None:
    # load_buffer_mb=0 keeps no receive buffer between loads: every load is longer than what is kept, and its
    # values must stay in place until they are copied into the KV cache (they were once let go before that).
    res = engine.run(
        [{"name": "cold", "prompts": [E]}, {"name": "warm", "prompts": [E]}], _conn(store, load_buffer_mb=0)
    )
    cold, warm = res["phases"]
    assert cold["outputs"] == warm["outputs"] == [baseline["E"]]
    assert warm["stats"]["hit_tokens"] == 384 and warm["stats"]["loaded_chunks"] == 3
    assert warm["stats"].get("load_errors", 0) == 0


def test_hits_survive_a_server_restart(engine, store: Server, baseline) -> None:
    if store.kind != "kvd":
        pytest.skip("redis-server runs without persistence in these tests; restart survival is kvd's feature")
    engine.run([{"name": "cold", "prompts": [D]}], _conn(store))
    store.restart()
    res = engine.run([{"name": "after-restart", "prompts": [D]}], _conn(store))
    ph = res["phases"][0]
    assert ph["outputs"] == [baseline["D"]]
    assert ph["stats"]["hit_tokens"] == 512 and ph["stats"].get("load_errors", 0) == 0


def test_server_stopped_mid_run_every_request_completes(engine, store: Server, baseline) -> None:
    res = engine.run(
        [
            {"name": "cold", "prompts": [D, E]},
            {"name": "warm", "prompts": [D, E]},
            {"name": "server-gone", "prompts": [D, E, F], "before": [{"op": "kill", "pid": store.pid}]},
            {"name": "still-gone", "prompts": [F, D]},
        ],
        _conn(store, lookup_timeout_ms=100, timeout_ms=500, retry_after_s=0.5),
    )
    cold, warm, gone, still = res["phases"]
    assert cold["outputs"] == [baseline["D"], baseline["E"]]
    assert warm["outputs"] == [baseline["D"], baseline["E"]]
    assert warm["stats"]["hit_tokens"] == 512 + 384
    assert gone["outputs"] == [baseline["D"], baseline["E"], baseline["F"]]
    assert still["outputs"] == [baseline["F"], baseline["D"]]
    assert gone["stats"]["hit_tokens"] == warm["stats"]["hit_tokens"]  # nothing promised from a dead server
    assert res["log"].count("unreachable") <= 2  # one warning per outage and client, not one per request


def test_chunk_evicted_between_lookup_and_load_is_recomputed(engine, store: Server, baseline) -> None:
    res = engine.run(
        [{"name": "cold", "prompts": [A]}, {"name": "evicted", "prompts": [A]}],
        _conn(store),
        **{"class": "EvictingKvdConnector", "module": "faulty_connector"},
    )
    cold, evicted = res["phases"]
    assert cold["outputs"] == [baseline["A"]]
    assert evicted["outputs"] == [baseline["A"]]
    # Look-up promised 5 chunks; 2 loaded, 3 were gone and vLLM recomputed them.
    assert evicted["stats"]["hit_tokens"] == 640
    assert evicted["stats"]["loaded_chunks"] == 2
    assert evicted["stats"]["load_errors"] == 3
    assert res["log"].count("could not be loaded") == 1


def test_a_damaged_chunk_is_replaced_and_nothing_computed_over_it_is_saved(engine, store: Server, baseline) -> None:
    """A stored value that fails its checksum: its load fails and vLLM recomputes from it; the connector deletes
    it, and the recomputed chunk is saved in its place. The step that found it also computed G's later chunks,
    over blocks the failed load left unfilled: those are not saved (they would pass every check, and change the
    output of every later hit)."""
    res = engine.run(
        [
            {"name": "cold", "prompts": [A]},
            {
                "name": "damaged",
                "prompts": [G],
                "before": [{"op": "damage", "url": store.url, "prompt": A, "chunk": 1}],
            },
            {"name": "repaired", "prompts": [G]},
        ],
        _conn(store),
    )
    cold, damaged, repaired = res["phases"]
    assert res["damaged"][0] > 0  # the value was there to damage
    assert cold["outputs"] == [baseline["A"]]
    assert damaged["outputs"] == [baseline["G"]]
    assert damaged["stats"]["damaged_chunks"] == 1
    assert damaged["stats"]["load_errors"] == 4  # chunk 1 and the three after it, recomputed
    assert repaired["outputs"] == [baseline["G"]]
    assert repaired["stats"]["hit_tokens"] - damaged["stats"]["hit_tokens"] == 8 * CHUNK  # all of G, saved again
    assert repaired["stats"]["load_errors"] == damaged["stats"]["load_errors"]
    # Every chunk of G in kvd holds the KV a clean engine computes (another namespace, same keys otherwise),
    # up to float rounding: none was computed over the blocks the failed load left unfilled.
    engine.run([{"name": "clean", "prompts": [G]}], {**_conn(store), "namespace": "clean"})
    r = redis.Redis(port=store.port)
    clean = {k.split(b":", 2)[2]: r.get(k) for k in r.keys("kvd:clean:*")}
    assert len(clean) == 8
    for name, reference in clean.items():
        kept = r.get(b"kvd:e2e:" + name)
        assert kept is not None
        got, want = (array.array("f", v[-codec.read_header(v).payload_len :]) for v in (kept, reference))
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-3, name


def test_a_save_that_timed_out_never_stores_another_chunk_s_bytes(engine, tmp_path: Path, baseline) -> None:
    """kvd stalls as the first KVD.SETFROM goes out: the save times out on the client, and kvd copies out of its
    shared slots when it wakes. Those slots must not have been refilled meanwhile (by D's chunks, computed while
    kvd sleeps), or A's keys would hold D's bytes. A's values, written late, must load."""
    if target_kind() != "kvd":
        pytest.skip("KVD.SETFROM is kvd's")
    srv = Server(tmp_path / "stalling", persistence=False, enable_debug_command="local").start()
    try:
        res = engine.run(
            [
                {"name": "stalled", "prompts": [A]},
                {"name": "meanwhile", "prompts": [D]},
                {"name": "warm", "prompts": [A, D]},
            ],
            # Six save slots: A's five chunks take five, and a slot handed back would be D's next.
            _conn(srv, timeout_ms=500, retry_after_s=0, save_queue_depth=6),
            **{"class": "StallingSaveKvdConnector", "module": "faulty_connector"},
        )
    finally:
        srv.stop()
    stalled, meanwhile, warm = res["phases"]
    assert "save slots retired" in res["log"]
    assert stalled["outputs"] == [baseline["A"]] and meanwhile["outputs"] == [baseline["D"]]
    assert warm["outputs"] == [baseline["A"], baseline["D"]]
    assert warm["stats"].get("load_errors", 0) == 0 and warm["stats"].get("damaged_chunks", 0) == 0
    assert warm["stats"]["loaded_chunks"] - meanwhile["stats"].get("loaded_chunks", 0) > 0


def test_saves_and_loads_over_the_unix_socket(engine, baseline) -> None:
    """``url = "unix:///path"`` with the server's ``unixsocket``: what a host running engine and kvd side by side
    uses (1.5-2x loopback TCP's load rate on an H200 host, docs/connector.md). The server's SLOWLOG, set to keep
    every command, shows which connection each came through."""
    short = Path(tempfile.mkdtemp(prefix="kvd-e2e-", dir="/tmp"))  # sun_path holds 107 bytes; tmp_path may not
    sock = short / "kvd.sock"
    srv = Server(short, unixsocket=str(sock), slowlog_log_slower_than="0", slowlog_max_len="10000").start()
    try:
        res = engine.run(
            [{"name": "cold", "prompts": [E]}, {"name": "warm", "prompts": [E]}],
            # shared_memory off: the values come through the socket, which is what this test is about
            {"url": f"unix://{sock}", "chunk_size": CHUNK, "namespace": "e2e-unix", "shared_memory": False},
        )
        cold, warm = res["phases"]
        assert cold["outputs"] == warm["outputs"] == [baseline["E"]]
        assert cold["stats"]["saved_chunks"] == 3
        assert warm["stats"]["hit_tokens"] == 384 and warm["stats"]["loaded_chunks"] == 3
        assert warm["stats"].get("load_errors", 0) == 0
        log = redis.Redis(unix_socket_path=str(sock)).slowlog_get(10000)
        through = {(e["command"].split()[0].upper(), e["client_address"]) for e in log}
        assert (b"MGET", f"{sock}:0".encode()) in through, sorted(through)[:20]
        assert (b"SET", f"{sock}:0".encode()) in through, sorted(through)[:20]
    finally:
        srv.stop(kill=True)
        shutil.rmtree(short, ignore_errors=True)


def test_async_loads_give_the_same_tokens_while_other_requests_run(engine, store: Server, baseline) -> None:
    """``async_load``: a hit waits (vLLM's WAITING_FOR_REMOTE_KVS) while its values are fetched on a thread, and
    the engine runs the other requests meanwhile; the values land in its blocks when ``get_finished`` reports it.
    Outputs are the recomputed ones, for the hits and for the misses beside them, and noise in the stored KV
    changes them, so the async load is what the model attends to."""
    engine.run([{"name": "cold", "prompts": [A, D]}], _conn(store))
    res = engine.run(
        [
            {"name": "hits and a miss", "prompts": [A, F, D]},
            {"name": "partial", "prompts": [B]},
            {"name": "noise", "prompts": [A], "before": [{"op": "noise", "url": store.url, "prompt": A}]},
        ],
        _conn(store, async_load=True),
    )
    mixed, partial, noise = res["phases"]
    assert mixed["outputs"] == [baseline["A"], baseline["F"], baseline["D"]]
    assert mixed["stats"]["hit_tokens"] == 640 + 512 and mixed["stats"]["loaded_chunks"] == 5 + 4
    assert mixed["stats"].get("load_errors", 0) == 0
    assert mixed["stats"]["async_loads"] == 2  # A's and D's, each reported by get_finished
    assert partial["outputs"] == [baseline["B"]]
    assert partial["stats"]["loaded_chunks"] - mixed["stats"]["loaded_chunks"] == 3
    assert res["noised"] == [5]
    assert noise["outputs"] != [baseline["A"]]
    assert "async load" not in res["log"]  # no fetch failed


def test_async_load_of_an_evicted_chunk_is_recomputed(engine, store: Server, baseline) -> None:
    res = engine.run(
        [{"name": "cold", "prompts": [A]}, {"name": "evicted", "prompts": [A]}],
        _conn(store, async_load=True),
        **{"class": "EvictingKvdConnector", "module": "faulty_connector"},
    )
    cold, evicted = res["phases"]
    assert cold["outputs"] == evicted["outputs"] == [baseline["A"]]
    assert evicted["stats"]["hit_tokens"] == 640
    assert evicted["stats"]["loaded_chunks"] == 2 and evicted["stats"]["load_errors"] == 3


def test_a_request_aborted_during_its_async_load(engine, store: Server, baseline) -> None:
    """A hit aborted while its fetch runs (the fetch held back a second): the connector reports it done when the
    fetch ends, without copying into the blocks vLLM is about to free, and the engine goes on: the miss beside it
    and the same prompt sent again come out as recomputed."""
    res = engine.run(
        [
            {"name": "cold", "prompts": [A]},
            {"name": "abort", "prompts": [A, F], "abort": [0], "abort_after_steps": 1},
            {"name": "again", "prompts": [A]},
        ],
        _conn(store, async_load=True),
        **{"class": "SlowFetchKvdConnector", "module": "faulty_connector"},
    )
    cold, aborted, again = res["phases"]
    assert cold["outputs"] == [baseline["A"]]
    assert aborted["outputs"] == [None, baseline["F"]]
    assert again["outputs"] == [baseline["A"]]
    assert again["stats"]["async_loads"] == 2  # the aborted one, reported without a copy, and this one
    assert again["stats"]["loaded_chunks"] == 5 and again["stats"].get("load_errors", 0) == 0
