"""LangChain messages <-> canonical messages: lossless both ways, stable ids, clear errors, O(new) caching."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

import agentcontext as ac
from _sizes import examples
from agentcontext import ContextEngine, InvalidConversationError, InvalidMessageError, Message, ToolCall
from agentcontext.compaction import MessageKind, kind_of, marker
from agentcontext.formats import langchain as lc

# ----------------------------------------------------------------------------- strategies

_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40)
_key = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_key, inner, max_size=3),
    max_leaves=5,
)
_json_dict = st.dictionaries(_key, _json, max_size=3)
_ids = st.none() | st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)
_blocks = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, _text),
        st.builds(
            lambda u, d: {"type": "image_url", "image_url": {"url": "https://x.test/" + u, **d}},
            _key,
            st.sampled_from([{}, {"detail": "low"}, {"detail": "high"}]),
        ),
        st.builds(
            lambda t, a: {"type": "text", "text": t, "annotations": a}, _text, st.lists(_json, max_size=2)
        ),
        st.builds(lambda t: {"type": "reasoning", "reasoning": t}, _text),
        st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _text, _key),
        _text,
        st.builds(lambda d: {"type": "custom", "data": d}, _json_dict),
        st.builds(lambda b: {"type": "image", "base64": b, "mime_type": "image/png"}, _key),
    ),
    max_size=4,
)
_content = _text | _blocks


def _common(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "content": draw(_content),
        "id": draw(_ids),
        "name": draw(st.none() | _key),
        "additional_kwargs": draw(_json_dict),
        "response_metadata": draw(_json_dict),
    }


_calls = st.lists(st.tuples(_key, _key, _json_dict), max_size=3, unique_by=lambda c: c[0])
_invalid_calls = st.lists(
    st.tuples(
        st.none() | _key.map(lambda k: "bad-" + k), st.none() | _key, st.none() | _text, st.none() | _text
    ),
    max_size=2,
    unique_by=lambda c: c[0],
)
_usage = st.none() | st.builds(
    lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)


@st.composite
def lc_messages(draw: st.DrawFn) -> BaseMessage:
    kind = draw(st.sampled_from(["system", "human", "ai", "tool"]))
    fields = _common(draw)
    if kind == "system":
        return SystemMessage(**fields)
    if kind == "human":
        return HumanMessage(**fields)
    if kind == "tool":
        return ToolMessage(
            **fields,
            tool_call_id=draw(_key),
            status=draw(st.sampled_from(["success", "error"])),
            artifact=draw(st.none() | _json),
        )
    calls, invalid = draw(_calls), draw(_invalid_calls)
    return AIMessage(
        **fields,
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for i, n, a in calls],
        invalid_tool_calls=[
            {"name": n, "args": a, "id": i, "error": e, "type": "invalid_tool_call"} for i, n, a, e in invalid
        ],
        usage_metadata=draw(_usage),
    )


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(lc_messages(), max_size=6))
def test_langchain_to_canonical_and_back_is_identity(history: list[BaseMessage]) -> None:
    msgs = lc.to_messages(history)
    back = lc.from_messages(msgs, validate=False)
    assert back == history
    assert [type(b) for b in back] == [type(h) for h in history]
    # Converting the same history again gives the same ids (the engine's O(new) path and caches rely on it).
    assert [m.id for m in lc.to_messages(history)] == [m.id for m in msgs]
    assert len({m.id for m in msgs}) == len(msgs)


@settings(max_examples=examples(20), deadline=None)
@given(lc_messages(), st.sampled_from(list(MessageKind)), _json_dict)
def test_messages_agentcontext_wrote_come_back_identical(
    source: BaseMessage, kind: MessageKind, fields: Any
) -> None:
    # A message the engine wrote (a new one, or a changed copy of a LangChain message) survives the graph state.
    original = lc.to_message(source, index=0)
    written = original.evolve(metadata={"agentcontext": marker(kind, **fields)})
    again = lc.to_message(lc.from_message(written, mark=True), index=5, previous_id="other")
    assert again == written
    assert kind_of(again) == kind


def test_engine_written_messages_without_langchain_origin_round_trip() -> None:
    summary = Message(role="user", content="summary", metadata={"agentcontext": marker(MessageKind.SUMMARY)})
    call_only = Message(
        role="assistant", content=None, tool_calls=[ToolCall(id="c", name="f", arguments='{"a":1}')]
    )
    for m in (summary, call_only):
        out = lc.from_message(m)
        assert out.id == m.id  # RemoveMessage(id=...) finds it in the graph state
        assert lc.to_message(out, index=3, previous_id="x") == m


def test_content_blocks_keep_their_form_and_bill_their_text() -> None:
    blocks = [
        {"type": "text", "text": "plan", "annotations": [{"url": "https://a.test"}]},
        {"type": "reasoning", "reasoning": "think first"},
        {"type": "tool_use", "id": "c1", "name": "ls", "input": {"p": "/"}},
        {"type": "custom", "data": {"k": 1}},
    ]
    ai = AIMessage(blocks, tool_calls=[{"name": "ls", "args": {"p": "/"}, "id": "c1"}], id="a1")
    m = lc.to_message(ai, index=0)
    texts = [p.text for p in m.content]  # type: ignore[union-attr]
    assert texts == [
        "plan",
        "think first",
        '{"data":{"k":1},"type":"custom"}',
    ]  # the tool_use block is the call
    assert m.tool_calls[0].arguments == '{"p": "/"}'
    assert lc.from_message(m) == ai
    shortened = m.evolve(content="plan (shortened)")
    assert lc.from_message(shortened).content == "plan (shortened)"  # a rewrite is sent as rewritten


def test_invalid_tool_calls_are_calls_and_come_back_invalid() -> None:
    ai = AIMessage(
        "",
        tool_calls=[{"name": "ok", "args": {}, "id": "c1"}],
        invalid_tool_calls=[
            {"name": "bad", "args": "{oops", "id": "c2", "error": "bad json", "type": "invalid_tool_call"}
        ],
    )
    m = lc.to_message(ai, index=0)
    assert [c.id for c in m.tool_calls] == ["c1", "c2"]  # providers receive both and expect both answered
    assert lc.from_message(m) == ai


def test_id_follows_content_under_the_same_langchain_id() -> None:
    a = lc.to_message(ToolMessage("big output", tool_call_id="c", id="t1"), index=4)
    b = lc.to_message(ToolMessage("big output", tool_call_id="c", id="t1"), index=9, previous_id="x")
    c = lc.to_message(ToolMessage("[cleared]", tool_call_id="c", id="t1"), index=4)
    assert a.id == b.id  # position and neighbours do not matter
    assert a.id != c.id  # add_messages replaced the content under the same LangChain id


def test_stale_marker_is_kept_but_not_trusted() -> None:
    summary = Message(role="user", content="summary", metadata={"agentcontext": marker(MessageKind.SUMMARY)})
    edited = lc.from_message(summary).model_copy(update={"content": "edited by a user"})
    m = lc.to_message(edited, index=0)
    assert m.id != summary.id and kind_of(m) is None
    assert lc.from_message(m) == edited  # nothing lost


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("message", "field", "words"),
    [
        (AIMessageChunk(content="x"), "type", "message_chunk_to_message"),
        (
            ChatMessage(content="x", role="critic"),
            "type",
            "a ChatMessage's role must be one of",
        ),
        ({"role": "user", "content": "x"}, "type", "convert_to_messages"),
        (
            AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}]),
            "tool_calls[0].id",
            "non-empty string id",
        ),
        (ToolMessage("x", tool_call_id="c", artifact=Document(page_content="d")), "artifact", "JSON"),
        (HumanMessage("bad \ud800 text"), "content", "surrogate"),
    ],
)
def test_bad_input_names_the_message_and_field(message: Any, field: str, words: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        lc.to_messages([HumanMessage("hi"), message])
    assert info.value.index == 1
    assert field in str(info.value) and words in str(info.value)


def test_opaque_values_are_kept_and_put_back() -> None:
    doc = Document(page_content="retrieved")
    tool = ToolMessage("3 documents", tool_call_id="c", artifact=[doc], id="t")
    opaque: dict[str, object] = {}
    m = lc.to_message(tool, index=0, opaque=opaque)
    assert lc.from_message(m, opaque=opaque).artifact == [doc]
    masked = m.evolve(content="[masked]", metadata={"agentcontext": marker(MessageKind.MASKED)})
    assert (
        lc.from_message(masked, mark=True, opaque=opaque).artifact[0] is doc
    )  # a rewrite keeps the artifact


def test_what_langchain_cannot_carry_is_refused() -> None:
    from agentcontext import ImagePart

    sized = Message(role="user", content=(ImagePart(url="https://x.test/a.png", width=10, height=10),))
    with pytest.raises(InvalidMessageError, match="width or height"):
        lc.from_message(sized, index=2)
    foreign = Message(role="assistant", content="x", extra={"refusal": "no"})
    with pytest.raises(InvalidMessageError, match="refusal"):
        lc.from_message(foreign)
    with pytest.raises(InvalidConversationError):
        lc.from_messages([Message(role="tool", tool_call_id="nowhere", content="orphan")])


def test_chat_messages_and_plain_subclasses_convert_and_come_back_as_themselves() -> None:
    # LangChain and its chat models take a ChatMessage(role="user") or a subclass of HumanMessage; the
    # middleware refused both, saying the message "has no provider role".
    from langchain_core.messages import ChatMessage

    class Tagged(HumanMessage):
        pass

    class Rich(HumanMessage):
        tag: str = "x"

    history: list[BaseMessage] = [ChatMessage(role="user", content="hi", id="c1"), AIMessage("ok", id="a1")]
    history.append(Tagged("more", id="t1"))
    cache = lc.MessageCache()
    converted = cache.convert(history)
    assert [m.role for m in converted.messages] == ["user", "assistant", "user"]
    assert [cache.back(m) for m in converted.messages] == history  # unchanged: the very objects
    assert all(cache.back(m) is h for m, h in zip(converted.messages, history, strict=True))
    with pytest.raises(
        InvalidMessageError, match=r"message 0, field 'type': .*fields \['tag'\] would be lost"
    ):
        lc.MessageCache().convert([Rich("x")])


# ----------------------------------------------------------------------------- the cache


def _history(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage("start", id="u0")]
    for i in range(n):
        out.append(AIMessage("", tool_calls=[{"name": "run", "args": {"i": i}, "id": f"c{i}"}], id=f"a{i}"))
        out.append(ToolMessage(f"output {i}", tool_call_id=f"c{i}", id=f"t{i}"))
    return out


def test_cache_converts_only_new_messages() -> None:
    cache = lc.MessageCache()
    history = _history(200)
    system = SystemMessage("be brief")
    first = cache.convert(history[:101], system=system)
    assert first.converted == 102 and not first.appended
    for end in range(103, len(history) + 1, 2):
        step = cache.convert(list(history[:end]), system=system)  # a new list each step, as LangGraph makes
        assert step.appended and step.converted == 2
    assert [m.id for m in step.messages] == [m.id for m in lc.to_messages([system, *history])][:1] + [
        m.id for m in lc.to_messages(history)
    ]


def test_cache_reconverts_only_a_replaced_message() -> None:
    cache = lc.MessageCache()
    history = _history(50)
    before = cache.convert(history).messages[:]
    replaced = list(history)
    replaced[20] = ToolMessage("[cleared]", tool_call_id=history[20].tool_call_id, id=history[20].id)  # type: ignore[attr-defined]
    after = cache.convert(replaced)
    assert not after.appended and after.converted == 1
    assert [a.id == b.id for a, b in zip(before, after.messages, strict=True)].count(False) == 1


def test_cache_maps_back_to_the_same_objects() -> None:
    cache = lc.MessageCache()
    history = _history(5)
    ours = cache.convert(history).messages
    assert all(cache.back(m) is h for m, h in zip(ours, history, strict=True))
    summary = Message(role="user", content="summary", metadata={"agentcontext": marker(MessageKind.SUMMARY)})
    made = cache.back(summary)
    assert cache.back(summary) is made
    again = cache.convert([made, *history[3:]])  # the compacted history, as the graph state now holds it
    assert again.messages[0] == summary and again.converted == 0


def test_engine_output_survives_the_graph_state() -> None:
    # What mode="state" relies on: a compacted history written into the state comes back with the same ids,
    # so the engine recognises it and does not compact again.
    engine = ContextEngine(model="gpt-4o", window=2_000)
    cache = lc.MessageCache()
    history: list[BaseMessage] = [HumanMessage("audit the logs", id="u")]
    for i in range(12):
        history += [
            AIMessage("", tool_calls=[{"name": "read", "args": {"i": i}, "id": f"c{i}"}], id=f"a{i}"),
            ToolMessage(
                f"log {i}: " + "error at line 42 in parser.py " * 20, tool_call_id=f"c{i}", id=f"t{i}"
            ),
        ]
    first = engine.prepare(cache.convert(history).messages)
    assert first.report.compacted
    state = [cache.back(m) for m in first.messages]
    again = engine.prepare(lc.to_messages(state), state=first.state)
    assert [m.id for m in again.messages] == [m.id for m in first.messages]
    assert not again.report.compacted and again.report.incremental


def test_a_message_with_a_file_the_engine_cut_comes_back_with_its_id_and_record() -> None:
    # File blocks were never exact parts: a cut tool result holding a PDF came back from a fresh
    # conversion with a new id and no metadata (images did not), and the engine took it for a new message.
    import base64

    from agentcontext.truncation import ObservationTruncator, truncate_message

    pdf = base64.b64encode(b"%PDF-1.4 1 0 obj << /Type /Page >> endobj").decode()
    history = [
        HumanMessage("read it", id="h1"),
        AIMessage("", tool_calls=[{"name": "fetch", "args": {}, "id": "c1"}], id="a1"),
        ToolMessage(
            [
                {"type": "text", "text": "\n".join(f"line {i}" for i in range(5000))},
                {
                    "type": "file",
                    "base64": pdf,
                    "mime_type": "application/pdf",
                    "extras": {"filename": "r.pdf"},
                },
            ],
            tool_call_id="c1",
            id="t1",
        ),
    ]
    msgs = lc.to_messages(history)
    assert lc.from_messages(msgs) == history
    cut, _ = truncate_message(msgs[2], ObservationTruncator(max_bytes=2_000))
    again = lc.to_message(lc.from_message(cut, mark=True), index=2, previous_id=msgs[1].id)
    assert again.id == cut.id and again.metadata == cut.metadata and again.files == msgs[2].files


def test_files_in_every_shape_langchain_forwards_are_counted_as_their_own_format_counts_them() -> None:
    import base64

    from langchain_core.messages import content as blocks

    from agentcontext.formats import anthropic, responses

    counter = ac.counter_for("gpt-4o")

    def count(block: dict[str, Any]) -> int:
        return counter.count_message(lc.to_messages([HumanMessage([block], id="h")])[0])

    text = "The quarterly report shows revenue growth across all regions. " * 400
    b64 = base64.b64encode(text.encode()).decode()
    # LangChain's text-plain block with base64 is its text, not its base64.
    assert count(blocks.create_plaintext_block(base64=b64, mime_type="text/plain")) == count(
        blocks.create_file_block(base64=b64, mime_type="text/plain")
    )
    document = {"type": "document", "source": {"type": "file", "file_id": "file_011"}}
    assert count(document) == counter.count_message(
        anthropic.to_messages([{"role": "user", "content": [document]}])[0]
    )
    pdf = b"%PDF-1.4\n" + b"".join(b"%d 0 obj << /Type /Page >> endobj\n" % i for i in range(30))
    item = {"type": "input_file", "filename": "r.pdf", "file_data": base64.b64encode(pdf).decode()}
    assert count(item) == counter.count_message(
        responses.to_messages([{"role": "user", "content": [item]}])[0]
    )
    # A text file the engine wrote goes out as base64, which LangChain's OpenAI converter takes (not a data: URL).
    from langchain_openai.chat_models.base import _convert_message_to_dict

    from agentcontext import FilePart

    written = lc.from_message(
        Message(role="user", content=(FilePart(url="data:text/plain,hi%20there", name="n.txt"),))
    )
    assert _convert_message_to_dict(written)["content"][0]["type"] == "file"
