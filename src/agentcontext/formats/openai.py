"""OpenAI Chat Completions messages to and from canonical `Message` objects, losslessly.

>>> from agentcontext.formats import openai as oai
>>> msgs = oai.to_messages([
...     {"role": "user", "content": "What is in /tmp?"},
...     {"role": "assistant", "content": None,
...      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
...     {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
... ])
>>> msgs[1].tool_calls[0].name
'ls'
>>> oai.from_messages(msgs)[2]
{'role': 'tool', 'content': 'a.txt', 'tool_call_id': 'c1'}

What is kept, and how:

- ``content`` keeps its form: a string stays a string, a list of parts stays a
  tuple of `TextPart`/`ImagePart` (``image_url.detail`` included)/`FilePart`,
  ``None`` stays ``None``. A ``file`` part is a `FilePart` whose URL is its
  ``file_data`` (a ``data:`` URL) or ``openai-file-id:<file_id>``, named by its
  ``filename``; an ``input_audio`` part is a `FilePart` with a base64 ``data:``
  URL of type ``audio/wav`` or ``audio/mpeg``, written back as one (so is a
  ``file`` part holding unnamed WAV or MP3: the same audio for OpenAI; other
  audio, as LiteLLM sends it to Gemini, stays a ``file`` part).
  Files are counted by what they hold (`agentcontext.tokens.file_tokens`). An assistant message without a ``content`` key reads as
  ``content: None`` and is written back with it, as the API itself returns it.
- ``tool_calls`` become `ToolCall` objects with the ``arguments`` text verbatim
  (even when it is not valid JSON); ``tool_call_id`` and ``name`` (on any role,
  tool messages included) are kept.
- Every other top-level key (``refusal``, ``reasoning_content``, ``audio``,
  ``function_call``...) goes to `Message.extra` and comes back out verbatim; a
  model's reasoning sent back with its message (``reasoning_content``,
  ``reasoning``, ``reasoning_details``, LiteLLM's ``thinking_blocks``:
  `agentcontext.messages.REASONING_KEYS`) is counted, the rest is not. A
  ``developer`` message becomes a canonical system message with
  ``extra={"role": "developer"}`` and is written back as ``developer``.
- Inside content parts and tool calls nothing is dropped: a part type or key
  agentcontext does not model (``refusal`` parts,
  ``cache_control``...) raises `InvalidMessageError` naming the message and the
  field, rather than vanishing; or, with ``to_messages(..., unknown="keep")``
  (what a proxy in front of any client needs: LiteLLM users put
  ``cache_control`` on text parts for Anthropic models), the message's dict
  travels whole in ``metadata["openai"]`` and comes back exactly while the
  engine leaves the message unchanged; its modelled parts are what is counted,
  and a part of a type it does not model is counted as a short marker.
  ``null`` for ``name`` or ``tool_calls`` reads as absent.

Ids: `to_messages` gives each message ``derive_id(previous id, canonical JSON of
its dict)``, so converting the same list twice gives the same ids and two lists
share ids exactly as far as they share a prefix. `from_messages` never writes
ids or `Message.metadata`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Literal, TypeAlias, cast

from ..exceptions import ConversionWarning, InvalidMessageError
from ..invariants import ensure_valid
from ..messages import (
    ROLES,
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
    OPENAI_FILE_ID_URL,
    at,
    audio_media_type,
    canonical_json,
    fail,
    json_value,
    only_keys,
    text_part_in,
    type_name,
)
from ._wire import ChatMessage

__all__ = ["KEY", "from_message", "from_messages", "to_message", "to_messages"]

KEY = "openai"
"""The metadata key under which ``unknown="keep"`` carries a message's dict (with the id it belongs to)."""
Unknown: TypeAlias = Literal["raise", "keep"]

_MODELLED = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
# Which content part types each role takes (the SDK's *MessageParam types): images, files and audio
# from the user; system and assistant messages take text. Tool results too, in OpenAI's own API; but
# OpenAI-compatible gateways (LiteLLM) forward a tool's screenshot or document to the providers that
# take them (Claude, Gemini), and agents send them: they are read and written back, and counted.
_ATTACHMENTS = frozenset({"text", "image_url", "file", "input_audio"})
_PART_TYPES: Mapping[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "user": _ATTACHMENTS,
    "assistant": frozenset({"text"}),
    "tool": _ATTACHMENTS,
}
_Detail: TypeAlias = Literal["auto", "low", "high"]
_DETAILS = ("auto", "low", "high")


# ----------------------------------------------------------------------------- OpenAI -> canonical


def to_messages(dicts: Iterable[Mapping[str, object]], *, unknown: Unknown = "raise") -> list[Message]:
    """Convert a list of OpenAI Chat Completions message dicts to canonical messages.

    Args:
        dicts: the messages, as sent to or returned by the API (JSON-decoded).
            Not modified.
        unknown: what to do with content parts, and keys on them, that agentcontext
            does not model: ``"raise"`` (default) refuses them by name; ``"keep"``
            carries the message's dict whole (see the module docstring) and warns
            once (`ConversionWarning`) that they are kept as sent and not counted.

    Returns:
        One `Message` per dict, with deterministic chain ids (see the module docstring).

    Raises:
        InvalidMessageError: a dict is malformed; the error names its index,
            the field and what was expected.
    """
    if isinstance(dicts, str | bytes | Mapping) or not isinstance(dicts, Iterable):
        raise InvalidMessageError(
            f"expected a list of message dicts, got {type_name(dicts)}; "
            "wrap a single message in a list, or call to_message for it"
        )
    out: list[Message] = []
    previous: str | None = None
    kept: set[str] = set()
    for index, d in enumerate(dicts):
        message = _to_message(d, index, previous, unknown, kept)
        out.append(message)
        previous = message.id
    _warn_kept(kept)
    return out


def _warn_kept(kept: set[str]) -> None:
    if kept:
        warnings.warn(
            "OpenAI "
            + "; ".join(sorted(kept))
            + ": not modelled by agentcontext, so kept as sent for the messages it does not change, "
            "and not counted",
            ConversionWarning,
            stacklevel=3,
        )


def to_message(
    d: Mapping[str, object],
    *,
    index: int | None = None,
    previous_id: str | None = None,
    unknown: Unknown = "raise",
) -> Message:
    """Convert one OpenAI message dict to a canonical message.

    Args:
        d: the message dict. Not modified.
        index: its position in the conversation, for error messages.
        previous_id: the id of the message before it, for the chain id.
            When neither ``index`` nor ``previous_id`` is given (a message converted
            on its own, as an agent loop appends replies), the message gets a fresh
            random id instead: two identical replies ("ok") must not share an id.
        unknown: ``"raise"`` or ``"keep"`` (see `to_messages`).

    Raises:
        InvalidMessageError: ``d`` is malformed (see `to_messages`).
    """
    kept: set[str] = set()
    message = _to_message(d, index, previous_id, unknown, kept)
    _warn_kept(kept)
    return message


def _to_message(
    d: Mapping[str, object], index: int | None, previous_id: str | None, unknown: Unknown, kept: set[str]
) -> Message:
    if unknown not in ("raise", "keep"):
        raise InvalidMessageError(f"unknown must be 'raise' or 'keep', got {unknown!r}")
    if not isinstance(d, Mapping):
        fail(f"expected a message dict, got {type_name(d)}", index=index)
    extra: dict[str, JSONValue] = {}
    role = _role_in(d, index, extra)
    reduced: set[str] = set()
    content = _content_in(d, role, index, reduced if unknown == "keep" else None)
    tool_calls = _tool_calls_in(d.get("tool_calls"), role, index, reduced if unknown == "keep" else None)
    tool_call_id = _tool_call_id_in(d, role, index)
    name = d.get("name")
    if name is not None and not isinstance(name, str):
        fail(f"name must be a string, got {type_name(name)}", index=index, field="name")
    for key, value in d.items():
        if key in _MODELLED:
            continue
        if not isinstance(key, str):
            fail(f"message keys must be strings, got {type_name(key)} ({key!r})", index=index)
        extra[key] = json_value(value, index=index, field=key)
    message_id = (
        new_id() if index is None and previous_id is None else derive_id(previous_id, canonical_json(d))
    )
    metadata: dict[str, JSONValue] = {}
    if reduced:
        # The dict this message came from, whole: written back as it was while its id stands.
        kept.update(reduced)
        metadata[KEY] = {"id": message_id, "wire": json_value(dict(d), index=index, field="content")}
    try:
        return Message(
            role=role,
            content=content,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            name=name,
            extra=extra,
            id=message_id,
            metadata=metadata,
        )
    except InvalidMessageError as e:
        raise at(e, index=index) from None


def _role_in(d: Mapping[str, object], index: int | None, extra: dict[str, JSONValue]) -> Role:
    if "role" not in d:
        fail(
            "missing 'role'; expected 'system', 'developer', 'user', 'assistant' or 'tool'",
            index=index,
            field="role",
        )
    role = d["role"]
    if role == "developer":
        # OpenAI's newer name for system instructions; canonical code treats it as
        # system, and extra remembers the wire name for the way back.
        extra["role"] = "developer"
        return "system"
    if isinstance(role, str) and role in ROLES:
        return cast(Role, role)
    hint = (
        "; the legacy 'function' role is not supported: send tool messages (tool_call_id) instead"
        if role == "function"
        else ""
    )
    fail(
        f"unknown role {role!r}; expected 'system', 'developer', 'user', 'assistant' or 'tool'{hint}",
        index=index,
        field="role",
    )


def _content_in(
    d: Mapping[str, object], role: Role, index: int | None, reduced: set[str] | None
) -> str | tuple[ContentPart, ...] | None:
    """The content, checked; with ``reduced`` (``unknown="keep"``), what is not modelled is left out and named there."""
    value = d.get("content")
    if isinstance(value, str):
        return value
    if value is None:
        if role == "assistant":
            return None
        what = "missing 'content'" if "content" not in d else "content is null"
        fail(
            f"{what}, but {role} messages need content: a string or a list of parts (use '' for nothing)",
            index=index,
            field="content",
        )
    if not isinstance(value, list | tuple):
        fail(
            f"content must be a string, a list of parts or null, got {type_name(value)}",
            index=index,
            field="content",
        )
    allowed = _PART_TYPES[role]
    parts: list[ContentPart] = []
    for j, part in enumerate(value):
        if reduced is not None and isinstance(part, Mapping):
            part = _modelled_part(part, role, allowed, reduced)
            if part is None:
                continue
        parts.append(_part_in(part, role, allowed, index, f"content[{j}]"))
    if reduced and not parts:
        # Only parts agentcontext does not model (a file, audio...): a marker stands for them in the text.
        parts.append(TextPart(text="[agentcontext: content parts kept as sent]"))
    return tuple(parts)


_PART_KEYS: Mapping[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "image_url": ("type", "image_url"),
    "file": ("type", "file"),
    "input_audio": ("type", "input_audio"),
}
_INNER_KEYS: Mapping[str, tuple[str, ...]] = {
    "image_url": ("url", "detail"),
    "file": ("file_data", "file_id", "filename"),
    "input_audio": ("data", "format"),
}
_FOREIGN_ID = re.compile(r"[a-z][a-z0-9-]*-file-id:")
"""A file another provider holds (``anthropic-file-id:...``, Pydantic AI's ``google-gla-file-id:...``)."""
_AUDIO_FORMATS: Mapping[str, str] = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _modelled_part(
    part: Mapping[str, object], role: Role, allowed: frozenset[str], reduced: set[str]
) -> Mapping[str, object] | None:
    """``part`` reduced to what agentcontext models (None: a part it does not model); what is left out is named."""
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in allowed:
        reduced.add(f"{kind!r} parts in {role} messages")
        return None
    keys, inner_keys = _PART_KEYS[kind], _INNER_KEYS.get(kind, ())
    inner = part.get(kind) if inner_keys else None
    if all(k in keys for k in part) and (
        not isinstance(inner, Mapping) or all(k in inner_keys for k in inner)
    ):
        return part
    unknown = [k for k in part if k not in keys]
    if isinstance(inner, Mapping):
        unknown += [f"{kind}.{k}" for k in inner if k not in inner_keys]
    reduced.add(", ".join(repr(k) for k in unknown) + f" on {kind} parts")
    out = {k: v for k, v in part.items() if k in keys}
    if isinstance(inner, Mapping):
        out[kind] = {k: v for k, v in inner.items() if k in inner_keys}
    return out


def _part_in(part: object, role: Role, allowed: frozenset[str], index: int | None, field: str) -> ContentPart:
    if not isinstance(part, Mapping):
        fail(
            f"a content part must be an object with a 'type', got {type_name(part)}", index=index, field=field
        )
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in allowed:
        if isinstance(kind, str) and kind in _ATTACHMENTS:
            why = f"{kind!r} parts go in user messages and tool results, not in {role} ones"
        else:
            why = f"unsupported content part type {kind!r}; agentcontext models 'text' parts" + (
                ", 'image_url', 'file' and 'input_audio' parts" if role == "user" else f" in {role} messages"
            )
        fail(why, index=index, field=f"{field}.type")
    if kind == "text":
        return text_part_in(part, index=index, field=field, noun="part")
    if kind in ("file", "input_audio"):
        return _file_part_in(part, kind, index, field)
    only_keys(part, ("type", "image_url"), index=index, field=field)
    image = part.get("image_url")
    if not isinstance(image, Mapping):
        fail(
            f"'image_url' must be an object {{'url': ..., 'detail': ...}}, got {type_name(image)}",
            index=index,
            field=f"{field}.image_url",
        )
    only_keys(image, ("url", "detail"), index=index, field=f"{field}.image_url")
    url = image.get("url")
    if not isinstance(url, str):
        fail(
            f"'image_url.url' must be a string (https:// or data: URL), got {type_name(url)}",
            index=index,
            field=f"{field}.image_url.url",
        )
    detail = image.get("detail")
    if detail is not None and detail not in _DETAILS:
        fail(
            f"'detail' must be 'auto', 'low' or 'high', got {detail!r}",
            index=index,
            field=f"{field}.image_url.detail",
        )
    try:
        return ImagePart(url=url, detail=cast("_Detail | None", detail))
    except InvalidMessageError as e:
        raise at(e, index=index, field=f"{field}.image_url.url") from None


def _file_part_in(part: Mapping[str, object], kind: str, index: int | None, field: str) -> FilePart:
    """A ``file`` part (``file_data`` or ``file_id``, with a ``filename``) or an ``input_audio`` part."""
    only_keys(part, ("type", kind), index=index, field=field)
    body = part.get(kind)
    keys = _INNER_KEYS[kind]
    if not isinstance(body, Mapping):
        expected = ", ".join(f"{k!r}: ..." for k in keys)
        fail(
            f"{kind!r} must be an object {{{expected}}}, got {type_name(body)}",
            index=index,
            field=f"{field}.{kind}",
        )
    only_keys(body, keys, index=index, field=f"{field}.{kind}")
    for key, value in body.items():
        if not isinstance(value, str):
            fail(
                f"'{kind}.{key}' must be a string, got {type_name(value)}",
                index=index,
                field=f"{field}.{kind}.{key}",
            )
    if kind == "input_audio":
        data, audio = body.get("data"), body.get("format")
        if not isinstance(data, str) or not isinstance(audio, str):
            fail(
                "'input_audio' needs 'data' (base64) and 'format' ('wav' or 'mp3')",
                index=index,
                field=f"{field}.input_audio",
            )
        media = audio_media_type(audio)
        url, name = f"data:{media};base64,{data}", None
    else:
        data, file_id, filename = body.get("file_data"), body.get("file_id"), body.get("filename")
        if (data is None) == (file_id is None):
            fail(
                "a 'file' part needs exactly one of 'file_data' (a data: URL) and 'file_id'",
                index=index,
                field=f"{field}.file",
            )
        url = cast(str, data) if data is not None else OPENAI_FILE_ID_URL + cast(str, file_id)
        name = cast("str | None", filename)
    try:
        return FilePart(url=url, name=name)
    except InvalidMessageError as e:  # a FilePart knows no index: placed here
        raise at(e, index=index, field=f"{field}.{kind}") from None


def _tool_calls_in(
    value: object, role: Role, index: int | None, reduced: set[str] | None
) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if role != "assistant":
        fail(f"only assistant messages carry tool_calls, not {role} ones", index=index, field="tool_calls")
    if not isinstance(value, list | tuple):
        fail(f"tool_calls must be a list, got {type_name(value)}", index=index, field="tool_calls")
    calls: list[ToolCall] = []
    for k, call in enumerate(value):
        field = f"tool_calls[{k}]"
        if not isinstance(call, Mapping):
            fail(f"a tool call must be an object, got {type_name(call)}", index=index, field=field)
        _known_keys(call, ("id", "type", "function"), index, field, reduced, "tool calls")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            fail(
                f"a tool call needs a non-empty string 'id', got {call_id!r}",
                index=index,
                field=f"{field}.id",
            )
        kind = call.get("type", "function")
        if kind != "function":
            fail(
                f"unsupported tool call type {kind!r}; agentcontext models 'function' calls",
                index=index,
                field=f"{field}.type",
            )
        function = call.get("function")
        if not isinstance(function, Mapping):
            fail(
                f"'function' must be an object {{'name': ..., 'arguments': ...}}, got {type_name(function)}",
                index=index,
                field=f"{field}.function",
            )
        _known_keys(
            function, ("name", "arguments"), index, f"{field}.function", reduced, "tool call functions"
        )
        name = function.get("name")
        if not isinstance(name, str):
            fail(
                f"the function name must be a string, got {type_name(name)}",
                index=index,
                field=f"{field}.function.name",
            )
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            hint = "; pass json.dumps(arguments)" if isinstance(arguments, Mapping | list) else ""
            fail(
                f"'arguments' must be a JSON string, got {type_name(arguments)}{hint}",
                index=index,
                field=f"{field}.function.arguments",
            )
        try:
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        except InvalidMessageError as e:
            raise at(e, index=index, field=field) from None
    return tuple(calls)


def _known_keys(
    d: Mapping[object, object],
    allowed: tuple[str, ...],
    index: int | None,
    field: str,
    reduced: set[str] | None,
    where: str,
) -> None:
    """Refuse keys outside ``allowed``; with ``reduced`` (``unknown="keep"``), name them there instead."""
    if reduced is None:
        only_keys(d, allowed, index=index, field=field)
        return
    other = [repr(k) for k in d if k not in allowed]
    if other:
        reduced.add(", ".join(other) + f" on {where}")


def _tool_call_id_in(d: Mapping[str, object], role: Role, index: int | None) -> str | None:
    value = d.get("tool_call_id")
    if role != "tool":
        if value is not None:
            fail(
                f"only tool messages carry a tool_call_id, not {role} ones", index=index, field="tool_call_id"
            )
        return None
    if not isinstance(value, str) or not value:
        what = "missing" if "tool_call_id" not in d else f"got {value!r}"
        fail(
            f"a tool message needs the non-empty string tool_call_id of the call it answers ({what})",
            index=index,
            field="tool_call_id",
        )
    return value


# ----------------------------------------------------------------------------- canonical -> OpenAI


def from_messages(messages: Iterable[Message], *, validate: bool = True) -> list[ChatMessage]:
    """Convert canonical messages to OpenAI Chat Completions message dicts.

    Args:
        messages: the conversation. Not modified.
        validate: check the conversation with `agentcontext.check_messages`
            first (default ``True``), so a request OpenAI would reject with a
            400 (an unanswered tool call, an orphan result...) fails here with
            the index and a fix instead. ``False`` converts whatever is given.

    Returns:
        New dicts (sharing nothing with the messages): no ids, no metadata.

    Raises:
        InvalidMessageError: a message holds something OpenAI cannot carry
            (an image outside a user message, no content on a user, system or
            tool message); names the index and field.
        InvalidConversationError: ``validate`` is on and the conversation
            breaks a rule; ``.violations`` lists them all.
    """
    msgs = list(messages)
    out = [from_message(m, index=i) for i, m in enumerate(msgs)]
    if validate:
        ensure_valid(
            msgs,
            target="OpenAI",
            hint="Repair the conversation, or pass validate=False to convert it anyway.",
        )
    return out


def from_message(m: Message, *, index: int | None = None) -> ChatMessage:
    """Convert one canonical message to an OpenAI message dict (see `from_messages`).

    Args:
        m: the message.
        index: its position in the conversation, for error messages.
    """
    if not isinstance(m, Message):
        fail(f"expected an agentcontext Message, got {type(m).__name__}", index=index)
    meta = m.metadata.get(KEY) if m.metadata else None
    if isinstance(meta, Mapping) and meta.get("id") == m.id and isinstance(meta.get("wire"), Mapping):
        # Read with unknown="keep" and not changed since: the dict it came from, exactly.
        return cast(ChatMessage, json_value(meta["wire"], index=index, field="metadata.openai.wire"))
    role: str = m.role
    if "role" in m.extra:
        if m.role != "system" or m.extra["role"] != "developer":
            fail(
                f"extra['role'] may only be 'developer' on a system message, got {m.extra['role']!r} "
                f"on a {m.role} message",
                index=index,
                field="extra.role",
            )
        role = "developer"
    out: dict[str, JSONValue] = {"role": role, "content": _content_out(m, index)}
    if m.name is not None:
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    for key, value in m.extra.items():
        if key == "role":
            continue
        if key in _MODELLED:
            fail(
                f"extra must not hold {key!r}, which agentcontext models itself; set the message's field instead",
                index=index,
                field=f"extra.{key}",
            )
        out[key] = json_value(value, index=index, field=f"extra.{key}")
    return cast(ChatMessage, out)


def _content_out(m: Message, index: int | None) -> JSONValue:
    content = m.content
    if content is None:
        if m.role == "assistant":
            return None
        fail(
            f"OpenAI requires content on {m.role} messages; use '' for an empty one",
            index=index,
            field="content",
        )
    if isinstance(content, str):
        return content
    parts: list[JSONValue] = []
    for j, part in enumerate(content):
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
            continue
        if m.role not in ("user", "tool"):
            what = "images" if isinstance(part, ImagePart) else "files"
            fail(
                f"{what.capitalize()} go in user messages and tool results, not in {m.role} ones; "
                f"describe the {what[:-1]} in text, or move it to a user message",
                index=index,
                field=f"content[{j}]",
            )
        if isinstance(part, FilePart):
            parts.append(_file_part_out(part, index, f"content[{j}]"))
            continue
        image: dict[str, JSONValue] = {"url": part.url}
        if part.detail is not None:
            image["detail"] = part.detail
        parts.append({"type": "image_url", "image_url": image})
    return parts


def _file_part_out(part: FilePart, index: int | None, field: str) -> JSONValue:
    """An ``input_audio`` part for WAV or MP3 in a base64 ``data:`` URL without a name, else a ``file`` part.

    ``input_audio`` takes those two formats only; any other audio (Ogg, WebM: what LiteLLM sends Gemini)
    stays a ``file`` part, as it came.
    """
    media, url = part.media_type or "", part.url
    if media in _AUDIO_FORMATS and part.name is None and url.startswith("data:") and ";base64," in url:
        audio = _AUDIO_FORMATS[media]
        return {"type": "input_audio", "input_audio": {"data": url.split(",", 1)[1], "format": audio}}
    if url.startswith(OPENAI_FILE_ID_URL):
        file: dict[str, JSONValue] = {"file_id": url[len(OPENAI_FILE_ID_URL) :]}
    elif _FOREIGN_ID.match(url):
        fail(
            f"OpenAI takes a file as its data or an OpenAI file id, not as another provider's file "
            f"({url[:60]!r}); send its bytes as a data: URL",
            index=index,
            field=field,
        )
    else:
        file = {"file_data": url}  # a data: URL, or what a client sent there (base64, a gateway's URL)
    if part.name is not None:
        file["filename"] = part.name
    return {"type": "file", "file": file}
