"""Pydantic AI message history (``ModelRequest`` / ``ModelResponse``) to and from canonical `Message` objects.

Needs the ``pydantic-ai`` extra (``pip install 'agentcontext[pydantic-ai]'``).

>>> from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
>>> from agentcontext.formats import pydantic_ai as pai
>>> history = [
...     ModelRequest(parts=[UserPromptPart("What is in /tmp?")]),
...     ModelResponse(parts=[ToolCallPart("ls", {"path": "/tmp"}, tool_call_id="c1")]),
...     ModelRequest(parts=[ToolReturnPart("ls", "a.txt", tool_call_id="c1")]),
... ]
>>> msgs = pai.to_messages(history)
>>> [(m.role, m.text) for m in msgs]
[('user', 'What is in /tmp?'), ('assistant', ''), ('tool', 'a.txt')]
>>> msgs[1].tool_calls[0].arguments
'{"path":"/tmp"}'
>>> pai.from_messages(msgs) == history
True

How the two shapes map:

- A ``ModelRequest`` becomes one canonical message per part the model reads,
  in order, as the OpenAI wire does: a ``SystemPromptPart`` a system message,
  a ``UserPromptPart`` a user message, a ``ToolReturnPart`` (and its typed
  subclasses) a tool message (``tool_call_id``; ``name`` is the tool's name;
  the content is the text the model is shown, ``model_response_str``), a
  ``RetryFeedbackPart`` or a request's ``CompactionPart`` (a summary an
  application wrote) a user message, a deprecated ``RetryPromptPart`` a tool
  message when it names a tool and a user message otherwise.
- A ``ModelResponse`` becomes one assistant message: its ``TextPart`` s are the
  content (one part: a string; several: a tuple of text parts; none: ``None``)
  and its ``ToolCallPart`` s the tool calls (``arguments`` is the text the
  model wrote, or ``args_as_json_str()`` for arguments held as a dict). A call and its return live in two Pydantic AI
  messages; canonically they pair up on ``tool_call_id``, as providers expect.
- User content lists keep one canonical part per item: text (``str``,
  ``TextContent``) a `TextPart`, images (``ImageUrl``, image ``BinaryContent``)
  an `ImagePart`, files (``DocumentUrl``, ``AudioUrl``, ``VideoUrl``, other
  ``BinaryContent``, ``UploadedFile`` as ``<provider>-file-id:<id>``) a
  `FilePart`, counted by what it holds (`agentcontext.tokens.file_tokens`: a
  PDF by its pages); a ``CachePoint`` stands as an empty text part. The images
  and files a tool returns (which Pydantic AI sends in a user message after the
  results) are parts of that tool message, after its text, so they are counted
  with it and go when it is masked.
- Everything else is kept in ``Message.extra["pydantic_ai"]``: each message's
  own fields (timestamps, ``instructions``, ``run_id``, usage, ``model_name``,
  provider details...), the parts the model does not read as text
  (``ThinkingPart``, native tool parts, instruction and tool deltas...)
  next to the part they followed, and whole messages without a readable part (a
  request holding only instructions) with the next message. Nothing is dropped.
  Of these, the text of ``ThinkingPart`` s is counted (``extra["reasoning"]``):
  Pydantic AI sends thinking back to every provider, as thinking blocks or
  ``<think>`` text; the rest is not.

The way back rebuilds each part from what ``extra`` kept and the canonical
fields, so ``from_messages(to_messages(history)) == history`` for a history as
Pydantic AI's own ``ModelMessagesTypeAdapter`` loads it (loading promotes an
image ``BinaryContent`` to ``BinaryImage``); a deprecated ``RetryPromptPart``
comes back as itself. Canonical fields the engine changed (a masked tool
result, shortened arguments) replace that part's content and keep its other
fields; a message the engine wrote gets parts of its own (a summary is a
``UserPromptPart``, a stub result a ``ToolReturnPart``).

Ids: `to_messages` gives each message ``derive_id(previous id, canonical JSON of
its fields and parts)``: the same history gives the same ids, and a changed part
a new one. Messages agentcontext wrote (``metadata["agentcontext"]``: summaries,
masked results, stubs...) are marked in Pydantic AI ``metadata`` fields, which
are never sent to the model (``SystemPromptPart.metadata``,
``ToolReturnPart.metadata``, a ``TextContent`` item's ``metadata`` in a user
message, ``ModelResponse.metadata``), and come back from `to_messages` with the
same id and metadata, through ``ModelMessagesTypeAdapter`` JSON too. A marker is
trusted only while the message still says what it said when it was marked.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, cast

from ..exceptions import ConversionWarning, InvalidMessageError, MissingDependencyError
from ..messages import (
    ContentPart,
    FilePart,
    ImagePart,
    JSONValue,
    Message,
    Role,
    TextPart,
    ToolCall,
    derive_id,
)
from ._common import at, canonical_json, fail, type_name

try:
    import pydantic
    import pydantic_core
    from pydantic_ai import PydanticAIDeprecationWarning
    from pydantic_ai import messages as pm
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "agentcontext.formats.pydantic_ai needs Pydantic AI: pip install 'agentcontext[pydantic-ai]'"
    ) from exc

__all__ = ["KEY", "MARK", "from_messages", "to_messages"]

KEY = "pydantic_ai"
"""The `Message.extra` key holding what canonical messages do not model."""
REASONING = "reasoning"
"""The `Message.extra` key holding the text of a message's thinking parts, for counters (`messages.REASONING_KEYS`)."""
MARK = "agentcontext"
"""The key of agentcontext's marker in a Pydantic AI ``metadata`` field."""

_JSON = dict[str, Any]
_CONFIG = pydantic.ConfigDict(defer_build=True, ser_json_bytes="base64", val_json_bytes="base64")
_MESSAGE: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pm.ModelMessage, config=_CONFIG)
_REQUEST_PART: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pm.ModelRequestPart, config=_CONFIG)
_RESPONSE_PART: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pm.ModelResponsePart, config=_CONFIG)
_DATETIME: pydantic.TypeAdapter[datetime] = pydantic.TypeAdapter(datetime)
_FILES = (pm.AudioUrl, pm.DocumentUrl, pm.VideoUrl, pm.BinaryContent, pm.UploadedFile)
_FILE_ID = "-file-id:"
"""An ``UploadedFile`` stands as a `FilePart` whose URL is ``<provider>-file-id:<file id>``."""

# Pydantic AI releases differ (openai<3 caps it at 2.31, where these are missing); what a release lacks is
# not converted, never guessed at.
_RETRY_FEEDBACK: Any = getattr(pm, "RetryFeedbackPart", None)
"""``RetryFeedbackPart`` where this Pydantic AI has it (2.6x and later), else None."""
_SYSTEM_HAS_METADATA = "metadata" in {f.name for f in dataclasses.fields(pm.SystemPromptPart)}
"""Whether a ``SystemPromptPart`` can carry agentcontext's marker (``metadata``; not in 2.31 and earlier)."""
_RETURN_HAS_RETRY = "retry" in {f.name for f in dataclasses.fields(pm.ToolReturnPart)}


# ----------------------------------------------------------------------------- what a part shows the model


@dataclasses.dataclass(frozen=True, slots=True)
class _Fields:
    """What a request part shows the model, in canonical terms."""

    role: Role
    content: str | tuple[ContentPart, ...]
    tool_call_id: str | None = None
    name: str | None = None


def _request_fields(part: object, *, index: int | None, field: str) -> _Fields | None:
    """The canonical fields of a request part the model reads; None for one it does not read as text."""
    if isinstance(part, pm.SystemPromptPart):
        return _Fields("system", _text(part.content, index, f"{field}.content"))
    if isinstance(part, pm.UserPromptPart):
        return _Fields("user", _user_content(part.content, index, field))
    if isinstance(part, pm.ToolReturnPart):
        if not isinstance(part.tool_call_id, str) or not part.tool_call_id:
            fail(
                "a tool return needs a non-empty string tool_call_id",
                index=index,
                field=f"{field}.tool_call_id",
            )
        if isinstance(part.content, str) and part.outcome == "success":
            text = part.content  # what model_response_str_and_user_content gives, without the work
        else:
            try:
                text, files = part.model_response_str_and_user_content()
            except (ValueError, TypeError) as e:  # pydantic's serialization error is a ValueError
                fail(
                    f"tool {part.tool_name!r} returned what Pydantic AI cannot serialize for the model "
                    f"({type(e).__name__}: {e}); return text, JSON data or files",
                    index=index,
                    field=f"{field}.content",
                )
            # Pydantic AI sends the files a tool returned in a user message after the results; they are
            # counted with the result they belong to (the labels it puts before each are not items).
            attachments = [_item_part(f, index, f"{field}.content") for f in files if not isinstance(f, str)]
            if attachments:
                content = (TextPart(text=_text(text, index, f"{field}.content")), *attachments)
                return _Fields("tool", content, part.tool_call_id, part.tool_name)
        return _Fields("tool", _text(text, index, f"{field}.content"), part.tool_call_id, part.tool_name)
    if _RETRY_FEEDBACK is not None and isinstance(part, _RETRY_FEEDBACK):
        return _Fields("user", _text(part.model_response(), index, f"{field}.content"))
    if isinstance(part, pm.RetryPromptPart):  # deprecated, still found in stored histories
        text = _text(part.model_response(), index, f"{field}.content")
        if part.tool_name is None:
            return _Fields("user", text)
        return _Fields("tool", text, part.tool_call_id, part.tool_name)
    if isinstance(part, pm.CompactionPart) and part.content:
        return _Fields("user", _text(part.content, index, f"{field}.content"))
    return None


def _text(value: object, index: int | None, field: str) -> str:
    if not isinstance(value, str):
        fail(f"expected a string, got {type_name(value)}", index=index, field=field)
    return value


def _modelled(item: object) -> bool:
    """Whether a user content item stands as a canonical part of its own (a ``CachePoint`` does not)."""
    return isinstance(item, (str, pm.TextContent, pm.ImageUrl, *_FILES))


def _item_part(item: object, index: int | None, field: str) -> ContentPart:
    if isinstance(item, str):
        return TextPart(text=item)
    if isinstance(item, pm.TextContent):
        return TextPart(text=_text(item.content, index, f"{field}.content"))
    if isinstance(item, pm.ImageUrl):
        return ImagePart(url=item.url, detail=_detail(item.vendor_metadata))
    if isinstance(item, pm.BinaryContent) and item.is_image:
        return ImagePart(url=item.data_uri, detail=_detail(item.vendor_metadata))
    if isinstance(item, pm.CachePoint):
        return TextPart(text="")
    if not isinstance(item, _FILES):
        fail(f"not a user content item: {type_name(item)}", index=index, field=field)
    try:
        if isinstance(item, pm.BinaryContent):
            return FilePart(url=item.data_uri, media_type=item.media_type)
        if isinstance(item, pm.UploadedFile):
            return FilePart(url=f"{item.provider_name}{_FILE_ID}{item.file_id}", media_type=item.media_type)
        return FilePart(url=item.url, media_type=_url_media_type(item))
    except InvalidMessageError as e:
        raise at(e, index=index, field=field) from None


def _url_media_type(item: pm.FileUrl) -> str | None:
    try:  # inferred from the URL's extension, and raising when it cannot be
        media: str = item.media_type
    except ValueError:
        return None
    return media


def _detail(vendor_metadata: Mapping[str, Any] | None) -> Any:
    detail = (vendor_metadata or {}).get("detail")
    return detail if detail in ("auto", "low", "high") else None


def _user_content(content: object, index: int | None, field: str) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        fail(
            f"user content must be a string or a list of items, got {type_name(content)}",
            index=index,
            field=f"{field}.content",
        )
    return tuple(_item_part(item, index, f"{field}.content[{j}]") for j, item in enumerate(content))


def _response_fields(
    parts: Sequence[object], *, index: int | None = None
) -> tuple[str | tuple[ContentPart, ...] | None, tuple[ToolCall, ...]]:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, p in enumerate(parts):
        if isinstance(p, pm.TextPart):
            texts.append(_text(p.content, index, f"parts[{j}].content"))
        elif isinstance(p, pm.ToolCallPart):
            try:
                calls.append(ToolCall(id=p.tool_call_id, name=p.tool_name, arguments=_arguments(p)))
            except InvalidMessageError as e:
                raise at(e, index=index, field=f"parts[{j}]") from None
    content: str | tuple[ContentPart, ...] | None
    if not texts:
        content = None
    elif len(texts) == 1:
        content = texts[0]
    else:
        content = tuple(TextPart(text=t) for t in texts)
    return content, tuple(calls)


def _arguments(part: Any) -> str:
    """A call's arguments as text: verbatim when the model wrote text, else ``args_as_json_str()``."""
    return part.args if isinstance(part.args, str) else part.args_as_json_str()


def _content_json(content: object) -> JSONValue:
    if isinstance(content, tuple):
        return [
            [p.text]
            if isinstance(p, TextPart)
            else [p.url, p.detail]
            if isinstance(p, ImagePart)
            else ["file", p.url, p.media_type, p.name]
            for p in content
        ]
    return cast(JSONValue, content)


def _digest(role: str, content: object, tool_calls: Sequence[ToolCall], tool_call_id: str | None) -> str:
    """A fingerprint of what a message says: a marker on a message edited since is not trusted."""
    payload = canonical_json(
        [role, _content_json(content), [[c.id, c.name, c.arguments] for c in tool_calls], tool_call_id]
    )
    return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


# ----------------------------------------------------------------------------- Pydantic AI -> canonical


class _Extra(Mapping[str, JSONValue]):
    """``{"pydantic_ai": layout}``, the layout serialized on first read, and ``"reasoning"``: the text
    of the thinking parts the message carries, which counters count (`messages.REASONING_KEYS`).

    Serializing a message with Pydantic costs far more than an agent step's
    engine call, and only a conversion back from canonical messages alone reads
    it (an integration rebuilds from the objects it still holds), so it waits
    until something reads it.
    """

    __slots__ = ("_make", "_reasoning", "_value")

    def __init__(self, make: Callable[[], JSONValue], reasoning: list[JSONValue]) -> None:
        self._make: Callable[[], JSONValue] | None = make
        self._value: JSONValue = None
        self._reasoning = reasoning

    def __getitem__(self, key: str) -> JSONValue:
        if key == REASONING and self._reasoning:
            return self._reasoning
        if key != KEY:
            raise KeyError(key)
        if self._make is not None:
            self._value, self._make = self._make(), None
        return self._value

    def __iter__(self) -> Iterator[str]:
        yield KEY
        if self._reasoning:
            yield REASONING

    def __len__(self) -> int:
        return 2 if self._reasoning else 1

    def __eq__(self, other: object) -> bool:
        # ``reasoning`` is derived from the layout's thinking parts (a copy for the counters), so two
        # extras are equal when the rest is: a message logged before it existed is the same message.
        if not isinstance(other, Mapping):
            return NotImplemented
        return {k: v for k, v in self.items() if k != REASONING} == {
            k: v for k, v in other.items() if k != REASONING
        }

    __hash__ = None  # type: ignore[assignment]


@dataclasses.dataclass(slots=True)
class Piece:
    """One canonical message in the making: what it says, and where in its Pydantic AI message it comes from.

    ``span`` is ``(start, end, primary)``: the parts it stands for and the one
    the model reads (None for a response: all its text and tool calls).
    ``before`` and ``after`` are the messages without a readable part it carries.
    """

    source: Any
    parts: tuple[Any, ...]
    """The source's parts when it was converted (the source may gain parts later: a capability's load)."""
    span: tuple[int, int, int | None]
    role: Role
    content: str | tuple[ContentPart, ...] | None
    head: bool
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    marker: Mapping[str, Any] | None = None
    unmark: tuple[Any, ...] = ()
    before: list[Any] = dataclasses.field(default_factory=list)
    after: list[Any] = dataclasses.field(default_factory=list)

    def message(self, previous: str | None, *, index: int | None) -> Message:
        """The canonical message, its id chained from ``previous`` (or the marker's, for one agentcontext wrote).

        The id derives from what the model reads and the kinds of parts and
        messages this one stands for; ``extra`` is serialized when first read.
        """
        marker = self.marker
        if marker is not None:
            mid = cast(str, marker["id"])
        else:
            start, end, _ = self.span
            content = self.content
            fields = [
                self.role,
                content
                if isinstance(content, str)
                else "-"
                if content is None
                else canonical_json(_content_json(content)),
                self.tool_call_id or "",
                self.name or "",
                f"{int(self.head)}{len(self.before)}.{len(self.after)}",
            ]
            fields.extend([getattr(p, "part_kind", "?") for p in self.parts[start:end]])
            for c in self.tool_calls:
                fields += (c.id, c.name, c.arguments)
            # The thinking it carries is counted (and sent back): two replies with one text and another
            # thinking are two messages, or the second is counted at the first one's size (ids key counts).
            thinking = self.reasoning()
            if thinking:
                fields.append(canonical_json(thinking))
            # Each field prefixed with its length, so no two lists of fields give the same payload.
            payload = "".join([f"{len(f)}:{f}" for f in fields])
            mid = derive_id(previous, payload)
        try:
            return Message(
                role=self.role,
                content=self.content,
                tool_calls=self.tool_calls,
                tool_call_id=self.tool_call_id,
                name=self.name,
                id=mid,
                metadata=marker["metadata"] if marker is not None else {},
                extra=MappingProxyType(
                    _Extra(
                        functools.partial(self.layout, index),
                        self.reasoning() if marker is not None else thinking,
                    )
                ),
            )
        except InvalidMessageError as e:
            raise at(e, index=index, field=self._part_field(e.field)) from None

    def reasoning(self) -> list[JSONValue]:
        """The text of the thinking parts this piece carries, which Pydantic AI sends back to every
        provider: Anthropic's thinking blocks (a redacted one as its encrypted data), Google's thought
        parts, OpenAI reasoning items' summaries, and ``<think>`` text for any other model."""
        start, end, _ = self.span
        carried = [*self.parts[start:end], *(p for m in (*self.before, *self.after) for p in m.parts)]
        out: list[JSONValue] = []
        for p in carried:
            if isinstance(p, pm.ThinkingPart):
                text = p.content or (p.signature if p.id == "redacted_thinking" else None)
                if isinstance(text, str) and text:
                    out.append(text)
        return out

    def _part_field(self, field: str | None) -> str:
        """Where in the Pydantic AI message a canonical field came from (``content`` -> ``parts[2].content``)."""
        start, end, primary = self.span
        if primary is not None:
            return f"parts[{primary}].{field}" if field else f"parts[{primary}]"
        if field and field.startswith("tool_calls["):
            k = int(field[len("tool_calls[") : field.index("]")])
            calls = [j for j, p in enumerate(self.parts) if isinstance(p, pm.ToolCallPart)]
            if k < len(calls):
                return f"parts[{calls[k]}]{field[field.index(']') + 1 :]}"
        return "parts"

    def layout(self, index: int | None) -> JSONValue:
        """What ``extra["pydantic_ai"]`` holds: the parts (as JSON data) without what the message holds itself."""
        source = self.source
        if len(source.parts) != len(self.parts) or any(
            a is not b for a, b in zip(source.parts, self.parts, strict=True)
        ):
            source = dataclasses.replace(source, parts=list(self.parts))  # as it was when converted
        data = dump_message(source, index=index)
        part_dicts: list[_JSON] = data.pop("parts")
        start, end, primary = self.span
        parts = self.parts
        if primary is None:
            owned = [_strip(p, d) for p, d in zip(parts, part_dicts, strict=True)]
            if self.marker is not None:
                data["metadata"] = _unmark(data["metadata"], self.marker)
        else:
            d = part_dicts[primary]
            if self.marker is not None:
                d = _unmarked_part(d, self.unmark, self.marker)
            owned = [*part_dicts[start:primary], _strip(parts[primary], d), *part_dicts[primary + 1 : end]]
        layout: _JSON = {"parts": owned}
        if primary is not None:
            layout["primary"] = primary - start
        if self.head:
            layout["message"] = data
        if self.before:
            layout["before"] = [dump_message(m, index=index) for m in self.before]
        if self.after:
            layout["after"] = [dump_message(m, index=index) for m in self.after]
        return cast(JSONValue, layout)


def to_messages(history: Iterable[object]) -> list[Message]:
    """Convert a Pydantic AI message history to canonical messages.

    Args:
        history: ``ModelRequest`` and ``ModelResponse`` objects (``result.all_messages()``,
            ``ctx.messages``...). Not modified.

    Returns:
        Canonical messages with deterministic chain ids (see the module docstring).
        Their ``extra`` is serialized when first read, from the objects as they are then.

    Raises:
        InvalidMessageError: an item is not a Pydantic AI message, or a part holds
            something of the wrong type; names the index and field. Also raised
            for a non-empty history in which no message has a part the model reads
            (nothing could carry them, and agentcontext will not drop them).
    """
    if isinstance(history, str | bytes | Mapping) or not isinstance(history, Iterable):
        raise InvalidMessageError(
            f"expected a list of ModelRequest / ModelResponse objects, got {type_name(history)}"
        )
    items = list(history)
    pieces: list[tuple[int, Piece]] = []
    pending: list[Any] = []
    for index, message in enumerate(items):
        found = pieces_of(message, index=index)
        if not found:
            pending.append(message)
            continue
        found[0].before, pending = pending, []
        pieces.extend((index, p) for p in found)
    if pending:
        if not pieces:
            raise InvalidMessageError(
                f"none of the {len(items)} messages has a part the model reads (system, user, tool return, "
                "text or tool call), so nothing can carry them through a conversion"
            )
        pieces[-1][1].after = pending
    out: list[Message] = []
    previous: str | None = None
    for index, piece in pieces:
        m = piece.message(previous, index=index)
        out.append(m)
        previous = m.id
    return out


def dump_message(message: object, *, index: int | None) -> _JSON:
    """A Pydantic AI message as JSON data (``ModelMessagesTypeAdapter``'s form)."""
    if not isinstance(message, pm.ModelRequest | pm.ModelResponse):
        fail(f"expected a ModelRequest or ModelResponse, got {type_name(message)}", index=index)
    try:
        return cast(_JSON, _MESSAGE.dump_python(message, mode="json", warnings="error"))
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as e:
        fail(f"cannot serialize this message as JSON: {e}", index=index)


def pieces_of(message: object, *, index: int | None) -> list[Piece]:
    """The canonical messages one Pydantic AI message becomes (none when the model reads none of its parts)."""
    if isinstance(message, pm.ModelResponse):
        content, calls = _response_fields(message.parts, index=index)
        if content is None and not calls:
            return []
        marker = None
        meta = message.metadata
        if isinstance(meta, dict) and MARK in meta:
            marker = _trusted(meta[MARK], _digest("assistant", content, calls, None))
        return [
            Piece(
                source=message,
                parts=tuple(message.parts),
                span=(0, len(message.parts), None),
                role="assistant",
                content=content,
                head=True,
                tool_calls=calls,
                marker=marker,
            )
        ]
    if not isinstance(message, pm.ModelRequest):
        fail(f"expected a ModelRequest or ModelResponse, got {type_name(message)}", index=index)
    fields = [_request_fields(p, index=index, field=f"parts[{j}]") for j, p in enumerate(message.parts)]
    pieces: list[Piece] = []
    for start, end, primary in _spans(fields):
        f = fields[primary]
        assert f is not None
        marker, content, unmark = _read_marker(message.parts[primary], f)
        pieces.append(
            Piece(
                source=message,
                parts=tuple(message.parts),
                span=(start, end, primary),
                role=f.role,
                content=content,
                head=not pieces,
                tool_call_id=f.tool_call_id,
                name=f.name,
                marker=marker,
                unmark=unmark,
            )
        )
    return pieces


def _spans(fields: Sequence[_Fields | None]) -> list[tuple[int, int, int]]:
    """``(start, end, primary)`` for each part the model reads: the parts since the previous one go with it,
    and the last one also takes the parts after it."""
    primaries = [j for j, f in enumerate(fields) if f is not None]
    spans: list[tuple[int, int, int]] = []
    start = 0
    for k, j in enumerate(primaries):
        end = len(fields) if k == len(primaries) - 1 else j + 1
        spans.append((start, end, j))
        start = end
    return spans


def part_spans(message: object) -> list[tuple[int, int, int | None]]:
    """Which parts of ``message`` each of its canonical messages stands for: ``(start, end, primary)`` each.

    A response has one span over all its parts (primary None); a request one per
    part the model reads; a message the model reads none of, none.
    """
    if isinstance(message, pm.ModelResponse):
        content, calls = _response_fields(message.parts)
        return [(0, len(message.parts), None)] if content is not None or calls else []
    parts = getattr(message, "parts", ())
    fields = [_request_fields(p, index=None, field="") for p in parts]
    return [(a, b, j) for a, b, j in _spans(fields)]


def _strip(part: object, d: _JSON) -> _JSON:
    """Drop what the canonical message holds itself (its text, the call's id), so ``extra`` does not repeat it."""
    d = dict(d)
    if isinstance(part, pm.SystemPromptPart):
        del d["content"]
    elif isinstance(part, pm.UserPromptPart):
        if isinstance(part.content, str):
            del d["content"]
    elif type(part) is pm.ToolReturnPart:
        del d["tool_name"], d["tool_call_id"]
        if isinstance(part.content, str) and part.outcome == "success":
            del d["content"]
    elif type(part) is pm.TextPart:
        del d["content"]
    elif isinstance(part, pm.ToolCallPart):
        del d["tool_name"], d["tool_call_id"]
        if isinstance(part.args, str):
            del d["args"]
    return d


def _read_marker(
    part: object, fields: _Fields
) -> tuple[Mapping[str, Any] | None, str | tuple[ContentPart, ...], tuple[Any, ...]]:
    """agentcontext's marker on a request part if trusted, the message's content, and where the marker sits."""
    content = fields.content
    if isinstance(part, pm.SystemPromptPart | pm.ToolReturnPart):
        meta = getattr(part, "metadata", None)
        if isinstance(meta, dict) and MARK in meta:
            found = _trusted(meta[MARK], _digest(fields.role, content, (), fields.tool_call_id))
            if found is not None:
                return found, content, ("metadata",)
    elif isinstance(part, pm.UserPromptPart) and isinstance(part.content, list | tuple):
        first = next((k for k, item in enumerate(part.content) if isinstance(item, pm.TextContent)), None)
        meta = part.content[first].metadata if first is not None else None
        if first is not None and isinstance(meta, dict) and MARK in meta:
            raw = meta[MARK]
            if isinstance(raw, dict) and raw.get("str") is True and len(part.content) == 1:
                content = cast(TextPart, fields.content[0]).text  # the message had string content
            found = _trusted(raw, _digest("user", content, (), None))
            if found is not None:
                return found, content, ("content", first, "metadata")
            content = fields.content
    return None, content, ()


def _unmarked_part(d: _JSON, where: tuple[Any, ...], marker: Mapping[str, Any]) -> _JSON:
    if where == ("metadata",):
        return {**d, "metadata": _unmark(d["metadata"], marker)}
    _, first, _ = where
    items = list(d["content"])
    items[first] = {**items[first], "metadata": _unmark(items[first]["metadata"], marker)}
    return {**d, "content": items}


def _trusted(raw: object, digest: str) -> Mapping[str, Any] | None:
    if (
        isinstance(raw, dict)
        and isinstance(raw.get("id"), str)
        and raw["id"]
        and isinstance(raw.get("metadata"), dict)
        and raw.get("digest") == digest
    ):
        return raw
    return None


def _unmark(meta: Mapping[str, Any], marker: Mapping[str, Any]) -> Any:
    """The ``metadata`` value as it was before the marker was added."""
    if "wrapped" in marker:
        return marker["wrapped"]
    rest = {k: v for k, v in meta.items() if k != MARK}
    return None if not rest and marker.get("bare") else rest


# ----------------------------------------------------------------------------- canonical -> Pydantic AI


@dataclasses.dataclass(slots=True)
class Template:
    """What a canonical message is rebuilt from: its parts and message fields, as Pydantic AI objects.

    ``parts`` are the parts the message stands for, in order; ``primary`` is the
    index of the one it shows the model (None for an assistant message, which
    stands for all its text and tool-call parts). ``envelope`` is a message with
    the same fields and no parts (only on the first canonical message of a
    Pydantic AI message); ``before`` / ``after`` are messages with no readable part
    that travel with it.
    """

    parts: list[Any]
    primary: int | None = None
    envelope: pm.ModelRequest | pm.ModelResponse | None = None
    before: list[Any] = dataclasses.field(default_factory=list)
    after: list[Any] = dataclasses.field(default_factory=list)


def from_messages(messages: Iterable[Message]) -> list[pm.ModelMessage]:
    """Convert canonical messages to a Pydantic AI message history.

    Each assistant message becomes a ``ModelResponse``; the other messages
    become the parts of ``ModelRequest`` s, grouped as they were when they came
    from `to_messages`; messages agentcontext wrote start a request of their own.

    Args:
        messages: the conversation. Not modified.

    Returns:
        New ``ModelRequest`` / ``ModelResponse`` objects.

    Raises:
        InvalidMessageError: a message cannot be carried (an image in a system,
            assistant or tool message, a malformed ``extra["pydantic_ai"]``);
            names the index and field.
    """
    msgs = list(messages)
    return Rebuilder(msgs).build(range(len(msgs)))


@dataclasses.dataclass(slots=True)
class _Open:
    """A request being assembled (its parts are known once the run of messages ends)."""

    envelope: pm.ModelRequest | None
    parts: list[Any]

    def build(self) -> pm.ModelRequest:
        if self.envelope is None:
            return pm.ModelRequest(parts=self.parts)
        return dataclasses.replace(self.envelope, parts=self.parts)


class Rebuilder:
    """Builds Pydantic AI messages from canonical ones.

    `template` says what each message is rebuilt from: by default what its
    ``extra["pydantic_ai"]`` kept; an integration that still holds the original
    Pydantic AI objects overrides it to reuse them.

    Args:
        messages: the canonical messages (the ones built and any others, for tool names).
    """

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = messages
        self._calls: dict[str, str] | None = None

    def template(self, index: int) -> Template | None:
        """What ``messages[index]`` is rebuilt from; None for a message with no Pydantic AI origin."""
        m = self.messages[index]
        layout = m.extra.get(KEY)
        if layout is None:
            return None
        return template_from_layout(m, layout, index=index)

    def build(self, indices: Iterable[int]) -> list[pm.ModelMessage]:
        """The Pydantic AI messages for ``messages[i]``, ``i`` in ``indices`` (in order)."""
        out: list[Any] = []
        current: _Open | None = None
        joinable = False  # a message with no origin may join the request the previous such message opened
        for i in indices:
            m = self.messages[i]
            if not isinstance(m, Message):
                fail(f"expected an agentcontext Message, got {type_name(m)}", index=i)
            tpl = self.template(i)
            if tpl is not None and tpl.before:
                out.extend(tpl.before)
                current = None
            if m.role == "assistant":
                out.append(self.response(m, tpl, i))
                current, joinable = None, False
            else:
                parts = self.request_parts(m, tpl, i)
                starts = tpl.envelope is not None if tpl is not None else not joinable
                if current is None or starts:
                    envelope = tpl.envelope if tpl is not None else None
                    current = _Open(envelope if isinstance(envelope, pm.ModelRequest) else None, [])
                    out.append(current)
                current.parts.extend(parts)
                joinable = tpl is None
            if tpl is not None and tpl.after:
                out.extend(tpl.after)
                current, joinable = None, False
        return [o.build() if isinstance(o, _Open) else o for o in out]

    # -- requests

    def request_parts(self, m: Message, tpl: Template | None, index: int) -> list[Any]:
        """The request parts ``m`` stands for, its canonical fields written into the one the model reads."""
        if tpl is None or tpl.primary is None:
            parts = list(tpl.parts) if tpl is not None else []
            parts.append(self._new_request_part(m, index))
            return parts
        parts = list(tpl.parts)
        parts[tpl.primary] = self._refill(m, parts[tpl.primary], index)
        return parts

    def _refill(self, m: Message, part: Any, index: int) -> Any:
        """``part`` with ``m``'s canonical fields (as it was when they agree), marked when ``m`` has metadata."""
        fields = _request_fields(part, index=index, field="content")
        if fields is None or fields.role != m.role:
            return self._new_request_part(m, index)
        same = fields.content == m.content and fields.tool_call_id == m.tool_call_id
        if isinstance(part, pm.SystemPromptPart):
            if not same:
                part = dataclasses.replace(part, content=_plain_text(m, index))
            return _marked(part, m) if m.metadata else part
        if isinstance(part, pm.UserPromptPart):
            if not same or m.metadata:
                part = dataclasses.replace(part, content=_user_items(m, part.content, index))
            return _marked_user(part, m) if m.metadata else part
        if type(part) is pm.ToolReturnPart:
            if fields.content != m.content:
                # The engine rewrote the result (masked, cut): the model is shown its text as written, not
                # wrapped as an error, so a failed call's placeholder reads as the placeholder it is.
                cleared: dict[str, Any] = {"retry": None} if _RETURN_HAS_RETRY else {}
                content = _tool_content(m, part.content, index)
                part = dataclasses.replace(part, content=content, outcome="success", **cleared)
            if part.tool_call_id != m.tool_call_id or (m.name is not None and m.name != part.tool_name):
                part = dataclasses.replace(
                    part, tool_call_id=m.tool_call_id or part.tool_call_id, tool_name=m.name or part.tool_name
                )
            return _marked(part, m) if m.metadata else part
        if same and not m.metadata:
            return part  # a retry, a typed tool return or a written summary, as it was
        return self._new_request_part(m, index, like=part)

    def _new_request_part(self, m: Message, index: int, *, like: Any = None) -> Any:
        if m.role == "system":
            system = pm.SystemPromptPart(_plain_text(m, index))
            return _marked(system, m) if m.metadata else system
        if m.role == "user":
            user = pm.UserPromptPart(_user_items(m, None, index))
            return _marked_user(user, m) if m.metadata else user
        assert m.tool_call_id is not None
        name = m.name or getattr(like, "tool_name", None) or self._tool_name(m)
        tool = pm.ToolReturnPart(
            tool_name=name, content=_tool_content(m, None, index), tool_call_id=m.tool_call_id
        )
        return _marked(tool, m) if m.metadata else tool

    def _tool_name(self, m: Message) -> str:
        if self._calls is None:
            self._calls = {
                c.id: c.name for msg in self.messages if isinstance(msg, Message) for c in msg.tool_calls
            }
        if m.tool_call_id is not None and m.tool_call_id in self._calls:
            return self._calls[m.tool_call_id]
        meta = m.metadata.get(MARK)
        tool = meta.get("tool") if isinstance(meta, Mapping) else None  # a stub result names its call's tool
        return tool if isinstance(tool, str) else "unknown"

    # -- responses

    def response(self, m: Message, tpl: Template | None, index: int) -> pm.ModelResponse:
        """The ``ModelResponse`` for assistant message ``m``."""
        parts = list(tpl.parts) if tpl is not None else []
        envelope = tpl.envelope if tpl is not None else None
        content, calls = _response_fields(parts)
        if content != m.content or calls != m.tool_calls:
            parts = _refill_response(parts, m, index)
        if isinstance(envelope, pm.ModelResponse):
            response = dataclasses.replace(envelope, parts=parts)
        else:
            response = pm.ModelResponse(parts=parts)
        if m.metadata:
            response = dataclasses.replace(response, metadata=_with_marker(response.metadata, m))
        return response


def _plain_text(m: Message, index: int) -> str:
    if m.attachments:
        fail(
            f"Pydantic AI takes images and files only in user messages and tool returns, not in {m.role} "
            "ones; describe them in text, or move them to a user message",
            index=index,
            field="content",
        )
    return m.text


def _user_items(m: Message, original: object, index: int) -> str | list[Any]:
    """User content for ``m``: a string, or items reusing each original item a canonical part still stands for.

    An original item agentcontext does not model (a document, audio...) is never
    lost, even when the engine rewrote the text around it.
    """
    content = m.content if m.content is not None else ""
    if isinstance(content, str):
        return [pm.TextContent(content)] if m.metadata else content
    old = list(original) if isinstance(original, list | tuple) else []
    old_parts = [_item_part(item, index, "content") for item in old]
    used = [False] * len(old)
    items: list[Any] = []
    for j, part in enumerate(content):
        k: int | None = j if j < len(old) and not used[j] and old_parts[j] == part else None
        if k is None:
            k = next((n for n, p in enumerate(old_parts) if not used[n] and p == part), None)
        if k is not None:
            used[k] = True
            items.append(old[k])
        elif isinstance(part, TextPart):
            items.append(part.text)
        else:
            items.append(_attachment_item(part, index, j))
    items.extend(item for k, item in enumerate(old) if not used[k] and not _modelled(item))
    return items


def _tool_content(m: Message, original: object, index: int) -> Any:
    """A tool return's content for ``m``: its text, and the images and files it still holds (originals reused)."""
    if not m.attachments:
        return m.text
    old = [(item, _item_part(item, index, "content")) for item in _split_files(original)]  # each read once
    items: list[Any] = [m.text]
    for j, part in enumerate(m.attachments):
        same = next((item for item, seen in old if seen == part), None)
        items.append(same if same is not None else _attachment_item(part, index, j))
    return items


def _split_files(content: object) -> list[Any]:
    items = content if isinstance(content, list | tuple) else [content]
    return [item for item in items if isinstance(item, (pm.ImageUrl, *_FILES))]


def _attachment_item(part: ImagePart | FilePart, index: int, j: int) -> Any:
    url = part.url
    vendor = {"detail": part.detail} if isinstance(part, ImagePart) and part.detail is not None else None
    if url.startswith("data:"):
        try:
            binary = pm.BinaryContent.from_data_uri(url)
        except (ValueError, TypeError) as e:
            fail(f"not a usable data URL: {e}", index=index, field=f"content[{j}]")
        return dataclasses.replace(binary, vendor_metadata=vendor)
    if isinstance(part, ImagePart):
        return pm.ImageUrl(url, vendor_metadata=vendor)
    if _FILE_ID in url.split(":", 1)[0] + ":":
        provider, file_id = url.split(_FILE_ID, 1)
        return pm.UploadedFile(file_id, cast(Any, provider), media_type=part.media_type)
    media = part.media_type or ""
    kind = (
        pm.AudioUrl
        if media.startswith("audio/")
        else pm.VideoUrl
        if media.startswith("video/")
        else pm.DocumentUrl
    )
    return kind(url, media_type=part.media_type)


def _with_marker(metadata: Any, m: Message, **more: Any) -> Any:
    """``metadata`` with agentcontext's marker for ``m`` added, such that `_unmark` restores it."""
    marker: dict[str, Any] = {
        "id": m.id,
        "metadata": _plain(m.metadata),
        "digest": _digest(m.role, m.content, m.tool_calls, m.tool_call_id),
        **more,
    }
    if metadata is None:
        return {MARK: {**marker, "bare": True}}
    if isinstance(metadata, dict) and MARK not in metadata:
        return {**metadata, MARK: marker}
    return {MARK: {**marker, "wrapped": metadata}}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _marked(part: Any, m: Message) -> Any:
    if isinstance(part, pm.SystemPromptPart) and not _SYSTEM_HAS_METADATA:
        warnings.warn(
            ConversionWarning(
                "this Pydantic AI's SystemPromptPart has no metadata field, so the metadata of a system message "
                f"({m.id}) is not carried into Pydantic AI; it comes back with a new id and no metadata "
                "(Pydantic AI 2.6x and later keep it)"
            ),
            stacklevel=4,
        )
        return part
    return dataclasses.replace(part, metadata=_with_marker(part.metadata, m))


def _marked_user(part: pm.UserPromptPart, m: Message) -> pm.UserPromptPart:
    items: list[Any] = [pm.TextContent(part.content)] if isinstance(part.content, str) else list(part.content)
    first = next((k for k, item in enumerate(items) if isinstance(item, pm.TextContent)), None)
    if first is None:
        first = next((k for k, item in enumerate(items) if isinstance(item, str)), None)
        if first is None:
            return part  # no text item to carry the marker: the id is derived again on the way back
        items[first] = pm.TextContent(items[first])
    item = items[first]
    more = {"str": True} if isinstance(m.content, str) else {}
    items[first] = dataclasses.replace(item, metadata=_with_marker(item.metadata, m, **more))
    return dataclasses.replace(part, content=items)


def _refill_response(parts: list[Any], m: Message, index: int) -> list[Any]:
    """The response's parts with ``m``'s text and tool calls; the other parts and fields stay where they were."""
    if m.attachments:
        fail(
            "Pydantic AI responses carry no images or files; describe them in text",
            index=index,
            field="content",
        )
    texts = list(_texts_of(m))
    slots = [k for k, p in enumerate(parts) if isinstance(p, pm.TextPart)]
    out = list(parts)
    if len(texts) == len(slots):
        for k, text in zip(slots, texts, strict=True):
            if out[k].content != text:
                out[k] = dataclasses.replace(out[k], content=text)
    else:
        # The engine rewrote the text (a shortened message): it goes where the text was, as one part.
        joined = "\n".join(texts) if texts else None
        for k in reversed(slots[1:]):
            del out[k]
        if slots:
            if joined is None:
                del out[slots[0]]
            else:
                out[slots[0]] = dataclasses.replace(out[slots[0]], content=joined)
        elif joined is not None:
            first_call = next((k for k, p in enumerate(out) if isinstance(p, pm.ToolCallPart)), len(out))
            out.insert(first_call, pm.TextPart(joined))
    wanted = {c.id: c for c in m.tool_calls}
    # A call the canonical message no longer has (its id renamed, say) is replaced, not kept.
    out = [p for p in out if not isinstance(p, pm.ToolCallPart) or p.tool_call_id in wanted]
    present = {p.tool_call_id: k for k, p in enumerate(out) if isinstance(p, pm.ToolCallPart)}
    for call in m.tool_calls:
        at_k = present.get(call.id)
        if at_k is None:
            out.append(pm.ToolCallPart(call.name, call.arguments, tool_call_id=call.id))
        elif out[at_k].tool_name != call.name or _arguments(out[at_k]) != call.arguments:
            out[at_k] = dataclasses.replace(out[at_k], tool_name=call.name, args=call.arguments)
    return out


def _texts_of(m: Message) -> Iterable[str]:
    if m.content is None:
        return ()
    if isinstance(m.content, str):
        return (m.content,)
    return [p.text for p in m.content if isinstance(p, TextPart)]


# ----------------------------------------------------------------------------- extra["pydantic_ai"] -> objects


def template_from_layout(m: Message, layout: object, *, index: int) -> Template:
    """The Pydantic AI objects ``extra["pydantic_ai"]`` describes, the fields it left out taken from ``m``."""
    where = f"extra.{KEY}"
    if not isinstance(layout, Mapping) or not isinstance(layout.get("parts"), list):
        fail(f"{where} must be an object with a 'parts' list", index=index, field=where)
    data = cast(list[Any], layout["parts"])
    primary = layout.get("primary")
    if primary is not None and not (isinstance(primary, int) and 0 <= primary < len(data)):
        fail(f"'primary' must index 'parts', got {primary!r}", index=index, field=f"{where}.primary")
    response = m.role == "assistant"
    texts = iter(_texts_of(m))
    calls = iter(m.tool_calls)
    parts: list[Any] = []
    for k, raw in enumerate(data):
        field = f"{where}.parts[{k}]"
        if not isinstance(raw, Mapping):
            fail(f"a part must be an object, got {type_name(raw)}", index=index, field=field)
        d = dict(raw)
        kind = d.get("part_kind")
        if response and kind == "text" and "content" not in d:
            d["content"] = next(texts, "")
        elif response and kind == "tool-call" and "tool_call_id" not in d:
            call = next(calls, None)
            d["tool_name"] = call.name if call is not None else "unknown"
            d["tool_call_id"] = call.id if call is not None else "missing"
            d.setdefault("args", call.arguments if call is not None else "{}")
        elif k == primary and kind in ("system-prompt", "user-prompt") and "content" not in d:
            d["content"] = m.text
        elif k == primary and kind == "tool-return":
            d.setdefault("tool_name", m.name or "unknown")
            d.setdefault("tool_call_id", m.tool_call_id or "missing")
            d.setdefault("content", m.text)
        parts.append(_part(_RESPONSE_PART if response else _REQUEST_PART, d, index, field))
    return Template(
        parts=parts,
        primary=None if response else primary,
        envelope=_envelope(layout.get("message"), response, index),
        before=_messages(layout.get("before"), index, f"{where}.before"),
        after=_messages(layout.get("after"), index, f"{where}.after"),
    )


def _part(adapter: pydantic.TypeAdapter[Any], d: dict[str, Any], index: int, field: str) -> Any:
    if d.get("part_kind") == "retry-prompt":
        return _retry_prompt(d, index, field)
    try:
        return adapter.validate_python(d)
    except pydantic.ValidationError as e:
        fail(f"not a valid Pydantic AI part: {_first_error(e)}", index=index, field=field)


def _retry_prompt(d: Mapping[str, Any], index: int, field: str) -> Any:
    """A deprecated ``RetryPromptPart`` rebuilt as itself (Pydantic AI's loader translates it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PydanticAIDeprecationWarning)
            part = pm.RetryPromptPart(
                content=d["content"],
                tool_name=d.get("tool_name"),
                tool_call_id=d["tool_call_id"],
                timestamp=_DATETIME.validate_python(d["timestamp"]),
            )
    except (KeyError, TypeError, pydantic.ValidationError) as e:
        fail(f"not a valid RetryPromptPart: {e}", index=index, field=field)
    return part


def _envelope(raw: object, response: bool, index: int) -> pm.ModelRequest | pm.ModelResponse | None:
    if raw is None:
        return None
    field = f"extra.{KEY}.message"
    kind = "response" if response else "request"
    if not isinstance(raw, Mapping) or raw.get("kind") != kind:
        got = repr(raw.get("kind")) if isinstance(raw, Mapping) else type_name(raw)
        fail(f"the fields of a {kind} expected, got {got}", index=index, field=field)
    try:
        return cast("pm.ModelRequest | pm.ModelResponse", _MESSAGE.validate_python({**raw, "parts": []}))
    except pydantic.ValidationError as e:
        fail(f"not valid Pydantic AI message fields: {_first_error(e)}", index=index, field=field)


def _messages(raw: object, index: int, field: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        fail(f"must be a list of messages, got {type_name(raw)}", index=index, field=field)
    try:
        return [_MESSAGE.validate_python(d) for d in raw]
    except pydantic.ValidationError as e:
        fail(f"not a valid Pydantic AI message: {_first_error(e)}", index=index, field=field)


def _first_error(e: pydantic.ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    loc = ".".join(str(x) for x in err.get("loc", ()))
    return f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))
