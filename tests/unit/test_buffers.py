"""kvd/buffers.py: the two C-API buffer operations, checked against their contract in every implementation that
can load here (the compiled ``kvd._buffers`` and the ctypes fallback), and the set-up really builds the C
extensions (this one, ``kvd/protocol/_receive.c``, ``kvd/protocol/_multibulk.c`` and ``kvd/persist/_records.c``)."""

from __future__ import annotations

import sys

import pytest

from kvd import buffers

IMPLEMENTATIONS = {"c": buffers._from_extension(), "ctypes": buffers._from_ctypes()}


def test_the_set_up_compiles_the_extension():
    """scripts/setup.sh installs a C compiler and pip builds kvd/_buffers.c: a silent fall back to ctypes would
    cost every large SET (kvd/buffers.py)."""
    assert IMPLEMENTATIONS["c"] is not None, "kvd._buffers was not built: run pip install -e . with a C compiler"
    assert buffers.IMPLEMENTATION == "c"
    assert buffers.uninitialized is IMPLEMENTATIONS["c"][0]


def test_the_set_up_compiles_the_receive_path():
    """pip builds kvd/protocol/_receive.c too, and the daemon takes the C path (kvd/protocol/receive.py): its
    Receiver for the reads in the middle of a value, its check of a landing request's header."""
    from kvd import connection
    from kvd.protocol import parser, receive

    assert receive.PATH == "c", "kvd.protocol._receive was not built: run pip install -e . with a C compiler"
    from kvd.protocol import _receive

    assert connection.Receiver is _receive.Receiver
    assert parser.match_header is _receive.match_header


def test_the_set_up_compiles_the_request_parser():
    """pip builds kvd/protocol/_multibulk.c, and the parser takes whole small requests with it."""
    from kvd.protocol import _multibulk, parser

    assert parser.parse_requests is _multibulk.parse_requests
    assert parser.SMALL_REQUESTS == "c"


def test_the_set_up_compiles_the_record_packer():
    """pip builds kvd/persist/_records.c (scripts/setup.sh installs libxxhash-dev for its <xxhash.h>), and the
    log's writer packs small records with it (kvd/persist/writer.py)."""
    from kvd.persist import _records, writer

    assert writer.pack_run is _records.pack_run


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request):
    found = IMPLEMENTATIONS[request.param]
    if found is None:
        pytest.skip(f"{request.param} implementation not available here")
    return found


@pytest.mark.parametrize("size", [0, 1, 4096, 1 << 20])
def test_uninitialized_is_a_resizable_bytearray_of_that_size(impl, size):
    uninitialized, _ = impl
    buf = uninitialized(size)
    assert type(buf) is bytearray and len(buf) == size
    buf[:] = b"x" * size
    assert buf == b"x" * size
    buf.extend(b"yz")
    del buf[:1]
    assert len(buf) == size + 1


def test_uninitialized_refuses_what_bytearray_refuses(impl):
    uninitialized, _ = impl
    with pytest.raises(ValueError):
        uninitialized(-1)
    with pytest.raises(TypeError):
        uninitialized("12")


def test_unpinned_view_writes_into_the_bytearray_from_start(impl):
    _, unpinned_view = impl
    buf = bytearray(b"0123456789")
    view = unpinned_view(buf, 3)
    assert type(view) is memoryview and not view.readonly and view.format == "B"
    assert len(view) == 7 and view.tobytes() == b"3456789"
    view[:4] = b"abcd"
    assert buf == b"012abcd789"
    assert len(unpinned_view(buf, 10)) == 0


def test_unpinned_view_lets_the_bytearray_be_resized_and_holds_no_reference(impl):
    """What landing needs (kvd/protocol/landing.py), and what a plain memoryview forbids."""
    _, unpinned_view = impl
    buf = bytearray(b"header:value\r\n")
    with pytest.raises(BufferError):
        pinned = memoryview(buf)
        del buf[:7]
    pinned.release()
    refs = sys.getrefcount(buf)
    view = unpinned_view(buf, 0)
    assert sys.getrefcount(buf) == refs
    view[:7] = b"HEADER:"
    assert buf[:7] == b"HEADER:"
    del buf[:7]  # the cut landing makes while the event loop still holds its view
    del buf[5:]
    assert buf == b"value"
    del view


def test_unpinned_view_checks_its_arguments(impl):
    _, unpinned_view = impl
    buf = bytearray(8)
    for start in (-1, 9):
        with pytest.raises(IndexError):
            unpinned_view(buf, start)
    for not_a_bytearray in (bytes(8), memoryview(bytearray(8)), [0] * 8):
        with pytest.raises(TypeError):
            unpinned_view(not_a_bytearray, 0)


@pytest.mark.parametrize("copy", [buffers.copy, buffers._copy_holding_the_gil], ids=["c", "python"])
def test_copy_fills_the_destination_exactly(copy):
    """``copy(dst, src)``: KVD.GETINTO's copies into a client's shared memory (kvd/shm.py)."""
    import mmap
    import os

    mapping = mmap.mmap(-1, 4 << 20)
    view = memoryview(mapping)
    src = os.urandom(3 << 20)
    copy(view[4096 : 4096 + len(src)], src)
    assert mapping[4096 : 4096 + len(src)] == src
    assert mapping[:4096] == bytes(4096) and mapping[4096 + len(src) :] == bytes((1 << 20) - 4096)
    copy(view[:5], bytearray(b"hello"))
    copy(view[5:10], memoryview(b"xxworldxx")[2:7])
    assert mapping[:10] == b"helloworld"
    with pytest.raises((ValueError, TypeError)):
        copy(view[:3], b"toolong")  # lengths must match: nothing is cut or padded
    with pytest.raises((BufferError, TypeError)):
        copy(memoryview(b"read-only"), b"123456789")
    assert mapping[:10] == b"helloworld"


def test_copy_is_the_c_one_that_releases_the_gil():
    """The fallback copies holding the GIL: correct, but KVD.GETINTO's threads would take turns."""
    from kvd import _buffers

    assert buffers.copy is _buffers.copy
