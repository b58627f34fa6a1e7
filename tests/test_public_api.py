"""The public surface: explicit, sorted, importable without extras, and its docstring examples run."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys

import agentcontext


def test_all_is_sorted_and_every_name_exists() -> None:
    assert agentcontext.__all__ == sorted(agentcontext.__all__)
    for name in agentcontext.__all__:
        assert hasattr(agentcontext, name), name


def test_docstring_examples_run() -> None:
    failures = 0
    for info in pkgutil.walk_packages(agentcontext.__path__, "agentcontext."):
        if info.name.startswith("agentcontext.cli") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        failures += doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed
    failures += doctest.testmod(agentcontext).failed
    assert failures == 0


def test_package_imports_without_optional_extras() -> None:
    # Block the extras' packages and import everything users import by default.
    code = (
        "import sys\n"
        "for name in ('httpx', 'tokenizers', 'matplotlib', 'langchain_core', 'llama_index'):\n"
        "    sys.modules[name] = None\n"
        "import agentcontext, agentcontext.cli\n"
        "from agentcontext.formats import openai, anthropic\n"
        "e = agentcontext.ContextEngine(model='gpt-4o')\n"
        "print(e.prepare([agentcontext.Message(role='user', content='hi')]).report.level.label)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "none"
