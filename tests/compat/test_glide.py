"""valkey-glide (Python) against the server: connect (needs HELLO and INFO REPLICATION with role:master),
set/get/mget/mset, a 4 MiB value; RESP3 (its default) and RESP2, with and without a password."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.tools import run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(90)]

SCRIPT = Path(__file__).parent / "clients" / "glide_client.py"


def run_glide(port: int, protocol: str, password: str | None, prefix: str) -> None:
    pytest.importorskip("glide")
    cfg = {"port": port, "protocol": protocol, "password": password, "prefix": prefix}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = run([sys.executable, str(SCRIPT), json.dumps(cfg)], env=env, timeout=80)
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")[-4000:]
    assert json.loads(r.stdout.decode().strip().splitlines()[-1]) == {"ok": True}


@pytest.mark.parametrize("protocol", ["RESP3", "RESP2"])
def test_glide(module_server, protocol):
    run_glide(module_server.port, protocol, None, f"glide:{protocol}")


def test_glide_with_password(server_factory):
    srv = server_factory(requirepass="s3cret")
    run_glide(srv.port, "RESP3", "s3cret", "glide:auth")
