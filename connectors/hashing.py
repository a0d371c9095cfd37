"""Chunk hashing and key naming for the kvd connector (plain Python: no vLLM, no torch).

A prompt is cut into chunks of ``chunk_size`` tokens. Chunk *i*'s hash is a chained digest::

    h_i = blake2b-128(domain ‖ h_{i-1} ‖ len ‖ tokens_i as uint32 little-endian ‖ extra_i)

with ``h_{-1}`` a fixed root. Chaining makes a chunk's key depend on everything before it, so equal keys mean
equal prefixes, and one key per chunk is enough to describe a whole prefix.

Why not Python's ``hash()`` (LMCache's default) or vLLM's ``request.block_hashes``: the builtin hash is salted
per process unless ``PYTHONHASHSEED`` is pinned, which silently breaks sharing between engines; vLLM's block
hashes depend on its configurable algorithm (the xxhash variants take a random seed) and are per *block*, not per
chunk. A self-contained digest over a fixed byte encoding gives the same keys in every process, on every host and
after every restart. blake2b is in the standard library and hashes ~1 GB/s, so hashing a 100k-token prompt
(400 kB) costs well under a millisecond.

Extra keys (LoRA adapter name, multimodal input hashes with their offsets, ``cache_salt``) are encoded with a
type tag and a length prefix so that no two different tuples encode to the same bytes.

The key also carries a *fingerprint* of everything that decides the bytes of a chunk's KV: model (and revision),
dtypes, the KV layout and per-layer block shape, block size, chunk size, tensor/pipeline-parallel rank and size,
and the key format version. Two models, layouts or TP shards can therefore never read each other's KV, even when
they share one kvd and one namespace::

    kvd:<namespace>:<fingerprint 16 hex>:<chunk hash 32 hex>

Only *full* chunks get keys. A partial last chunk is never saved: its KV would be keyed by fewer tokens than a
later, longer prompt sharing the same prefix, so it could only ever be hit by an exactly identical prompt, while
costing a write on every request; and because the chain's next hash depends on the full chunk, a partial value
would also need its own key scheme. LMCache made the same choice (``save_unfull_chunk: False``).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KEY_FORMAT_VERSION = 1
_DOMAIN = b"kvd-chunk-v1\x00"
ROOT_HASH = hashlib.blake2b(b"kvd-root-v1", digest_size=16).digest()
HASH_BYTES = 16
_UINT32_MAX = 0xFFFFFFFF

ExtraKey = str | int | bytes | tuple[Any, ...]


def _encode_extra(item: Any, out: bytearray) -> None:
    """Append an unambiguous encoding of ``item`` (type tag + length + bytes) to ``out``."""
    if item is None:
        out += b"N"
    elif isinstance(item, bool):  # before int: bool is an int subclass
        out += b"T" if item else b"F"
    elif isinstance(item, int):
        raw = str(item).encode()
        out += b"i" + struct.pack("<I", len(raw)) + raw
    elif isinstance(item, str):
        raw = item.encode("utf-8")
        out += b"s" + struct.pack("<I", len(raw)) + raw
    elif isinstance(item, bytes | bytearray | memoryview):
        raw = bytes(item)
        out += b"b" + struct.pack("<I", len(raw)) + raw
    elif isinstance(item, tuple | list):
        out += b"(" + struct.pack("<I", len(item))
        for sub in item:
            _encode_extra(sub, out)
    else:
        raise TypeError(f"unsupported extra key type {type(item).__name__}")


def encode_tokens(tokens: Sequence[int]) -> bytes:
    """Tokens as fixed-width uint32 little-endian (vocabularies are far below 2**32; anything else is a bug)."""
    try:
        return struct.pack(f"<{len(tokens)}I", *tokens)
    except struct.error as exc:
        bad = next((t for t in tokens if not 0 <= int(t) <= _UINT32_MAX), None)
        raise ValueError(f"token id {bad!r} does not fit in uint32") from exc


def chunk_hash(parent: bytes, tokens: Sequence[int], extra: Sequence[ExtraKey] = ()) -> bytes:
    """Hash of one chunk given its parent's hash: 16 raw bytes."""
    h = hashlib.blake2b(digest_size=HASH_BYTES)
    h.update(_DOMAIN)
    h.update(parent)
    h.update(struct.pack("<I", len(tokens)))
    h.update(encode_tokens(tokens))
    if extra:
        buf = bytearray()
        _encode_extra(tuple(extra), buf)
        h.update(b"x")
        h.update(buf)
    return h.digest()


def chunk_hashes(
    tokens: Sequence[int],
    chunk_size: int,
    extra_per_chunk: Sequence[Sequence[ExtraKey]] | None = None,
    *,
    start: int = 0,
    parent: bytes = ROOT_HASH,
) -> list[bytes]:
    """Chained hashes of every *full* chunk of ``tokens`` (the partial tail gets none).

    ``start``/``parent`` let a caller extend an already hashed prefix: chunks ``start..`` are hashed with
    ``parent`` as the hash of chunk ``start - 1``.
    """
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    out: list[bytes] = []
    n_full = len(tokens) // chunk_size
    for i in range(start, n_full):
        extra = extra_per_chunk[i] if extra_per_chunk is not None and i < len(extra_per_chunk) else ()
        parent = chunk_hash(parent, tokens[i * chunk_size : (i + 1) * chunk_size], extra)
        out.append(parent)
    return out


def fingerprint(layout: Mapping[str, Any]) -> str:
    """16 hex digits naming a model + KV layout; canonical JSON so dict order and process do not matter."""
    canon = json.dumps({"key_format": KEY_FORMAT_VERSION, **layout}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(canon.encode(), digest_size=8).hexdigest()


def layout_description(
    *,
    model: str,
    model_config: str = "",
    revision: str | None = None,
    dtype: str,
    cache_dtype: str,
    block_size: int,
    chunk_size: int,
    kv_layout: str,
    layers: Iterable[tuple[str, Sequence[int]]],
    tp_rank: int = 0,
    tp_size: int = 1,
    pp_rank: int = 0,
    pp_size: int = 1,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything that decides what a chunk's bytes mean, as a plain dict for :func:`fingerprint`.

    ``layers`` is (layer name, per-block shape) in the order the payload stores them. The scheduler and the
    workers must build the same description, so it is made only from configuration both sides know.
    """
    return {
        "model": model,
        "model_config": model_config,
        "revision": revision,
        "dtype": dtype,
        "cache_dtype": cache_dtype,
        "block_size": block_size,
        "chunk_size": chunk_size,
        "kv_layout": kv_layout,
        "layers": [[name, list(shape)] for name, shape in layers],
        "tp": [tp_rank, tp_size],
        "pp": [pp_rank, pp_size],
        "extra": dict(extra or {}),
    }


def make_key(namespace: str, fp: str, h: bytes) -> str:
    """``kvd:<namespace>:<fingerprint16>:<hash32>``."""
    if ":" in namespace or not namespace:
        raise ValueError("namespace must be non-empty and contain no ':'")
    return f"kvd:{namespace}:{fp}:{h.hex()}"


def make_keys(namespace: str, fp: str, hashes: Iterable[bytes]) -> list[str]:
    prefix = f"kvd:{namespace}:{fp}:"
    if ":" in namespace or not namespace:
        raise ValueError("namespace must be non-empty and contain no ':'")
    return [prefix + h.hex() for h in hashes]
