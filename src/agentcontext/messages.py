"""Canonical messages: the one shape every part of agentcontext works on.

Provider formats (`agentcontext.formats`) convert to and from these; the engine,
strategies, counters and sessions never see a provider's dicts.

Messages are frozen dataclasses. A message's ``id`` names its content: the
token cache, the engine's running totals and the session log all key on it, so
a changed message must carry a new id. `Message.evolve` does that for you
(`dataclasses.replace` would keep the old id, which is only right when the
content is unchanged).

>>> from agentcontext import Message
>>> m = Message(role="user", content="hello")
>>> m.text
'hello'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal, TypeAlias, get_args, overload

from .exceptions import InvalidMessageError

__all__ = [
    "ContentPart",
    "FilePart",
    "ImagePart",
    "JSONValue",
    "Message",
    "MessageView",
    "Role",
    "TextPart",
    "ToolCall",
    "attachment_note",
    "derive_id",
    "latest_user_index",
    "new_id",
    "round_starts",
    "rounds",
    "safe_split_points",
    "tool_call_index",
    "tool_name_for",
    "with_attachments_noted",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))

JSONValue: TypeAlias = "None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]"

_EMPTY: Mapping[str, JSONValue] = MappingProxyType({})
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/yaml", "application/x-yaml"})
"""Media types outside ``text/*`` whose files are text (`FilePart.text`)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def new_id() -> str:
    """Return a fresh random message id (``msg_`` + 24 hex digits)."""
    return "msg_" + uuid.uuid4().hex[:24]


def derive_id(previous: str | None, payload: str) -> str:
    """Return a deterministic id from the previous message's id and this message's payload.

    Converting the same conversation twice gives the same ids, and two
    conversations share ids exactly as far as they share a prefix: the chain
    makes an id name the message *and everything before it*. That is what lets
    the engine recognise "the same history plus one new message" by id alone.
    """
    digest = hashlib.blake2b(
        f"{previous or ''}\x00{payload}".encode("utf-8", "surrogatepass"), digest_size=12
    )
    return "msg_" + digest.hexdigest()


def without_surrogates(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate replaced by U+FFFD (text made by a program, such as a
    model's reply cut inside an emoji by a gateway, which a `Message` would refuse)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("\ufffd", text)


def _check_text(value: object, *, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidMessageError(f"{what} must be a str, got {type(value).__name__}", field=what)
    if not value.isascii() and _SURROGATE.search(value):  # isascii: O(1) on CPython, most text is ASCII
        raise InvalidMessageError(
            f"{what} contains a lone UTF-16 surrogate, which no provider accepts and no tokenizer can encode; "
            "decode your input with errors='replace' or fix its source",
            field=what,
        )
    return value


def _freeze(mapping: Mapping[str, JSONValue] | None) -> Mapping[str, JSONValue]:
    if not mapping:
        return _EMPTY
    if isinstance(mapping, MappingProxyType):
        return mapping
    if not isinstance(mapping, Mapping):
        raise InvalidMessageError(f"expected a mapping, got {type(mapping).__name__}")
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """A block of text inside a message's content."""

    text: str
    """The text."""
    kind: Literal["text"] = "text"

    def __post_init__(self) -> None:
        _check_text(self.text, what="text")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart:
    """An image inside a message's content.

    Token cost depends on the provider and the image's size; see
    `agentcontext.tokens.image_tokens` for the documented per-provider estimates.
    """

    url: str
    """An ``https://`` URL or a ``data:<media type>;base64,...`` URL."""
    detail: Literal["auto", "low", "high"] | None = None
    """OpenAI's ``detail`` setting, kept for round trips and token estimates."""
    width: int | None = None
    """Pixel width, when known (improves the token estimate)."""
    height: int | None = None
    """Pixel height, when known."""
    kind: Literal["image"] = "image"

    def __post_init__(self) -> None:
        _check_text(self.url, what="image url")
        if self.detail not in (None, "auto", "low", "high"):
            raise InvalidMessageError(f"image detail must be 'auto', 'low' or 'high', got {self.detail!r}")

    @property
    def media_type(self) -> str | None:
        """The media type of a ``data:`` URL (``image/png``...), else None."""
        parsed = _data_url(self.url)
        return parsed[0].split(";", 1)[0] or None if parsed is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePart:
    """A file inside a message's content: a document (PDF, text...), audio or video.

    Providers bill a file by what it holds (a PDF by its pages, audio by its
    length); `agentcontext.tokens.file_tokens` estimates that from the file's
    type and, when its bytes travel in a ``data:`` URL, from the bytes.
    Nothing is downloaded: a file given by URL or by a provider's file id
    costs a documented default.
    """

    url: str
    """A ``data:<media type>;base64,...`` URL, an ``https://`` URL, or a provider's
    file reference (``openai-file-id:<id>``, ``anthropic-file-id:<id>``)."""
    media_type: str | None = None
    """``application/pdf``, ``audio/wav``...; a ``data:`` URL's own type when not given."""
    name: str | None = None
    """The file's name (OpenAI's ``filename``, Anthropic's ``title``), when it has one."""
    kind: Literal["file"] = "file"

    def __post_init__(self) -> None:
        _check_text(self.url, what="file url")
        parsed = _data_url(self.url)
        if self.media_type is None and parsed is not None:
            object.__setattr__(self, "media_type", parsed[0].split(";", 1)[0] or None)
        if self.media_type is not None:
            _check_text(self.media_type, what="file media type")
        if self.name is not None:
            _check_text(self.name, what="file name")

    @property
    def label(self) -> str:
        """What to call the file in text: its name, else its URL (not a ``data:`` one), else its media type."""
        if self.name:
            return self.name
        if not self.url.startswith("data:") and len(self.url) <= 200:
            return self.url
        return self.media_type or "file"

    @property
    def text(self) -> str | None:
        """The text of a text file (``text/*``, JSON, XML, YAML) whose bytes are here; None for any other file."""
        media = (self.media_type or "").lower()
        if not (media.startswith("text/") or media in _TEXT_TYPES or media.endswith(("+json", "+xml"))):
            return None
        data = self.data
        return None if data is None else data.decode("utf-8", errors="replace")  # leaves no surrogate

    @property
    def data(self) -> bytes | None:
        """The file's bytes when they travel in a ``data:`` URL (None otherwise, or when they do not decode)."""
        parsed = _data_url(self.url)
        if parsed is None:
            return None
        head, payload = parsed
        if head.endswith(";base64"):
            try:
                return base64.b64decode(payload, validate=False)
            except binascii.Error:
                return None
        return urllib.parse.unquote_to_bytes(payload)

    @property
    def size(self) -> int | None:
        """The size in bytes of a file in a ``data:`` URL, read without decoding it (None otherwise)."""
        parsed = _data_url(self.url)
        if parsed is None:
            return None
        head, payload = parsed
        if head.endswith(";base64"):
            payload = payload.rstrip()
            return len(payload) * 3 // 4 - (len(payload) - len(payload.rstrip("=")))
        return len(urllib.parse.unquote_to_bytes(payload))


ContentPart: TypeAlias = TextPart | ImagePart | FilePart


def _data_url(url: str) -> tuple[str, str] | None:
    """A ``data:`` URL's head (media type and parameters) and payload; None for any other URL."""
    if not url.startswith("data:") or "," not in url:
        return None
    head, payload = url[5:].split(",", 1)
    return head, payload


def attachment_note(part: ImagePart | FilePart) -> str:
    """How a summary or a transcript names an image or a file it does not carry: ``[attached file: a.pdf]``."""
    return "[attached image]" if isinstance(part, ImagePart) else f"[attached file: {part.label}]"


def with_attachments_noted(m: Message) -> Message:
    """``m`` as a summarizer is shown it: its images and files replaced by notes naming them (`attachment_note`),
    a text file's note followed by its text.

    A summarizer reads text. What it is given is also what its input is measured in: a 90-page PDF is one
    line to it, not the 270,000 tokens the provider bills for it; a log returned as a file is its lines.
    """
    if not isinstance(m.content, tuple) or not m.attachments:
        return m
    return m.evolve(content=tuple(_noted(p) for p in m.content))


def _noted(part: ContentPart) -> TextPart:
    if isinstance(part, TextPart):
        return part
    text = part.text if isinstance(part, FilePart) else None
    return TextPart(text=attachment_note(part) if text is None else f"{attachment_note(part)}\n{text}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool (function) call requested by an assistant message."""

    id: str
    """The provider's call id; the tool message answering it carries the same id."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments as the model wrote them: JSON text, kept verbatim (even when not valid JSON)."""

    def __post_init__(self) -> None:
        _check_text(self.id, what="tool call id")
        _check_text(self.name, what="tool call name")
        if not isinstance(self.arguments, str):
            raise InvalidMessageError(
                f"tool call arguments must be a JSON string, got {type(self.arguments).__name__}; "
                "pass json.dumps(arguments)",
                field="arguments",
            )
        _check_text(self.arguments, what="tool call arguments")

    def parsed_arguments(self) -> JSONValue:
        """The arguments parsed as JSON, or the raw text when they are not valid JSON."""
        try:
            value: JSONValue = json.loads(self.arguments)
        except ValueError:
            return self.arguments
        return value


@dataclass(frozen=True, kw_only=True)
class Message:
    """One message of a conversation, in agentcontext's canonical form.

    Content is either a plain string, a tuple of parts (text and images), or
    ``None`` (an assistant message that only calls tools). Which of these the
    provider sent is kept, so conversions round-trip exactly.
    """

    role: Role
    """``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``."""
    content: str | tuple[ContentPart, ...] | None = None
    """The message's content."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls requested by an assistant message."""
    tool_call_id: str | None = None
    """For a tool message: the id of the call it answers."""
    name: str | None = None
    """The wire ``name`` field: a participant's name, or a tool message's tool name."""
    id: str = field(default_factory=new_id)
    """Identifies this message *and its content* (see the module docstring)."""
    metadata: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    """agentcontext's own annotations (summary markers, covered ids, recall refs). Never sent to a provider."""
    extra: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    """Provider fields agentcontext does not model, kept verbatim for lossless round trips."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidMessageError(
                f"unknown role {self.role!r}; expected one of 'system', 'user', 'assistant', 'tool'",
                field="role",
            )
        self._check_content()
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for i, call in enumerate(self.tool_calls):
            if not isinstance(call, ToolCall):
                raise InvalidMessageError(
                    f"tool_calls[{i}] must be a ToolCall, got {type(call).__name__}", field=f"tool_calls[{i}]"
                )
        if self.tool_calls and self.role != "assistant":
            raise InvalidMessageError(
                f"only assistant messages carry tool_calls, not {self.role!r} ones", field="tool_calls"
            )
        if self.role == "tool":
            if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
                raise InvalidMessageError(
                    "a tool message needs the tool_call_id of the call it answers", field="tool_call_id"
                )
        elif self.tool_call_id is not None:
            raise InvalidMessageError(
                f"only tool messages carry a tool_call_id, not {self.role!r} ones", field="tool_call_id"
            )
        if self.name is not None:
            _check_text(self.name, what="name")
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessageError("a message id must be a non-empty str", field="id")
        object.__setattr__(self, "metadata", _freeze(self.metadata))
        object.__setattr__(self, "extra", _freeze(self.extra))

    def _check_content(self) -> None:
        content = self.content
        if isinstance(content, list):
            content = tuple(content)
            object.__setattr__(self, "content", content)
        if isinstance(content, str):
            _check_text(content, what="content")
        elif isinstance(content, tuple):
            for i, part in enumerate(content):
                if not isinstance(part, TextPart | ImagePart | FilePart):
                    raise InvalidMessageError(
                        f"content part {i} must be a TextPart, ImagePart or FilePart, got {type(part).__name__}",
                        field=f"content[{i}]",
                    )
        elif content is not None:
            raise InvalidMessageError(
                f"content must be a str, a sequence of parts or None, got {type(content).__name__}",
                field="content",
            )

    # Identity by id keeps hashing O(1); equality still compares every field.
    def __hash__(self) -> int:
        return hash(self.id)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Read-only mappings cannot be pickled; rebuild them from plain dicts.
        return (
            _rebuild_message,
            (
                self.role,
                self.content,
                self.tool_calls,
                self.tool_call_id,
                self.name,
                self.id,
                dict(self.metadata),
                dict(self.extra),
            ),
        )

    @property
    def text(self) -> str:
        """The message's text: the string content, or its text parts joined by newlines."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "\n".join(p.text for p in content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The image parts of the content."""
        content = self.content
        if isinstance(content, tuple):
            return tuple(p for p in content if isinstance(p, ImagePart))
        return ()

    @property
    def files(self) -> tuple[FilePart, ...]:
        """The file parts of the content."""
        content = self.content
        if isinstance(content, tuple):
            return tuple(p for p in content if isinstance(p, FilePart))
        return ()

    @property
    def attachments(self) -> tuple[ImagePart | FilePart, ...]:
        """The image and file parts of the content, in order."""
        content = self.content
        if isinstance(content, tuple):
            return tuple(p for p in content if not isinstance(p, TextPart))
        return ()

    def is_empty(self) -> bool:
        """True when the message has no text, no images or files and no tool calls."""
        if self.tool_calls:
            return False
        content = self.content
        if content is None or isinstance(content, str):
            return not content or content.isspace()
        return not any(not isinstance(p, TextPart) or (p.text and not p.text.isspace()) for p in content)

    def restates(self, other: Message) -> bool:
        """True when ``other`` is this message under another id or metadata: the same role, content,
        calls, call id and name (a history rebuilt from dicts with new ids restates itself)."""
        return (
            self.role == other.role
            and self.content == other.content
            and self.tool_calls == other.tool_calls
            and self.tool_call_id == other.tool_call_id
            and self.name == other.name
        )

    def evolve(self, **changes: object) -> Message:
        """Return a copy with ``changes`` applied and a new id (unless ``id=`` is given).

        The new id is derived from the old one, so it is deterministic: evolving
        the same message the same way twice gives the same id.

        The wire form a converter carried for this message (a metadata entry
        ``{"id": <this id>, "wire": ...}``, from ``unknown="keep"``) is not copied to a
        message with another id: it would never be written back, only stored again.
        """
        if "id" not in changes:
            payload = json.dumps({k: repr(v) for k, v in sorted(changes.items())}, ensure_ascii=False)
            changes["id"] = derive_id(self.id, payload)
        if changes["id"] != self.id:
            metadata = changes.get("metadata", self.metadata)
            if isinstance(metadata, Mapping) and any(_carries_wire(v, self.id) for v in metadata.values()):
                changes["metadata"] = {k: v for k, v in metadata.items() if not _carries_wire(v, self.id)}
        return replace(self, **changes)  # type: ignore[arg-type]


def _carries_wire(value: object, message_id: str) -> bool:
    return isinstance(value, Mapping) and "wire" in value and value.get("id") == message_id


REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks")
"""Keys of `Message.extra` holding a model's reasoning, which goes back to the model with its message.

OpenAI-compatible servers return it beside the content and read it back when a
client sends it: ``reasoning_content`` (DeepSeek, Kimi, Qwen, vLLM),
``reasoning`` and ``reasoning_details`` (OpenRouter, Ollama, newer vLLM),
LiteLLM's ``thinking_blocks`` (Claude's thinking in OpenAI form, sent back to
Anthropic). `agentcontext.formats.openai` keeps them in ``extra`` under those
names, and `agentcontext.formats.pydantic_ai` keeps the text of Pydantic AI's
``ThinkingPart`` s (which it sends back to every provider) under ``reasoning``.
A value is a string, or a list of strings or of blocks (the text under
``thinking``, ``text`` or ``summary``; a redacted or encrypted block's ``data``).
"""


def carried_texts(message: Message) -> list[str]:
    """Text a provider reads with ``message`` beyond the fields agentcontext models; counters count it.

    Two sources. The wire form a converter carried with ``unknown="keep"``: the
    ``"counted"`` list of its metadata entry ``{"id": <this id>, "wire": ...,
    "counted": [...]}`` (an Anthropic thinking block's text, say), while the wire
    form stands, that is while the message is the one it came with. And the
    model's reasoning kept in ``extra`` (`REASONING_KEYS`), which a converter
    writes back with the message whatever the engine changed in it. (The seeds,
    and this library before, counted neither: a reasoning model's history was
    sent at several times the size it was fitted at.)
    """
    out: list[str] = []
    for value in message.metadata.values():
        if _carries_wire(value, message.id):
            assert isinstance(value, Mapping)
            counted = value.get("counted")
            if isinstance(counted, list | tuple):
                out.extend(t for t in counted if isinstance(t, str))
    extra = message.extra
    if extra:
        for key in REASONING_KEYS:
            value = extra.get(key)
            if value is not None:
                out.extend(_reasoning_texts(value))
    return out


def _reasoning_texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    if isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, Mapping):
                for key in ("thinking", "text", "summary", "data"):
                    text = item.get(key)
                    if isinstance(text, str) and text:
                        out.append(text)
                        break
    return out


def _rebuild_message(
    role: Role,
    content: str | tuple[ContentPart, ...] | None,
    tool_calls: tuple[ToolCall, ...],
    tool_call_id: str | None,
    name: str | None,
    id: str,
    metadata: dict[str, JSONValue],
    extra: dict[str, JSONValue],
) -> Message:
    return Message(
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        name=name,
        id=id,
        metadata=metadata,
        extra=extra,
    )


# ----------------------------------------------------------------------------- structure helpers


def tool_call_index(messages: Sequence[Message]) -> dict[str, tuple[int, ToolCall]]:
    """Map each tool call id to the index of the assistant message that issued it (the last one, if repeated)."""
    index: dict[str, tuple[int, ToolCall]] = {}
    for i, m in enumerate(messages):
        for call in m.tool_calls:
            index[call.id] = (i, call)
    return index


def tool_name_for(message: Message, calls: Mapping[str, tuple[int, ToolCall]]) -> str:
    """The name of the tool a tool message answers: from its call, else its own ``name``, else ``"unknown"``."""
    if message.tool_call_id is not None and message.tool_call_id in calls:
        return calls[message.tool_call_id][1].name
    return message.name or "unknown"


def round_starts(messages: Sequence[Message]) -> list[int]:
    """Indices of the user messages: each starts a round (a user turn and everything up to the next)."""
    return [i for i, m in enumerate(messages) if m.role == "user"]


def rounds(messages: Sequence[Message]) -> list[range]:
    """Split a conversation into rounds, as index ranges.

    A round starts at a user message and runs to the next one. Messages before
    the first user message (usually the system prompt) form a leading range of
    their own, when there are any.

    >>> from agentcontext import Message
    >>> msgs = [Message(role="system", content="s"), Message(role="user", content="a"),
    ...         Message(role="assistant", content="b"), Message(role="user", content="c")]
    >>> rounds(msgs)
    [range(0, 1), range(1, 3), range(3, 4)]
    """
    starts = round_starts(messages)
    bounds = ([0] if not starts or starts[0] != 0 else []) + starts + [len(messages)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def safe_split_points(messages: Sequence[Message]) -> list[int]:
    """Indices ``i`` (0..len) where ``messages[:i]`` and ``messages[i:]`` can be separated.

    A cut is safe when no tool result after it answers a call issued before it,
    so no assistant message is parted from its tool results. Runs in O(n).
    Calls that are never answered do not block any cut (there is no result to
    orphan); the engine repairs such input separately.

    >>> from agentcontext import Message, ToolCall
    >>> msgs = [Message(role="user", content="q"),
    ...         Message(role="assistant", tool_calls=[ToolCall(id="c1", name="ls")]),
    ...         Message(role="tool", tool_call_id="c1", content="a.txt"),
    ...         Message(role="assistant", content="done")]
    >>> safe_split_points(msgs)
    [0, 1, 3, 4]
    """
    n = len(messages)
    delta = [0] * (n + 2)
    issued: dict[str, int] = {}
    for j, m in enumerate(messages):
        for call in m.tool_calls:
            issued[call.id] = j
        if m.role == "tool" and m.tool_call_id is not None:
            a = issued.get(m.tool_call_id)
            if a is not None:
                # Cuts at a+1 .. j would separate the call at a from its result at j.
                delta[a + 1] += 1
                delta[j + 1] -= 1
    points: list[int] = []
    depth = 0
    for i in range(n + 1):
        depth += delta[i]
        if depth == 0:
            points.append(i)
    return points


def latest_user_index(messages: Sequence[Message]) -> int | None:
    """Index of the last user message, or None when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i
    return None


def iter_text(message: Message) -> Iterator[str]:
    """Every piece of text a provider bills for in ``message``: content text, tool names and arguments,
    and what it reads beyond the modelled fields (`carried_texts`)."""
    text = message.text
    if text:
        yield text
    for call in message.tool_calls:
        yield call.name
        yield call.arguments
    if message.metadata or message.extra:
        yield from carried_texts(message)


class MessageView(Sequence[Message]):
    """A read-only snapshot of a list of messages, shared without copying.

    The engine and the session only ever append to their lists between
    compactions, so a view (the list, a range of it, and a short tail of its
    own) stays valid while later calls extend the list: taking one is O(1), and
    so is a checkpoint. Slicing returns only the requested items (the engine
    slices off what is new every step).

    Args:
        items: the shared list.
        length: the view covers ``items[start:length]``...
        tail: ...followed by these messages (the engine's stub results).
        start: the first index of ``items`` in the view (default 0).
    """

    __slots__ = ("_items", "_len", "_start", "_tail")

    def __init__(
        self, items: list[Message], length: int, tail: tuple[Message, ...] = (), *, start: int = 0
    ) -> None:
        self._items = items
        self._len = length
        self._tail = tail
        self._start = min(start, length)

    def __len__(self) -> int:
        return self._len - self._start + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("message index out of range")
        return self._at(index)

    def _at(self, i: int) -> Message:
        j = i + self._start
        return self._items[j] if j < self._len else self._tail[j - self._len]

    def __iter__(self) -> Iterator[Message]:
        items = self._items
        for i in range(self._start, self._len):
            yield items[i]
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageView({len(self)} messages)"
