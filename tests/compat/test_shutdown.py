"""SHUTDOWN's arguments as redis-server checks them (KVD_TEST_TARGET=redis runs the same checks against it):
ABORT cancels a shutdown, never starts one, and illegal combinations are syntax errors."""

from __future__ import annotations

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
