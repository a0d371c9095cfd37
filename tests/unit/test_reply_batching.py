"""When ReplyBatch writes a client's replies: at once for a lone client, at the end of the iteration for replies
the segment log's report releases (``together``), so those leave back to back."""

from __future__ import annotations

import asyncio

from kvd.connection import ReplyBatch
from kvd.stats import ServerStats


class Held:
    """Stands in for a Client: ReplyBatch only reads ``busy`` and calls ``flush_replies`` (the batch is what is
    tested here)."""

    def __init__(self) -> None:
        self.flushes = 0
        self.busy = False

    def flush_replies(self) -> None:
        self.flushes += 1


async def test_a_lone_client_is_flushed_at_once() -> None:
    batch = ReplyBatch(ServerStats())
    client = Held()
    batch.add(client)  # type: ignore[arg-type]
    assert client.flushes == 1


async def test_released_replies_leave_together_at_the_end_of_the_iteration() -> None:
    stats = ServerStats()
    batch = ReplyBatch(stats)
    clients = [Held() for _ in range(5)]
    for client in clients:
        batch.add(client, together=True)  # type: ignore[arg-type]
    assert [c.flushes for c in clients] == [0] * 5  # held, not written one by one between releases
    await asyncio.sleep(0)
    assert [c.flushes for c in clients] == [1] * 5
    assert stats.batched_replies == 5


async def test_a_client_that_began_another_batch_is_left_to_it() -> None:
    """Added, then busy again in the same iteration (a command awaiting the disk, or write replies held for the
    log): the batch must not write its output, which may hold a write reply the log has not confirmed; the end
    of that batch flushes it."""
    batch = ReplyBatch(ServerStats())
    idle, busy = Held(), Held()
    batch.add(idle, together=True)  # type: ignore[arg-type]
    batch.add(busy, together=True)  # type: ignore[arg-type]
    busy.busy = True
    await asyncio.sleep(0)
    assert (idle.flushes, busy.flushes) == (1, 0)
