"""What names a chunk's KV in kvd: the weights and the model's configuration, never an alias, and for a prompt
given partly as embeddings, those embeddings. Engines that differ in any of them must miss each other's chunks
(a hit would load KV computed by another model, or for another prompt, and change the output); engines that
agree must hit.

Each test runs engines one after another against one server and compares greedy outputs with an engine without
the connector.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

from connectors.testing import Server

CHUNK = 128
_rng = random.Random(77)
P = [_rng.randrange(2, 2048) for _ in range(600)]  # 4 full chunks
HIDDEN = 256  # scripts/make_tiny_model.py's tiny size


def _conn(srv: Server, **extra: Any) -> dict[str, Any]:
    return {"url": srv.url, "chunk_size": CHUNK, "namespace": "keys", **extra}


def _run(
    engine, srv: Server, prompt: Any, connector: bool = True, extra: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """One engine, one prompt: its greedy output and the tokens the connector promised to load."""
    res = engine.run([{"name": "run", "prompts": [prompt]}], _conn(srv, **(extra or {})) if connector else None, **spec)
    phase = res["phases"][0]
    return {"output": phase["outputs"][0], "hit_tokens": phase["stats"].get("hit_tokens", 0)}


def test_a_served_name_does_not_name_the_weights(engine, store: Server, tiny_model: str, tmp_path: Path) -> None:
    """Two engines serving different weights under one served_model_name miss each other's chunks; model_id,
    which the operator sets to name the weights, shares them between paths."""
    other = tmp_path / "other-weights"  # the same files under another path: kvd cannot tell them from others
    shutil.copytree(tiny_model, other)
    baseline = _run(engine, store, P, connector=False)["output"]
    first = _run(engine, store, P, model=str(other), served_model_name="llm")
    assert first["hit_tokens"] == 0
    second = _run(engine, store, P, served_model_name="llm")
    assert second["hit_tokens"] == 0 and second["output"] == baseline
    named = {"model_id": "tiny-llama@test"}
    _run(engine, store, P, model=str(other), extra=named)
    shared = _run(engine, store, P, extra=named)
    assert shared["hit_tokens"] == 4 * CHUNK and shared["output"] == baseline


def test_a_changed_model_configuration_changes_the_keys(engine, store: Server) -> None:
    """hf_overrides changes the KV of the same weights (here RoPE's base): no hit across the change."""
    baseline = _run(engine, store, P, connector=False)["output"]
    _run(engine, store, P, hf_overrides={"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}})
    plain = _run(engine, store, P)
    assert plain["hit_tokens"] == 0 and plain["output"] == baseline
    again = _run(engine, store, P)
    assert again["hit_tokens"] == 4 * CHUNK and again["output"] == baseline


def test_prompts_that_differ_only_in_their_embeddings_do_not_share_chunks(engine, store: Server) -> None:
    """Mixed-mode prompts: the same token ids around positions given as embeddings. Their token ids there are
    placeholders, so the embeddings must be part of the chunk's name."""

    def mixed(seed: int) -> dict[str, Any]:
        return {"ids": P, "embeds": [150, 250], "seed": seed, "hidden": HIDDEN}

    spec = {"enable_prompt_embeds": True}
    baseline = _run(engine, store, mixed(2), connector=False, **spec)["output"]
    first = _run(engine, store, mixed(1), **spec)
    assert first["output"] != baseline  # the embeddings matter to the output
    other = _run(engine, store, mixed(2), **spec)
    assert other["hit_tokens"] == CHUNK  # chunk 0 ends before the embeddings: shared; the rest is not
    assert other["output"] == baseline
    same = _run(engine, store, mixed(2), **spec)
    assert same["hit_tokens"] == 4 * CHUNK and same["output"] == baseline
