"""redis-py 5.x, 6.x, 7.x and 8.x, sync and asyncio, with and without hiredis, RESP2 and RESP3 (and each
version's default), every combination in its own interpreter (tests/compat/clients/redis_py_client.py).

Each version comes from .cache/clients/redis<N> (scripts/test.sh); hiredis comes from .venv and is hidden with
tests/support/nohiredis. The client script asserts the version, HIREDIS_AVAILABLE, the parser class actually
used and the protocol the server reports for the connection.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.server import ServerFactory
from support.tools import REDIS_PY_MAJORS, client_env, run

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

SCRIPT = Path(__file__).parent / "clients" / "redis_py_client.py"
PASSWORD = "s3cret pw"


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    factory = ServerFactory(tmp_path_factory.mktemp("auth_server"))
    yield factory(requirepass=PASSWORD)
    factory.close()


@pytest.mark.parametrize("protocol", [None, 2, 3], ids=["default", "resp2", "resp3"])
@pytest.mark.parametrize("hiredis", [True, False], ids=["hiredis", "python"])
@pytest.mark.parametrize("mode", ["sync", "asyncio"])
@pytest.mark.parametrize("major", REDIS_PY_MAJORS, ids=[f"redis-py{m}" for m in REDIS_PY_MAJORS])
def test_redis_py(module_server, auth_server, major, mode, hiredis, protocol):
    prefix = f"rp:{major}:{mode}:{int(hiredis)}:{protocol}"
    cfg = {
        "port": module_server.port,
        "auth_port": auth_server.port,
        "password": PASSWORD,
        "major": major,
        "mode": mode,
        "hiredis": hiredis,
        "protocol": protocol,
        "prefix": prefix,
    }
    r = run([sys.executable, str(SCRIPT), json.dumps(cfg)], env=client_env(major, hiredis), timeout=50)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-4000:]
    found = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert found["version"].startswith(f"{major}.")
    assert found["hiredis"] is hiredis
    assert ("Hiredis" in found["parser"]) is hiredis
    assert found["proto"] == (protocol or (3 if major >= 8 else 2))
