"""Connection commands, AUTH and protected mode, INFO and CONFIG, against a real kvd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import redis
from support.server import free_port


@pytest.mark.kvd_only  # one database (redis-server has 16)
def test_ping_echo_select(server):
    r = server.client()
    assert r.ping() is True
    assert r.echo("hi") == b"hi"
    assert r.execute_command("SELECT", "0") is True
    with pytest.raises(redis.ResponseError, match="^DB index is out of range$"):
        r.execute_command("SELECT", "1")
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range$"):
        r.execute_command("SELECT", "x")


@pytest.mark.kvd_only  # CLIENT SETINFO is Redis 7.2; Debian's redis-server is 7.0
def test_client_identity(server):
    r = server.client()
    cid = r.client_id()
    assert isinstance(cid, int) and cid > 0
    assert r.client_getname() is None
    assert r.client_setname("worker-1") is True
    assert r.client_getname() in ("worker-1", b"worker-1")
    with pytest.raises(redis.ResponseError, match="cannot contain spaces"):
        r.client_setname("bad name")
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib") == b"OK"
    listing = r.execute_command("CLIENT", "LIST")
    assert b"name=worker-1" in listing and b"lib-name=mylib" in listing
    with pytest.raises(redis.ResponseError, match=r"^unknown subcommand 'NOPE'. Try CLIENT HELP.$"):
        r.execute_command("CLIENT", "NOPE")


def test_unknown_command_keeps_connection(server):
    r = server.client()
    with pytest.raises(redis.ResponseError, match="^unknown command 'NOSUCH', with args beginning with: 'a' 'b' $"):
        r.execute_command("NOSUCH", "a", "b")
    assert r.ping() is True


def test_requirepass_gates_everything_but_auth(server_factory):
    srv = server_factory("--requirepass", "s3cret")
    anon = srv.client(password=None)
    with pytest.raises(redis.AuthenticationError):
        anon.get("k")
    with pytest.raises(redis.AuthenticationError):
        srv.client(password="wrong").ping()
    ok = srv.client(password="s3cret")
    assert ok.set("k", "v") is True
    assert srv.client(username="default", password="s3cret").get("k") == b"v"
    assert srv.client(password="s3cret", protocol=3).get("k") == b"v"  # HELLO 3 AUTH default s3cret


def _refused_start(tmp_path, *args: str) -> str:
    """kvd's one line on stderr for a start-up it refuses with exit code 2."""
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "kvd", "--bind", "127.0.0.1", "--port", str(free_port()), "--dir", str(data), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert not data.exists()  # refused before recovery opened anything
    return lines[0]


@pytest.mark.kvd_only  # kvd's start-up checks
def test_an_unopenable_logfile_or_tls_file_is_one_line_naming_the_key(tmp_path):
    missing = tmp_path / "no-such-dir" / "x"
    assert _refused_start(tmp_path, "--logfile", str(missing)) == (
        f"kvd: logfile: cannot open {missing}: No such file or directory"
    )
    tls_port = ["--tls-port", str(free_port())]  # never bound: the files are checked before anything opens
    assert _refused_start(tmp_path, *tls_port, "--tls-cert-file", str(missing), "--tls-key-file", str(missing)) == (
        f"kvd: tls-cert-file: cannot read {missing}: No such file or directory"
    )
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    line = _refused_start(tmp_path, *tls_port, "--tls-cert-file", str(junk), "--tls-key-file", str(junk))
    assert line.startswith(f"kvd: tls-cert-file: {junk} with tls-key-file {junk} is not a certificate"), line


def test_auth_without_password_configured(server):
    r = server.client()
    with pytest.raises(redis.AuthenticationError):
        r.execute_command("AUTH", "foo")


def test_protected_mode_refuses_public_bind_without_password(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kvd", "--bind", "0.0.0.0", "--port", "7391", "--persistence", "no"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "protected-mode" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.kvd_only  # INFO's kvd section
def test_info_sections(server):
    r = server.client()
    r.set("a", "1")
    info = r.info()
    assert info["role"] == "master"
    assert info["redis_version"].startswith("7")
    assert info["db0"]["keys"] == 1
    assert "connected_clients" in info
    kvd = r.info("kvd")
    assert {"ram_keys", "ram_bytes", "ram_hits", "disk_hits", "misses", "ram_evictions"} <= set(kvd)
    assert r.info("replication")["role"] == "master"
    r.execute_command("KVD.REPORT", "hit_tokens", "256", "load_us", "1000")
    assert r.info("connector") == {"connector_hit_tokens": 256, "connector_load_us": 1000}


@pytest.mark.kvd_only
def test_the_daemon_shortens_the_switch_interval(server):
    """kvd/gil.py: the persistence threads get the GIL back within 0.2 ms, not CPython's 5 ms; INFO shows it."""
    assert server.client().info("server")["python_switch_interval_us"] == 200


@pytest.mark.kvd_only
def test_info_names_the_compiled_buffer_calls(server):
    """kvd/buffers.py: the daemon the set-up installs makes landing's C-API calls through kvd/_buffers.c, parses
    small requests with kvd/protocol/_multibulk.c and packs small log records with kvd/persist/_records.c."""
    info = server.client().info("server")
    assert info["buffer_calls"] == "c"
    assert info["request_parser"] == "c"
    assert info["record_packer"] == "c"


def test_info_counts_reads_and_writes(server):
    """``total_reads_processed`` / ``total_writes_processed``: an unpipelined request is one read and one write.
    Between the two INFO snapshots: the N PINGs, plus the second INFO's read and the first INFO's reply."""
    r = server.client()
    n = 25
    with server.raw() as conn:
        before = r.info("stats")
        for _ in range(n):
            assert conn.command("PING") == b"+PONG\r\n"
        after = r.info("stats")
    assert after["total_reads_processed"] - before["total_reads_processed"] == n + 1
    assert after["total_writes_processed"] - before["total_writes_processed"] == n + 1


@pytest.mark.kvd_only  # kvd's defaults (allkeys-lru)
def test_config_get_set(server):
    r = server.client()
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "allkeys-lru"}
    got = r.config_get("max*")
    assert "maxmemory" in got and "maxclients" in got
    assert r.config_get("appendonly")["appendonly"] in ("yes", "no")
    with pytest.raises(redis.ResponseError):
        r.config_set("no-such-setting", "1")
    with pytest.raises(redis.ResponseError):
        r.config_set("port", "7000")  # not changeable at run time
    r3 = server.client(protocol=3)
    assert r3.config_get("maxclients") == {"maxclients": "10000"}


def test_config_set_of_what_redis_tools_send(server):
    """A tool that turns RDB snapshots off, or asks for the append-only setting it already has, gets OK."""
    r = server.client()
    assert r.config_set("save", "") is True
    assert r.config_get("save") == {"save": ""}
    current = r.config_get("appendonly")["appendonly"]
    assert r.config_set("appendonly", current) is True
    assert r.config_get("appendonly") == {"appendonly": current}


def test_tcp_keepalive_is_bounded_as_redis_bounds_it(server):
    # Past INT_MAX, setsockopt raised TypeError for every new TCP client, which then hung.
    r = server.client()
    with pytest.raises(redis.ResponseError, match="tcp-keepalive"):
        r.config_set("tcp-keepalive", "3000000000")
    assert r.config_set("tcp-keepalive", str(2**31 - 1)) is True  # Linux refuses it (EINVAL): keepalive as it was
    try:
        for _ in range(2):
            assert server.client(socket_timeout=5).ping() is True
    finally:
        r.config_set("tcp-keepalive", "300")


@pytest.mark.kvd_only  # kvd's words for what it does not do
def test_redis_names_at_start_up_and_their_limits(server_factory):
    srv = server_factory("--appendonly", "no", "--save", "")
    r = srv.client()
    assert r.config_get("persistence") == {"persistence": "no"}
    assert r.config_get("appendonly") == {"appendonly": "no"}
    with pytest.raises(redis.ResponseError, match=r"appendonly'\) - appendonly: is kvd's persistence, which cannot be"):
        r.config_set("appendonly", "yes")
    with pytest.raises(redis.ResponseError, match=r"save'\) - save: kvd takes no scheduled snapshots"):
        r.config_set("save", "900 1")
    r.set("k", "v")  # still serving, nothing changed
    assert r.get("k") == b"v" and r.config_get("appendonly") == {"appendonly": "no"}


@pytest.mark.kvd_only  # KVD.PREFIXLEN is kvd's own
def test_prefixlen(server):
    r = server.client()
    r.mset({"c0": "x", "c1": "x", "c3": "x"})
    assert r.execute_command("KVD.PREFIXLEN", "c0", "c1", "c2", "c3") == 2
    assert r.execute_command("KVD.PREFIXLEN", "zz", "c0") == 0
    assert r.execute_command("KVD.PREFIXLEN", "c0", "c1") == 2


def test_maxclients(server_factory):
    srv = server_factory("--maxclients", "2")
    a, b = srv.client(), srv.client()
    assert a.ping()
    deadline = time.monotonic() + 5
    while True:  # the start-up probe's connection may still be closing on the server side
        try:
            assert b.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with socket.create_connection((srv.host, srv.port), timeout=5) as s:
        data = s.recv(100)
    assert data == b"-ERR max number of clients reached\r\n"


@pytest.mark.kvd_only
def test_a_crash_prints_the_python_stack_of_every_thread(server):
    """kvd/cli.py enables faulthandler: a segfault leaves a crash report in the log, as Redis's does, naming
    the Python frames of each thread (what the first crash after a kill -9 in CI lacked)."""
    server.client().ping()
    os.kill(server.pid, signal.SIGSEGV)
    server.proc.wait(10)
    server.killed = True
    deadline = time.monotonic() + 5
    while "Fatal Python error: Segmentation fault" not in server.stderr_text():
        assert time.monotonic() < deadline, server.stderr_text()[-2000:]
        time.sleep(0.05)
    report = server.stderr_text()
    assert "thread 0x" in report.lower() and 'File "' in report


@pytest.mark.kvd_only  # kvd's command line
def test_config_file_given_as_config_equals_file(tmp_path):
    config = tmp_path / "kvd.toml"
    config.write_text("no-such-key = 1\n")  # the file is read: its own error names it
    assert _refused_start(tmp_path, f"--config={config}") == f"kvd: {config}: unknown key 'no-such-key'"


def test_loglevel_takes_redis_names(server):
    # redis.conf's verbose and notice (Redis's default); CONFIG GET answers the name given, as Redis does
    r = server.client()
    try:
        for name in ("notice", "verbose", "warning", "debug"):
            assert r.config_set("loglevel", name) is True
            assert r.config_get("loglevel") == {"loglevel": name}
    finally:
        r.config_set("loglevel", "notice")


@pytest.mark.kvd_only  # kvd's start-up checks
def test_dir_that_is_a_regular_file_is_named_as_such(tmp_path):
    file = tmp_path / "afile"
    file.write_text("")
    assert (
        _refused_start(tmp_path, "--persistence", "yes", "--dir", str(file)) == f"kvd: dir: {file} is not a directory"
    )
