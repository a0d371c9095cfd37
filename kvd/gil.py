"""The interpreter's switch interval: how long a thread may keep the GIL while another thread waits for it.

kvd runs Python on more than one thread once persistence is on: the event loop, the segment writer, the
fsync thread, the maintenance thread and a small read pool (kvd/persist/log.py). Each of the others spends
most of its time in calls that release the GIL (``pwritev``, ``fdatasync``, xxh3 over a large value, ``unlink``)
and then needs the GIL back for a few microseconds of Python: the writer to report a batch, whose replies the
loop is holding. A thread that wants the GIL waits for the holder to give it up, and a holder that is busy
running Python gives it up only when the switch interval has passed since the request. CPython's default is
5 ms, so a writer returning from ``pwritev`` while the loop parses requests could wait up to 5 ms to report a
write of 256 KiB that took 50 us, and the clients waiting for those replies with it.

kvd sets 0.2 ms (INFO server ``python_switch_interval_us``). The cost is a GIL hand-over (a futex wake, some
cache) each time a waiting thread's 0.2 ms run out, only while two threads both want to run Python; with
persistence off the loop is usually the only Python thread and nothing changes (the shared-memory copies of
``KVD.GETINTO``/``KVD.SETFROM`` and DEBUG DIGEST's hashing run on threads of their own, mostly outside the
GIL too). Measured with ``appendfsync everysec``
(kvd at 5 / 1 / 0.5 / 0.2 ms and redis-server side by side, alternating rounds of 4 s, raw RESP clients;
redis-benchmark ``-d 64 -c 50 -r 100000``):

* SET 256 KiB, 1 client, 3 rounds: 2365-2708 / 2373-2598 / - / 2716-2767 SET/s (redis-server 2965-3145);
* SET 256 KiB, 4 clients: 3067-3464 / 3175-3466 / - / 3485-3529 (redis-server 3598-3714);
* SET 1 MiB, 4 clients: 833-929 / - / 831-1056 / 905-958 (redis-server 835-1019);
* redis-benchmark SET ``-P 16``, 2 rounds: 115.1-116.8k / 121.1-125.1k / - / 121.3-122.1k req/s; ``-P 1``
  49.5-52.8k at every setting (the writer thread is rarely used: small batches are written on the loop).
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL = 0.0002  # seconds; CPython's default is 0.005


def tune_switch_interval(seconds: float = SWITCH_INTERVAL) -> None:
    """Set the interpreter-wide switch interval. Called once by the daemon at start-up (kvd/cli.py), never on
    import: a process that embeds kvd's modules (the tests, the benchmarks) keeps its own setting."""
    sys.setswitchinterval(seconds)
