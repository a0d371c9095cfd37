"""The receive low-water mark: wake up once a large value has arrived, not every time a piece of it does.

Over loopback a client's ``sendmsg`` of a 1 MiB SET reaches the server in pieces, and the event loop wakes for
each one: ``strace`` counted 4.6 ``epoll_wait`` + ``read`` pairs per 1 MiB SET, for kvd and for redis-server
alike. For kvd every wake-up also costs two Python callbacks (``get_buffer``, ``buffer_updated``), run with
caches the kernel's copy has just flushed.

Once the parser has read a large argument's header it knows exactly how many bytes are still missing. Linux
lets a TCP socket say so (``SO_RCVLOWAT``): ``epoll`` reports it readable only when that many bytes are queued
(or the peer closed, or an error is pending), and while fewer are queued the kernel ACKs at once so the sender
keeps sending. So the rest of the value arrives in one read. The mark goes back to 1 as soon as the argument is
complete, before the next request can be waited for.

How much to wait for: ``CHUNK`` (256 KiB) at a time while at least ``MIN`` (512 KiB) is missing, so that the
server copies one piece while the client is still copying the next and the two copies overlap on the two
cores; the last part of a value, under ``MIN``, is read as it arrives. Waiting costs the overlap at the end:
kvd copies a waited-for piece only after the client has copied all of it. That was worth it while every
wake-up ran Python; since the reads in the middle of a value are taken in C (``_receive.c``) a wake-up costs a
few microseconds, and for the end of a value the overlap is worth more (measured below, 2026-11-25).

Before the C receiver, measured against one client pinned to one core and the server to the other (Intel host, 24
rounds, medians; redis-server in the same rounds), a mark for all of what is missing against none: 256 KiB SET 65 ->
52 us of server CPU (Redis 52) and 8.0k -> 10.2k SET/s (Redis 8.6k); 1 MiB SET 165 -> 114 us (Redis 149), 3.3k ->
3.6k SET/s (Redis 3.4k). Waiting for all of a 4 MiB value cost throughput with one client (750 against 968 SET/s),
and so, on an AMD EPYC host without pinning, did waiting for all of a 1 MiB value rather than 256 KiB at a time (8
alternating rounds, medians: 2819 -> 3760 SET/s with one client, Redis 3678; 3527 -> 3690 with four; 4 MiB 873 ->
936; 512 KiB and 2 MiB within noise either way). 128 KiB steps were no better than 256 KiB, and 1 MiB pieces were
slower (the kernel also clamps the window to the mark when it grows the receive buffer).

With the C receiver (AMD EPYC host, ``scripts/bench_ab.py --op SET --rounds 24 --duration 0.5``, unpinned,
medians, redis-server in the same rounds), waiting only while 512 KiB or more is missing against the rule before
(the rest waited for once under 256 KiB, from 64 KiB missing): 256 KiB SET 0.80x -> 0.95x Redis with one client
(and 0.88x -> 0.95x in 30 rounds against no mark at all), 0.85x -> 0.87x with four; 1 MiB 0.98x -> 0.98x with
one, 1.14x -> 1.08x with four (rounds spread 1.5k-3.1k SET/s); 4 MiB 1.03x -> 1.04x. No mark at all lost at 2
and 4 MiB (1.00x -> 0.91x, 1.03x -> 0.95x): there the wake-ups add up.

Where it is set: by the C receiver (``kvd/protocol/_receive.c``), which takes the reads in the middle of a
value itself and calls ``setsockopt`` on the connection's own descriptor (from C that is one plain system call;
the policy's two numbers, ``MIN`` and ``CHUNK``, come from here). This class does the same for the Python
receive path (``kvd/protocol/receive.py``: no C compiler at install time, or ``KVD_RECEIVE=python``).

In Python the mark is set through a socket object over a duplicate of the connection's descriptor (``os.dup``: the same
socket, a descriptor of our own), made the first time the connection sends a large value and closed with it.
The event loop owns the connection's descriptor, so a socket object over that one would have to be detached
around every call (uvloop's ``PseudoSocket.setsockopt`` makes one per call: 2.4 us), and the C library's
``setsockopt`` through ``ctypes`` costs 2.2 us in a loop but 7 us of user time per 256 KiB SET (two calls) in
the running server, where each call runs after the value's copy has flushed the caches ctypes' type machinery
lives in (``perf`` with CPython 3.12's ``-X perf``). ``socket.setsockopt`` on the duplicate: 0.6 us, the system
call included. One client, 256 KiB SETs, 10 alternating 1 s rounds (AMD EPYC host): 104.6 -> 96.3 us of server
CPU per SET, 7395 -> 7799 SET/s (redis-server 68.2 us, 10301/s); 1 MiB: 248.6 -> 240.9 us.
The cost of the duplicate: one more descriptor per connection that has sent a value of ``MIN`` bytes or more;
if there is none to be had (``EMFILE``), that connection reads without the mark, as before.

No ``setsockopt`` call for an argument under 512 KiB; for a larger one, one per 256 KiB the mark waits for (perhaps
one more after a read the event loop makes on its own) and one to reset it; none for small requests, which pay only
the check (about 0.1 us per read). Not used for TLS (the socket carries ciphertext the TLS layer may already have
buffered, so the count would be wrong) nor for Unix sockets (whose ``poll`` ignores the mark)."""

from __future__ import annotations

import os
import socket

MIN = 512 * 1024  # below this much missing, read as it arrives (the copies of a value's end overlap)
CHUNK = 256 * 1024  # wait for at most this much at a time (so the copies of client and server overlap)
_SUPPORTED = hasattr(socket, "SO_RCVLOWAT")


class ReceiveLowWater:
    """``SO_RCVLOWAT`` of one TCP connection, following what the large argument in progress still misses."""

    __slots__ = ("_fd", "_mark", "_sock")

    def __init__(self, fd: int) -> None:
        self._fd = fd if _SUPPORTED else -1  # the connection's descriptor, duplicated on first use; -1: off
        self._mark = 1
        self._sock: socket.socket | None = None

    def follow(self, missing: int) -> None:
        """Set the mark for ``missing`` bytes still to come (0: none); a system call only when it changes."""
        mark = min(missing, CHUNK) if missing >= MIN else 1
        if mark == self._mark or self._fd < 0:
            return
        try:
            sock = self._sock
            if sock is None:
                sock = self._sock = socket.socket(fileno=os.dup(self._fd))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
        except OSError:
            # No descriptor to spare, or the option is refused: reads wake up for every piece, as before.
            self.close()
            self._fd = -1
            return
        self._mark = mark

    def close(self) -> None:
        """Release the duplicate (the connection's own descriptor is the event loop's to close)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
