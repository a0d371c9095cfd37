"""SHUTDOWN's arguments as redis-server checks them (KVD_TEST_TARGET=redis runs the same checks against it):
ABORT cancels a shutdown, never starts one, and illegal combinations are syntax errors; SIGHUP is ignored."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


def test_abort_and_illegal_combinations_leave_the_server_running(server):
    with server.raw() as c:
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        assert c.command("SHUTDOWN", "ABORT") == b"-ERR No shutdown in progress.\r\n"
        assert c.command("SHUTDOWN", "abort", "ABORT") == b"-ERR No shutdown in progress.\r\n"
        for request in (["NOSAVE", "SAVE"], ["ABORT", "NOW"], ["NOSAVE", "ABORT"], ["ABORT", "FORCE"], ["NOPE"]):
            assert c.command("SHUTDOWN", *request) == b"-ERR syntax error\r\n", request
        assert c.command("GET", "k") == b"$1\r\nv\r\n"  # still up, data in place


def test_sighup_is_ignored(server_factory):
    # redis-server ignores SIGHUP (a closed terminal, a log rotator's habit); kvd died of it, without its clean
    # shutdown (the unix socket left behind, nothing fsynced).
    srv = server_factory()
    with srv.raw() as c:
        assert c.command("SET", "k", "v") == b"+OK\r\n"
    os.kill(srv.pid, signal.SIGHUP)
    time.sleep(0.5)
    assert srv.running
    with srv.raw() as c:
        assert c.command("GET", "k") == b"$1\r\nv\r\n"
    assert srv.stop() == 0
