"""Which arguments of a request are secrets, hidden wherever kvd shows a request back (MONITOR, SLOWLOG).

Redis redacts the same positions (``redactClientCommandArgument``): everything after AUTH, the user name and
password after HELLO's AUTH option and after MIGRATE's AUTH and AUTH2, and the value of a sensitive CONFIG SET
key: ``requirepass`` and ``masterauth``, as Redis marks them.
"""

from __future__ import annotations

from collections.abc import Iterator
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
    if name == b"migrate":
        return _migrate(argv)
    return set()


_MIGRATE_VALUES = {b"auth": 1, b"auth2": 2}  # the values that follow each of MIGRATE's options


def migrate_options(argv: list[Any]) -> Iterator[tuple[int, bytes]]:
    """MIGRATE's options (``host port key db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw] [KEYS ...]``)
    as (position, lowercased word), stepping over AUTH's and AUTH2's values and ending at KEYS, the one walk
    Redis's ``migrateGetKeys`` and ``migrateCommand`` make. The command, COMMAND GETKEYS and the redaction all
    read the options through it, so a password spelled ``keys`` is a password to each of them."""
    i = 6
    while i < len(argv):
        word = bytes(argv[i]).lower()
        yield i, word
        if word == b"keys":
            return
        i += 1 + _MIGRATE_VALUES.get(word, 0)


def _migrate(argv: list[Any]) -> set[int]:
    secret: set[int] = set()
    for i, word in migrate_options(argv):
        secret.update(j for j in range(i + 1, i + 1 + _MIGRATE_VALUES.get(word, 0)) if j < len(argv))
    return secret


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
