"""Test setup shared by every test file.

pytest runs with ``--import-mode=importlib``, which leaves ``sys.path`` alone,
so the shared Hypothesis strategies in ``tests/strategies.py`` are made
importable here as ``strategies`` (``from strategies import openai_conversations``).
"""

import os
import sys
from pathlib import Path

# Offline: LiteLLM (the proxy hook's tests) reads its model map from the package instead of fetching it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Machines that set PYTHONDONTWRITEBYTECODE make every process a test starts (the command line, the
# crash tests' writers, the proxies) compile the package from source again: cache the bytecode.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


def pytest_collection_modifyitems(config: object, items: list[object]) -> None:
    import _background

    # Under pytest-xdist every worker collects every test: none starts mypy ahead (the one that runs its
    # test starts it then, while the other worker goes on with the rest).
    if hasattr(config, "workerinput"):
        return
    if any(getattr(item, "originalname", None) == _background.MYPY_TEST for item in items):
        _background.start_mypy(config)  # type: ignore[arg-type]


def pytest_unconfigure(config: object) -> None:
    import _background

    _background.stop(config)  # type: ignore[arg-type]


def pytest_report_header() -> str:
    from _sizes import PROFILE

    return f"agentcontext test profile: {PROFILE} (AGENTCONTEXT_TESTS=long for many more examples)"
