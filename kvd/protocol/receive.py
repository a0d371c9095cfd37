"""Which receive path connections take: the C one (``kvd/protocol/_receive.c``) or the same steps in Python.

Two steps of receiving a large value run for every read or every request and decide nothing new, so they have a
C version, which pip builds where there is a compiler (``setup.py``):

* ``Receiver``: takes the reads in the middle of a large value without calling Python, keeping the socket's
  low-water mark on the rest, and reports them as one read once the value is in. Without it every such read runs
  the parser's ``get_buffer`` and the connection's ``buffer_updated``, and ``lowat.ReceiveLowWater`` keeps the
  mark.
* Landing: armed by the parser with the shape of the last large requests (``Receiver.land``), it allocates the
  landing buffer itself, checks the header as it arrives and takes the value's reads, and calls Python once with
  the whole request, or as soon as the header shows another shape. Without it the first read of every such
  request runs the parser's ``get_buffer`` and a pass of ``buffer_updated`` before the rest is handed over.
  Measured the same way as below (16 rounds, 256 KiB SETs): user time per SET 19.1 -> 17.0 us; at 1 MiB within
  the noise (32.9 against 33.3 us), throughput unchanged at both.
* ``match_header``: the check of a landing request's header (``kvd/protocol/landing.py``, whose
  ``match_header_python`` is the same steps in Python); the receiver runs the same C function.

Measured with one client sending SETs, server pinned to one core, in alternating rounds against the tree
before (AMD EPYC host, docs/benchmarks.md, "Where the time goes"): user time per 256 KiB SET 21.9 -> 16.7 us
(redis-server 8-9), per 1 MiB SET 33.8 -> 23.3 us, per 4 MiB SET 128.5 -> 85.0 us; system time, GETs and small
requests (redis-benchmark ``-P 1`` and ``-P 16``) unchanged.

``KVD_RECEIVE=python`` in the environment makes the daemon take the Python path even where the C one is built,
so its tests run both. ``INFO server`` shows the path as ``receive_path``.
"""

from __future__ import annotations

import os
from typing import Any

from .landing import match_header_python

Receiver: Any = None
match_header = match_header_python
if os.environ.get("KVD_RECEIVE") != "python":
    try:
        from ._receive import Receiver  # type: ignore[no-redef]
        from ._receive import match_header as match_header  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - no C compiler at install time
        pass

PATH = "python" if Receiver is None else "c"
