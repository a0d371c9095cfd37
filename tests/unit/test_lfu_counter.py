"""kvd/store/lfu.py: Redis's logarithmic access counter, its decay, and the choice of a victim."""

from __future__ import annotations

from kvd.store.lfu import LFU_INIT, WINDOW, LfuCounter, LfuOrder, least_frequent
from kvd.store.lru import Entry, LruList


def test_a_new_or_lru_stamped_entry_reads_as_a_new_key() -> None:
    lfu = LfuCounter(minutes=100)
    assert lfu.counter(0) == LFU_INIT
    assert lfu.counter(1_795_000_000) == LFU_INIT  # an LRU stamp left by the other policy


def test_the_counter_grows_by_one_per_access_with_log_factor_0_and_stops_at_255() -> None:
    lfu = LfuCounter(log_factor=0, decay_time=0, minutes=7)
    state = 0
    for _ in range(10):
        state = lfu.touched(state)
    assert lfu.counter(state) == LFU_INIT + 10
    for _ in range(300):
        state = lfu.touched(state)
    assert lfu.counter(state) == 255


def test_the_first_access_always_counts_then_fewer_do() -> None:
    lfu = LfuCounter(log_factor=10, decay_time=0)
    state = lfu.touched(0)
    assert lfu.counter(state) == LFU_INIT + 1  # probability 1 / (0 * 10 + 1)
    for _ in range(2000):
        state = lfu.touched(state)
    assert LFU_INIT + 3 <= lfu.counter(state) < 40  # logarithmic: far fewer steps than accesses


def test_idle_minutes_decay_the_counter_across_the_16_bit_wrap() -> None:
    lfu = LfuCounter(decay_time=2, minutes=0xFFFF - 1)
    state = lfu.state(30)
    assert lfu.counter(state) == 30
    lfu.minutes = 3  # five minutes later, past the wrap, which Redis's LFUTimeElapsed counts one short: 4
    assert lfu.counter(state) == 30 - 4 // 2
    lfu.minutes = 0xFFFF - 1 + 100 - 0x10000
    assert lfu.counter(state) == 0  # never below zero
    assert LfuCounter(decay_time=0).counter(state) == 30  # 0: no decay


def test_the_victim_is_the_oldest_value_not_read_since_written_and_read_ones_go_round() -> None:
    lfu = LfuCounter(decay_time=0)
    order = LruList()
    order.__class__ = LfuOrder
    read = [Entry(b"read%d" % i, b"v", 0, None, 0) for i in range(3)]
    once = [Entry(b"once%d" % i, b"v", 0, None, 0) for i in range(3)]
    for n, entry in enumerate(read):
        entry.atime = lfu.state(LFU_INIT + 1 + n)
        order.append(entry)
    for entry in once:
        entry.atime = lfu.state(LFU_INIT)
        order.append(entry)
    assert [e.atime for e in order] == [e.atime for e in read + once]  # linking kept the states
    assert least_frequent(order, lfu) is once[0]
    assert list(order) == [*once, *read]  # the read ones went round to the recent end, counters unchanged
    assert [lfu.counter(e.atime) for e in read] == [6, 7, 8]


def test_when_every_value_was_read_the_least_frequent_of_a_window_goes() -> None:
    lfu = LfuCounter(decay_time=0)
    order = LruList()
    order.__class__ = LfuOrder
    entries = [Entry(b"k%d" % i, b"v", 0, None, 0) for i in range(WINDOW + 4)]
    for n, entry in enumerate(entries):
        entry.atime = lfu.state(50 - n if n < WINDOW else 1)  # the four rarest are past the window
        order.append(entry)
    assert least_frequent(order, lfu) is entries[WINDOW - 1]
    assert least_frequent(LruList(), lfu) is None


def test_the_clock_is_redis_s_minutes_modulo_2_16() -> None:
    lfu = LfuCounter(decay_time=1)
    lfu.set_clock(1_795_800_000.0)
    assert lfu.minutes == (1_795_800_000 // 60) & 0xFFFF
    assert lfu.counter(lfu.touched(0)) == LFU_INIT + 1  # an access read back in the same minute has not decayed


def test_a_key_written_under_lfu_decays_from_its_first_minute_if_never_read() -> None:
    from kvd.store.ram import RamTier

    ram = RamTier(1 << 20)
    lfu = LfuCounter(decay_time=1)
    ram.set_lfu(lfu)
    new, kept = Entry(b"new", b"v", 0, None, 0), Entry(b"kept", b"v", 0, None, 0)
    kept.atime = lfu.state(40)  # an overwrite carried its predecessor's frequency
    ram.admit(new)
    ram.admit(kept)
    assert lfu.counter(new.atime) == LFU_INIT and lfu.counter(kept.atime) == 40
    lfu.minutes = (lfu.minutes + 3) & 0xFFFF
    assert lfu.counter(new.atime) == LFU_INIT - 3 and lfu.counter(kept.atime) == 37
