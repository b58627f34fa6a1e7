"""Reading and writing what the command line is given: a conversation or a whole request body.

What is recognised, by shape (or named with ``--format``):

- a bare conversation: a JSON array of messages, or JSON Lines (one message per
  line), in OpenAI Chat Completions, Anthropic Messages or Responses API form;
- a request body: OpenAI Chat Completions (``{"model", "messages", "tools",
  ...}``), Anthropic Messages (``{"system", "messages", "tools", ...}``) or the
  Responses API (``{"input", "instructions", "tools", ...}``).

A `Request` holds the messages the engine manages, the tool definitions and the
instructions it must count, and everything else as it came. Anthropic's
``system`` and the Responses API's ``instructions`` are the engine's
``instructions=``: counted as a system message, never changed, and written back
verbatim. `write_request` writes the prepared messages back in the layout they
came in, every other field unchanged (the input itself, verbatim, when the
engine changed nothing).

Hostile files get one clear error naming the problem (`InputError`): binary or
non-UTF-8 bytes, empty or truncated JSON (with the line and column), data nested
deeper than `MAX_DEPTH`, a JSON value of the wrong shape (naming the line, the
message and the field).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, TextIO, cast

from ..exceptions import ConversionWarning, InvalidMessageError, UsageError
from ..formats import anthropic as anthropic_format
from ..formats import openai as oai
from ..formats._common import canonical_json
from ..formats.openai import Unknown
from ..messages import JSONValue, Message

__all__ = [
    "FORMATS",
    "MAX_DEPTH",
    "InputError",
    "Request",
    "read_request",
    "write_file",
    "write_request",
]

Format = Literal["openai", "anthropic", "responses"]
FORMATS: tuple[str, ...] = ("auto", "openai", "anthropic", "responses")
"""The values of ``--format``."""
Layout = Literal["json", "jsonl", "body"]

MAX_DEPTH = 200
"""Arrays and objects nested deeper than this in one message (or tool definition) are refused:
no conversation needs it, and a crafted file would otherwise exhaust the stack."""

_SNIFF = 1 << 16
_BOM = b"\xef\xbb\xbf"
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "refusal"})
_ANTHROPIC_PARTS = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "document",
        "server_tool_use",
        "search_result",
    }
)
_OPENAI_PARTS = frozenset({"image_url", "input_audio"})
_BODY_FIELDS: Mapping[Format, str] = {"openai": "messages", "anthropic": "messages", "responses": "input"}
_REPLY_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_FORM_NAMES: Mapping[Format, str] = {
    "openai": "OpenAI Chat Completions",
    "anthropic": "Anthropic Messages",
    "responses": "Responses API",
}

Progress = Callable[[int], None]
"""Called with the number of bytes read so far."""


class InputError(UsageError):
    """A file cannot be read, or is not a conversation or request body; the message says where and why."""


@dataclass(kw_only=True)
class Request:
    """What a file holds: the messages the engine manages, the tools it counts, and the rest as it came."""

    format: Format
    layout: Layout
    source: str
    messages: list[Message]
    """The conversation the engine manages."""
    instructions: str | None = None
    """The text of a body's ``system`` (Anthropic) or ``instructions`` (Responses): the system prompt sent
    outside the messages, which the engine counts and never changes (the field is written back as it came)."""
    tools: list[dict[str, JSONValue]] | None = None
    """The request's tool definitions, as they came (written back unchanged)."""
    counted_tools: list[Mapping[str, JSONValue]] | None = None
    """``tools`` as the engine counts them (hosted tools without a name, as their JSON)."""
    body: dict[str, JSONValue] | None = None
    """The whole request body (layout ``body``), every field as it came."""
    original: JSONValue = None
    """The managed field as it came (``messages`` / ``input``, or the bare array), for a verbatim write-back;
    None when it is not kept (a large OpenAI conversation converts without loss)."""
    reply_limit: tuple[str, int] | None = None
    """The body's limit on the reply (``max_tokens``...): a request whose prompt and reply
    limit exceed the window is refused by the provider."""
    notes: list[str] = field(default_factory=list)
    """What the user should know about how the file was read."""

    def describe(self) -> str:
        """What was read, in a few words (``"an Anthropic Messages request body"``)."""
        name = _FORM_NAMES[self.format]
        if self.layout == "body":
            return f"{name} request body"
        return f"{name} messages ({'JSON Lines' if self.layout == 'jsonl' else 'JSON array'})"


# ----------------------------------------------------------------------------- reading


KEEP_UNKNOWN_HELP = (
    "carry content agentcontext does not model (Anthropic thinking blocks, cache_control, a document's "
    "citations, other parts) "
    "through unchanged instead of refusing it; thinking blocks are counted, the rest is not, and a note "
    "names each kind"
)
"""The help of ``--keep-unknown`` (`fit`, `count`, `replay`): ``unknown="keep"`` for `read_request`."""


def read_request(
    path: str, *, fmt: str = "auto", progress: Progress | None = None, unknown: Unknown = "raise"
) -> Request:
    """Read a conversation or a request body from ``path`` (``-`` for stdin).

    Args:
        path: the file.
        fmt: ``auto`` (recognise by shape), ``openai``, ``anthropic`` or ``responses``.
        progress: called with the bytes read so far (for a progress bar).
        unknown: ``raise`` refuses content parts and blocks agentcontext does not model; ``keep``
            carries them through unchanged (thinking blocks counted, the rest not; each kind is named
            in the request's notes).

    Raises:
        InputError: the file is missing, unreadable, binary, not UTF-8, not JSON, nested too
            deeply, or not a conversation (the message names the line, the message and the field).
    """
    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    source = "<stdin>" if path == "-" else path
    with _open(path) as f:
        reader = _Lines(f, source, progress)
        reader.sniff()
        first = reader.next_nonblank()
        if first is None:
            raise InputError(
                f"{source}: empty; expected a JSON array of messages, a request body, or one message per line"
            )
        lineno, line = first
        start = line.lstrip()[:1]
        if start == "[":
            data = reader.parse(reader.document(), lineno, whole=True, to_end=True)
            return _from_array(data, "json", source, fmt, unknown=unknown)
        if start != "{":
            raise InputError(
                f"{source}: not a conversation (line {lineno} starts with {line.strip()[:20]!r}); expected a JSON "
                'array of messages, a request body ({"messages": [...]}), or JSON Lines (one message per line)'
            )
        try:
            head = reader.parse(line, lineno, whole=False)
        except _Incomplete:  # one JSON document over several lines (a pretty-printed body)
            data = reader.parse(reader.document(), lineno, whole=True, to_end=True)
            return _from_object(data, source, fmt, unknown)
        second = reader.next_nonblank()
        if second is None:
            return _from_object(head, source, fmt, unknown)
        items: list[object] = [head]
        lines = [lineno]
        for n, text in _chain(second, reader):
            items.append(reader.parse(text, n, whole=True, to_end=not text.endswith("\n")))
            lines.append(n)
        return _from_array(items, "jsonl", source, fmt, lines=lines, unknown=unknown)


class _Constant(Exception):
    """NaN or Infinity in the input: Python's reader accepts them, JSON does not."""


def _no_constant(name: str) -> object:
    raise _Constant(name)


class _Incomplete(Exception):
    """A line that is the start of a longer JSON document."""


def _open(path: str) -> AbstractContextManager[IO[bytes]]:
    if path == "-":
        return nullcontext(sys.stdin.buffer)  # read, never closed: it is not ours
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a directory, expected a conversation file (.json or .jsonl)")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a pipe is fine: `fit <(zcat run.jsonl.gz)`
            raise InputError(f"{path}: not a file (a device or a socket); expected a conversation file")
        return p.open("rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _chain(first: tuple[int, str], reader: _Lines) -> Iterator[tuple[int, str]]:
    yield first
    while (item := reader.next_nonblank()) is not None:
        yield item


class _Lines:
    """The decoded lines of a byte stream, with line numbers; refuses binary and non-UTF-8 input."""

    def __init__(self, f: IO[bytes], source: str, progress: Progress | None) -> None:
        self.f = f
        self.source = source
        self.progress = progress
        self.lineno = 0
        self.offset = 0
        self.line_start = 0
        """Where the last line returned starts, in bytes."""
        self.line_raw = b""

    def sniff(self) -> None:
        """Refuse binary and UTF-16 input from its first bytes, before reading any further."""
        peek = getattr(self.f, "peek", None)
        head = peek(_SNIFF)[:_SNIFF] if callable(peek) else b""
        if head[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(head) > 3 and b"\x00" in head[1:4:2] and head[0]):
            raise InputError(f"{self.source}: not UTF-8 text: it looks like UTF-16; save it as UTF-8")
        if b"\x00" in head:
            raise InputError(
                f"{self.source}: binary data (NUL bytes), not a conversation; expected JSON text"
            )

    def _decode(self, raw: bytes, lineno: int) -> str:
        if self.offset == 0 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte order mark
        if b"\x00" in raw:
            if self.offset == 0 and (raw[:2] in (b"\xff\xfe", b"\xfe\xff") or raw[1:2] == b"\x00"):
                raise InputError(f"{self.source}: not UTF-8 text: it looks like UTF-16; save it as UTF-8")
            raise InputError(f"{self.source}: binary data (a NUL byte on line {lineno}), not a conversation")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{self.source}: not UTF-8 text (line {lineno}, byte {self.offset + exc.start} of the file); "
                "save it as UTF-8"
            ) from None

    def _read(self, raw: bytes, lineno: int) -> str:
        text = self._decode(raw, lineno)
        self.offset += len(raw)
        if self.progress is not None:
            self.progress(self.offset)
        return text

    def next_nonblank(self) -> tuple[int, str] | None:
        """The next line with something on it, and its number; None at the end."""
        while True:
            try:
                raw = self.f.readline()
            except OSError as exc:
                raise InputError(f"{self.source}: cannot be read ({exc.strerror or exc})") from None
            if not raw:
                return None
            self.lineno += 1
            start = self.offset
            text = self._read(raw, self.lineno)
            if text.strip():
                self.line_start, self.line_raw = start, raw
                return self.lineno, text

    def document(self) -> bytes:
        """The rest of the input from the start of the last line returned: one JSON document.

        Read as bytes (the JSON reader decodes them once), and from the file itself
        when it can seek, so a large document is never copied to join its first line.
        """
        try:
            if self.f.seekable():
                start = self.line_start + (
                    3 if self.line_start == 0 and self.line_raw.startswith(_BOM) else 0
                )
                self.f.seek(start)
                data = self.f.read()
            else:
                data = self.line_raw + self.f.read()
                if self.line_start == 0 and data.startswith(_BOM):
                    data = data[3:]
        except OSError as exc:
            raise InputError(f"{self.source}: cannot be read ({exc.strerror or exc})") from None
        self.offset = self.line_start + len(data)
        if self.progress is not None:
            self.progress(self.offset)
        return data

    def parse(self, text: str | bytes, lineno: int, *, whole: bool, to_end: bool = False) -> object:
        """``text`` (starting at line ``lineno``) as one JSON value; errors name the line and column.

        ``whole``: ``text`` must be one complete value (else `_Incomplete`); ``to_end``: it runs to the
        end of the file, so a value that stops at its end is truncated (one line of several is not).
        """
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{self.source}: not UTF-8 text (byte {self.line_start + exc.start} of the file); save it as UTF-8"
            ) from None
        except _Constant as exc:
            raise InputError(
                f"{self.source}: not valid JSON at line {lineno}: {exc} is not a JSON number "
                "(JSON has no NaN or Infinity)"
            ) from None
        except RecursionError:
            raise InputError(
                f"{self.source}: line {lineno}: nested too deeply (more than {MAX_DEPTH} levels of arrays or objects)"
            ) from None
        except json.JSONDecodeError as exc:
            if not whole and exc.msg != "Extra data":
                raise _Incomplete from None
            where = f"line {lineno + exc.lineno - 1}, column {exc.colno}"
            # Python's "Unterminated string starting at" and "Invalid control character at" end in "at".
            problem = exc.msg.removesuffix(" at")
            unclosed = problem.startswith("Unterminated string") and not to_end
            if unclosed or (
                problem.startswith("Invalid control") and exc.doc[exc.pos : exc.pos + 1] in "\r\n"
            ):
                # A JSON string cannot hold a raw line break: this one runs past the end of its line.
                raise InputError(
                    f"{self.source}: not valid JSON at {where}: a string is not closed before the end of its "
                    "line (a line break inside a string is written \\n)"
                ) from None
            if problem.startswith("Invalid control"):
                problem = "a raw control character inside a string (write a tab as \\t)"
            ended = exc.pos >= len(exc.doc.rstrip()) or problem.startswith("Unterminated string")
            if ended and exc.msg != "Extra data":
                what = "truncated: the JSON starting at" if to_end else "the JSON on"
                raise InputError(
                    f"{self.source}: {what} line {lineno} ends before it is complete ({problem} at {where})"
                ) from None
            raise InputError(f"{self.source}: not valid JSON at {where}: {problem}") from None
        except ValueError as exc:
            # Python refuses integers of more than 4,300 digits (a denial-of-service guard).
            raise InputError(f"{self.source}: line {lineno}: a number too long to read ({exc})") from None
        _check_depth(value, self.source, f"line {lineno}")
        return value


def _check_depth(value: object, source: str, where: str) -> None:
    """Refuse a value nested deeper than `MAX_DEPTH` (without recursion: the check itself must not overflow)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise InputError(
                f"{source}: {where}: nested too deeply (more than {MAX_DEPTH} levels of arrays or objects)"
            )
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


# ----------------------------------------------------------------------------- shapes


def _is_session_header(item: object) -> bool:
    """The first record of an agentcontext session log."""
    return isinstance(item, Mapping) and item.get("type") == "header" and "schema_version" in item


def _shape_of(item: object) -> Format | None:
    """The format one message or item reveals, when it is specific to one (else None)."""
    if not isinstance(item, Mapping):
        return None
    kind = item.get("type")
    if isinstance(kind, str) and ("role" not in item or kind == "message"):
        return "responses"
    if item.get("role") == "tool" or "tool_calls" in item or "tool_call_id" in item:
        return "openai"
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            pt = part.get("type")
            if pt in _ANTHROPIC_PARTS or (pt == "image" and "source" in part):
                return "anthropic"
            if pt in _OPENAI_PARTS:
                return "openai"
            if pt in _RESPONSES_PARTS:
                return "responses"
    return None


def _shape_of_list(items: Sequence[object]) -> Format:
    for item in items:
        found = _shape_of(item)
        if found is not None:
            return found
    return "openai"


def _from_object(data: object, source: str, fmt: str, unknown: Unknown) -> Request:
    """A single JSON object: a request body, or a conversation of one message."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a JSON object or array, got {type(data).__name__}")
    if _is_session_header(data):
        return _from_array([data], "jsonl", source, fmt, lines=[1], unknown=unknown)
    if "messages" in data or "input" in data:
        return _from_body(data, source, fmt, unknown)
    if "role" in data or "type" in data:
        return _from_array([data], "jsonl", source, fmt, lines=[1], unknown=unknown)
    keys = ", ".join(repr(k) for k in list(data)[:6])
    raise InputError(
        f"{source}: a JSON object without 'messages' or 'input' (keys: {keys}); expected a request body, "
        "a JSON array of messages, or one message per line"
    )


def _body_format(body: Mapping[str, object], fmt: str) -> Format:
    if fmt != "auto":
        return cast(Format, fmt)
    if "input" in body and "messages" not in body:
        return "responses"
    if "system" in body or "anthropic_version" in body:
        return "anthropic"
    tools = body.get("tools")
    if isinstance(tools, list) and any(isinstance(t, Mapping) and "input_schema" in t for t in tools):
        return "anthropic"
    messages = body.get("messages")
    return _shape_of_list(messages) if isinstance(messages, list) else "openai"


def _from_body(body: dict[str, Any], source: str, fmt: str, unknown: Unknown) -> Request:
    form = _body_format(body, fmt)
    key = _BODY_FIELDS[form]
    if key not in body:
        other = "input" if key == "messages" else "messages"
        raise InputError(
            f"{source}: a {form} request body needs {key!r}; this one has {other!r} (pass --format to say which API)"
        )
    managed = body[key]
    if form == "responses" and isinstance(managed, str):
        items: object = [{"role": "user", "content": managed}]
    else:
        items = managed
    if not isinstance(items, list):
        raise InputError(f"{source}: {key!r} must be an array of messages, got {type(managed).__name__}")
    instructions: str | None = None
    if form == "anthropic" and body.get("system") not in (None, "", []):
        instructions = _instructions(body["system"], source, "system")
    if form == "responses" and body.get("instructions") not in (None, ""):
        instructions = _instructions(body["instructions"], source, "instructions")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InputError(
            f"{source}: 'tools' must be an array of tool definitions, got {type(tools).__name__}"
        )
    functions = body.get("functions")  # Chat Completions' older form of tools, billed the same way
    if functions is not None and not isinstance(functions, list):
        raise InputError(
            f"{source}: 'functions' must be an array of function definitions, got {type(functions).__name__}"
        )
    request = _convert(items, form, "body", source, unknown=unknown)
    request.instructions = instructions
    request.body = body
    request.original = managed
    request.tools = tools
    sent = [*(tools or []), *(functions or [])]
    request.counted_tools = _countable(sent, source, request.notes) if sent else None
    for name in _REPLY_LIMITS:
        limit = body.get(name)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            request.reply_limit = (name, limit)
            break
    return request


def _instructions(value: object, source: str, key: str) -> str:
    """The text of a body's ``system`` (Anthropic) or ``instructions`` (Responses), as the engine counts it.

    Only the text is taken (a ``cache_control`` mark does not change what the model reads); the
    field itself is written back as it came.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts: list[str] = []
        for j, block in enumerate(value):
            text = block.get("text") if isinstance(block, Mapping) else None
            if not isinstance(text, str):
                raise InputError(f"{source}: {key}[{j}] must be a text block {{'type': 'text', 'text': ...}}")
            texts.append(text)
        return "\n\n".join(texts)
    raise InputError(
        f"{source}: {key!r} must be a string or a list of text blocks, got {type(value).__name__}"
    )


def _countable(tools: list[object], source: str, notes: list[str]) -> list[Mapping[str, JSONValue]]:
    """The tool definitions as the engine counts them: a hosted tool without a name counts as its JSON text."""
    out: list[Mapping[str, JSONValue]] = []
    hosted = 0
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InputError(f"{source}: tools[{i}] must be a JSON object, got {type(tool).__name__}")
        fn = tool.get("function")
        named = isinstance(tool.get("name"), str) or (
            isinstance(fn, Mapping) and isinstance(fn.get("name"), str)
        )
        if named:
            out.append(tool)
            continue
        hosted += 1
        kind = tool.get("type")
        out.append(
            {"name": kind if isinstance(kind, str) else f"tool_{i}", "description": canonical_json(tool)}
        )
    if hosted:
        notes.append(
            f"{hosted} hosted tool(s) without a name (e.g. web search) counted as their JSON text: "
            "the provider does not publish what they cost"
        )
    return out


def _from_array(
    items: object,
    layout: Layout,
    source: str,
    fmt: str,
    *,
    lines: list[int] | None = None,
    unknown: Unknown = "raise",
) -> Request:
    if not isinstance(items, list):  # pragma: no cover - a JSON document starting with "[" is a list
        raise InputError(f"{source}: expected a JSON array of messages")
    if items and _is_session_header(items[0]):
        raise InputError(
            f"{source}: a session log, not a conversation; write out what the model sees with "
            f"`agentcontext export {source}` and use that"
        )
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            where = f"line {lines[i]}" if lines is not None else f"message {i}"
            raise InputError(
                f"{source}: {where} is a {_json_type(item)}, expected a JSON object (a message with a 'role')"
            )
        if "messages" in item and "role" not in item and len(items) > 1:
            where = f"line {lines[i]}" if lines is not None else f"item {i}"
            raise InputError(
                f"{source}: {where} is a request body ({{'messages': ...}}); give one body per file, "
                "or one message per line"
            )
    form: Format = cast(Format, fmt) if fmt != "auto" else _shape_of_list(items)
    return _convert(items, form, layout, source, lines=lines, unknown=unknown)


def _json_type(value: object) -> str:
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _convert(
    items: list[Any],
    form: Format,
    layout: Layout,
    source: str,
    *,
    lines: list[int] | None = None,
    unknown: Unknown = "raise",
) -> Request:
    """Convert wire dicts to messages; an OpenAI list converts one item at a time and lets each dict go."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConversionWarning)
            if form == "openai":
                messages: list[Message] = []
                previous: str | None = None
                keep = layout == "body"
                for i in range(len(items)):
                    message = oai.to_message(items[i], index=i, previous_id=previous, unknown=unknown)
                    messages.append(message)
                    previous = message.id
                    if not keep:
                        items[i] = None  # converted losslessly: no need to hold the dict too
                original: JSONValue = None
            elif form == "anthropic":
                messages = anthropic_format.to_messages(items, unknown=unknown)
                original = items
            else:
                messages = _responses().to_messages(items, unknown=unknown)
                original = items
    except InvalidMessageError as exc:
        where = ""
        if lines is not None and exc.index is not None and 0 <= exc.index < len(lines):
            where = f"line {lines[exc.index]}: "
        hint = (
            "; pass --keep-unknown to carry such parts through unchanged (thinking counted, the rest not)"
            if unknown == "raise" and ("unsupported" in str(exc) or "unexpected key" in str(exc))
            else ""
        )
        raise InputError(f"{source}: {where}{exc} ({_FORM_NAMES[form]} format){hint}") from None
    request = Request(format=form, layout=layout, source=source, messages=messages, original=original)
    seen: set[str] = set()
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, ConversionWarning) and text not in seen:
            seen.add(text)
            request.notes.append(text)
    return request


def _responses() -> Any:
    try:
        from ..formats import responses  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        raise InputError(
            "this looks like a Responses API request ({'input': [...]}); this version of agentcontext "
            "cannot read that format yet"
        ) from None
    return responses


# ----------------------------------------------------------------------------- writing


def wire_messages(request: Request, messages: Sequence[Message]) -> JSONValue:
    """The prepared ``messages`` as the request's managed field (``messages``, ``input`` or the bare list)."""
    if request.format == "openai":
        return cast(JSONValue, oai.from_messages(messages, validate=False))
    if request.format == "anthropic":
        system, wire = anthropic_format.from_messages(messages, validate=False, late_system="inline")
        out = cast(list[JSONValue], wire)
        if system is not None:  # only a bare array can hold system messages (Anthropic's inline form)
            out.insert(0, {"role": "system", "content": cast(JSONValue, system)})
        return out
    return cast(JSONValue, _responses().from_messages(messages, validate=False))


def write_request(request: Request, messages: Sequence[Message], out: TextIO, *, unchanged: bool) -> None:
    """Write the prepared ``messages`` in the request's format and layout, every other field as it came.

    Args:
        request: what was read.
        messages: the prepared messages.
        out: where to write.
        unchanged: the engine changed nothing: the input is written back verbatim.
    """
    managed: JSONValue
    if unchanged and request.original is not None:
        managed = request.original
    else:
        managed = wire_messages(request, messages)
    if request.layout == "body":
        assert request.body is not None
        body = dict(request.body)
        body[_BODY_FIELDS[request.format]] = managed
        json.dump(body, out, ensure_ascii=False, indent=1)
        out.write("\n")
    elif request.layout == "jsonl":
        for item in cast(list[JSONValue], managed):
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
    else:
        json.dump(managed, out, ensure_ascii=False, indent=1)
        out.write("\n")


def write_file(path: str, write: Callable[[TextIO], object]) -> None:
    """Write a file whole or not at all: to a temporary file beside it, then renamed over it.

    An interrupted or failed write leaves the old file (or none); the new file
    gets the old one's permissions, or the usual ones for a new file (the umask's).

    Raises:
        InputError: the file cannot be written (names it and why).
    """
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    try:
        st: os.stat_result | None = target.stat()
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a directory; give a file name to write to")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # A device or a pipe (/dev/stdout, /dev/null, a FIFO): written into, never replaced.
        try:
            with open(target, "w", encoding="utf-8") as f:
                write(f)
        except OSError as exc:
            raise InputError(f"{path}: cannot be written ({exc.strerror or exc})") from None
        return
    if st is not None:
        mode = stat.S_IMODE(st.st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except FileNotFoundError:
        raise InputError(
            f"{path}: cannot be written: the directory {str(target.parent)!r} does not exist"
        ) from None
    except NotADirectoryError:
        raise InputError(f"{path}: cannot be written: {str(target.parent)!r} is not a directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputError(f"{path}: cannot be written ({exc.strerror or exc})") from None
        raise
