"""Buffer operations that CPython's C API has and Python does not: receiving values in place, copying in parallel.

``uninitialized(n)``: a bytearray of ``n`` bytes with arbitrary contents. ``bytearray(n)`` always clears its
memory (17 us for 1 MiB), which is wasted on a buffer the kernel is about to overwrite: a large value received
in place (``kvd/protocol/parser.py``, ``kvd/store/bufpool.py``). Only for memory that is fully written before
anything reads it.

``unpinned_view(buf, start)``: a writable memoryview of ``buf[start:]`` that does not export ``buf``, so ``buf``
can still be resized while the view exists. Landing (``kvd/protocol/landing.py``) hands such a view to the
event loop and cuts the request's header off the front of ``buf`` before the loop has released it. The caller
must keep ``buf`` referenced and leave its size alone while the view may be written.

``copy(dst, src)``: ``dst[:] = src`` with the GIL released during the ``memcpy``, so that ``KVD.GETINTO``'s
large copies run on worker threads side by side and off the event loop (``kvd/shm.py``). Without the
extension it is the slice assignment itself: correct, one copy at a time.

Where each comes from, fastest first (``IMPLEMENTATION`` says which; ``INFO server`` shows it):

* ``"c"``: ``kvd/_buffers.c``, built by pip (``setup.py``). Each operation is one call into the C API.
* ``"ctypes"``: the same C API functions through ``ctypes``, where the extension was not built (no C compiler).
  Same results, but each call goes through libffi and ctypes' type machinery. Measured in the running server
  with one client sending 256 KiB SETs (``perf`` on CPython 3.12's ``-X perf``, AMD EPYC host): the two calls
  of ``unpinned_view`` and the one of ``uninitialized`` took 9.5 us of a landed SET's 41 us of user time, because
  each runs right after the value's copy has flushed the caches ctypes' tables live in. Moving them to C, 10
  alternating 1 s rounds: 91.1 -> 80.0 us of server CPU per SET, 8396 -> 8862 SET/s (redis-server: 68.2 us,
  9917/s); 1 MiB: 212.3 -> 199.9 us.
* ``"python"``: neither (an interpreter without the C API exported): ``uninitialized`` is ``bytearray`` and
  ``unpinned_view`` is None, which turns landing off.

Complexity: both O(1) apart from the allocation itself.
"""

from __future__ import annotations

from collections.abc import Callable

Allocate = Callable[[int], bytearray]
View = Callable[[bytearray, int], memoryview]


def _from_extension() -> tuple[Allocate, View] | None:
    try:
        from kvd import _buffers
    except ImportError:
        return None
    return _buffers.uninitialized, _buffers.unpinned_view


def _from_ctypes() -> tuple[Allocate, View] | None:
    try:
        import ctypes

        make = ctypes.pythonapi.PyByteArray_FromStringAndSize  # NULL contents: allocated, not cleared
        address_of = ctypes.pythonapi.PyByteArray_AsString  # the bytearray's current start, no export
        view_of = ctypes.pythonapi.PyMemoryView_FromMemory
    except (ImportError, AttributeError, OSError):  # pragma: no cover - an interpreter without the C API exported
        return None
    make.restype = ctypes.py_object
    make.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    address_of.restype = ctypes.c_void_p
    address_of.argtypes = (ctypes.py_object,)
    view_of.restype = ctypes.py_object
    view_of.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
    writable = 0x200  # PyBUF_WRITE

    def uninitialized(size: int) -> bytearray:
        if size < 0:
            raise ValueError("uninitialized(): negative size")
        return make(None, size)

    def unpinned_view(buf: bytearray, start: int) -> memoryview:
        if type(buf) is not bytearray:
            raise TypeError(f"unpinned_view() needs a bytearray, not {type(buf).__name__}")
        if not 0 <= start <= len(buf):
            raise IndexError(f"unpinned_view(): start {start} outside a bytearray of {len(buf)} bytes")
        return view_of(address_of(buf) + start, len(buf) - start, writable)

    return uninitialized, unpinned_view


def _choose() -> tuple[str, Allocate, View | None]:
    for name, source in (("c", _from_extension), ("ctypes", _from_ctypes)):
        found = source()
        if found is not None:
            return name, found[0], found[1]
    return "python", bytearray, None  # pragma: no cover - neither the extension nor ctypes' C API


IMPLEMENTATION, uninitialized, unpinned_view = _choose()


def _copy_holding_the_gil(dst: memoryview, src: object) -> None:
    dst[:] = src  # type: ignore[index]


def _copy_function() -> Callable[[memoryview, object], None]:
    try:
        from kvd import _buffers
    except ImportError:
        return _copy_holding_the_gil
    return getattr(_buffers, "copy", _copy_holding_the_gil)


copy = _copy_function()
