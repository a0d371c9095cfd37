"""The connector's options as vLLM hands them over (``kv_connector_extra_config``: JSON from the command line, so
a yes/no option may arrive as true/false or as text), parsed in the vLLM environment where the connector runs."""

from __future__ import annotations

import json
from pathlib import Path

from test_paged_kv import _run_in_vllm_env

_PARSE = """
import json, sys
from types import SimpleNamespace
from connectors.vllm import _Settings

out = {}
for name, extra in json.loads(sys.argv[1]).items():
    config = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra),
        cache_config=SimpleNamespace(block_size=16),
        model_config=SimpleNamespace(served_model_name=None, model="m"),
    )
    s = _Settings.from_config(config)
    out[name] = [s.verify_checksum, s.shared_memory, s.async_load]
open(sys.argv[3], "w").write(json.dumps(out))  # sys.argv[2] is --json
"""


def test_yes_no_options_given_as_json_or_as_text(vllm_python: str, tmp_path: Path) -> None:
    cases = {
        "defaults": {},
        "json false": {"verify_checksum": False, "shared_memory": False, "async_load": False},
        "text false": {"verify_checksum": "false", "shared_memory": "no", "async_load": "no"},
        "text off, 0": {"verify_checksum": "off", "shared_memory": "0", "async_load": "0"},
        "text true": {"verify_checksum": "true", "shared_memory": "yes", "async_load": "true"},
    }
    got = _run_in_vllm_env(vllm_python, tmp_path, ["-c", _PARSE, json.dumps(cases)], tmp_path / "settings.json")
    assert got == {
        "defaults": [True, True, False],
        "json false": [False, False, False],
        "text false": [False, False, False],
        "text off, 0": [False, False, False],
        "text true": [True, True, True],
    }
