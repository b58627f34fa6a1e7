"""LangChain messages (langchain-core 1.x) to and from canonical `Message` objects, losslessly.

Needs the ``langchain`` extra (``pip install 'agentcontext[langchain]'``).

>>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
>>> from agentcontext.formats import langchain as lc
>>> history = [
...     HumanMessage("What is in /tmp?", id="h1"),
...     AIMessage("", tool_calls=[{"name": "ls", "args": {"path": "/tmp"}, "id": "c1"}], id="a1"),
...     ToolMessage("a.txt", tool_call_id="c1", id="t1"),
... ]
>>> msgs = lc.to_messages(history)
>>> msgs[1].tool_calls[0].arguments
'{"path": "/tmp"}'
>>> lc.from_messages(msgs) == history
True

What is kept, and how:

- The class gives the role: `SystemMessage` -> ``system``, `HumanMessage` ->
  ``user``, `AIMessage` -> ``assistant``, `ToolMessage` -> ``tool``. Other
  classes (chunks, `ChatMessage`, `FunctionMessage`, `RemoveMessage`,
  subclasses) raise `InvalidMessageError` naming the message and the fix.
- ``content``: a string stays a string. A list of plain ``{"type": "text",
  "text": ...}`` and ``{"type": "image_url", "image_url": {...}}`` blocks becomes
  `TextPart` / `ImagePart` objects. Any other list (files, reasoning, thinking or
  ``tool_use`` blocks, text blocks with annotations, bare strings...) is kept
  verbatim in ``extra["content"]``, and the message's content is what a
  provider bills for it: the text of each block, its images, its files (as
  `FilePart` s, counted by what they hold: a PDF by its pages, audio by its
  length; LangChain's ``file`` / ``audio`` / ``video`` blocks and the OpenAI and
  Anthropic shapes it forwards), and the JSON of any other block (``tool_use`` blocks duplicating a tool call are not counted
  twice). It comes back verbatim unless agentcontext rewrote the message (then
  the rewritten text is sent).
- ``tool_calls`` become `ToolCall` objects whose ``arguments`` are the JSON that
  ``ChatOpenAI`` sends (``json.dumps(args, ensure_ascii=False)``);
  ``invalid_tool_calls`` are tool calls too (providers receive them and expect an
  answer), listed in ``extra["invalid_tool_calls"]`` so they come back as invalid.
- ``tool_call_id`` and ``name`` map to the same fields. ``id``,
  ``additional_kwargs``, ``response_metadata``, ``usage_metadata``, a tool
  message's ``artifact`` and non-default ``status`` go to `Message.extra` under
  their own names and come back as they were.
- Values that are not JSON data (a tool's ``Document`` artifact, a parsed
  object in ``additional_kwargs``) raise `InvalidMessageError` naming the message
  and field, unless an ``opaque`` mapping is given: they are then kept there and
  ``extra`` holds a small JSON placeholder that `from_message` resolves.

Ids: a message with a LangChain id gets ``derive_id("lc:" + id, content)``, the
same whatever its position and whichever list it is converted in, and a new id
when LangGraph replaces its content under the same LangChain id. Messages
without a LangChain id (or repeating one) get chain ids, as in
`agentcontext.formats.openai`. Messages agentcontext wrote (summaries, masked
results, notes) carry their id and `Message.metadata` in
``response_metadata["agentcontext"]`` (never sent to a provider) with a digest of
their content, so they come back with the identical id and metadata, as long as
nobody changed their content.

`MessageCache` converts a growing history in O(new messages) per call, for
integrations that see the whole history at every step.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..exceptions import InvalidMessageError, MissingDependencyError
from ..invariants import ensure_valid
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
    new_id,
)
from ._common import (
    ANTHROPIC_FILE_ID_URL,
    OPENAI_FILE_ID_URL,
    at,
    audio_media_type,
    canonical_json,
    fail,
    json_value,
    text_data_url,
    type_name,
)

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        BaseMessageChunk,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError(
        "agentcontext.formats.langchain needs langchain-core: pip install 'agentcontext[langchain]'"
    ) from exc

__all__ = [
    "MARKER_KEY",
    "Converted",
    "MessageCache",
    "from_message",
    "from_messages",
    "to_message",
    "to_messages",
]

MARKER_KEY = "agentcontext"
"""The ``response_metadata`` key holding the id, metadata and content digest of a message agentcontext wrote."""

_OPAQUE = "agentcontext_opaque"
_ROLES: Mapping[type[BaseMessage], Role] = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "assistant",
    ToolMessage: "tool",
}
_CLASSES: Mapping[str, type[BaseMessage]] = {role: cls for cls, role in _ROLES.items()}
_DETAILS = ("auto", "low", "high")
# Blocks that repeat a tool call the message also carries in ``tool_calls``.
_CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call", "server_tool_call"})


# ----------------------------------------------------------------------------- LangChain -> canonical


def to_messages(
    messages: Iterable[BaseMessage], *, opaque: MutableMapping[str, object] | None = None
) -> list[Message]:
    """Convert a list of LangChain messages to canonical messages.

    Args:
        messages: the history (``state["messages"]``, a request's messages...). Not modified.
        opaque: where to keep values that are not JSON data (see the module docstring);
            None: such values raise `InvalidMessageError`.

    Returns:
        One `Message` per input message, ids as the module docstring describes.

    Raises:
        InvalidMessageError: a message cannot be converted; names its index and field.
    """
    if isinstance(messages, str | bytes | Mapping | BaseMessage) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            f"expected a list of LangChain messages, got {type_name(messages)}; "
            "wrap a single message in a list, or call to_message for it"
        )
    out: list[Message] = []
    seen: set[str] = set()
    previous: str | None = None
    for index, lc in enumerate(messages):
        message = to_message(lc, index=index, previous_id=previous, seen=seen, opaque=opaque)
        out.append(message)
        previous = message.id
    return out


def to_message(
    lc: BaseMessage,
    *,
    index: int | None = None,
    previous_id: str | None = None,
    seen: set[str] | None = None,
    opaque: MutableMapping[str, object] | None = None,
) -> Message:
    """Convert one LangChain message to a canonical message.

    Args:
        lc: the message. Not modified.
        index: its position in the history, for error messages.
        previous_id: the id of the message before it, for the chain id of a message
            without a LangChain id (``""`` for the first message of a chain). When the
            message has no LangChain id and neither ``index`` nor ``previous_id`` is
            given, it gets a fresh random id (two identical replies must not share an id).
        seen: LangChain ids met earlier in the same history; a repeated one gets a
            chain id (ids must be unique). Updated in place.
        opaque: where to keep values that are not JSON data; None: they raise.

    Raises:
        InvalidMessageError: see `to_messages`.
    """
    fields, marker = _fields_in(lc, index, opaque)
    if marker is not None:
        restored = _restore(fields, marker, index)
        if restored is not None:
            return restored
        # A marker whose content changed since (or a foreign one) stays in response_metadata: nothing is lost.
    payload = canonical_json(_payload(fields))
    lc_id = lc.id
    if lc_id is not None and (seen is None or lc_id not in seen):
        if seen is not None:
            seen.add(lc_id)
        mid = derive_id("lc:" + lc_id, payload)
    elif index is None and previous_id is None:
        mid = new_id()
    else:
        mid = derive_id(previous_id, payload)
    return fields.message(mid, None, index)


def _fields_in(
    lc: BaseMessage, index: int | None, opaque: MutableMapping[str, object] | None
) -> tuple[_Fields, object]:
    """The canonical fields of ``lc`` and its agentcontext marker (None when it has none)."""
    role = _role_of(lc, index)
    lc_id = lc.id
    if lc_id is not None and not isinstance(lc_id, str):
        fail(f"the message id must be a string or None, got {type_name(lc_id)}", index=index, field="id")
    extra: dict[str, JSONValue] = {"id": lc_id}
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    if isinstance(lc, AIMessage):
        tool_calls = _tool_calls_in(lc, index, extra)
        if lc.usage_metadata is not None:
            extra["usage_metadata"] = _json_field(lc.usage_metadata, index, "usage_metadata", opaque)
    elif isinstance(lc, ToolMessage):
        tool_call_id = lc.tool_call_id
        if not isinstance(tool_call_id, str) or not tool_call_id:
            fail(
                f"a tool message needs the non-empty string tool_call_id of the call it answers, got {tool_call_id!r}",
                index=index,
                field="tool_call_id",
            )
        if lc.artifact is not None:
            extra["artifact"] = _json_field(lc.artifact, index, "artifact", opaque)
        if lc.status != "success":
            extra["status"] = _json_field(lc.status, index, "status", None)
    content, raw = _content_in(lc.content, index, {c.id for c in tool_calls})
    if raw is not None:
        extra["content"] = raw
    name = lc.name
    if name is not None and not isinstance(name, str):
        fail(f"name must be a string or None, got {type_name(name)}", index=index, field="name")
    if lc.additional_kwargs:
        extra["additional_kwargs"] = _json_mapping(lc.additional_kwargs, index, "additional_kwargs", opaque)
    marker: object = None
    if lc.response_metadata:
        marker = lc.response_metadata.get(MARKER_KEY)
        extra["response_metadata"] = _json_mapping(lc.response_metadata, index, "response_metadata", opaque)
    return _Fields(role, content, tool_calls, tool_call_id, name, extra), marker


@dataclass(frozen=True, slots=True)
class _Fields:
    """A message's fields before it has an id (what ids and digests are computed from)."""

    role: Role
    content: str | tuple[ContentPart, ...] | None
    tool_calls: tuple[ToolCall, ...]
    tool_call_id: str | None
    name: str | None
    extra: Mapping[str, JSONValue]

    @classmethod
    def of(cls, m: Message) -> _Fields:
        return cls(m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.extra)

    def message(self, mid: str, metadata: Mapping[str, JSONValue] | None, index: int | None) -> Message:
        try:
            return Message(
                role=self.role,
                content=self.content,
                tool_calls=self.tool_calls,
                tool_call_id=self.tool_call_id,
                name=self.name,
                extra=self.extra,
                id=mid,
                metadata=metadata or {},
            )
        except InvalidMessageError as e:
            raise at(e, index=index) from None


_CHAT_ROLES: Mapping[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
}
"""The roles of a `ChatMessage` a provider reads as one of its own."""


def _role_of(lc: object, index: int | None) -> Role:
    role = _ROLES.get(cast("type[BaseMessage]", type(lc)))
    if role is not None:
        return role
    if isinstance(lc, BaseMessageChunk):
        hint = "; merge the chunks and convert with langchain_core.messages.message_chunk_to_message first"
    elif isinstance(lc, ChatMessage):
        chat_role = _CHAT_ROLES.get(lc.role)
        if chat_role is not None:
            return chat_role  # comes back as itself while unchanged; rewritten, as the class of its role
        hint = f"; a ChatMessage's role must be one of {sorted(_CHAT_ROLES)}, got {lc.role!r}"
    elif isinstance(lc, BaseMessage):
        # A subclass comes back as itself while unchanged, and as its base class when agentcontext rewrote
        # it: only one that adds no field of its own, so that a rewrite loses nothing.
        base = next((cls for cls in _ROLES if isinstance(lc, cls)), None)
        if base is not None and set(type(lc).model_fields) == set(base.model_fields):
            return _ROLES[base]
        hint = (
            f"; its fields {sorted(set(type(lc).model_fields) - set(base.model_fields))} would be lost were it "
            f"rewritten: convert it to a {base.__name__} first"
            if base is not None
            else "; agentcontext converts SystemMessage, HumanMessage, AIMessage, ToolMessage and ChatMessage "
            "(user, assistant or system), and their subclasses"
        )
    elif isinstance(lc, Mapping | tuple | str):
        hint = "; convert message-like dicts, tuples and strings with langchain_core.messages.convert_to_messages first"
    else:
        hint = ""
    fail(f"cannot convert a {type(lc).__name__}{hint}", index=index, field="type")


def _json_field(
    value: object, index: int | None, field: str, opaque: MutableMapping[str, object] | None
) -> JSONValue:
    try:
        return json_value(value, index=index, field=field)
    except InvalidMessageError as e:
        if opaque is None:
            text = str(e).split(": ", 1)[-1]  # without the "message i, field f" prefix, given again below
            raise InvalidMessageError(
                f"{text}; agentcontext keeps only JSON data and will not drop this value: make it JSON, "
                "or convert with an opaque mapping (as the LangChain middleware does)",
                index=e.index,
                field=e.field,
            ) from None
    ref = f"py:{id(value):x}"
    opaque[ref] = value
    return {_OPAQUE: type(value).__name__, "ref": ref}


def _json_mapping(
    value: Mapping[str, Any], index: int | None, field: str, opaque: MutableMapping[str, object] | None
) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            fail(f"keys must be strings, got {type_name(key)} ({key!r})", index=index, field=field)
        out[key] = _json_field(item, index, f"{field}.{key}", opaque)
    return out


def _content_in(
    content: object, index: int | None, call_ids: set[str]
) -> tuple[str | tuple[ContentPart, ...], JSONValue]:
    """The canonical content, and the raw block list when the parts cannot say it exactly."""
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        fail(
            f"content must be a string or a list of blocks, got {type_name(content)}",
            index=index,
            field="content",
        )
    exact: list[ContentPart] = []
    for block in content:
        part = _exact_part(block)
        if part is None:
            break
        exact.append(part)
    else:
        return tuple(exact), None
    raw = json_value(content, index=index, field="content")
    return _billed_parts(cast("list[JSONValue]", raw), index, call_ids), raw


def _exact_part(block: object) -> ContentPart | None:
    """The part a block is exactly (so it converts back to the identical block), else None."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text" and len(block) == 2 and isinstance(block.get("text"), str):
        return TextPart(text=block["text"])
    if kind == "image_url" and len(block) == 2:
        image = block.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            return None
        detail = image.get("detail")
        if set(image) - {"url", "detail"} or ("detail" in image and detail not in _DETAILS):
            return None
        try:
            return ImagePart(url=image["url"], detail=detail)
        except InvalidMessageError:
            return None
    if kind in _FILE_BLOCKS:  # exact when it is the block agentcontext writes for the part it reads
        try:
            file = _file_of(block)
        except InvalidMessageError:
            return None
        return file if file is not None and _file_block(file) == block else None
    return None


def _billed_parts(blocks: list[JSONValue], index: int | None, call_ids: set[str]) -> tuple[ContentPart, ...]:
    """What a provider bills for a block list: text, images, and any other block as its JSON."""
    parts: list[ContentPart] = []
    try:
        for block in blocks:
            if isinstance(block, str):
                parts.append(TextPart(text=block))
                continue
            if not isinstance(block, dict):
                parts.append(TextPart(text=canonical_json(block)))
                continue
            kind = block.get("type")
            if kind in _CALL_BLOCKS and (block.get("id") in call_ids or block.get("call_id") in call_ids):
                continue  # the tool call itself is counted once, as a tool call
            attachment = _image_of(block) or _file_of(block)
            if attachment is not None:
                parts.append(attachment)
            elif isinstance(block.get("text"), str):
                parts.append(TextPart(text=cast(str, block["text"])))
            elif kind in ("reasoning", "thinking") and isinstance(block.get(kind), str):
                parts.append(TextPart(text=cast(str, block[kind])))
            else:
                parts.append(TextPart(text=canonical_json(block)))
    except InvalidMessageError as e:
        raise at(e, index=index, field="content") from None
    return tuple(parts)


def _image_of(block: Mapping[str, JSONValue]) -> ImagePart | None:
    kind = block.get("type")
    url: JSONValue = None
    if kind == "image_url":
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
    elif kind == "image":
        url = block.get("url")
        data = block.get("base64") if block.get("base64") is not None else block.get("data")
        if not isinstance(url, str) and isinstance(data, str):
            url = f"data:{block.get('mime_type') or 'image/png'};base64,{data}"
    return ImagePart(url=url) if isinstance(url, str) else None


_FILE_BLOCKS = frozenset({"file", "audio", "video", "text-plain", "input_audio", "input_file", "document"})


def _file_of(block: Mapping[str, JSONValue]) -> FilePart | None:
    """The file a block holds, in any shape LangChain passes to a provider, else None.

    LangChain's own blocks (``file``, ``audio``, ``video``, ``text-plain`` with ``base64``: v1 ``base64`` /
    ``url`` / ``file_id``, v0 ``source_type`` + ``data`` / ``url`` / ``id``), and the providers' shapes it
    forwards as they are (OpenAI ``file`` and ``input_audio``, Responses ``input_file``, Anthropic
    ``document``).
    """
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in _FILE_BLOCKS:
        return None
    inner = block.get(kind)
    if kind in ("file", "input_audio") and isinstance(inner, dict):
        return _openai_file(kind, inner)
    if kind == "input_file":
        return _responses_file(block)
    if kind == "document":
        return _anthropic_file(block)
    if kind == "text-plain" and isinstance(block.get("text"), str):
        return None  # text, counted as text
    return _langchain_file(block, "text/plain" if kind == "text-plain" else None)


def _openai_file(kind: str, inner: Mapping[str, JSONValue]) -> FilePart | None:
    if kind == "input_audio":
        data, audio = inner.get("data"), inner.get("format")
        if not isinstance(data, str):
            return None
        media = audio_media_type(audio) if isinstance(audio, str) else "audio/wav"
        return _file(f"data:{media};base64,{data}", None, None)
    data, file_id = inner.get("file_data"), inner.get("file_id")
    url = data if isinstance(data, str) else f"{OPENAI_FILE_ID_URL}{file_id}" if file_id else None
    return _file(url, None, inner.get("filename"))


def _responses_file(block: Mapping[str, JSONValue]) -> FilePart | None:
    data, name = block.get("file_data"), block.get("filename")
    if isinstance(data, str) and not data.startswith("data:"):  # bare base64, typed by its name
        media = mimetypes.guess_type(name)[0] if isinstance(name, str) else None
        data = f"data:{media or 'application/octet-stream'};base64,{data}"
    file_id = block.get("file_id")
    return _file(
        data or block.get("file_url") or (f"{OPENAI_FILE_ID_URL}{file_id}" if file_id else None), None, name
    )


def _anthropic_file(block: Mapping[str, JSONValue]) -> FilePart | None:
    source, title = block.get("source"), block.get("title")
    if not isinstance(source, dict):
        return None
    kind, media, data = source.get("type"), source.get("media_type"), source.get("data")
    if kind == "base64":
        return _file(f"data:{media};base64,{data}", None, title)
    if kind == "text" and isinstance(data, str):
        return _file(text_data_url(data, media if isinstance(media, str) else None), None, title)
    if kind == "file" and source.get("file_id"):
        return _file(f"{ANTHROPIC_FILE_ID_URL}{source['file_id']}", None, title)
    return _file(source.get("url"), None, title)


def _langchain_file(block: Mapping[str, JSONValue], default_type: str | None) -> FilePart | None:
    media = block.get("mime_type") or default_type
    extras = block.get("extras") if isinstance(block.get("extras"), dict) else block.get("metadata")
    name = block.get("filename") or (extras.get("filename") if isinstance(extras, dict) else None)
    name = name or block.get("title")
    source_type = block.get("source_type")
    data = (
        block.get("base64") if source_type is None else block.get("data") if source_type == "base64" else None
    )
    if isinstance(data, str):
        return _file(f"data:{media or 'application/octet-stream'};base64,{data}", media, name)
    file_id = (
        block.get("file_id") if source_type is None else block.get("id") if source_type == "id" else None
    )
    return _file(block.get("url") or (f"file-id:{file_id}" if file_id else None), media, name)


def _file(url: JSONValue, media_type: JSONValue, name: JSONValue) -> FilePart | None:
    if not isinstance(url, str):
        return None
    return FilePart(
        url=url,
        media_type=media_type if isinstance(media_type, str) else None,
        name=name if isinstance(name, str) else None,
    )


def _tool_calls_in(lc: AIMessage, index: int | None, extra: dict[str, JSONValue]) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for k, call in enumerate(lc.tool_calls):
        field = f"tool_calls[{k}]"
        call_id, name, args = call.get("id"), call.get("name"), call.get("args")
        if not isinstance(call_id, str) or not call_id:
            fail(
                f"a tool call needs a non-empty string id (the tool message answering it names it), got {call_id!r}",
                index=index,
                field=f"{field}.id",
            )
        if not isinstance(name, str):
            fail(f"the tool name must be a string, got {type_name(name)}", index=index, field=f"{field}.name")
        if not isinstance(args, Mapping):
            fail(f"args must be a dict, got {type_name(args)}", index=index, field=f"{field}.args")
        arguments = json.dumps(json_value(args, index=index, field=f"{field}.args"), ensure_ascii=False)
        try:
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        except InvalidMessageError as e:
            raise at(e, index=index, field=field) from None
    if lc.invalid_tool_calls:
        invalid = json_value(lc.invalid_tool_calls, index=index, field="invalid_tool_calls")
        extra["invalid_tool_calls"] = invalid
        for k, item in enumerate(cast("list[dict[str, JSONValue]]", invalid)):
            bad_id, bad_name, bad_args = item.get("id"), item.get("name"), item.get("args")
            if not isinstance(bad_id, str) or not bad_id:
                continue  # nothing can answer it; it stays in extra only
            try:
                calls.append(
                    ToolCall(
                        id=bad_id,
                        name=bad_name if isinstance(bad_name, str) else "",
                        arguments=bad_args if isinstance(bad_args, str) else "",
                    )
                )
            except InvalidMessageError as e:
                raise at(e, index=index, field=f"invalid_tool_calls[{k}]") from None
    return tuple(calls)


# ----------------------------------------------------------------------------- the marker


def _payload(f: _Fields) -> dict[str, JSONValue]:
    """What ids and digests are computed from: everything but ids, metadata, markers and opaque refs."""
    content: JSONValue
    if isinstance(f.content, tuple):
        content = [_part_json(p) for p in f.content]
    else:
        content = f.content
    extra: dict[str, JSONValue] = {}
    for key, value in f.extra.items():
        if key == "id":
            continue
        if key == "response_metadata" and isinstance(value, Mapping) and MARKER_KEY in value:
            value = {k: v for k, v in value.items() if k != MARKER_KEY}
            if not value:
                continue
        extra[key] = _strip_refs(value)
    return {
        "role": f.role,
        "content": content,
        "tool_calls": [[c.id, c.name, c.arguments] for c in f.tool_calls],
        "tool_call_id": f.tool_call_id,
        "name": f.name,
        "extra": extra,
    }


def _part_json(part: ContentPart) -> JSONValue:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, FilePart):
        return {"type": "file", "url": part.url, "media_type": part.media_type, "name": part.name}
    return {
        "type": "image",
        "url": part.url,
        "detail": part.detail,
        "width": part.width,
        "height": part.height,
    }


def _strip_refs(value: JSONValue) -> JSONValue:
    if isinstance(value, Mapping):
        if _OPAQUE in value:
            return {_OPAQUE: value[_OPAQUE]}
        return {k: _strip_refs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_refs(v) for v in value]
    return value


def _digest(f: _Fields) -> str:
    text = canonical_json(_payload(f))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _restore(f: _Fields, marker: object, index: int | None) -> Message | None:
    """The message agentcontext wrote, when ``marker`` is its marker and the content is unchanged."""
    if not isinstance(marker, Mapping):
        return None
    mid, metadata, digest = marker.get("id"), marker.get("metadata"), marker.get("digest")
    if (
        not isinstance(mid, str)
        or not mid
        or not isinstance(metadata, Mapping)
        or not isinstance(digest, str)
    ):
        return None
    content = f.content
    if marker.get("content_null") is True and content == "":
        content = None
    calls = f.tool_calls
    arguments = marker.get("arguments")
    if isinstance(arguments, Mapping) and calls:
        calls = tuple(
            ToolCall(id=c.id, name=c.name, arguments=raw)
            if isinstance(raw := arguments.get(c.id), str)
            else c
            for c in calls
        )
    # The extra the message had: without the marker, and without the LangChain id when it had none of its own.
    extra = dict(f.extra)
    response = extra.get("response_metadata")
    if isinstance(response, Mapping):
        response = {k: v for k, v in response.items() if k != MARKER_KEY}
        if response:
            extra["response_metadata"] = response
        else:
            del extra["response_metadata"]
    if marker.get("native") is True:
        extra.pop("id", None)
    candidate = _Fields(f.role, content, calls, f.tool_call_id, f.name, extra)
    if _digest(candidate) != digest:
        return None
    return candidate.message(mid, metadata, index)


def _marker(m: Message) -> dict[str, JSONValue]:
    marker: dict[str, JSONValue] = {
        "id": m.id,
        "metadata": dict(m.metadata),
        "digest": _digest(_Fields.of(m)),
    }
    if "id" not in m.extra:
        marker["native"] = True  # its LangChain id is its own id; the canonical message has no extra["id"]
    if m.content is None:
        marker["content_null"] = True
    arguments: dict[str, JSONValue] = {
        c.id: c.arguments for c in m.tool_calls if _canonical_arguments(c.arguments) != c.arguments
    }
    if arguments:
        marker["arguments"] = arguments
    return marker


def _canonical_arguments(arguments: str) -> str | None:
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None


# ----------------------------------------------------------------------------- canonical -> LangChain


def from_messages(
    messages: Iterable[Message], *, validate: bool = True, opaque: Mapping[str, object] | None = None
) -> list[BaseMessage]:
    """Convert canonical messages to LangChain messages.

    Args:
        messages: the conversation. Not modified.
        validate: check the conversation with `agentcontext.check_messages` first
            (default ``True``), so a history a provider would reject with a 400
            fails here with the index and a fix instead.
        opaque: the mapping `to_messages` kept non-JSON values in, to put them back.

    Returns:
        New LangChain messages; a message that came from LangChain comes back equal to it.

    Raises:
        InvalidMessageError: a message holds something LangChain cannot carry; names the index and field.
        InvalidConversationError: ``validate`` is on and the conversation breaks a rule.
    """
    msgs = list(messages)
    out = [from_message(m, index=i, opaque=opaque) for i, m in enumerate(msgs)]
    if validate:
        ensure_valid(msgs, target="LangChain", hint="Repair the conversation, or pass validate=False.")
    return out


def from_message(
    m: Message,
    *,
    index: int | None = None,
    mark: bool = False,
    opaque: Mapping[str, object] | None = None,
) -> BaseMessage:
    """Convert one canonical message to a LangChain message (see `from_messages`).

    The LangChain id is the one the message came with (``extra["id"]``), else the
    message's own id. A message with `Message.metadata`, or one that did not come
    from LangChain, carries its id and metadata in ``response_metadata["agentcontext"]``
    so that `to_message` gives it back identical.

    Args:
        m: the message.
        index: its position, for error messages.
        mark: always write that marker (for a message agentcontext changed, whose id
            could not be derived again from its LangChain form).
        opaque: where non-JSON values were kept (see `to_messages`).
    """
    if not isinstance(m, Message):
        fail(f"expected an agentcontext Message, got {type(m).__name__}", index=index)
    extra = m.extra
    from_lc = "id" in extra
    lc_id = extra.get("id") if from_lc else m.id
    if lc_id is not None and not isinstance(lc_id, str):
        fail(f"extra['id'] must be a string or None, got {type_name(lc_id)}", index=index, field="extra.id")
    fields: dict[str, Any] = {"content": _content_out(m, index), "id": lc_id}
    if m.name is not None:
        fields["name"] = m.name
    known = {"id", "content", "additional_kwargs", "response_metadata"}
    if "additional_kwargs" in extra:
        fields["additional_kwargs"] = _resolve(
            extra["additional_kwargs"], opaque, index, "extra.additional_kwargs"
        )
    response = dict(
        cast("Mapping[str, Any]", _resolve(extra.get("response_metadata") or {}, opaque, index, ""))
    )
    if mark or m.metadata or not from_lc:
        response[MARKER_KEY] = _marker(m)
    if response:
        fields["response_metadata"] = response
    if m.role == "assistant":
        known |= {"usage_metadata", "invalid_tool_calls"}
        fields["tool_calls"], fields["invalid_tool_calls"] = _tool_calls_out(m, index)
        if "usage_metadata" in extra:
            fields["usage_metadata"] = _resolve(
                extra["usage_metadata"], opaque, index, "extra.usage_metadata"
            )
    elif m.role == "tool":
        known |= {"artifact", "status"}
        fields["tool_call_id"] = m.tool_call_id
        if "artifact" in extra:
            fields["artifact"] = _resolve(extra["artifact"], opaque, index, "extra.artifact")
        if "status" in extra:
            fields["status"] = extra["status"]
    for key in extra:
        if key not in known:
            fail(
                f"extra[{key!r}] has no place on a LangChain {_CLASSES[m.role].__name__}; "
                "remove it (agentcontext will not drop it silently)",
                index=index,
                field=f"extra.{key}",
            )
    try:
        return _CLASSES[m.role](**fields)
    except (TypeError, ValueError) as e:
        raise InvalidMessageError(f"LangChain rejected the message: {e}", index=index) from None


def _resolve(value: JSONValue, opaque: Mapping[str, object] | None, index: int | None, field: str) -> Any:
    """``value`` with opaque placeholders replaced by the values they stand for (deep copies of the rest)."""
    if isinstance(value, dict):
        if _OPAQUE in value:
            ref = value.get("ref")
            if opaque is not None and isinstance(ref, str) and ref in opaque:
                return opaque[ref]
            return dict(value)  # the value is gone (another process): the placeholder says what it was
        return {k: _resolve(v, opaque, index, field) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, opaque, index, field) for v in value]
    return value


def _content_out(m: Message, index: int | None) -> str | list[Any]:
    raw = m.extra.get("content")
    content = m.content
    if raw is not None:
        if not isinstance(raw, list):
            fail(
                f"extra['content'] must be a list of blocks, got {type_name(raw)}",
                index=index,
                field="extra.content",
            )
        calls = {c.id for c in m.tool_calls}
        if _billed_parts(raw, index, calls) == content:
            # A deep copy (the message never shares its data), keys in their order.
            copy: list[Any] = json.loads(json.dumps(raw))
            return copy
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    blocks: list[Any] = []
    for j, part in enumerate(content):
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
            continue
        if isinstance(part, FilePart):
            blocks.append(_file_block(part))
            continue
        if part.width is not None or part.height is not None:
            fail(
                "LangChain image blocks carry no width or height; drop them from the ImagePart "
                "(they only improve agentcontext's token estimate)",
                index=index,
                field=f"content[{j}]",
            )
        image: dict[str, str] = {"url": part.url}
        if part.detail is not None:
            image["detail"] = part.detail
        blocks.append({"type": "image_url", "image_url": image})
    return blocks


def _file_block(part: FilePart) -> dict[str, Any]:
    """A file the engine wrote into a message, as LangChain's standard block (``file``, ``audio``, ``video``)."""
    media = part.media_type or ""
    kind = media.split("/", 1)[0] if media.startswith(("audio/", "video/")) else "file"
    block: dict[str, Any] = {"type": kind}
    url = part.url
    if url.startswith("data:") and url.split(",", 1)[0].endswith(";base64"):
        block["base64"] = url.split(",", 1)[1]
    elif url.startswith("data:"):  # LangChain's converters take data as base64, never as a data: URL
        block["base64"] = base64.b64encode(part.data or b"").decode()
    elif url.startswith((OPENAI_FILE_ID_URL, ANTHROPIC_FILE_ID_URL, "file-id:")):
        block["file_id"] = url.split(":", 1)[1]
    else:
        block["url"] = url
    if media:
        block["mime_type"] = media
    if part.name is not None:
        block["extras"] = {"filename": part.name}
    return block


def _tool_calls_out(m: Message, index: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    raw_invalid = m.extra.get("invalid_tool_calls")
    listed: list[dict[str, Any]] = []
    if raw_invalid is not None:
        if not isinstance(raw_invalid, list) or not all(isinstance(item, dict) for item in raw_invalid):
            fail(
                f"extra['invalid_tool_calls'] must be a list of dicts, got {type_name(raw_invalid)}",
                index=index,
                field="extra.invalid_tool_calls",
            )
        listed = [dict(cast("dict[str, Any]", item)) for item in raw_invalid]
    by_id = {item["id"]: item for item in listed if isinstance(item.get("id"), str) and item.get("id")}
    calls = {c.id: c for c in m.tool_calls}
    valid: list[dict[str, Any]] = []
    unlisted: list[dict[str, Any]] = []
    for call in m.tool_calls:
        if call.id in by_id:
            continue
        try:
            args = json.loads(call.arguments)
        except ValueError:
            args = None
        if isinstance(args, dict):
            valid.append({"name": call.name, "args": args, "id": call.id, "type": "tool_call"})
        else:
            unlisted.append(
                {
                    "name": call.name,
                    "args": call.arguments,
                    "id": call.id,
                    "error": "the arguments are not a JSON object",
                    "type": "invalid_tool_call",
                }
            )
    # Invalid calls in their original order; one agentcontext changed (shortened arguments) carries the change.
    invalid: list[dict[str, Any]] = []
    for item in listed:
        item_id = item.get("id")
        kept = calls.get(item_id) if isinstance(item_id, str) and item_id in by_id else None
        if kept is not None and (
            kept.name != (item.get("name") or "") or kept.arguments != (item.get("args") or "")
        ):
            item = {**item, "name": kept.name, "args": kept.arguments}
        if kept is not None or item_id not in by_id:
            invalid.append(item)
    return valid, invalid + unlisted


# ----------------------------------------------------------------------------- incremental conversion


@dataclass(frozen=True, kw_only=True)
class Converted:
    """The result of `MessageCache.convert`."""

    messages: list[Message]
    """The canonical history (the system message first, when one was given). Owned by the cache:
    read it, do not change it; the next call may extend it in place."""
    appended: bool
    """True when the history only grew since the previous call (the same messages, then new ones;
    equal messages in new objects, as a checkpoint loads them, count as the same)."""
    converted: int
    """How many messages this call converted (the others were reused)."""


class MessageCache:
    """Converts a LangChain history that grows step by step, in O(new messages) per call.

    An agent hands over its whole history at every step. The cache remembers
    the previous call's messages and their conversions: when the new history is
    the previous one plus new messages (checked by object identity, a C-speed
    comparison of the two lists), only the new ones are converted. Otherwise
    (LangGraph replaced a message under its id, a history was compacted) each
    message is looked up by LangChain id and reused when equal, so only changed
    messages are converted.

    It also converts back (`back`): an input message's canonical form maps to the
    very LangChain object it came from, and a message agentcontext wrote is
    converted once and reused while it stays in use.

    Not thread-safe: use one cache per conversation (thread).

    Args:
        opaque: keep values that are not JSON data (tool artifacts...) instead of
            raising (default True); they are put back on the way back.
    """

    def __init__(self, *, opaque: bool = True) -> None:
        self._lc: list[BaseMessage] = []
        self._ours: list[Message] = []
        self._system: BaseMessage | None = None
        self._seen: set[str] = set()
        self._by_lc_id: dict[str, tuple[BaseMessage, Message]] = {}
        self._back: dict[str, BaseMessage] = {}
        self._made: dict[str, BaseMessage] = {}
        self._opaque: dict[str, object] | None = {} if opaque else None

    @property
    def opaque(self) -> Mapping[str, object] | None:
        """The non-JSON values kept so far (None when the cache raises on them)."""
        return self._opaque

    def convert(self, messages: Sequence[BaseMessage], *, system: BaseMessage | None = None) -> Converted:
        """The canonical form of ``[system, *messages]`` (``system`` left out when None).

        Raises:
            InvalidMessageError: a message cannot be converted (its index counted in ``messages``).
        """
        if not isinstance(messages, list):
            if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
                raise InvalidMessageError(f"expected a list of LangChain messages, got {type_name(messages)}")
            messages = list(messages)
        lc, n = self._lc, len(self._lc)
        same_system = system is self._system or (
            system is not None and self._system is not None and system == self._system
        )
        if (
            same_system
            and (self._ours or system is None)
            and len(messages) >= n
            and (n == 0 or (messages[n - 1] is lc[n - 1] and lc == messages[:n]))
        ):
            converted = self._extend(messages[n:], offset=n)
            return Converted(messages=self._ours, appended=n > 0, converted=converted)
        return self._rebuild(messages, system)

    def _convert_one(self, lc: BaseMessage, index: int | None, previous: str | None) -> Message:
        first = isinstance(lc.id, str) and lc.id not in self._seen
        m = to_message(lc, index=index, previous_id=previous, seen=self._seen, opaque=self._opaque)
        if first:  # only an id derived from the LangChain id may be reused elsewhere in a history
            self._by_lc_id[cast(str, lc.id)] = (lc, m)
        self._back[m.id] = lc
        return m

    def _extend(self, new: Sequence[BaseMessage], *, offset: int) -> int:
        ours = self._ours
        previous = ours[-1].id if ours else None
        for j, lc in enumerate(new):
            m = self._convert_one(lc, offset + j, previous)
            ours.append(m)
            previous = m.id
        self._lc.extend(new)
        return len(new)

    def _rebuild(self, messages: Sequence[BaseMessage], system: BaseMessage | None) -> Converted:
        old, before = self._by_lc_id, self._ours
        self._lc, self._ours, self._seen, self._by_lc_id, self._back = [], [], set(), {}, {}
        self._system = system
        converted = 0
        previous: str | None = None
        if system is not None:
            # Not part of ``messages``, so no index; previous_id "" gives it a deterministic id, not a random one.
            m = self._convert_one(system, None, "")
            self._ours.append(m)
            previous = m.id
            converted += 1
        seen, by_lc_id, back, ours = self._seen, self._by_lc_id, self._back, self._ours
        for i, lc in enumerate(messages):
            lc_id = lc.id
            hit = old.get(lc_id) if lc_id.__class__ is str and lc_id not in seen else None
            if hit is not None and (hit[0] is lc or hit[0] == lc):
                m = hit[1]
                seen.add(lc_id)  # type: ignore[arg-type]
                by_lc_id[lc_id] = (lc, m)  # type: ignore[index]
                back[m.id] = lc
            else:
                m = self._convert_one(lc, i, previous)
                converted += 1
            ours.append(m)
            previous = m.id
        self._lc = list(messages)
        # Equal messages in new objects (a history loaded from a checkpoint) still only grew.
        n = len(before)
        grew = 0 < n <= len(self._ours) and all(
            a.id == b.id for a, b in zip(before, self._ours, strict=False)
        )
        return Converted(messages=self._ours, appended=grew, converted=converted)

    def back(self, message: Message) -> BaseMessage:
        """The LangChain form of ``message``: the object it came from, or its conversion (reused while in use).

        A message agentcontext wrote or changed is marked (`from_message` with
        ``mark=True``), so it converts back to the identical id and metadata.
        """
        lc = self._back.get(message.id)
        if lc is not None:
            return lc
        made = self._made.get(message.id)
        if made is None:
            made = from_message(message, mark=True, opaque=self._opaque)
            self._made[message.id] = made
            if isinstance(made.id, str):
                self._by_lc_id[made.id] = (made, message)
        return made

    def keep_made(self, ids: Iterable[str]) -> None:
        """Forget the conversions of written messages other than ``ids`` (those of the current output)."""
        keep = set(ids)
        self._made = {k: v for k, v in self._made.items() if k in keep}
        if self._opaque is not None and len(self._opaque) > 2 * len(self._ours) + 64:
            used: set[str] = set()
            for m in self._ours:
                _collect_refs(m.extra, used)
            for _, m in self._by_lc_id.values():
                _collect_refs(m.extra, used)
            self._opaque = {k: v for k, v in self._opaque.items() if k in used}


def _collect_refs(value: object, out: set[str]) -> None:
    if isinstance(value, Mapping):
        ref = value.get("ref") if _OPAQUE in value else None
        if isinstance(ref, str):
            out.add(ref)
        for v in value.values():
            _collect_refs(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect_refs(v, out)
