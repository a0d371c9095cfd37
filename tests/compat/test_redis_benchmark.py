"""redis-benchmark (Debian's redis-tools 7.0) smoke runs: exit 0, no error, a number for every test.

redis-benchmark exits on the first error reply to a benchmarked command ("Error from server: ..."); its control
connection asks CONFIG GET save/appendonly (a warning only if that fails); each benchmark connection may prefix
AUTH / HELLO 3 in the same write.
"""

from __future__ import annotations

import re

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
