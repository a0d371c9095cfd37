"""scripts/bench_python_cost.py, the in-process harness behind docs/benchmarks.md's Python-per-request numbers: its
landed-SET workload must time landed SETs (header copied, value not), never quietly something else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_python_cost as cost  # noqa: E402  (scripts/ is not a package)

from kvd.protocol import receive  # noqa: E402

SIZE = 256 << 10
pytestmark = pytest.mark.skipif(receive.PATH != "c", reason="kvd/protocol/_receive.c is not built: nothing lands")


async def test_the_landed_workload_runs_every_request_as_a_landed_set() -> None:
    # large() asserts that each timed request was counted in landed_sets and answered.
    assert await cost.large(SIZE, 50, False) > 0


async def test_header_only_delivery_refuses_a_request_that_would_not_land() -> None:
    server = cost.make_server()
    ((client, _transport),) = cost.connect(server, 1)
    first = cost.encode(b"SET", b"chunk:0", b"x" * SIZE)
    with pytest.raises(AssertionError, match="no landing buffer"):
        cost.deliver_header(client, first, SIZE)  # the first request of a shape is parsed, not landed


async def test_a_header_only_landing_stores_a_value_of_the_requests_size() -> None:
    server = cost.make_server()
    ((client, _transport),) = cost.connect(server, 1)
    value = b"x" * SIZE
    for k in range(3):  # two requests of one shape arm landing
        cost.deliver(client, cost.encode(b"SET", b"chunk:%d" % k, value))
    landed = server.stats.landed_sets
    cost.deliver_header(client, cost.encode(b"SET", b"chunk:9", value), SIZE)
    assert server.stats.landed_sets == landed + 1
    stored = server.keyspace.get(b"chunk:9")
    assert stored is not None and len(stored) == SIZE
