"""The package stays typed (mypy --strict) and lint-clean (ruff), as part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import _background

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_is_clean_on_the_package(request: pytest.FixtureRequest) -> None:
    code, output = _background.mypy_result(request.config)  # started with the suite (tests/_background.py)
    assert code == 0, output


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
    assert lines[4] == "pip install -e '.[dev]' && python -m pytest -q -n 2"
    assert "README.md" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _import_graph() -> dict[str, set[str]]:
    """Which top-level parts of the package (modules and subpackages) import which, lazy imports included."""
    import ast

    package = ROOT / "src" / "agentcontext"
    graph: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).with_suffix("").parts
        part = rel[0]
        here = ["agentcontext", *rel[:-1]]  # the package a relative import starts from
        edges = graph.setdefault(part, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    targets = [".".join([*base, node.module] if node.module else base)]
                    if not node.module:
                        targets = [".".join([*base, a.name]) for a in node.names]
                elif node.module:
                    targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                bits = target.split(".")
                if bits[0] == "agentcontext" and len(bits) > 1 and bits[1] != part:
                    edges.add(bits[1])
    return graph


def test_the_import_graph_between_parts_of_the_package_has_no_cycle() -> None:
    """Vocabulary flows one way: compaction <- strategies, summarizers, repair <- engine <- session <- cli.

    The package's ``__init__`` (the public API) imports everything and is left out.
    """
    graph = _import_graph()
    graph.pop("__init__", None)
    for edges in graph.values():
        edges.discard("__init__")
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        assert node not in visiting, "import cycle: " + " -> ".join([*visiting[visiting.index(node) :], node])
        visiting.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert "strategies" not in graph["summarizers"] and "strategies" not in graph["repair"]
    assert "engine" not in graph["strategies"] and "session" not in graph["engine"]


def test_nothing_outside_the_engine_touches_its_private_state() -> None:
    """Callers depend on the `Engine` protocol and `Prepared`; the engine's memory is its own."""
    import re

    private = re.compile(r"\b(?:engine|_engine|self\.engine)\.(_\w+|reset\(|truncator\b|pipelines\b)")
    offenders = []
    for path in (ROOT / "src" / "agentcontext").rglob("*.py"):
        if path.name == "engine.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if private.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []
