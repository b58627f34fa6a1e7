"""Anthropic Messages <-> canonical: round trips, merging, the system parameter, clear errors, real logs."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.exceptions import ConversionWarning, InvalidConversationError, InvalidMessageError
from agentcontext.formats import anthropic
from agentcontext.formats import openai as oai
from agentcontext.invariants import check_messages
from agentcontext.messages import ImagePart, Message, TextPart, ToolCall
from agentcontext.tokens import TiktokenCounter
from realdata import conversation_files, load
from strategies import canonical_conversations, json_junk, junk_anthropic_dicts

PNG = "data:image/png;base64,iVBORw0KGgo="


def strip_ids(messages: list[Message]) -> list[Message]:
    return [dataclasses.replace(m, id="-") for m in messages]


def user(content: Any = "hi") -> Message:
    return Message(role="user", content=content)


def call(call_id: str, arguments: str = '{"path": "/tmp"}') -> ToolCall:
    return ToolCall(id=call_id, name="ls", arguments=arguments)


def round_trip(msgs: list[Message], **kw: Any) -> list[Message]:
    system, params = anthropic.from_messages(msgs, **kw)
    return anthropic.to_messages(params, system=system)


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canonical_conversations(for_anthropic=True))
def test_conversations_anthropic_can_carry_round_trip_exactly(msgs: list[Message]) -> None:
    before = copy.deepcopy(msgs)
    assert strip_ids(round_trip(msgs)) == strip_ids(msgs)
    assert msgs == before


@settings(max_examples=examples(50), deadline=None)
@given(canonical_conversations(for_anthropic=True))
def test_the_wire_shape_is_what_anthropic_accepts(msgs: list[Message]) -> None:
    system, params = anthropic.from_messages(msgs)
    assert system is None or isinstance(system, str | list)
    roles = [p["role"] for p in params]
    assert roles[0] == "user"
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # strictly alternating
    for p in params:
        if isinstance(p["content"], str):
            continue
        kinds = [b["type"] for b in p["content"]]
        # tool_result blocks come first in their user message.
        assert kinds == sorted(kinds, key=lambda k: k != "tool_result")
        for b in p["content"]:
            if b["type"] == "text":
                assert b["text"].strip()
            if b["type"] == "tool_use":
                assert isinstance(b["input"], dict)


@settings(max_examples=examples(50), deadline=None)
@given(canonical_conversations(for_anthropic=True))
def test_ids_are_deterministic_chains(msgs: list[Message]) -> None:
    system, params = anthropic.from_messages(msgs)
    first = anthropic.to_messages(params, system=system)
    assert [m.id for m in first] == [m.id for m in anthropic.to_messages(params, system=system)]
    assert len({m.id for m in first}) == len(first)
    # A shared prefix of wire messages gives shared ids.
    prefix = anthropic.to_messages(params[:1], system=system)
    assert [m.id for m in prefix] == [m.id for m in first[: len(prefix)]]


# ----------------------------------------------------------------------------- shapes and merging


def test_tool_calls_and_results_become_blocks() -> None:
    msgs = [
        user("list /tmp"),
        Message(role="assistant", content="Looking.", tool_calls=[call("a"), call("b", "{}")]),
        Message(role="tool", tool_call_id="b", content="x.txt"),
        Message(role="tool", tool_call_id="a", content="", metadata={"is_error": True}),
    ]
    system, params = anthropic.from_messages(msgs)
    assert system is None
    assert params == [
        {"role": "user", "content": "list /tmp"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "a", "name": "ls", "input": {"path": "/tmp"}},
                {"type": "tool_use", "id": "b", "name": "ls", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "b", "content": "x.txt"},
                # An empty result has no content (optional for Anthropic), and is_error comes from metadata.
                {"type": "tool_result", "tool_use_id": "a", "is_error": True},
            ],
        },
    ]
    assert strip_ids(round_trip(msgs)) == strip_ids(msgs)


def test_results_and_the_next_user_message_merge_into_one_turn() -> None:
    msgs = [
        user("q"),
        Message(role="assistant", tool_calls=[call("a")]),
        Message(role="tool", tool_call_id="a", content="out"),
        user("and now?"),
    ]
    _, params = anthropic.from_messages(msgs)
    assert params[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "out"},
            {"type": "text", "text": "and now?"},
        ],
    }
    back = round_trip(msgs)
    # Split back: the tool message, then the user text as parts.
    assert strip_ids(back) == strip_ids([*msgs[:3], user((TextPart(text="and now?"),))])


def test_consecutive_same_role_messages_merge() -> None:
    msgs = [
        user("one"),
        user((TextPart(text="two"), ImagePart(url=PNG))),
        Message(role="assistant", content="a"),
        Message(role="assistant", content="b"),
    ]
    _, params = anthropic.from_messages(msgs)
    assert params == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    back = round_trip(msgs)
    assert [m.role for m in back] == ["user", "assistant"]
    assert back[0].content == (TextPart(text="one"), TextPart(text="two"), ImagePart(url=PNG))


def test_the_system_parameter() -> None:
    assert anthropic.from_messages([Message(role="system", content="rules"), user()])[0] == "rules"
    two = [Message(role="system", content="a"), Message(role="system", content=(TextPart(text="b"),)), user()]
    system, _ = anthropic.from_messages(two)
    assert system == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    back = round_trip(two)
    assert back[0].role == "system" and back[0].content == (TextPart(text="a"), TextPart(text="b"))
    assert anthropic.to_messages([], system=[{"type": "text", "text": "x"}])[0].content == (
        TextPart(text="x"),
    )


def test_a_late_system_message_is_refused_or_sent_inline() -> None:
    msgs = [
        user(),
        Message(role="assistant", content="a"),
        Message(role="system", content="now be terse"),
        user("go"),
    ]
    with pytest.raises(InvalidMessageError) as info:
        anthropic.from_messages(msgs)
    assert info.value.index == 2 and info.value.field == "role"
    assert "late_system='inline'" in str(info.value)
    system, params = anthropic.from_messages(msgs, late_system="inline")
    assert system is None and params[2] == {"role": "system", "content": "now be terse"}
    assert strip_ids(anthropic.to_messages(params)) == strip_ids(msgs)


def test_images_map_to_base64_and_url_sources_and_lose_detail() -> None:
    m = user(
        (
            ImagePart(url=PNG, detail="high", width=10, height=10),
            ImagePart(url="https://x.org/a.jpg"),
            TextPart(text="?"),
        )
    )
    _, params = anthropic.from_messages([m])
    assert params[0]["content"][:2] == [  # type: ignore[index]
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://x.org/a.jpg"}},
    ]
    [back] = round_trip([m])
    assert back.content == (ImagePart(url=PNG), ImagePart(url="https://x.org/a.jpg"), TextPart(text="?"))


def test_blank_text_next_to_tool_calls_is_dropped() -> None:
    msgs = [
        user(),
        Message(role="assistant", content=" ", tool_calls=[call("a")]),
        Message(role="tool", tool_call_id="a", content="ok"),
    ]
    _, params = anthropic.from_messages(msgs)
    assert params[1]["content"] == [{"type": "tool_use", "id": "a", "name": "ls", "input": {"path": "/tmp"}}]
    assert round_trip(msgs)[1].content is None


def test_arguments_are_rewritten_as_json_but_mean_the_same() -> None:
    msgs = [
        user(),
        Message(role="assistant", tool_calls=[call("a", '{"b":[1,2],"中":"文"}')]),
        Message(role="tool", tool_call_id="a", content="ok"),
    ]
    back = round_trip(msgs)
    assert back[1].tool_calls[0].arguments == '{"b": [1, 2], "中": "文"}'
    assert back[1].tool_calls[0].parsed_arguments() == msgs[1].tool_calls[0].parsed_arguments()


def test_names_and_extra_are_not_sent() -> None:
    msgs = [Message(role="user", content="x", name="alice", extra={"reasoning_content": "r"})]
    assert anthropic.from_messages(msgs)[1] == [{"role": "user", "content": "x"}]


# ----------------------------------------------------------------------------- errors: canonical -> Anthropic


@pytest.mark.parametrize(
    ("message", "field", "words"),
    [
        (
            Message(role="assistant", tool_calls=[call("a", "{not json")]),
            "tool_calls[0].arguments",
            "not valid JSON",
        ),
        (
            Message(role="assistant", tool_calls=[call("a", "[1, 2]")]),
            "tool_calls[0].arguments",
            "must be an object",
        ),
        (
            Message(role="assistant", content=(ImagePart(url=PNG),)),
            "content[0]",
            "only in user messages and tool results",
        ),
        (user((ImagePart(url="data:image/bmp;base64,AAAA"),)), "content[0]", "image/jpeg"),
        (user((ImagePart(url="data:image/png,not-base64"),)), "content[0]", "base64"),
        (user((ImagePart(url="file:///tmp/a.png"),)), "content[0]", "data: or http(s)://"),
        (Message(role="system", content="late"), "role", "separate parameter"),
    ],
)
def test_what_anthropic_cannot_carry_is_refused_with_index_and_field(
    message: Message, field: str, words: str
) -> None:
    with pytest.raises(InvalidMessageError) as info:
        anthropic.from_messages([user(), message], validate=False)
    assert info.value.index == 1 and info.value.field == field
    assert words in str(info.value)


def test_system_prompts_cannot_hold_images() -> None:
    with pytest.raises(InvalidMessageError) as info:
        anthropic.from_messages([Message(role="system", content=(ImagePart(url=PNG),)), user()])
    assert info.value.index == 0 and info.value.field == "content[0]"


def test_from_messages_validates_for_anthropic() -> None:
    msgs = [Message(role="assistant", content="hello"), Message(role="assistant", tool_calls=[call("a")])]
    with pytest.raises(InvalidConversationError) as info:
        anthropic.from_messages(msgs)
    rules = [v.rule for v in info.value.violations]  # type: ignore[attr-defined]
    assert rules == ["first_not_user", "unanswered_tool_call"]
    assert "Anthropic" in str(info.value)
    anthropic.from_messages(msgs, validate=False)  # converts anyway when asked


def test_from_messages_rejects_what_is_not_a_message() -> None:
    with pytest.raises(InvalidMessageError, match="message 0: expected an agentcontext Message"):
        anthropic.from_messages(["hi"])  # type: ignore[list-item]


# ----------------------------------------------------------------------------- errors: Anthropic -> canonical


TOOL_USE = {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}

BAD: list[tuple[object, str | None, str]] = [
    ("text", None, "expected a message dict"),
    ({"role": "tool", "content": "x"}, "role", "unknown role 'tool'"),
    ({"role": "user", "content": 3}, "content", "a string or a list of blocks"),
    ({"role": "user", "content": "x", "name": "n"}, None, "unexpected key 'name'"),
    ({"role": "user", "content": [{"type": "thinking", "thinking": "..."}]}, "content[0].type", "'thinking'"),
    ({"role": "assistant", "content": [{"type": "image", "source": {}}]}, "content[0].type", "'image'"),
    (
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]},
        "content[0]",
        "'cache_control'",
    ),
    ({"role": "user", "content": [{"type": "text", "text": "\ud800"}]}, "content[0].text", "surrogate"),
    ({"role": "user", "content": ["x"]}, "content[0]", "must be an object"),
    (
        {"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]},
        "content[0].source.type",
        "'file'",
    ),
    (
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA"}}]},
        "content[0].source",
        "media_type",
    ),
    (
        {"role": "assistant", "content": [{**TOOL_USE, "input": "{}"}]},
        "content[0].input",
        "must be an object",
    ),
    ({"role": "assistant", "content": [{**TOOL_USE, "id": ""}]}, "content[0].id", "non-empty"),
    (
        {"role": "assistant", "content": [{**TOOL_USE, "input": {"x": {1, 2}}}]},
        "content[0].input.x",
        "expected JSON data",
    ),
    (
        {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
        "content[0].tool_use_id",
        "tool_use_id",
    ),
    (
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 5}]},
        "content[0].content",
        "got a number",
    ),
    (
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]},
        "content[0].is_error",
        "boolean",
    ),
    (
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "search_result"}]}],
        },
        "content[0].content[0].type",
        "'search_result'",
    ),
    (
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "x \ud800"},
                }
            ],
        },
        "content[0].source.data",
        "surrogate",
    ),
]


@pytest.mark.parametrize(("bad", "field", "words"), BAD)
def test_malformed_wire_messages_raise_with_index_and_field(
    bad: object, field: str | None, words: str
) -> None:
    with pytest.raises(InvalidMessageError) as info:
        anthropic.to_messages([{"role": "user", "content": "fine"}, bad])  # type: ignore[list-item]
    assert info.value.index == 1 and info.value.field == field
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("system", "field"), [(5, "system"), ([{"type": "image"}], "system[0]"), (["x"], "system[0]")]
)
def test_a_malformed_system_parameter_is_named(system: object, field: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        anthropic.to_messages([], system=system)
    assert info.value.index is None and info.value.field == field


def test_the_messages_must_be_a_list() -> None:
    with pytest.raises(InvalidMessageError, match="expected a list of message dicts"):
        anthropic.to_messages({"role": "user", "content": "x"})  # type: ignore[arg-type]


@settings(max_examples=examples(150), deadline=None)
@given(
    st.one_of(json_junk, st.lists(st.one_of(junk_anthropic_dicts, json_junk), max_size=4)),
    st.one_of(st.none(), json_junk),
)
def test_junk_converts_or_raises_a_clear_error(junk: object, system: object) -> None:
    try:
        msgs = anthropic.to_messages(junk, system=system)  # type: ignore[arg-type]
    except InvalidMessageError as e:
        assert str(e)
        return
    try:
        anthropic.from_messages(msgs, validate=False)
    except InvalidMessageError as e:
        assert e.index is not None


# ----------------------------------------------------------------------------- real logs


def test_every_real_log_converts_and_keeps_its_tool_pairs() -> None:
    for path in conversation_files():
        dicts = load(path)
        msgs = oai.to_messages(dicts)
        # Real logs leave the final submit unanswered and reuse ids: convert without validation.
        back = round_trip(msgs, validate=False)

        def pairs(ms: list[Message]) -> list[tuple[str, str | None, list[tuple[str, str, object]]]]:
            return [
                (m.role, m.tool_call_id, [(c.id, c.name, c.parsed_arguments()) for c in m.tool_calls])
                for m in ms
                if m.role in ("assistant", "tool")
            ]

        assert pairs(back) == pairs(msgs), path.name
        # Merged user turns change indices, not what is wrong: the same unanswered calls and reused ids.
        assert Counter(v.rule for v in check_messages(back)) == Counter(v.rule for v in check_messages(msgs))


def test_docstring_examples_run() -> None:
    import doctest

    assert doctest.testmod(anthropic).failed == 0


# ----------------------------------------------------------------------------- what agentcontext does not model

CLAUDE_CODE_SYSTEM = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
]
CLAUDE_CODE_MESSAGES = [
    {
        "role": "user",
        "content": [{"type": "text", "text": "fix the bug", "cache_control": {"type": "ephemeral"}}],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "look at a.py first", "signature": "c2ln"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.py"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "print(1)"}],
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "text", "text": "<system-reminder>keep going</system-reminder>"},
        ],
    },
]


def test_keep_carries_what_is_not_modelled_and_writes_unchanged_messages_back_exactly() -> None:
    with pytest.warns(ConversionWarning, match="'cache_control' on text blocks.*'thinking' blocks"):
        msgs = anthropic.to_messages(CLAUDE_CODE_MESSAGES, system=CLAUDE_CODE_SYSTEM, unknown="keep")
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "user"]
    assert msgs[2].tool_calls[0].name == "Read" and msgs[3].text == "print(1)"  # modelled as usual
    system, back = anthropic.from_messages(msgs)
    assert system == CLAUDE_CODE_SYSTEM and back == CLAUDE_CODE_MESSAGES  # cache_control, thinking: as sent
    with pytest.raises(InvalidMessageError, match="cache_control"):
        anthropic.to_messages(CLAUDE_CODE_MESSAGES, system=CLAUDE_CODE_SYSTEM)  # the default refuses them


def test_a_message_the_engine_changed_is_written_from_its_fields_the_others_as_they_came() -> None:
    with pytest.warns(ConversionWarning):
        msgs = anthropic.to_messages(CLAUDE_CODE_MESSAGES, system=CLAUDE_CODE_SYSTEM, unknown="keep")
    changed = msgs[3].evolve(content="[masked]")  # what masking does: a new id, stale carried blocks
    system, back = anthropic.from_messages([*msgs[:3], changed, msgs[4]])
    assert back[:2] == CLAUDE_CODE_MESSAGES[:2]
    assert back[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[masked]"}
    assert back[2]["content"][1] == CLAUDE_CODE_MESSAGES[2]["content"][1]


@pytest.mark.parametrize(
    ("block", "read"),
    [
        ({"type": "thinking", "thinking": "step one, then step two " * 200, "signature": "c2ln"}, "thinking"),
        ({"type": "thinking", "thinking": "", "signature": "RXh0ZW5kZWQ" * 300}, "signature"),  # omitted
        ({"type": "redacted_thinking", "data": "RW5jcnlwdGVk" * 300}, "data"),
    ],
)
def test_thinking_carried_by_keep_is_counted_while_it_is_sent(block: dict[str, str], read: str) -> None:
    # Claude reads its thinking back (every earlier turn's from Opus 4.5 and Sonnet 4.6 on; the current
    # turn's, a whole tool loop, on every model). Counted as 0, a proxy in front of Claude Code
    # forwarded 101k tokens into a 28k budget.
    wire = [
        {"role": "user", "content": "fix the bug"},
        {"role": "assistant", "content": [block, {"type": "text", "text": "Let me look."}]},
    ]
    counter = TiktokenCounter("o200k_base")
    with pytest.warns(ConversionWarning, match="thinking blocks are counted"):
        kept = anthropic.to_messages(wire, unknown="keep")
    plain = anthropic.to_messages([wire[0], {"role": "assistant", "content": "Let me look."}])
    extra = counter.count_message(kept[1]) - counter.count_message(plain[1])
    assert extra == counter.count_text(block[read])
    # Once the engine changes the message, the block is no longer sent, nor counted.
    changed = kept[1].evolve(content="Let me look again.")
    assert block["type"] not in json.dumps(anthropic.from_messages([kept[0], changed])[1])
    assert counter.count_message(changed) == counter.count_message(
        plain[1].evolve(content="Let me look again.")
    )


def test_documents_round_trip_and_what_is_not_modelled_travels_whole_in_keep_mode() -> None:
    import warnings

    from agentcontext import FilePart

    pdf = "JVBERi0xLjQKMSAwIG9iaiA8PCAvVHlwZSAvUGFnZSA+PiBlbmRvYmoK"
    blocks = [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
            "title": "a",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "100% ünïcode, ok"},
        },
        {"type": "document", "source": {"type": "url", "url": "https://x.test/b.pdf"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_01"}},
        {"type": "text", "text": "Compare them."},
    ]
    msgs = anthropic.to_messages([{"role": "user", "content": blocks}])
    assert [type(p) for p in msgs[0].content] == [FilePart] * 4 + [TextPart]
    assert anthropic.from_messages(msgs)[1] == [{"role": "user", "content": blocks}]
    # A custom-content source is not modelled: refused by default, carried whole with unknown="keep" (a
    # proxy in front of Claude forwarded nothing for such a request when it was refused there too).
    custom = {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": "Sky."}]},
    }
    body = [{"role": "user", "content": [{"type": "text", "text": "Cite it."}, custom]}]
    with pytest.raises(InvalidMessageError, match="'content'"):
        anthropic.to_messages(body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = anthropic.to_messages(body, unknown="keep")
    assert anthropic.from_messages(kept)[1] == body


def test_files_anthropic_cannot_read_are_refused_by_name_and_text_goes_as_text() -> None:
    from agentcontext import FilePart

    notes = Message(role="user", content=(FilePart(url="data:text/plain;base64,aGVsbG8=", name="notes.txt"),))
    assert anthropic.from_messages([notes])[1][0]["content"][0] == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "hello"},
        "title": "notes.txt",
    }
    audio = Message(role="user", content=(FilePart(url="data:audio/wav;base64,UklGRg=="),))
    with pytest.raises(
        InvalidMessageError, match="message 0, field 'content\\[0\\]'.*PDF or plain text, not audio/wav"
    ):
        anthropic.from_messages([audio])
