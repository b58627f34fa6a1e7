"""Helpers both provider formats share: input checks that name the message and field, and chain ids."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from typing import NoReturn

from ..exceptions import InvalidMessageError
from ..messages import JSONValue, TextPart

__all__ = [
    "ANTHROPIC_FILE_ID_URL",
    "OPENAI_FILE_ID_URL",
    "at",
    "audio_media_type",
    "canonical_json",
    "fail",
    "json_value",
    "only_keys",
    "text_data_url",
    "type_name",
]

OPENAI_FILE_ID_URL = "openai-file-id:"
"""How an image or file uploaded to OpenAI (given by ``file_id``) stands as a part's URL."""
ANTHROPIC_FILE_ID_URL = "anthropic-file-id:"
"""How a file uploaded to Anthropic's Files API (a ``file`` source) stands as a part's URL."""


def type_name(value: object) -> str:
    """The JSON name of a value's type, for error messages (``null``, ``object``, ``array``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def fail(message: str, *, index: int | None, field: str | None = None) -> NoReturn:
    """Raise `InvalidMessageError` at ``index``/``field``."""
    raise InvalidMessageError(message, index=index, field=field)


def at(error: InvalidMessageError, *, index: int | None, field: str | None = None) -> InvalidMessageError:
    """Return ``error`` (raised by a `Message` constructor, which knows no index) placed at ``index``/``field``.

    ``field`` replaces the error's own field when given (a `TextPart` says
    ``text``; the caller knows it was ``content[2].text``).
    """
    text = str(error)
    if error.index is None and error.field is not None:
        prefix = f"field {error.field!r}: "
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return InvalidMessageError(text, index=index, field=field or error.field)


def only_keys(
    keys: Iterable[object], allowed: Collection[str], *, index: int | None, field: str | None = None
) -> None:
    """Reject keys (of a mapping) agentcontext does not model, so nothing is dropped silently."""
    for key in keys:
        if key not in allowed:
            expected = ", ".join(repr(k) for k in allowed)
            fail(
                f"unexpected key {key!r}; agentcontext keeps only {expected} here and will not drop data "
                "silently: remove the key before converting",
                index=index,
                field=field,
            )


def text_part_in(part: Mapping[str, object], *, index: int | None, field: str, noun: str) -> TextPart:
    """A ``{"type": "text", "text": ...}`` part (OpenAI) or block (Anthropic), checked; errors name index and field."""
    only_keys(part, ("type", "text"), index=index, field=field)
    text = part.get("text")
    if not isinstance(text, str):
        fail(
            f"a text {noun} needs 'text' as a string, got {type_name(text)}",
            index=index,
            field=f"{field}.text",
        )
    try:
        return TextPart(text=text)
    except InvalidMessageError as e:
        raise at(e, index=index, field=f"{field}.text") from None


def json_value(value: object, *, index: int | None, field: str) -> JSONValue:
    """Check that ``value`` is plain JSON data and return a deep copy of it (tuples become lists).

    The copy means a message never shares mutable objects with the caller's
    dicts, in either direction.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [json_value(v, index=index, field=f"{field}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, JSONValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                fail(f"object keys must be strings, got {type_name(key)} ({key!r})", index=index, field=field)
            out[key] = json_value(item, index=index, field=f"{field}.{key}")
        return out
    fail(
        f"expected JSON data (null, boolean, number, string, array, object), got {type_name(value)}",
        index=index,
        field=field,
    )


def canonical_json(value: object) -> str:
    """Deterministic JSON text of already-checked wire data: the payload of a chain id.

    Keys are sorted so two dicts with the same content give the same id
    whatever their key order.
    """
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_plain)


def _plain(value: object) -> object:
    # Only reached for Mapping types json does not know (MappingProxyType, TypedDict subclasses...).
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON data: {type(value).__name__}")


def audio_media_type(audio_format: str) -> str:
    """The media type of audio an OpenAI ``input_audio`` part names by format (``mp3`` is ``audio/mpeg``)."""
    return {"wav": "audio/wav", "mp3": "audio/mpeg"}.get(audio_format, f"audio/{audio_format}")


def text_data_url(text: str, media_type: str | None) -> str:
    """A plain (not base64) ``data:`` URL holding ``text``, as an Anthropic text document stands.

    Raises:
        InvalidMessageError: ``text`` holds a lone UTF-16 surrogate (no index: the caller places it).
    """
    try:
        return f"data:{media_type or 'text/plain'},{urllib.parse.quote(text, safe='')}"
    except UnicodeEncodeError:
        raise InvalidMessageError(
            "a text document holds a lone UTF-16 surrogate, which no provider accepts; decode your input "
            "with errors='replace' or fix its source"
        ) from None
