"""Recall references, how recalled items read, and the recall tool for models.

A model meets three kinds of reference in its context, all written by
agentcontext (never by a tool, never a path):

- ``message:<id>``: a message that was masked, shortened or dropped;
- ``artifact:sha256:<64 hex digits>``: a tool output cut at ingest;
- ``compaction:<n>``: a compaction (summary or drop) and everything it replaced.

`Session.recall` resolves them against the session's own log and artifact
directory only; anything else (another session's ids, a file path, a URL)
raises `RecallError`.
"""

from __future__ import annotations

import re
from typing import Literal, TypeAlias

from ..artifacts import parse_ref
from ..exceptions import ConfigError, RecallError
from ..messages import ImagePart, JSONValue, Message

__all__ = [
    "RECALL_TOOL_DESCRIPTION",
    "RefKind",
    "parse_recall_ref",
    "recall_tool_anthropic",
    "recall_tool_openai",
    "render_message",
]

RefKind: TypeAlias = Literal["message", "artifact", "compaction"]

RECALL_TOOL_DESCRIPTION = (
    "Read the full original of something that was shortened, cleared or summarized to save context. "
    "Pass the reference exactly as the placeholder or marker shows it: message:<id>, "
    "artifact:sha256:<hex> or compaction:<n>. Long originals come back in pages; to read on, call "
    "again with the offset the page ends with."
)
_EXPECTED = "expected message:<id>, artifact:sha256:<64 hex digits> or compaction:<number>"
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def parse_recall_ref(ref: object) -> tuple[RefKind | None, str]:
    """Split a reference into its kind and key; kind None means a bare string (maybe a message id).

    Surrounding whitespace, backticks and quotes are ignored (models quote references).

    Raises:
        RecallError: ``ref`` is not a str, or is a malformed reference.
    """
    if not isinstance(ref, str):
        raise RecallError(f"a recall reference must be a string, got {type(ref).__name__}; {_EXPECTED}")
    text = ref.strip().strip("`'\"").strip()
    shown = text if len(text) <= 100 else text[:97] + "..."
    if not text:
        raise RecallError(f"the recall reference is empty; {_EXPECTED}")
    if text.startswith("message:"):
        key = text[len("message:") :]
        if not key:
            raise RecallError(f"{shown!r} names no message id; {_EXPECTED}")
        return "message", key
    if text.startswith("artifact:"):
        return "artifact", str(parse_ref(text))
    if text.startswith("compaction:"):
        key = text[len("compaction:") :]
        if not key.isdigit():
            raise RecallError(f"{shown!r}: a compaction reference is compaction:<number>; {_EXPECTED}")
        return "compaction", str(int(key))
    return None, text


def render_message(m: Message) -> str:
    """A message as recall shows it: its text, its images as short notes, its tool calls in full."""
    lines: list[str] = []
    text = m.text
    if text:
        lines.append(text)
    for image in m.images:
        lines.append(f"[image: {_image_note(image)}]")
    for call in m.tool_calls:
        lines.append(f"[tool call {call.name} (id {call.id})] {call.arguments}")
    return "\n".join(lines)


def _image_note(image: ImagePart) -> str:
    if image.url.startswith("data:"):
        return f"inline {image.media_type or 'image'}, {len(image.url):,} characters of data"
    return image.url


def message_heading(m: Message) -> str:
    """``[message <id> · <role>, <name>]``: the heading of a message in a compaction transcript."""
    who = m.role if m.name is None else f"{m.role}, {m.name}"
    return f"[message {m.id} · {who}]"


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise ConfigError(f"a tool name is 1-64 characters of a-z, A-Z, 0-9, _ or -, got {name!r}")
    return name


def recall_tool_openai(
    *, api: Literal["chat", "responses"] = "chat", name: str = "recall"
) -> dict[str, JSONValue]:
    """The recall tool in OpenAI's format, ready for the ``tools`` list of a request.

    Uses strict mode (Structured Outputs), so every property is listed in
    ``required`` and ``offset`` accepts ``null`` for "from the start".

    Args:
        api: ``"chat"`` (default) for Chat Completions, whose tools nest the
            definition under ``"function"``; ``"responses"`` for the Responses
            API, whose function tools are flat.
        name: the tool's name; default ``"recall"``.

    Pair it with `Session.handle_recall`, which takes the call's ``arguments``
    string and returns the text for the tool message.
    """
    _check_name(name)
    parameters: dict[str, JSONValue] = {
        "type": "object",
        "properties": {
            "ref": {
                "type": "string",
                "description": "The reference, e.g. message:msg_1a2b or artifact:sha256:...",
            },
            "offset": {
                "type": ["integer", "null"],
                "description": "Character offset to start reading at; null for the start.",
            },
        },
        "required": ["ref", "offset"],
        "additionalProperties": False,
    }
    if api == "chat":
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": RECALL_TOOL_DESCRIPTION,
                "parameters": parameters,
                "strict": True,
            },
        }
    if api == "responses":
        return {
            "type": "function",
            "name": name,
            "description": RECALL_TOOL_DESCRIPTION,
            "parameters": parameters,
            "strict": True,
        }
    raise ConfigError(f"api must be 'chat' or 'responses', got {api!r}")


def recall_tool_anthropic(*, name: str = "recall") -> dict[str, JSONValue]:
    """The recall tool in Anthropic's Messages API format (``name``, ``description``, ``input_schema``).

    Pair it with `Session.handle_recall`, which takes the ``tool_use`` block's
    ``input`` dict and returns the text for the ``tool_result``.
    """
    return {
        "name": _check_name(name),
        "description": RECALL_TOOL_DESCRIPTION,
        "input_schema": {
            "type": "object",
            "properties": {
                "ref": {
                    "type": "string",
                    "description": "The reference, e.g. message:msg_1a2b or artifact:sha256:...",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Character offset to start reading at; omit for the start.",
                },
            },
            "required": ["ref"],
        },
    }
