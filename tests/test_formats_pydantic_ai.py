"""Pydantic AI message history <-> canonical: the exact round trip, stable ids, marked messages, clear errors."""

from __future__ import annotations

import dataclasses
import json
import warnings
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pydantic_ai")

from pydantic_ai import PydanticAIDeprecationWarning
from pydantic_ai import messages as pm

import agentcontext as ac
from _sizes import examples
from agentcontext import ContextEngine
from agentcontext.compaction import MessageKind, marker
from agentcontext.exceptions import InvalidMessageError
from agentcontext.formats import pydantic_ai as pai
from agentcontext.messages import FilePart, ImagePart, Message, TextPart, ToolCall

TA = pm.ModelMessagesTypeAdapter
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
PDF_2_PAGES = b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n2 0 obj << /Type /Page >> endobj\n%%EOF\n"
WHEN = datetime(2025, 1, 2, 3, 4, 5, 678_000, tzinfo=timezone.utc)


# The release installed beside openai<3 (2.31) lacks these; the round trip is tested on what it has.
HAS_RETRY_FEEDBACK = hasattr(pm, "RetryFeedbackPart")
SYSTEM_METADATA = "metadata" in {f.name for f in dataclasses.fields(pm.SystemPromptPart)}
COMPACTION_IN_REQUESTS = "CompactionPart" in str(pm.ModelRequestPart)  # a response part in 2.31


def loaded(history: list[Any]) -> list[Any]:
    """The history as Pydantic AI loads it back from JSON (its own normal form)."""
    return TA.validate_json(TA.dump_json(history))


def shape(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in messages]


# ----------------------------------------------------------------------------- histories


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
names = st.sampled_from(["ls", "read", "grep", "run_tests"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=6,
)
metadata = st.none() | st.dictionaries(st.sampled_from(["app", "tag"]), texts, max_size=2)


@st.composite
def user_parts(draw: Any) -> pm.UserPromptPart:
    if draw(st.booleans()):
        return pm.UserPromptPart(draw(texts), timestamp=WHEN)
    items = draw(
        st.lists(
            st.one_of(
                texts,
                st.builds(pm.TextContent, texts, metadata=metadata),
                st.builds(
                    pm.ImageUrl,
                    st.sampled_from(["https://example.com/a.png", "https://example.com/b.jpg"]),
                    vendor_metadata=st.none() | st.just({"detail": "low"}),
                ),
                st.just(pm.BinaryContent(PNG, media_type="image/png")),
                st.just(pm.CachePoint()),
            ),
            min_size=1,
            max_size=4,
        )
    )
    return pm.UserPromptPart(items, timestamp=WHEN)


@st.composite
def histories(draw: Any) -> list[Any]:
    """A Pydantic AI history: system and user parts, tool rounds, retries, thinking, part-less requests."""
    history: list[Any] = []
    first: list[Any] = []
    if draw(st.booleans()):
        meta = {"metadata": draw(metadata)} if SYSTEM_METADATA else {}
        first.append(pm.SystemPromptPart(draw(texts), timestamp=WHEN, **meta))
    first.append(draw(user_parts()))
    history.append(
        pm.ModelRequest(parts=first, timestamp=WHEN, instructions=draw(st.none() | texts), run_id="run-1")
    )
    call = 0
    for _ in range(draw(st.integers(0, 4))):
        parts: list[Any] = []
        if draw(st.booleans()):
            parts.append(pm.ThinkingPart(draw(texts), signature=draw(st.none() | texts)))
        for _ in range(draw(st.integers(0, 2))):
            parts.append(pm.TextPart(draw(texts)))
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            call += 1
            args = draw(
                st.none()
                | st.dictionaries(st.sampled_from(["path", "n"]), json_values, max_size=2)
                | st.just('{"path": "/tmp"}')
            )
            calls.append(pm.ToolCallPart(draw(names), args, tool_call_id=f"call_{call}"))
        parts.extend(calls)
        history.append(
            pm.ModelResponse(
                parts=parts,
                model_name=draw(st.none() | st.just("gpt-4o")),
                usage=pm.RequestUsage(input_tokens=draw(st.integers(0, 9)), output_tokens=2),
                timestamp=WHEN,
                provider_name=draw(st.none() | st.just("openai")),
                metadata=draw(metadata),
            )
        )
        answers: list[Any] = []
        for c in calls:
            kind = draw(st.sampled_from(["ok", "value", "failed"]))
            if kind == "ok":
                answers.append(
                    pm.ToolReturnPart(
                        c.tool_name,
                        draw(texts),
                        tool_call_id=c.tool_call_id,
                        timestamp=WHEN,
                        metadata=draw(metadata),
                    )
                )
            elif kind == "value":
                answers.append(
                    pm.ToolReturnPart(
                        c.tool_name, draw(json_values), tool_call_id=c.tool_call_id, timestamp=WHEN
                    )
                )
            else:
                answers.append(
                    pm.ToolReturnPart(
                        c.tool_name,
                        draw(texts),
                        tool_call_id=c.tool_call_id,
                        timestamp=WHEN,
                        outcome="failed",
                    )
                )
        kinds: list[Any] = [user_parts()]
        if COMPACTION_IN_REQUESTS:
            kinds.append(st.builds(pm.CompactionPart, st.none() | texts))
        if HAS_RETRY_FEEDBACK:
            kinds.append(
                st.builds(
                    pm.RetryFeedbackPart,
                    texts,
                    retry=st.just(pm.RetryInfo(cause="model_retry")),
                    timestamp=st.just(WHEN),
                )
            )
        extra = draw(st.lists(st.one_of(*kinds), max_size=2))
        history.append(pm.ModelRequest(parts=[*answers, *extra], timestamp=WHEN))
        if draw(st.booleans()):
            history.append(pm.ModelRequest(parts=[], instructions=draw(texts)))
    return loaded(history)


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_history_round_trips_exactly(history: list[Any]) -> None:
    msgs = pai.to_messages(history)
    assert pai.from_messages(msgs) == history
    # The same history gives the same ids (and the extra Pydantic AI needs, once read).
    again = pai.to_messages(history)
    assert [m.id for m in again] == [m.id for m in msgs]
    assert again == msgs


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_round_trip_through_model_messages_json(history: list[Any]) -> None:
    msgs = pai.to_messages(history)
    stored = TA.dump_json(pai.from_messages(msgs))
    back = pai.to_messages(TA.validate_json(stored))
    assert [m.id for m in back] == [m.id for m in msgs]
    assert shape(back) == shape(msgs)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.data())
def test_messages_agentcontext_wrote_keep_their_id_and_metadata(
    history: list[Any], data: st.DataObject
) -> None:
    msgs = pai.to_messages(history)
    edited: list[Message] = []
    for m in msgs:
        if m.role == "tool" and data.draw(st.booleans()):
            m = m.evolve(
                content=f"[masked: {len(m.text)} chars]",
                metadata={"agentcontext": marker(MessageKind.MASKED, original_id=m.id, ref="r1")},
            )
        elif m.role == "assistant" and m.tool_calls and data.draw(st.booleans()):
            calls = tuple(dataclasses.replace(c, arguments='{"path": "[shortened]"}') for c in m.tool_calls)
            m = m.evolve(tool_calls=calls, metadata={"agentcontext": marker(MessageKind.ARGUMENTS_SHORTENED)})
        edited.append(m)
    at = next(i for i, m in enumerate(edited) if m.role != "system")
    summary = Message(
        role="user", content="what happened so far", metadata={"agentcontext": marker(MessageKind.SUMMARY)}
    )
    ack = Message(
        role="assistant", content="Understood.", metadata={"agentcontext": marker(MessageKind.SUMMARY_ACK)}
    )
    edited[at:at] = [summary, ack]
    back = pai.to_messages(TA.validate_json(TA.dump_json(pai.from_messages(edited))))
    assert shape(back) == shape(edited)
    for before, after in zip(edited, back, strict=True):
        if before.metadata:
            assert (after.id, after.metadata) == (before.id, before.metadata)
        else:
            assert not after.metadata


def test_content_forms_and_fields() -> None:
    history = loaded(
        [
            pm.ModelRequest(
                parts=[
                    pm.SystemPromptPart("Be brief."),
                    pm.UserPromptPart(
                        ["Look:", pm.ImageUrl("https://x.test/a.png", vendor_metadata={"detail": "low"})]
                    ),
                ],
                instructions="Answer in English.",
            ),
            pm.ModelResponse(
                parts=[
                    pm.ThinkingPart("let me look", signature="sig"),
                    pm.TextPart("One moment."),
                    pm.ToolCallPart("ls", {"path": "/tmp"}, tool_call_id="c1"),
                    pm.ToolCallPart("cat", '{"f": "a"}', tool_call_id="c2"),
                ],
                model_name="gpt-4o",
                usage=pm.RequestUsage(input_tokens=12, output_tokens=3),
            ),
            pm.ModelRequest(
                parts=[
                    pm.ToolReturnPart("ls", ["a.txt", "b.txt"], tool_call_id="c1"),
                    pm.ToolReturnPart("cat", "boom", tool_call_id="c2", outcome="failed"),
                ]
            ),
        ]
    )
    msgs = pai.to_messages(history)
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
    assert msgs[0].content == "Be brief."
    assert msgs[1].content == (TextPart(text="Look:"), ImagePart(url="https://x.test/a.png", detail="low"))
    assert msgs[2].content == "One moment."
    assert msgs[2].tool_calls == (
        ToolCall(id="c1", name="ls", arguments='{"path":"/tmp"}'),
        ToolCall(id="c2", name="cat", arguments='{"f": "a"}'),
    )
    # A tool message shows the model's text: JSON for a value, the error wrapper for a failure.
    assert (msgs[3].tool_call_id, msgs[3].name, msgs[3].content) == ("c1", "ls", '["a.txt","b.txt"]')
    assert msgs[4].content == '{"error":"boom"}'
    # What the canonical message does not model is kept in extra, not repeated.
    layout = msgs[2].extra["pydantic_ai"]
    assert layout["message"]["model_name"] == "gpt-4o"
    assert layout["parts"][0]["content"] == "let me look"
    assert "content" not in layout["parts"][1]
    assert msgs[0].extra["pydantic_ai"]["message"]["instructions"] == "Answer in English."
    assert pai.from_messages(msgs) == history


def test_several_text_parts_and_none() -> None:
    history = loaded(
        [
            pm.ModelRequest(parts=[pm.UserPromptPart("hi")]),
            pm.ModelResponse(parts=[pm.TextPart("a"), pm.TextPart("b")]),
            pm.ModelRequest(parts=[pm.UserPromptPart("go")]),
            pm.ModelResponse(parts=[pm.ToolCallPart("ls", None, tool_call_id="c1")]),
            pm.ModelRequest(parts=[pm.ToolReturnPart("ls", None, tool_call_id="c1")]),
        ]
    )
    msgs = pai.to_messages(history)
    assert msgs[1].content == (TextPart(text="a"), TextPart(text="b"))
    assert msgs[3].content is None and msgs[3].tool_calls[0].arguments == "{}"
    assert msgs[4].content == ""
    assert pai.from_messages(msgs) == history


def test_deprecated_retry_prompt_comes_back_as_itself() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PydanticAIDeprecationWarning)
        tool_retry = pm.RetryPromptPart("wrong path", tool_name="ls", tool_call_id="c1", timestamp=WHEN)
        plain_retry = pm.RetryPromptPart("answer in JSON", tool_call_id="r2", timestamp=WHEN)
    history = [
        pm.ModelRequest(parts=[pm.UserPromptPart("hi", timestamp=WHEN)]),
        pm.ModelResponse(parts=[pm.ToolCallPart("ls", {"p": 1}, tool_call_id="c1")], timestamp=WHEN),
        pm.ModelRequest(parts=[tool_retry, plain_retry]),
    ]
    msgs = pai.to_messages(history)
    assert (msgs[2].role, msgs[2].tool_call_id, msgs[2].name) == ("tool", "c1", "ls")
    assert msgs[3].role == "user" and "answer in JSON" in msgs[3].text
    back = pai.from_messages(msgs)
    assert back == history
    assert type(back[2].parts[0]) is pm.RetryPromptPart


def test_partless_messages_travel_with_their_neighbour() -> None:
    history = loaded(
        [
            pm.ModelRequest(parts=[], instructions="first"),
            pm.ModelRequest(parts=[pm.UserPromptPart("hi")]),
            pm.ModelResponse(parts=[pm.ThinkingPart("only thinking")]),
            pm.ModelResponse(parts=[pm.TextPart("hello")]),
            pm.ModelRequest(parts=[], instructions="last"),
        ]
    )
    msgs = pai.to_messages(history)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert pai.from_messages(msgs) == history


def test_extra_describes_the_message_as_it_was_converted() -> None:
    request = pm.ModelRequest(parts=[pm.UserPromptPart("hi", timestamp=WHEN)], timestamp=WHEN)
    msgs = pai.to_messages([request])
    # Pydantic AI adds parts to the current request after the hooks ran; extra is read later.
    request.parts = [*request.parts, pm.SystemPromptPart("added later", timestamp=WHEN)]
    back = pai.from_messages(msgs)
    assert back[0].parts == [pm.UserPromptPart("hi", timestamp=WHEN)]


def test_only_partless_messages_is_an_error() -> None:
    with pytest.raises(InvalidMessageError, match="none of the 1 messages has a part the model reads"):
        pai.to_messages([pm.ModelRequest(parts=[], instructions="x")])
    assert pai.to_messages([]) == []


# ----------------------------------------------------------------------------- ids


def test_ids_change_with_content_and_chain() -> None:
    def history(answer: str) -> list[Any]:
        return [
            pm.ModelRequest(parts=[pm.UserPromptPart("q", timestamp=WHEN)]),
            pm.ModelResponse(parts=[pm.ToolCallPart("ls", {}, tool_call_id="c1")], timestamp=WHEN),
            pm.ModelRequest(parts=[pm.ToolReturnPart("ls", answer, tool_call_id="c1", timestamp=WHEN)]),
            pm.ModelResponse(parts=[pm.TextPart("done")], timestamp=WHEN),
        ]

    a, b = pai.to_messages(history("x")), pai.to_messages(history("y"))
    assert [m.id for m in a[:2]] == [m.id for m in b[:2]]
    assert a[2].id != b[2].id and a[3].id != b[3].id  # and everything after the change
    assert len({m.id for m in a}) == len(a)


def test_a_marker_edited_since_is_not_trusted() -> None:
    summary = Message(role="user", content="summary", metadata={"agentcontext": marker(MessageKind.SUMMARY)})
    history = pai.from_messages([summary])
    history[0].parts[0].content[0].content = "edited by hand"
    back = pai.to_messages(history)
    assert back[0].id != summary.id and not back[0].metadata
    # ...and the marker is kept where it was, so nothing is lost on the way back.
    assert pai.from_messages(back) == history


# ----------------------------------------------------------------------------- changed and new messages


def test_engine_changes_keep_the_other_fields() -> None:
    history = loaded(
        [
            pm.ModelRequest(parts=[pm.UserPromptPart("q", timestamp=WHEN)]),
            pm.ModelResponse(
                parts=[pm.ToolCallPart("write", {"text": "x" * 500}, tool_call_id="c1")],
                model_name="m",
                timestamp=WHEN,
            ),
            pm.ModelRequest(
                parts=[
                    pm.ToolReturnPart(
                        "write", "y" * 500, tool_call_id="c1", timestamp=WHEN, metadata={"k": 1}
                    )
                ]
            ),
        ]
    )
    msgs = pai.to_messages(history)
    masked = msgs[2].evolve(content="[masked]", metadata={"agentcontext": marker(MessageKind.MASKED)})
    short = msgs[1].evolve(
        tool_calls=(ToolCall(id="c1", name="write", arguments='{"text": "x…"}'),),
        metadata={"agentcontext": marker(MessageKind.ARGUMENTS_SHORTENED)},
    )
    back = pai.from_messages([msgs[0], short, masked])
    response, request = back[1], back[2]
    assert response.model_name == "m" and response.timestamp == WHEN
    assert response.parts[0].args == '{"text": "x…"}' and response.parts[0].tool_call_id == "c1"
    part = request.parts[0]
    assert (part.content, part.tool_name, part.tool_call_id, part.timestamp) == (
        "[masked]",
        "write",
        "c1",
        WHEN,
    )
    assert part.metadata["k"] == 1 and part.metadata["agentcontext"]["id"] == masked.id


def test_messages_the_engine_wrote_get_parts_of_their_own() -> None:
    history = loaded(
        [
            pm.ModelRequest(parts=[pm.SystemPromptPart("sys"), pm.UserPromptPart("task")]),
            pm.ModelResponse(parts=[pm.ToolCallPart("ls", {}, tool_call_id="c1")]),
        ]
    )
    msgs = pai.to_messages(history)
    stub = Message(
        role="tool",
        tool_call_id="c1",
        content="[no result]",
        metadata={"agentcontext": marker(MessageKind.STUB_RESULT, tool="ls")},
    )
    back = pai.from_messages([*msgs, stub])
    assert back[:2] == history
    assert isinstance(back[2], pm.ModelRequest)
    part = back[2].parts[0]
    assert isinstance(part, pm.ToolReturnPart)
    assert (part.tool_name, part.tool_call_id, part.content) == ("ls", "c1", "[no result]")


def test_a_real_engine_output_converts_back_and_is_valid() -> None:
    history: list[Any] = [pm.ModelRequest(parts=[pm.SystemPromptPart("sys"), pm.UserPromptPart("task")])]
    for i in range(40):
        history.append(pm.ModelResponse(parts=[pm.ToolCallPart("read", {"n": i}, tool_call_id=f"c{i}")]))
        history.append(
            pm.ModelRequest(parts=[pm.ToolReturnPart("read", f"line {i} " * 200, tool_call_id=f"c{i}")])
        )
    engine = ContextEngine(model="gpt-4o", window=8_000, reserve=1_000)
    prepared = engine.prepare(pai.to_messages(loaded(history)))
    assert prepared.report.level.label != "none"
    out = pai.from_messages(prepared.messages)
    back = pai.to_messages(TA.validate_json(TA.dump_json(out)))
    assert shape(back) == shape(list(prepared.messages))
    assert [m.id for m in back if m.metadata] == [m.id for m in prepared.messages if m.metadata]
    assert isinstance(out[0].parts[0], pm.SystemPromptPart)


# ----------------------------------------------------------------------------- what is passed through


def test_documents_audio_and_uploaded_files_are_counted_as_files() -> None:
    pdf = pm.BinaryContent(PDF_2_PAGES, media_type="application/pdf")
    doc, audio = pm.DocumentUrl("https://x.test/report.pdf"), pm.AudioUrl("https://x.test/call.mp3")
    uploaded = pm.UploadedFile("file-abc", "openai", media_type="application/pdf")
    history = [
        pm.ModelRequest(
            parts=[
                pm.UserPromptPart(["Summarize:", pdf, doc, audio, uploaded, pm.CachePoint()], timestamp=WHEN)
            ]
        )
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is "passed through, not counted" any more
        msgs = pai.to_messages(history)
    assert msgs[0].content == (
        TextPart(text="Summarize:"),
        FilePart(url=pdf.data_uri, media_type="application/pdf"),
        FilePart(url="https://x.test/report.pdf", media_type="application/pdf"),
        FilePart(url="https://x.test/call.mp3", media_type="audio/mpeg"),
        FilePart(url="openai-file-id:file-abc", media_type="application/pdf"),
        TextPart(text=""),
    )
    assert pai.from_messages(msgs) == history
    # The two-page PDF costs two pages; the files by URL or id, which are not here, one page each.
    counter = ac.counter_for("gpt-4o")
    bare = counter.count_message(msgs[0].evolve(content=(TextPart(text="Summarize:"), TextPart(text=""))))
    assert counter.count_message(msgs[0]) == bare + 2 * 3_000 + 3 * 3_000
    # The engine rewrote the text and dropped a file: the others stay, as they were; the CachePoint too.
    shortened = msgs[0].evolve(content=(TextPart(text="Summ…"), *msgs[0].content[1:3]))
    items = pai.from_messages([shortened])[0].parts[0].content
    assert items == ["Summ…", pdf, doc, pm.CachePoint()]


def test_files_a_tool_returns_are_counted_with_its_result_and_go_when_it_is_masked() -> None:
    # Pydantic AI sends what a tool returned as files in a user message after the results: a dozen
    # screenshots or PDF pages went uncounted, and the provider refused the request.
    shot = pm.BinaryContent(PNG, media_type="image/png")
    page = pm.BinaryContent(PDF_2_PAGES, media_type="application/pdf")
    history = loaded(
        [
            pm.ModelRequest(parts=[pm.UserPromptPart("Read the report.", timestamp=WHEN)]),
            pm.ModelResponse(parts=[pm.ToolCallPart("open", {}, tool_call_id="c1")], timestamp=WHEN),
            pm.ModelRequest(
                parts=[pm.ToolReturnPart("open", ["opened", shot, page], tool_call_id="c1", timestamp=WHEN)]
            ),
        ]
    )
    msgs = pai.to_messages(history)
    tool = msgs[2]
    assert tool.role == "tool" and [type(p) for p in tool.content] == [TextPart, ImagePart, FilePart]
    assert "opened" in tool.text and tool.files[0].media_type == "application/pdf"
    assert pai.from_messages(msgs) == history
    counter = ac.counter_for("gpt-4o")
    assert counter.count_message(tool) > 2 * 3_000  # the PDF's two pages, and the screenshot
    # Masked, the result is its placeholder alone: the files go with the output they were part of.
    masked = pai.from_messages([*msgs[:2], tool.evolve(content="[output masked]")])
    assert masked[2].parts[0].content == "[output masked]"
    # Shortened, the text is cut and the files it still holds are the ones the tool returned.
    cut = pai.from_messages([*msgs[:2], tool.evolve(content=(TextPart(text="open…"), tool.content[2]))])
    assert cut[2].parts[0].content == ["open…", page]


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("history", "match"),
    [
        ("not a list", "expected a list of ModelRequest"),
        (
            [{"kind": "request", "parts": []}],
            "message 0: expected a ModelRequest or ModelResponse, got an object",
        ),
        (
            [
                pm.ModelRequest(parts=[pm.UserPromptPart("ok")]),
                pm.ModelRequest(parts=[pm.SystemPromptPart(7)]),
            ],  # type: ignore[arg-type]
            r"message 1, field 'parts\[0\].content': expected a string, got a number",
        ),
        (
            [pm.ModelRequest(parts=[pm.UserPromptPart("bad \ud800 text")])],
            r"message 0, field 'parts\[0\].content'.*lone UTF-16 surrogate",
        ),
        (
            [pm.ModelRequest(parts=[pm.ToolReturnPart("ls", "x", tool_call_id="")])],
            r"message 0, field 'parts\[0\].tool_call_id'",
        ),
    ],
)
def test_bad_input_names_the_message_and_field(history: Any, match: str) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        pai.to_messages(history)


def test_bad_extra_and_images_where_pydantic_ai_has_none() -> None:
    broken = Message(role="user", content="x", extra={"pydantic_ai": {"parts": "nope"}})
    with pytest.raises(InvalidMessageError, match=r"message 0, field 'extra.pydantic_ai'"):
        pai.from_messages([broken])
    image = Message(role="system", content=(ImagePart(url="https://x.test/a.png"),))
    with pytest.raises(InvalidMessageError, match="message 0.*only in user messages and tool returns"):
        pai.from_messages([image])
    file = Message(role="assistant", content=(FilePart(url="https://x.test/a.pdf"),))
    with pytest.raises(InvalidMessageError, match="message 0.*no images or files"):
        pai.from_messages([file])


def test_extra_is_plain_json() -> None:
    history = loaded(
        [
            pm.ModelRequest(
                parts=[pm.UserPromptPart(["see", pm.BinaryContent(PNG, media_type="image/png")])]
            ),
            pm.ModelResponse(parts=[pm.TextPart("ok")], usage=pm.RequestUsage(input_tokens=1)),
        ]
    )
    msgs = pai.to_messages(history)
    text = json.dumps([dict(m.extra) for m in msgs])
    assert "pydantic_ai" in text


@pytest.mark.parametrize(
    "part",
    [
        pm.ThinkingPart(content="check a.py before b.py " * 100, signature="sig", provider_name="anthropic"),
        pm.ThinkingPart(
            id="redacted_thinking", content="", signature="RW5jcnlwdGVk" * 300, provider_name="anthropic"
        ),
        pm.ThinkingPart(
            id="reasoning_content", content="check a.py before b.py " * 100, provider_name="openai"
        ),
    ],
)
def test_thinking_parts_are_counted_since_pydantic_ai_sends_them_back(part: pm.ThinkingPart) -> None:
    from agentcontext.tokens import TiktokenCounter

    counter = TiktokenCounter("o200k_base")
    call = pm.ToolCallPart(tool_name="read", args={"path": "a.py"}, tool_call_id="c1")
    (bare,) = pai.to_messages([pm.ModelResponse(parts=[call])])
    (thought,) = pai.to_messages([pm.ModelResponse(parts=[part, call])])
    assert counter.count_message(thought) - counter.count_message(bare) >= 500
    # Counted as long as it goes back: the thinking part is written back with a message the engine changed.
    changed = thought.evolve(tool_calls=(ToolCall(id="c1", name="read", arguments="{}"),))
    assert counter.count_message(changed) - counter.count_message(bare) >= 500
    (back,) = pai.from_messages([changed])
    assert isinstance(back, pm.ModelResponse) and back.parts[0] == part


def test_a_message_logged_before_thinking_was_counted_is_the_same_message() -> None:
    # A session written by the previous version holds this message's extra without "reasoning"
    # (the ids leave it out): the same history appended again was refused as "a different message".
    from agentcontext import _serde

    part = pm.ThinkingPart(content="two plus two is four " * 20, signature="sig", provider_name="anthropic")
    (now,) = pai.to_messages([pm.ModelResponse(parts=[part, pm.TextPart(content="4")])])
    assert "reasoning" in now.extra
    logged = _serde.encode_message(now)
    del logged["extra"]["reasoning"]  # type: ignore[index, union-attr]
    before = _serde.decode_message(logged, where="the log")
    assert before == now and now == before
    assert before != dataclasses.replace(now, content="5")
