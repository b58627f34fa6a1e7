"""Slow checks started when the suite starts, so they run on the second core while the other tests run.

`mypy --strict` on the package takes most of a minute; the suite would wait for it
alone. ``conftest.py`` starts it once collection shows its test will run, and the
test then only collects the result (or starts it itself, when run on its own).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MYPY_TEST = "test_mypy_strict_is_clean_on_the_package"
_MYPY: pytest.StashKey[subprocess.Popen[str]] = pytest.StashKey()


def start_mypy(config: pytest.Config) -> None:
    config.stash[_MYPY] = subprocess.Popen(
        [sys.executable, "-m", "mypy", "--no-incremental"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def mypy_result(config: pytest.Config) -> tuple[int, str]:
    """mypy's exit code and output, from the run started with the suite (or one started now)."""
    if _MYPY not in config.stash:
        start_mypy(config)
    proc = config.stash[_MYPY]
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def stop(config: pytest.Config) -> None:
    proc = config.stash.get(_MYPY, None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.communicate()
