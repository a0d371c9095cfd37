"""CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO: client-side caching's commands (Redis's
``clientCommand``, ``networking.c``). What tracking does is in kvd/tracking.py; here are the options, their checks
in Redis's order and with its error texts, and the replies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.tracking import ClientTracking

from .args import option, parse_int
from .registry import LOADING, NOSCRIPT, STALE, command

if TYPE_CHECKING:
    from kvd.connection import Client

G = "connection"


def _overlap(a: bytes, b: bytes) -> bool:
    return a.startswith(b) or b.startswith(a)


@command(
    "tracking",
    -3,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.0.0",
    parent="client",
    complexity="O(1). Some options may introduce additional complexity.",
    summary="Controls server-assisted client-side caching for the connection.",
    usage="ON | OFF [REDIRECT client-id] [PREFIX prefix [PREFIX prefix ...]] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]",
)
def client_tracking(c: Client, argv: list[Any]) -> None:
    redirect = 0
    bcast = optin = optout = noloop = False
    prefixes: list[bytes] = []
    j = 3
    while j < len(argv):
        word = option(argv[j])
        more = j + 1 < len(argv)
        if word == b"redirect" and more:
            j += 1
            if redirect:
                raise CommandError("ERR A client can only redirect to a single other client")
            redirect = parse_int(argv[j])
            if redirect not in c.server.clients:
                raise CommandError("ERR The client ID you want redirect to does not exist")
        elif word == b"bcast":
            bcast = True
        elif word == b"optin":
            optin = True
        elif word == b"optout":
            optout = True
        elif word == b"noloop":
            noloop = True
        elif word == b"prefix" and more:
            j += 1
            prefixes.append(bytes(argv[j]))
        else:
            raise CommandError(errors.SYNTAX)
        j += 1
    switch = option(argv[2])
    if switch == b"off":
        if c.tracking is not None:
            c.server.client_tracking().disable(c)
        c.reply.ok()
        return
    if switch != b"on":
        raise CommandError(errors.SYNTAX)
    current = c.tracking
    if prefixes and not bcast:
        raise CommandError("ERR PREFIX option requires BCAST mode to be enabled")
    if current is not None and current.bcast != bcast:
        raise CommandError(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then "
            "re-enabling it with a different mode."
        )
    if bcast and (optin or optout):
        raise CommandError("ERR OPTIN and OPTOUT are not compatible with BCAST")
    if optin and optout:
        raise CommandError("ERR You can't specify both OPTIN mode and OPTOUT mode")
    if current is not None and ((optin and current.optout) or (optout and current.optin)):
        raise CommandError(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then "
            "re-enabling it with a different mode."
        )
    if bcast:
        _check_prefixes(prefixes, current.prefixes if current is not None else {})
    mode = ClientTracking(redirect, bcast, optin, optout, noloop)
    if current is not None:
        mode.caching = current.caching  # Redis keeps a CLIENT CACHING given just before
    c.server.client_tracking().enable(c, mode, prefixes)
    c.reply.ok()


def _check_prefixes(prefixes: list[bytes], existing: dict[bytes, None]) -> None:
    """Redis's ``checkPrefixCollisionsOrReply``: no two prefixes of one client may cover the same key."""
    for i, prefix in enumerate(prefixes):
        for old in existing:
            if _overlap(old, prefix):
                raise CommandError(
                    f"ERR Prefix '{errors.c_string(prefix)}' overlaps with an existing prefix "
                    f"'{errors.c_string(old)}'. Prefixes for a single client must not overlap."
                )
        for other in prefixes[i + 1 :]:
            if _overlap(prefix, other):
                raise CommandError(
                    f"ERR Prefix '{errors.c_string(prefix)}' overlaps with another provided prefix "
                    f"'{errors.c_string(other)}'. Prefixes for a single client must not overlap."
                )


@command(
    "caching",
    3,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.0.0",
    parent="client",
    summary="Instructs the server whether to track the keys in the next request.",
    usage="YES | NO",
)
def client_caching(c: Client, argv: list[Any]) -> None:
    mode = c.tracking
    if mode is None:
        raise CommandError(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode "
            "enabled"
        )
    answer = option(argv[2])
    if answer == b"yes":
        if not mode.optin:
            raise CommandError("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
    elif answer == b"no":
        if not mode.optout:
            raise CommandError("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
    else:
        raise CommandError(errors.SYNTAX)
    mode.caching = True
    c.reply.ok()


@command(
    "getredir",
    2,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.0.0",
    parent="client",
    summary="Returns the client ID to which the connection's tracking notifications are redirected.",
)
def client_getredir(c: Client, argv: list[Any]) -> None:
    c.reply.integer(c.tracking.redirect if c.tracking is not None else -1)


@command(
    "trackinginfo",
    2,
    f"{NOSCRIPT} {LOADING} {STALE}",
    group=G,
    since="6.2.0",
    parent="client",
    summary="Returns information about server-assisted client-side caching for the connection.",
)
def client_trackinginfo(c: Client, argv: list[Any]) -> None:
    mode = c.tracking
    r = c.reply
    r.map(3)
    r.bulk(b"flags")
    flags = [b"on", *mode.flags()] if mode is not None else [b"off"]
    r.set(len(flags))
    for flag in flags:
        r.bulk(flag)
    r.bulk(b"redirect")
    r.integer(mode.redirect if mode is not None else -1)
    r.bulk(b"prefixes")
    prefixes = sorted(mode.prefixes) if mode is not None else []  # Redis lists them from a radix tree: sorted
    r.array(len(prefixes))
    for prefix in prefixes:
        r.bulk(prefix)
