"""Fault injection for the end-to-end tests: the real KvdConnector, plus an environment fault.

``EvictingKvdConnector`` deletes, right after each positive prefix look-up, the stored chunks from the third one
on, as an eviction racing between the scheduler's look-up and the worker's load would. ``SlowFetchKvdConnector``
makes each async load's fetch start a second late, as a slow network would, so that a request can end while its
fetch runs. ``StallingSaveKvdConnector`` has the server sleep (``DEBUG SLEEP``, from another connection) just as
the worker sends its first ``KVD.SETFROM``, as any stall of kvd longer than ``timeout_ms`` would: the save times
out on the client, and kvd carries it out when it wakes. Everything else is the real connector, so the tests
exercise its real paths.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from connectors.vllm import KvdConnector, RequestOps

STALL_S = 1.5


class EvictingKvdConnector(KvdConnector):
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        n, is_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        if n:
            t = self._reqs[request.request_id]
            doomed = t.keys_by_rank[0][2 : (num_computed_tokens + n) // self._s.chunk_size]
            if doomed:
                self._client.delete(doomed)
        return n, is_async


class SlowFetchKvdConnector(KvdConnector):
    def _start_fetch(self, r: RequestOps) -> None:
        if self._fetcher is not None:
            self._fetcher.submit(time.sleep, 1.0)  # one thread: the fetch waits behind it
        super()._start_fetch(r)


class StallingSaveKvdConnector(KvdConnector):
    def _init_worker(self, *args: Any) -> None:
        super()._init_worker(*args)
        client = self._client._redis
        send = client.execute_command
        stalled = threading.Event()

        def stall_first_setfrom(*args: Any, **options: Any) -> Any:
            if args and args[0] == "KVD.SETFROM" and not stalled.is_set():
                stalled.set()
                other = redis.Redis.from_url(self._s.url)
                threading.Thread(target=other.execute_command, args=("DEBUG", "SLEEP", STALL_S), daemon=True).start()
                time.sleep(0.2)  # the server is asleep before the request arrives
            return send(*args, **options)

        client.execute_command = stall_first_setfrom
