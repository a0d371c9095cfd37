"""Replication helpers shared by the tests that make one server follow another."""

from __future__ import annotations

import time
from typing import Any


def follow(replica: Any, primary: Any) -> None:
    """REPLICAOF the primary, and wait until the link is up (both are ``ServerProcess``es)."""
    r = replica.client()
    assert r.replicaof(primary.host, primary.port)
    deadline = time.monotonic() + 30
    while r.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, replica.stderr_text()[-3000:]
        time.sleep(0.05)
