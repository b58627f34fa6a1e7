"""The real conversations the tests run on: a small licensed set inside the repository.

`tests/data/` holds 25 real agent conversations (see its LICENSES.md), so every
clone runs the real-data tests. The long profile (``AGENTCONTEXT_TESTS=long``)
adds the full evaluation set when it is present beside the repository
(``../shared/eval``, 63 conversations); the default never needs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _sizes import LONG

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval"


def _sets() -> list[Path]:
    sets = [DATA]
    if LONG and (SHARED / "manifest.json").exists():
        sets.append(SHARED)
    return sets


def manifest() -> list[dict[str, Any]]:
    """The manifest entries of every conversation in use, each with its ``path``; sorted by file name."""
    entries: dict[str, dict[str, Any]] = {}
    for root in _sets():
        for entry in json.loads((root / "manifest.json").read_text(encoding="utf-8"))["conversations"]:
            entries.setdefault(entry["file"], {**entry, "path": root / "conversations" / entry["file"]})
    return [entries[k] for k in sorted(entries)]


def conversation_files() -> list[Path]:
    """The conversation files in use (JSON Lines, OpenAI Chat Completions format)."""
    return [e["path"] for e in manifest()]


def load(path: Path) -> list[dict[str, Any]]:
    """The messages of one conversation file, as OpenAI dicts."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
