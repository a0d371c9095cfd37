"""The harness itself: start, PING, restart on the same port/dir, kill -9, SIGTERM exit status, raw replies."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.compat, pytest.mark.timeout(90)]


def test_start_ping_stop(server_factory):
    srv = server_factory()
    assert srv.client().ping() is True
    with srv.raw() as c:
        assert c.command("PING") == b"+PONG\r\n"
    assert srv.rss_bytes() > 1_000_000
    assert srv.stop() == 0
    assert not srv.running


def test_restart_same_port_and_dir(server_factory):
    srv = server_factory()
    port, directory = srv.port, srv.dir
    srv.restart()
    assert (srv.port, srv.dir) == (port, directory)
    assert srv.client().ping()
    srv.kill9()
    assert not srv.running
    srv.restart()
    assert srv.client().ping()


def test_password_option_and_url(server_factory):
    srv = server_factory(requirepass="s3cret")
    with srv.raw() as c:
        assert c.command("GET", "x").startswith(b"-NOAUTH")
    assert srv.client().ping()
    assert srv.url == f"redis://default:s3cret@127.0.0.1:{srv.port}/0"
