"""Error replies, byte-compatible with Redis 7.

Clients match on these strings: redis-py maps the first word to an exception class (``NOAUTH`` ->
AuthenticationError, ``LOADING`` -> BusyLoadingError, ...), redis-cli prints them verbatim and the Redis test
suite compares them byte for byte. Every constant here was checked against a real Redis 7 over a raw socket
(see ``../shared/notes/redis-compat.md`` §1.5). Messages never contain CR or LF: ``error()`` scrubs user text
the way Redis's ``sdsmapchars`` does, because hiredis rejects a simple string with a line break in it.
"""

from __future__ import annotations


class CommandError(Exception):
    """Raised by a command handler; the connection turns it into a ``-<message>`` reply."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProtocolError(Exception):
    """A malformed request. Redis replies ``-ERR Protocol error: ...`` and then closes the connection."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.message = f"ERR Protocol error: {detail}"


class DropConnection(Exception):
    """Close the connection without a reply (query buffer overflow, cross-protocol scripting attempts)."""


SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
AUTH_NOT_CONFIGURED = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
DB_OUT_OF_RANGE = "ERR DB index is out of range"
INVALID_CURSOR = "ERR invalid cursor"
NO_SUCH_KEY = "ERR no such key"
SAME_OBJECT = "ERR source and destination objects are the same"
STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
OFFSET_OUT_OF_RANGE = "ERR offset is out of range"
READONLY = "READONLY You can't write against a read only replica."
LOADING = "LOADING kvd is loading the dataset in memory"  # Redis says "Redis is"; clients read the first word
NOREPLICAS = "NOREPLICAS Not enough good replicas to write."
MASTERDOWN = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
OOM = "OOM command not allowed when used memory > 'maxmemory'."
MAX_CLIENTS = "ERR max number of clients reached"
NOPROTO = "NOPROTO unsupported protocol version"
HELLO_NOAUTH = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH "
    "<user> <pass> option can be used to authenticate the client and select the RESP protocol version at "
    "the same time"
)
DENIED = (
    "DENIED kvd is running in protected mode because protected mode is enabled and no password is set for "
    "the default user. In this mode connections are only accepted from the loopback interface. If you want "
    "to connect from external computers to kvd you may adopt one of the following solutions: 1) Set a "
    "password with 'requirepass' in kvd.toml or '--requirepass', and restart the server. 2) If you trust "
    "every host that can reach this port, start the server with '--protected-mode no'. NOTE: You only need "
    "to do one of the above things in order for the server to start accepting connections from the outside."
)


def scrub(text: str) -> str:
    """Replace CR and LF with spaces, as Redis does before echoing user input in an error."""
    return text.replace("\r", " ").replace("\n", " ")


def not_allowed(command: str, setting: str) -> str:
    """Redis's refusal of a command that a start-up setting keeps off (DEBUG, MODULE LOAD: ``CMD_PROTECTED``)."""
    return (
        f'ERR {command} command not allowed. If the {setting} option is set to "local", you can run it from a '
        "local connection, otherwise you need to set this option in the configuration file, and then restart the "
        "server."
    )


def wrong_arity(name: str) -> str:
    return f"ERR wrong number of arguments for '{scrub(name)}' command"


def invalid_expire(name: str) -> str:
    return f"ERR invalid expire time in '{name}' command"


def unknown_command(name: bytes, args: list[bytes] | list[bytearray]) -> str:
    """Redis's exact text: the name clipped to 128 bytes, then quoted arguments while the list is shorter than
    128 bytes, each clipped to what is left of those 128 (``commandCheckExistence`` in server.c). Redis formats
    them with ``%s``, so each stops at its first NUL byte."""
    shown = b""
    for arg in args:
        if len(shown) >= 128:
            break
        shown += b"'" + _before_nul(arg)[: 128 - len(shown)] + b"' "
    return f"ERR unknown command '{_clip(name)}', with args beginning with: {_text(shown)}"


def unknown_subcommand(sub: bytes, container: str) -> str:
    return f"ERR unknown subcommand '{_clip(sub)}'. Try {container.upper()} HELP."


def subcommand_syntax(sub: bytes, container: str) -> str:
    """Redis's ``addReplySubcommandSyntaxError``: a subcommand's own arguments do not fit it."""
    return f"ERR unknown subcommand or wrong number of arguments for '{_clip(sub)}'. Try {container.upper()} HELP."


def c_string(raw: bytes | bytearray | memoryview) -> str:
    """User input as Redis's ``%s`` prints it into an error: up to the first NUL byte."""
    return _text(_before_nul(raw))


def _before_nul(raw: bytes | bytearray | memoryview) -> bytes:
    raw = bytes(raw)
    end = raw.find(b"\0")
    return raw if end < 0 else raw[:end]


def _clip(raw: bytes | bytearray) -> str:
    return _text(_before_nul(raw)[:128])


def _text(raw: bytes) -> str:
    # surrogateescape keeps arbitrary bytes round-trippable when the reply is encoded back (see reply.py).
    return scrub(raw.decode("utf-8", "surrogateescape"))
