"""``unixsocket`` and ``unixsocketperm``: the same server reached through a unix socket by redis-py (hiredis and
Python parsers, sync and asyncio), redis-cli -s, redis-benchmark -s and the connector's client; what CLIENT LIST
shows of such a client; the socket file's permissions, its replacement when stale and its removal at shutdown.
Everything here runs against redis-server too (KVD_TEST_TARGET=redis), but for the kvd_only refusals: kvd does
not take the path from a live server nor delete a file that is not a socket, where Redis unlinks whatever is
there."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio
from redis._parsers import _HiredisParser, _RESP2Parser
from support.server import ServerProcess
from support.tools import redis_benchmark, redis_cli, run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

PARSERS = [pytest.param(_HiredisParser, id="hiredis"), pytest.param(_RESP2Parser, id="python")]


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    # sun_path holds 107 bytes: pytest's tmp_path can be longer, so the socket lives in a short directory
    short = Path(f"/tmp/kvd-test-{os.getpid()}-{time.monotonic_ns() % 10**9}")
    short.mkdir()
    yield short / "kvd.sock"
    for p in short.iterdir():
        p.unlink()
    short.rmdir()


def unix_client(path: Path, parser: type = _RESP2Parser, **kw) -> redis.Redis:
    pool = redis.ConnectionPool(connection_class=redis.UnixDomainSocketConnection, path=str(path), parser_class=parser)
    return redis.Redis(connection_pool=pool, **kw)


@pytest.mark.parametrize("parser", PARSERS)
def test_redis_py_over_the_socket_sees_the_tcp_keyspace(server_factory, sock_path, parser):
    srv = server_factory(unixsocket=str(sock_path))
    r = unix_client(sock_path, parser)
    assert r.connection_pool.get_connection().__class__ is redis.UnixDomainSocketConnection
    big = os.urandom(3 << 20)  # larger than any one read: the value arrives in many pieces
    assert r.set("u:big", big) is True
    assert srv.client().get("u:big") == big  # one keyspace, two listeners
    srv.client().set("u:tcp", b"from tcp")
    assert r.mget("u:big", "u:tcp", "u:none") == [big, b"from tcp", None]
    assert r.incrby("u:n", 5) == 5
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        r.execute_command("GET")
    pipe = r.pipeline(transaction=True)
    pipe.set("u:p", 1).incr("u:p").get("u:p")
    assert pipe.execute() == [True, 2, b"2"]
    r.close()


def test_asyncio_redis_py_over_the_socket(server_factory, sock_path):
    server_factory(unixsocket=str(sock_path))

    async def main() -> list:
        r = redis.asyncio.Redis(unix_socket_path=str(sock_path), protocol=3)
        try:
            await r.set("ua:k", b"v" * 100_000)
            info = await r.client_info()  # a RESP3 map
            return [await r.strlen("ua:k"), info["resp"], info["flags"], await r.ping()]
        finally:
            await r.aclose()

    assert asyncio.run(main()) == [100_000, "3", "U", True]


def test_client_list_shows_the_path_and_flag_u(server_factory, sock_path):
    srv = server_factory(unixsocket=str(sock_path))
    r = unix_client(sock_path)
    r.client_setname("over-unix")
    line = r.execute_command("CLIENT", "INFO").decode()
    fields = dict(f.split("=", 1) for f in line.split())
    assert fields["addr"] == f"{sock_path}:0"
    assert fields["laddr"] == f"{sock_path}:0"
    assert fields["flags"] == "U"
    conn = r.connection_pool.get_connection()  # one connection held, so that MULTI stays open on it
    conn.send_command("MULTI")
    assert conn.read_response() == b"OK"
    listed = [c for c in srv.client().client_list() if c["name"] == "over-unix"]
    assert [c["flags"] for c in listed] == ["xU"]
    r.connection_pool.release(conn)
    tcp = dict(f.split("=", 1) for f in srv.client().execute_command("CLIENT", "INFO").decode().split())
    assert tcp["flags"] == "N" and tcp["addr"].startswith("127.0.0.1:")
    # CLIENT KILL ADDR takes what CLIENT LIST shows
    assert srv.client().execute_command("CLIENT", "KILL", "ADDR", f"{sock_path}:0") == 1
    assert b"name=over-unix" not in srv.client().execute_command("CLIENT", "LIST")
    r.close()


def test_socket_permissions_and_config_get(server_factory, sock_path):
    srv = server_factory(unixsocket=str(sock_path), unixsocketperm="640")
    mode = os.stat(sock_path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o640
    c = srv.client()
    assert c.config_get("unixsocket*") == {"unixsocket": str(sock_path), "unixsocketperm": "640"}
    with pytest.raises(redis.ResponseError):
        c.config_set("unixsocketperm", "700")  # immutable, as in Redis
    with pytest.raises(redis.ResponseError):
        c.config_set("unixsocket", "/tmp/elsewhere.sock")
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o640


def test_the_file_goes_at_shutdown_and_a_stale_one_is_replaced(server_factory, sock_path):
    srv = server_factory(unixsocket=str(sock_path))
    unix_client(sock_path).set("s:k", "v")
    srv.stop()
    assert not sock_path.exists(), "a clean shutdown removes the socket file"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock_path))  # bound and closed without listening: a crashed server's leftover
    stale.close()
    srv.start()
    assert unix_client(sock_path).ping() is True
    srv.kill9()  # a crash leaves the file; the next start replaces it
    assert sock_path.exists()
    srv.start()
    assert unix_client(sock_path).ping() is True


@pytest.mark.parametrize("how", ["RESTART", "CRASH-AND-RECOVER"])
def test_debug_restart_serves_the_socket_again(server_factory, sock_path, how):
    """The process executed again finds its own socket file (removed by the stop, or left by the crash) and
    listens there again with the same permissions."""
    srv = server_factory(unixsocket=str(sock_path), unixsocketperm="600", enable_debug_command="yes", persistence=True)
    r = unix_client(sock_path)
    r.set("rs:k", "v")
    with contextlib.suppress(redis.ConnectionError):
        r.execute_command("DEBUG", how, "200")
    r.close()
    deadline = time.monotonic() + 60
    while not _answers(sock_path):
        assert time.monotonic() < deadline, "the server did not answer on its socket again"
        time.sleep(0.1)
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
    assert unix_client(sock_path).get("rs:k") == b"v"
    assert srv.client().ping() is True


def test_redis_cli_over_the_socket(server_factory, sock_path):
    server_factory(unixsocket=str(sock_path))
    r = run([redis_cli(), "-s", str(sock_path), "set", "cli:u", "hello"], timeout=20)
    assert (r.returncode, r.stdout) == (0, b"OK\n"), r.stderr
    r = run([redis_cli(), "-s", str(sock_path)], input=b"get cli:u\nclient info\n", timeout=20)
    lines = r.stdout.split(b"\n")
    assert lines[0] == b"hello", r.stdout
    assert f"addr={sock_path}:0 ".encode() in lines[1] and b" flags=U " in lines[1], r.stdout


def test_monitor_and_info_name_a_socket_client_as_redis_does(server_factory, sock_path):
    """redis-cli's MONITOR shows a command from the socket as ``[0 unix:PATH]`` (replicationFeedMonitors), and
    INFO replication a replica attached through it (redis-cli -s --replica) as ``ip=/unixsocket,port=0``."""
    srv = server_factory(unixsocket=str(sock_path))
    cli = [redis_cli(), "-h", srv.host, "-p", str(srv.port)]
    monitor = subprocess.Popen([*cli, "monitor"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    replica = subprocess.Popen(
        [redis_cli(), "-s", str(sock_path), "--replica"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while b"cmd=monitor" not in _raw(srv, "CLIENT", "LIST") or b"slave0:" not in _raw(srv, "INFO"):
            assert time.monotonic() < deadline, _raw(srv, "CLIENT", "LIST")
            time.sleep(0.05)
        assert b"\r\nslave0:ip=/unixsocket,port=0," in _raw(srv, "INFO", "replication")
        unix_client(sock_path).set("mon:u", "v")
    finally:
        monitor.terminate()
        replica.terminate()
        out = monitor.communicate(timeout=10)[0]
        replica.wait(10)
    assert out.startswith(b"OK\n"), out
    assert f' [0 unix:{sock_path}] "SET" "mon:u" "v"\n'.encode() in out, out


def _raw(srv, *command: str) -> bytes:
    with srv.raw() as c:
        return c.command(*command)


def test_redis_benchmark_over_the_socket(server_factory, sock_path):
    srv = server_factory(unixsocket=str(sock_path))
    cmd = [redis_benchmark(), "-s", str(sock_path), "-t", "set,get", "-n", "2000", "-c", "4", "-d", "1024", "-q"]
    r = run(cmd, timeout=50)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    for test in ("SET", "GET"):
        assert f"{test}: " in out and "requests per second" in out, out
    assert srv.client().info("stats")["total_commands_processed"] >= 4000


@pytest.mark.kvd_only
def test_the_connector_client_over_the_socket(server_factory, sock_path):
    from connectors.client import ClientConfig, KvdClient, LoadBuffers

    server_factory(unixsocket=str(sock_path))
    client = KvdClient(ClientConfig(url=f"unix://{sock_path}", timeout_ms=20_000))
    values = [os.urandom(1 << 20) for _ in range(4)]
    keys = [f"conn:{i}" for i in range(4)]
    assert client.put_many(list(zip(keys, values, strict=True)), skip_existing=False) == (4, 4 << 20)
    assert client.prefix_len([*keys[:3], "conn:absent", keys[3]]) == 3
    buffers = LoadBuffers()
    got = client.get_many([*keys, "conn:absent"], 1 << 20, into=buffers)
    assert [bytes(v) if v is not None else None for v in got] == [*values, None]
    client.close()


def _wmem_max() -> int:
    return int(Path("/proc/sys/net/core/wmem_max").read_text())


def test_both_ends_ask_for_a_wide_send_buffer(server_factory, sock_path):
    """A unix socket keeps net.core.wmem_default (208 KiB) unless asked; TCP's grows to 4 MiB. The connector's
    client asks for 4 MiB on its end, and so does kvd on its end of every unix connection (the kernel doubles
    what it grants, capped at net.core.wmem_max)."""
    from connectors.client import ClientConfig, KvdClient
    from kvd.connection import UNIX_SEND_BUFFER, _widen_send_buffer

    wanted = 2 * min(4 << 20, _wmem_max())
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        _widen_send_buffer(a)
        assert UNIX_SEND_BUFFER == 4 << 20
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == wanted
        assert b.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < wanted  # the default, as before
    server_factory(unixsocket=str(sock_path))
    client = KvdClient(ClientConfig(url=f"unix://{sock_path}", timeout_ms=20_000))
    assert client.ping()
    conn = client._redis.connection_pool.get_connection()
    try:
        assert conn._sock.family == socket.AF_UNIX
        assert conn._sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == wanted
    finally:
        client._redis.connection_pool.release(conn)
        client.close()


@pytest.mark.kvd_only
def test_a_live_socket_is_not_taken(server_factory, sock_path, tmp_path):
    server_factory(unixsocket=str(sock_path))
    second = ServerProcess(tmp_path / "second", unixsocket=str(sock_path))  # not the factory's: it fails to start
    with pytest.raises(RuntimeError, match="exited with 1 during start-up"):
        second.start()
    assert f"cannot listen on unix socket {sock_path}: another server accepts connections on it" in " ".join(
        second.stderr_text().split()
    )
    assert second.starts == 1, "a refused socket is no port in use: no retry on another port"
    assert unix_client(sock_path).ping() is True  # the first server still has its socket


@pytest.mark.kvd_only
def test_a_file_that_is_not_a_socket_is_left_alone(sock_path, tmp_path):
    sock_path.write_text("precious")
    srv = ServerProcess(tmp_path / "srv", unixsocket=str(sock_path))
    with pytest.raises(RuntimeError, match="the path exists and is not a socket"):
        srv.start()
    assert sock_path.read_text() == "precious"


@pytest.mark.kvd_only
def test_unix_socket_alone_with_port_0(sock_path, tmp_path):
    """No TCP listener at all: the process is reached through its socket alone, and stops cleanly."""
    cmd = [sys.executable, "-m", "kvd", "--port", "0", "--unixsocket", str(sock_path), "--persistence", "no"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not sock_path.exists() or not _answers(sock_path):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
            time.sleep(0.05)
        r = unix_client(sock_path)
        assert r.config_get("port") == {"port": "0"}
        assert r.set("p0:k", "v") and r.get("p0:k") == b"v"
        with contextlib.suppress(redis.ConnectionError):  # redis-py versions differ in what they make of it
            r.shutdown()
        assert proc.wait(20) == 0
        assert not sock_path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


def _answers(path: Path) -> bool:
    try:
        return unix_client(path, socket_timeout=2).ping() is True
    except redis.ConnectionError:
        return False


@pytest.mark.kvd_only
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--unixsocketperm", "800"], "--unixsocketperm: expected an octal number such as 700, got '800'"),
        (["--unixsocketperm", "1000"], "--unixsocketperm: expected an octal number between 0 and 777, got '1000'"),
        (["--unixsocket", "/tmp/" + "x" * 120], "unixsocket: path too long (125 bytes), must be under 108"),
        (["--port", "0"], "port: 0 turns plain TCP off, so tls-port or unixsocket must be set"),
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, args, message):
    r = run([sys.executable, "-m", "kvd", "--persistence", "no", *args], timeout=30, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr.decode(), r.stderr


@pytest.mark.kvd_only
def test_toml_wants_the_permissions_as_a_string(tmp_path):
    """A TOML 700 is seven hundred and 0o700 is 448: neither says what redis.conf's 700 says, so kvd asks for "700"."""
    conf = tmp_path / "kvd.toml"
    conf.write_text('unixsocket = "/tmp/x.sock"\nunixsocketperm = 700\npersistence = false\n')
    r = run([sys.executable, "-m", "kvd", "--config", str(conf)], timeout=30, cwd=tmp_path)
    assert r.returncode == 2
    assert 'unixsocketperm: expected an octal number as a string, such as "700", got 700' in r.stderr.decode()
