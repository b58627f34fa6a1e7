"""The package stays typed (mypy --strict) and lint-clean (ruff), as part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_is_clean_on_the_package() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by the dev extra")
def test_ruff_is_clean() -> None:
    proc = subprocess.run(
        ["ruff", "check", "src", "tests", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_readme_opens_with_the_two_commands_ci_runs() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[2] == "```bash"
    assert lines[3].startswith("pip install -e '.[all]' && agentcontext replay examples/")
    assert lines[4] == "pip install -e '.[dev]' && python -m pytest -q"
    assert "README.md" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
