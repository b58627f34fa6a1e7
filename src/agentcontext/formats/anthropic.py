"""Anthropic Messages API (``system`` + ``messages``) to and from canonical `Message` objects.

>>> from agentcontext.formats import anthropic
>>> from agentcontext.messages import Message, ToolCall
>>> msgs = [Message(role="system", content="Be brief."),
...         Message(role="user", content="What is in /tmp?"),
...         Message(role="assistant", tool_calls=[ToolCall(id="c1", name="ls", arguments='{"path": "/tmp"}')]),
...         Message(role="tool", tool_call_id="c1", content="a.txt")]
>>> system, params = anthropic.from_messages(msgs)
>>> system
'Be brief.'
>>> params[1]["content"]
[{'type': 'tool_use', 'id': 'c1', 'name': 'ls', 'input': {'path': '/tmp'}}]
>>> params[2]["content"]
[{'type': 'tool_result', 'tool_use_id': 'c1', 'content': 'a.txt'}]

How canonical messages map to Anthropic's shape:

- Leading system messages become the ``system`` parameter: one system message
  with string content gives a string, anything else a list of text blocks
  (`to_messages` turns a list back into one system message with text parts).
  A system message after the conversation started cannot go there: by default
  it raises `InvalidMessageError` naming its index; ``late_system="inline"``
  sends it as a ``{"role": "system"}`` entry of ``messages`` instead
  (Anthropic's mid-conversation system messages: Claude API only, and only on
  the models whose documentation lists them).
- A tool message becomes a ``tool_result`` block in a user message;
  ``metadata["is_error"]`` (a bool) becomes ``is_error``, and back. An assistant's
  `ToolCall` becomes a ``tool_use`` block whose ``input`` is the parsed
  ``arguments`` (which must be a JSON object); the way back writes
  ``arguments = json.dumps(input, ensure_ascii=False)``, so arguments written
  in another layout (compact, escaped) come back equal as JSON, not as text.
- Images: ``data:`` URLs become ``base64`` sources (jpeg, png, gif, webp),
  ``http(s)://`` URLs ``url`` sources.
- A ``document`` block (in a user message or a tool result) is a `FilePart`:
  a ``base64`` source a base64 ``data:`` URL, a ``text`` source a plain
  ``data:text/plain,...`` URL, a ``url`` source its URL, a ``file`` source
  (Files API) ``anthropic-file-id:<file_id>``; its ``title`` is the part's
  name. It is counted by what it holds (`agentcontext.tokens.file_tokens`: a
  PDF by its pages). ``context``, ``citations`` and ``content`` sources are not
  modelled.
- Consecutive messages of the same wire role are merged into one message, as
  Anthropic requires: the results of parallel calls (and a user message right
  after them) form one user message, ``tool_result`` blocks first. `to_messages`
  splits a user message back into one tool message per result, then one user
  message (text parts) for any other blocks.

What Anthropic cannot carry, and so does not come back from a round trip:
`Message.name`, `Message.extra` (OpenAI wire fields), an image's ``detail``,
``width`` and ``height``; text blocks that are empty or whitespace-only next to
other blocks (Anthropic rejects them: "text content blocks must be non-empty"),
so an assistant message with ``content=""`` and tool calls comes back with
``content=None``; an empty tool result comes back as ``""``; an assistant
message with one text part and tool calls comes back with string content;
merged user turns come back as one message with text parts. Everything else
round-trips exactly (ids aside). Block types and keys agentcontext does not
model (``thinking``, ``cache_control``, a document's ``citations``...) raise
`InvalidMessageError` rather than vanish, or, with ``to_messages(...,
unknown="keep")`` (what a proxy in front of Claude Code needs), travel whole in
``metadata["anthropic"]`` and come back exactly for the messages the engine
did not change.
"""

from __future__ import annotations

import json
import urllib.parse
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, cast

from ..exceptions import ConversionWarning, InvalidMessageError
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
)
from ._common import (
    ANTHROPIC_FILE_ID_URL,
    at,
    canonical_json,
    fail,
    json_value,
    only_keys,
    text_data_url,
    text_part_in,
    type_name,
)
from ._wire import AnthropicContentBlock, AnthropicMessage, AnthropicTextBlock

__all__ = ["KEY", "from_messages", "to_messages"]

_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

SystemParam = str | list[AnthropicTextBlock] | None
"""The ``system`` parameter: a string, a list of text blocks, or absent."""

_Block = dict[str, JSONValue]


# ----------------------------------------------------------------------------- canonical -> Anthropic


def from_messages(
    messages: Iterable[Message],
    *,
    validate: bool = True,
    late_system: Literal["raise", "inline"] = "raise",
) -> tuple[SystemParam, list[AnthropicMessage]]:
    """Convert canonical messages to Anthropic's ``system`` parameter and ``messages`` list.

    Args:
        messages: the conversation. Not modified.
        validate: check the conversation with `agentcontext.check_messages`
            first (default ``True``), so a request Anthropic would reject (an
            unanswered ``tool_use``, an orphan ``tool_result``, a duplicate id,
            an empty message...) fails here with the index and a fix.
        late_system: what to do with a system message after the first
            non-system one: ``"raise"`` (default) raises `InvalidMessageError`;
            ``"inline"`` sends a ``{"role": "system"}`` message (supported by
            few models; see the module docstring).

    Returns:
        ``(system, messages)``: pass them as ``system=`` (omit it when ``None``)
        and ``messages=`` to ``client.messages.create``.

    Raises:
        InvalidMessageError: a message holds something Anthropic cannot carry
            (a late system message, arguments that are not a JSON object, an
            image outside user and tool messages, an unsupported image URL);
            names the index and field.
        InvalidConversationError: ``validate`` is on and the conversation
            breaks a rule; ``.violations`` lists them all.
    """
    msgs = list(messages)
    for i, m in enumerate(msgs):
        if not isinstance(m, Message):
            fail(f"expected an agentcontext Message, got {type(m).__name__}", index=i)
    start = 0
    while start < len(msgs) and msgs[start].role == "system":
        start += 1
    system = _system_out(msgs[:start])
    out: list[AnthropicMessage] = []
    for i in range(start, len(msgs)):
        role, content = _message_out(msgs[i], i, late_system)
        _append_merged(out, role, content)
    if validate:
        ensure_valid(
            msgs,
            system_first_only=late_system == "raise",
            target="Anthropic",
            hint="Repair the conversation, or pass validate=False to convert it anyway.",
        )
    return system, out


def _system_out(leading: Sequence[Message]) -> SystemParam:
    if not leading:
        return None
    wire = _wire_of(leading[0]) if len(leading) == 1 else None
    if isinstance(wire, Mapping) and "system" in wire:
        return cast(SystemParam, wire["system"])
    if len(leading) == 1 and isinstance(leading[0].content, str):
        return leading[0].content
    blocks: list[_Block] = []
    for i, m in enumerate(leading):
        blocks.extend(_text_blocks(m, i, "the system prompt"))
    return cast("list[AnthropicTextBlock]", _drop_blank(blocks))


def _wire_of(m: Message) -> object:
    """The wire form ``unknown="keep"`` carried for ``m``, while ``m`` is the message it came with; else None."""
    meta = m.metadata.get(KEY) if m.metadata else None
    if isinstance(meta, Mapping) and meta.get("id") == m.id:
        return meta.get("wire")
    return None


def _message_out(m: Message, index: int, late_system: str) -> tuple[str, str | list[_Block]]:
    wire = _wire_of(m)
    if wire is not None and m.role != "system":
        role = "assistant" if m.role == "assistant" else "user"
        return role, cast("str | list[_Block]", wire)
    if m.role == "system":
        if late_system != "inline":
            fail(
                "a system message after the conversation started: Anthropic takes the system prompt as a "
                "separate parameter. Move it to the start, send it as a user message, or pass "
                "late_system='inline' if your model supports mid-conversation system messages",
                index=index,
                field="role",
            )
        content = m.content
        return "system", content if isinstance(content, str) else _drop_blank(
            _text_blocks(m, index, "a system message")
        )
    if m.role == "tool":
        return "user", [_tool_result_out(m, index)]
    if m.role == "user":
        content = m.content
        if content is None:
            return "user", ""
        if isinstance(content, str):
            return "user", content
        return "user", _drop_blank([_part_out(p, index, f"content[{j}]") for j, p in enumerate(content)])
    # assistant
    if not m.tool_calls:
        content = m.content
        if isinstance(content, str):
            return "assistant", content
        if content is None:
            return "assistant", ""
    blocks = _text_blocks(m, index, "an assistant message")
    for k, call in enumerate(m.tool_calls):
        blocks.append(_tool_use_out(call, index, k))
    return "assistant", _drop_blank(blocks)


def _text_blocks(m: Message, index: int, where: str) -> list[_Block]:
    content = m.content
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[_Block] = []
    for j, part in enumerate(content):
        if not isinstance(part, TextPart):
            what = "images" if isinstance(part, ImagePart) else "documents"
            fail(
                f"Anthropic accepts {what} only in user messages and tool results, not in {where}; "
                f"describe the {what[:-1]} in text, or move it to a user message",
                index=index,
                field=f"content[{j}]",
            )
        blocks.append({"type": "text", "text": part.text})
    return blocks


def _part_out(part: ContentPart, index: int, field: str) -> _Block:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, FilePart):
        return _document_out(part, index, field)
    url = part.url
    if url.startswith("data:"):
        head, sep, data = url[5:].partition(",")
        media_type, _, encoding = head.partition(";")
        if not sep or encoding != "base64" or media_type not in _MEDIA_TYPES:
            fail(
                "Anthropic takes base64 data URLs of image/jpeg, image/png, image/gif or image/webp, "
                f"got one starting {url[:40]!r}",
                index=index,
                field=field,
            )
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    fail(f"Anthropic takes images as data: or http(s):// URLs, got {url[:40]!r}", index=index, field=field)


def _tool_use_out(call: ToolCall, index: int, k: int) -> _Block:
    field = f"tool_calls[{k}].arguments"
    try:
        value: object = json.loads(call.arguments)
    except ValueError as e:
        fail(
            f"arguments of call {call.id!r} are not valid JSON ({e}); Anthropic needs them as an object: "
            "repair or re-issue the call",
            index=index,
            field=field,
        )
    if not isinstance(value, dict):
        fail(
            f"arguments of call {call.id!r} are JSON {type_name(value)}, but Anthropic's tool_use input "
            'must be an object: wrap them, e.g. {"value": ...}',
            index=index,
            field=field,
        )
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": cast(JSONValue, value)}


def _tool_result_out(m: Message, index: int) -> _Block:
    block: _Block = {"type": "tool_result", "tool_use_id": cast(str, m.tool_call_id)}
    content = m.content
    if isinstance(content, str):
        if content:
            block["content"] = content
    elif content is not None:
        parts = [_part_out(p, index, f"content[{j}]") for j, p in enumerate(content)]
        # An empty result has no content (it is optional); blank text blocks would be rejected.
        parts = [p for p in parts if not _is_blank(p)]
        if parts:
            block["content"] = cast(JSONValue, parts)
    is_error = m.metadata.get("is_error")
    if isinstance(is_error, bool):
        block["is_error"] = is_error
    return block


def _is_blank(block: Mapping[str, JSONValue]) -> bool:
    text = block.get("text")
    return block.get("type") == "text" and isinstance(text, str) and not text.strip()


def _drop_blank(blocks: list[_Block]) -> list[_Block]:
    """Drop empty or whitespace-only text blocks when other blocks remain (Anthropic rejects them).

    A message that is nothing but blank text keeps it, so the empty message is
    reported by validation (``empty_content``) rather than silently emptied.
    """
    kept = [b for b in blocks if not _is_blank(b)]
    return kept if kept else blocks


def _append_merged(out: list[AnthropicMessage], role: str, content: str | list[_Block]) -> None:
    if out and out[-1]["role"] == role and role != "system":
        previous = out[-1]["content"]
        blocks = _as_blocks(previous) + _as_blocks(content)
        if role == "user":
            # Anthropic wants a user message's tool_result blocks before anything else.
            blocks.sort(key=lambda b: b.get("type") != "tool_result")
        out[-1]["content"] = cast("list[AnthropicContentBlock]", _drop_blank(blocks))
        return
    out.append(cast(AnthropicMessage, {"role": role, "content": content}))


def _as_blocks(content: object) -> list[_Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(cast("list[_Block]", content))


# ----------------------------------------------------------------------------- Anthropic -> canonical


def to_messages(
    messages: Iterable[Mapping[str, object]],
    *,
    system: object = None,
    unknown: Literal["raise", "keep"] = "raise",
    previous_id: str | None = None,
) -> list[Message]:
    """Convert Anthropic ``messages`` (and the ``system`` parameter) to canonical messages.

    Args:
        messages: the ``messages`` list, as sent to or returned by the API
            (JSON-decoded). Not modified.
        system: the ``system`` parameter: a string, a list of text blocks, or
            ``None`` (default) when there is none.
        unknown: what to do with the keys and blocks agentcontext does not model
            (``cache_control``, ``thinking`` and ``redacted_thinking``, ``document``,
            server tools' blocks...): ``"raise"`` (default) refuses them with
            `InvalidMessageError`; ``"keep"`` carries each message's wire blocks
            whole in ``metadata["anthropic"]``, so that `from_messages` writes a
            message the engine did not change back exactly as it came (its
            ``cache_control`` breakpoints and thinking blocks included). Thinking
            blocks are counted (Claude reads them back); the rest of what is not
            modelled is not: a `ConversionWarning` names each kind once.
        previous_id: the id of the message these follow (chains the ids), so a
            growing list can be converted a batch at a time, as with
            `agentcontext.formats.responses.to_messages`; None (default) starts a conversation.

    Returns:
        Canonical messages with deterministic chain ids: a system message first
        when ``system`` is given, then, for each wire message, one tool message
        per ``tool_result`` block and one message for its other blocks.

    Raises:
        InvalidMessageError: malformed input; names the message index (in
            ``messages``) and the field, or ``field='system'``.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
        raise InvalidMessageError(f"expected a list of message dicts, got {type_name(messages)}")
    if unknown not in ("raise", "keep"):
        raise InvalidMessageError(f"unknown must be 'raise' or 'keep', got {unknown!r}")
    out: list[Message] = []
    chain = _Chain(out, keep=unknown == "keep", previous=previous_id)
    if system is not None:
        modelled = _modelled_system(system, chain.kept) if chain.keep else system
        chain.add(
            {"system": system}, role="system", content=_system_in(modelled), original={"system": system}
        )
    for index, d in enumerate(messages):
        if not isinstance(d, Mapping):
            fail(f"expected a message dict, got {type_name(d)}", index=index)
        if not chain.keep:
            only_keys(d, ("role", "content"), index=index)
        role = d.get("role")
        content = d.get("content")
        if role not in ("user", "assistant", "system"):
            fail(f"unknown role {role!r}; expected 'user' or 'assistant'", index=index, field="role")
        if isinstance(content, str):
            chain.add(
                {"role": role, "content": content}, role=role, content=content, index=index, original=content
            )
            continue
        if not isinstance(content, list | tuple):
            fail(
                f"content must be a string or a list of blocks, got {type_name(content)}",
                index=index,
                field="content",
            )
        blocks = _modelled_blocks(content, chain.kept) if chain.keep else list(content)
        if role == "user":
            _user_in(blocks, content, index, chain)
        elif role == "assistant":
            _assistant_in(blocks, content, index, chain)
        else:
            parts = tuple(
                _text_part_in(b, index, f"content[{j}]") for j, b in enumerate(blocks) if b is not None
            )
            chain.add(
                {"role": role, "content": content},
                role="system",
                content=parts,
                index=index,
                original=list(content),
            )
    if chain.kept:
        warnings.warn(
            "Anthropic "
            + "; ".join(sorted(chain.kept))
            + ": not modelled by agentcontext, so kept as sent for "
            "the messages it does not change; thinking blocks are counted, the rest is not",
            ConversionWarning,
            stacklevel=2,
        )
    return out


# What agentcontext models of each block type; "keep" carries the rest in metadata, whole.
_MODELLED: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "image": ("type", "source"),
    "document": ("type", "source", "title"),
    "tool_use": ("type", "id", "name", "input"),
    "tool_result": ("type", "tool_use_id", "content", "is_error"),
}
_SOURCE_KEYS = ("type", "media_type", "data", "url", "file_id")
KEY = "anthropic"
"""The metadata key under which ``unknown="keep"`` carries a message's wire blocks (with the id they belong to)."""


def _modelled_blocks(blocks: Sequence[object], kept: set[str]) -> list[object]:
    """Each block reduced to what agentcontext models, or None for a block type it does not model.

    What is left out is named in ``kept`` (for one warning per conversion).
    """
    out: list[object] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            out.append(block)  # refused below, with its index
            continue
        kind = block.get("type")
        keys = _MODELLED.get(kind) if isinstance(kind, str) else None
        source = block.get("source")
        if kind == "document" and not (
            isinstance(source, Mapping) and source.get("type") in _DOCUMENT_SOURCES
        ):
            keys = None  # a source not modelled (custom content): the block travels whole, as before
            kind = f"{kind} ({type_name(source) if not isinstance(source, Mapping) else source.get('type')!r} source)"
        if keys is None:
            kept.add(f"{kind!r} blocks")
            out.append(None)
            continue
        reduced: dict[str, object] = {k: v for k, v in block.items() if k in keys}
        if len(reduced) != len(block):
            kept.add(", ".join(repr(k) for k in block if k not in keys) + f" on {kind} blocks")
        source = reduced.get("source")
        if isinstance(source, Mapping):
            reduced["source"] = {k: v for k, v in source.items() if k in _SOURCE_KEYS}
        inner = reduced.get("content")
        if kind == "tool_result" and isinstance(inner, list | tuple):
            reduced["content"] = [b for b in _modelled_blocks(inner, kept) if b is not None]
        out.append(reduced)
    return out


def _thinking_texts(wire: JSONValue) -> list[JSONValue]:
    """What the model reads of the thinking blocks in ``wire``, for counters (`messages.carried_texts`).

    Claude reads its thinking blocks back: every earlier turn's from Claude Opus 4.5 and Sonnet 4.6
    on, and on every model those of the current turn, which in an agent's tool loop is every step
    since the user last wrote. Counted as 0 (the seeds' and our earlier assumption that a previous
    turn's thinking is not billed), a Claude Code loop through a proxy sent 101k tokens into a 28k
    budget. A block whose text is omitted (``display: "omitted"``) or redacted carries the thinking
    encrypted in its ``signature`` or ``data``: its length stands in for it, an overestimate (base64
    of encrypted text) where an underestimate would have the provider refuse the request.
    """
    out: list[JSONValue] = []
    for block in wire if isinstance(wire, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "thinking":
            text = block.get("thinking")
            out.append(text if isinstance(text, str) and text else block.get("signature") or "")
        elif kind == "redacted_thinking":
            out.append(block.get("data") or "")
    return [t for t in out if isinstance(t, str) and t]


def _modelled_system(system: object, kept: set[str]) -> object:
    if isinstance(system, list | tuple):
        return [b for b in _modelled_blocks(system, kept) if b is not None]
    return system


class _Chain:
    """Appends messages with chain ids: each id derives from the previous one and this message's wire fragment."""

    def __init__(self, out: list[Message], *, keep: bool = False, previous: str | None = None) -> None:
        self.out = out
        self.previous = previous
        self.keep = keep
        self.kept: set[str] = set()

    def add(
        self,
        fragment: object,
        *,
        role: Role,
        content: str | tuple[ContentPart, ...] | None,
        index: int | None = None,
        tool_calls: tuple[ToolCall, ...] = (),
        tool_call_id: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
        original: object = None,
    ) -> None:
        previous = self.out[-1].id if self.out else self.previous
        message_id = derive_id(previous, canonical_json(fragment))
        meta = dict(metadata or {})
        if self.keep and original is not None:
            # The wire blocks this message came from, whole: written back as they were while its id stands.
            wire = json_value(original, index=index, field="content")
            entry: dict[str, JSONValue] = {"id": message_id, "wire": wire}
            counted = _thinking_texts(wire)
            if counted:
                entry["counted"] = counted
            meta[KEY] = entry
        try:
            message = Message(
                id=message_id,
                role=role,
                content=content,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                metadata=meta,
            )
        except InvalidMessageError as e:
            raise at(e, index=index) from None
        self.out.append(message)


def _system_in(system: object) -> str | tuple[ContentPart, ...]:
    if isinstance(system, str):
        return system
    if not isinstance(system, list | tuple):
        fail(
            f"system must be a string or a list of text blocks, got {type_name(system)}",
            index=None,
            field="system",
        )
    return tuple(_text_part_in(b, None, f"system[{j}]") for j, b in enumerate(system))


def _user_in(blocks: Sequence[object], originals: Sequence[object], index: int, chain: _Chain) -> None:
    parts: list[ContentPart] = []
    other: list[object] = []
    kept: list[object] = []  # the wire blocks of the user message (all but its tool results)
    for j, block in enumerate(blocks):
        field = f"content[{j}]"
        if block is None:  # a block type "keep" carries without modelling
            kept.append(originals[j])
            continue
        kind = _block_type(block, index, field)
        if kind == "tool_result":
            call_id, content, metadata = _tool_result_in(cast(Mapping[str, object], block), index, field)
            chain.add(
                {"role": "user", "content": [originals[j]]},
                role="tool",
                content=content,
                tool_call_id=call_id,
                metadata=metadata,
                index=index,
                original=[originals[j]],
            )
        elif kind in ("text", "image", "document"):
            parts.append(_part_in(cast(Mapping[str, object], block), index, field))
            other.append(originals[j])
            kept.append(originals[j])
        else:
            _unsupported(kind, index, field, "user")
    if kept and not parts:
        # Only blocks agentcontext does not model (a document...): a marker stands for them in the text.
        parts.append(TextPart(text="[agentcontext: content blocks kept as sent]"))
    if parts or not blocks:
        chain.add(
            {"role": "user", "content": kept or other},
            role="user",
            content=tuple(parts),
            index=index,
            original=kept,
        )


def _assistant_in(blocks: Sequence[object], originals: Sequence[object], index: int, chain: _Chain) -> None:
    texts: list[TextPart] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        field = f"content[{j}]"
        if block is None:
            continue
        kind = _block_type(block, index, field)
        mapping = cast(Mapping[str, object], block)
        if kind == "text":
            texts.append(_text_part_in(mapping, index, field))
        elif kind == "tool_use":
            calls.append(_tool_use_in(mapping, index, field))
        else:
            _unsupported(kind, index, field, "assistant")
    content: str | tuple[ContentPart, ...] | None
    if calls and len(texts) <= 1:
        # With tool_use blocks Anthropic has no string form; one text block reads back as a string.
        content = texts[0].text if texts else None
    else:
        content = tuple(texts)
    chain.add(
        {"role": "assistant", "content": list(originals)},
        role="assistant",
        content=content,
        tool_calls=tuple(calls),
        index=index,
        original=list(originals),
    )


def _block_type(block: object, index: int, field: str) -> object:
    if not isinstance(block, Mapping):
        fail(
            f"a content block must be an object with a 'type', got {type_name(block)}",
            index=index,
            field=field,
        )
    return block.get("type")


def _unsupported(kind: object, index: int, field: str, role: str) -> None:
    allowed = "'text', 'image', 'document' and 'tool_result'" if role == "user" else "'text' and 'tool_use'"
    fail(
        f"unsupported block type {kind!r} in a {role} message; agentcontext models {allowed} blocks "
        "there and will not drop the others silently: remove them before converting",
        index=index,
        field=f"{field}.type",
    )


def _text_part_in(block: object, index: int | None, field: str) -> TextPart:
    if not isinstance(block, Mapping) or block.get("type") != "text":
        what = repr(block.get("type")) if isinstance(block, Mapping) else type_name(block)
        fail(f"expected a text block {{'type': 'text', 'text': ...}}, got {what}", index=index, field=field)
    return text_part_in(block, index=index, field=field, noun="block")


def _part_in(block: Mapping[str, object], index: int, field: str) -> ContentPart:
    if block.get("type") == "text":
        return _text_part_in(block, index, field)
    if block.get("type") == "document":
        return _document_in(block, index, field)
    only_keys(block, ("type", "source"), index=index, field=field)
    source = block.get("source")
    if not isinstance(source, Mapping):
        fail(
            f"an image block needs a 'source' object, got {type_name(source)}",
            index=index,
            field=f"{field}.source",
        )
    kind = source.get("type")
    if kind == "base64":
        only_keys(source, ("type", "media_type", "data"), index=index, field=f"{field}.source")
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            fail(
                "a base64 image source needs string 'media_type' and 'data'",
                index=index,
                field=f"{field}.source",
            )
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        only_keys(source, ("type", "url"), index=index, field=f"{field}.source")
        url_value = source.get("url")
        if not isinstance(url_value, str):
            fail(
                f"a url image source needs a string 'url', got {type_name(url_value)}",
                index=index,
                field=f"{field}.source.url",
            )
        url = url_value
    else:
        fail(
            f"unsupported image source type {kind!r}; agentcontext models 'base64' and 'url' sources",
            index=index,
            field=f"{field}.source.type",
        )
    try:
        return ImagePart(url=url)
    except InvalidMessageError as e:
        raise at(e, index=index, field=f"{field}.source") from None


_DOCUMENT_SOURCES: Mapping[str, tuple[str, ...]] = {
    "base64": ("media_type", "data"),
    "text": ("media_type", "data"),
    "url": ("url",),
    "file": ("file_id",),
}
"""The document sources agentcontext models, and the fields each holds."""


def _document_in(block: Mapping[str, object], index: int, field: str) -> FilePart:
    only_keys(block, ("type", "source", "title"), index=index, field=field)
    source, title = block.get("source"), block.get("title")
    if not isinstance(source, Mapping):
        fail(
            f"a document block needs a 'source' object, got {type_name(source)}",
            index=index,
            field=f"{field}.source",
        )
    if title is not None and not isinstance(title, str):
        fail(
            f"a document's 'title' must be a string, got {type_name(title)}",
            index=index,
            field=f"{field}.title",
        )
    kind, where = source.get("type"), f"{field}.source"
    keys = _DOCUMENT_SOURCES
    if not isinstance(kind, str) or kind not in keys:
        fail(
            f"unsupported document source type {kind!r}; agentcontext models 'base64', 'text', 'url' and 'file' sources",
            index=index,
            field=f"{where}.type",
        )
    only_keys(source, ("type", *keys[kind]), index=index, field=where)
    values = [source.get(k) for k in keys[kind]]
    if not all(isinstance(v, str) for v in values):
        fail(
            f"a {kind} document source needs string {' and '.join(map(repr, keys[kind]))}",
            index=index,
            field=where,
        )
    value = cast(str, values[-1])
    if kind == "base64":
        url = f"data:{values[0]};base64,{value}"
    elif kind == "text":
        try:
            url = text_data_url(value, values[0])
        except InvalidMessageError as e:
            raise at(e, index=index, field=f"{where}.data") from None
    else:
        url = ANTHROPIC_FILE_ID_URL + value if kind == "file" else value
    try:
        return FilePart(url=url, name=title)
    except InvalidMessageError as e:
        raise at(e, index=index, field=where) from None


def _document_out(part: FilePart, index: int, field: str) -> _Block:
    url = part.url
    source: _Block
    if url.startswith(ANTHROPIC_FILE_ID_URL):
        source = {"type": "file", "file_id": url[len(ANTHROPIC_FILE_ID_URL) :]}
    elif url.startswith("data:") and "," in url:
        head, data = url[5:].split(",", 1)
        media_type = head.split(";", 1)[0] or "text/plain"
        text = part.text
        if head.endswith(";base64") and text is not None:  # Anthropic reads text as a text source only
            source = {"type": "text", "media_type": "text/plain", "data": text}
        elif head.endswith(";base64"):
            if media_type != "application/pdf" and not (part.data or b"").startswith(b"%PDF"):
                fail(
                    f"Anthropic reads documents as PDF or plain text, not {media_type or 'untyped data'}; "
                    "send other files to a provider that takes them, or describe them in text",
                    index=index,
                    field=field,
                )
            source = {"type": "base64", "media_type": "application/pdf", "data": data}
        else:
            text = urllib.parse.unquote(data)
            source = {"type": "text", "media_type": media_type, "data": text}
    elif url.startswith(("https://", "http://")):
        source = {"type": "url", "url": url}
    else:
        fail(
            f"Anthropic takes documents as data: or http(s):// URLs or Files API ids, got {url[:40]!r}",
            index=index,
            field=field,
        )
    block: _Block = {"type": "document", "source": source}
    if part.name is not None:
        block["title"] = part.name
    return block


def _tool_use_in(block: Mapping[str, object], index: int, field: str) -> ToolCall:
    only_keys(block, ("type", "id", "name", "input"), index=index, field=field)
    call_id, name, value = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        fail(
            f"a tool_use block needs a non-empty string 'id', got {call_id!r}",
            index=index,
            field=f"{field}.id",
        )
    if not isinstance(name, str):
        fail(
            f"a tool_use block needs a string 'name', got {type_name(name)}",
            index=index,
            field=f"{field}.name",
        )
    if not isinstance(value, Mapping):
        fail(
            f"a tool_use block's 'input' must be an object, got {type_name(value)}",
            index=index,
            field=f"{field}.input",
        )
    # json.dumps' default separators: the form 963 of the 1,076 tool calls in the
    # eval logs use (99 are compact), so OpenAI-born arguments usually come back verbatim.
    arguments = json.dumps(json_value(value, index=index, field=f"{field}.input"), ensure_ascii=False)
    try:
        return ToolCall(id=call_id, name=name, arguments=arguments)
    except InvalidMessageError as e:
        raise at(e, index=index, field=field) from None


def _tool_result_in(
    block: Mapping[str, object], index: int, field: str
) -> tuple[str, str | tuple[ContentPart, ...], dict[str, JSONValue] | None]:
    only_keys(block, ("type", "tool_use_id", "content", "is_error"), index=index, field=field)
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        fail(
            f"a tool_result block needs the non-empty string 'tool_use_id' of its call, got {call_id!r}",
            index=index,
            field=f"{field}.tool_use_id",
        )
    value = block.get("content")
    content: str | tuple[ContentPart, ...]
    if value is None:
        content = ""
    elif isinstance(value, str):
        content = value
    elif isinstance(value, list | tuple):
        parts: list[ContentPart] = []
        for j, item in enumerate(value):
            item_field = f"{field}.content[{j}]"
            kind = _block_type(item, index, item_field)
            if kind not in ("text", "image", "document"):
                fail(
                    f"unsupported block type {kind!r} in a tool_result; agentcontext models 'text', 'image' "
                    "and 'document'",
                    index=index,
                    field=f"{item_field}.type",
                )
            parts.append(_part_in(cast(Mapping[str, object], item), index, item_field))
        content = tuple(parts)
    else:
        fail(
            f"a tool_result's content must be a string or a list of blocks, got {type_name(value)}",
            index=index,
            field=f"{field}.content",
        )
    is_error = block.get("is_error")
    if is_error is None:
        return call_id, content, None
    if not isinstance(is_error, bool):
        fail(
            f"'is_error' must be a boolean, got {type_name(is_error)}", index=index, field=f"{field}.is_error"
        )
    return call_id, content, {"is_error": is_error}
