"""Hypothesis strategies for conversations, shared by the test files.

- `openai_conversations`: lists of OpenAI Chat Completions dicts that are valid
  (every call answered, unique ids, a user first, nothing empty where a provider
  rejects it) and exercise the format: parallel calls answered in any order,
  string vs list-of-parts content, files (PDF, text, by id, audio), images (URL and data URL, with and without
  ``detail``), ``name`` on any role, CJK and emoji text, ``""`` content where
  legal (tool results, an assistant that only calls tools), ``developer``
  messages, extra keys (``refusal``, ``reasoning_content``), arguments that are
  not valid JSON.
- `canonical_conversations`: the same shapes as canonical `Message` lists.
  ``for_anthropic=True`` keeps to what Anthropic's format carries exactly (see
  `agentcontext.formats.anthropic`), for round-trip properties.
- `canonical_messages`: single valid messages of any role.
- `json_junk`, `junk_openai_dicts`, `junk_anthropic_dicts`: arbitrary JSON-ish
  data, flat or shaped like messages, for "raises a clear error or converts"
  properties.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from agentcontext.messages import FilePart, ImagePart, Message, TextPart, ToolCall

JSON = Any  # test-only alias: hypothesis draws are untyped

# ----------------------------------------------------------------------------- text

_CJK = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
_SAMPLES = st.sampled_from(
    [
        "ls -la /tmp",
        "请帮我查一下明天北京的天气",
        "日本語のテキスト、句読点。",
        "한국어 문장입니다",
        "emoji 🚀🔥 mixed with text",
        'Traceback (most recent call last):\n  File "x.py", line 1',
        "tab\tseparated\tvalues\r\nwindows line",
        '{"json": "looking", "text": [1, 2]}',
    ]
)
# Hypothesis' default alphabet already leaves out lone surrogates (category Cs).
texts = st.one_of(st.text(max_size=30), st.text(alphabet=_CJK, max_size=20), _SAMPLES)
"""Any text a provider accepts, empty and whitespace-only strings included."""

_VISIBLE = st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")).filter(
    lambda c: not c.isspace()
)
nonblank_texts = st.one_of(
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=10), _VISIBLE, st.text(max_size=10)),
    st.text(alphabet=_CJK, min_size=1, max_size=20),
    _SAMPLES,
)
"""Text with at least one non-whitespace character (what user and system messages need)."""

names = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=12), st.just("用户")
)

_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
image_urls = st.one_of(
    st.builds(
        lambda p: f"https://example.com/img/{p}.png",
        st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8),
    ),
    st.sampled_from(
        [
            f"data:image/png;base64,{_PNG}",
            "data:image/jpeg;base64,/9j/4AAQSkZJRg==",
            "data:image/webp;base64,UklGRg==",
        ]
    ),
)
details = st.sampled_from([None, "auto", "low", "high"])
_PDF = "JVBERi0xLjQKMSAwIG9iaiA8PCAvVHlwZSAvUGFnZSA+PiBlbmRvYmoK"  # %PDF-1.4, one page object
_file_names = st.one_of(st.none(), st.sampled_from(["report.pdf", "notes.txt", "规格.pdf"]))
openai_file_parts = st.one_of(
    st.builds(lambda n: {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{_PDF}", **n}},
              st.sampled_from([{}, {"filename": "report.pdf"}])),
    st.builds(lambda i: {"type": "file", "file": {"file_id": f"file-{i}"}}, st.integers(0, 99)),
    st.builds(lambda f: {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": f}},
              st.sampled_from(["wav", "mp3"])),
)  # fmt: skip
"""OpenAI file and audio parts (user messages only)."""
file_parts = st.builds(
    lambda url, name: FilePart(url=url, name=name),
    st.sampled_from(
        [
            f"data:application/pdf;base64,{_PDF}",
            "data:text/plain;base64,aGVsbG8gd29ybGQ=",
            "openai-file-id:file-7",
        ]
    ),
    _file_names,
)
"""Canonical files the OpenAI format carries exactly."""
anthropic_file_parts = st.builds(
    lambda url, name: FilePart(url=url, name=name),
    st.sampled_from(
        [
            f"data:application/pdf;base64,{_PDF}",
            "https://example.com/spec.pdf",
            "anthropic-file-id:file_01",
            "data:text/plain,Step%203%20prints%20DONE.",
        ]
    ),
    _file_names,
)
"""Canonical files the Anthropic format carries exactly (documents: in user messages and tool results)."""

_json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_objects = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        _json_leaves,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=6,
    ),
    max_size=4,
)
"""JSON objects (tool call inputs)."""


def _dump(draw: Callable[..., Any], obj: JSON) -> str:
    style = draw(st.sampled_from(["spaced", "compact", "ascii"]))
    if style == "compact":
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(obj, ensure_ascii=style == "ascii")


# ----------------------------------------------------------------------------- OpenAI dicts


def _text_parts(draw: Callable[..., Any], *, min_size: int = 1) -> list[JSON]:
    return [
        {"type": "text", "text": t} for t in draw(st.lists(nonblank_texts, min_size=min_size, max_size=3))
    ]


def _image_part(draw: Callable[..., Any]) -> JSON:
    image: dict[str, JSON] = {"url": draw(image_urls)}
    detail = draw(details)
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def _maybe_name(draw: Callable[..., Any], d: dict[str, JSON]) -> dict[str, JSON]:
    if draw(st.integers(0, 4)) == 0:
        d["name"] = draw(names)
    return d


@st.composite
def openai_user_messages(draw: Callable[..., Any]) -> JSON:
    """A valid OpenAI user message: non-blank text, or parts with text and images."""
    if draw(st.booleans()):
        content: JSON = draw(nonblank_texts)
    else:
        parts = _text_parts(draw, min_size=0) + [_image_part(draw) for _ in range(draw(st.integers(0, 2)))]
        parts += [draw(openai_file_parts) for _ in range(draw(st.integers(0, 1)))]
        if not parts:
            parts = [{"type": "text", "text": draw(nonblank_texts)}]
        content = draw(st.permutations(parts))
    return _maybe_name(draw, {"role": "user", "content": content})


@st.composite
def openai_system_messages(draw: Callable[..., Any]) -> JSON:
    """A valid system (or developer) message."""
    content: JSON = draw(nonblank_texts) if draw(st.booleans()) else _text_parts(draw)
    role = draw(st.sampled_from(["system", "system", "developer"]))
    return _maybe_name(draw, {"role": role, "content": content})


def _assistant_extra(draw: Callable[..., Any], d: dict[str, JSON]) -> dict[str, JSON]:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        d["refusal"] = None
    elif kind == 1:
        d["reasoning_content"] = draw(texts)
    elif kind == 2:
        d["annotations"] = []
    return _maybe_name(draw, d)


@st.composite
def openai_conversations(draw: Callable[..., Any], *, max_rounds: int = 3) -> list[JSON]:
    """A valid OpenAI conversation (see the module docstring)."""
    out: list[JSON] = []
    if draw(st.booleans()):
        out.append(draw(openai_system_messages()))
    rounds = draw(st.integers(1, max_rounds))
    salt = draw(st.text(alphabet=string.ascii_letters + string.digits, min_size=4, max_size=8))
    for r in range(rounds):
        out.append(draw(openai_user_messages()))
        for s in range(draw(st.integers(0, 2))):
            calls: list[JSON] = []
            for k in range(draw(st.integers(1, 3))):
                if draw(st.integers(0, 9)) == 0:
                    arguments = draw(st.sampled_from(["{not json", "", '{"a": 1']))  # models do emit these
                else:
                    arguments = _dump(draw, draw(json_objects))
                calls.append(
                    {
                        "id": f"call_{salt}_{r}_{s}_{k}",
                        "type": "function",
                        "function": {
                            "name": draw(st.sampled_from(["bash", "search", "get_weather", "查询"])),
                            "arguments": arguments,
                        },
                    }
                )
            content: JSON = draw(st.one_of(st.none(), st.just(""), nonblank_texts))
            out.append(_assistant_extra(draw, {"role": "assistant", "content": content, "tool_calls": calls}))
            results: list[JSON] = []
            for call in calls:
                result: JSON = draw(texts) if draw(st.integers(0, 3)) else _text_parts(draw)
                tool = {"role": "tool", "tool_call_id": call["id"], "content": result}
                if draw(st.booleans()):
                    tool["name"] = call["function"]["name"]
                results.append(tool)
            out.extend(draw(st.permutations(results)))
        if r < rounds - 1 or draw(st.booleans()):
            final: JSON = draw(nonblank_texts) if draw(st.booleans()) else _text_parts(draw)
            out.append(_assistant_extra(draw, {"role": "assistant", "content": final}))
    return out


# ----------------------------------------------------------------------------- canonical messages


def _parts(draw: Callable[..., Any], *, images: bool, anthropic: bool, min_size: int = 1) -> tuple[Any, ...]:
    parts: list[Any] = [TextPart(text=t) for t in draw(st.lists(nonblank_texts, min_size=0, max_size=3))]
    if images:
        for _ in range(draw(st.integers(0, 2))):
            if anthropic:
                parts.append(ImagePart(url=draw(image_urls)))
            else:
                parts.append(ImagePart(url=draw(image_urls), detail=draw(details)))
        for _ in range(draw(st.integers(0, 1))):
            parts.append(draw(anthropic_file_parts if anthropic else file_parts))
    while len(parts) < min_size:
        parts.append(TextPart(text=draw(nonblank_texts)))
    return tuple(draw(st.permutations(parts)))


@st.composite
def canonical_conversations(
    draw: Callable[..., Any], *, max_rounds: int = 3, for_anthropic: bool = False
) -> list[Message]:
    """A valid canonical conversation; ``for_anthropic`` keeps to what the Anthropic format carries exactly.

    By default everything OpenAI's format carries (names, ``extra``, image
    ``detail``, metadata the formats ignore or map), and nothing it cannot
    (images and files in user messages and tool results). In Anthropic mode: at most one leading system message, no names or extra,
    images without ``detail``, arguments as ``json.dumps(obj, ensure_ascii=False)``,
    no blank text parts, an assistant with tool calls has no text, non-blank
    text or several text parts, and a user message never directly follows tool
    results (that would merge them).
    """
    anth = for_anthropic
    out: list[Message] = []

    def name() -> str | None:
        return None if anth or draw(st.integers(0, 4)) else draw(names)

    if draw(st.booleans()):
        content: Any = (
            draw(nonblank_texts) if draw(st.booleans()) else _parts(draw, images=False, anthropic=anth)
        )
        out.append(Message(role="system", content=content, name=name()))
    rounds = draw(st.integers(1, max_rounds))
    salt = draw(st.text(alphabet=string.ascii_letters + string.digits, min_size=4, max_size=8))
    for r in range(rounds):
        content = draw(nonblank_texts) if draw(st.booleans()) else _parts(draw, images=True, anthropic=anth)
        out.append(Message(role="user", content=content, name=name()))
        for s in range(draw(st.integers(0, 2))):
            calls = []
            for k in range(draw(st.integers(1, 3))):
                obj = draw(json_objects)
                arguments = json.dumps(obj, ensure_ascii=False) if anth else _dump(draw, obj)
                calls.append(
                    ToolCall(
                        id=f"call_{salt}_{r}_{s}_{k}",
                        name=draw(st.sampled_from(["bash", "search", "查询"])),
                        arguments=arguments,
                    )
                )
            if anth:
                kind = draw(st.integers(0, 2))
                text: Any = (
                    None
                    if kind == 0
                    else draw(nonblank_texts)
                    if kind == 1
                    else _parts(draw, images=False, anthropic=True, min_size=2)
                )
            else:
                text = draw(st.one_of(st.none(), st.just(""), nonblank_texts))
            extra = {"reasoning_content": draw(texts)} if not anth and draw(st.integers(0, 4)) == 0 else {}
            out.append(Message(role="assistant", content=text, tool_calls=calls, name=name(), extra=extra))
            results = []
            for call in calls:
                if draw(st.integers(0, 3)):
                    result: Any = draw(texts)
                else:
                    # Tool results hold images and files too (Anthropic's own API; OpenAI-compatible gateways).
                    result = _parts(draw, images=True, anthropic=anth)
                metadata = {"is_error": draw(st.booleans())} if draw(st.integers(0, 3)) == 0 else {}
                results.append(
                    Message(role="tool", tool_call_id=call.id, content=result, name=name(), metadata=metadata)
                )
            out.extend(draw(st.permutations(results)))
        if r < rounds - 1 or draw(st.booleans()):
            content = (
                draw(nonblank_texts) if draw(st.booleans()) else _parts(draw, images=False, anthropic=anth)
            )
            out.append(Message(role="assistant", content=content, name=name()))
    return out


@st.composite
def canonical_messages(draw: Callable[..., Any]) -> Message:
    """One valid canonical message of any role (each would pass ``empty_content``)."""
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    if role == "tool":
        return Message(role="tool", tool_call_id=draw(st.text(min_size=1, max_size=10)), content=draw(texts))
    if role == "assistant" and draw(st.booleans()):
        calls = [
            ToolCall(id=f"c{k}", name="bash", arguments=_dump(draw, draw(json_objects)))
            for k in range(draw(st.integers(1, 3)))
        ]
        return Message(role="assistant", content=draw(st.one_of(st.none(), texts)), tool_calls=calls)
    content = (
        draw(nonblank_texts) if draw(st.booleans()) else _parts(draw, images=role == "user", anthropic=False)
    )
    return Message(role=role, content=content, name=draw(st.one_of(st.none(), names)))


# ----------------------------------------------------------------------------- junk

_SURROGATES = st.text(
    alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3
)
_KEYS = st.sampled_from(
    [
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "id",
        "type",
        "function",
        "arguments",
        "text",
        "image_url",
        "url",
        "detail",
        "input",
        "tool_use_id",
        "is_error",
        "source",
        "media_type",
        "data",
    ]
)
_junk_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=10),
    _SURROGATES,
    st.sampled_from(
        [
            "user",
            "assistant",
            "tool",
            "system",
            "developer",
            "function",
            "text",
            "image_url",
            "tool_use",
            "tool_result",
            "image",
            "base64",
            "url",
        ]
    ),
)
json_junk = st.recursive(
    _junk_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=20,
)
"""Arbitrary JSON-ish data (lone surrogates included)."""


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` nine times in ten, junk otherwise: junk deep inside near-valid messages."""
    return st.integers(0, 9).flatmap(lambda n: json_junk if n == 0 else valid)


def _opt(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional={k: _mostly(v) for k, v in fields.items()})


_some_text = st.text(max_size=8) | _SURROGATES
_openai_parts = st.lists(
    _opt(
        type=st.sampled_from(["text", "image_url", "input_audio"]),
        text=_some_text,
        image_url=_opt(url=_some_text, detail=st.sampled_from(["auto", "low", "high", "max"])),
    ),
    max_size=3,
)
junk_openai_dicts = st.fixed_dictionaries(
    {
        "role": _mostly(st.sampled_from(["user", "assistant", "tool", "system", "developer", "function"])),
        "content": _mostly(st.none() | _some_text | _openai_parts),
    },
    optional={
        "tool_calls": _mostly(
            st.lists(
                _opt(
                    id=_some_text,
                    type=st.sampled_from(["function", "custom"]),
                    function=_opt(name=_some_text, arguments=_some_text),
                ),
                max_size=3,
            )
        ),
        "tool_call_id": _mostly(_some_text),
        "name": _mostly(_some_text),
        "refusal": json_junk,
    },
)
"""Near-valid OpenAI message dicts: each field usually well-typed, sometimes junk, at every depth."""

_anthropic_leaf_blocks = _opt(
    type=st.sampled_from(["text", "image"]),
    text=_some_text,
    source=_opt(
        type=st.sampled_from(["base64", "url", "file"]),
        media_type=st.sampled_from(["image/png", "image/bmp"]),
        data=_some_text,
        url=_some_text,
    ),
)
_anthropic_blocks = st.lists(
    st.one_of(
        _anthropic_leaf_blocks,
        _opt(
            type=st.sampled_from(["tool_use", "thinking"]),
            id=_some_text,
            name=_some_text,
            input=st.dictionaries(st.text(max_size=3), json_junk, max_size=2),
        ),
        _opt(
            type=st.just("tool_result"),
            tool_use_id=_some_text,
            content=_some_text | st.lists(_anthropic_leaf_blocks, max_size=2),
            is_error=st.booleans(),
        ),
    ),
    max_size=4,
)
junk_anthropic_dicts = st.fixed_dictionaries(
    {
        "role": _mostly(st.sampled_from(["user", "assistant", "system"])),
        "content": _mostly(_some_text | _anthropic_blocks),
    },
)
"""Near-valid Anthropic message dicts: each field usually well-typed, sometimes junk, at every depth."""


# ----------------------------------------------------------------------------- OpenAI Responses API items

_item_ids = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=4, max_size=8)
_statuses = st.sampled_from(["completed", "incomplete", "in_progress"])


def _maybe(draw: Callable[..., Any], d: dict[str, JSON], **fields: st.SearchStrategy[Any]) -> dict[str, JSON]:
    """``d`` with each of ``fields`` added or not (the optional keys real items carry)."""
    for key, strategy in fields.items():
        if draw(st.booleans()):
            d[key] = draw(strategy)
    return d


def _input_parts(draw: Callable[..., Any], *, nonblank: bool) -> list[JSON]:
    text = nonblank_texts if nonblank else texts
    first = {"type": "input_text", "text": draw(text)}
    if draw(st.booleans()):
        first["prompt_cache_breakpoint"] = {"mode": "explicit"}
    parts = [first]
    for _ in range(draw(st.integers(0, 2))):
        parts.append(
            draw(
                st.one_of(
                    st.builds(lambda t: {"type": "input_text", "text": t}, texts),
                    st.builds(
                        lambda u, d: {"type": "input_image", "image_url": u, "detail": d},
                        image_urls,
                        st.sampled_from(["auto", "low", "high", "original"]),
                    ),
                    st.builds(
                        lambda f: {"type": "input_image", "file_id": f"file-{f}", "detail": "auto"}, _item_ids
                    ),
                    st.builds(
                        lambda n, data: {"type": "input_file", "filename": f"{n}.pdf", "file_data": data},
                        _item_ids,
                        st.sampled_from(["JVBERi0xLjQK", "data:application/pdf;base64,JVBERi0="]),
                    ),
                    st.builds(lambda f: {"type": "input_file", "file_id": f"file-{f}"}, _item_ids),
                )
            )
        )
    return parts


@st.composite
def responses_client_message(draw: Callable[..., Any], *, role: str = "user", nonblank: bool = True) -> JSON:
    """A user, system or developer message: shorthand or typed, string content or parts."""
    if draw(st.booleans()):
        return {"role": role, "content": draw(nonblank_texts if nonblank else texts)}
    d: dict[str, JSON] = {"type": "message", "role": role, "content": _input_parts(draw, nonblank=nonblank)}
    return _maybe(draw, d, status=_statuses)


def _reasoning(draw: Callable[..., Any], n: int) -> JSON:
    d: dict[str, JSON] = {
        "type": "reasoning",
        "id": f"rs_{n}",
        "summary": draw(
            st.lists(st.builds(lambda t: {"type": "summary_text", "text": t}, texts), max_size=2)
        ),
    }
    return _maybe(draw, d, encrypted_content=st.text(alphabet=string.ascii_letters + "=_-", max_size=40))


def _assistant_message(draw: Callable[..., Any], n: int) -> JSON:
    if draw(st.integers(0, 4)) == 0:
        return {"role": "assistant", "content": draw(nonblank_texts)}
    parts: list[JSON] = [
        _maybe(
            draw,
            {"type": "output_text", "text": draw(nonblank_texts), "annotations": []},
            logprobs=st.just([]),
        )
    ]
    if draw(st.integers(0, 5)) == 0:
        parts.append({"type": "refusal", "refusal": draw(texts)})
    d: dict[str, JSON] = {"type": "message", "role": "assistant", "content": parts}
    return _maybe(
        draw,
        d,
        id=st.just(f"msg_{n}"),
        status=_statuses,
        phase=st.sampled_from(["commentary", "final_answer"]),
    )


def _hosted(draw: Callable[..., Any], n: int) -> JSON:
    item: dict[str, JSON] = draw(
        st.sampled_from(
            [
                {
                    "type": "web_search_call",
                    "id": "ws_1",
                    "status": "completed",
                    "action": {"type": "search", "query": "weather"},
                },
                {
                    "type": "file_search_call",
                    "id": "fs_1",
                    "status": "completed",
                    "queries": ["q"],
                    "results": None,
                },
                {
                    "type": "code_interpreter_call",
                    "id": "ci_1",
                    "status": "completed",
                    "code": "print(1)",
                    "container_id": "cntr_1",
                    "outputs": [{"type": "logs", "logs": "1\n"}],
                },
                {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": _PNG},
                {
                    "type": "mcp_call",
                    "id": "mcp_1",
                    "server_label": "s",
                    "name": "t",
                    "arguments": "{}",
                    "output": "ok",
                },
            ]
        )
    )
    return {**item, "id": f"{item['id']}_{n}"}


@st.composite
def responses_conversations(draw: Callable[..., Any], *, max_turns: int = 3) -> list[JSON]:
    """Valid Responses API input lists: what the API accepts, in every shape it comes in.

    User (and system or developer) messages, shorthand or typed, with text,
    images (URL, data URL, file id, any ``detail``) and files; model runs of
    reasoning items (with or without encrypted content) before the items they
    belong to, assistant messages (annotations, logprobs, refusals, phase, ids),
    function and custom tool calls (parallel ones too), hosted items (web
    search, code interpreter, a generated image...) and computer calls; every
    call answered (outputs as strings or parts, in any order); compaction items.
    Call ids are unique and every reasoning item is followed by an item of its run.
    """
    items: list[JSON] = []
    if draw(st.booleans()):
        items.append(draw(responses_client_message(role=draw(st.sampled_from(["system", "developer"])))))
    n_call = 0
    for _ in range(draw(st.integers(1, max_turns))):
        items.append(draw(responses_client_message()))
        for _ in range(draw(st.integers(0, 2))):
            run: list[JSON] = []
            outputs: list[JSON] = []
            for _ in range(draw(st.integers(1, 3))):
                n_call += 1
                if draw(st.booleans()):
                    run.append(_reasoning(draw, n_call))
                piece = draw(st.sampled_from(["message", "function", "custom", "hosted", "computer"]))
                n_call += 1
                call_id = f"call_{n_call}"
                if piece == "message":
                    run.append(_assistant_message(draw, n_call))
                elif piece == "hosted":
                    run.append(_hosted(draw, n_call))
                elif piece == "function":
                    run.append(
                        _maybe(
                            draw,
                            {
                                "type": "function_call",
                                "call_id": call_id,
                                "name": draw(names),
                                "arguments": _dump(draw, draw(json_objects)),
                            },
                            id=st.just(f"fc_{n_call}"),
                            status=_statuses,
                        )
                    )
                    output = draw(texts) if draw(st.booleans()) else _input_parts(draw, nonblank=False)
                    outputs.append({"type": "function_call_output", "call_id": call_id, "output": output})
                elif piece == "custom":
                    run.append(
                        {
                            "type": "custom_tool_call",
                            "call_id": call_id,
                            "name": draw(names),
                            "input": draw(texts),
                        }
                    )
                    outputs.append(
                        {"type": "custom_tool_call_output", "call_id": call_id, "output": draw(texts)}
                    )
                else:
                    run.append(
                        {
                            "type": "computer_call",
                            "id": f"cu_{n_call}",
                            "call_id": call_id,
                            "action": {"type": "click", "button": "left", "x": n_call, "y": 2},
                            "pending_safety_checks": [],
                            "status": "completed",
                        }
                    )
                    outputs.append(
                        {
                            "type": "computer_call_output",
                            "call_id": call_id,
                            "output": {
                                "type": "computer_screenshot",
                                "image_url": f"data:image/png;base64,{_PNG}",
                            },
                        }
                    )
            items += run
            items += draw(st.permutations(outputs))
        if draw(st.integers(0, 6)) == 0:
            n_call += 1
            items.append({"type": "compaction", "id": f"cmp_{n_call}", "encrypted_content": "enc"})
    return items


_responses_types = st.sampled_from(
    [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "computer_call",
        "computer_call_output",
        "web_search_call",
        "compaction",
        "future_item",
    ]
)
junk_responses_items = st.fixed_dictionaries(
    {"type": _mostly(_responses_types)},
    optional={
        "role": _mostly(st.sampled_from(["user", "assistant", "developer", "tool"])),
        "content": _mostly(
            _some_text
            | st.lists(
                st.fixed_dictionaries(
                    {"type": _mostly(st.sampled_from(["input_text", "output_text", "input_image"]))},
                    optional={"text": _some_text, "image_url": _some_text},
                ),
                max_size=3,
            )
        ),
        "call_id": _mostly(st.sampled_from(["c1", "c2", ""])),
        "name": _some_text,
        "arguments": _mostly(_some_text),
        "output": _mostly(_some_text),
        "input": _some_text,
        "id": _some_text,
        "summary": st.lists(json_junk, max_size=2),
    },
)
"""Near-valid Responses items: each field usually well-typed, sometimes junk, at every depth."""
