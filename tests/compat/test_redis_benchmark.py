"""redis-benchmark (Debian's redis-tools 7.0) smoke runs: exit 0, no error, a number for every test.

redis-benchmark exits on the first error reply to a benchmarked command ("Error from server: ..."); its control
connection asks CONFIG GET save/appendonly (a warning only if that fails); each benchmark connection may prefix
AUTH / HELLO 3 in the same write.
"""

from __future__ import annotations

import re
import time

import pytest
from support.tools import redis_benchmark, run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

RESULT = re.compile(r"^([A-Z_]+(?: \(\d+ keys\))?): ([0-9.]+) requests per second")


def bench(srv, *args: str, timeout: float = 100) -> dict[str, float]:
    cmd = [redis_benchmark(), "-h", srv.host, "-p", str(srv.port), *args]
    if srv.password:
        cmd += ["-a", srv.password]
    r = run(cmd, timeout=timeout)
    out = r.stdout.decode(errors="replace")
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, f"exit {r.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert "error" not in (out + err).lower(), f"{out[-3000:]}\n{err[-3000:]}"
    results = {}
    for line in re.split(r"[\r\n]+", out):
        m = RESULT.match(line.strip())
        if m:
            results[m.group(1)] = float(m.group(2))
    return results


def test_small_pipelined(module_server):
    results = bench(module_server, "-t", "set,get,mset,ping", "-n", "2000", "-P", "16", "-q")
    assert set(results) == {"PING_INLINE", "PING_MBULK", "SET", "GET", "MSET (10 keys)"}, results
    assert all(v > 0 for v in results.values()), results


def test_one_mib_values(module_server):
    results = bench(module_server, "-t", "set,get", "-n", "200", "-d", "1048576", "-q")
    assert set(results) == {"SET", "GET"}, results
    assert all(v > 0 for v in results.values()), results


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_with_password(server_factory, resp3):
    srv = server_factory(requirepass="s3cret")
    args = ["-t", "set,get", "-n", "1000", "-c", "4", "-q"] + (["-3"] if resp3 else [])
    results = bench(srv, *args)
    assert set(results) == {"SET", "GET"}, results


def test_custom_command_threads_and_csv(module_server):
    """A command of one's own with __rand_int__ keys (-r) from two threads; CSV output with 4 KiB values."""
    cmd = [redis_benchmark(), "-h", module_server.host, "-p", str(module_server.port)]
    r = run([*cmd, "-n", "2000", "-r", "1000", "--threads", "2", "-q", "SET", "bc:__rand_int__", "v"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(rb"SET bc:__rand_int__ v: [0-9.]+ requests per second", r.stdout), r.stdout[-2000:]
    keys = module_server.client().keys("bc:*")
    assert keys and all(re.fullmatch(rb"bc:\d{12}", k) for k in keys), keys[:5]
    r = run([*cmd, "--csv", "-t", "set,get", "-n", "1000", "-d", "4096", "-P", "8"], timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith('"test","rps","avg_latency_ms"'), lines
    assert [ln.split(",")[0] for ln in lines[1:]] == ['"SET"', '"GET"'], lines
    assert module_server.client().strlen("key:__rand_int__") == 4096


@pytest.mark.kvd_only
@pytest.mark.parametrize("test", ["lpush", "hset", "zadd", "lrange_100"])
def test_tests_of_other_types_stop_at_the_first_refusal(module_server, test):
    """kvd stores strings only: redis-benchmark's list, hash and sorted-set tests end at the first reply, Redis's
    unknown-command error, with exit status 1; the 50 connections it drops mid-pipeline leave kvd serving."""
    cmd = [redis_benchmark(), "-h", module_server.host, "-p", str(module_server.port)]
    r = run([*cmd, "-t", test, "-n", "100000", "-P", "16", "--threads", "2", "-q"], timeout=30)
    assert r.returncode == 1, r.stdout[-2000:]
    assert b"Error from server: ERR unknown command '" in r.stdout + r.stderr, (r.stdout[-2000:], r.stderr)
    c = module_server.client()
    assert c.ping() is True
    deadline = time.monotonic() + 10
    while c.info("clients")["connected_clients"] > 1:
        assert time.monotonic() < deadline, c.client_list()
        time.sleep(0.05)
