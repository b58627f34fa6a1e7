"""Repairs of real-world input, strict mode, and the 63 real conversations in shared/eval."""

from __future__ import annotations

import re

import pytest

from agentcontext.compaction import is_observation
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import InvalidConversationError
from agentcontext.formats import openai as oai
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, ToolCall
from agentcontext.repair import repair_messages
from agentcontext.testing import WordCounter
from realdata import load, manifest


def engine(**kw: object) -> ContextEngine:
    return ContextEngine(window=100_000, reserve=1000, counter=WordCounter(), truncator=None, **kw)  # type: ignore[arg-type]


def call(i: str, name: str = "bash") -> ToolCall:
    return ToolCall(id=i, name=name, arguments="{}")


def test_unanswered_call_gets_a_marked_stub_before_the_next_turn() -> None:
    msgs = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(call("a"), call("b"))),
        Message(role="tool", tool_call_id="a", content="ok"),
        Message(role="user", content="and?"),
    ]
    prepared = engine().prepare(msgs)
    out = list(prepared.messages)
    assert check_messages(out) == []
    stub = out[3]
    assert stub.role == "tool" and stub.tool_call_id == "b" and "no result followed" in stub.text
    assert any(a.kind == "repaired" and "'b'" in a.reason for a in prepared.report.actions)


def test_a_system_message_after_an_unanswered_call_comes_after_its_stub() -> None:
    """A harness notice after a call that never got its result: the stub answers the call right after it,
    before the notice (the stub after the notice left the call unanswered and the stub an orphan)."""
    msgs = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(call("c1"),)),
        Message(role="system", content="note from the harness: the run was resumed"),
        Message(role="user", content="next"),
    ]
    prepared = engine().prepare(msgs)
    out = list(prepared.messages)
    assert check_messages(out) == []
    assert [m.role for m in out] == ["user", "assistant", "tool", "system", "user"]
    assert out[2].tool_call_id == "c1" and "no result followed" in out[2].text
    # A result arriving after the notice no longer follows its call: what it says reaches the model as
    # text, marked as a command's output (it was dropped, with the stub claiming no result existed).
    late = Message(role="tool", tool_call_id="c1", content="done: 3 tests FAILED")
    prepared = engine().prepare(msgs[:3] + [late] + msgs[3:])
    out = list(prepared.messages)
    assert check_messages(out) == []
    assert [m.role for m in out] == ["user", "assistant", "tool", "system", "user", "user"]
    assert "done: 3 tests FAILED" in out[4].text and "'c1'" in out[4].text and is_observation(out[4])
    assert out[5].text == "next"  # still the latest request
    assert any(a.kind == "repaired" and late.id in a.message_ids for a in prepared.report.actions)


def test_a_result_before_any_call_is_kept_as_text_and_a_duplicate_is_taken_out() -> None:
    msgs = [
        Message(role="user", content="go"),
        Message(role="tool", tool_call_id="nobody", content="stray"),
        Message(role="assistant", tool_calls=(call("a"),)),
        Message(role="tool", tool_call_id="a", content="first"),
        Message(role="tool", tool_call_id="a", content="second"),
        Message(role="assistant", content="done"),
    ]
    prepared = engine().prepare(msgs)
    out = list(prepared.messages)
    assert check_messages(out) == []
    assert msgs[1] not in out and msgs[4] not in out
    assert out[1].role == "user" and "stray" in out[1].text
    reasons = " ".join(a.reason for a in prepared.report.actions)
    assert "came late or early" in reasons and "already answered" in reasons


def test_repeated_call_ids_are_renamed_with_their_results() -> None:
    msgs = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(call("call_0"),)),
        Message(role="tool", tool_call_id="call_0", content="one"),
        Message(role="assistant", tool_calls=(call("call_0"),)),
        Message(role="tool", tool_call_id="call_0", content="two"),
        Message(role="assistant", content="done"),
    ]
    out, actions, _ = repair_messages(msgs)
    assert check_messages(out) == []
    assert out[3].tool_calls[0].id == "call_0_2" and out[4].tool_call_id == "call_0_2"
    assert out[4].text == "two"
    assert len([a for a in actions if a.kind == "repaired"]) == 2


def test_a_repeated_id_inside_one_message_keeps_each_result_with_the_call_it_answered() -> None:
    """Two calls named ``dup`` in one message: the first result answers the first call, the second the second."""
    msgs = [
        Message(role="user", content="go"),
        Message(
            role="assistant",
            tool_calls=(
                ToolCall(id="dup", name="read", arguments='{"path": "a.py"}'),
                ToolCall(id="dup", name="read", arguments='{"path": "b.py"}'),
            ),
        ),
        Message(role="tool", tool_call_id="dup", content="contents of a.py"),
        Message(role="tool", tool_call_id="dup", content="contents of b.py"),
        Message(role="assistant", content="done"),
    ]
    out, actions, state = repair_messages(msgs)
    assert check_messages(out) == []
    first, second = out[1].tool_calls
    assert (first.id, second.id) == ("dup", "dup_2")
    by_call = {m.tool_call_id: m.text for m in out if m.role == "tool"}
    assert by_call == {"dup": "contents of a.py", "dup_2": "contents of b.py"}
    assert not state.pending and not any("stub" in m.text for m in out)  # nothing stubbed, nothing dropped
    (renamed,) = [a for a in actions if a.kind == "repaired" and a.reason.startswith("repeated")]
    assert "'dup' -> 'dup_2'" in renamed.reason


def test_renamed_ids_use_only_characters_every_provider_accepts() -> None:
    msgs = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(ToolCall(id="call.1:x", name="f"),)),
        Message(role="tool", tool_call_id="call.1:x", content="one"),
        Message(role="assistant", tool_calls=(ToolCall(id="call.1:x", name="f"),)),
        Message(role="tool", tool_call_id="call.1:x", content="two"),
    ]
    out, _, _ = repair_messages(msgs)
    renamed = out[3].tool_calls[0].id
    assert renamed != "call.1:x" and re.fullmatch(r"[A-Za-z0-9_-]+", renamed)
    assert out[4].tool_call_id == renamed and out[4].text == "two"


def test_missing_opening_user_message_and_empty_messages() -> None:
    msgs = [
        Message(role="system", content="s"),
        Message(role="assistant", content="hello"),
        Message(role="user", content=""),
    ]
    out = list(engine().prepare(msgs).messages)
    assert check_messages(out) == []
    assert out[1].role == "user" and out[1].metadata["agentcontext"]["kind"] == "opener"  # type: ignore[index]
    assert out[-1].text.strip()


def test_strict_mode_refuses_and_names_the_problem() -> None:
    msgs = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(call("a"),)),
        Message(role="user", content="?"),
    ]
    with pytest.raises(InvalidConversationError, match=r"message 2: tool calls never answered .*'a'"):
        engine(strict=True).prepare(msgs)
    with pytest.raises(InvalidConversationError, match=r"never answered \('a', in message 1\)"):
        engine(strict=True).prepare(msgs[:2])


def test_strict_mode_names_the_message_when_checking_step_by_step() -> None:
    """An agent checks each step: the index is the message's place in the whole list, not in the new part."""
    e = engine(strict=True)
    msgs = [Message(role="user", content="go"), Message(role="assistant", content="ok")]
    e.prepare(msgs)
    msgs += [Message(role="user", content="more"), Message(role="tool", tool_call_id="zz", content="orphan")]
    with pytest.raises(InvalidConversationError, match=r"message 3: tool result for 'zz'"):
        e.prepare(msgs)


def test_pending_calls_at_the_end_are_stubbed_only_in_the_output() -> None:
    e = engine()
    msgs = [Message(role="user", content="go"), Message(role="assistant", tool_calls=(call("a"),))]
    first = list(e.prepare(msgs).messages)
    assert first[-1].role == "tool" and first[-1].tool_call_id == "a"  # stub
    msgs = msgs + [
        Message(role="tool", tool_call_id="a", content="real output"),
        Message(role="assistant", content="ok"),
    ]
    second = e.prepare(msgs)
    out = list(second.messages)
    assert second.report.incremental
    assert [m.text for m in out if m.role == "tool"] == ["real output"]
    assert check_messages(out) == []


def test_every_real_conversation_is_repaired_to_a_valid_prompt() -> None:
    entries = manifest()
    assert len(entries) >= 10
    for info in entries:
        path = info["path"]
        msgs = oai.to_messages(load(path))
        out = list(engine().prepare(msgs).messages)
        assert check_messages(out) == [], path.name
        oai.from_messages(out)  # accepted by the OpenAI format's validation
        problems = (
            info["unanswered_tool_calls"] + info["orphan_tool_results"] + info["duplicate_tool_call_ids"]
        )
        if problems:
            with pytest.raises(InvalidConversationError):
                engine(strict=True).prepare(msgs)
