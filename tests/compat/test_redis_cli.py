"""redis-cli (Debian's redis-tools 7.0) against the server: one-shot, piped and tty sessions, RESP3, --scan,
--stat, passwords, binary-safe --raw and -x."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time

import pytest
from support.tools import redis_cli, run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


def cli(srv, *args: str, input: bytes | None = None, timeout: float = 20, auth: bool = True):
    cmd = [redis_cli(), "-h", srv.host, "-p", str(srv.port)]
    if auth and srv.password:
        cmd += ["-a", srv.password, "--no-auth-warning"]
    return run([*cmd, *args], input=input, timeout=timeout)


def test_one_shot_set_get(module_server):
    r = cli(module_server, "set", "cli:a", "b")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"OK\n", b"")
    r = cli(module_server, "get", "cli:a")
    assert (r.returncode, r.stdout) == (0, b"b\n")
    r = cli(module_server, "get", "cli:missing")
    assert (r.returncode, r.stdout) == (0, b"\n")
    r = cli(module_server, "mget", "cli:a", "cli:missing")
    assert r.stdout == b"b\n\n"
    r = cli(module_server, "ping")
    assert r.stdout == b"PONG\n"
    r = cli(module_server, "nosuchcommand", "x")
    # redis-cli prints an error reply followed by an empty line
    assert r.stdout == b"ERR unknown command 'nosuchcommand', with args beginning with: 'x' \n\n"


def test_piped_session(module_server):
    script = b"set cli:p 1\nget cli:p\nping\nget cli:p:missing\nexists cli:p cli:p\ndbsize\n"
    r = cli(module_server, input=script)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split(b"\n")
    assert lines[:5] == [b"OK", b"1", b"PONG", b"", b"2"], r.stdout
    assert re.fullmatch(rb"\d+", lines[5]), r.stdout


def test_tty_session(module_server):
    """A real terminal: redis-cli asks for COMMAND DOCS (or falls back to its built-in help) and shows a prompt."""
    master, slave = pty.openpty()
    cmd = [redis_cli(), "-h", module_server.host, "-p", str(module_server.port)]
    # TERM=dumb: linenoise reads plain lines (no cursor-position queries) but stdin/stdout are still a tty
    env = {**os.environ, "TERM": "dumb"}
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, close_fds=True, env=env)
    os.close(slave)
    out = bytearray()

    def read_until(pattern: bytes, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, out):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {bytes(out)!r}"
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    chunk = b""
                assert chunk, f"redis-cli exited; output {bytes(out)!r}"
                out.extend(chunk)

    try:
        prompt = f"{module_server.host}:{module_server.port}> ".encode()
        read_until(re.escape(prompt))
        os.write(master, b"set cli:tty hello\r")
        read_until(rb"OK")
        os.write(master, b"get cli:tty\r")
        read_until(rb'"hello"')
        os.write(master, b"get cli:tty:missing\r")
        read_until(rb"\(nil\)")
        os.write(master, b"quit\r")
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        os.close(master)


def test_resp3_switch(module_server):
    r = cli(module_server, "-3", "hello", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert "server redis" in lines
    assert "proto 3" in lines
    assert "role master" in lines
    assert "mode standalone" in lines
    r = cli(module_server, "-3", "get", "cli:r3:missing")
    assert (r.returncode, r.stdout) == (0, b"\n")
    r = cli(module_server, "-3", "config", "get", "maxmemory")
    assert re.fullmatch(rb"maxmemory \d+\n", r.stdout), r.stdout
    r = cli(module_server, "-3", "set", "cli:r3", "v")
    assert r.stdout == b"OK\n"


def test_scan_pattern(server):
    c = server.client()
    wanted = {f"k:{i}".encode() for i in range(60)}
    c.mset({k: b"1" for k in wanted})
    c.mset({f"other:{i}": b"1" for i in range(20)})
    r = cli(server, "--scan", "--pattern", "k:*")
    assert r.returncode == 0, r.stderr
    got = r.stdout.split(b"\n")
    assert got[-1] == b""
    assert len(got[:-1]) == len(wanted), "--scan prints every key once"
    assert set(got[:-1]) == wanted
    r = cli(server, "--scan", "--pattern", "k:1*", "-i", "0.01")
    assert set(r.stdout.split()) == {k for k in wanted if k.startswith(b"k:1")}


def test_stat(module_server):
    module_server.client().set("cli:stat", "x")
    cmd = ["stdbuf", "-oL", redis_cli(), "-h", module_server.host, "-p", str(module_server.port)]
    proc = subprocess.Popen(
        [*cmd, "--stat", "-i", "0.1"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out = bytearray()
        deadline = time.monotonic() + 15
        rows = []
        while len(rows) < 3 and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
                rows = [
                    ln for ln in out.decode(errors="replace").splitlines() if re.match(r"^\d+\s+\S+\s+\d+\s+\d+", ln)
                ]
    finally:
        proc.kill()
        proc.wait(5)
        err = proc.stderr.read()
    text = out.decode(errors="replace")
    assert "------- data ------" in text, (text, err)
    assert re.search(r"keys\s+mem\s+clients\s+blocked\s+requests\s+connections", text), text
    assert len(rows) >= 3, (text, err)
    assert int(rows[-1].split()[0]) >= 1, rows


def test_password(server_factory):
    srv = server_factory(requirepass="s3cret")
    r = cli(srv, "ping")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"PONG\n", b"")
    r = cli(srv, "set", "cli:pw", "1")
    assert r.stdout == b"OK\n"
    r = run([redis_cli(), "-p", str(srv.port), "-a", "s3cret", "ping"], timeout=20)
    assert r.stdout == b"PONG\n"
    assert b"Warning: Using a password" in r.stderr
    r = cli(srv, "get", "cli:pw", auth=False)
    assert r.stdout == b"NOAUTH Authentication required.\n\n"
    r = run([redis_cli(), "-p", str(srv.port), "-a", "wrong", "--no-auth-warning", "ping"], timeout=20)
    assert b"WRONGPASS" in r.stdout + r.stderr
    r = run([redis_cli(), "-u", srv.url, "--no-auth-warning", "-3", "get", "cli:pw"], timeout=20)
    assert r.stdout == b"1\n"


def test_raw_output_is_binary_safe(module_server):
    value = bytes(range(256)) + b"\r\n\x00end"
    module_server.client().set("cli:bin", value)
    r = cli(module_server, "--raw", "get", "cli:bin")
    assert r.stdout == value + b"\n"
    r = cli(module_server, "--no-raw", "get", "cli:bin")
    assert r.stdout.startswith(b'"\\x00\\x01\\x02')
    assert r.stdout.endswith(b'\\xfe\\xff\\r\\n\\x00end"\n')


def test_x_reads_a_binary_value_from_stdin(module_server):
    value = os.urandom(1 << 20)
    r = cli(module_server, "-x", "set", "cli:x", input=value)
    assert r.stdout == b"OK\n", r.stderr
    assert module_server.client().get("cli:x") == value
    r = cli(module_server, "--raw", "get", "cli:x")
    assert r.stdout == value + b"\n"
