"""FAILOVER on a primary: hand the primary's role to one of its replicas without losing a write.

A planned failover (maintenance of the primary's host) must not drop a write a client was told was done, nor let
both servers take writes at once. Redis's steps (replication.c: failoverCommand, updateFailoverStatus), kept:

    waiting-for-sync      clients' writes are held, as by a CLIENT PAUSE WRITE without an end (CLIENT UNPAUSE
                          does not release them); the replicas are asked for their offsets (REPLCONF GETACK), and
                          the first online one whose acknowledged offset reaches the stream's end becomes the
                          target (or the one named with TO, once it has). After TIMEOUT ms without one the
                          failover is aborted, or with FORCE goes on to the named replica anyway.
    failover-in-progress  this server becomes a replica of the target and asks it ``PSYNC <replid> <offset+1>
                          FAILOVER``: the target becomes a primary and answers +CONTINUE (Redis or kvd, it keeps
                          this server's history as its second one), or +FULLRESYNC and a snapshot if it cannot
                          continue it. Then the held writes run, and are refused with
                          -READONLY, as on any replica: they never reach the old primary's data.

A target that refuses the PSYNC or cannot be reached aborts the failover: this server is a primary again, with the
data and history it had, and the held writes run. FAILOVER ABORT does the same at either step. INFO replication
shows the step as ``master_failover_state``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvd.server import Server

log = logging.getLogger("kvd.failover")

CHECK_SECONDS = 0.1  # between two looks at the replicas' offsets, unless an acknowledgement comes first


class Failover:
    """One FAILOVER, from the command to the end of the PSYNC that hands the role over (or its abort)."""

    def __init__(self, server: Server, target: tuple[str, int] | None, timeout_ms: int, force: bool) -> None:
        self.server = server
        self.target = target  # (host, listening port); None: the first replica that catches up
        self.force = force
        self.deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
        self.state = "waiting-for-sync"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.server.hold_writes_for_failover(True)
        self._task = asyncio.create_task(self._wait_for_sync())
        log.info("FAILOVER requested to %s", self._where())

    async def _wait_for_sync(self) -> None:
        feed = self.server.replication
        feed.request_acks()
        while self.state == "waiting-for-sync":
            feed.flush_now()
            synced = self._synced_replica()
            if synced is not None:
                log.info("failover target %s:%d is synced, failing over", *synced)
                self._hand_over(synced)
                return
            if self.deadline is not None and time.monotonic() >= self.deadline:
                if self.force and self.target is not None:
                    log.info("FAILOVER to %s:%d: timeout exceeded, failing over", *self.target)
                    self._hand_over(self.target)
                else:
                    self.abort("Replica never caught up before timeout")
                return
            await feed.wait_ack(CHECK_SECONDS)

    def _synced_replica(self) -> tuple[str, int] | None:
        """An online replica (the named one, if any) that has acknowledged the whole stream, as Redis looks."""
        feed = self.server.replication
        for replica in feed.replicas:
            address = (replica.host, replica.client.sync_listening_port)
            if self.target is not None and address != self.target:
                continue
            if replica.state == "online" and replica.ack_offset >= feed.offset:
                return address
        return None

    def _hand_over(self, target: tuple[str, int]) -> None:
        self.state = "failover-in-progress"
        self.target = target
        feed = self.server.replication
        feed.flush_now()
        # The history this server continues as a replica is its own stream: the target has all of it.
        self.server.replicate_from(target[0], target[1], (feed.replid, feed.offset), failover=self)

    # -- the link's answer (kvd/replica.py) ---------------------------------------------------------------------

    def completed(self) -> None:
        """The target took the PSYNC ... FAILOVER: it is the primary, this server its replica."""
        log.info("FAILOVER to %s done: a replica from now on", self._where())
        self._end()

    def abort(self, reason: str) -> None:
        """FAILOVER ABORT, the timeout, or the target's refusal: a primary again, the held writes released."""
        if self.server.failover is not self:
            return
        log.warning("FAILOVER to %s aborted: %s", self._where(), reason)
        if self.state == "failover-in-progress":
            self.server.stop_replicating()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self._end()

    def _where(self) -> str:
        return f"{self.target[0]}:{self.target[1]}" if self.target else "any replica"

    def _end(self) -> None:
        self.state = "no-failover"
        if self.server.failover is self:
            self.server.failover = None
            self.server.hold_writes_for_failover(False)
