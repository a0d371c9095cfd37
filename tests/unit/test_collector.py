"""kvd.memory.tune_collector: what survives a young collection is frozen, so a full collection never walks the
keyspace again (its pause grew to seconds with millions of keys), while young cycles are still freed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kvd import memory


class Node:
    __slots__ = ("other", "payload")

    def __init__(self) -> None:
        self.other: Node | None = None
        self.payload = b"x"


@pytest.fixture
def tuned() -> Iterator[None]:
    memory.tune_collector()
    try:
        yield
    finally:
        gc.callbacks.remove(memory._freeze_survivors)
        gc.unfreeze()
        gc.collect()


def test_survivors_of_a_young_collection_are_frozen(tuned: None) -> None:
    keep = [Node() for _ in range(50_000)]  # a keyspace's worth of long-lived tracked objects
    gc.collect(1)
    assert gc.get_freeze_count() >= len(keep)
    walked: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            walked.append(sum(len(gc.get_objects(g)) for g in range(3)))

    gc.callbacks.append(count)
    try:
        gc.collect()  # a full collection now walks none of them
    finally:
        gc.callbacks.remove(count)
    assert walked and walked[0] < len(keep) // 10
    assert len(keep) == 50_000


def test_young_cycles_are_still_freed(tuned: None) -> None:
    gc.collect(1)  # freeze what the test run built so far
    frozen = gc.get_freeze_count()
    gc.disable()  # all of them wait for the one collection below
    try:
        for _ in range(1000):  # garbage cycles, as an exception's traceback makes
            a, b = Node(), Node()
            a.other, b.other = b, a
        del a, b
        assert gc.collect(1) >= 2000  # freed, not frozen by the collection that finds them
    finally:
        gc.enable()
    assert gc.get_freeze_count() - frozen < 100


def test_tuning_twice_installs_one_callback(tuned: None) -> None:
    memory.tune_collector()
    assert gc.callbacks.count(memory._freeze_survivors) == 1
