"""The latency monitor: LATENCY LATEST / HISTORY / GRAPH / DOCTOR / RESET, as Redis's ``latency.c``.

When ``latency-monitor-threshold`` is above 0 (milliseconds), every event that takes at least that long is
recorded under its event name: a time series of the last ``SAMPLES`` seconds that had one (the worst sample of
each second kept, as Redis does) and the all-time high. kvd records:

* ``command`` and ``fast-command``: a command's duration (what SLOWLOG measures), by the command's FAST flag;
* ``aof-write``: one write of a batch of records to the active segment (writer thread, or inline on the loop);
* ``aof-fsync-always``: the fdatasync of a batch with ``appendfsync always``;
* ``expire-cycle``: one pass of the active expiry sweep on the background tick (`hz`).

Samples arrive from the writer thread as well as from the event loop, so ``add`` takes a lock; nothing calls
it unless the threshold is on and reached. 0 turns the monitor off, as in Redis.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

SAMPLES = 160  # Redis's LATENCY_TS_LEN
GRAPH_COLUMNS = 80
GRAPH_ROWS = 4


@dataclass(slots=True)
class Series:
    samples: list[tuple[int, int]] = field(default_factory=list)  # (Unix second, ms), oldest first
    max_ms: int = 0


class LatencyMonitor:
    def __init__(self, threshold_ms: int) -> None:
        self.threshold_ms = threshold_ms
        self._events: dict[str, Series] = {}
        self._lock = threading.Lock()

    def add(self, event: str, seconds: float) -> None:
        """Record ``event`` if it took at least the threshold; callable from any thread."""
        threshold = self.threshold_ms
        ms = int(seconds * 1000)
        if not threshold or ms < threshold:
            return
        now = int(time.time())
        with self._lock:
            series = self._events.get(event)
            if series is None:
                series = self._events[event] = Series()
            series.max_ms = max(series.max_ms, ms)
            samples = series.samples
            if samples and samples[-1][0] == now:
                if ms > samples[-1][1]:
                    samples[-1] = (now, ms)
                return
            samples.append((now, ms))
            if len(samples) > SAMPLES:
                del samples[0]

    def latest(self) -> list[tuple[str, int, int, int]]:
        """(event, time of the last sample, its ms, the all-time high) for every event."""
        with self._lock:
            return [(name, *s.samples[-1], s.max_ms) for name, s in self._events.items()]

    def history(self, event: str) -> list[tuple[int, int]]:
        with self._lock:
            series = self._events.get(event)
            return list(series.samples) if series else []

    def reset(self, events: list[str] | None = None) -> int:
        """Forget ``events`` (matched without case, as Redis does), or all of them; the number forgotten."""
        with self._lock:
            if events is None:
                doomed = list(self._events)
            else:
                wanted = {e.lower() for e in events}
                doomed = [name for name in self._events if name.lower() in wanted]
            for name in doomed:
                del self._events[name]
            return len(doomed)

    def graph(self, event: str) -> str | None:
        """An ASCII chart of the event's samples, newest right; None without samples."""
        with self._lock:
            series = self._events.get(event)
            if series is None:
                return None
            samples, all_time = list(series.samples), series.max_ms
        values = [ms for _, ms in samples][-GRAPH_COLUMNS:]
        high, low = max(values), min(values)
        lines = [f"{event} - high {high} ms, low {low} ms (all time high {all_time} ms)", "-" * GRAPH_COLUMNS]
        span = max(high - low, 1)
        heights = [1 + (GRAPH_ROWS - 1) * (ms - low) // span for ms in values]
        for row in range(GRAPH_ROWS, 0, -1):
            lines.append("".join("#" if h >= row else " " for h in heights).rstrip())
        now = int(time.time())
        labels = [_ago(now - t) for t, _ in samples][-GRAPH_COLUMNS:]
        for i in range(max(map(len, labels))):  # each column's age, written downwards as Redis does
            lines.append("".join(label[i] if i < len(label) else " " for label in labels).rstrip())
        return "\n".join(lines) + "\n"

    def doctor(self, slowlog_us: int) -> str:
        """A report of every event: how often, how bad, and what to look at."""
        with self._lock:
            events = {name: (list(s.samples), s.max_ms) for name, s in self._events.items()}
        if not self.threshold_ms:
            return (
                "The latency monitor is off: there are no samples to analyse. Turn it on with "
                "CONFIG SET latency-monitor-threshold <milliseconds>.\n"
            )
        if not events:
            return f"No latency events reached {self.threshold_ms} ms since the monitor was started or reset.\n"
        now = int(time.time())
        out = [f"kvd recorded {len(events)} kind(s) of latency events of at least {self.threshold_ms} ms:\n"]
        for i, (name, (samples, max_ms)) in enumerate(sorted(events.items()), 1):
            values = [ms for _, ms in samples]
            avg = sum(values) // len(values)
            mad = sum(abs(avg - v) for v in values) // len(values)
            period = max(now - min(t for t, _ in samples), 1)
            out.append(
                f"{i}. {name}: {len(values)} latency spikes (average {avg}ms, mean deviation {mad}ms, "
                f"period {period / len(values):.2f} sec). Worst all time event {max_ms}ms.\n"
            )
        out.append("\nWhat to look at:\n")
        for name in sorted(events):
            out.append(f"- {name}: {_ADVICE.get(name, 'no advice for this event.')}\n")
        if slowlog_us < 0:
            out.append("- The slow log is off (slowlog-log-slower-than < 0): turn it on to see which commands.\n")
        return "".join(out)


_ADVICE = {
    "command": "SLOWLOG GET shows which commands and arguments; reads of cold values wait for the disk, and "
    "KEYS, SCAN with a large COUNT, FLUSHALL and MGET of many large values run long by design.",
    "fast-command": "an O(1) command ran long: the event loop was busy with other clients' large values, or the "
    "host is overloaded (two cores shared with the clients). Check INFO cpu and the host's load.",
    "aof-write": "writing the segment log was slow: the disk is busy or slow, or the kernel throttles dirty "
    "pages. A faster disk, or a smaller share of the write rate (fewer SETs of large values), helps.",
    "aof-fsync-always": "appendfsync always waits for the device on every batch; everysec acknowledges at write "
    "time and fsyncs once a second, at the cost of up to ~1 s of writes on power loss.",
    "expire-cycle": "many keys expired at once; spread their TTLs so they do not expire together.",
}


def _ago(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
