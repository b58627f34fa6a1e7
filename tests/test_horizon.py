"""The engine's horizon: a history far longer than the window costs what its newest part costs.

The first prepare of a very long history (or the first after reopening a long
session) tokenizes and compacts only what lies within the horizon; older
messages are estimated, dropped before the strategies run and reported, while
what stays at any age stays: the system prompt, pinned messages, the user's
first and latest requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentcontext import ContextEngine, Level, Message
from agentcontext.exceptions import ConfigError
from agentcontext.invariants import check_messages
from agentcontext.messages import ToolCall
from agentcontext.strategies import CompactionContext, CompactionFlow, Strategy, Summarize
from agentcontext.strategies.pipeline import default_pipelines
from agentcontext.testing import WordCounter


def history(rounds: int) -> list[Message]:
    """A task, then rounds of: a user request, a tool call, its result, an answer (about 40 tokens a round)."""
    msgs = [
        Message(role="system", content="You are a careful agent."),
        Message(role="user", content="Goal: ship it"),
    ]
    for i in range(rounds):
        call = ToolCall(id=f"c{i}", name="bash", arguments=f'{{"cmd": "grep -n item_{i} src/app.py"}}')
        msgs += [
            Message(role="user", content=f"request {i}: look at item_{i} next"),
            Message(role="assistant", tool_calls=(call,)),
            Message(
                role="tool", tool_call_id=f"c{i}", content=f"src/app.py:{i}: item_{i} = compute({i}) # ok"
            ),
            Message(role="assistant", content=f"item_{i} is fine, moving on"),
        ]
    return msgs


class Seen:
    """A pipeline that records how many messages it was given, then runs the one it wraps."""

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        self.name = inner.name
        self.sizes: list[int] = []

    def flow(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionFlow:
        self.sizes.append(len(messages))
        return (yield from self.inner.flow(messages, ctx))


def engine_for(counter: WordCounter, horizon: int | None) -> tuple[ContextEngine, list[Seen]]:
    seen = {level: Seen(p) for level, p in default_pipelines().items()}
    engine = ContextEngine(
        window=3_000, reserve=500, counter=counter, truncator=None, pipelines=dict(seen), horizon=horizon
    )
    return engine, list(seen.values())


def test_a_history_beyond_the_horizon_costs_what_its_newest_part_costs() -> None:
    """Twice the history: the same number of messages tokenized and handed to the strategies (O(horizon))."""
    tokenized, handed = {}, {}
    for rounds in (3_000, 6_000):
        msgs = history(rounds)
        counter = WordCounter(cache_size=1_000_000)
        engine, seen = engine_for(counter, horizon=20_000)
        prepared = engine.prepare(msgs)
        out = list(prepared.messages)
        assert check_messages(out) == []
        assert counter.count_messages(out) <= engine.budget
        # What stays at any age: the system prompt, the goal, the latest request.
        assert out[0] == msgs[0] and msgs[1] in out and msgs[-4] in out
        # Nothing vanished: every message is in the prompt or named by an action.
        accounted = {i for a in prepared.report.actions for i in a.message_ids} | {m.id for m in out}
        assert all(m.id in accounted for m in msgs)
        horizon_drop = [a for a in prepared.report.actions if a.strategy == "horizon"]
        assert len(horizon_drop) == 1 and "estimate" in horizon_drop[0].reason
        assert any("without being tokenized" in note for note in prepared.report.notes)
        tokenized[rounds] = counter.tokenized
        handed[rounds] = max(size for s in seen for size in s.sizes)
    # Exact counts for the newest 20,000 tokens and a chunk past them (plus the few requests kept from
    # before); a pass over everything would double with the history.
    assert tokenized[6_000] <= tokenized[3_000] * 1.1, tokenized
    assert handed[6_000] <= handed[3_000] * 1.1, handed
    assert tokenized[6_000] < len(history(6_000)) / 2


def test_the_estimate_of_what_was_not_tokenized_is_close_and_said_to_be_one() -> None:
    msgs = history(6_000)
    exact = WordCounter(cache_size=0).count_messages(msgs)
    counter = WordCounter(cache_size=1_000_000)
    engine, _ = engine_for(counter, horizon=20_000)
    report = engine.prepare(msgs).report
    assert counter.tokenized < len(msgs) / 2
    assert abs(report.tokens_before - exact) <= 0.03 * exact, (report.tokens_before, exact)


def test_without_a_horizon_the_strategies_see_everything_and_counts_are_exact() -> None:
    msgs = history(3_000)
    counter = WordCounter(cache_size=1_000_000)
    engine, seen = engine_for(counter, horizon=None)
    report = engine.prepare(msgs).report
    assert counter.tokenized >= len(msgs)  # every message (and the summaries written)
    assert report.tokens_before == WordCounter(cache_size=0).count_messages(msgs)
    assert max(size for s in seen for size in s.sizes) >= len(msgs)
    assert not any(a.strategy == "horizon" for a in report.actions)


def test_pinned_messages_beyond_the_horizon_stay_and_a_pinned_result_keeps_its_call() -> None:
    msgs = history(3_000)
    pinned_user = msgs[10].evolve(metadata={"pinned": True})
    pinned_result = msgs[20].evolve(metadata={"pinned": True})  # a tool result
    assert pinned_user.role == "user" and pinned_result.role == "tool"
    msgs[10], msgs[20] = pinned_user, pinned_result
    engine, _ = engine_for(WordCounter(cache_size=1_000_000), horizon=20_000)
    prepared = engine.prepare(msgs)
    horizon_drop = next(a for a in prepared.report.actions if a.strategy == "horizon")
    # The pinned result cannot stand without its call: the horizon does not reach past it.
    assert msgs[19].id not in horizon_drop.message_ids and pinned_result.id not in horizon_drop.message_ids
    assert pinned_user.id not in horizon_drop.message_ids
    assert check_messages(list(prepared.messages)) == []


def test_the_default_horizon_covers_what_the_pipelines_summaries_read() -> None:
    wide = Summarize(max_offline_input_tokens=5_000_000)
    engine = ContextEngine(
        window=100_000,
        reserve=10_000,
        counter=WordCounter(),
        pipelines={level: wide for level in (Level.NORMAL, Level.AGGRESSIVE, Level.EMERGENCY)},
    )
    assert engine.horizon is not None and engine.horizon >= 5_000_000 + engine.budget
    plain = ContextEngine(window=100_000, reserve=10_000, counter=WordCounter())
    assert plain.horizon == 1_000_000  # eight budgets are less than the floor


@pytest.mark.parametrize("horizon", [0, 100, -5, 2.5, True, "far"])
def test_a_horizon_shorter_than_the_budget_or_not_a_number_is_refused(horizon: object) -> None:
    with pytest.raises(ConfigError, match="horizon"):
        ContextEngine(window=3_000, reserve=500, counter=WordCounter(), horizon=horizon)  # type: ignore[arg-type]


def test_a_huge_batch_appended_to_a_running_conversation_is_bounded_the_same_way() -> None:
    """An agent that hands over thousands of new messages at once (a restored backlog) extends its state:
    what is beyond the horizon among the new messages is estimated and dropped like on a first call."""
    msgs = history(3_000)
    counter = WordCounter(cache_size=1_000_000)
    engine, _ = engine_for(counter, horizon=20_000)
    first = engine.prepare(msgs[:40])
    assert not first.report.compacted
    before = counter.tokenized
    prepared = engine.prepare(msgs, state=first.state)
    assert prepared.report.incremental
    out = list(prepared.messages)
    assert check_messages(out) == [] and counter.count_messages(out) <= engine.budget
    accounted = {i for a in prepared.report.actions for i in a.message_ids} | {m.id for m in out}
    assert all(m.id in accounted for m in msgs)
    assert any("without being tokenized" in note for note in prepared.report.notes)
    assert counter.tokenized - before < len(msgs) / 2
    # The next step is O(new) again, on the compacted state.
    step = msgs + [Message(role="user", content="and now?")]
    again = engine.prepare(step, state=prepared.state)
    assert again.report.incremental and list(again.messages)[-1] == step[-1]


def test_what_the_horizon_cannot_drop_is_still_cut_at_the_ingest_limit() -> None:
    """A pinned tool result far back holds the cut before it: everything after it stays, and a huge output
    among what stays is cut at the ingest limit (its full text kept as an artifact), as without a horizon."""
    msgs = history(3_000)
    assert msgs[4].role == "tool" and msgs[400].role == "tool"
    msgs[4] = msgs[4].evolve(metadata={"pinned": True})
    huge = msgs[400] = msgs[400].evolve(content=" ".join(f"log{i}" for i in range(200_000)))
    for horizon in (None, 20_000):
        engine = ContextEngine(
            window=3_000, reserve=500, counter=WordCounter(cache_size=1_000_000), horizon=horizon
        )
        prepared = engine.prepare(msgs)
        cut = [a for a in prepared.report.actions if a.kind == "truncated" and a.strategy == "ingest"]
        assert [a.message_ids for a in cut].count((huge.id,)) == 1, horizon
        assert all(len(m.text) < len(huge.text) for m in prepared.messages)
        assert check_messages(list(prepared.messages)) == []
