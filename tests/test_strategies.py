"""Each strategy on its own: what it keeps, what it reports, and its configuration errors."""

from __future__ import annotations

import json

import pytest

from agentcontext.exceptions import ConfigError, ContextOverflowError
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, ToolCall
from agentcontext.strategies import (
    CompactionContext,
    HardTruncate,
    MaskObservations,
    SlidingWindow,
    Tiered,
    TokenBudget,
)
from agentcontext.testing import WordCounter

COUNTER = WordCounter()


def ctx(budget: int, target: int | None = None, *, recallable: bool = False) -> CompactionContext:
    return CompactionContext(
        counter=COUNTER,
        budget=budget,
        target=target if target is not None else budget // 2,
        recallable=recallable,
    )


def agent_run(steps: int = 6, output_words: int = 200) -> list[Message]:
    msgs = [
        Message(role="system", content="you are an agent"),
        Message(role="user", content="fix the failing test in parser.py"),
    ]
    for i in range(steps):
        msgs.append(
            Message(
                role="assistant",
                content=f"step {i}",
                tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"cmd": f"run {i}"})),),
            )
        )
        msgs.append(Message(role="tool", tool_call_id=f"c{i}", content=" ".join(["out"] * output_words)))
    msgs.append(Message(role="assistant", content="done"))
    return msgs


def test_token_budget_keeps_a_contiguous_valid_suffix_with_goal_and_system() -> None:
    msgs = agent_run()
    result = TokenBudget().compact(msgs, ctx(budget=1000, target=500))
    out = list(result.messages)
    assert result.tokens <= 500
    assert out[0] == msgs[0] and out[1] == msgs[1]  # system prompt and the goal
    assert check_messages(out) == []
    # After the note, the kept messages are one contiguous run that ends with the conversation.
    kept = [m for m in out[3:]]
    start = msgs.index(kept[0])
    assert kept == msgs[start:]
    (action,) = result.actions
    assert action.kind == "dropped"
    assert set(action.message_ids) == {m.id for m in msgs[2:start]}
    assert out[2].metadata["agentcontext"]["kind"] == "elision"  # type: ignore[index]


def test_token_budget_is_a_no_op_within_budget() -> None:
    msgs = agent_run(steps=1, output_words=5)
    result = TokenBudget().compact(msgs, ctx(budget=10_000))
    assert list(result.messages) == msgs and not result.actions


def test_token_budget_never_separates_a_call_from_its_results() -> None:
    msgs = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(ToolCall(id="a", name="x"), ToolCall(id="b", name="y"))),
        Message(role="tool", tool_call_id="a", content="1 " * 300),
        Message(role="tool", tool_call_id="b", content="2 " * 10),
        Message(role="assistant", content="ok"),
    ]
    for budget in range(20, 700, 37):
        out = list(TokenBudget().compact(msgs, ctx(budget=budget * 2, target=budget)).messages)
        assert check_messages(out) == []


def test_sliding_window_by_messages_and_rounds() -> None:
    msgs = agent_run(steps=10, output_words=3)
    out = list(SlidingWindow(keep_last_messages=4).compact(msgs, ctx(10_000)).messages)
    assert out[-1] == msgs[-1] and check_messages(out) == []
    assert msgs[0] in out and msgs[1] in out
    chat = [Message(role="user" if i % 2 == 0 else "assistant", content=f"m{i}") for i in range(12)]
    out = list(SlidingWindow(keep_last_rounds=2).compact(chat, ctx(10_000)).messages)
    assert out[-4:] == chat[-4:]
    assert out[0] == chat[0]  # the goal is pinned
    with pytest.raises(ConfigError, match="not both"):
        SlidingWindow(keep_last_messages=3, keep_last_rounds=2)
    with pytest.raises(ConfigError, match="at least 1"):
        SlidingWindow(keep_last_rounds=0)


@pytest.mark.parametrize("recallable", [True, False])
def test_masking_replaces_old_results_with_a_placeholder_naming_tool_size_and_ref(recallable: bool) -> None:
    msgs = agent_run(steps=6, output_words=200)
    result = MaskObservations(keep_recent=2, clear_at_least=0).compact(
        msgs, ctx(budget=2000, target=600, recallable=recallable)
    )
    out = list(result.messages)
    tools = [m for m in out if m.role == "tool"]
    masked = [m for m in tools if m.metadata.get("agentcontext")]
    assert tools[-2:] == [m for m in msgs if m.role == "tool"][-2:]  # the newest two are intact
    assert masked, "old results should be masked"
    for m in masked:
        assert "bash" in m.text and "tokens" in m.text
        # The placeholder offers a recall only when a session can serve it.
        assert ("message:" in m.text and "Recall" in m.text) is recallable
        assert m.metadata["agentcontext"]["ref"]  # type: ignore[index]  # the report keeps the ref either way
    assert {a.kind for a in result.actions} == {"masked"}
    assert check_messages(out) == []


def test_a_masked_result_keeps_how_a_failed_command_or_a_test_run_ended() -> None:
    # The error an agent must not repeat was lost with the output (0 of 6 last errors kept by the LLM
    # pipeline at half a window, `bench_probes`); a listing that ended well says nothing worth keeping.
    noise = "\n".join(f"  frame {i} in helper_{i}" for i in range(120))
    outputs = [
        f"Traceback (most recent call last):\n{noise}\nModuleNotFoundError: No module named 'pytz'",
        f"{noise}\n===== 2 failed, 40 passed in 3.21s =====",
        f"{noise}\nall good",
        "step 4 output " * 50,
    ]
    msgs = [Message(role="user", content="fix the failing test")]
    for i, text in enumerate(outputs):
        cmd = "python -m pytest tests" if i == 1 else f"python run_{i}.py"
        msgs.append(
            Message(
                role="assistant",
                tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"cmd": cmd})),),
            )
        )
        msgs.append(Message(role="tool", tool_call_id=f"c{i}", content=text))
    out = (
        MaskObservations(keep_recent=1, clear_at_least=0).compact(msgs, ctx(budget=4000, target=100)).messages
    )
    error, tests, fine = (m.text for m in out if m.role == "tool" and m.metadata.get("agentcontext"))
    assert "It ended: ModuleNotFoundError: No module named 'pytz'." in error
    assert "It ended: 2 failed, 40 passed." in tests and "3.21s" not in tests
    assert "ended" not in fine and "all good" not in fine
    assert all(COUNTER.count_message(m) < 40 for m in out[1:] if m.metadata.get("agentcontext"))


def test_notes_promise_a_recall_only_when_one_can_be_served() -> None:
    msgs = agent_run(steps=8, output_words=200)
    for recallable in (True, False):
        out = list(TokenBudget().compact(msgs, ctx(budget=900, target=500, recallable=recallable)).messages)
        (note,) = [m for m in out if m.metadata.get("agentcontext", {}).get("kind") == "elision"]  # type: ignore[union-attr]
        assert ("recalled" in note.text) is recallable


def test_masking_respects_protected_tools_and_clear_at_least() -> None:
    msgs = agent_run(steps=6, output_words=200)
    protected = MaskObservations(keep_recent=0, clear_at_least=0, protected_tools=frozenset({"bash"}))
    assert not protected.compact(msgs, ctx(2000, 100)).actions
    stingy = MaskObservations(keep_recent=0, clear_at_least=100_000)
    result = stingy.compact(msgs, ctx(2000, 100))
    assert not result.actions and "clear_at_least" in result.note
    assert list(result.messages) == msgs


def test_masking_shortens_old_arguments_and_keeps_them_valid_json() -> None:
    msgs = [Message(role="user", content="write it")]
    for i in range(3):
        big = json.dumps({"path": f"f{i}.py", "content": "x = 1\n" * 400})
        msgs.append(
            Message(role="assistant", tool_calls=(ToolCall(id=f"w{i}", name="write", arguments=big),))
        )
        msgs.append(Message(role="tool", tool_call_id=f"w{i}", content="ok"))
    result = MaskObservations(
        keep_recent=1, clear_at_least=0, min_tokens=0, shorten_arguments_over=100
    ).compact(msgs, ctx(200, 10))
    shortened = [a for a in result.actions if a.kind == "arguments_shortened"]
    assert shortened
    for m in result.messages:
        for call in m.tool_calls:
            parsed = json.loads(call.arguments)
            assert parsed["path"].startswith("f")


def test_hard_truncate_fits_keeps_essentials_and_raises_with_numbers() -> None:
    msgs = agent_run(steps=8, output_words=400)
    result = HardTruncate().compact(msgs, ctx(budget=600, target=300))
    out = list(result.messages)
    assert COUNTER.count_messages(out) <= 600
    assert msgs[0] in out and msgs[1] in out
    assert check_messages(out) == []
    huge_user = [Message(role="system", content="s"), Message(role="user", content="w " * 2000)]
    with pytest.raises(ContextOverflowError) as info:
        HardTruncate().compact(huge_user, ctx(budget=500, target=250))
    assert info.value.required > info.value.budget == 500


def test_tiered_stops_at_the_first_tier_that_reaches_the_target() -> None:
    msgs = agent_run(steps=6, output_words=200)
    pipeline = Tiered(tiers=(MaskObservations(keep_recent=1, clear_at_least=0), TokenBudget()))
    assert COUNTER.count_messages(msgs) > 800
    result = pipeline.flow(msgs, ctx(budget=4000, target=800))
    try:
        next(result)
    except StopIteration as stop:
        final = stop.value
    else:  # pragma: no cover
        raise AssertionError("pure tiers never yield")
    assert final.tokens <= 800
    assert {a.kind for a in final.actions} == {"masked"}  # masking alone was enough
    with pytest.raises(ConfigError):
        Tiered(tiers=())


def test_the_engines_stats_count_every_message_dropped_masked_or_summarized() -> None:
    # The reports named each message compaction took out of the prompt, but the stats said only how
    # many calls compacted: 122 dropped and 94 masked messages showed as one emergency compaction.
    from agentcontext import ContextEngine, Level
    from agentcontext.testing import make_conversation

    msgs = make_conversation(3, rounds=6, steps=(2, 6), output_tokens=(200, 1500))
    budgeted = {
        lvl: Tiered(tiers=(MaskObservations(keep_recent=1, clear_at_least=0), TokenBudget()))
        for lvl in Level
        if lvl
    }
    for pipelines in (None, budgeted):
        engine = ContextEngine(
            counter=WordCounter(), window=3_000, reserve=500, truncator=None, pipelines=pipelines
        )
        done: dict[str, int] = {"summarized": 0, "dropped": 0, "masked": 0}
        for stop in range(2, len(msgs) + 1):
            for a in engine.prepare(msgs[:stop]).report.actions:
                if a.kind in done:
                    done[a.kind] += len(a.message_ids)
        stats = engine.stats
        assert (stats.messages_summarized, stats.messages_dropped, stats.messages_masked) == (
            done["summarized"],
            done["dropped"],
            done["masked"],
        )
        assert sum(done.values()) > 0
        assert stats.to_dict()["messages_masked"] == done["masked"]
    assert done["masked"] and done["dropped"]


@pytest.mark.parametrize("fill", [False, True])
def test_a_newest_call_whose_arguments_alone_overflow_is_shortened_not_summarized(fill: bool) -> None:
    # A file written in one call: its arguments alone are over the budget. The summary took that step
    # whole, and every earlier round that did fit: 25,042 tokens became 323 in an 18,000-token budget.
    from agentcontext import ContextEngine

    msgs = [
        Message(role="system", content="You refactor."),
        Message(role="user", content="Rewrite the module."),
    ]
    for i in range(3):
        read = ToolCall(id=f"r{i}", name="read_file", arguments=json.dumps({"path": f"m{i}.py"}))
        msgs += [
            Message(role="assistant", tool_calls=(read,)),
            Message(role="tool", tool_call_id=read.id, content=f"line of m{i}.py " * 100),
        ]
    write = ToolCall(
        id="w", name="write_file", arguments=json.dumps({"path": "new.py", "content": "x = 1 " * 3000})
    )
    msgs += [
        Message(role="assistant", tool_calls=(write,)),
        Message(role="tool", tool_call_id="w", content="written"),
    ]
    engine = ContextEngine(counter=COUNTER, window=3_000, reserve=500)
    prepared = engine.prepare(msgs, fill=fill)
    out = list(prepared.messages)
    assert prepared.report.tokens_after <= prepared.report.budget and check_messages(out) == []
    if fill:
        assert out[2:8] == msgs[2:8]  # the reads, which fit, stay as they were
    else:
        assert prepared.report.tokens_after <= prepared.report.target  # then compacted to the target
    shortened = out[-2].tool_calls[0]
    assert shortened.id == "w" and json.loads(shortened.arguments)["path"] == "new.py"
    assert len(shortened.arguments) < len(write.arguments) and out[-1] == msgs[-1]
    (action,) = [a for a in prepared.report.actions if a.kind == "arguments_shortened"]
    assert action.refs == (f"message:{msgs[-2].id}",)
