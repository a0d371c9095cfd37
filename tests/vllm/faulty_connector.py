"""Fault injection for the end-to-end tests: the real KvdConnector, plus an environment fault.

``EvictingKvdConnector`` deletes, right after each positive prefix look-up, the stored chunks from the third one
on, as an eviction racing between the scheduler's look-up and the worker's load would. Everything else is the
real connector, so the test exercises its real load-error path.
"""

from __future__ import annotations

from typing import Any

from connectors.vllm import KvdConnector


class EvictingKvdConnector(KvdConnector):
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        n, is_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        if n:
            t = self._reqs[request.request_id]
            doomed = t.keys_by_rank[0][2 : (num_computed_tokens + n) // self._s.chunk_size]
            if doomed:
                self._client.delete(doomed)
        return n, is_async
