"""``pidfile`` as redis-server keeps it (KVD_TEST_TARGET=redis runs the same checks against it): the process id
is written once the server listens and removed by a clean stop (SHUTDOWN, SIGTERM, SIGINT, DEBUG RESTART's stop),
a crash leaves it and the next start overwrites it, a file that cannot be written is no reason not to serve, and
CONFIG GET shows it while CONFIG SET cannot change it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from support.raw import ConnectionClosed, parse
from support.server import free_port

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def until(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_written_once_listening_shown_by_config_get_and_removed_by_shutdown(server_factory, tmp_path):
    pidfile = tmp_path / "server.pid"
    srv = server_factory(pidfile=str(pidfile))
    assert pidfile.read_text() == f"{srv.pid}\n"
    with srv.raw() as c:
        assert parse(c.command("CONFIG", "GET", "pidfile")) == [b"pidfile", str(pidfile).encode()]
        refused = c.command("CONFIG", "SET", "pidfile", str(tmp_path / "other.pid"))
        assert refused.startswith(b"-ERR CONFIG SET failed (possibly related to argument 'pidfile') - "), refused
        c.send_command("SHUTDOWN", "NOSAVE")
        assert c.is_closed(timeout=30)
    assert srv.proc.wait(30) == 0
    assert not pidfile.exists()
    assert not (tmp_path / "other.pid").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_removes_it(server_factory, tmp_path, sig):
    pidfile = tmp_path / "server.pid"
    srv = server_factory(pidfile=str(pidfile))
    assert pidfile.read_text() == f"{srv.pid}\n"
    os.kill(srv.pid, sig)
    assert srv.proc.wait(30) == 0
    assert not pidfile.exists()


def test_a_crash_leaves_it_and_the_next_start_overwrites_it(server_factory, tmp_path):
    pidfile = tmp_path / "server.pid"
    pidfile.write_text("999999999\n")  # a stale file from some earlier run: overwritten, as Redis does
    srv = server_factory(pidfile=str(pidfile))
    first = srv.pid
    assert pidfile.read_text() == f"{first}\n"
    srv.kill9()
    assert pidfile.read_text() == f"{first}\n"  # nothing ran to remove it
    srv.restart()
    assert srv.pid != first
    assert pidfile.read_text() == f"{srv.pid}\n"
    assert srv.stop() == 0
    assert not pidfile.exists()


def test_a_pidfile_that_cannot_be_written_is_no_reason_not_to_serve(server_factory, tmp_path, target_kind):
    pidfile = tmp_path / "no-such-dir" / "server.pid"
    srv = server_factory(pidfile=str(pidfile))
    with srv.raw() as c:
        assert c.command("SET", "k", "v") == b"+OK\r\n"
    assert not pidfile.exists()
    if target_kind == "kvd":  # Redis 7.0 says nothing; 7.2 and kvd warn
        assert f"cannot write the pid file {pidfile}: No such file or directory" in srv.stderr_text()
    assert srv.stop() == 0


def test_debug_restart_writes_it_again(server_factory, tmp_path):
    """The graceful stop of DEBUG RESTART removes it as any clean stop does, and the process, executed again
    (same pid), writes it again once it listens; CRASH-AND-RECOVER leaves it, and the new image overwrites it."""
    pidfile = tmp_path / "server.pid"
    srv = server_factory(pidfile=str(pidfile), enable_debug_command="yes")
    pid = srv.pid
    for how in ("RESTART", "CRASH-AND-RECOVER"):
        with srv.raw() as c:
            c.send_command("DEBUG", how, "200")
            assert c.is_closed(timeout=30)
        until(lambda: _answers(srv), f"the server to answer again after DEBUG {how}")
        assert srv.running and srv.pid == pid
        assert pidfile.read_text() == f"{pid}\n"
    assert srv.stop() == 0
    assert not pidfile.exists()


def test_daemonize_is_no_and_immutable(server):
    """kvd stays in the foreground (``--daemonize yes`` is refused at start, tests/server/test_command_line.py);
    CONFIG GET and SET answer as Redis's for a server started with ``daemonize no``."""
    with server.raw() as c:
        assert c.command("CONFIG", "GET", "daemonize") == b"*2\r\n$9\r\ndaemonize\r\n$2\r\nno\r\n"
        assert c.command("CONFIG", "SET", "daemonize", "no") == (
            b"-ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config\r\n"
        )


def _answers(srv) -> bool:
    try:
        with srv.raw(timeout=2) as c:
            return c.command("PING") == b"+PONG\r\n"
    except (OSError, ConnectionClosed):
        return False


@pytest.mark.kvd_only
def test_a_sigterm_as_soon_as_the_pidfile_appears_is_a_clean_stop(tmp_path):
    """A supervisor may stop kvd the moment its pid file appears: the stop signals are kvd's own by then (they
    were installed only after the start-up banner, so such a SIGTERM killed kvd with the default action)."""
    for round_ in range(3):
        pidfile = tmp_path / f"kvd{round_}.pid"
        cmd = [
            sys.executable,
            "-m",
            "kvd",
            "--port",
            str(free_port()),
            "--persistence",
            "no",
            "--pidfile",
            str(pidfile),
        ]
        with open(tmp_path / "stderr", "ab") as err:
            proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=err, stderr=err)
        try:
            until(pidfile.exists, "the pid file")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, (tmp_path / "stderr").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert not pidfile.exists()


@pytest.mark.kvd_only
def test_a_relative_path_is_the_working_directory_s_and_another_process_s_file_is_left(server_factory, tmp_path):
    """kvd never changes its working directory (Redis moves into ``dir``, so there a relative pid file lands in
    ``dir``): a relative path names a file where kvd was started. At the stop, a file that no longer holds kvd's
    pid is another process's, and is left in place."""
    srv = server_factory(pidfile="kvd.pid")
    pidfile = srv.base / "kvd.pid"  # the harness starts the server in srv.base, with --dir srv.base/data
    assert pidfile.read_text() == f"{srv.pid}\n"
    srv.restart()
    assert pidfile.read_text() == f"{srv.pid}\n"
    pidfile.write_text("12345\n")
    assert srv.stop() == 0
    assert pidfile.read_text() == "12345\n"
    assert "pid file kvd.pid holds '12345', not this process's id: left in place" in srv.stderr_text()
