"""Which arguments of a request are secrets, hidden wherever kvd shows a request back (MONITOR, SLOWLOG).

Redis redacts the same positions (``redactClientCommandArgument``): everything after AUTH, the user name and
password after HELLO's AUTH option, and the value of a sensitive CONFIG SET key: ``requirepass`` and
``masterauth``, as Redis marks them.
"""

from __future__ import annotations

from typing import Any

REDACTED = b"(redacted)"
SENSITIVE_CONFIG = frozenset({b"requirepass", b"masterauth"})


def secrets(argv: list[Any]) -> set[int]:
    """The positions of ``argv`` to show as ``(redacted)``."""
    name = bytes(argv[0]).lower()
    if name == b"auth":
        return set(range(1, len(argv)))
    if name == b"hello":
        return _hello(argv)
    if name == b"config" and len(argv) > 3 and bytes(argv[1]).lower() == b"set":
        return {i + 1 for i in range(2, len(argv) - 1, 2) if bytes(argv[i]).lower() in SENSITIVE_CONFIG}
    return set()


def _hello(argv: list[Any]) -> set[int]:
    secret, i = set(), 2  # HELLO protover [AUTH user pass] [SETNAME name], read as helloCommand reads it
    while i < len(argv):
        option = bytes(argv[i]).lower()
        if option == b"auth" and i + 2 < len(argv):
            secret |= {i + 1, i + 2}
            i += 3
        elif option == b"setname" and i + 1 < len(argv):
            i += 2
        else:
            break
    return secret
