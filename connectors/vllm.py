"""``KvdConnector``: a vLLM v1 KV connector that keeps prompt-prefix KV in kvd (or any Redis-protocol server).

Use::

    KVTransferConfig(kv_connector="KvdConnector", kv_connector_module_path="connectors.vllm", kv_role="kv_both",
                     kv_connector_extra_config={"url": "redis://127.0.0.1:6380", "chunk_size": 256},
                     kv_load_failure_policy="recompute")

How the work is split (the same split as vLLM's own connectors):

* **Scheduler** (engine-core process). ``get_num_new_matched_tokens`` hashes the prompt into chunk keys
  (:mod:`connectors.hashing`) and asks kvd in *one* round trip how many leading chunks exist (``KVD.PREFIXLEN``,
  or pipelined ``EXISTS`` on plain Redis). The answer is chunk-aligned (so block-aligned), only counts tokens
  beyond vLLM's own prefix-cache hit, and always leaves at least one prompt token to compute. A slow or dead
  server is a miss after ``lookup_timeout_ms``. ``build_connector_meta`` then turns each step into a small
  picklable plan: which chunks to load into which blocks, and which chunks became fully computed this step and
  should be saved.
* **Worker** (each worker process). ``start_load_kv`` fetches all chunks of the step with batched ``MGET`` and
  copies them into the paged KV tensors *before* the forward pass (vLLM calls it first when a step has
  synchronous loads). With ``async_load`` the fetch runs on a thread while the engine serves other requests;
  ``get_finished`` copies what arrived into the request's blocks and reports it done (vLLM parks the request
  until then). ``wait_for_save`` runs after the forward: it gathers the blocks of each newly completed
  chunk into one buffer per value (header space + payload; the only copy out of the KV cache) and hands it to a
  background thread, which checksums, skips chunks kvd already has, and sends pipelined ``SET``s. The forward
  thread never waits on the network for a save; when the bounded queue is full a save is dropped (a future miss),
  not waited for.

The copies between the paged KV tensors and host buffers are :class:`connectors.paged_kv.PagedKV`'s (blocks as
opaque bytes along the block dimension found from the shape; on CUDA a stream each for saves and loads,
page-locked host buffers, one copy per value, and the host never waiting for the GPU); that module's docstring
has the details.

Failure policy: kvd down, a timeout, an evicted key, or a value that fails any header/checksum check is a miss.
A chunk that the scheduler promised but the worker could not load is reported through
``get_block_ids_with_load_errors``; with ``kv_load_failure_policy="recompute"`` vLLM recomputes from that block.
What the same step computed after it, over blocks the load left unfilled, is not saved; a value that failed a
check is deleted, and the scheduler plans the recomputed chunks' saves again. Shared memory named in a
``KVD.GETINTO``/``KVD.SETFROM`` that timed out is never reused: kvd may still carry the request out.
Nothing the server returns can change output except a value that passes the layout fingerprint, shape, dtype,
key hash and checksum checks. One warning per outage; vLLM never sees an exception from the store.

Counters (hit/miss tokens, loaded/saved bytes and time, errors) go to vLLM's connector stats (logged with its
periodic stats), to ``vllm.kvd`` log lines, to kvd's ``INFO connector`` via ``KVD.REPORT``, and to the
in-process :data:`STATS` (tests read it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import queue
import threading
import time
import urllib.parse
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

from connectors import codec, hashing, shm
from connectors.client import ClientConfig, KvdClient, LoadBuffers
from connectors.paged_kv import PagedKV
from connectors.shm import SharedBuffers

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

# A logger under "vllm." so that vLLM's logging configuration shows our INFO lines.
logger = logging.getLogger("vllm.kvd.connector")

_REPORT_INTERVAL_S = 1.0
_SAVE_BUFFERS_KEEP = 256 * 2**20  # bytes of sent save buffers kept for reuse
_SPARE_FETCH_BUFFERS = 2  # async loads' buffer sets kept for the next fetches (each up to load_buffer_mb)


# ---------------------------------------------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------------------------------------------


class _Counters:
    """Thread-safe monotonically increasing counters, with a 'since last take' view for reporting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total: dict[str, int] = defaultdict(int)
        self._unsent: dict[str, int] = defaultdict(int)
        self._unlogged: dict[str, int] = defaultdict(int)

    def add(self, **values: int) -> None:
        with self._lock:
            for k, v in values.items():
                if v:
                    self.total[k] += v
                    self._unsent[k] += v
                    self._unlogged[k] += v

    def take_unsent(self) -> dict[str, int]:
        with self._lock:
            out, self._unsent = dict(self._unsent), defaultdict(int)
        return out

    def take_unlogged(self) -> dict[str, int]:
        with self._lock:
            out, self._unlogged = dict(self._unlogged), defaultdict(int)
        return out

    def restore_unsent(self, values: dict[str, int]) -> None:
        with self._lock:
            for k, v in values.items():
                self._unsent[k] += v


#: Process-wide counters (both roles when vLLM runs in one process). Tests and tools read ``STATS.total``.
STATS = _Counters()


@dataclass
class KvdConnectorStats(KVConnectorStats):
    """Counters of one interval, shipped from workers to vLLM's stats logger."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        out: dict[str, int | float] = dict(self.data)
        if self.data.get("load_us"):
            out["load_MBps"] = round(self.data.get("loaded_bytes", 0) / self.data["load_us"], 1)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


# ---------------------------------------------------------------------------------------------------------------
# Configuration and keys
# ---------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Settings:
    url: str
    namespace: str
    chunk_size: int
    timeout_ms: int
    lookup_timeout_ms: int
    connect_timeout_ms: int
    retry_after_s: float
    save_queue_depth: int
    save_queue_max_bytes: int
    model_id: str
    verify_checksum: bool
    load_buffer_bytes: int
    shared_memory: bool
    async_load: bool

    @classmethod
    def from_config(cls, vllm_config: VllmConfig) -> _Settings:
        kvt = vllm_config.kv_transfer_config
        extra: dict[str, Any] = dict(kvt.kv_connector_extra_config or {}) if kvt else {}
        block_size = vllm_config.cache_config.block_size
        chunk_size = int(extra.get("chunk_size", 256))
        if chunk_size <= 0 or chunk_size % block_size:
            # A chunk must be whole blocks: loads and saves move blocks. Round up rather than fail start-up.
            fixed = max(block_size, -(-chunk_size // block_size) * block_size)
            logger.warning(
                "kvd: chunk_size %d is not a positive multiple of block_size %d; using %d",
                chunk_size,
                block_size,
                fixed,
            )
            chunk_size = fixed
        return cls(
            url=str(extra.get("url", "redis://127.0.0.1:6379")),
            namespace=str(extra.get("namespace", "default")),
            chunk_size=chunk_size,
            timeout_ms=int(extra.get("timeout_ms", 5000)),
            lookup_timeout_ms=int(extra.get("lookup_timeout_ms", 250)),
            connect_timeout_ms=int(extra.get("connect_timeout_ms", 500)),
            retry_after_s=float(extra.get("retry_after_s", 2.0)),
            save_queue_depth=int(extra.get("save_queue_depth", 64)),
            save_queue_max_bytes=int(extra.get("save_queue_max_mb", 1024)) * 2**20,
            # The weights' name: their path or hub id, or what the operator says names them on every host. Never
            # served_model_name, an alias that two different models may share.
            model_id=str(extra.get("model_id") or vllm_config.model_config.model),
            verify_checksum=_flag(extra.get("verify_checksum", True)),
            load_buffer_bytes=int(float(extra.get("load_buffer_mb", 256)) * 2**20),
            shared_memory=_flag(extra.get("shared_memory", True)),
            async_load=_flag(extra.get("async_load", False)),
        )


def _flag(value: Any) -> bool:
    """A yes/no option given as JSON true/false or as text ("false", "no", "0")."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "0", "off", "")
    return bool(value)


def _on_this_host(url: str) -> bool:
    """Whether ``url`` reaches a server on this host: a unix socket, or a loopback address."""
    if url.startswith("unix://"):
        return True
    host = urllib.parse.urlsplit(url).hostname or ""
    return host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")


def _key_layout(
    vllm_config: VllmConfig, kv_cache_config: KVCacheConfig | None, s: _Settings, tp_rank: int
) -> dict[str, Any]:
    """What decides a chunk's bytes, from configuration only (the scheduler has no KV tensors)."""
    mc = vllm_config.model_config
    cc = vllm_config.cache_config
    pc = vllm_config.parallel_config
    layers: list[tuple[str, list[int]]] = []
    groups: list[list[Any]] = []
    kv_layout = "unknown"
    if kv_cache_config is not None:
        kv_layout = str(kv_cache_config.kv_cache_layout)
        for g in kv_cache_config.kv_cache_groups:
            spec = g.kv_cache_spec
            per_block = [
                int(getattr(spec, "block_size", 0)),
                int(getattr(spec, "num_kv_heads", 0)),
                int(getattr(spec, "head_size", 0)),
                int(getattr(spec, "page_size_bytes", 0)),
            ]
            groups.append([type(spec).__name__, str(getattr(spec, "dtype", ""))])
            layers.extend((name, per_block) for name in g.layer_names)
    try:
        from vllm.platforms import current_platform

        device = str(current_platform.device_type)
    except Exception:  # pragma: no cover
        device = "unknown"
    return hashing.layout_description(
        model=s.model_id,
        model_config=_model_config_digest(vllm_config),
        revision=getattr(mc, "revision", None),
        dtype=str(mc.dtype),
        cache_dtype=str(cc.cache_dtype),
        block_size=int(cc.block_size),
        chunk_size=s.chunk_size,
        kv_layout=f"{device}/{kv_layout}",
        layers=layers,
        tp_rank=tp_rank,
        tp_size=int(pc.tensor_parallel_size),
        pp_rank=0,
        pp_size=int(pc.pipeline_parallel_size),
        extra={"groups": groups},
    )


def _model_config_digest(vllm_config: VllmConfig) -> str:
    """A digest of what, besides the weights, decides a layer's KV: the model's configuration as the engine uses
    it (after ``hf_overrides``: RoPE parameters, head counts, sliding windows), its quantization, and the layers
    whose KV cache keeps the model's dtype. Path-like and version fields are left out, so that one model loaded
    from different paths or by another transformers release keeps its keys."""
    mc = vllm_config.model_config
    cc = vllm_config.cache_config

    def stable(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: stable(v)
                for k, v in value.items()
                if not (isinstance(k, str) and (k.startswith("_") or k == "transformers_version"))
            }
        if isinstance(value, list | tuple):
            return [stable(v) for v in value]
        return value

    try:
        hf = stable(mc.hf_config.to_dict())
    except Exception:  # pragma: no cover - every vLLM model config has a transformers config
        hf = repr(mc.hf_config)
    described = {
        "hf_config": hf,
        "quantization": str(getattr(mc, "quantization", None)),
        "kv_cache_dtype_skip_layers": sorted(getattr(cc, "kv_cache_dtype_skip_layers", None) or []),
    }
    canon = json.dumps(described, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(canon.encode(), digest_size=16).hexdigest()


def _request_extras(request: Request, num_chunks: int, chunk_size: int) -> list[tuple[Any, ...]] | None:
    """Per-chunk extra hash inputs: LoRA name and cache_salt (chunk 0, the chain carries them on), multimodal
    inputs overlapping the chunk (identifier and offset within the chunk), and for a prompt given partly as
    embeddings, a digest of the chunk's embeddings and of which of its positions are token ids (its token ids
    there are placeholders; vLLM's block hashes take the same digest)."""
    lora = getattr(request, "lora_request", None)
    lora_name = getattr(lora, "lora_name", None) if lora is not None else None
    salt = getattr(request, "cache_salt", None)
    mm = getattr(request, "mm_features", None) or []
    embeds = getattr(request, "prompt_embeds", None)
    if lora_name is None and salt is None and not mm and embeds is None:
        return None
    extras: list[tuple[Any, ...]] = [() for _ in range(num_chunks)]
    if num_chunks:
        extras[0] = (("lora", lora_name), ("salt", salt))
    if embeds is not None:
        is_token = getattr(request, "prompt_is_token_ids", None)
        for c in range(num_chunks):
            lo, hi = c * chunk_size, (c + 1) * chunk_size
            part = embeds[lo:hi].detach().flatten().cpu().contiguous()
            digest = hashlib.sha256(part.view(torch.uint8).numpy().data).digest()
            mask = bytes(bool(x) for x in is_token[lo:hi]) if is_token is not None else None
            extras[c] = (*extras[c], ("embeds", str(part.dtype), digest, mask))
    for f in mm:
        pos = getattr(f, "mm_position", None)
        ident = getattr(f, "identifier", None) or getattr(f, "mm_hash", None)
        if pos is None or ident is None:
            continue
        start, length = int(pos.offset), int(pos.length)
        for c in range(start // chunk_size, min(num_chunks, (start + length - 1) // chunk_size + 1)):
            extras[c] = (*extras[c], ("mm", str(ident), start - c * chunk_size, length))
    return extras


# ---------------------------------------------------------------------------------------------------------------
# Scheduler -> worker metadata (picklable: plain lists and strings)
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ChunkOp:
    key: str
    chunk_hash: bytes
    block_ids: list[int]  # vLLM block ids of the chunk, in token order
    skip_blocks: int = 0  # loads: leading blocks already computed locally (not overwritten)


@dataclass
class RequestOps:
    req_id: str
    chunks: list[ChunkOp]
    background: bool = False  # an async load: vLLM waits for get_finished, the forward does not wait for it


@dataclass
class KvdConnectorMetadata(KVConnectorMetadata):
    loads: list[RequestOps] = field(default_factory=list)
    saves: list[RequestOps] = field(default_factory=list)


@dataclass
class _LoadTally:
    """What one ``start_load_kv`` loaded, and what it could not."""

    chunks: int = 0
    tokens: int = 0
    nbytes: int = 0
    failed: int = 0
    failed_reqs: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # keys whose values arrived and failed a check

    def add(self, other: _LoadTally) -> None:
        self.chunks += other.chunks
        self.tokens += other.tokens
        self.nbytes += other.nbytes
        self.failed += other.failed
        self.failed_reqs |= other.failed_reqs
        self.reasons += other.reasons
        self.damaged += other.damaged


@dataclass
class _Discard:
    """Keys whose values failed their checks when loaded: the saver thread deletes them."""

    keys: list[str]


@dataclass
class _Tracked:
    """Scheduler-side state of one request."""

    tokens: list[int]
    hashes: list[bytes]
    keys_by_rank: list[list[str]]
    block_ids: list[int] = field(default_factory=list)
    next_save_chunk: int = 0
    pending_load: tuple[int, int] | None = None  # (first token, token count)


# ---------------------------------------------------------------------------------------------------------------
# The connector
# ---------------------------------------------------------------------------------------------------------------


class KvdConnector(KVConnectorBase_V1):
    """Prefix KV cache in kvd. See the module docstring for the design."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._s = _Settings.from_config(vllm_config)
        self._block_size = int(vllm_config.cache_config.block_size)
        self._blocks_per_chunk = self._s.chunk_size // self._block_size
        self._tp_size = int(vllm_config.parallel_config.tensor_parallel_size)
        self._disabled = False
        if kv_cache_config is not None and len(kv_cache_config.kv_cache_groups) != 1:
            # Block ids are per group; one chunk of several groups is not supported (hybrid models).
            logger.warning("kvd connector: %d KV cache groups; disabled", len(kv_cache_config.kv_cache_groups))
            self._disabled = True
        if int(vllm_config.parallel_config.pipeline_parallel_size) > 1:
            # Each stage holds other layers, and the scheduler's look-up and plan know one key per TP rank: the
            # stages would write one key each (the first wins) and fail each other's layout checks. Off, not wasted.
            logger.warning("kvd connector: pipeline parallelism is not supported; disabled")
            self._disabled = True
        self._last_report = time.monotonic()
        if role == KVConnectorRole.SCHEDULER:
            self._init_scheduler(vllm_config, kv_cache_config)
        else:
            self._init_worker(vllm_config, kv_cache_config)

    @property
    def requires_kv_delivery(self) -> bool:
        # A best-effort cache: a dropped save is only a future miss, so preemption need not wait for it.
        return False

    # ===========================================================================================================
    # Scheduler side
    # ===========================================================================================================

    def _init_scheduler(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> None:
        self._client = KvdClient(
            ClientConfig(
                url=self._s.url,
                timeout_ms=self._s.lookup_timeout_ms,
                connect_timeout_ms=min(self._s.connect_timeout_ms, self._s.lookup_timeout_ms),
                retry_after_s=self._s.retry_after_s,
                max_connections=2,
            )
        )
        self._fps = [
            hashing.fingerprint(_key_layout(vllm_config, kv_cache_config, self._s, r)) for r in range(self._tp_size)
        ]
        self._reqs: dict[str, _Tracked] = {}
        self._background_loads: list[RequestOps] = []  # async loads planned since the last build_connector_meta
        logger.info(
            "kvd connector (scheduler): url=%s namespace=%s chunk_size=%d fingerprint=%s",
            self._client._safe_url(),
            self._s.namespace,
            self._s.chunk_size,
            ",".join(self._fps),
        )

    def _track(self, request: Request) -> _Tracked | None:
        t = self._reqs.get(request.request_id)
        if t is not None:
            return t
        tokens = request.prompt_token_ids
        if tokens is None:  # prompt embeddings: no token ids to key on
            return None
        tokens = list(tokens)
        n = len(tokens) // self._s.chunk_size
        hashes = hashing.chunk_hashes(tokens, self._s.chunk_size, _request_extras(request, n, self._s.chunk_size))
        keys = [hashing.make_keys(self._s.namespace, fp, hashes) for fp in self._fps]
        t = _Tracked(tokens=tokens, hashes=hashes, keys_by_rank=keys)
        self._reqs[request.request_id] = t
        return t

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        if self._disabled:
            return 0, False
        t = self._track(request)
        if t is None:
            return 0, False
        cs = self._s.chunk_size
        # Leave at least one prompt token to compute (vLLM needs logits for it).
        max_chunks = min(len(t.hashes), (len(t.tokens) - 1) // cs)
        first = num_computed_tokens // cs
        t.pending_load = None
        if max_chunks <= first:
            return 0, False
        start = time.perf_counter()
        found = self._client.prefix_len_multi([keys[first:max_chunks] for keys in t.keys_by_rank])
        lookup_us = int((time.perf_counter() - start) * 1e6)
        hit_end = (first + found) * cs
        ext = max(0, hit_end - num_computed_tokens)
        STATS.add(lookups=1, lookup_us=lookup_us, lookup_hit_tokens=ext)
        if ext == 0:
            return 0, False
        t.pending_load = (num_computed_tokens, ext)
        return ext, self._s.async_load

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        t = self._reqs.get(request.request_id)
        if t is None:
            return
        if num_external_tokens <= 0:
            t.pending_load = None
            return
        if t.pending_load is not None:
            t.pending_load = (t.pending_load[0], num_external_tokens)
            if self._s.async_load:
                # The request now waits (WAITING_FOR_REMOTE_KVS) with these blocks, and is not scheduled until
                # the worker reports the load finished: the plan goes out with the next step's metadata.
                # Even a plan without chunks goes: the worker's report of it is what lets the request go on.
                t.block_ids = list(blocks.get_block_ids()[0])
                ld = self._load_ops(request.request_id, t) or RequestOps(request.request_id, [])
                ld.background = True
                self._background_loads.append(ld)

    def _load_ops(self, req_id: str, t: _Tracked) -> RequestOps | None:
        if t.pending_load is None:
            return None
        start_tok, count = t.pending_load
        t.pending_load = None
        cs, bs, bpc = self._s.chunk_size, self._block_size, self._blocks_per_chunk
        end_tok = start_tok + count
        ops: list[ChunkOp] = []
        keys = t.keys_by_rank[0]
        for c in range(start_tok // cs, end_tok // cs):
            ids = t.block_ids[c * bpc : (c + 1) * bpc]
            if len(ids) < bpc:
                break
            skip = max(0, (start_tok - c * cs) // bs)
            ops.append(ChunkOp(keys[c], t.hashes[c], ids, skip))
        # Loaded chunks are in kvd already: never save them back.
        t.next_save_chunk = max(t.next_save_chunk, end_tok // cs)
        STATS.add(hit_tokens=count)
        return RequestOps(req_id, ops) if ops else None

    def _save_ops(self, req_id: str, t: _Tracked, computed_end: int) -> RequestOps | None:
        cs, bpc = self._s.chunk_size, self._blocks_per_chunk
        done = min(computed_end, len(t.tokens)) // cs
        ops: list[ChunkOp] = []
        keys = t.keys_by_rank[0]
        for c in range(t.next_save_chunk, min(done, len(t.hashes))):
            ids = t.block_ids[c * bpc : (c + 1) * bpc]
            if len(ids) < bpc:
                break
            ops.append(ChunkOp(keys[c], t.hashes[c], ids))
            t.next_save_chunk = c + 1
        return RequestOps(req_id, ops) if ops else None

    def _rewind_saves(self, t: _Tracked, num_computed: int) -> None:
        """Chunks counted as loaded that the engine computes again after all: their load failed, vLLM took its
        computed tokens back to the first failed block (kv_load_failure_policy="recompute"), and the recomputed
        chunks are saved (the worker deleted the damaged values they replace)."""
        t.next_save_chunk = min(t.next_save_chunk, num_computed // self._s.chunk_size)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = KvdConnectorMetadata()
        if self._disabled:
            return meta
        meta.loads, self._background_loads = self._background_loads, []
        nst = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            t = self._reqs.get(new.req_id)
            if t is None:
                continue
            t.block_ids = list(new.block_ids[0])
            if (ld := self._load_ops(new.req_id, t)) is not None:
                meta.loads.append(ld)
            self._rewind_saves(t, new.num_computed_tokens)  # after a failed async load
            # num_computed_tokens counts vLLM's local hit plus what we load: the rest is computed.
            STATS.add(miss_tokens=max(0, len(t.tokens) - new.num_computed_tokens))
            if (sv := self._save_ops(new.req_id, t, new.num_computed_tokens + nst.get(new.req_id, 0))) is not None:
                meta.saves.append(sv)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            t = self._reqs.get(req_id)
            if t is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                # After preemption the request got new blocks: the list replaces the old one.
                t.block_ids = list(new_ids[0]) if new_ids is not None else []
                if (ld := self._load_ops(req_id, t)) is not None:
                    meta.loads.append(ld)
            else:
                if new_ids is not None:
                    t.block_ids.extend(new_ids[0])
                self._rewind_saves(t, cached.num_computed_tokens[i])  # after a failed load
            computed_end = cached.num_computed_tokens[i] + nst.get(req_id, 0)
            if (sv := self._save_ops(req_id, t, computed_end)) is not None:
                meta.saves.append(sv)
        self._maybe_report()
        return meta

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        # Saves copy their blocks out during the step that computed them, so the blocks can be freed now.
        self._reqs.pop(request.request_id, None)
        return False, None

    def _maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < _REPORT_INTERVAL_S:
            return
        self._last_report = now
        sched_keys = ("lookups", "lookup_us", "lookup_hit_tokens", "hit_tokens", "miss_tokens")
        taken = STATS.take_unsent()
        mine = {k: v for k, v in taken.items() if k in sched_keys}
        rest = {k: v for k, v in taken.items() if k not in sched_keys}
        if rest:  # the worker side (same process in single-process mode) reports its own counters
            STATS.restore_unsent(rest)
        if mine and not self._client.report(mine) and self._client._has_report is not False:
            STATS.restore_unsent(mine)

    # ===========================================================================================================
    # Worker side
    # ===========================================================================================================

    def _init_worker(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> None:
        tp_rank = 0
        if self._tp_size > 1:
            try:
                from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

                tp_rank = int(get_tensor_model_parallel_rank())
            except Exception:  # pragma: no cover - TP groups are set up before connectors
                logger.warning("kvd connector: could not read the TP rank; using 0")
        self._tp_rank = tp_rank
        self._fp = hashing.fingerprint(_key_layout(vllm_config, kv_cache_config, self._s, tp_rank))
        self._rank_prefix0 = None
        if tp_rank != 0:
            # The scheduler writes rank-0 keys into the plan; this rank swaps in its own fingerprint.
            fp0 = hashing.fingerprint(_key_layout(vllm_config, kv_cache_config, self._s, 0))
            self._rank_prefix0 = (f"kvd:{self._s.namespace}:{fp0}:", f"kvd:{self._s.namespace}:{self._fp}:")
        self._num_blocks = int(kv_cache_config.num_blocks) if kv_cache_config is not None else 0
        # CUDA graphs of the KV copies (PagedKV) unless the engine runs without graphs, as vLLM's own are.
        self._cuda_graphs = not bool(getattr(vllm_config.model_config, "enforce_eager", False))
        self._client = KvdClient(
            ClientConfig(
                url=self._s.url,
                timeout_ms=self._s.timeout_ms,
                connect_timeout_ms=self._s.connect_timeout_ms,
                retry_after_s=self._s.retry_after_s,
            )
        )
        self._kv: PagedKV | None = None  # set by register_kv_caches
        self._load_errors: set[int] = set()
        self._failed_loads: set[str] = set()  # requests of this step whose synchronous load failed
        self._warned_load = False
        self._saves: queue.Queue[Any] = queue.Queue()
        # What the saver thread has yet to finish: chunks and bytes of queued batches (the save queue's bounds),
        # and queued items of any kind (flush waits for none).
        self._queue_state = threading.Condition()
        self._queued_chunks = 0
        self._queued_bytes = 0
        self._outstanding = 0
        self._stopping = False
        self._saver = threading.Thread(target=self._save_loop, name="kvd-save", daemon=True)
        self._saver.start()
        self._stats_interval: dict[str, int] = defaultdict(int)
        # Async loads (async_load): fetched one after another on a thread of their own while the engine runs
        # other requests, then copied into the KV cache by get_finished on the forward's thread (PagedKV's
        # copies are that thread's) and reported done. A fetch takes load buffers of its own when it starts;
        # they serve later fetches once a begin_load says the copies out of them are done (a few are kept).
        self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="kvd-fetch") if self._s.async_load else None
        self._fetching: dict[str, tuple[Future[tuple[list[Any], Any, bool]], RequestOps]] = {}
        self._ended: set[str] = set()  # requests that finished (aborted) while their fetch ran: nothing to copy
        self._landed_fetch_buffers: list[tuple[Any, bool]] = []  # (buffers, reusable) copied from since begin_load
        self._spare_fetch_buffers: deque[Any] = deque()  # taken by the fetch thread, returned by this one

    def _k(self, key: str) -> str:
        if self._rank_prefix0 is None:
            return key
        return self._rank_prefix0[1] + key[len(self._rank_prefix0[0]) :]

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        kv = PagedKV(
            kv_caches,
            num_blocks=self._num_blocks,
            block_size=self._block_size,
            blocks_per_chunk=self._blocks_per_chunk,
            cuda_graphs=self._cuda_graphs,
        )
        self._kv = kv
        self._hdr = codec.header_size(len(kv.value_shape))
        self._value_bytes = self._hdr + kv.payload_bytes
        # Loads land in buffers kept from one step to the next (pinned on CUDA, so the copies to the device start
        # from the received bytes): in shared memory that a kvd on this host fills itself (KVD.GETINTO, one copy
        # instead of the socket's two; connectors/shm.py), else received from the socket.
        shared = self._s.shared_memory and _on_this_host(self._s.url) and shm.available()
        self._load_buffers = self._new_load_buffers(shared, "loads")
        self._load_buffers_named = False  # named in a KVD.GETINTO that failed: replaced before the next load
        # Value buffers of sent saves, for the next gathers (a fresh 8 MiB tensor costs a page fault per 4 KiB
        # while the forward thread fills it: 2.3 against 0.7 ms per chunk). The oldest go past _SAVE_BUFFERS_KEEP.
        self._save_buffers: deque[torch.Tensor] = deque(maxlen=max(1, _SAVE_BUFFERS_KEEP // self._value_bytes))
        # With kvd on this host, the save queue lives in a shared file that kvd copies out itself (KVD.SETFROM):
        # a slot per chunk the queue may hold (save_queue_depth, save_queue_max_mb), allocated up front, handed
        # out and returned like the buffers above; a save that still finds none free (several steps' batches
        # queued) takes a buffer of its own and goes through the socket.
        self._save_shared: SharedBuffers | None = None
        self._free_save_slots: deque[int] = deque()
        self._retired_save_slots = 0  # see _retire_save_slots
        if self._s.shared_memory and _on_this_host(self._s.url) and shm.available():
            slots = max(1, min(self._s.save_queue_depth, self._s.save_queue_max_bytes // self._value_bytes))
            try:
                keep = slots * (-(-self._value_bytes // mmap.PAGESIZE) * mmap.PAGESIZE)  # whole pages per slot
                self._save_shared = SharedBuffers(self._value_bytes, keep_bytes=keep, wrap=kv.host_view)
                self._free_save_slots.extend(range(self._save_shared.capacity))
            except OSError as exc:
                logger.warning("kvd: no shared save buffers (%s); saves go through the socket", exc)
        desc = [self._fp, kv.describe(), str(kv.device.type)]
        self._layout_fp = hashlib.blake2b(repr(desc).encode(), digest_size=16).digest()
        logger.info(
            "kvd connector (worker tp%d): %d layers, block dim %d, chunk value %.2f MiB, copies %s, loads %s, "
            "saves %s, fingerprint %s, url %s",
            self._tp_rank,
            len(kv.layers),
            kv.layers[0].dim,
            self._value_bytes / 2**20,
            kv.launches,
            f"into shared memory {self._load_buffers.name}"
            if isinstance(self._load_buffers, SharedBuffers)
            else "through the socket",
            f"from shared memory {self._save_shared.name} ({self._save_shared.capacity} slots)"
            if self._save_shared is not None
            else "through the socket",
            self._fp,
            self._client._safe_url(),
        )

    def _load_buffer(self, size: int) -> tuple[torch.Tensor, memoryview]:
        assert self._kv is not None
        buf = self._kv.host_buffer(size)  # whatever it holds is received over before use
        return buf, memoryview(buf.numpy()).cast("B")

    # -- loads ----------------------------------------------------------------------------------------------------

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._connector_metadata
        kv = self._kv
        if not isinstance(meta, KvdConnectorMetadata) or not meta.loads or kv is None:
            return
        for r in meta.loads:
            if r.background:
                self._start_fetch(r)
        loads = [r for r in meta.loads if not r.background]
        if not loads:
            return
        start = time.perf_counter()
        ops = [(r.req_id, op) for r in loads for op in r.chunks]
        self._begin_load(kv)
        try:
            if self._load_buffers_named:
                # A KVD.GETINTO into them failed on the network: kvd may still write into them when it reads
                # that request. Their copies are done (begin_load): a new file takes their place.
                self._load_buffers_named = False
                self._load_buffers.close()
                self._load_buffers = self._new_load_buffers(True, "loads")
            self._load_buffers.trim()
            values, self._load_buffers_named = self._receive([self._k(op.key) for _, op in ops], self._load_buffers)
            tally = self._land(kv, ops, values, self._load_buffers)
            self._failed_loads = tally.failed_reqs
        finally:
            # Also after an unexpected error: the forward must wait for the copies already queued, and the next
            # load must wait for them before it receives into their buffers.
            kv.end_load()
        self._count_load(tally, start)

    def _begin_load(self, kv: PagedKV) -> None:
        """The last load's copies are done with the buffers they read, which the next fetches may now reuse
        (but not shared buffers that a failed KVD.GETINTO named: kvd may still write into those)."""
        kv.begin_load()
        for buffers, reusable in self._landed_fetch_buffers:
            if reusable and len(self._spare_fetch_buffers) < _SPARE_FETCH_BUFFERS:
                self._spare_fetch_buffers.append(buffers)
            elif isinstance(buffers, SharedBuffers):
                buffers.close()  # its /dev/shm file now, not when collected
        self._landed_fetch_buffers.clear()

    def _start_fetch(self, r: RequestOps) -> None:
        """An async load's values, received on the fetch thread into buffers of its own."""
        assert self._fetcher is not None  # the scheduler plans background loads only with async_load on
        self._fetching[r.req_id] = (self._fetcher.submit(self._fetch, [self._k(op.key) for op in r.chunks]), r)

    def _fetch(self, keys: list[str]) -> tuple[list[Any], Any, bool]:
        """On the fetch thread: the values of ``keys``, the buffers they are in, and whether those may be reused
        (not if a KVD.GETINTO naming them failed on the network)."""
        try:
            buffers = self._spare_fetch_buffers.pop()
        except IndexError:
            buffers = self._new_load_buffers(isinstance(self._load_buffers, SharedBuffers), "async loads", len(keys))
        buffers.trim()
        values, named = self._receive(keys, buffers)
        return values, buffers, not named

    def _receive(self, keys: list[str], buffers: LoadBuffers | SharedBuffers) -> tuple[list[Any], bool]:
        """The values of ``keys`` in ``buffers``, and whether kvd may still write into those: shared buffers that a
        KVD.GETINTO which failed on the network named (kvd carries it out when it reads it)."""
        failures = self._client.failures
        values = self._client.get_many(keys, self._value_bytes, into=buffers)
        return values, isinstance(buffers, SharedBuffers) and self._client.failures != failures

    def _new_load_buffers(self, shared: bool, what: str, count: int | None = None) -> LoadBuffers | SharedBuffers:
        """Buffers that loads are received into and kept from one to the next (``load_buffer_mb``): where
        ``shared``, a shared-memory file that kvd fills itself, else host memory (pinned on CUDA); without room in
        /dev/shm, a warning naming ``what`` and the host memory. ``count``: the values of the one load they are
        made for, which is what a shared file allocates at first (an async fetch's: several may be in flight),
        instead of ``load_buffer_mb``; host buffers are allocated as values arrive either way."""
        keep = self._s.load_buffer_bytes
        if shared:
            assert self._kv is not None
            try:  # a slot of value + CRLF: an MGET fallback receives each value with its line end
                return SharedBuffers(
                    self._value_bytes + 2,
                    keep_bytes=keep,
                    wrap=self._kv.host_view,
                    allocate=self._load_buffer,
                    count=count,
                )
            except OSError as exc:
                logger.warning("kvd: no shared load buffers (%s); %s come through the socket", exc, what)
        return LoadBuffers(self._load_buffer, keep_bytes=keep)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        """The async loads whose values arrived, copied into their blocks now and reported done (or failed: their
        blocks go to ``get_block_ids_with_load_errors`` in the same step, and vLLM recomputes them)."""
        if not self._fetching:
            return None, None
        self._ended |= finished_req_ids & self._fetching.keys()
        done = [req_id for req_id, (future, _) in self._fetching.items() if future.done()]
        if not done:
            return None, None
        kv = self._kv
        assert kv is not None  # fetches start in start_load_kv, after register_kv_caches
        start = time.perf_counter()
        tally = _LoadTally()
        self._begin_load(kv)
        try:
            for req_id in done:
                future, r = self._fetching.pop(req_id)
                try:
                    values, buffers, reusable = future.result()
                except Exception as exc:  # get_many turns network errors into misses; anything else is a bug
                    logger.warning("kvd: async load of %s failed: %r", req_id, exc)
                    values, buffers, reusable = [None] * len(r.chunks), None, False
                if buffers is not None:
                    self._landed_fetch_buffers.append((buffers, reusable))
                if req_id in self._ended:  # its blocks are freed once it is reported: nothing to copy
                    self._ended.discard(req_id)
                    continue
                tally.add(self._land(kv, [(req_id, op) for op in r.chunks], values, buffers))
        finally:
            kv.end_load()
        self._count_load(tally, start)
        STATS.add(async_loads=len(done))
        return None, set(done)

    def _count_load(self, tally: _LoadTally, start: float) -> None:
        elapsed_us = int((time.perf_counter() - start) * 1e6)
        STATS.add(
            loaded_chunks=tally.chunks,
            loaded_tokens=tally.tokens,
            loaded_bytes=tally.nbytes,
            load_us=elapsed_us,
            load_errors=tally.failed,
            damaged_chunks=len(tally.damaged),
        )
        if tally.damaged:
            # A damaged value would be counted by every look-up and fail every load, and the recomputed chunk
            # could never replace it (saves skip keys that exist): it goes, on the saver thread, ahead of the
            # saves of the recomputed chunks (one queue, in order).
            self._enqueue(_Discard(tally.damaged))
        if tally.reasons:
            if not self._warned_load:
                self._warned_load = True
                logger.warning(
                    "kvd: %d chunk(s) of %d request(s) could not be loaded (%s); vLLM recomputes them",
                    tally.failed,
                    len(tally.failed_reqs),
                    tally.reasons[0],
                )
            else:
                logger.debug("kvd: load failures: %s", tally.reasons)
        logger.debug("kvd: loaded %d tokens (%d bytes) in %d us", tally.tokens, tally.nbytes, elapsed_us)

    def _land(self, kv: PagedKV, ops: list[tuple[str, ChunkOp]], values: list[Any], buffers: Any) -> _LoadTally:
        """Verify each received value and copy it into its blocks. A value that is missing or fails a check is a
        load error, and so is every later chunk of its request: vLLM recomputes from the first failed block."""
        tally = _LoadTally()
        for i, ((req_id, op), value) in enumerate(zip(ops, values, strict=True)):
            if req_id in tally.failed_reqs:
                # After a failed chunk the rest of the prefix is recomputed anyway; don't copy it.
                self._load_errors.update(op.block_ids[op.skip_blocks :])
                tally.failed += 1
                continue
            try:
                if value is None:
                    raise codec.CodecError("missing (evicted, expired or server unreachable)")
                payload = codec.decode(
                    value,
                    dtype=kv.dtype_name,
                    shape=kv.value_shape,
                    itemsize=kv.itemsize,
                    layout_fp=self._layout_fp,
                    chunk_hash=op.chunk_hash,
                    verify_checksum=self._s.verify_checksum,
                )
                end = len(value)  # the value is the start of load buffer i, its payload the end of the value
                kv.scatter(buffers.backing(i)[end - payload.nbytes : end], op.block_ids, op.skip_blocks)
            except Exception as exc:  # a value that fails a check; and nothing else may fail the engine's step
                tally.failed_reqs.add(req_id)
                if isinstance(exc, codec.CodecError):
                    tally.reasons.append(exc.reason)
                    if value is not None:
                        tally.damaged.append(self._k(op.key))
                else:
                    logger.exception("kvd: copying a loaded chunk failed")
                    tally.reasons.append(f"{type(exc).__name__}: {exc}")
                self._load_errors.update(op.block_ids[op.skip_blocks :])
                tally.failed += 1
                continue
            tally.chunks += 1
            tally.nbytes += len(value)
            tally.tokens += (len(op.block_ids) - op.skip_blocks) * self._block_size
        return tally

    def wait_for_layer_load(self, layer_name: str) -> None:
        # Loads complete (CPU) or are ordered before compute on the stream (CUDA) in start_load_kv.
        return

    def get_block_ids_with_load_errors(self) -> set[int]:
        out, self._load_errors = self._load_errors, set()
        return out

    # -- saves ----------------------------------------------------------------------------------------------------

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: AttentionMetadata, **kwargs: Any
    ) -> None:
        # Whole chunks (all layers) are gathered once after the forward, in wait_for_save.
        return

    def wait_for_save(self) -> None:
        meta = self._connector_metadata
        failed_loads, self._failed_loads = self._failed_loads, set()
        if not isinstance(meta, KvdConnectorMetadata) or not meta.saves or self._kv is None:
            self._maybe_worker_report()
            return
        start = time.perf_counter()
        value_bytes = self._value_bytes
        batch: list[tuple[str, bytes, Any, Any, int | None]] = []
        dropped = 0
        for r in meta.saves:
            if r.req_id in failed_loads:
                # This step computed the request's later tokens over blocks that its load left unfilled: their
                # KV is wrong, and vLLM recomputes it from the first failed block. The scheduler plans those
                # chunks' saves again then.
                continue
            for op in r.chunks:
                with self._queue_state:
                    full = (
                        self._queued_chunks >= self._s.save_queue_depth
                        or self._queued_bytes + value_bytes > self._s.save_queue_max_bytes
                    )
                    if not full:
                        self._queued_chunks += 1
                        self._queued_bytes += value_bytes
                if full:
                    dropped += 1
                    continue
                buf, event, slot = self._gather(op)
                batch.append((self._k(op.key), op.chunk_hash, buf, event, slot))
        if batch:
            self._enqueue(batch)
        STATS.add(save_gather_us=int((time.perf_counter() - start) * 1e6), saves_dropped=dropped)
        if dropped:
            logger.debug("kvd: save queue full, dropped %d chunk(s)", dropped)
        self._maybe_worker_report()

    def _gather(self, op: ChunkOp) -> tuple[torch.Tensor, Any, int | None]:
        """Copy a chunk's blocks of every layer into one value buffer (payload area; header filled later): a slot
        of the shared save file where one is free (returned with its index), else a buffer of its own."""
        assert self._kv is not None
        slot = None
        if self._free_save_slots:
            assert self._save_shared is not None
            slot = self._free_save_slots.popleft()  # returned by the saver once kvd has the value
            buf = self._save_shared.backing(slot)[: self._value_bytes]
        else:
            try:
                buf = self._save_buffers.pop()  # sent and done with (the saver returns buffers after put_many)
            except IndexError:
                buf = self._kv.host_buffer(self._value_bytes)
        return buf, self._kv.gather(op.block_ids, buf[self._hdr :]), slot

    def _enqueue(self, item: list[tuple[str, bytes, Any, Any, int | None]] | _Discard) -> None:
        with self._queue_state:
            self._outstanding += 1
        self._saves.put(item)

    def _save_loop(self) -> None:
        while True:
            item = self._saves.get()
            if item is None:
                return
            try:
                if isinstance(item, _Discard):
                    self._client.discard(item.keys)
                else:
                    self._save(item)
            except Exception:  # a bug: the client turns network errors into counts. The batch is lost, not the thread
                logger.exception("kvd: a batch of saves failed")
                if not isinstance(item, _Discard) and any(slot is not None for *_, slot in item):
                    self._retire_save_slots([slot for *_, slot in item if slot is not None])  # named or not: unknown
            finally:
                with self._queue_state:
                    if not isinstance(item, _Discard):
                        self._queued_chunks -= len(item)
                        self._queued_bytes -= len(item) * self._value_bytes
                    self._outstanding -= 1
                    self._queue_state.notify_all()

    def _save(self, batch: list[tuple[str, bytes, Any, Any, int | None]]) -> None:
        """On the saver thread: seal each gathered value, skip the keys kvd has, store the rest; then hand the
        value buffers and shared slots back for the next gathers (not slots kvd may still copy out of)."""
        start = time.perf_counter()
        kv = self._kv
        assert kv is not None  # batches come from wait_for_save, after register_kv_caches
        items, shared = [], []
        for key, chash, buf, event, slot in batch:
            if event is not None:
                event.synchronize()
            mv = memoryview(buf.numpy()).cast("B")
            codec.seal(mv, dtype=kv.dtype_name, shape=kv.value_shape, layout_fp=self._layout_fp, chunk_hash=chash)
            if slot is None:
                items.append((key, mv))
            else:
                shared.append((key, slot, self._value_bytes))
        written, nbytes = self._client.put_many(items)
        if shared:
            assert self._save_shared is not None
            failures = self._client.failures
            more, more_bytes = self._client.put_shared(shared, self._save_shared)
            written, nbytes = written + more, nbytes + more_bytes
            if self._client.failures != failures:
                self._retire_save_slots([slot for _, slot, _ in shared])
                shared = []
        self._save_buffers.extend(buf for _, _, buf, _, slot in batch if slot is None)
        self._free_save_slots.extend(slot for _, slot, _ in shared)
        STATS.add(
            saved_chunks=written,
            saved_bytes=nbytes,
            save_skipped=len(batch) - written if self._client.available else 0,
            save_us=int((time.perf_counter() - start) * 1e6),
        )

    def _retire_save_slots(self, slots: list[int]) -> None:
        """On the saver thread, after a KVD.SETFROM that timed out or lost its connection: kvd may still copy out
        of its slots once it reads the request, so they are never written again (a new gather there would be
        stored under the old key). Once every slot is retired, the file is replaced by a new one: none of its
        slots is free or queued then, and kvd's late copies read the old file's unchanged bytes."""
        assert self._save_shared is not None and self._kv is not None
        self._retired_save_slots += len(slots)
        capacity = self._save_shared.capacity
        logger.warning(
            "kvd: a shared-memory save failed; %d of %d save slots retired (kvd may still copy out of them)",
            self._retired_save_slots,
            capacity,
        )
        if self._retired_save_slots < capacity:
            return
        old = self._save_shared
        try:
            self._save_shared = SharedBuffers(self._value_bytes, keep_bytes=old.keep_bytes, wrap=self._kv.host_view)
        except OSError as exc:
            self._save_shared = None
            logger.warning("kvd: no new shared save buffers (%s); saves go through the socket", exc)
        else:
            self._free_save_slots.extend(range(self._save_shared.capacity))
        self._retired_save_slots = 0
        old.close()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until the saver thread has finished every queued save (tests, shutdown)."""
        with self._queue_state:
            return self._queue_state.wait_for(lambda: self._outstanding == 0, timeout)

    # -- stats, shutdown ------------------------------------------------------------------------------------------

    _WORKER_KEYS = (
        "loaded_chunks",
        "loaded_tokens",
        "loaded_bytes",
        "load_us",
        "load_errors",
        "async_loads",
        "saved_chunks",
        "saved_bytes",
        "save_skipped",
        "save_us",
        "save_gather_us",
        "saves_dropped",
        "damaged_chunks",
    )

    def _maybe_worker_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < _REPORT_INTERVAL_S:
            return
        self._last_report = now
        taken = STATS.take_unsent()
        mine = {k: v for k, v in taken.items() if k in self._WORKER_KEYS}
        rest = {k: v for k, v in taken.items() if k not in self._WORKER_KEYS}
        if rest:
            STATS.restore_unsent(rest)
        if mine:
            for k, v in mine.items():
                self._stats_interval[k] += v
            if not self._client.report(mine) and self._client._has_report is not False:
                STATS.restore_unsent(mine)

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        if self._role != KVConnectorRole.WORKER or not self._stats_interval:
            return None
        data, self._stats_interval = dict(self._stats_interval), defaultdict(int)
        return KvdConnectorStats(data=data)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return KvdConnectorStats(data=dict(data or {}))

    def shutdown(self) -> None:
        if self._role == KVConnectorRole.WORKER:
            if not self._stopping:
                self._stopping = True
                self.flush(timeout=10.0)
                self._saves.put(None)
                self._saver.join(timeout=5.0)
                self._maybe_worker_report(force=True)
        else:
            self._maybe_report(force=True)
        totals = dict(STATS.total)
        if totals and self._role == KVConnectorRole.WORKER:
            logger.info("kvd connector totals: %s", ", ".join(f"{k}={v}" for k, v in sorted(totals.items())))
        if isinstance(getattr(self, "_load_buffers", None), SharedBuffers):
            self._load_buffers.close()  # its /dev/shm file goes now, not at exit
        if getattr(self, "_save_shared", None) is not None:
            self._save_shared.close()
        if getattr(self, "_fetcher", None) is not None:
            self._fetcher.shutdown(wait=True, cancel_futures=True)  # a fetch in flight ends within timeout_ms
            for future, _ in self._fetching.values():
                if future.done() and not future.cancelled() and future.exception() is None:
                    self._landed_fetch_buffers.append((future.result()[1], False))
            for buffers in [b for b, _ in self._landed_fetch_buffers] + list(self._spare_fetch_buffers):
                if isinstance(buffers, SharedBuffers):
                    buffers.close()
        self._client.close()
