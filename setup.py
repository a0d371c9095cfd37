"""The one C extension, ``kvd/_buffers.c`` (two C-API calls on the path of every large SET, see kvd/buffers.py).

Everything else is in pyproject.toml. The extension is optional: where it cannot be compiled (no C compiler or
no Python headers), the install still succeeds and kvd/buffers.py makes the same calls through ctypes, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kvd._buffers", sources=["kvd/_buffers.c"], optional=True)])
