"""ACL LOG: the last refused authentications, newest first, as Redis keeps them (``acl.c``, ``addACLLogEntry``).

kvd has one user, ``default``, whose password is ``requirepass``, so the only refusals are authentications: an
AUTH or HELLO AUTH with a wrong password or another user name. Each is an entry with Redis's fields: reason
``auth``, context (``toplevel``, or ``multi`` inside a transaction), object (the command's name as sent), the
user name tried, its age and the client's CLIENT LIST line. A refusal like one of the last ten (same reason,
context, object and user, within 60 seconds) bumps that entry's count and moves it to the front instead, so a
client retrying a wrong password leaves one entry. ``acllog-max-len`` entries are kept (Redis's default, 128).

Cost: nothing until an authentication fails.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

GROUPING_MS = 60_000  # Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA
MAX_LEN = 128  # Redis's acllog-max-len default
SCAN = 10  # entries compared with a new one (Redis's "toscan")


@dataclass(slots=True)
class AclLogEntry:
    entry_id: int
    context: str
    object: bytes
    username: bytes
    client_info: str
    created_ms: int
    updated_ms: int
    count: int = 1
    reason: str = "auth"

    def fields(self, now_ms: int) -> list[tuple[str, object]]:
        """ACL LOG's map, Redis 7.2's fields (7.0's first)."""
        return [
            ("count", self.count),
            ("reason", self.reason),
            ("context", self.context),
            ("object", self.object),
            ("username", self.username),
            ("age-seconds", (now_ms - self.updated_ms) / 1000),
            ("client-info", self.client_info),
            ("entry-id", self.entry_id),
            ("timestamp-created", self.created_ms),
            ("timestamp-last-updated", self.updated_ms),
        ]


class AclLog:
    def __init__(self, max_len: int = MAX_LEN) -> None:
        self.max_len = max_len
        self.entries: list[AclLogEntry] = []  # newest first
        self._next_id = 0

    def denied_auth(self, context: str, command: bytes, username: bytes, client_info: str) -> None:
        now = int(time.time() * 1000)
        for i, entry in enumerate(self.entries[:SCAN]):
            if (
                entry.context == context
                and entry.object == command
                and entry.username == username
                and now - entry.updated_ms < GROUPING_MS
            ):
                entry.count += 1
                entry.updated_ms = now
                entry.client_info = client_info
                self.entries.insert(0, self.entries.pop(i))
                return
        self.entries.insert(0, AclLogEntry(self._next_id, context, command, username, client_info, now, now))
        self._next_id += 1
        del self.entries[self.max_len :]

    def reset(self) -> None:
        self.entries.clear()
