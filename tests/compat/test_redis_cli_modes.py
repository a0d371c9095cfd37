"""redis-cli's special modes (Debian's redis-tools 7.0) against the server: --pipe and --pipe-timeout, --replica,
--bigkeys, --latency and --latency-history, --lru-test, --functions-rdb, --cluster and -c, the output formats
(--csv, --json, --quoted-json), -e and -r. What each prints is redis-server's, so KVD_TEST_TARGET=redis runs
the same checks; only --eval's refusal is kvd's own."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time

import pytest
from support.tools import redis_cli, run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(90)]


def cli(srv, *args: str, input: bytes | None = None, timeout: float = 30):
    return run([redis_cli(), "-h", srv.host, "-p", str(srv.port), *args], input=input, timeout=timeout)


def started(srv, *args: str) -> subprocess.Popen[bytes]:
    cmd = ["stdbuf", "-oL", redis_cli(), "-h", srv.host, "-p", str(srv.port), *args]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_until(proc: subprocess.Popen[bytes], stream, pattern: bytes, timeout: float = 20) -> bytes:
    """What ``stream`` of ``proc`` printed up to the first match of ``pattern``."""
    out = bytearray()
    deadline = time.monotonic() + timeout
    while not re.search(pattern, out):
        left = deadline - time.monotonic()
        assert left > 0, f"no {pattern!r} in {bytes(out)!r}"
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            assert chunk, f"redis-cli exited ({proc.poll()}); it printed {bytes(out)!r}"
            out += chunk
    return bytes(out)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.communicate(timeout=10)


def resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def test_pipe_mass_insertion(server):
    n = 200_000
    data = b"".join(resp(b"SET", b"pipe:%d" % i, b"v%d" % i) for i in range(n))
    r = cli(server, "--pipe", input=data, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(b"Last reply received from server.\nerrors: 0, replies: %d\n" % n), r.stdout
    c = server.client()
    assert c.dbsize() == n
    assert c.get(f"pipe:{n - 1}") == b"v%d" % (n - 1)
    # inline commands, and an error among them: counted, printed on stderr, exit status 1
    r = cli(server, "--pipe", input=b"SET pipe:s abc\r\nINCR pipe:s\r\nSET pipe:t 1\r\nINCR pipe:t\r\n")
    assert r.returncode == 1
    assert r.stdout.endswith(b"errors: 1, replies: 4\n"), r.stdout
    assert r.stderr == b"ERR value is not an integer or out of range\n"
    assert c.get("pipe:t") == b"2"


def test_pipe_timeout_gives_up_on_a_silent_server(server):
    """--pipe-timeout N: no reply for N seconds after the last byte went out (here WAIT for a replica that
    does not exist holds the reply back) ends redis-cli with exit status 1."""
    start = time.monotonic()
    r = cli(server, "--pipe", "--pipe-timeout", "1", input=b"SET pt 1\r\nWAIT 1 8000\r\n")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert b"No replies for 1 seconds: exiting." in r.stderr, r.stderr
    assert time.monotonic() - start < 7
    assert server.client().get("pt") == b"1"


def test_replica_mode_prints_the_stream(server):
    """redis-cli --replica: REPLCONF, SYNC, the snapshot skipped, then every write as a CSV line."""
    server.client().set("rep:before", "x")
    proc = started(server, "--replica")
    try:
        read_until(proc, proc.stderr, rb"SYNC done[^\n]*\. Logging commands from master\.\n", timeout=30)
        server.client().set("rep:k", "v")
        server.client().delete("rep:before")
        out = read_until(proc, proc.stdout, rb'(?i)"del","rep:before"\n')
    finally:
        stop(proc)
    assert re.search(rb'(?i)\n"set","rep:k","v"\n', b"\n" + out), out


def test_bigkeys(server):
    c = server.client()
    c.mset({"bk:a": "1", "bk:bb": "22", "bk:big": "x" * 5000})
    c.set("bk:ttl", "333", ex=100)
    r = cli(server, "--bigkeys")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "Sampled 4 keys in the keyspace!" in out, out
    assert "Total key length in bytes is 21 (avg len 5.25)" in out, out
    assert "Biggest string found '\"bk:big\"' has 5000 bytes" in out, out
    assert "4 strings with 5006 bytes (100.00% of keys, avg size 1251.50)" in out, out
    assert "0 lists with 0 items (00.00% of keys, avg size 0.00)" in out, out
    r = cli(server, "--bigkeys", "--pattern", "bk:b*")
    assert "Sampled 2 keys in the keyspace!" in r.stdout.decode(), r.stdout


def test_latency_modes(module_server):
    for fmt, line in (([], rb"\d+ \d+ \d+\.\d\d \d+\n"), (["--csv"], rb"\d+,\d+,\d+\.\d\d,\d+\n")):
        r = cli(module_server, "--latency", "-i", "0.3", *fmt)  # not a tty: one line after -i seconds
        assert r.returncode == 0, r.stderr
        assert re.fullmatch(line, r.stdout), r.stdout
    proc = started(module_server, "--latency-history", "-i", "0.2")  # a line per sample, the totals reset per -i
    try:
        read_until(proc, proc.stdout, rb"(\d+ \d+ \d+\.\d\d \d+\n){3}")
    finally:
        stop(proc)


def test_lru_test(module_server):
    proc = started(module_server, "--lru-test", "1000")
    try:
        out = read_until(proc, proc.stdout, rb"\d+ Gets/sec \| Hits: \d+ \([\d.]+%\) \| Misses: \d+ \([\d.]+%\)\n")
    finally:
        stop(proc)
    assert b"Gets/sec" in out


def test_functions_rdb(module_server, tmp_path):
    """--functions-rdb asks for the functions alone (REPLCONF rdb-filter-only functions): an RDB without keys."""
    module_server.client().set("frdb:key", "value")
    path = tmp_path / "functions.rdb"
    r = cli(module_server, "--functions-rdb", str(path))
    assert r.returncode == 0, r.stderr
    assert b"sending REPLCONF rdb-filter-only functions" in r.stderr, r.stderr
    assert b"Transfer finished with success" in r.stderr, r.stderr
    data = path.read_bytes()
    assert data.startswith(b"REDIS") and data[-9:-8] == b"\xff", data[:16]
    assert b"frdb:key" not in data


def test_cluster_manager_and_cluster_mode(module_server):
    node = f"{module_server.host}:{module_server.port}"
    for sub in ("info", "check"):
        r = run([redis_cli(), "--cluster", sub, node], timeout=30)
        assert r.returncode == 1, r.stdout
        assert f"[ERR] Node {node} is not configured as a cluster node.".encode() in r.stdout, r.stdout
    r = cli(module_server, "-c", "set", "cl:k", "v")
    assert (r.returncode, r.stdout) == (0, b"OK\n")
    r = cli(module_server, "-c", "get", "cl:k")
    assert r.stdout == b"v\n"
    r = cli(module_server, "cluster", "info")
    assert r.stdout == b"ERR This instance has cluster support disabled\n"


def test_output_formats_exit_status_and_repeat(module_server):
    module_server.client().mset({"fmt:a": "1", "fmt:u": 'é"x'})
    assert cli(module_server, "--csv", "mget", "fmt:a", "fmt:none").stdout == b'"1",NULL\n'
    assert cli(module_server, "--json", "mget", "fmt:a", "fmt:none").stdout == b'["1",null]\n'
    assert cli(module_server, "--json", "get", "fmt:u").stdout == '"é\\"x"\n'.encode()
    assert cli(module_server, "--quoted-json", "get", "fmt:u").stdout == b'"\\\\xc3\\\\xa9\\\\"x"\n'
    r = cli(module_server, "--json", "config", "get", "maxmemory")  # RESP3 by default: a map
    assert re.fullmatch(rb'\{"maxmemory":"\d+"\}\n', r.stdout), r.stdout
    r = cli(module_server, "--csv", "-3", "incrbyfloat", "fmt:f", "1.5")
    assert r.stdout == b'"1.5"\n'
    # -e: an error reply goes to stderr, exit status 1 (without it: stdout, 0)
    r = cli(module_server, "incr", "fmt:u")
    assert (r.returncode, r.stdout) == (0, b"ERR value is not an integer or out of range\n\n")
    r = cli(module_server, "-e", "incr", "fmt:u")
    assert (r.returncode, r.stdout, r.stderr) == (1, b"", b"ERR value is not an integer or out of range\n")
    # -r N -i S: the command N times
    r = cli(module_server, "-r", "3", "-i", "0.01", "incr", "fmt:n")
    assert r.stdout == b"1\n2\n3\n"


@pytest.mark.kvd_only
def test_eval_is_refused_clearly(module_server, tmp_path):
    script = tmp_path / "s.lua"
    script.write_text("return redis.call('get', KEYS[1])\n")
    r = cli(module_server, "--eval", str(script), "k", ",", "arg")
    assert r.returncode == 0
    assert r.stdout.startswith(b"ERR unknown command 'EVAL', with args beginning with: "), r.stdout
    r = cli(module_server, "-e", "--eval", str(script), "k")
    assert r.returncode == 1
