"""A worker's paged KV tensors, read and written one chunk of blocks at a time: the connector's data path.

vLLM hands each worker one KV tensor per attention layer, every one paged into the same blocks. A kvd value is
one chunk: its blocks of every layer, layer after layer, as raw bytes. This module moves those bytes between the
tensors and a flat host buffer, and knows nothing of vLLM, kvd or the network, so the same code is checked on a
CPU in CI and on a GPU where one is lent (``python -m connectors.paged_kv_check``).

* **Layout.** The block dimension is found from the shape: the dimension whose size is the engine's block count
  (CUDA's ``(2, blocks, block, heads, head)``), or a multiple of it where one vLLM block is several tensor blocks
  (``ratio``). Blocks are opaque bytes; nothing here depends on which dimension holds K and V.
* **Save** (``gather``): per layer, ``index_select`` of the chunk's blocks into its slice of the value buffer. On
  CUDA the selects run on the save stream, which first waits for the compute stream (the forward that wrote the
  blocks), into a device staging buffer, which then crosses to pinned host memory in one ``non_blocking`` copy
  on a copy stream of its own. The compute stream's next work waits for the selects alone, since from the next
  step on the blocks may be another request's; the caller waits on the returned event before it reads the
  buffer, so neither the forward nor the forward thread waits for the copy.
* **Load** (``begin_load``, ``scatter`` per chunk, ``end_load``): the received bytes are in pinned host buffers;
  each value crosses to a device staging buffer in one ``non_blocking`` copy on the load's copy stream and is
  scattered from there with ``index_copy_`` per layer on the load stream. ``begin_load`` waits until the last
  load's copies have read its buffers (they are about to be received into again) and orders the new scatters
  after the compute stream's queued work (the blocks may have just been freed by a request whose forward is
  still queued); ``end_load`` makes the compute stream wait for the scatters, so the forward reads loaded blocks
  without the host ever waiting for them. Saves and loads have streams of their own: a load never queues behind
  the last step's saves.
* **Two staging buffers per direction, taking turns**, so that one value's copy between host and device (a copy
  engine) runs while the next value's selects or scatters (kernels) do; a buffer is staged into again only
  after its last copy or scatter, an event the GPU waits on. On an H200 the selects of a 32 MiB value take
  0.45 ms and its copy 0.6 ms; one after the other, with one buffer, saves ran at 0.56 of a plain pinned copy
  and loads at 0.76, and taking turns at 0.88-0.90 and 0.95-0.97.
* **One copy per value** rather than one per layer: on an H200 1.23x the rate for saves and 1.37x for loads
  (``scripts/bench_cuda_path.py``; docs/connector.md, "The CUDA path"). The four staging buffers, a value's size
  each (32 MiB for Llama-3.1-8B in bf16 with 256-token chunks), are taken when the tensors are registered, so
  device memory vLLM did not budget for is missed at start-up rather than in the middle of a step.
* **Wide elements.** The copies see each tensor's bytes as the widest integers its rows allow (``as_words``):
  the same bytes in a quarter of the elements for bf16. On a CPU a 32 MiB value's save is 1.57x and its load
  1.35x faster; on an H200 nothing measurable changes.
* **Rows.** A contiguous tensor is selected from as a table of equal rows (``as_rows``), at least 64 per chunk and
  layer, rather than along its block dimension, where a chunk has 16 indices: CUDA's kernel for 16 indices or
  fewer is its slow one. On an H200 a value's 32 selects took 0.31-0.33 ms instead of 0.43 (CUDA's layout) and
  0.30 instead of 0.40 (blocks first); that is the time the next forward waits for a save. A non-contiguous
  view (vLLM's HND layout) is selected along its block dimension.
* **CUDA graphs.** Each staging buffer's selects of a whole chunk, and its scatters, are captured once at
  registration (after a warm-up that reads the first chunk's blocks and writes them back unchanged) and replayed
  per value, after the index buffers they read are refilled on the replaying stream: one launch instead of one
  per layer. On an H200 the forward thread's time to queue a save fell from 773 to 236 us, a load's from 661 to
  259 us, and saves ran at 0.97 of a pinned copy instead of 0.91. A load that skips locally computed blocks
  launches its copies one by one, as does everything where a capture fails (logged once) or the engine runs
  with ``enforce_eager``.
* **Index tensors** are made once per chunk and geometry, on the stream that reads them, from pinned memory with
  ``non_blocking``: ``torch.tensor(ids, device="cuda")`` copies from pageable memory and waits for its stream,
  which made the forward thread wait for the whole forward before each save.

On CPU every call completes before it returns, and the copies go straight between the KV tensors and the buffers.
Complexity: O(layers) kernels per chunk each way, each moving ``blocks_per_chunk`` blocks of one layer (on CUDA
one graph launch for them), plus one copy between host and device on CUDA.
"""

from __future__ import annotations

import logging
import math
import mmap
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.uint8: "uint8",
    torch.int8: "int8",
}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        DTYPE_NAMES[getattr(torch, _name)] = _name

logger = logging.getLogger("vllm.kvd.paged_kv")

_MAX_VALUE_DIMS = 6  # codec headers hold up to 7 dims; the layer count takes one
_MIN_ROWS = 64  # rows per chunk and layer (``as_rows``): well past the 16 indices of CUDA's slow select kernel


@dataclass(frozen=True, slots=True)
class Layer:
    """One attention layer's KV tensor and where a chunk of its blocks sits in a value."""

    name: str
    tensor: torch.Tensor
    dim: int  # the dimension that indexes blocks
    ratio: int  # tensor blocks per vLLM block
    chunk_shape: tuple[int, ...]  # the shape of one chunk's blocks of this layer
    nbytes: int  # their size
    words: torch.Tensor  # ``tensor``'s bytes as the widest integers its rows allow: what the copies move
    words_chunk_shape: tuple[int, ...]  # ``chunk_shape`` in those integers
    rows: Rows | None  # ``words`` as a table of equal rows, where it is contiguous


@dataclass(frozen=True, slots=True)
class Rows:
    """A contiguous layer's words as a 2-D table: row ``(o * blocks + b) * split + s`` is part ``s`` of tensor
    block ``b`` under leading index ``o`` (K or V in CUDA's layout), so a chunk's rows, in that order, are its
    bytes as a value holds them."""

    table: torch.Tensor
    outer: int  # the product of the dimensions before the block dimension
    blocks: int  # tensor blocks
    split: int  # rows per tensor block and leading index

    def ids(self, tensor_blocks: Sequence[int]) -> list[int]:
        n, k = self.blocks, self.split
        return [(o * n + b) * k + s for o in range(self.outer) for b in tensor_blocks for s in range(k)]


def find_block_dim(t: torch.Tensor, num_blocks: int, block_size: int) -> tuple[int, int]:
    """The dimension of ``t`` that indexes blocks, and how many tensor blocks make one vLLM block."""
    if num_blocks:
        for d, size in enumerate(t.shape):
            if size == num_blocks:
                return d, 1
        for d, size in enumerate(t.shape):
            if size % num_blocks == 0 and size // num_blocks > 1 and block_size % (size // num_blocks) == 0:
                return d, size // num_blocks
    # Unknown block count: the CPU and most CUDA layouts put blocks first (or second after a K/V dim of 2).
    return (1, 1) if t.shape[0] == 2 and t.dim() >= 5 else (0, 1)


def as_words(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t``'s bytes seen as the widest integers (up to 8 bytes) that divide its last dimension's row.

    Blocks are opaque bytes, and the select and copy kernels move one element per thread: a bf16 cache seen as
    int64 is a quarter of the elements (on a CPU ``index_copy_`` of 1 MiB took 134 us instead of 211-237). Where
    the blocks are the last dimension, or the row is not contiguous or not divisible, ``t`` itself."""
    if dim == t.dim() - 1 or t.stride(-1) != 1:
        return t
    for wide in (torch.int64, torch.int32, torch.int16):
        if wide.itemsize <= t.element_size():
            break
        try:
            return t.view(wide)  # torch checks the row's size, the strides and the offset
        except RuntimeError:
            continue
    return t


def as_rows(words: torch.Tensor, dim: int, chunk_blocks: int) -> Rows | None:
    """``words`` as a table of rows whose chunk has at least ``_MIN_ROWS`` of them; None where not contiguous.

    One ``index_select`` along the rows replaces one along the block dimension: CUDA's kernel for 16 indices or
    fewer walks each index's slice with a few threads, and a chunk of one layer has only 16 blocks."""
    if not words.is_contiguous():
        return None
    outer, blocks, inner = math.prod(words.shape[:dim]), words.shape[dim], math.prod(words.shape[dim + 1 :])
    split = 1
    while outer * chunk_blocks * split < _MIN_ROWS and inner % (2 * split) == 0:
        split *= 2
    return Rows(words.view(outer * blocks * split, inner // split), outer, blocks, split)


class PagedKV:
    """The KV tensors of one worker, seen as chunks of ``blocks_per_chunk`` blocks."""

    def __init__(
        self,
        kv_caches: Mapping[str, torch.Tensor],
        *,
        num_blocks: int,
        block_size: int,
        blocks_per_chunk: int,
        cuda_graphs: bool = True,
    ) -> None:
        if not kv_caches:
            raise ValueError("no KV tensors to read or write")
        layers = []
        for name, t in kv_caches.items():
            dim, ratio = find_block_dim(t, num_blocks, block_size)
            shape = list(t.shape)
            shape[dim] = blocks_per_chunk * ratio
            words = as_words(t, dim)
            words_shape = list(words.shape)
            words_shape[dim] = blocks_per_chunk * ratio
            nbytes = t.element_size() * math.prod(shape)
            rows = as_rows(words, dim, blocks_per_chunk * ratio)
            layers.append(Layer(name, t, dim, ratio, tuple(shape), nbytes, words, tuple(words_shape), rows))
        self.layers: list[Layer] = layers
        self.blocks_per_chunk = blocks_per_chunk
        first = layers[0].tensor
        self.device = first.device
        self.cuda = first.is_cuda
        self.payload_bytes = sum(layer.nbytes for layer in layers)
        dtypes = {layer.tensor.dtype for layer in layers}
        uniform = len(dtypes) == 1 and len({layer.chunk_shape for layer in layers}) == 1
        self.dtype = first.dtype if len(dtypes) == 1 else torch.uint8
        self.dtype_name = DTYPE_NAMES.get(self.dtype, str(self.dtype).removeprefix("torch."))
        self.itemsize = first.element_size() if uniform else 1
        # The shape a value's payload declares: (layers, *chunk shape) where every layer agrees, else flat.
        if uniform and len(layers[0].chunk_shape) <= _MAX_VALUE_DIMS:
            self.value_shape: tuple[int, ...] = (len(layers), *layers[0].chunk_shape)
        else:
            self.value_shape = (self.payload_bytes // self.itemsize,)
        self._load_done: Any = None  # CUDA: recorded after the last load's copies out of the host buffers
        if self.cuda:
            # Each direction has two streams: one for the copy between host and device (a copy engine's work)
            # and one for the selects or scatters (kernels), so that one value's copy runs while the next
            # value's kernels do. Saves and loads have their own, so a load never queues behind the last step's
            # saves. Each direction takes turns between two device staging buffers of a value's size, taken
            # now: memory vLLM did not budget for is missed at start-up, not in the middle of a step.
            dev = self.device
            self._save_stream: Any = torch.cuda.Stream(device=dev)  # selects into staging
            self._save_copy_stream: Any = torch.cuda.Stream(device=dev)  # staging -> pinned host
            self._load_copy_stream: Any = torch.cuda.Stream(device=dev)  # pinned host -> staging
            self._load_stream: Any = torch.cuda.Stream(device=dev)  # scatters out of staging
            self._save_staging = [self._staging(self._save_stream, self._save_copy_stream) for _ in range(2)]
            self._load_staging = [self._staging(self._load_copy_stream, self._load_stream) for _ in range(2)]
            self._save_views = [self._views(t) for t in self._save_staging]  # once: a view costs a launch's time
            self._load_views = [self._views(t) for t in self._load_staging]
            # Per staging buffer, the event after which its last user is done with it: a save's copy out, a
            # load's scatters. The next value staged there waits for it (on the GPU, never on the host).
            self._save_freed: list[Any] = [None, None]
            self._load_freed: list[Any] = [None, None]
            self._save_turn = 0
            self._load_turn = 0
            self._save_graphs: Captured | None = None
            self._load_graphs: Captured | None = None
            if cuda_graphs:
                self._capture()

    @property
    def launches(self) -> str:
        """How a chunk's copies are launched, for the log."""
        if not self.cuda:
            return "on the CPU"
        graphs = [d for d, g in (("saves", self._save_graphs), ("loads", self._load_graphs)) if g is not None]
        return "CUDA graphs for " + " and ".join(graphs) if graphs else "one kernel per layer, no CUDA graphs"

    def host_view(self, mapping: mmap.mmap) -> torch.Tensor:
        """A uint8 tensor over ``mapping`` (a shared load file, ``connectors/shm.py``), page-locked in place on
        CUDA so that copies to the device start from it; pageable, with a warning, where the driver refuses."""
        if not self.cuda:
            return torch.frombuffer(mapping, dtype=torch.uint8)
        cudart = torch.cuda.cudart()

        def lock(ptr: int, n: int) -> bool:
            return int(cudart.cudaHostRegister(ptr, n, 0)) == 0

        buf = locked_pages(len(mapping), lock, cudart.cudaHostUnregister, mapping)
        if buf is None:
            logger.warning("kvd: shared load buffers could not be page-locked; copies to the GPU wait for the host")
            return torch.frombuffer(mapping, dtype=torch.uint8)
        return buf

    def describe(self) -> list[tuple[Any, ...]]:
        """What the bytes of a value depend on: every layer's name, shape, strides, dtype and block dimension."""
        return [
            (x.name, list(x.tensor.shape), list(x.tensor.stride()), str(x.tensor.dtype), x.dim, x.ratio)
            for x in self.layers
        ]

    def host_buffer(self, size: int) -> torch.Tensor:
        """``size`` bytes of host memory, page-locked on CUDA so that copies to and from it are DMA."""
        if not self.cuda:
            return torch.empty(size, dtype=torch.uint8)  # uninitialised
        return _page_locked(size)

    # -- save -------------------------------------------------------------------------------------------------

    def gather(self, block_ids: Sequence[int], out: torch.Tensor) -> Any:
        """Copy the chunk ``block_ids`` of every layer into ``out`` (``payload_bytes`` host bytes).

        CPU: done on return; returns None. CUDA: queued after the compute stream's work so far; returns the event
        after which ``out`` holds the chunk (``out`` must be pinned, or the copy is not asynchronous)."""
        if out.numel() != self.payload_bytes:
            raise ValueError(f"a chunk is {self.payload_bytes} bytes, the buffer {out.numel()}")
        if not self.cuda:
            self._select_into(block_ids, self._views(out))
            return None
        compute = torch.cuda.current_stream(self.device)
        turn = self._save_turn
        self._save_turn ^= 1
        staging = self._save_staging[turn]
        self._save_stream.wait_stream(compute)  # the forward that wrote the blocks
        if self._save_freed[turn] is not None:
            self._save_stream.wait_event(self._save_freed[turn])  # the copy out of this staging buffer two saves ago
        with torch.cuda.stream(self._save_stream):
            # Every layer is selected into one device buffer, which then crosses in one copy rather than one
            # copy per layer (docs/connector.md, "The CUDA path", has both measured).
            if self._save_graphs is not None and len(block_ids) == self.blocks_per_chunk:
                self._save_graphs.replay(turn, block_ids)
            else:
                self._select_into(block_ids, self._save_views[turn])
            selected = torch.cuda.Event()
            selected.record()
        self._save_copy_stream.wait_event(selected)
        with torch.cuda.stream(self._save_copy_stream):
            out.copy_(staging, non_blocking=True)  # while the next save's selects run into the other buffer
            done = torch.cuda.Event()
            done.record()
        self._save_freed[turn] = done
        # The blocks may belong to another request from the next step on: its forward writes them only after
        # they have been read (the copy to the host is not waited for).
        compute.wait_event(selected)
        return done

    # -- load -------------------------------------------------------------------------------------------------

    def begin_load(self) -> None:
        """Call before receiving a load into the host buffers the last load copied from."""
        if not self.cuda:
            return
        if self._load_done is not None:
            self._load_done.synchronize()  # its copies read the buffers that are about to be overwritten
            self._load_done = None
        self._load_stream.wait_stream(torch.cuda.current_stream(self.device))

    def scatter(self, payload: torch.Tensor, block_ids: Sequence[int], skip_blocks: int = 0) -> None:
        """Write a chunk's bytes (``payload_bytes`` host bytes) into the blocks ``block_ids[skip_blocks:]`` of every
        layer; the first ``skip_blocks`` blocks (already computed locally) are left alone.

        CUDA: queued on the load stream; ``payload`` must stay untouched until the next ``begin_load``."""
        if payload.numel() != self.payload_bytes:
            raise ValueError(f"a chunk is {self.payload_bytes} bytes, the payload {payload.numel()}")
        ids = block_ids[skip_blocks:]
        if not ids:
            return
        if not self.cuda:
            self._copy_from(self._views(payload), ids, skip_blocks)
            return
        turn = self._load_turn
        self._load_turn ^= 1
        if self._load_freed[turn] is not None:
            self._load_copy_stream.wait_event(self._load_freed[turn])  # the scatters out of it two values ago
        with torch.cuda.stream(self._load_copy_stream):
            # The whole value crosses in one copy (DMA from the pinned bytes) rather than one per layer, while
            # the last value's scatters run out of the other buffer; the skipped blocks are cut on the device.
            self._load_staging[turn].copy_(payload, non_blocking=True)
            arrived = torch.cuda.Event()
            arrived.record()
        self._load_stream.wait_event(arrived)
        with torch.cuda.stream(self._load_stream):
            if self._load_graphs is not None and not skip_blocks and len(ids) == self.blocks_per_chunk:
                self._load_graphs.replay(turn, ids)
            else:
                self._copy_from(self._load_views[turn], ids, skip_blocks)
            scattered = torch.cuda.Event()
            scattered.record()
        self._load_freed[turn] = scattered

    def end_load(self) -> None:
        """Call after the last ``scatter`` of a load: the compute stream's next work waits for its copies."""
        if not self.cuda:
            return
        torch.cuda.current_stream(self.device).wait_stream(self._load_stream)
        self._load_done = torch.cuda.Event()
        self._load_done.record(self._load_stream)  # after every scatter, each of which waited for its copy in

    # -- helpers ----------------------------------------------------------------------------------------------

    def _staging(self, *streams: Any) -> torch.Tensor:
        """A device buffer of a value's size, used on ``streams``: freed only after their last work on it."""
        buf = torch.empty(self.payload_bytes, dtype=torch.uint8, device=self.device)
        for stream in streams:
            buf.record_stream(stream)
        return buf

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each layer's slice of a flat chunk buffer, as that layer's rows (``Rows``) or shaped like its blocks."""
        out = []
        off = 0
        for layer in self.layers:
            part = flat[off : off + layer.nbytes].view(layer.words.dtype)
            out.append(part.view(-1, layer.rows.table.shape[1]) if layer.rows else part.view(layer.words_chunk_shape))
            off += layer.nbytes
        return out

    def _capture(self) -> None:
        """Capture each staging buffer's selects, and its scatters, as CUDA graphs (``Captured``); where a capture
        fails, log why and launch those copies one by one."""
        chunk = list(range(self.blocks_per_chunk))
        if any(layer.words.shape[layer.dim] < len(chunk) * layer.ratio for layer in self.layers):
            return  # fewer blocks than a chunk: nothing to warm up on
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        save_idx: dict[Any, torch.Tensor] = {}
        load_idx: dict[Any, torch.Tensor] = {}
        with torch.cuda.stream(side):
            # The warm-up, which also makes the index buffers the graphs read: the first chunk's blocks are read
            # into every staging buffer, and written back unchanged.
            for turn in (0, 1):
                self._select_into(chunk, self._save_views[turn], save_idx)
                self._select_into(chunk, self._load_views[turn], load_idx)
                self._copy_from(self._load_views[turn], chunk, 0, load_idx)
        side.synchronize()
        try:
            graphs = [
                self._record(side, save_idx, lambda c, t=turn: self._select_into(chunk, self._save_views[t], c))
                for turn in (0, 1)
            ]
            self._save_graphs = Captured(graphs, self._refills(save_idx))
        except RuntimeError as exc:  # a driver or build without graph capture: the same copies, one by one
            logger.warning(
                "kvd: the CUDA graphs of a save's selects could not be captured (%s); launching them one by one", exc
            )
        try:
            graphs = [
                self._record(side, load_idx, lambda c, t=turn: self._copy_from(self._load_views[t], chunk, 0, c))
                for turn in (0, 1)
            ]
            self._load_graphs = Captured(graphs, self._refills(load_idx))
        except RuntimeError as exc:
            logger.warning(
                "kvd: the CUDA graphs of a load's scatters could not be captured (%s); launching them one by one", exc
            )

    @staticmethod
    def _record(side: Any, indices: dict[Any, torch.Tensor], work: Callable[[dict[Any, torch.Tensor]], None]) -> Any:
        graph = torch.cuda.CUDAGraph()
        cache = dict(indices)
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            work(cache)
        if cache.keys() != indices.keys():  # an index made inside the capture would be read from freed memory
            raise RuntimeError("an index buffer was made during capture")
        return graph

    def _refills(self, indices: dict[Any, torch.Tensor]) -> list[tuple[torch.Tensor, Layer, bool]]:
        """For each index buffer of a capture, a layer of its geometry and whether it indexes rows: what refills it
        (a whole chunk is selected and scattered by rows wherever a layer has them)."""
        out = {}
        for layer in self.layers:
            key = _index_key(layer, layer.rows is not None)
            out.setdefault(key, (indices[key], layer, layer.rows is not None))
        return list(out.values())

    def _select_into(
        self, block_ids: Sequence[int], views: list[torch.Tensor], indices: dict[Any, torch.Tensor] | None = None
    ) -> None:
        """Select the chunk's blocks of every layer into its view of a value buffer (``_views``)."""
        indices = {} if indices is None else indices
        for layer, dst in zip(self.layers, views, strict=True):
            if layer.rows:
                torch.index_select(layer.rows.table, 0, self._index(indices, block_ids, layer, True), out=dst)
            else:
                torch.index_select(layer.words, layer.dim, self._index(indices, block_ids, layer, False), out=dst)

    def _copy_from(
        self,
        views: list[torch.Tensor],
        ids: Sequence[int],
        skip_blocks: int,
        indices: dict[Any, torch.Tensor] | None = None,
    ) -> None:
        """Copy a chunk's bytes (its view of a value buffer on the KV tensors' device, ``_views``) into the blocks
        ``ids`` of every layer, leaving out the chunk's first ``skip_blocks`` blocks."""
        indices = {} if indices is None else indices
        for layer, src in zip(self.layers, views, strict=True):
            if layer.rows and not skip_blocks:
                layer.rows.table.index_copy_(0, self._index(indices, ids, layer, True), src)
                continue
            src = src.view(layer.words_chunk_shape)  # a no-op without rows; with them, contiguous
            if skip_blocks:
                src = src.narrow(layer.dim, skip_blocks * layer.ratio, len(ids) * layer.ratio)
            layer.words.index_copy_(layer.dim, self._index(indices, ids, layer, False), src)

    def _index(
        self, cache: dict[Any, torch.Tensor], block_ids: Sequence[int], layer: Layer, rows: bool
    ) -> torch.Tensor:
        """The indices of ``block_ids`` in ``layer`` (``_index_ids``) on this device, made once per call and geometry.

        On CUDA they cross from pinned memory with ``non_blocking`` on the current stream (the one that reads
        them): ``torch.tensor(ids, device="cuda")`` copies from pageable memory and waits for that stream, so the
        forward thread would wait before each save for the whole forward the save stream waits on."""
        key = _index_key(layer, rows)
        idx = cache.get(key)
        if idx is None:
            idx = torch.tensor(_index_ids(block_ids, layer, rows), dtype=torch.long, pin_memory=self.cuda)
            if self.cuda:
                idx = idx.to(self.device, non_blocking=True)
            cache[key] = idx
        return idx


def _index_key(layer: Layer, rows: bool) -> tuple[Any, ...]:
    """Layers with equal keys take the same indices for a chunk."""
    table = layer.rows if rows else None
    return (layer.ratio,) if table is None else (layer.ratio, table.outer, table.blocks, table.split)


def _index_ids(block_ids: Sequence[int], layer: Layer, rows: bool) -> list[int]:
    """The indices of ``block_ids`` in ``layer``: its tensor blocks', or with ``rows`` its rows'."""
    r = layer.ratio
    ids = list(block_ids) if r == 1 else [b * r + k for b in block_ids for k in range(r)]
    return layer.rows.ids(ids) if rows and layer.rows is not None else ids


@dataclass(frozen=True, slots=True)
class Captured:
    """One direction's selects or scatters of a chunk, every layer's, as a CUDA graph per staging buffer: one
    launch instead of one per layer (on an H200 the forward thread spent about 10 us on each launch).

    The graphs read index buffers that ``replay`` first refills, on the stream that replays, so after the reads
    of the last replay; each direction has its own buffers, since saves and loads run on different streams."""

    graphs: list[Any]  # per staging buffer
    refills: list[tuple[torch.Tensor, Layer, bool]]  # index buffer, a layer of its geometry, rows or blocks

    def replay(self, turn: int, block_ids: Sequence[int]) -> None:
        for buf, layer, rows in self.refills:
            ids = torch.tensor(_index_ids(block_ids, layer, rows), dtype=torch.long, pin_memory=True)
            buf.copy_(ids, non_blocking=True)
        self.graphs[turn].replay()


def _page_locked(size: int) -> torch.Tensor:
    """``size`` zeroed bytes of host memory, page-locked where they are (``cudaHostRegister``) for as long as any
    tensor uses them.

    Why not ``torch.empty(..., pin_memory=True)``: torch's pinned allocator rounds every block up to a power of
    two, and a value is a power of two plus its header, so each buffer took twice its size (32 MiB + 128 B
    took 64 MiB of locked memory on an H200). Here a private anonymous mapping of whole pages is locked in
    place (``locked_pages``). Where the driver refuses, torch's allocator is used after all."""
    cudart = torch.cuda.cudart()
    buf = locked_pages(size, lambda ptr, n: int(cudart.cudaHostRegister(ptr, n, 0)) == 0, cudart.cudaHostUnregister)
    return buf if buf is not None else torch.empty(size, dtype=torch.uint8, pin_memory=True)


def locked_pages(
    size: int, lock: Callable[[int, int], bool], unlock: Callable[[int], Any], mapping: mmap.mmap | None = None
) -> torch.Tensor | None:
    """``size`` zeroed bytes over a private mapping of whole pages (or over ``mapping``, a shared load file's),
    ``lock(address, length)``-ed now and ``unlock(address)``-ed once no tensor uses them, while they are still
    mapped; None where ``lock`` refuses.

    The tensor holds a memoryview of the mapping; the finaliser is keyed on that view and holds the mapping, so
    the pages are unmapped only after ``unlock`` has run (a finaliser on the mapping itself runs after the
    ``munmap``)."""
    if mapping is None:
        span = max(mmap.PAGESIZE, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        mapping = mmap.mmap(-1, span, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        span = len(mapping)
    view = memoryview(mapping)
    buf = torch.frombuffer(view, dtype=torch.uint8)  # holds the view: it lives as long as any tensor over it
    ptr = buf.data_ptr()
    if not lock(ptr, span):
        return None
    weakref.finalize(view, _unlock_mapped, unlock, ptr, mapping)
    return buf[:size]


def _unlock_mapped(unlock: Callable[[int], Any], ptr: int, mapping: mmap.mmap) -> None:
    unlock(ptr)  # ``mapping`` is this call's argument: still mapped here, unmapped once the call returns
