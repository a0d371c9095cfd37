"""KeyFilter (kvd/persist/keyfilter.py): never a false negative, few false positives, safe before it is sealed."""

from __future__ import annotations

import random

from kvd.persist.keyfilter import BITS_PER_KEY, KeyFilter


def _hashes(seed: int, n: int) -> list[int]:
    rnd = random.Random(seed)
    return [rnd.getrandbits(64) - (1 << 63) for _ in range(n)]  # signed, as hash() returns them


def test_every_added_key_is_found_and_few_others() -> None:
    added, others = _hashes(1, 50_000), _hashes(2, 50_000)
    f = KeyFilter(added[:10])
    for h in added[10:]:
        f.add(h)
    assert all(h in f for h in others), "an unsealed filter must answer yes"
    f.seal()
    assert all(h in f for h in added)
    rate = sum(h in f for h in others) / len(others)
    assert 0 < rate < 0.03, f"false positive rate {rate:.4f} (expected about 1.4 % at {BITS_PER_KEY} bits per key)"


def test_keys_added_after_seal_and_empty_filters() -> None:
    f = KeyFilter()
    f.seal()
    probes = _hashes(3, 1000)
    assert sum(h in f for h in probes) == 0, "an empty sealed filter holds nothing"
    late = _hashes(4, 100)
    for h in late:
        f.add(h)
    assert all(h in f for h in late)
    f.seal()  # a second seal changes nothing
    assert all(h in f for h in late)


def test_keys_of_real_hashes() -> None:
    keys = [b"chunk:%d" % i for i in range(5000)]
    f = KeyFilter(hash(k) for k in keys)
    f.seal()
    assert all(hash(k) in f for k in keys)
    assert sum(hash(b"other:%d" % i) in f for i in range(5000)) < 150
