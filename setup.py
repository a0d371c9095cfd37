"""The C extensions, both on the path of every large SET: ``kvd/_buffers.c`` (two C-API calls, see kvd/buffers.py)
and ``kvd/protocol/_receive.c`` (the middle of a large value and whole landing requests, see kvd/protocol/receive.py).

Everything else is in pyproject.toml. Both are optional: where they cannot be compiled (no C compiler or no
Python headers), the install still succeeds and kvd does the same in ctypes and Python, slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kvd._buffers", sources=["kvd/_buffers.c"], optional=True),
        Extension("kvd.protocol._receive", sources=["kvd/protocol/_receive.c"], optional=True),
    ]
)
