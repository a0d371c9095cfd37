"""Chunk hashes and keys: deterministic across processes, and different whenever the KV bytes could differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from connectors import hashing

REPO = Path(__file__).resolve().parents[2]
TOKENS = [(i * 7919) % 32000 for i in range(1000)]

LAYOUT = dict(
    model="tiny-llama",
    dtype="float32",
    cache_dtype="auto",
    block_size=32,
    chunk_size=256,
    kv_layout="cpu/LBHNC",
    layers=[("model.layers.0.self_attn.attn", [32, 2, 64, 32768])],
    tp_rank=0,
    tp_size=1,
)

_CHILD = """
import json, sys
from connectors import hashing
tokens = json.loads(sys.argv[1])
layout = json.loads(sys.argv[2])
hashes = hashing.chunk_hashes(tokens, 256, [(("lora", "ad"), ("salt", "s"))])
fp = hashing.fingerprint(hashing.layout_description(**layout))
print(json.dumps(hashing.make_keys("ns", fp, hashes)))
"""


def _keys_in_child(seed: str) -> list[str]:
    env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(TOKENS), json.dumps(LAYOUT)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_same_keys_in_every_process_whatever_the_hash_seed() -> None:
    runs = [_keys_in_child(seed) for seed in ("0", "1", "12345", "random")]
    assert all(r == runs[0] for r in runs)
    assert len(runs[0]) == 3  # 1000 tokens = 3 full chunks of 256; the partial tail gets no key
    here = hashing.make_keys(
        "ns",
        hashing.fingerprint(hashing.layout_description(**LAYOUT)),
        hashing.chunk_hashes(TOKENS, 256, [(("lora", "ad"), ("salt", "s"))]),
    )
    assert here == runs[0]


def test_key_format() -> None:
    fp = hashing.fingerprint(hashing.layout_description(**LAYOUT))
    (key,) = hashing.make_keys("tenant-a", fp, hashing.chunk_hashes(TOKENS[:256], 256))
    prefix, ns, f, h = key.split(":")
    assert (prefix, ns, f) == ("kvd", "tenant-a", fp)
    assert len(fp) == 16 and len(h) == 32
    int(fp, 16), int(h, 16)
    with pytest.raises(ValueError):
        hashing.make_key("a:b", fp, b"\0" * 16)


def test_chain_depends_on_everything_before() -> None:
    a = hashing.chunk_hashes(TOKENS, 100)
    b_tokens = list(TOKENS)
    b_tokens[5] += 1  # change one token of chunk 0
    b = hashing.chunk_hashes(b_tokens, 100)
    assert all(x != y for x, y in zip(a, b, strict=True))
    c_tokens = list(TOKENS)
    c_tokens[450] += 1  # chunk 4: chunks 0-3 keep their keys, 4+ change
    c = hashing.chunk_hashes(c_tokens, 100)
    assert a[:4] == c[:4] and all(x != y for x, y in zip(a[4:], c[4:], strict=True))


def test_prefix_sharing_and_incremental_hashing() -> None:
    full = hashing.chunk_hashes(TOKENS, 128)
    assert hashing.chunk_hashes(TOKENS[:300], 128) == full[:2]
    assert hashing.chunk_hashes(TOKENS, 128, start=3, parent=full[2]) == full[3:]
    assert hashing.chunk_hashes(TOKENS[:127], 128) == []


def test_extra_keys_separate_tenants_and_adapters() -> None:
    plain = hashing.chunk_hashes(TOKENS, 256)
    variants = [
        [(("lora", "a"), ("salt", None))],
        [(("lora", "b"), ("salt", None))],
        [(("lora", None), ("salt", "tenant1"))],
        [(), (("mm", "img0", 10, 20),)],
        [(), (("mm", "img1", 10, 20),)],
        [(), (("mm", "img0", 11, 20),)],
    ]
    seen = {tuple(plain)}
    for extra in variants:
        hs = tuple(hashing.chunk_hashes(TOKENS, 256, extra))
        assert hs not in seen
        seen.add(hs)
    # The encoding is unambiguous: ("ab",) vs ("a", "b"), 1 vs "1"
    assert hashing.chunk_hash(b"", [1], ["ab"]) != hashing.chunk_hash(b"", [1], ["a", "b"])
    assert hashing.chunk_hash(b"", [1], [1]) != hashing.chunk_hash(b"", [1], ["1"])


def test_token_encoding_is_fixed_width() -> None:
    # [1, 256] and [256+1*2**8...] style collisions are impossible with fixed 4-byte tokens.
    assert hashing.chunk_hash(b"", [1, 2]) != hashing.chunk_hash(b"", [2, 1])
    assert hashing.chunk_hash(b"", [0x0102]) != hashing.chunk_hash(b"", [0x01, 0x02])
    with pytest.raises(ValueError):
        hashing.encode_tokens([-1])
    with pytest.raises(ValueError):
        hashing.encode_tokens([2**32])


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other-model"},
        {"revision": "v2"},
        {"dtype": "bfloat16"},
        {"cache_dtype": "fp8"},
        {"block_size": 128},
        {"chunk_size": 512},
        {"kv_layout": "cuda/NHD"},
        {"layers": [("model.layers.0.self_attn.attn", [32, 4, 64, 65536])]},
        {"tp_rank": 1, "tp_size": 2},
        {"tp_size": 2},
        {"pp_size": 2},
    ],
)
def test_fingerprint_changes_with_anything_that_changes_the_bytes(change: dict) -> None:
    base = hashing.fingerprint(hashing.layout_description(**LAYOUT))
    assert hashing.fingerprint(hashing.layout_description(**{**LAYOUT, **change})) != base


def test_fingerprint_ignores_dict_order() -> None:
    d1 = hashing.layout_description(**LAYOUT)
    d2 = dict(reversed(list(d1.items())))
    assert hashing.fingerprint(d1) == hashing.fingerprint(d2)
