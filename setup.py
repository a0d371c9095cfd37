"""The C extensions: ``kvd/_buffers.c`` (two C-API calls, see kvd/buffers.py) and ``kvd/protocol/_receive.c`` (the
middle of a large value and whole landing requests, see kvd/protocol/receive.py), both on the path of every large
SET, and ``kvd/persist/_records.c`` (runs of small log records, see kvd/persist/writer.py), on the path of every
small write with the log on; it needs ``<xxhash.h>`` and ``<zlib.h>`` (Debian's libxxhash-dev and zlib1g-dev).
``kvd/persist/_dump.c`` runs DUMP/RESTORE's CRC-64 and LZF at memory speed (see kvd/persist/dump.py),
``kvd/commands/_bitops.c`` the bitmap commands' loops over whole values (see kvd/commands/bitops.py),
``kvd/commands/_lcs.c`` LCS's table (see kvd/commands/lcs.py), and ``kvd/commands/_hll.c`` the register loops of
HyperLogLog sketches (see kvd/commands/hll.py).

Everything else is in pyproject.toml. All are optional: where one cannot be compiled (no C compiler, no Python
headers, no libxxhash-dev), the install still succeeds and kvd does the same in ctypes and Python, slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kvd._buffers", sources=["kvd/_buffers.c"], optional=True),
        Extension("kvd.protocol._receive", sources=["kvd/protocol/_receive.c"], optional=True),
        Extension("kvd.protocol._multibulk", sources=["kvd/protocol/_multibulk.c"], optional=True),
        Extension("kvd.persist._records", sources=["kvd/persist/_records.c"], libraries=["z"], optional=True),
        Extension("kvd.persist._dump", sources=["kvd/persist/_dump.c"], optional=True),
        Extension("kvd.commands._bitops", sources=["kvd/commands/_bitops.c"], optional=True),
        Extension("kvd.commands._lcs", sources=["kvd/commands/_lcs.c"], optional=True),
        Extension("kvd.commands._hll", sources=["kvd/commands/_hll.c"], optional=True),
    ]
)
