"""The engine's promises (DESIGN.md 1-5, 7, 8), each checked over random conversations."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import overload

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcontext.engine import ContextEngine, Level
from agentcontext.exceptions import ContextOverflowError
from agentcontext.invariants import check_messages
from agentcontext.messages import Message
from agentcontext.testing import WordCounter, make_conversation

COUNTER = WordCounter(cache_size=200_000)

conversations = st.builds(
    make_conversation,
    seed=st.integers(0, 10**9),
    rounds=st.integers(1, 8),
    steps=st.sampled_from([(0, 0), (0, 3), (1, 6)]),
    parallel=st.integers(1, 4),
    system=st.booleans(),
    cjk_share=st.sampled_from([0.0, 0.3, 1.0]),
    huge_share=st.sampled_from([0.0, 0.1, 0.3]),
    messy=st.booleans(),
)
shares = st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.8, 1.2, 3.0])


def _essential_cost(msgs: Sequence[Message]) -> int:
    head = [m for m in msgs if m.role == "system"][:1]
    users = [m for m in msgs if m.role == "user"]
    return sum(COUNTER.count_message(m) for m in head + users[-1:]) + 60


def _check_promises(msgs: list[Message], engine: ContextEngine) -> None:
    before = copy.deepcopy(msgs)
    try:
        prepared = engine.prepare(msgs)
    except ContextOverflowError as exc:
        # Only allowed when the system prompt plus the latest user message cannot fit.
        assert exc.required > exc.budget
        assert _essential_cost(msgs) > engine.budget * 0.5
        return
    out = list(prepared.messages)
    report = prepared.report
    # 8. Pure: the input is untouched.
    assert msgs == before
    # 1. Fits.
    assert COUNTER.count_messages(out) <= engine.budget
    assert report.tokens_after == COUNTER.count_messages(out)
    # 2. Valid.
    assert check_messages(out) == []
    # 3. Keeps the system prompt and the latest user message verbatim.
    lead_systems = []
    for m in msgs:
        if m.role != "system":
            break
        lead_systems.append(m)
    for m in lead_systems:
        assert m in out
    users = [m for m in msgs if m.role == "user" and not m.is_empty()]
    if users:
        assert users[-1] in out
    # 4. Ordered: kept originals keep their relative order.
    index = {m.id: i for i, m in enumerate(msgs)}
    kept_positions = [index[m.id] for m in out if m.id in index]
    assert kept_positions == sorted(kept_positions)
    # 5. Honest: every input message missing from the output is accounted for.
    out_ids = {m.id for m in out}
    accounted = {i for a in report.actions + report.in_effect for i in a.message_ids}
    for m in msgs:
        assert m.id in out_ids or m.id in accounted, f"{m.role} message {m.id} vanished without a report"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversations, share=shares)
def test_promises_hold_on_random_conversations(msgs: list[Message], share: float) -> None:
    total = COUNTER.count_messages(msgs)
    window = max(64, int(total * share))
    engine = ContextEngine(window=window, reserve=window // 8, counter=COUNTER, truncator=None)
    _check_promises(msgs, engine)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversations, share=shares)
def test_promises_hold_step_by_step(msgs: list[Message], share: float) -> None:
    """An agent loop: prepare before every assistant message, with the history so far."""
    total = COUNTER.count_messages(msgs)
    window = max(64, int(total * share))
    engine = ContextEngine(window=window, reserve=window // 8, counter=COUNTER, truncator=None)
    for i, m in enumerate(msgs):
        if m.role == "assistant":
            _check_promises(msgs[:i], engine)
    _check_promises(msgs, engine)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9), rounds=st.integers(1, 6))
def test_under_soft_limit_valid_input_comes_back_unchanged(seed: int, rounds: int) -> None:
    msgs = make_conversation(seed, rounds=rounds, huge_share=0.0)
    total = COUNTER.count_messages(msgs)
    window = int(total / 0.6) + 100  # usage about 60%, under the 70% soft limit
    engine = ContextEngine(window=window, reserve=0, counter=COUNTER, truncator=None)
    prepared = engine.prepare(msgs)
    assert list(prepared.messages) == msgs
    assert prepared.report.level == Level.NONE
    assert prepared.report.actions == ()


def test_overflow_error_names_the_numbers() -> None:
    big = Message(role="user", content="word " * 5000)
    engine = ContextEngine(window=1000, reserve=100, counter=COUNTER, truncator=None)
    with pytest.raises(ContextOverflowError) as info:
        engine.prepare([Message(role="system", content="be brief"), big])
    err = info.value
    assert err.required > err.budget == 900
    assert "900" in str(err) and "window 1,000" in str(err)


class CountingSequence(Sequence[Message]):
    """A list wrapper that counts how many elements the engine touches."""

    def __init__(self, items: list[Message]) -> None:
        self.items = items
        self.touched = 0

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, i: int) -> Message: ...
    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...
    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        got = self.items[i]
        self.touched += len(got) if isinstance(got, list) else 1
        return got

    def __iter__(self) -> Iterator[Message]:
        for m in self.items:
            self.touched += 1
            yield m


@pytest.mark.parametrize("size", [100, 10_000])
def test_a_step_with_nothing_to_compact_costs_o_new_messages(size: int) -> None:
    history = make_conversation(
        7, rounds=size // 10, steps=(1, 2), parallel=1, huge_share=0.0, output_tokens=(5, 20)
    )[:size]
    counter = WordCounter(cache_size=size * 2)
    total = counter.count_messages(history)
    engine = ContextEngine(window=total * 4, reserve=0, counter=counter, truncator=None)
    engine.prepare(history)  # the first call walks the history once
    for step in range(5):
        new = [
            Message(role="user", content=f"next request {step}"),
            Message(role="assistant", content=f"answer {step}"),
        ]
        history = history + new
        seq = CountingSequence(history)
        tokenized_before = counter.tokenized
        prepared = engine.prepare(seq)
        assert counter.tokenized - tokenized_before == 2  # only the new messages were counted
        assert seq.touched <= 10  # a few id checks plus the new messages, whatever the size
        assert prepared.report.incremental
        assert list(prepared.messages) == history
