"""OpenAI Chat Completions <-> canonical: the exact round trip, ids, clear errors, real logs."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentcontext as ac
from _sizes import examples
from agentcontext.exceptions import InvalidConversationError, InvalidMessageError
from agentcontext.formats import openai as oai
from agentcontext.messages import FilePart, ImagePart, Message, TextPart, ToolCall
from realdata import conversation_files, load
from strategies import canonical_conversations, json_junk, junk_openai_dicts, openai_conversations

CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/tmp"}'}}


def strip_ids(messages: list[Message]) -> list[Message]:
    return [dataclasses.replace(m, id="-") for m in messages]


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(openai_conversations())
def test_openai_dicts_round_trip_exactly(dicts: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(dicts)
    msgs = oai.to_messages(dicts)
    assert oai.from_messages(msgs) == dicts
    assert dicts == before  # the input is not mutated


@settings(max_examples=examples(80), deadline=None)
@given(canonical_conversations())
def test_canonical_messages_round_trip_through_openai(msgs: list[Message]) -> None:
    back = oai.to_messages(oai.from_messages(msgs))
    # Canonical metadata (agentcontext's own annotations) is never sent to a provider.
    assert strip_ids(back) == [dataclasses.replace(m, id="-", metadata={}) for m in msgs]


def test_content_keeps_its_form() -> None:
    dicts = [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
    ]
    msgs = oai.to_messages(dicts)
    assert msgs[0].content == "plain"
    assert msgs[1].content == (TextPart(text="parts"),)
    assert msgs[2].content is None
    assert msgs[3].content == ""
    assert oai.from_messages(msgs, validate=False) == dicts


def test_images_keep_their_url_and_detail() -> None:
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}
    [m] = oai.to_messages([{"role": "user", "content": [part, {"type": "text", "text": "what is this?"}]}])
    assert m.content == (
        ImagePart(url="data:image/png;base64,AAAA", detail="low"),
        TextPart(text="what is this?"),
    )
    assert oai.from_message(m)["content"] == [part, {"type": "text", "text": "what is this?"}]


def test_extra_keys_and_developer_role_come_back_verbatim() -> None:
    dicts = [
        {"role": "developer", "content": "rules", "name": "ops"},
        {"role": "user", "content": "hi", "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "refusal": "no",
            "reasoning_content": "因为",
            "audio": {"id": "a1"},
        },
    ]
    msgs = oai.to_messages(dicts)
    assert msgs[0].role == "system" and dict(msgs[0].extra) == {"role": "developer"}
    assert dict(msgs[2].extra) == {"refusal": "no", "reasoning_content": "因为", "audio": {"id": "a1"}}
    assert oai.from_messages(msgs, validate=False) == dicts


def test_tool_messages_keep_their_name_and_arguments_stay_verbatim() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{not json"}}
    dicts = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "x", "name": "ls"},
    ]
    msgs = oai.to_messages(dicts)
    assert msgs[1].tool_calls == (ToolCall(id="c1", name="ls", arguments="{not json"),)
    assert msgs[2].name == "ls"
    assert oai.from_messages(msgs) == dicts


def test_absent_content_and_null_fields_read_as_absent() -> None:
    [m] = oai.to_messages([{"role": "assistant", "tool_calls": [CALL], "name": None}])
    assert m.content is None and m.name is None
    # Written back the way the API returns it: with content null.
    assert oai.from_message(m) == {"role": "assistant", "content": None, "tool_calls": [CALL]}
    [m] = oai.to_messages([{"role": "assistant", "content": "x", "tool_calls": None}])
    assert m.tool_calls == ()


def test_output_shares_nothing_with_the_messages() -> None:
    [m] = oai.to_messages([{"role": "assistant", "content": "x", "audio": {"id": "a1", "list": [1]}}])
    out = oai.from_message(m)
    out["audio"]["list"].append(2)  # type: ignore[typeddict-item]
    assert m.extra["audio"] == {"id": "a1", "list": [1]}


def test_input_dicts_are_not_aliased() -> None:
    d = {"role": "assistant", "content": "x", "audio": {"id": "a1"}}
    [m] = oai.to_messages([d])
    d["audio"]["id"] = "changed"  # type: ignore[index]
    assert m.extra["audio"] == {"id": "a1"}


# ----------------------------------------------------------------------------- ids


def test_ids_are_deterministic_and_name_the_prefix() -> None:
    a = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "3"},
    ]
    b = [*a[:2], {"role": "user", "content": "three"}]
    ids_a = [m.id for m in oai.to_messages(a)]
    assert ids_a == [m.id for m in oai.to_messages(a)]
    ids_b = [m.id for m in oai.to_messages(b)]
    assert ids_a[:2] == ids_b[:2] and ids_a[2] != ids_b[2]
    # The same message after a different history gets a different id.
    assert oai.to_messages(a[1:])[0].id != ids_a[1]
    assert len(set(ids_a)) == 3


def test_key_order_does_not_change_ids() -> None:
    (first,) = oai.to_messages([{"role": "user", "content": "x", "name": "n"}])
    (second,) = oai.to_messages([{"name": "n", "content": "x", "role": "user"}])
    assert first.id == second.id
    assert (
        oai.to_message({"role": "user", "content": "x"}, previous_id=first.id).id
        == oai.to_message({"content": "x", "role": "user"}, previous_id=first.id).id
    )


def test_messages_converted_on_their_own_get_distinct_ids() -> None:
    # An agent loop appends replies one at a time; two identical replies must not share an id.
    a = oai.to_message({"role": "assistant", "content": "ok"})
    b = oai.to_message({"role": "assistant", "content": "ok"})
    assert a.id != b.id and a == b.evolve(id=a.id)


def test_from_messages_writes_no_ids_or_metadata() -> None:
    m = Message(role="user", content="x", metadata={"summary": True})
    assert oai.from_message(m) == {"role": "user", "content": "x"}


# ----------------------------------------------------------------------------- errors


BAD: list[tuple[object, int | None, str | None, str]] = [
    ("not a dict", 0, None, "expected a message dict"),
    ({"content": "x"}, 0, "role", "missing 'role'"),
    ({"role": "robot", "content": "x"}, 0, "role", "unknown role 'robot'"),
    ({"role": "function", "name": "f", "content": "x"}, 0, "role", "tool messages"),
    ({"role": 3, "content": "x"}, 0, "role", "unknown role 3"),
    ({"role": "user", "content": 5}, 0, "content", "a string, a list of parts or null, got a number"),
    ({"role": "user", "content": None}, 0, "content", "use '' for nothing"),
    ({"role": "user"}, 0, "content", "missing 'content'"),
    ({"role": "tool", "content": "x"}, 0, "tool_call_id", "tool_call_id"),
    ({"role": "tool", "content": "x", "tool_call_id": ""}, 0, "tool_call_id", "non-empty"),
    ({"role": "user", "content": "x", "tool_call_id": "c"}, 0, "tool_call_id", "only tool messages"),
    ({"role": "user", "content": "bad \ud800"}, 0, "content", "surrogate"),
    ({"role": "user", "content": [{"type": "text", "text": "\udfff"}]}, 0, "content[0].text", "surrogate"),
    ({"role": "user", "content": [{"type": "text"}]}, 0, "content[0].text", "got null"),
    ({"role": "user", "content": ["text"]}, 0, "content[0]", "must be an object"),
    (
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
        0,
        "content[0].input_audio",
        "'data'",
    ),
    (
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "f", "file_data": "data:,x"}}]},
        0,
        "content[0].file",
        "exactly one of 'file_data'",
    ),
    (
        {"role": "user", "content": [{"type": ["text"], "text": "x"}]},  # a type that is not a string
        0,
        "content[0].type",
        "unsupported content part type",
    ),
    (
        {"role": "system", "content": [{"type": "file", "file": {"file_id": "f"}}]},
        0,
        "content[0].type",
        "in user messages and tool results",
    ),
    (
        {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "https://x.test/a.mp4"}}]},
        0,
        "content[0].type",
        "'video_url'",
    ),
    (
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]},
        0,
        "content[0]",
        "'cache_control'",
    ),
    (
        {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]},
        0,
        "content[0].type",
        "in user messages and tool results",
    ),
    (
        {"role": "user", "content": [{"type": "image_url", "image_url": "https://x"}]},
        0,
        "content[0].image_url",
        "must be an object",
    ),
    (
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x", "detail": "ultra"}}],
        },
        0,
        "content[0].image_url.detail",
        "'ultra'",
    ),
    ({"role": "user", "content": "x", "tool_calls": [CALL]}, 0, "tool_calls", "only assistant"),
    ({"role": "assistant", "content": None, "tool_calls": {"id": "c"}}, 0, "tool_calls", "must be a list"),
    (
        {
            "role": "assistant",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        0,
        "tool_calls[0].id",
        "non-empty string 'id'",
    ),
    (
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]},
        0,
        "tool_calls[0]",
        "'custom'",
    ),
    (
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
        },
        0,
        "tool_calls[0].function.arguments",
        "json.dumps",
    ),
    (
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
        0,
        "tool_calls[0].function.arguments",
        "got null",
    ),
    (
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": 1, "arguments": ""}}],
        },
        0,
        "tool_calls[0].function.name",
        "string",
    ),
    ({"role": "assistant", "tool_calls": [{**CALL, "index": 0}]}, 0, "tool_calls[0]", "'index'"),
    (
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f\ud800", "arguments": ""}}],
        },
        0,
        "tool_calls[0]",
        "surrogate",
    ),
    ({"role": "user", "content": "x", "name": 7}, 0, "name", "name must be a string"),
    ({"role": "user", "content": "x", "name": "\ud800"}, 0, "name", "surrogate"),
    ({"role": "user", "content": "x", "meta": {1, 2}}, 0, "meta", "expected JSON data"),
    ({"role": "user", "content": "x", "meta": {1: "a"}}, 0, "meta", "keys must be strings"),
]


@pytest.mark.parametrize(("bad", "index", "field", "words"), BAD)
def test_malformed_messages_raise_with_index_and_field(
    bad: object, index: int, field: str | None, words: str
) -> None:
    good = {"role": "user", "content": "fine"}
    with pytest.raises(InvalidMessageError) as info:
        oai.to_messages([good, bad])  # type: ignore[list-item]
    assert info.value.index == index + 1
    assert info.value.field == field
    assert words in str(info.value)
    assert str(info.value).startswith(f"message {index + 1}")
    assert str(info.value).count(f"message {index + 1}") == 1  # the location is said once


@pytest.mark.parametrize("bad", ["a string", {"role": "user", "content": "x"}, 3, None])
def test_the_list_itself_must_be_a_list(bad: object) -> None:
    with pytest.raises(InvalidMessageError, match="expected a list of message dicts"):
        oai.to_messages(bad)  # type: ignore[arg-type]


@settings(max_examples=examples(150), deadline=None)
@given(st.one_of(json_junk, st.lists(st.one_of(junk_openai_dicts, json_junk), max_size=4)))
def test_junk_converts_or_raises_a_clear_error(junk: object) -> None:
    try:
        msgs = oai.to_messages(junk)  # type: ignore[arg-type]
    except InvalidMessageError as e:
        assert str(e)
        return
    # Whatever converted goes back out, and reads back the same (absent and null
    # fields are normalized, so the dicts themselves may differ).
    try:
        out = oai.from_messages(msgs, validate=False)
    except InvalidMessageError as e:
        assert str(e)
        return
    assert strip_ids(oai.to_messages(out)) == strip_ids(msgs)


def test_from_messages_validates_the_conversation() -> None:
    msgs = [
        Message(role="user", content="q"),
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="ls")]),
    ]
    with pytest.raises(InvalidConversationError) as info:
        oai.from_messages(msgs)
    assert "message 1 [unanswered_tool_call]" in str(info.value) and "validate=False" in str(info.value)
    assert [v.rule for v in info.value.violations] == ["unanswered_tool_call"]  # type: ignore[attr-defined]
    assert oai.from_messages(msgs, validate=False)[1]["tool_calls"][0]["id"] == "c1"  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("message", "field", "words"),
    [
        (
            Message(role="system", content=(FilePart(url="https://x/y.pdf"),)),
            "content[0]",
            "in user messages and tool results",
        ),
        (
            Message(role="assistant", content=(ImagePart(url="https://x/y.png"),)),
            "content[0]",
            "in user messages and tool results",
        ),
        (Message(role="user", content=None), "content", "requires content"),
        (Message(role="tool", tool_call_id="c", content=None), "content", "use ''"),
        (Message(role="user", content="x", extra={"content": "y"}), "extra.content", "models itself"),
        (
            Message(role="user", content="x", extra={"role": "developer"}),
            "extra.role",
            "only be 'developer' on a system",
        ),
    ],
)
def test_canonical_content_openai_cannot_carry_is_refused(message: Message, field: str, words: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        oai.from_messages([Message(role="user", content="q"), message], validate=False)
    assert info.value.index == 1 and info.value.field == field
    assert words in str(info.value)


def test_from_messages_rejects_what_is_not_a_message() -> None:
    with pytest.raises(InvalidMessageError, match="message 0: expected an agentcontext Message, got dict"):
        oai.from_messages([{"role": "user", "content": "x"}])  # type: ignore[list-item]


def test_image_size_hints_are_not_sent() -> None:
    m = Message(role="user", content=(ImagePart(url="https://x/y.png", width=640, height=480),))
    assert oai.from_message(m)["content"] == [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]


# ----------------------------------------------------------------------------- real logs


def test_every_real_log_converts_and_round_trips_exactly() -> None:
    files = conversation_files()
    assert len(files) >= 10
    for path in files:
        dicts = load(path)
        msgs = oai.to_messages(dicts)
        # Real logs break rules (unanswered calls, reused ids): convert them without validation.
        assert oai.from_messages(msgs, validate=False) == dicts, path.name


def test_docstring_examples_run() -> None:
    import doctest

    assert doctest.testmod(oai).failed == 0


def test_a_tool_results_screenshot_or_document_is_read_counted_and_written_back() -> None:
    # A browser or computer-use agent behind an OpenAI-compatible gateway (LiteLLM forwards these to
    # Claude and Gemini) sends the tool's screenshot or PDF in the tool message: it was refused.
    shot = {"type": "image_url", "image_url": {"url": "https://x.test/shot.png", "detail": "low"}}
    doc = {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64,JVBERi0xLjQK", "filename": "a.pdf"},
    }
    dicts = [
        {"role": "user", "content": "Open the page."},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "opened"}, shot, doc]},
    ]
    msgs = oai.to_messages(dicts)
    assert [type(p) for p in msgs[2].content] == [TextPart, ImagePart, FilePart]
    assert oai.from_messages(msgs) == dicts
    counter = ac.counter_for("gpt-4o")
    assert counter.count_message(msgs[2]) > 85 + 3_000  # a low-detail image and a one-page PDF


# ----------------------------------------------------------------------------- unknown="keep"

KEPT = [
    {
        "role": "system",
        "content": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    },
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Summarize the report.", "cache_control": {"type": "ephemeral"}},
            {"type": "file", "file": {"file_id": "file-abc"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{**CALL, "index": 0, "function": {**CALL["function"], "thought_signature": "s1"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "https://x.test/a.mp4"}}]},
]


def test_keep_carries_what_is_not_modelled_and_writes_it_back_exactly() -> None:
    # A proxy in front of any client gets cache_control on text parts (LiteLLM's way to Anthropic's
    # prompt cache), part types of other providers (LiteLLM's video_url) and provider fields on tool
    # calls: "raise" refuses the request.
    with pytest.raises(InvalidMessageError, match="cache_control"):
        oai.to_messages(KEPT)
    before = copy.deepcopy(KEPT)
    with pytest.warns(Warning, match=r"'cache_control' on text parts.*'video_url' parts in user messages"):
        msgs = oai.to_messages(KEPT, unknown="keep")
    assert KEPT == before
    assert oai.from_messages(msgs) == KEPT  # every dict comes back exactly
    # What is counted is what agentcontext models: the texts, the file, the call, and a marker for a
    # video alone.
    assert msgs[1].content == (
        TextPart(text="Summarize the report."),
        FilePart(url="openai-file-id:file-abc"),
    )
    assert msgs[2].tool_calls == (ToolCall(id="c1", name="ls", arguments='{"path": "/tmp"}'),)
    assert msgs[4].text == "[agentcontext: content parts kept as sent]"
    assert "openai" not in msgs[3].metadata  # nothing to carry: a plain message stays plain
    # Ids derive from the dicts as with "raise": the same message gets the same id either way.
    assert oai.to_messages(KEPT[3:4], unknown="keep")[0].id == oai.to_messages(KEPT[3:4])[0].id


def test_a_message_the_engine_changed_is_written_from_what_it_now_holds() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        msgs = oai.to_messages(KEPT, unknown="keep")
    changed = msgs[1].evolve(content="[summary of the report request]")
    assert oai.from_message(changed) == {"role": "user", "content": "[summary of the report request]"}
    assert "openai" not in changed.metadata  # the stale wire form is not carried (nor stored) any further


def test_keep_still_refuses_what_is_malformed_and_a_bad_mode() -> None:
    with pytest.raises(InvalidMessageError, match=r"message 0, field 'content\[0\]\.text'"):
        oai.to_messages(
            [{"role": "user", "content": [{"type": "text", "text": 3, "cache_control": {}}]}], unknown="keep"
        )
    with pytest.raises(InvalidMessageError, match="unknown must be 'raise' or 'keep'"):
        oai.to_messages([{"role": "user", "content": "hi"}], unknown="drop")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "field",
    [
        {"reasoning_content": "check a.py before b.py " * 100},  # DeepSeek, Kimi, Qwen, vLLM
        {"reasoning": "check a.py before b.py " * 100},  # OpenRouter, Ollama
        {"reasoning_details": [{"type": "reasoning.text", "text": "check a.py before b.py " * 100}]},
        {
            "thinking_blocks": [
                {"type": "thinking", "thinking": "check a.py before b.py " * 100, "signature": "s"}
            ]
        },
    ],
)
def test_reasoning_sent_back_beside_the_content_is_counted_even_after_the_engine_changes_the_message(
    field: dict[str, Any],
) -> None:
    from agentcontext.tokens import TiktokenCounter

    def _call(cid: str, name: str, arguments: str) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}

    counter = TiktokenCounter("o200k_base")
    plain = {"role": "assistant", "content": None, "tool_calls": [_call("c1", "read", '{"path": "a.py"}')]}
    (bare,) = oai.to_messages([plain])
    (reasoned,) = oai.to_messages([{**plain, **field}])
    assert counter.count_message(reasoned) - counter.count_message(bare) >= 500  # 600 tokens of reasoning
    # The reasoning is written back whatever the engine changed (extra stays with the message): still counted.
    shortened = reasoned.evolve(tool_calls=(ToolCall(id="c1", name="read", arguments="{}"),))
    back = oai.from_messages([shortened], validate=False)[0]
    assert back == {**plain, **field, "tool_calls": [_call("c1", "read", "{}")]}
    assert counter.count_message(shortened) - counter.count_message(bare) >= 500


def test_audio_input_audio_does_not_take_stays_a_file_part() -> None:
    # LiteLLM sends Gemini audio as a file part: it came back as an input_audio part of format "ogg",
    # which OpenAI refuses, and no longer as what the client sent.
    dicts = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Transcribe."},
                {"type": "file", "file": {"file_data": "data:audio/ogg;base64,T2dnUw=="}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ],
        }
    ]
    assert oai.from_messages(oai.to_messages(dicts)) == dicts


def test_a_file_another_provider_holds_is_refused_by_name_not_sent() -> None:
    from agentcontext.formats import responses

    held = Message(role="user", content=(FilePart(url="anthropic-file-id:file_01", name="a.pdf"),))
    with pytest.raises(
        InvalidMessageError, match="message 0, field 'content\\[0\\]'.*another provider's file"
    ):
        oai.from_messages([held])
    with pytest.raises(
        InvalidMessageError, match="message 0, field 'content'.*not 'anthropic-file-id:file_01'"
    ):
        responses.from_messages([held])
