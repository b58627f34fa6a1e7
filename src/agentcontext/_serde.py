"""The one versioned codec: messages and session records to JSON and back.

Every persisted message and record goes through this module, so the on-disk
shape is defined in exactly one place (no per-class ``to_dict``/``from_dict``).
The shape is versioned: `SCHEMA_VERSION` is written into each session's header
record, and `upcast` turns records written by an older version into the current
shape before they are decoded, so a new library reads every old file.

Version history:

- **0**: Kimi CLI's context file: one kosong message per line, with
  ``{"role": "_usage", "token_count": N}``, ``{"role": "_checkpoint", "id": N}``
  and ``{"role": "_system_prompt", ...}`` lines mixed in; no header, no
  sequence numbers, no message ids.
- **1** (current): a header record first, then one record per line, each with
  ``seq`` (0, 1, 2, ... with no gaps), ``type`` and ``ts``. Messages nest under
  ``"message"`` so a record's fields never collide with a message's::

      {"seq":0,"type":"header","ts":"2025-06-01T09:00:00.000Z","schema_version":1,"session_id":"ses_..."}
      {"seq":1,"type":"message","ts":"...","message":{"id":"msg_...","role":"user","content":"hi"}}

Fields equal to their default are left out, so lines stay short and readable
(``jq 'select(.type == "message") | .message.content'`` just works).

A record type this version does not know is decoded as an `UnknownRecord`
holding the raw data verbatim; the session passes over it with a warning and
never rewrites it.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar

from .exceptions import InvalidMessageError
from .messages import (
    ROLES,
    ContentPart,
    FilePart,
    ImagePart,
    JSONValue,
    Message,
    TextPart,
    ToolCall,
    derive_id,
)

__all__ = [
    "SCHEMA_VERSION",
    "RecordDecodeError",
    "UnknownRecord",
    "decode_message",
    "decode_record",
    "detect_version",
    "dumps",
    "encode_message",
    "encode_record",
    "loads",
    "record_type",
    "registered_types",
    "upcast",
]

SCHEMA_VERSION: Final = 1
"""The schema this version writes (and the newest it reads fully)."""

MAX_RECORD_DEPTH: Final = 256
"""Arrays and objects nested deeper than this in one stored record make it a damaged record:
a message the command line accepts nests at most 200 levels, and a crafted line must cost
one skipped record, never the stack (a `RecursionError` that stops the whole restore)."""

_T = TypeVar("_T")


class RecordDecodeError(ValueError):
    """A stored record cannot be decoded; ``where`` says which (``"line 12"``, ``"seq 12"``).

    Raised by `decode_record` and `loads`; the session turns it into a warning and
    skips the record, so one damaged line never stops a restore.
    """

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


# ----------------------------------------------------------------------------- JSON text


def _json_default(value: object) -> JSONValue:
    # Message.metadata and .extra are read-only mappings; json only knows dict.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def dumps(data: Mapping[str, JSONValue]) -> str:
    """One record as compact JSON text on one line (UTF-8 characters kept, no NaN).

    Raises:
        InvalidMessageError: when ``data`` holds something JSON cannot carry
            (a NaN or infinite float, an object that is not a JSON value).
    """
    try:
        return json.dumps(
            data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_json_default
        )
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(
            f"cannot store this record as JSON: {exc}; metadata and extra must hold only JSON values "
            "(str, int, finite float, bool, None, lists and dicts of them)"
        ) from None


# orjson parses a record in 40% of the standard library's time (a restore is mostly parsing). What it
# refuses and json accepts (integers over 64 bits, NaN, nesting over 1,024) falls back to json, so
# both read exactly the same records; without orjson (no wheel for the platform) json does it all.
try:
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - orjson is a dependency; its wheels cover the usual platforms
    _ORJSON: Callable[[str | bytes], object] | None = None
else:
    _ORJSON = _orjson_loads

# The C scanner behind json.loads; typeshed does not declare the attribute.
_SCAN: Callable[[str, int], tuple[object, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_NO_FIELDS: Mapping[str, JSONValue] = MappingProxyType({})


def loads(text: str | bytes, *, where: str) -> dict[str, JSONValue]:
    """Parse one stored record; raises `RecordDecodeError` unless it is a JSON object.

    Bytes must be UTF-8 (strictly: unlike ``json.loads``, encoded surrogates are
    refused, since no provider accepts them). Parsed by orjson when it can;
    else by the C scanner behind ``json.loads``, called directly, which skips
    its encoding detection and whitespace regexes.
    """
    value: object = None
    if _ORJSON is not None:
        try:
            value = _ORJSON(text)
        except ValueError:  # anything it refuses (NaN, lone surrogates, deep nesting...) takes json's path
            value = None
        else:
            if _has_huge_float(value):  # orjson reads an integer of 2**63 or more as a float; json keeps it
                value = None
    if value is None:
        value = _loads_stdlib(text, where)
    if not isinstance(value, dict):
        raise RecordDecodeError(where, f"expected a JSON object, got {type(value).__name__}")
    # A record cannot nest deeper than it has openers: most lines skip the walk.
    opened = (
        text.count(b"[") + text.count(b"{") if isinstance(text, bytes) else text.count("[") + text.count("{")
    )
    if opened > MAX_RECORD_DEPTH and _depth_exceeds(value, MAX_RECORD_DEPTH):
        raise RecordDecodeError(where, _too_deep())
    return value


def _has_huge_float(value: object) -> bool:
    """True when ``value`` holds a float of magnitude 2**63 or more: what orjson makes of a bigger integer.

    A walk of the record's containers, strings passed over at the cost of a type test each.
    """
    stack: list[Any] = [value]  # Any: no cast() calls in a loop this hot
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int:
            continue
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and not -_INT64 < item < _INT64:
            return True
    return False


_INT64 = float(2**63)


def _loads_stdlib(text: str | bytes, where: str) -> object:
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:  # leading whitespace, or nothing to parse: let json explain
            value, end = json.loads(text), len(text)
        if end != len(text) and text[end:].strip():
            raise ValueError(f"extra data after the record, at character {end}")
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise RecordDecodeError(where, f"not valid JSON ({exc})") from None
    except RecursionError:  # deeper than the C scanner's stack: the line alone is bad
        raise RecordDecodeError(where, _too_deep()) from None
    return value


def _too_deep() -> str:
    return f"nested too deeply (more than {MAX_RECORD_DEPTH} levels of arrays or objects)"


def _depth_exceeds(value: object, limit: int) -> bool:
    """True when ``value`` nests more than ``limit`` arrays or objects (iteratively: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


# ----------------------------------------------------------------------------- messages


def encode_message(m: Message) -> dict[str, JSONValue]:
    """A message as JSON-ready data; fields at their default are left out."""
    d: dict[str, JSONValue] = {"id": m.id, "role": m.role}
    content = m.content
    if isinstance(content, tuple):
        parts = [_encode_part(p) for p in content]
        d["content"] = parts
    elif content is not None:
        d["content"] = content
    if m.tool_calls:
        d["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        d["name"] = m.name
    if m.metadata:
        d["metadata"] = dict(m.metadata)
    if m.extra:
        d["extra"] = dict(m.extra)
    return d


def _encode_part(p: ContentPart) -> JSONValue:
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text}
    if isinstance(p, FilePart):
        file: dict[str, JSONValue] = {"type": "file", "url": p.url}
        if p.media_type is not None:
            file["media_type"] = p.media_type
        if p.name is not None:
            file["name"] = p.name
        return file
    img: dict[str, JSONValue] = {"type": "image", "url": p.url}
    if p.detail is not None:
        img["detail"] = p.detail
    if p.width is not None:
        img["width"] = p.width
    if p.height is not None:
        img["height"] = p.height
    return img


def _part(value: object, where: str, i: int) -> ContentPart:
    if not isinstance(value, dict):
        raise RecordDecodeError(where, f"content[{i}] must be an object, got {type(value).__name__}")
    kind = value.get("type")
    if kind == "text":
        text = value.get("text")
        if not isinstance(text, str):
            raise RecordDecodeError(where, f"content[{i}].text must be a string")
        return TextPart(text=text)
    if kind == "image":
        url, detail, width, height = (
            value.get("url"),
            value.get("detail"),
            value.get("width"),
            value.get("height"),
        )
        if not isinstance(url, str):
            raise RecordDecodeError(where, f"content[{i}].url must be a string")
        for name, dim in (("width", width), ("height", height)):
            if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool)):
                raise RecordDecodeError(where, f"content[{i}].{name} must be an integer")
        if detail not in (None, "auto", "low", "high"):
            raise RecordDecodeError(where, f"content[{i}].detail must be 'auto', 'low' or 'high'")
        return ImagePart(url=url, detail=detail, width=width, height=height)
    if kind == "file":
        file_url, media_type, file_name = value.get("url"), value.get("media_type"), value.get("name")
        if not isinstance(file_url, str):
            raise RecordDecodeError(where, f"content[{i}].url must be a string")
        if not (media_type is None or isinstance(media_type, str)) or not (
            file_name is None or isinstance(file_name, str)
        ):
            raise RecordDecodeError(where, f"content[{i}].media_type and .name must be strings")
        return FilePart(url=file_url, media_type=media_type, name=file_name)
    raise RecordDecodeError(
        where, f"content[{i}] has unknown part type {kind!r}; expected 'text', 'image' or 'file'"
    )


def decode_message(data: object, *, where: str) -> Message:
    """Rebuild a message from `encode_message` output; raises `RecordDecodeError` on bad data."""
    if type(data) is not dict:
        raise RecordDecodeError(where, f"a message must be an object, got {type(data).__name__}")
    get = data.get
    content = get("content")
    if type(content) is list:
        content = tuple(_part(p, where, i) for i, p in enumerate(content))
    raw_calls = get("tool_calls")
    calls: tuple[ToolCall, ...] = _tool_calls(raw_calls, where) if raw_calls else ()
    metadata, extra = get("metadata"), get("extra")
    if metadata is not None and type(metadata) is not dict:
        raise RecordDecodeError(where, "message metadata must be an object")
    if extra is not None and type(extra) is not dict:
        raise RecordDecodeError(where, "message extra must be an object")
    msg_id = get("id")
    if type(msg_id) is not str or not msg_id:
        raise RecordDecodeError(where, "a message needs a non-empty string 'id'")
    try:
        return Message(
            role=get("role"),  # type: ignore[arg-type]  # validated by Message
            content=content,
            tool_calls=calls,
            tool_call_id=get("tool_call_id"),
            name=get("name"),
            id=msg_id,
            metadata=metadata or _NO_FIELDS,
            extra=extra or _NO_FIELDS,
        )
    except InvalidMessageError as exc:
        raise RecordDecodeError(where, f"invalid message: {exc}") from None


def _tool_calls(raw: object, where: str) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        raise RecordDecodeError(where, "tool_calls must be a list")
    out: list[ToolCall] = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict):
            raise RecordDecodeError(where, f"tool_calls[{i}] must be an object")
        try:
            out.append(ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments", "{}")))
        except KeyError as exc:
            raise RecordDecodeError(where, f"tool_calls[{i}] lacks {exc.args[0]!r}") from None
        except InvalidMessageError as exc:
            raise RecordDecodeError(where, f"tool_calls[{i}]: {exc}") from None
    return tuple(out)


# ----------------------------------------------------------------------------- records

Decoder = Callable[[object, str, str], object]
"""``(value, where, field) -> decoded value``; raises `RecordDecodeError`."""


def _bad(where: str, field: str, expected: str, value: object) -> RecordDecodeError:
    return RecordDecodeError(where, f"field {field!r}: expected {expected}, got {type(value).__name__}")


def _int(value: object, where: str, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _bad(where, field, "an integer", value)


def _str(value: object, where: str, field: str) -> str:
    if isinstance(value, str):
        return value
    raise _bad(where, field, "a string", value)


def _bool(value: object, where: str, field: str) -> bool:
    if isinstance(value, bool):
        return value
    raise _bad(where, field, "true or false", value)


def _mapping(value: object, where: str, field: str) -> Mapping[str, JSONValue]:
    if isinstance(value, dict):
        return value
    raise _bad(where, field, "an object", value)


def _message(value: object, where: str, field: str) -> Message:
    return decode_message(value, where=f"{where}, field {field!r}")


def _optional(inner: Decoder) -> Decoder:
    def decode(value: object, where: str, field: str) -> object:
        return None if value is None else inner(value, where, field)

    return decode


def _tuple_of(inner: Decoder) -> Decoder:
    def decode(value: object, where: str, field: str) -> object:
        if not isinstance(value, list):
            raise _bad(where, field, "a list", value)
        return tuple(inner(v, where, f"{field}[{i}]") for i, v in enumerate(value))

    return decode


def _literal(values: tuple[str, ...]) -> Decoder:
    def decode(value: object, where: str, field: str) -> object:
        if value in values:
            return value
        raise RecordDecodeError(where, f"field {field!r}: expected one of {values!r}, got {value!r}")

    return decode


_SCALARS: dict[str, Decoder] = {
    "int": _int,
    "str": _str,
    "bool": _bool,
    "Message": _message,
    "Mapping[str, JSONValue]": _mapping,
}
_TUPLE = re.compile(r"tuple\[(.+), \.\.\.\]")
_LITERAL = re.compile(r"Literal\[(.+)\]")


def _decoder_for(annotation: str) -> Decoder:
    """The decoder for a field annotation, as written in the record class (string annotations)."""
    annotation = annotation.strip()
    if annotation.endswith(" | None"):
        return _optional(_decoder_for(annotation[: -len(" | None")]))
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if m := _TUPLE.fullmatch(annotation):
        return _tuple_of(_decoder_for(m.group(1)))
    if m := _LITERAL.fullmatch(annotation):
        values = ast.literal_eval(f"({m.group(1)},)")
        return _literal(tuple(str(v) for v in values))
    raise TypeError(f"the session codec cannot handle a field annotated {annotation!r}")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    decode: Decoder
    required: bool
    default: object


@dataclass(frozen=True, slots=True)
class _Codec:
    cls: type
    type_name: str
    fields: tuple[_Field, ...]


_BY_TYPE: dict[str, _Codec] = {}
_BY_CLASS: dict[type, _Codec] = {}
_RESERVED = ("seq", "type", "ts")


def record_type(name: str) -> Callable[[type[_T]], type[_T]]:
    """Register a frozen dataclass as the record written with ``"type": name``.

    Its fields must start with ``seq: int`` and ``ts: str | None``; every other
    field is written under its own name. Field annotations are read as written
    (``int``, ``str | None``, ``tuple[Message, ...]``, ``Mapping[str, JSONValue]``,
    ``Literal["a", "b"]``...); anything else fails at import time, not at run time.
    """

    def register(cls: type[_T]) -> type[_T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be a dataclass to be a session record")
        fields = []
        for f in dataclasses.fields(cls):
            annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            default = (
                f.default
                if f.default is not dataclasses.MISSING
                else f.default_factory()
                if f.default_factory is not dataclasses.MISSING
                else None
            )
            fields.append(_Field(f.name, _decoder_for(annotation), not has_default, default))
        names = [f.name for f in fields]
        if names[:2] != ["seq", "ts"] or "type" in names:
            raise TypeError(
                f"{cls.__name__}: a record's fields start with seq and ts and never include 'type'"
            )
        if name in _BY_TYPE:
            raise TypeError(f"record type {name!r} is registered twice")
        codec = _Codec(cls, name, tuple(fields))
        _BY_TYPE[name] = codec
        _BY_CLASS[cls] = codec
        return cls

    return register


def registered_types() -> tuple[str, ...]:
    """The record types this version reads and writes, sorted."""
    return tuple(sorted(_BY_TYPE))


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownRecord:
    """A record whose type this version does not know (written by a newer version), kept verbatim."""

    seq: int | None
    """Its sequence number, when it has a readable one."""
    type: str
    """Its ``type`` field."""
    data: Mapping[str, JSONValue]
    """The whole record as stored."""


def _encode_value(value: object) -> JSONValue:
    if isinstance(value, Message):
        return encode_message(value)
    if isinstance(value, tuple | list):
        return [_encode_value(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value  # type: ignore[return-value]  # scalars, checked by the record's annotations


def encode_record(record: object) -> dict[str, JSONValue]:
    """A registered record (or an `UnknownRecord`, written back verbatim) as JSON-ready data.

    Keys come in a fixed order (``seq``, ``type``, ``ts``, then the fields in
    declaration order) and fields equal to their default are left out.
    """
    if isinstance(record, UnknownRecord):
        return dict(record.data)
    codec = _BY_CLASS.get(type(record))
    if codec is None:
        raise TypeError(f"{type(record).__name__} is not a registered session record")
    out: dict[str, JSONValue] = {"seq": getattr(record, "seq"), "type": codec.type_name}  # noqa: B009
    for f in codec.fields:
        if f.name == "seq":
            continue
        value = getattr(record, f.name)
        if f.name != "ts" and not f.required and value == f.default:
            continue
        out[f.name] = _encode_value(value)
    return out


def decode_record(data: Mapping[str, JSONValue], *, where: str) -> object:
    """Rebuild a record from stored data (already upcast to `SCHEMA_VERSION`).

    Returns:
        An instance of the registered class for ``data["type"]``, or an
        `UnknownRecord` when the type is not registered. Unknown *fields* of a
        known type are ignored (a newer version may add some).

    Raises:
        RecordDecodeError: a field is missing or has the wrong type.
    """
    kind = data.get("type")
    if kind == "message":
        return _decode_message_record(data, where)
    if not isinstance(kind, str):
        raise RecordDecodeError(where, "the record has no string 'type'")
    codec = _BY_TYPE.get(kind)
    if codec is None:
        seq = data.get("seq")
        return UnknownRecord(
            seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None, type=kind, data=data
        )
    kwargs: dict[str, object] = {}
    for f in codec.fields:
        if f.name in data:
            kwargs[f.name] = f.decode(data[f.name], where, f.name)
        elif f.required:
            raise RecordDecodeError(where, f"a {kind!r} record needs the field {f.name!r}")
    try:
        return codec.cls(**kwargs)
    except (ValueError, TypeError) as exc:  # a record's own __post_init__ checks
        raise RecordDecodeError(where, f"invalid {kind!r} record: {exc}") from None


def _decode_message_record(data: Mapping[str, JSONValue], where: str) -> object:
    # The one record type a long session holds thousands of: decoded without the
    # generic field loop (restore of 100,000 messages must stay well under 2 s).
    seq, ts = data.get("seq"), data.get("ts")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise RecordDecodeError(where, "a 'message' record needs an integer 'seq'")
    if ts is not None and not isinstance(ts, str):
        raise _bad(where, "ts", "a string", ts)
    if "message" not in data:
        raise RecordDecodeError(where, "a 'message' record needs the field 'message'")
    codec = _BY_TYPE["message"]
    return codec.cls(seq=seq, ts=ts, message=decode_message(data["message"], where=where))


# ----------------------------------------------------------------------------- versions


def detect_version(first: Mapping[str, JSONValue]) -> int | None:
    """The schema version of a log, from its first readable record.

    Returns the header's ``schema_version``; ``0`` when the record is a version-0
    (Kimi-style) line, recognised by a ``role`` and no ``type``; None when the
    record is neither (the header is missing or damaged).
    """
    if first.get("type") == "header":
        version = first.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
            return version
        return None
    if "role" in first and "type" not in first:
        return 0
    return None


Upcaster = Callable[[Iterable[tuple[str, dict[str, JSONValue]]]], Iterator[tuple[str, dict[str, JSONValue]]]]
"""Turns a stream of ``(where, data)`` records of version n into version n + 1."""

_V0_CHECKPOINT_MARKER = re.compile(r"\s*<system>\s*CHECKPOINT \d+\s*</system>\s*")


def _v0_content(value: object, dropped: list[JSONValue]) -> str | list[JSONValue] | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError(f"content must be a string or a list, got {type(value).__name__}")
    parts: list[JSONValue] = []
    for p in value:
        if not isinstance(p, dict):
            raise ValueError("a content part must be an object")
        kind = p.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": p.get("text", "")})
        elif kind == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str):
                raise ValueError("an image_url part needs image_url.url")
            parts.append({"type": "image", "url": url})
        else:
            # think parts (reasoning), audio...: not prompt content here; kept in metadata.
            dropped.append(p)
    return parts


def _v0_message(data: dict[str, JSONValue], prev_id: str | None) -> dict[str, JSONValue]:
    dropped: list[JSONValue] = []
    out: dict[str, JSONValue] = {
        "id": derive_id(prev_id, json.dumps(data, sort_keys=True, ensure_ascii=False)),
        "role": data["role"],
    }
    content = _v0_content(data.get("content"), dropped)
    if content is not None:
        out["content"] = content
    calls = data.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise ValueError("tool_calls must be a list")
        converted: list[JSONValue] = []
        for c in calls:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(c, dict) or not isinstance(fn, dict):
                raise ValueError("a tool call needs a function object")
            arguments = fn.get("arguments")
            converted.append({"id": c.get("id"), "name": fn.get("name"), "arguments": arguments or "{}"})
        out["tool_calls"] = converted
    for key in ("tool_call_id", "name"):
        if data.get(key) is not None:
            out[key] = data[key]
    if dropped:
        out["metadata"] = {"v0_parts": dropped}
    return out


def _is_checkpoint_marker(data: Mapping[str, JSONValue]) -> bool:
    content = data.get("content")
    if data.get("role") != "user" or not isinstance(content, list) or len(content) != 1:
        return False
    part = content[0]
    return (
        isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
        and _V0_CHECKPOINT_MARKER.fullmatch(str(part["text"])) is not None
    )


def _upcast_v0(
    stream: Iterable[tuple[str, dict[str, JSONValue]]],
) -> Iterator[tuple[str, dict[str, JSONValue]]]:
    """Version 0 (Kimi CLI's context file) to version 1.

    - A header is made up: ``session_id`` is ``v0-`` plus a hash of the first
      line, so upcasting the same file twice gives the same session.
    - Messages get ids chained from their content and the previous id
      (`derive_id`), so every restore of the file sees the same ids.
    - ``_usage`` becomes a usage record (``token_count`` as the prompt tokens of
      everything before it); ``_checkpoint`` a checkpoint record with the same id.
    - Kimi's ``<system>CHECKPOINT n</system>`` user messages are dropped: they
      only told the model about checkpoints, which here are records and never
      eat context. Think and audio parts go to ``metadata["v0_parts"]``.
    - A line that cannot be converted is passed on unchanged, and the decoder
      reports it; an unknown ``_role`` becomes an unknown record, kept verbatim.
    """
    seq = 0
    header_done = False
    prev_id: str | None = None
    messages = 0
    for where, data in stream:
        if not header_done:
            digest = hashlib.blake2b(json.dumps(data, sort_keys=True).encode("utf-8"), digest_size=8)
            yield (
                where,
                {
                    "seq": 0,
                    "type": "header",
                    "ts": None,
                    "schema_version": SCHEMA_VERSION,
                    "session_id": "v0-" + digest.hexdigest(),
                    "created_by": "upcast from schema 0 (Kimi CLI context file)",
                },
            )
            header_done = True
        role = data.get("role")
        seq += 1
        base: dict[str, JSONValue] = {"seq": seq, "ts": None}
        if role == "_usage":
            yield (
                where,
                {**base, "type": "usage", "prompt_tokens": data.get("token_count"), "view_len": messages},
            )
        elif role == "_checkpoint":
            yield where, {**base, "type": "checkpoint", "id": data.get("id"), "view_len": messages}
        elif role == "_system_prompt":
            msg = {"role": "system", "content": data.get("content")}
            converted = _v0_message(msg, prev_id)
            prev_id = str(converted["id"])
            messages += 1
            yield where, {**base, "type": "message", "message": converted}
        elif isinstance(role, str) and role in ROLES:
            if _is_checkpoint_marker(data):
                seq -= 1
                continue
            try:
                converted = _v0_message(data, prev_id)
            except (ValueError, TypeError, AttributeError) as exc:
                # Fails to decode (so the restore warns, naming the line) and keeps the line itself.
                bad: dict[str, JSONValue] = {"unconvertible_v0_line": str(exc), "v0": data}
                yield where, {**base, "type": "message", "message": bad}
                continue
            prev_id = str(converted["id"])
            messages += 1
            yield where, {**base, "type": "message", "message": converted}
        else:
            yield where, {**base, "type": "v0_record", "record": data}


UPCASTERS: Final[dict[int, Upcaster]] = {0: _upcast_v0}
"""``UPCASTERS[n]`` turns version-n records into version n + 1."""


def upcast(
    stream: Iterable[tuple[str, dict[str, JSONValue]]], *, from_version: int
) -> Iterable[tuple[str, dict[str, JSONValue]]]:
    """Bring a stream of stored records from ``from_version`` up to `SCHEMA_VERSION`, lazily."""
    for version in range(from_version, SCHEMA_VERSION):
        stream = UPCASTERS[version](stream)
    return stream
