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

How much to wait for (measured with one client pinned to one core and the server to the other, 24 rounds,
medians; redis-server in the same rounds):

* up to ``WHOLE`` (1 MiB) missing: all of it. 256 KiB SET 65 -> 52 us of server CPU (Redis 52) and 8.0k ->
  10.2k SET/s (Redis 8.6k); 1 MiB SET 165 -> 114 us (Redis 149), 3.3k -> 3.6k SET/s (Redis 3.4k).
* more than that: ``CHUNK`` (256 KiB) at a time, then the last ``WHOLE``. Waiting for a whole 4 MiB value
  cost throughput with one client: the server then copies only after the client has sent everything, where
  reading pieces overlaps the two copies on the two cores (1 MiB pieces were slower too: the kernel also clamps
  the window to the mark when it grows the receive buffer for it).

The mark is set through a socket object over a duplicate of the connection's descriptor (``os.dup``: the same
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

Two or three ``setsockopt`` calls per argument up to 1 MiB (set, perhaps lowered by a read the event loop
makes on its own, reset), one more per 256 KiB beyond; none for small requests, which pay only the check
(about 0.1 us per read). Not used for TLS (the socket carries ciphertext the TLS layer may already have
buffered, so the count would be wrong) nor for Unix sockets (whose ``poll`` ignores the mark)."""

from __future__ import annotations

import os
import socket

MIN = 64 * 1024  # below this much missing a wake-up saves too little to pay for two system calls
WHOLE = 1024 * 1024  # wait for all of what is missing up to this much
CHUNK = 256 * 1024  # beyond it, wake up for every this much (the copies of client and server overlap)
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
        mark = (missing if missing <= WHOLE else CHUNK) if missing >= MIN else 1
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
