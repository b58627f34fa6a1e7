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

import json
import re
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..artifacts import REF_PREFIX, ArtifactStore, parse_ref
from ..compaction import MessageKind, kind_of
from ..exceptions import ConfigError, RecallError
from ..messages import FilePart, ImagePart, JSONValue, Message
from ._records import CompactionRecord

__all__ = [
    "RECALL_TOOL_DESCRIPTION",
    "RecallSources",
    "RefKind",
    "answer_recall_call",
    "parse_recall_ref",
    "parse_tool_arguments",
    "recall_text",
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


@dataclass(frozen=True, slots=True)
class RecallSources:
    """Everything recall may read: one session's records and artifacts, nothing else."""

    archive: Mapping[str, Message]
    """Every message of the log by id (originals and replacements)."""
    held_output: Callable[[str], str | None]
    """The text of a tool output in the log by the digest of an artifact reference (`LogState.held_output`)."""
    compactions: Mapping[int, CompactionRecord]
    """Compaction records by seq."""
    known_artifacts: Set[str]
    """The artifact refs this session's records mention; no other artifact can be recalled."""
    stores: tuple[ArtifactStore, ...]
    """Where to look for those artifacts, in order."""


def recall_text(ref: object, sources: RecallSources) -> str:
    """The full original behind ``ref`` (see `Session.recall`)."""
    kind, key = parse_recall_ref(ref)
    if kind == "artifact":
        return _artifact(key, sources)
    if kind == "compaction":
        return _compaction(int(key), sources)
    m = sources.archive.get(key)
    if m is None:
        if kind is None:
            raise RecallError(f"{key[:100]!r} is not a reference to this session's records; {_EXPECTED}")
        raise RecallError(f"no message {key[:100]!r} in this session")
    covers = _covers(m)
    if covers is not None:
        # A summary's or an elision note's reference reads back what it stands for (its text names it).
        what = "a summary" if kind_of(m) is MessageKind.SUMMARY else "a note"
        parts = [f"message:{key} is {what} standing for {len(covers)} message(s):"]
        for mid in covers:
            original = sources.archive.get(mid) or _uncut(mid, sources)
            parts.append(
                f"{message_heading(original)}\n{render_message(original)}"
                if original
                else f"[message {mid}: not in the log]"
            )
        return "\n\n".join(parts)
    truncated = m.metadata.get("truncated") if m.metadata else None
    if isinstance(truncated, Mapping) and isinstance(truncated.get("ref"), str):
        try:
            return _artifact(str(truncated["ref"]), sources)
        except RecallError:
            pass  # the preview is all there is
    return render_message(m)


def _uncut(mid: str, sources: RecallSources) -> Message | None:
    """The original of a tool output cut at ingest in the call that also summarized it (only the cut copy
    was covered, and it was never in a view, so never stored): found through the ingest action."""
    for record in sources.compactions.values():
        for action in record.actions:
            replaced = action.get("replacement_ids")
            originals = action.get("message_ids")
            if (
                action.get("strategy") == "ingest"
                and isinstance(replaced, list)
                and isinstance(originals, list)
                and mid in replaced
            ):
                original = originals[replaced.index(mid)] if len(originals) == len(replaced) else None
                return sources.archive.get(original) if isinstance(original, str) else None
    return None


def _covers(m: Message) -> list[str] | None:
    """The ids a summary or an elision note agentcontext wrote stands for; None for any other message."""
    if kind_of(m) not in (MessageKind.SUMMARY, MessageKind.ELISION):
        return None
    meta = m.metadata.get("agentcontext")
    covers = meta.get("covers") if isinstance(meta, Mapping) else None
    return [c for c in covers if isinstance(c, str)] if isinstance(covers, list | tuple) else None


def _artifact(ref: str, sources: RecallSources) -> str:
    if ref not in sources.known_artifacts:
        # A cut made outside the session's own prepare (a framework's per-call filter) recorded no
        # reference, but a reference names its text: a tool output the log holds whole is this session's.
        held = sources.held_output(ref.removeprefix(REF_PREFIX))
        if held is None:
            raise RecallError(f"{ref!r} is not an artifact of this session")
        return held
    errors: list[str] = []
    for store in sources.stores:
        try:
            return store.get(ref)
        except RecallError as exc:
            errors.append(str(exc))
    held = sources.held_output(ref.removeprefix(REF_PREFIX))
    if held is not None:
        return held
    raise RecallError(
        f"{ref!r} was recorded by this session but its artifact store no longer holds it ({'; '.join(errors)})"
    )


def _compaction(seq: int, sources: RecallSources) -> str:
    record = sources.compactions.get(seq)
    if record is None:
        known = ", ".join(str(s) for s in sorted(sources.compactions)[-5:]) or "none"
        raise RecallError(f"no compaction:{seq} in this session (latest: {known})")
    parts = [
        f"compaction:{seq} ({record.level or 'unknown'} level, {record.ts or 'time unknown'}) replaced "
        f"{len(record.covers)} message(s); prompt tokens {record.tokens_before} -> {record.tokens_after}."
    ]
    for mid in record.covers:
        m = sources.archive.get(mid)
        parts.append(
            f"{message_heading(m)}\n{render_message(m)}" if m else f"[message {mid}: not in the log]"
        )
    return "\n\n".join(parts)


def parse_tool_arguments(arguments: str | Mapping[str, object]) -> dict[str, object] | str:
    """A tool call's arguments as a dict, or the reason they are not one.

    Takes them as the provider gives them: the JSON string of an OpenAI tool
    call or the ``input`` dict of an Anthropic ``tool_use`` block.
    """
    try:
        args: object = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except (ValueError, TypeError) as exc:
        return f"the arguments are not a JSON object ({exc})"
    if not isinstance(args, dict):
        return "the arguments must be a JSON object"
    return args


def answer_recall_call(
    arguments: str | Mapping[str, object], sources: RecallSources, *, max_chars: int
) -> str:
    """The text for a recall tool result: one page of the original, or ``recall failed: ...``."""
    args = parse_tool_arguments(arguments)
    if isinstance(args, str):
        return f'recall failed: {args}; pass {{"ref": "message:<id>"}}'
    offset = args.get("offset")
    if offset is None:
        offset = 0
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return f"recall failed: offset must be a whole number >= 0, got {offset!r}"
    try:
        text = recall_text(args.get("ref"), sources)
    except RecallError as exc:
        return f"recall failed: {exc}"
    size = len(text)
    if offset > size or (offset == size and size):
        return f"recall failed: offset {offset:,} is past the end ({size:,} characters)"
    end = min(size, offset + max_chars)
    page = text[offset:end]
    if offset == 0 and end == size:
        return page
    more = f"; call recall again with offset={end} for more" if end < size else " (the end)"
    return f"{page}\n[recall: characters {offset:,}-{end:,} of {size:,}{more}]"


def render_message(m: Message) -> str:
    """A message as recall shows it: its text, its images as short notes, its tool calls in full."""
    lines: list[str] = []
    text = m.text
    if text:
        lines.append(text)
    for part in m.attachments:
        lines.append(f"[{part.kind}: {_attachment_note(part)}]")
    for call in m.tool_calls:
        lines.append(f"[tool call {call.name} (id {call.id})] {call.arguments}")
    return "\n".join(lines)


def _attachment_note(part: ImagePart | FilePart) -> str:
    name = f"{part.name}, " if isinstance(part, FilePart) and part.name else ""
    if part.url.startswith("data:"):
        return f"{name}inline {part.media_type or part.kind}, {len(part.url):,} characters of data"
    return name + part.url


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
