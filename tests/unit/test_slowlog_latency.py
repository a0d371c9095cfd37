"""The latency monitor's series, the slow log's bound and copies, and the per-command histogram's arithmetic."""

from __future__ import annotations

import threading

import pytest

from kvd.latency import SAMPLES, LatencyMonitor
from kvd.slowlog import SlowLog
from kvd.stats import CommandStats


def test_latency_samples_keep_the_worst_of_each_second_and_a_bounded_history(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr("kvd.latency.time.time", lambda: clock[0])
    mon = LatencyMonitor(threshold_ms=5)
    mon.add("command", 0.004)  # under the threshold: not recorded
    assert mon.latest() == []
    mon.add("command", 0.010)
    mon.add("command", 0.007)  # the same second: the worse one stays
    mon.add("command", 0.030)
    assert mon.history("command") == [(1_000_000, 30)]
    for i in range(1, SAMPLES + 10):
        clock[0] += 1
        mon.add("command", 0.006 + i / 1e6)
    history = mon.history("command")
    assert len(history) == SAMPLES and history[-1][0] == int(clock[0])
    assert mon.latest() == [("command", int(clock[0]), 6, 30)]  # the all-time high survives the window
    graph = mon.graph("command")
    assert graph is not None and graph.startswith("command - high 6 ms, low 6 ms (all time high 30 ms)\n")
    assert mon.graph("nosuch") is None
    mon.threshold_ms = 0
    mon.add("other", 10.0)  # off: nothing is recorded
    assert [row[0] for row in mon.latest()] == ["command"]
    assert "off" in mon.doctor(10_000)
    assert mon.reset(["COMMAND"]) == 1 and mon.latest() == []


def test_latency_monitor_takes_samples_from_threads():
    mon = LatencyMonitor(threshold_ms=1)
    threads = [threading.Thread(target=lambda: [mon.add("aof-write", 0.002) for _ in range(2000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ((event, _, ms, worst),) = mon.latest()
    assert (event, ms, worst) == ("aof-write", 2, 2)


def test_slowlog_copies_cuts_and_bounds():
    log = SlowLog(slower_than_us=100, max_len=2)
    value = bytearray(b"v" * 300)
    log.push([b"SET", b"k", value], 50_000, "127.0.0.1:1", b"")  # 50 us: under 100, not kept
    assert len(log) == 0
    log.push([b"SET", b"k", value], 200_000, "127.0.0.1:1", b"app")
    value[:3] = b"XYZ"  # the request's buffer is reused: the entry kept its own copy
    (entry,) = log.latest(-1)
    assert entry.args == [b"SET", b"k", b"v" * 128 + b"... (172 more bytes)"] and entry.duration_us == 200
    log.push([b"GET", b"a"], 300_000, "127.0.0.1:1", b"")
    log.push([b"GET", b"b"], 300_000, "127.0.0.1:1", b"")
    assert [e.args[1] for e in log.latest(-1)] == [b"b", b"a"]  # newest first, at most max_len
    log.configure(slower_than_us=100, max_len=1)
    assert [e.args[1] for e in log.latest(10)] == [b"b"]
    log.configure(slower_than_us=-1, max_len=1)
    log.push([b"GET", b"c"], 10**9, "127.0.0.1:1", b"")
    assert [e.args[1] for e in log.latest(10)] == [b"b"]


@pytest.mark.parametrize(
    ("durations_ns", "p50_range"),
    [([500] * 10, (0.0, 1.024)), ([3000] * 99 + [10**6], (2.048, 4.096))],
)
def test_command_histogram_percentiles_fall_in_their_bucket(durations_ns, p50_range):
    stat = CommandStats()
    for ns in durations_ns:
        stat.hist[(ns >> 10).bit_length()] += 1
    low, high = p50_range
    assert low <= stat.percentile_usec(50) <= high
    assert stat.percentile_usec(50) <= stat.percentile_usec(99) <= stat.percentile_usec(99.9)
    rows = stat.histogram_usec()
    assert rows[-1][1] == len(durations_ns)
    assert [usec for usec, _ in rows] == sorted(usec for usec, _ in rows)
