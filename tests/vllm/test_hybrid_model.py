"""A hybrid model through the connector: Gemma-style interleaved attention, every other layer seeing only the
last 64 tokens (scripts/make_tiny_model.py ``--size tiny-sliding``).

vLLM turns its hybrid KV cache manager off when the KV connector does not declare ``SupportsHMA`` (and on CPUs
always): the windowed layers then keep every block, like the global ones, in the one KV cache group that the
connector saves and loads (docs/connector.md, "Models"). This checks that with a real engine: the model is hybrid
to vLLM, the connector stays enabled, loaded KV gives the outputs of recomputing, and noise in it changes them.
"""

from __future__ import annotations

import random
from typing import Any

from connectors.testing import Server

CHUNK = 128
_rng = random.Random(77)
A = [_rng.randrange(2, 2048) for _ in range(700)]  # 5 full chunks; the tail is computed
B = A[:400] + [_rng.randrange(2, 2048) for _ in range(300)]  # shares 3 full chunks with A


def _conn(srv: Server) -> dict[str, Any]:
    return {"url": srv.url, "chunk_size": CHUNK, "namespace": "hybrid"}


def test_a_sliding_window_model_loads_what_it_would_compute(make_sliding_engine, store: Server, tmp_path) -> None:
    engine = make_sliding_engine(tmp_path)
    base = engine.run([{"name": "A", "prompts": [A]}, {"name": "B", "prompts": [B]}], connector=None)
    expected = {ph["name"]: ph["outputs"] for ph in base["phases"]}

    cold = engine.run([{"name": "cold", "prompts": [A]}], _conn(store))
    assert "Hybrid KV cache manager is disabled for this hybrid model" in cold["log"]  # two kinds of layers
    assert "KV cache groups; disabled" not in cold["log"]
    ph = cold["phases"][0]
    assert ph["outputs"] == expected["A"]
    assert ph["stats"]["saved_chunks"] == 5

    warm = engine.run(
        [
            {"name": "full", "prompts": [A]},
            {"name": "partial", "prompts": [B]},
            {"name": "noise", "prompts": [A], "before": [{"op": "noise", "url": store.url, "prompt": A}]},
        ],
        _conn(store),
    )
    full, partial, noise = warm["phases"]
    assert full["outputs"] == expected["A"]
    assert full["stats"]["hit_tokens"] == 640 and full["stats"].get("load_errors", 0) == 0
    assert partial["outputs"] == expected["B"]
    assert partial["stats"]["hit_tokens"] - full["stats"]["hit_tokens"] == 384
    assert warm["noised"] == [5]
    assert noise["outputs"] != expected["A"]  # the loaded KV, windowed layers' included, is what the model uses
