"""One valkey-glide (Python, asyncio) run in its own interpreter.

    python glide_client.py '{"port": 6379, "protocol": "RESP3", "password": null, "prefix": "g:..."}'

glide's handshake is HELLO 3 (or none for RESP2), CLIENT SETINFO x2 and INFO REPLICATION, which must report
role:master or glide finds "no primary node". Asserts everything itself; prints one JSON line; exit 0 = good.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from glide import (
    GlideClient,
    GlideClientConfiguration,
    NodeAddress,
    ProtocolVersion,
    ServerCredentials,
)

cfg = json.loads(sys.argv[1])


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


async def main() -> dict:
    config = GlideClientConfiguration(
        [NodeAddress("127.0.0.1", cfg["port"])],
        credentials=ServerCredentials(password=cfg["password"]) if cfg["password"] else None,
        protocol=getattr(ProtocolVersion, cfg["protocol"]),
        request_timeout=10_000,
    )
    client = await asyncio.wait_for(GlideClient.create(config), 30)
    try:
        p = cfg["prefix"]
        check(await client.ping() == b"PONG", "ping")
        check(await client.set(f"{p}:k", "v") == "OK", "set")
        check(await client.get(f"{p}:k") == b"v", "get")
        check(await client.get(f"{p}:missing") is None, "get miss")
        pairs = {f"{p}:{i}": f"value-{i}" for i in range(20)}
        check(await client.mset(pairs) == "OK", "mset")
        got = await client.mget([*pairs, f"{p}:missing"])
        check(got == [v.encode() for v in pairs.values()] + [None], f"mget {got!r}")
        big = os.urandom(4 << 20)
        check(await client.set(f"{p}:big", big) == "OK", "set 4 MiB")
        check(await client.get(f"{p}:big") == big, "get 4 MiB")
        check(await client.delete([f"{p}:big"]) == 1, "del")
        info = await client.info()
        check(b"role:master" in info, "INFO has role:master")
        return {"ok": True}
    finally:
        await client.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
