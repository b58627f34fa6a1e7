"""OpenAI Responses API input items to and from canonical `Message` objects, losslessly.

>>> from agentcontext.formats import responses
>>> msgs = responses.to_messages([
...     {"role": "user", "content": "What is in /tmp?"},
...     {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
...     {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "ls", "arguments": "{}"},
...     {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
... ])
>>> [(m.role, m.text, [c.name for c in m.tool_calls]) for m in msgs]
[('user', 'What is in /tmp?', []), ('assistant', '', ['ls']), ('tool', 'a.txt', [])]
>>> responses.from_messages(msgs)[1]["type"]
'reasoning'

**Units.** A Responses conversation is a flat list of items; agentcontext's
strategies work on messages and keep two things whole: a message, and an
assistant's tool calls with their results. So items are grouped into
canonical messages ("units") such that everything the API needs together
lands in one message or one call/result pair:

- a ``message`` item from the user, the system or the developer is one
  message (``developer`` becomes a system message and is written back as
  ``developer``);
- a *model run*, the consecutive items one model response produced
  (``reasoning``, assistant ``message``, ``function_call``,
  ``custom_tool_call``, and hosted items such as ``web_search_call`` or
  ``computer_call``), is one assistant message: its text is the messages'
  text, its `ToolCall`s are the calls. A ``reasoning`` item therefore always
  travels with the items that follow it (the API rejects one without the
  other: "Item 'rs_...' of type 'reasoning' was provided without its required
  following item", and "Item 'fc_...' was provided without its required
  'reasoning' item");
- ``function_call_output`` and ``custom_tool_call_output`` are tool messages
  paired with their call on ``call_id``, like Chat Completions tool results.
  The hosted calls that wait for a client output (``computer_call``,
  ``local_shell_call``, ``shell_call``, ``apply_patch_call``) are paired the
  same way with their ``*_output`` items, so no strategy separates them;
- items that belong to neither (``compaction``, ``item_reference``,
  ``mcp_approval_response``, ``program_output``...) are assistant messages of
  their own.

**Files.** An ``input_file`` part (in a message or a tool output) is a
`FilePart`: its URL is the ``file_data`` (a ``data:`` URL), the ``file_url``,
or ``openai-file-id:<file_id>``, its name the ``filename``; it is counted by
what it holds (`agentcontext.tokens.file_tokens`: a PDF by its pages).

**Counted, never edited.** What agentcontext does not model (a hosted item, a
computer screenshot output) is carried as the item's JSON text (sorted keys) in
the message's content, so the counter counts it and a summarizer can read it;
image URLs inside become image parts (counted as images; an image given by
``file_id`` is an image part whose URL is ``openai-file-id:<id>``, written back
as the file id) and ``file_data`` stays out of the text (the text notes its
size). Reasoning items
are not counted: their encrypted content is not text the model reads back, and
the API drops reasoning from earlier turns. Everything else of every item
(ids, ``status``, annotations, ``phase``, ``encrypted_content``...) is kept in
``metadata["responses"]``: the unit's items with the modelled fields set to
``None``, plus the message's id at conversion.

**The way back.** `from_messages` writes a message whose id is still the one it
got at conversion (the engine did not change it) back as exactly its items.
A message the engine changed (a masked tool output, shortened arguments, a
repaired message) is written from its canonical fields, and one it wrote (a
summary, a note, a stub result) as a plain message or output: tool outputs
keep their item (the new output filled in); a changed assistant message
becomes an assistant ``message`` plus its ``function_call`` and
``custom_tool_call`` items *without* their server ids and *without* its
reasoning items (the only change the API accepts for a reasoning group: its
encrypted content belongs to the original items). A hosted call and its output
can only travel together and unchanged: when either was changed (or the output
was stubbed), both become plain text, the call in the assistant message and
the output as a user message (screenshots kept as images). The engine's report
lists every such change.

**Ids.** A unit's id is ``derive_id(previous id, canonical JSON of its items)``:
converting the same items twice gives the same ids, and a list that only grew
keeps the ids of its prefix (what the engine's O(new) path keys on), up to a
model run at its very end, which the next items of the same response continue.
`ResponsesConverter` converts a growing list a batch at a time;
`from_messages` takes a ``cache`` so that writing back a growing history costs
one lookup per unchanged message.

**Bad input.** A malformed item raises `InvalidMessageError` naming the item's
index and field (a missing or empty ``call_id``, ``arguments`` that are not a
string...). An item type this version does not know raises too, unless
``unknown="keep"``: it is then carried whole as an opaque item with an
`ConversionWarning`. A reasoning item followed by no item of its response is kept
(with a `ConversionWarning`) and reported by `agentcontext.check_messages` as
``dangling_reasoning``; the engine's repair puts a marker in its place (the
reasoning item is then not sent).
"""

from __future__ import annotations

import json
import mimetypes
import warnings
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, cast

from ..exceptions import ConversionWarning, InvalidMessageError
from ..invariants import LAYOUT_KEY
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
from ._common import at, canonical_json, fail, json_value, type_name
from ._responses_back import (
    CALL_FIELD,
    FILE_ID_URL,
    PAIRED_CALLS,
    JSONPath,
    ResponseItem,
    checked,
    fragment,
    items_of,
)

__all__ = [
    "LAYOUT_KEY",
    "ResponseItem",
    "ResponsesConverter",
    "from_messages",
    "items_by_message",
    "to_messages",
]

Unknown: TypeAlias = Literal["raise", "keep"]


_PAIRED_OUTPUTS = frozenset(PAIRED_CALLS.values())
# What a model response holds besides reasoning, messages, calls and paired calls.
_MODEL_OPAQUE = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
        "program",
    }
)
# Input items that stand on their own.
_CLIENT_OPAQUE = frozenset(
    {
        "compaction",
        "compaction_trigger",
        "item_reference",
        "mcp_approval_response",
        "tool_search_output",
        "program_output",
        "additional_tools",
    }
)
_OUTPUT_OF = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}
_MESSAGE_ROLES: Mapping[str, Role] = {
    "user": "user",
    "system": "system",
    "developer": "system",
    "assistant": "assistant",
}
_DETAILS = ("auto", "low", "high")
_KNOWN = sorted(
    {"message", "reasoning", *CALL_FIELD, *_OUTPUT_OF, *PAIRED_CALLS, *_PAIRED_OUTPUTS}
    | _MODEL_OPAQUE
    | _CLIENT_OPAQUE
)

# ----------------------------------------------------------------------------- items -> canonical


@dataclass
class _Unit:
    """The items of one canonical message being built, and what they contribute to it."""

    role: Role
    items: list[JSONValue] = field(default_factory=list)
    """The items as given (checked JSON copies): the id's payload."""
    entries: list[JSONValue] = field(default_factory=list)
    """The layout: each item with its modelled fields set to None, and how to refill them."""
    parts: list[ContentPart] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    text_only: bool = False
    """The unit is one message item whose content is a string: the content stays a string."""
    first_index: int | None = None
    model_items: int = 0
    """Items that are not reasoning (a run with none is a dangling reasoning item)."""


class ResponsesConverter:
    """Converts a growing list of Responses items, a batch at a time, to canonical messages.

    `to_messages` is this, fed once. An agent that appends items as they come
    (a session, a per-call filter) feeds each new batch: messages already made
    are never revisited, so a step costs O(new items). Only the last model run
    stays open (a later batch may continue it); `messages` includes it as it
    stands.

    Args:
        previous_id: the id of the message before the first item (chains the ids);
            None starts a conversation.
        unknown: what to do with an item type this version does not know:
            ``"raise"`` (default) or ``"keep"`` it whole as an opaque item, with an `ConversionWarning`.
        first_index: the index the first item has in the caller's list (for error messages).
    """

    def __init__(
        self, *, previous_id: str | None = None, unknown: Unknown = "raise", first_index: int = 0
    ) -> None:
        if unknown not in ("raise", "keep"):
            raise InvalidMessageError(f"unknown must be 'raise' or 'keep', got {unknown!r}")
        self._closed: list[Message] = []
        self._last_id = previous_id
        self._run: _Unit | None = None
        self._unknown: Unknown = unknown
        self._index = first_index
        self._failed: InvalidMessageError | None = None

    @property
    def closed(self) -> Sequence[Message]:
        """The messages no later item can change, in order (read-only: the converter's own list)."""
        return self._closed

    @property
    def items_fed(self) -> int:
        """How many items were fed so far."""
        return self._index

    def feed(self, items: Iterable[Mapping[str, object]]) -> None:
        """Convert the next items.

        Raises:
            InvalidMessageError: an item is malformed (names its index and field),
                or of an unknown type with ``unknown="raise"``. The converter
                then refuses further items: start a new one.
        """
        if self._failed is not None:
            raise InvalidMessageError(
                f"this converter stopped at a malformed item ({self._failed}); convert the corrected items "
                "with a new ResponsesConverter"
            )
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidMessageError(
                f"expected a list of Responses input items, got {type_name(items)}; "
                "wrap a single item in a list"
            )
        for item in items:
            try:
                self._feed_one(item, self._index)
            except InvalidMessageError as e:
                self._failed = e  # the open run may hold part of the item: refuse to go on from here
                raise
            self._index += 1

    def messages(self) -> list[Message]:
        """Every message so far: the closed ones, then the open model run as it stands."""
        if self._run is None:
            return list(self._closed)
        out = list(self._closed)
        previous = self._last_id
        for unit in _split_run(self._run):
            message = _build(unit, previous)
            out.append(message)
            previous = message.id
        return out

    def finish(self) -> list[Message]:
        """Close the open model run (nothing may continue it) and return every message."""
        self._close_run(final=True)
        return list(self._closed)

    # ------------------------------------------------------------------ one item

    def _feed_one(self, item: object, index: int) -> None:
        if not isinstance(item, Mapping):
            fail(f"expected an item object, got {type_name(item)}", index=index)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if not isinstance(kind, str):
            fail(
                f"an item needs a string 'type' (or a 'role' for a message), got {type_name(kind)}",
                index=index,
                field="type",
            )
        raw = json_value(item, index=index, field="item")
        d = cast(dict[str, JSONValue], raw)
        if kind == "message":
            role = _role_in(d, index)
            if role == "assistant":
                self._model(index, raw, lambda unit: _message_in(unit, d, index))
            else:
                self._client(_Unit(role=role), index, raw, lambda unit: _message_in(unit, d, index))
        elif kind == "reasoning":
            self._model(
                index, raw, lambda unit: unit.entries.append({"as": "reasoning", "item": raw}), counts=False
            )
        elif kind in CALL_FIELD:
            self._model(index, raw, lambda unit: _call_in(unit, d, kind, index))
        elif kind in PAIRED_CALLS:
            self._model(index, raw, lambda unit: _paired_call_in(unit, d, kind, index))
        elif kind in _OUTPUT_OF or kind in _PAIRED_OUTPUTS:
            unit = _Unit(role="tool")
            self._client(unit, index, raw, lambda unit: _output_in(unit, d, kind, index))
        elif kind in _MODEL_OPAQUE:
            self._model(index, raw, lambda unit: _opaque_in(unit, raw, index))
        elif kind in _CLIENT_OPAQUE:
            self._client(_Unit(role="assistant"), index, raw, lambda unit: _opaque_in(unit, raw, index))
        elif self._unknown == "keep":
            warnings.warn(
                f"item {index}: unknown item type {kind!r}; kept whole as an opaque item (counted as its JSON "
                "text, never changed)",
                ConversionWarning,
                stacklevel=4,
            )
            self._client(_Unit(role="assistant"), index, raw, lambda unit: _opaque_in(unit, raw, index))
        else:
            fail(
                f"unknown item type {kind!r}; agentcontext knows {', '.join(repr(k) for k in _KNOWN)}. "
                "Pass unknown='keep' to carry unknown items whole",
                index=index,
                field="type",
            )

    def _model(self, index: int, raw: JSONValue, add: _Adder, *, counts: bool = True) -> None:
        run = self._run
        if run is None:
            run = self._run = _Unit(role="assistant", first_index=index)
        run.items.append(raw)
        add(run)
        if counts:
            run.model_items += 1

    def _client(self, unit: _Unit, index: int, raw: JSONValue, add: _Adder) -> None:
        self._close_run(final=True)
        unit.first_index = index
        unit.items.append(raw)
        add(unit)
        if unit.role != "tool" and len(unit.entries) == 1:
            entry = unit.entries[0]
            unit.text_only = isinstance(entry, dict) and entry.get("content") == "str"
        self._append(unit)

    def _close_run(self, *, final: bool) -> None:
        run = self._run
        if run is None:
            return
        self._run = None
        for unit in _split_run(run):
            if unit.model_items == 0 and final:
                warnings.warn(
                    f"item {unit.first_index}: a reasoning item is followed by no item of its response; the API "
                    "rejects it ('provided without its required following item'). It is kept as a message of "
                    "its own, which check_messages reports as dangling_reasoning and the engine's repair "
                    "replaces with a marker",
                    ConversionWarning,
                    stacklevel=5,
                )
            self._append(unit)

    def _append(self, unit: _Unit) -> None:
        message = _build(unit, self._last_id)
        self._closed.append(message)
        self._last_id = message.id


_Adder: TypeAlias = Callable[[_Unit], None]


def _split_run(run: _Unit) -> list[_Unit]:
    """A model run, with reasoning items that no item follows split off into a unit of their own.

    The reasoning then stands alone (an empty assistant message the engine
    repairs), instead of dragging the rest of the run into the API's rejection.
    """
    entries = run.entries
    tail = len(entries)
    while (
        tail > 0
        and isinstance(entries[tail - 1], dict)
        and cast(dict[str, JSONValue], entries[tail - 1]).get("as") == "reasoning"
    ):
        tail -= 1
    if tail in (0, len(entries)):
        units = [run]
    else:
        first = run.first_index
        dangling = _Unit(
            role="assistant",
            items=run.items[tail:],
            entries=entries[tail:],
            first_index=None if first is None else first + tail,
        )
        units = [
            _Unit(
                role="assistant",
                items=run.items[:tail],
                entries=entries[:tail],
                parts=run.parts,
                calls=run.calls,
                first_index=first,
                model_items=run.model_items,
            ),
            dangling,
        ]
    for unit in units:
        # Set every time, not only when it holds: the open run is split again as it grows, and a run
        # that was one text message when `messages()` looked must not stay "text only" with a call added.
        entry = unit.entries[0] if len(unit.entries) == 1 else None
        unit.text_only = isinstance(entry, dict) and entry.get("content") == "str"
    return units


def _build(unit: _Unit, previous_id: str | None) -> Message:
    message_id = derive_id(previous_id, canonical_json(unit.items))
    content: str | tuple[ContentPart, ...] | None
    if unit.text_only and len(unit.parts) == 1 and isinstance(unit.parts[0], TextPart):
        content = unit.parts[0].text
    elif unit.parts:
        content = tuple(unit.parts)
    else:
        content = () if unit.role == "tool" else None  # an output that is an empty list of parts
    try:
        return Message(
            role=unit.role,
            content=content,
            tool_calls=tuple(unit.calls),
            tool_call_id=unit.tool_call_id,
            id=message_id,
            metadata={LAYOUT_KEY: {"id": message_id, "items": list(unit.entries)}},  # the open run grows
        )
    except InvalidMessageError as e:
        raise at(e, index=unit.first_index) from None


def _role_in(d: Mapping[str, JSONValue], index: int) -> Role:
    role = d.get("role")
    if not isinstance(role, str) or role not in _MESSAGE_ROLES:
        fail(
            f"a message's role must be 'user', 'system', 'developer' or 'assistant', got {role!r}",
            index=index,
            field="role",
        )
    return _MESSAGE_ROLES[role]


def _message_in(unit: _Unit, d: Mapping[str, JSONValue], index: int) -> None:
    content = d.get("content")
    residue = {**d, "content": None}
    if isinstance(content, str):
        unit.parts.append(_text_part(content, index, "content"))
        unit.entries.append({"as": "message", "item": residue, "content": "str"})
        return
    if not isinstance(content, list):
        fail(
            f"a message's content must be a string or a list of parts, got {type_name(content)}",
            index=index,
            field="content",
        )
    unit.entries.append(
        {"as": "message", "item": residue, "content": _parts_in(unit, content, index, "content")}
    )


def _parts_in(unit: _Unit, parts: list[JSONValue], index: int, where: str) -> list[JSONValue]:
    """Content parts to canonical parts; returns their layout (``[how, residue]`` per part)."""
    layout: list[JSONValue] = []
    for j, part in enumerate(parts):
        field_name = f"{where}[{j}]"
        if not isinstance(part, dict):
            fail(
                f"a content part must be an object with a 'type', got {type_name(part)}",
                index=index,
                field=field_name,
            )
        kind = part.get("type")
        key = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}.get(
            kind if isinstance(kind, str) else ""
        )
        if key is not None and isinstance(part.get(key), str):
            unit.parts.append(_text_part(cast(str, part[key]), index, f"{field_name}.{key}"))
            layout.append([key, {**part, key: None}])
        elif kind == "input_image" and (isinstance(part.get("image_url"), str) or _file_id_only(part)):
            by_id = not isinstance(part.get("image_url"), str)
            key = "file_id" if by_id else "image_url"
            url = FILE_ID_URL + cast(str, part["file_id"]) if by_id else cast(str, part["image_url"])
            detail = part.get("detail")
            try:
                image = ImagePart(
                    url=url,
                    detail=cast(
                        "Literal['auto', 'low', 'high'] | None", detail if detail in _DETAILS else None
                    ),
                )
            except InvalidMessageError as e:
                raise at(e, index=index, field=f"{field_name}.{key}") from None
            unit.parts.append(image)
            layout.append(["image_file" if by_id else "image", {**part, key: None}])
        elif kind == "input_file" and (source := _file_source(part)) is not None:
            value = cast(str, part[source])
            name = part.get("filename")
            how = source
            if source == "file_id":
                value = FILE_ID_URL + value
            elif source == "file_data" and not value.startswith("data:"):
                # Bare base64 (the API takes it too): a data: URL typed by the file's name, unwrapped on the way back.
                media = mimetypes.guess_type(name)[0] if isinstance(name, str) else None
                value, how = f"data:{media or 'application/octet-stream'};base64,{value}", "file_data_bare"
            try:
                file = FilePart(url=value, name=name if isinstance(name, str) else None)
            except InvalidMessageError as e:
                raise at(e, index=index, field=f"{field_name}.{source}") from None
            unit.parts.append(file)
            layout.append([f"file:{how}", {**part, source: None}])
        else:
            layout.append(["opaque", _render(unit, part, index, field_name)])
    return layout


def _file_source(part: Mapping[str, JSONValue]) -> str | None:
    """The one key an ``input_file`` part gives its file by (None: none, or more than one)."""
    given = [k for k in ("file_data", "file_id", "file_url") if part.get(k) is not None]
    return given[0] if len(given) == 1 and isinstance(part[given[0]], str) else None


def _file_id_only(part: Mapping[str, JSONValue]) -> bool:
    return isinstance(part.get("file_id"), str) and part.get("image_url") is None


def _text_part(text: str, index: int, where: str) -> TextPart:
    try:
        return TextPart(text=text)
    except InvalidMessageError as e:
        raise at(e, index=index, field=where) from None


def _call_id_in(d: Mapping[str, JSONValue], index: int, what: str) -> str:
    call_id = d.get("call_id")
    if not isinstance(call_id, str) or not call_id.strip():
        fail(
            f"a {what} needs a non-empty string 'call_id' (it pairs the call with its output), got {call_id!r}",
            index=index,
            field="call_id",
        )
    return call_id


def _call_in(unit: _Unit, d: Mapping[str, JSONValue], kind: str, index: int) -> None:
    call_id = _call_id_in(d, index, kind)
    body = CALL_FIELD[kind]
    name, value = d.get("name"), d.get(body)
    if not isinstance(name, str):
        fail(f"a {kind} needs a string 'name', got {type_name(name)}", index=index, field="name")
    if not isinstance(value, str):
        hint = "; pass json.dumps(arguments)" if isinstance(value, dict | list) else ""
        fail(f"a {kind}'s {body!r} must be a string, got {type_name(value)}{hint}", index=index, field=body)
    try:
        unit.calls.append(ToolCall(id=call_id, name=name, arguments=value))
    except InvalidMessageError as e:
        raise at(e, index=index) from None
    unit.entries.append({"as": "call", "item": {**d, "call_id": None, "name": None, body: None}})


def _paired_call_in(unit: _Unit, d: Mapping[str, JSONValue], kind: str, index: int) -> None:
    call_id = _call_id_in(d, index, kind)
    body = {k: v for k, v in d.items() if k not in ("call_id", "type")}
    try:
        unit.calls.append(ToolCall(id=call_id, name=kind, arguments=canonical_json(body)))
    except InvalidMessageError as e:
        raise at(e, index=index, field="item") from None
    unit.entries.append({"as": "call", "item": {k: None for k in d} | {"type": kind}})


def _output_in(unit: _Unit, d: Mapping[str, JSONValue], kind: str, index: int) -> None:
    unit.tool_call_id = _call_id_in(d, index, kind)
    if kind in _PAIRED_OUTPUTS:
        body = {k: v for k, v in d.items() if k != "call_id"}
        unit.entries.append(
            {
                "as": "output",
                "item": {k: None for k in d},
                "output": ["opaque", _render(unit, body, index, "item")],
            }
        )
        return
    if "output" not in d:
        fail(f"a {kind} needs an 'output' (a string or a list of parts)", index=index, field="output")
    output = d["output"]
    residue = {**d, "call_id": None, "output": None}
    if isinstance(output, str):
        unit.parts.append(_text_part(output, index, "output"))
        unit.text_only = True
        unit.entries.append({"as": "output", "item": residue, "output": "str"})
        return
    if not isinstance(output, list):
        fail(
            f"a {kind}'s output must be a string or a list of parts, got {type_name(output)}",
            index=index,
            field="output",
        )
    unit.entries.append({"as": "output", "item": residue, "output": _parts_in(unit, output, index, "output")})


def _opaque_in(unit: _Unit, raw: JSONValue, index: int) -> None:
    unit.entries.append({"as": "opaque", "pulled": _render(unit, raw, index, "item")})


def _render(unit: _Unit, value: JSONValue, index: int | None, where: str) -> JSONValue:
    """Add ``value`` to the unit as counted content: its JSON text, its image URLs as images.

    Returns what the way back needs besides the text: where the images were
    (``[path, "url" | "png"]``, consuming the unit's next image parts in order)
    and the ``file_data`` strings left out of the text (``[path, data]``).
    """
    images: list[JSONValue] = []
    files: list[JSONValue] = []
    stripped = _strip(value, [], images, files, unit)
    try:
        text = TextPart(text=canonical_json(stripped))
    except InvalidMessageError as e:
        raise at(e, index=index, field=where) from None
    unit.parts.insert(len(unit.parts) - len(images), text)
    return {"images": images, "files": files}


def _strip(
    value: JSONValue, path: JSONPath, images: list[JSONValue], files: list[JSONValue], unit: _Unit
) -> JSONValue:
    if isinstance(value, dict):
        out: dict[str, JSONValue] = {}
        for key in sorted(value):
            item = value[key]
            here = [*path, key]
            if (
                key == "image_url"
                and isinstance(item, str)
                and item.startswith(("data:", "http://", "https://"))
            ):
                unit.parts.append(ImagePart(url=item))
                images.append([list(here), "url"])
                out[key] = None
            elif (
                key == "result"
                and value.get("type") == "image_generation_call"
                and isinstance(item, str)
                and item
            ):
                unit.parts.append(ImagePart(url="data:image/png;base64," + item))
                images.append([list(here), "png"])
                out[key] = None
            elif key == "file_data" and isinstance(item, str):
                files.append([list(here), item])
                out[key] = f"<{len(item):,} characters of file data, not counted>"
            else:
                out[key] = _strip(item, here, images, files, unit)
        return out
    if isinstance(value, list):
        return [_strip(v, [*path, i], images, files, unit) for i, v in enumerate(value)]
    return value


def to_messages(
    items: Iterable[Mapping[str, object]], *, previous_id: str | None = None, unknown: Unknown = "raise"
) -> list[Message]:
    """Convert a list of Responses API input items to canonical messages (see the module docstring).

    Args:
        items: the items, as sent to the API or returned in a response's ``output`` (JSON-decoded).
            The shorthand ``{"role": ..., "content": ...}`` is a message item. Not modified.
        previous_id: the id of the message the items follow (chains the ids); None starts a conversation.
        unknown: ``"raise"`` (default) on an item type this version does not know, or ``"keep"`` it
            whole as an opaque item with an `ConversionWarning`.

    Returns:
        One message per unit, with deterministic chain ids.

    Raises:
        InvalidMessageError: an item is malformed; the error names its index and the field.
    """
    converter = ResponsesConverter(previous_id=previous_id, unknown=unknown)
    converter.feed(items)
    return converter.finish()


# ----------------------------------------------------------------------------- canonical -> items


def from_messages(
    messages: Iterable[Message], *, validate: bool = True, cache: MutableMapping[str, str] | None = None
) -> list[ResponseItem]:
    """Convert canonical messages to Responses API input items.

    Messages the engine did not change come back as exactly the items they
    came from; the others are written from their canonical fields (see the
    module docstring), and messages that did not come from this format
    (summaries, notes, Chat Completions messages) become ``{"role": ...,
    "content": ...}`` messages, ``function_call`` and ``function_call_output`` items.

    Args:
        messages: the conversation. Not modified.
        validate: check the conversation first (default ``True``) for what the
            Responses API rejects: a call without its output, an output without
            its call, a repeated call id, a reasoning item without the item it
            belongs to, an empty message. ``False`` converts whatever is given.
        cache: message id -> the JSON text of its items, filled and read for
            the messages written back unchanged (ids name content, so an entry
            never goes stale). An agent converting a growing history at every
            step passes the same mapping each time (bound it: any
            ``MutableMapping`` will do); each call still returns new objects.

    Returns:
        New item dicts (sharing nothing with the messages).

    Raises:
        InvalidMessageError: a message is not a `Message`, or its ``metadata["responses"]``
            does not match its content (names the index).
        InvalidConversationError: ``validate`` is on and the conversation breaks a rule.
    """
    msgs, plan = checked(messages, validate)
    if cache is None:
        return [item for i, m in enumerate(msgs) for item in items_of(m, i, plan)]
    # One JSON text for the whole list, decoded at once: fresh objects at C speed, whatever its length.
    fragments = [fragment(m, i, plan, cache) for i, m in enumerate(msgs)]
    return cast(list[ResponseItem], json.loads("[" + ",".join(f for f in fragments if f) + "]"))


def items_by_message(
    messages: Iterable[Message], *, validate: bool = True, cache: MutableMapping[str, str] | None = None
) -> list[list[ResponseItem]]:
    """`from_messages`, with the items of each message in a list of their own (for cutting at a message).

    Arguments and errors as for `from_messages`.
    """
    msgs, plan = checked(messages, validate)
    if cache is None:
        return [items_of(m, i, plan) for i, m in enumerate(msgs)]
    return [json.loads("[" + fragment(m, i, plan, cache) + "]") for i, m in enumerate(msgs)]
