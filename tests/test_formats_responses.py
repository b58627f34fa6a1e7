"""OpenAI Responses API items: lossless round trips, stable ids, clear errors, and what the engine's changes become.

The validity checks use the loopback provider's own Responses validator
(`providers.check_responses`), which rejects what the API rejects (an output
without its call, a reasoning item without the items of its response...).
"""

from __future__ import annotations

import copy
import json
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentcontext as ac
from _sizes import examples
from agentcontext.exceptions import ConversionWarning, InvalidConversationError, InvalidMessageError
from agentcontext.formats import responses
from agentcontext.formats.responses import ResponsesConverter
from agentcontext.messages import FilePart, ImagePart
from providers import check_responses
from strategies import junk_responses_items, responses_conversations

PNG = "data:image/png;base64,iVBORw0KGgo="


def ties(items: list[dict[str, Any]]) -> dict[str, str]:
    """Item id -> the reasoning item before it in its run of model items (what the API ties together)."""
    out: dict[str, str] = {}
    current: str | None = None
    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning":
            current = item["id"]
        elif (
            kind.endswith("_output")
            or item.get("role") in ("user", "system", "developer")
            or kind == "compaction"
        ):
            current = None
        elif current is not None and isinstance(item.get("id"), str):
            out[item["id"]] = current
    return out


def reasoning_conversation(steps: int, *, output_words: int = 200) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test in the repository."}]
    for i in range(steps):
        items += [
            {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": f"enc{i}" * 20},
            {
                "type": "message",
                "id": f"msg_{i}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"Step {i}: looking.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": "run",
                "arguments": json.dumps({"cmd": f"pytest -k test_{i}"}),
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": f"call_{i}", "output": f"out {i} " * output_words},
        ]
        if i % 7 == 6:
            items.append({"role": "user", "content": f"Keep going ({i})."})
    return items


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_conversations())
def test_items_to_messages_and_back_is_exact(items: list[dict[str, Any]]) -> None:
    original = copy.deepcopy(items)
    messages = responses.to_messages(items)
    assert items == original  # not modified
    back = responses.from_messages(messages)
    assert back == items
    assert check_responses({"model": "gpt-4o", "input": back}, tied=ties(items))[0] is None


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_conversations(), st.data())
def test_ids_are_stable_and_a_grown_list_keeps_the_ids_of_its_prefix(
    items: list[dict[str, Any]], data: st.DataObject
) -> None:
    messages = responses.to_messages(items)
    assert [m.id for m in responses.to_messages(copy.deepcopy(items))] == [m.id for m in messages]
    assert len({m.id for m in messages}) == len(messages)
    # Fed in batches cut anywhere (even inside a model run), the converter gives the same messages.
    cuts = sorted(data.draw(st.lists(st.integers(0, len(items)), max_size=4)))
    converter = ResponsesConverter()
    for a, b in zip([0, *cuts], [*cuts, len(items)], strict=True):
        converter.feed(items[a:b])
        partial = converter.messages()
        assert [m.id for m in converter.closed] == [m.id for m in messages[: len(converter.closed)]]
        assert len(partial) >= len(converter.closed)
    assert converter.finish() == messages


def test_a_run_looked_at_while_it_was_one_text_message_converts_as_if_fed_at_once() -> None:
    # Found by the long profile: `messages()` on a run holding only the assistant's text marked it
    # "text only", and the mark stayed when a call joined the run (string content instead of parts).
    items = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Running it."},
        {"type": "function_call", "call_id": "c1", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    converter = ResponsesConverter()
    converter.feed(items[:2])
    assert converter.messages()[-1].content == "Running it."
    converter.feed(items[2:])
    assert converter.finish() == responses.to_messages(items)


def test_a_converted_message_round_trips_through_a_session_log(tmp_path: Any) -> None:
    items = reasoning_conversation(3)
    with ac.Session.open(tmp_path / "s.jsonl") as session:
        session.extend(responses.to_messages(items))
    with ac.Session.open(tmp_path / "s.jsonl") as session:
        assert responses.from_messages(session.view) == items


# ----------------------------------------------------------------------------- what the model sees


def test_everything_the_model_reads_is_counted_and_nothing_unreadable_is() -> None:
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": PNG, "detail": "original"},
            ],
        },
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "weather in Lyon"},
        },
        {"type": "compaction", "encrypted_content": "e" * 40},
        {
            "role": "user",
            "content": [{"type": "input_file", "filename": "big.pdf", "file_data": "JVBERi0" * 10_000}],
        },
    ]
    user, search, compaction, pdf = responses.to_messages(items)
    assert isinstance(user.content, tuple) and isinstance(user.content[1], ImagePart)
    assert user.content[1].detail is None  # "original" is kept in the item, not modelled
    assert "weather in Lyon" in search.text  # a hosted item is read (and counted) as its JSON
    assert "e" * 40 in compaction.text
    # A file is counted as what it holds, never as its base64 text: bare base64 typed by its name.
    assert pdf.files == (FilePart(url="data:application/pdf;base64," + "JVBERi0" * 10_000, name="big.pdf"),)
    assert "JVBERi0" not in pdf.text
    counter = ac.counter_for("gpt-4o")
    assert counter.count_message(pdf) == 2 * 3_000 + counter.count_message(pdf.evolve(content=()))
    assert responses.from_messages([user, search, compaction, pdf]) == items


def test_a_reasoning_item_travels_with_the_items_of_its_response() -> None:
    messages = responses.to_messages(reasoning_conversation(2))
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert [m.text for m in messages[1:2]] == ["Step 0: looking."]
    assert [c.id for c in messages[1].tool_calls] == ["call_0"]


@pytest.mark.parametrize("window", [3_000, 6_000, 12_000])
def test_what_the_engine_prepares_is_accepted_by_the_responses_api(window: int) -> None:
    items = reasoning_conversation(40)
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=500)
    system = ac.Message(role="system", content="You are a careful engineer.")
    state = ac.EngineState.new()
    for end in range(1, len(items) + 1):
        if items[end - 1].get("type") == "function_call_output" or end == len(items):
            prepared = engine.prepare([system, *responses.to_messages(items[:end])], state=state)
            state = prepared.state
            sent = responses.from_messages(list(prepared.messages)[1:])
            problem, tokens = check_responses(
                {"model": "gpt-4o", "instructions": system.text, "input": sent}, tied=ties(items)
            )
            assert problem is None, problem
            assert tokens <= window - 500
            latest_user = next(i for i in reversed(items[:end]) if i.get("role") == "user")
            assert latest_user in sent
    assert engine.stats.compactions["normal"] + engine.stats.compactions["aggressive"] > 0


def test_a_masked_output_keeps_its_item_and_a_rewritten_run_loses_its_reasoning_and_ids() -> None:
    items = reasoning_conversation(1)
    items[-1]["status"] = "completed"
    user, run, output = responses.to_messages(items)
    masked = output.evolve(content="[masked: 200 lines]")
    assert responses.from_messages([user, run, masked])[-1] == {
        "type": "function_call_output",
        "call_id": "call_0",
        "output": "[masked: 200 lines]",
        "status": "completed",
    }
    short = run.evolve(content="Step 0…", tool_calls=run.tool_calls)
    back = responses.from_messages([user, short, output])
    assert back[1:3] == [
        {"role": "assistant", "content": "Step 0…"},
        {
            "type": "function_call",
            "call_id": "call_0",
            "name": "run",
            "arguments": '{"cmd": "pytest -k test_0"}',
        },
    ]
    assert check_responses({"model": "m", "input": back}, tied=ties(items))[0] is None


def test_a_hosted_call_and_its_output_change_together_or_not_at_all() -> None:
    items = [
        {"role": "user", "content": "open the settings"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {
            "type": "computer_call",
            "id": "cu_1",
            "call_id": "cc_1",
            "action": {"type": "click", "x": 1, "y": 2},
            "pending_safety_checks": [],
            "status": "completed",
        },
        {
            "type": "computer_call_output",
            "call_id": "cc_1",
            "output": {"type": "computer_screenshot", "image_url": PNG},
        },
        {"role": "user", "content": "thanks"},
    ]
    user, call, output, thanks = responses.to_messages(items)
    assert call.tool_calls[0].name == "computer_call" and output.tool_call_id == "cc_1"
    assert output.images == (ImagePart(url=PNG),)
    assert responses.from_messages([user, call, output, thanks]) == items
    back = responses.from_messages([user, call, output.evolve(content="[screenshot masked]"), thanks])
    assert back[1]["role"] == "assistant" and "computer_call cc_1" in back[1]["content"]
    assert back[2] == {"role": "user", "content": "[computer_call output for cc_1]\n[screenshot masked]"}
    assert not any(i.get("type") in ("reasoning", "computer_call", "computer_call_output") for i in back)
    assert check_responses({"model": "m", "input": back}, tied=ties(items))[0] is None
    # A stub result (the output never came) writes the call as text too.
    engine = ac.ContextEngine(model="gpt-4o", window=8_000, reserve=500)
    prepared = engine.prepare([user, call])
    back = responses.from_messages(prepared.messages)
    assert check_responses({"model": "m", "input": back}, tied=ties(items))[0] is None
    assert back[-1]["role"] == "user" and "no result followed" in back[-1]["content"]


def test_messages_from_elsewhere_become_plain_items() -> None:
    from agentcontext.formats import openai as oai

    messages = oai.to_messages(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": PNG}}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            {"role": "assistant", "content": "one file"},
        ]
    )
    assert responses.from_messages(messages) == [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": PNG, "detail": "auto"},
            ],
        },
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"role": "assistant", "content": "one file"},
    ]


def test_a_developer_message_stays_a_developer_message_when_rewritten() -> None:
    (dev,) = responses.to_messages([{"role": "developer", "content": "x" * 50}])
    assert dev.role == "system"
    assert responses.from_messages([dev.evolve(content="x…")], validate=False) == [
        {"role": "developer", "content": "x…"}
    ]


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        (
            {"type": "function_call", "call_id": "", "name": "ls", "arguments": "{}"},
            "call_id",
            "non-empty string 'call_id'",
        ),
        ({"type": "function_call", "call_id": 7, "name": "ls", "arguments": "{}"}, "call_id", "got 7"),
        (
            {"type": "function_call", "call_id": "c", "name": "ls", "arguments": {"a": 1}},
            "arguments",
            "json.dumps",
        ),
        ({"type": "function_call_output", "output": "x"}, "call_id", "pairs the call with its output"),
        (
            {"type": "function_call_output", "call_id": "c", "output": 3},
            "output",
            "string or a list of parts",
        ),
        ({"type": "computer_call_output", "output": {}}, "call_id", "call_id"),
        (
            {"type": "message", "role": "tool", "content": "x"},
            "role",
            "'user', 'system', 'developer' or 'assistant'",
        ),
        ({"type": "message", "role": "user"}, "content", "string or a list of parts"),
        ({"type": "message", "role": "user", "content": ["x"]}, "content[0]", "object with a 'type'"),
        ({"type": "hologram_call", "id": "h"}, "type", "unknown item type 'hologram_call'"),
        ({"content": "no role, no type"}, "type", "string 'type'"),
        ({"role": "user", "content": "\ud800"}, "content", "lone UTF-16 surrogate"),
    ],
)
def test_a_malformed_item_raises_naming_its_index_and_field(
    item: dict[str, Any], field: str, words: str
) -> None:
    items = [{"role": "user", "content": "hi"}, item]
    with pytest.raises(InvalidMessageError) as caught:
        responses.to_messages(items)
    assert caught.value.index == 1 and caught.value.field == field
    assert words in str(caught.value)


def test_an_unknown_item_type_can_be_kept_whole_with_a_warning() -> None:
    items = [{"role": "user", "content": "hi"}, {"type": "hologram_call", "id": "h", "beam": [1, 2]}]
    with pytest.warns(ConversionWarning, match="item 1: unknown item type 'hologram_call'"):
        messages = responses.to_messages(items, unknown="keep")
    assert '"beam":[1,2]' in messages[1].text
    assert responses.from_messages(messages) == items


def test_a_reasoning_item_without_its_following_item_is_kept_reported_and_repaired() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "user", "content": "again"},
    ]
    with pytest.warns(
        ConversionWarning, match="item 1: a reasoning item is followed by no item of its response"
    ):
        messages = responses.to_messages(items)
    assert responses.from_messages(messages, validate=False) == items  # kept, nothing lost
    assert [v.rule for v in ac.check_messages(messages)] == ["empty_content", "dangling_reasoning"]
    with pytest.raises(InvalidConversationError, match="dangling_reasoning"):
        responses.from_messages(messages)
    prepared = ac.ContextEngine(model="gpt-4o").prepare(messages)
    assert any(a.kind == "repaired" for a in prepared.report.actions)
    sent = responses.from_messages(prepared.messages)
    assert check_responses({"model": "m", "input": sent})[0] is None
    assert not any(i.get("type") == "reasoning" for i in sent)


def test_a_run_ending_in_reasoning_keeps_the_rest_of_the_run_valid() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}],
        },
        {"type": "reasoning", "id": "rs_2", "summary": []},
    ]
    with pytest.warns(ConversionWarning):
        messages = responses.to_messages(items)
    assert len(messages) == 3 and messages[1].text == "hello"
    assert [v.rule for v in ac.check_messages(messages)] == ["empty_content", "dangling_reasoning"]


def test_the_checker_reports_an_output_without_its_call() -> None:
    messages = responses.to_messages(
        [
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "gone", "output": "x"},
        ]
    )
    with pytest.raises(InvalidConversationError, match="orphan_tool_result"):
        responses.from_messages(messages)


def test_a_hand_edited_layout_is_refused() -> None:
    (user,) = responses.to_messages([{"role": "user", "content": "hi"}])
    forged = ac.Message(
        role="user", content="hi", id=user.id, metadata={"responses": {"id": user.id, "items": []}}
    )
    with pytest.raises(InvalidMessageError, match="metadata\\['responses'\\] does not match") as caught:
        responses.from_messages([forged])
    assert caught.value.index == 0


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(junk_responses_items, max_size=5))
def test_junk_converts_exactly_or_raises_a_clear_error(items: list[dict[str, Any]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)
        try:
            messages = responses.to_messages(items, unknown="keep")
        except InvalidMessageError as e:
            assert e.index is not None and e.field is not None, str(e)
            return
    assert responses.from_messages(messages, validate=False) == items


def test_empty_content_and_empty_outputs_round_trip() -> None:
    items = [
        {"role": "user", "content": []},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": ""},
        {"type": "function_call_output", "call_id": "c1", "output": []},
        {"type": "custom_tool_call", "call_id": "c2", "name": "sh", "input": ""},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": ""},
    ]
    messages = responses.to_messages(items)
    assert messages[2].content == () and messages[4].content == ""
    assert responses.from_messages(messages, validate=False) == items


def test_a_converter_that_met_a_malformed_item_refuses_to_go_on() -> None:
    converter = ResponsesConverter()
    with pytest.raises(InvalidMessageError):
        converter.feed([{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c"}])
    with pytest.raises(InvalidMessageError, match="new ResponsesConverter"):
        converter.feed([{"role": "user", "content": "again"}])


def test_a_message_of_an_open_run_does_not_change_when_the_run_goes_on() -> None:
    converter = ResponsesConverter()
    converter.feed([{"role": "user", "content": "hi"}, {"type": "reasoning", "id": "rs_1", "summary": []}])
    converter.feed([{"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}])
    before = converter.messages()[-1]
    snapshot = copy.deepcopy(dict(before.metadata))
    converter.feed([{"type": "function_call", "call_id": "c2", "name": "ls", "arguments": "{}"}])
    after = converter.messages()[-1]
    assert dict(before.metadata) == snapshot and after.id != before.id
    assert [c.id for c in after.tool_calls] == ["c1", "c2"]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_conversations(max_turns=4), st.integers(1_500, 6_000), st.integers(0, 400))
def test_whatever_the_engine_does_the_responses_api_accepts_the_result(
    items: list[dict[str, Any]], window: int, padding: int
) -> None:
    # Make tool outputs large enough that the engine masks, summarizes and drops.
    for item in items:
        if item.get("type") == "function_call_output" and isinstance(item["output"], str):
            item["output"] += " filler" * padding
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=300)
    messages = responses.to_messages(items)
    try:
        prepared = engine.prepare(messages)
    except ac.exceptions.ContextOverflowError:
        return  # the latest request alone does not fit: said plainly, nothing sent
    sent = responses.from_messages(prepared.messages)
    problem, tokens = check_responses({"model": "gpt-4o", "input": sent}, tied=ties(items))
    assert problem is None, problem
    assert tokens <= window
    latest = next((i for i in reversed(items) if i.get("role") == "user"), None)
    assert latest is None or latest in sent
