"""Canonical messages back to Responses API items: the way back of `agentcontext.formats.responses`.

A message still carrying the id it got at conversion is written back as
exactly its items (`_refilled`); one the engine changed is written from its
canonical fields (`_rewritten`). `_plan` decides which is which, including the
hosted calls whose two sides must change together. The module docstring of
`agentcontext.formats.responses` describes the rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from ..exceptions import InvalidMessageError
from ..invariants import LAYOUT_KEY, ensure_valid
from ..messages import ContentPart, FilePart, ImagePart, JSONValue, Message, TextPart, ToolCall
from ._common import OPENAI_FILE_ID_URL, at, fail

__all__ = [
    "CALL_FIELD",
    "FILE_ID_URL",
    "PAIRED_CALLS",
    "JSONPath",
    "ResponseItem",
    "checked",
    "fragment",
    "items_of",
]

ResponseItem: TypeAlias = dict[str, JSONValue]
"""One Responses API input item, as `agentcontext.formats.responses.from_messages` writes it (plain JSON data)."""

# Hosted calls that wait for an output the client sends back, on the same call_id.
PAIRED_CALLS: Mapping[str, str] = {
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
}
CALL_FIELD = {"function_call": "arguments", "custom_tool_call": "input"}
"""The field that holds what the model wrote, by call type."""

FILE_ID_URL = OPENAI_FILE_ID_URL
"""The URL of an `ImagePart` standing for an ``input_image`` given by ``file_id`` (counted as an image)."""

JSONPath: TypeAlias = list[str | int]


@dataclass
class _Plan:
    """How each message goes back: the kind of every call, and which messages are rewritten."""

    kinds: dict[str, str]
    """Call id -> the item type of its call."""
    plain: set[int]
    """Indices of the messages written from their canonical fields."""
    dissolved: set[str]
    """Ids of hosted calls written as text, with their outputs."""


def checked(messages: Iterable[Message], validate: bool) -> tuple[list[Message], _Plan]:
    msgs = list(messages)
    for i, m in enumerate(msgs):
        if not isinstance(m, Message):
            fail(f"expected an agentcontext Message, got {type(m).__name__}", index=i)
    if validate:
        ensure_valid(
            msgs,
            ignore=("first_not_user", "system_not_first"),
            target="the OpenAI Responses API",
            hint="Repair the conversation (the engine does), or pass validate=False to convert it anyway.",
        )
    return msgs, _plan(msgs)


def items_of(m: Message, index: int, plan: _Plan) -> list[ResponseItem]:
    return _placed(m, index, plan) if index in plan.plain else _refilled(m, index)


def fragment(m: Message, index: int, plan: _Plan, cache: MutableMapping[str, str]) -> str:
    """The JSON text of a message's items without the brackets, from ``cache`` when it is unchanged."""
    if index in plan.plain:
        return json.dumps(_placed(m, index, plan), ensure_ascii=False)[1:-1]
    text = cache.get(m.id)
    if text is None:
        text = cache[m.id] = json.dumps(_refilled(m, index), ensure_ascii=False)[1:-1]
    return text


def _layout(m: Message) -> Mapping[str, JSONValue] | None:
    layout = m.metadata.get(LAYOUT_KEY)
    # dict first: the common case, without an ABC check per message
    return layout if type(layout) is dict or isinstance(layout, Mapping) else None


def _entries(m: Message) -> list[Mapping[str, JSONValue]]:
    layout = _layout(m)
    items = layout.get("items") if layout is not None else None
    if not isinstance(items, list):
        return []
    return [e for e in items if isinstance(e, Mapping)]


def _intact(m: Message) -> bool:
    """The message still is what `to_messages` made (ids name content; any change gives a new id)."""
    layout = _layout(m)
    return layout is not None and layout.get("id") == m.id


def _plan(msgs: Sequence[Message]) -> _Plan:
    kinds: dict[str, str] = {}
    caller: dict[str, int] = {}
    answers: dict[str, list[int]] = {}
    plain: set[int] = set()
    for i, m in enumerate(msgs):
        if not _intact(m):
            plain.add(i)
        if m.tool_calls:
            calls = [e for e in _entries(m) if e.get("as") == "call"]
            types = [_item_type(e) for e in calls] if len(calls) == len(m.tool_calls) else []
            for k, call in enumerate(m.tool_calls):
                kinds[call.id] = types[k] if types else "function_call"
                caller[call.id] = i
        elif m.role == "tool" and m.tool_call_id is not None:
            answers.setdefault(m.tool_call_id, []).append(i)
    hosted = [cid for cid, kind in kinds.items() if kind in PAIRED_CALLS]
    dissolved: set[str] = set()
    changed = bool(hosted)
    while changed:  # a rewritten message rewrites the other side of its hosted pairs, and so on
        changed = False
        for cid in hosted:
            if cid in dissolved:
                continue
            sides = [caller[cid], *answers.get(cid, ())]
            if any(j in plain for j in sides):
                dissolved.add(cid)
                plain.update(sides)
                changed = True
    return _Plan(kinds=kinds, plain=plain, dissolved=dissolved)


def _item_type(entry: Mapping[str, JSONValue]) -> str:
    item = entry.get("item")
    kind = item.get("type") if isinstance(item, Mapping) else None
    return kind if isinstance(kind, str) else "message"


# ------------------------------------------------------------------ unchanged messages: their items


class _Cursor:
    """Walks a message's content parts and tool calls as its layout consumes them."""

    def __init__(self, m: Message, index: int) -> None:
        content = m.content
        self.parts: list[ContentPart] = (
            [TextPart(text=content)] if isinstance(content, str) else list(content or ())
        )
        self.calls = list(m.tool_calls)
        self.index = index
        self.p = self.c = 0

    def mismatch(self) -> InvalidMessageError:
        return InvalidMessageError(
            f"metadata[{LAYOUT_KEY!r}] does not match the message's content and tool calls; it was edited "
            "by hand. Remove it (the message is then written from its fields) or restore the message",
            index=self.index,
            field=f"metadata.{LAYOUT_KEY}",
        )

    def text(self) -> str:
        part = self.parts[self.p] if self.p < len(self.parts) else None
        if not isinstance(part, TextPart):
            raise self.mismatch()
        self.p += 1
        return part.text

    def image(self) -> str:
        part = self.parts[self.p] if self.p < len(self.parts) else None
        if not isinstance(part, ImagePart):
            raise self.mismatch()
        self.p += 1
        return part.url

    def file(self) -> str:
        part = self.parts[self.p] if self.p < len(self.parts) else None
        if not isinstance(part, FilePart):
            raise self.mismatch()
        self.p += 1
        return part.url

    def call(self) -> ToolCall:
        if self.c >= len(self.calls):
            raise self.mismatch()
        self.c += 1
        return self.calls[self.c - 1]

    def done(self) -> None:
        if self.p != len(self.parts) or self.c != len(self.calls):
            raise self.mismatch()


def _copy(value: JSONValue) -> JSONValue:
    """A deep copy of JSON data held in metadata (callers must not share the message's objects)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _refilled(m: Message, index: int) -> list[ResponseItem]:
    cursor = _Cursor(m, index)
    out: list[ResponseItem] = []
    for entry in _entries(m):
        kind = entry.get("as")
        residue = entry.get("item")
        item: ResponseItem = cast(ResponseItem, _copy(residue)) if isinstance(residue, dict) else {}
        if kind == "message":
            spec = entry.get("content")
            item["content"] = cursor.text() if spec == "str" else _parts_out(spec, cursor)
        elif kind == "call":
            _refill_call(item, cursor.call())
        elif kind == "output":
            _refill_output(item, entry.get("output"), cursor, m)
        elif kind == "opaque":
            item = cast(ResponseItem, _unrender(entry.get("pulled"), cursor))
        elif kind != "reasoning":
            raise cursor.mismatch()
        out.append(item)
    cursor.done()
    return out


def _refill_call(item: ResponseItem, call: ToolCall) -> None:
    kind = item.get("type")
    if kind in CALL_FIELD:
        item.update({"call_id": call.id, "name": call.name, CALL_FIELD[kind]: call.arguments})
        return
    body = json.loads(call.arguments)
    for key in item:
        if key == "call_id":
            item[key] = call.id
        elif key != "type":
            item[key] = body[key]


def _refill_output(item: ResponseItem, spec: JSONValue, cursor: _Cursor, m: Message) -> None:
    if isinstance(spec, list) and len(spec) == 2 and spec[0] == "opaque":
        body = _unrender(spec[1], cursor)
        for key in item:
            item[key] = m.tool_call_id if key == "call_id" else cast(dict[str, JSONValue], body)[key]
        return
    item["call_id"] = m.tool_call_id
    item["output"] = cursor.text() if spec == "str" else _parts_out(spec, cursor)


def _parts_out(spec: JSONValue, cursor: _Cursor) -> JSONValue:
    if not isinstance(spec, list):
        raise cursor.mismatch()
    parts: list[JSONValue] = []
    for entry in spec:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise cursor.mismatch()
        how, residue = entry
        if how == "opaque":
            parts.append(_unrender(residue, cursor))
            continue
        part = cast(dict[str, JSONValue], _copy(residue)) if isinstance(residue, dict) else None
        if part is None:
            raise cursor.mismatch()
        if how == "image":
            part["image_url"] = cursor.image()
        elif how == "image_file":
            part["file_id"] = cursor.image()[len(FILE_ID_URL) :]
        elif isinstance(how, str) and how.startswith("file:"):
            source, url = how[5:], cursor.file()
            if source == "file_id":
                part[source] = url[len(FILE_ID_URL) :]
            elif source == "file_data_bare":
                part["file_data"] = url.split(",", 1)[1]
            else:
                part[source] = url
        else:
            part[cast(str, how)] = cursor.text()
        parts.append(part)
    return parts


def _unrender(pulled: JSONValue, cursor: _Cursor) -> JSONValue:
    """The JSON value `_render` turned into a text part (and image parts), with what it left out put back."""
    value: JSONValue = json.loads(cursor.text())
    if not isinstance(pulled, Mapping):
        raise cursor.mismatch()
    images, files = pulled.get("images"), pulled.get("files")
    for path, how in cast(list[list[JSONValue]], images or []):
        url = cursor.image()
        prefix = "data:image/png;base64,"
        value = _set(value, cast(JSONPath, path), url[len(prefix) :] if how == "png" else url)
    for path, data in cast(list[list[JSONValue]], files or []):
        value = _set(value, cast(JSONPath, path), data)
    return value


def _set(value: JSONValue, path: JSONPath, new: JSONValue) -> JSONValue:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and isinstance(head, str):
        value[head] = _set(value[head], rest, new)
    elif isinstance(value, list) and isinstance(head, int):
        value[head] = _set(value[head], rest, new)
    return value


# ------------------------------------------------------------------ changed messages: their fields


def _placed(m: Message, index: int, plan: _Plan) -> list[ResponseItem]:
    """`_rewritten`, its errors naming the message."""
    try:
        return _rewritten(m, plan)
    except InvalidMessageError as e:
        if e.index is not None:
            raise
        raise at(e, index=index) from None


def _rewritten(m: Message, plan: _Plan) -> list[ResponseItem]:
    if m.role == "assistant":
        return _assistant_out(m, plan)
    if m.role == "tool":
        return [_tool_out(m, plan)]
    role: str = m.role
    entries = _entries(m)
    if role == "system" and entries:
        residue = entries[0].get("item")
        if isinstance(residue, Mapping) and residue.get("role") == "developer":
            role = "developer"
    return [{"role": role, "content": _content_out(m)}]


def _content_out(m: Message) -> JSONValue:
    content = m.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[JSONValue] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "input_text", "text": part.text})
        elif isinstance(part, FilePart):
            parts.append(_file_out(part))
        elif part.url.startswith(FILE_ID_URL):
            parts.append(
                {
                    "type": "input_image",
                    "file_id": part.url[len(FILE_ID_URL) :],
                    "detail": part.detail or "auto",
                }
            )
        else:
            parts.append({"type": "input_image", "image_url": part.url, "detail": part.detail or "auto"})
    return parts


def _assistant_out(m: Message, plan: _Plan) -> list[ResponseItem]:
    texts = [m.text] if m.text else []
    calls: list[ResponseItem] = []
    for call in m.tool_calls:
        kind = plan.kinds.get(call.id, "function_call")
        if kind == "custom_tool_call":
            calls.append({"type": kind, "call_id": call.id, "name": call.name, "input": call.arguments})
        elif kind in PAIRED_CALLS:
            texts.append(f"[{kind} {call.id}: {call.arguments}]")
        else:
            calls.append(
                {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments}
            )
    out: list[ResponseItem] = []
    if texts or not calls:
        out.append({"role": "assistant", "content": "\n".join(texts)})
    return out + calls


def _tool_out(m: Message, plan: _Plan) -> ResponseItem:
    call_id = cast(str, m.tool_call_id)
    kind = plan.kinds.get(call_id)
    if call_id in plan.dissolved:
        head = f"[{kind} output for {call_id}]"
        content = _content_out(m)
        if isinstance(content, str):
            return {"role": "user", "content": f"{head}\n{content}" if content else head}
        return {
            "role": "user",
            "content": [{"type": "input_text", "text": head}, *cast(list[JSONValue], content)],
        }
    out_type = "custom_tool_call_output" if kind == "custom_tool_call" else "function_call_output"
    entries = _entries(m)
    residue = entries[0].get("item") if len(entries) == 1 else None
    item: ResponseItem = (
        cast(ResponseItem, _copy(cast(JSONValue, residue)))
        if isinstance(residue, dict) and residue.get("type") == out_type
        else {"type": out_type, "call_id": None, "output": None}
    )
    item["call_id"] = call_id
    item["output"] = _content_out(m)
    return item


def _file_out(part: FilePart) -> JSONValue:
    url = part.url
    if url.startswith(FILE_ID_URL):
        file: dict[str, JSONValue] = {"type": "input_file", "file_id": url[len(FILE_ID_URL) :]}
    elif url.startswith("data:"):
        file = {"type": "input_file", "file_data": url}
    elif url.startswith(("http://", "https://")):
        file = {"type": "input_file", "file_url": url}
    else:
        fail(
            f"the Responses API takes a file as data, a URL or an OpenAI file id, not {url[:60]!r}",
            index=None,
            field="content",
        )
    if part.name is not None:
        file["filename"] = part.name
    return file
