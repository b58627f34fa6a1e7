"""Reading and writing conversations for the command line (OpenAI format, JSON array or JSON Lines)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, TextIO

from ..exceptions import InvalidMessageError, UsageError
from ..formats import openai as oai
from ..messages import Message

__all__ = ["Conversation", "InputError", "read_conversation", "write_conversation"]

Layout = Literal["json", "jsonl"]


class InputError(UsageError):
    """A conversation file cannot be read or is not an OpenAI-format conversation."""


class Conversation:
    """A conversation read from a file: its messages and the layout it came in."""

    def __init__(self, messages: list[Message], layout: Layout, source: str) -> None:
        self.messages = messages
        self.layout = layout
        self.source = source


def _read_text(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    p = Path(path)
    try:
        if p.is_dir():
            raise InputError(f"{path}: is a directory, expected a conversation file (.json or .jsonl)")
        return p.read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _dicts_from(text: str, source: str) -> tuple[list[object], Layout]:
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{source}: empty; expected a JSON array of messages or one message per line")
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        if not isinstance(data, list):  # pragma: no cover - starts with "[" so it is a list
            raise InputError(f"{source}: expected a JSON array of messages")
        return data, "json"
    if stripped.startswith("{"):
        # One JSON object: either a whole request ({"messages": [...]}) or the first line of JSON Lines.
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and isinstance(whole.get("messages"), list):
            return list(whole["messages"]), "json"
        items: list[object] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"{source}: line {lineno} is not valid JSON ({exc.msg}, column {exc.colno})"
                ) from None
        return items, "jsonl"
    raise InputError(
        f"{source}: not a conversation; expected a JSON array of OpenAI-format messages, "
        "a JSON object with a 'messages' array, or JSON Lines (one message per line)"
    )


def read_conversation(path: str) -> Conversation:
    """Read an OpenAI-format conversation from ``path`` (``-`` for stdin).

    Raises:
        InputError: the file is missing, unreadable, not JSON, or not a list of messages
            (the message names the file, the line or the message index, and the field).
    """
    text, source = _read_text(path)
    items, layout = _dicts_from(text, source)
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            where = f"line {i + 1}" if layout == "jsonl" else f"message {i}"
            raise InputError(
                f"{source}: {where} is a {type(item).__name__}, expected a JSON object with a 'role'"
            )
    try:
        messages = oai.to_messages(items)  # type: ignore[arg-type]
    except InvalidMessageError as exc:
        raise InputError(f"{source}: {exc}") from None
    return Conversation(messages, layout, source)


def write_conversation(messages: Sequence[Message], layout: Layout, out: TextIO) -> None:
    """Write ``messages`` in OpenAI format, as a JSON array or JSON Lines."""
    dicts = oai.from_messages(list(messages), validate=False)
    if layout == "jsonl":
        for d in dicts:
            out.write(json.dumps(d, ensure_ascii=False) + "\n")
    else:
        json.dump(dicts, out, ensure_ascii=False, indent=1)
        out.write("\n")
