"""scripts/setup.sh's choice of interpreter: the one .venv (and so the daemon) runs on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup.sh"


def _setup(function: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KVD_PYTHON"} | env
    return subprocess.run(
        ["bash", "-c", f'source "{SETUP}"; {function}'],
        capture_output=True,
        text=True,
        env=environ,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def _base(python: str) -> str:
    probe = "import os, sys; print(os.path.realpath(getattr(sys, '_base_executable', sys.executable)))"
    return subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(Path(sys.prefix).resolve() != (REPO / ".venv").resolve(), reason="tests are not run from .venv")
def test_venv_is_made_from_the_interpreter_the_set_up_picks():
    """ensure_venv remakes .venv when it was made from another interpreter (pyenv's, say, before the set-up
    preferred Debian's): otherwise a machine set up earlier keeps running kvd on the slower build."""
    chosen = {"KVD_PYTHON": os.environ["KVD_PYTHON"]} if os.environ.get("KVD_PYTHON") else {}
    picked = _setup("pick_python", **chosen)
    assert picked.returncode == 0, picked.stderr
    assert _base(sys.executable) == _base(picked.stdout.strip().splitlines()[-1])


def test_kvd_python_names_the_interpreter():
    picked = _setup("pick_python", KVD_PYTHON=sys.executable)
    assert picked.returncode == 0, picked.stderr
    assert picked.stdout.strip() == sys.executable


def test_an_unusable_kvd_python_is_refused_with_its_name():
    picked = _setup("pick_python", KVD_PYTHON="/bin/false")
    assert picked.returncode == 1
    assert picked.stdout == ""
    assert "KVD_PYTHON=/bin/false is not a Python >= 3.11" in picked.stderr


def _fake_python(tmp_path: Path, include: Path) -> str:
    """A stand-in interpreter whose only answer is where its headers are."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\necho {include}\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v cc"]).returncode, reason="no C compiler here")
def test_the_extension_is_retried_only_where_it_can_be_built(tmp_path):
    """Without the Python headers pip skips the optional extension every time: ensure_venv must not reinstall kvd
    on every call there (it checks ``can_build_extension`` before retrying a missing build)."""
    headers = tmp_path / "include"
    headers.mkdir()
    assert _setup(f"can_build_extension {_fake_python(tmp_path, headers)}").returncode == 1
    (headers / "Python.h").write_text("")
    assert _setup(f"can_build_extension {_fake_python(tmp_path, headers)}").returncode == 0


def test_a_venv_made_from_another_interpreter_is_noticed(tmp_path):
    """ensure_venv remakes .venv unless ``venv_made_from`` holds: a venv is judged by the interpreter behind it,
    through pyenv's shims and the venv's own links, not by its path."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert _setup(f"venv_made_from {venv} {sys.executable}").returncode == 0
    other = tmp_path / "other"
    other.write_text("#!/bin/sh\necho /opt/some/other/python3.11\n")
    other.chmod(0o755)
    assert _setup(f"venv_made_from {venv} {other}").returncode == 1
    assert _setup(f"venv_made_from {tmp_path / 'missing'} {sys.executable}").returncode == 1


def test_every_extension_setup_py_declares_is_checked_for():
    """ensure_venv reinstalls kvd when an extension that can be built is missing: ``buildable_extensions`` must
    name every one setup.py declares (kvd.commands._hll was left out, so a missing build of it went unnoticed)."""
    declared = set(re.findall(r'Extension\(\s*"([\w.]+)"', (REPO / "setup.py").read_text()))
    assert len(declared) >= 8
    listed = _setup("buildable_extensions")
    assert listed.returncode == 0, listed.stderr
    names = {name.strip() for name in listed.stdout.strip().split(",")}
    headers = Path("/usr/include/xxhash.h").exists() and Path("/usr/include/zlib.h").exists()
    assert names == (declared if headers else declared - {"kvd.persist._records"})
