"""The engine's promises (fits, valid, keeps the essentials, ordered, honest, pure), each checked over random conversations."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import overload

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext import ContextEngine, EngineState, Level, Prepared, Thresholds
from agentcontext.compaction import is_user_request
from agentcontext.exceptions import ContextOverflowError
from agentcontext.invariants import check_messages
from agentcontext.messages import Message
from agentcontext.testing import WordCounter, make_conversation
from promises import assert_refusal_warranted, essentials

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
    text_actions=st.sampled_from([0.0, 0.0, 0.5]),
)
shares = st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.8, 1.2, 3.0])


def _check_promises(msgs: list[Message], engine: ContextEngine) -> Prepared | None:
    before = copy.deepcopy(msgs)
    try:
        prepared = engine.prepare(msgs)
    except ContextOverflowError as exc:
        # Only allowed when the system prompt plus the latest user message cannot fit.
        assert_refusal_warranted(msgs, engine, exc)
        return None
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
    # The latest request the user wrote: a command's output sent back as a user message is not one.
    users = [m for m in msgs if is_user_request(m) and not m.is_empty()]
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
    return prepared


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversations, share=shares)
def test_promises_hold_on_random_conversations(msgs: list[Message], share: float) -> None:
    total = COUNTER.count_messages(msgs)
    window = max(64, int(total * share))
    engine = ContextEngine(window=window, reserve=window // 8, counter=COUNTER, truncator=None)
    _check_promises(msgs, engine)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversations, share=shares, reach=st.sampled_from([1.0, 1.5, 3.0]))
def test_promises_hold_with_a_short_horizon(msgs: list[Message], share: float, reach: float) -> None:
    """The horizon drops what lies beyond it before the strategies run (here from one budget back): every
    promise still holds, whatever it cuts through (tool blocks, pinned-free messy logs)."""
    total = COUNTER.count_messages(msgs)
    window = max(64, int(total * share))
    budget = window - window // 8
    engine = ContextEngine(
        window=window, reserve=window // 8, counter=COUNTER, truncator=None, horizon=int(reach * budget)
    )
    _check_promises(msgs, engine)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@settings(max_examples=examples(60), deadline=None)
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
    assert_refusal_warranted([Message(role="system", content="be brief"), big], engine, err)
    assert err.budget == 900
    assert "900" in str(err) and "window 1,000" in str(err)


def test_only_our_note_over_the_budget_is_dropped_never_a_reason_to_refuse() -> None:
    """Essentials that fit the budget exactly: older messages go, and so does the note that would mark them."""
    system = Message(role="system", content="policy " * 40)
    request = Message(role="user", content="please " * 40)
    older = [Message(role="user", content="old " * 30), Message(role="assistant", content="reply " * 30)]
    msgs = [system, *older, request]
    probe = ContextEngine(window=10_000, reserve=0, counter=COUNTER, truncator=None)
    floor = essentials(msgs, probe)
    engine = ContextEngine(window=floor, reserve=0, counter=COUNTER, truncator=None)
    prepared = engine.prepare(msgs)
    assert list(prepared.messages) == [system, request]
    assert prepared.report.tokens_after == floor <= engine.budget
    (dropped,) = [a for a in prepared.report.actions if a.kind == "dropped"]
    assert set(dropped.message_ids) == {m.id for m in older} and dropped.replacement_ids == ()
    with pytest.raises(ContextOverflowError) as info:  # one token less, and the refusal is warranted
        ContextEngine(window=floor - 1, reserve=0, counter=COUNTER, truncator=None).prepare(msgs)
    assert info.value.required == floor


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


# ----------------------------------------------------------------------------- a floor that fills the target

thresholds = st.builds(
    lambda t, s, w, h: (
        Thresholds(target=t, soft=max(s, t + 0.01), warn=max(w, s, t + 0.01), hard=1.0)
        if h
        else Thresholds(target=t, soft=max(s, t + 0.01), warn=max(w, s, t + 0.01), hard=max(w, s, t + 0.01))
    ),
    st.floats(0.1, 0.8),
    st.floats(0.3, 0.9),
    st.floats(0.5, 0.95),
    st.booleans(),
)


@settings(max_examples=examples(300), deadline=None)
@given(t=thresholds, floor=st.floats(0.0, 1.5), step=st.floats(0.0, 0.2))
def test_thresholds_rise_with_the_floor_and_stay_ordered(t: Thresholds, floor: float, step: float) -> None:
    lifted = t.above(floor)
    if floor <= t.pivot:
        assert lifted == t  # a small system prompt changes nothing
        return
    # Still valid thresholds (the constructor checks the order), never below the configured ones,
    # with room above the floor for a summary and headroom under the soft limit.
    assert lifted.target >= t.target and lifted.soft >= t.soft and lifted.warn >= t.warn
    assert lifted.hard >= t.hard
    if floor < 0.99:
        assert floor < lifted.target < lifted.soft
    # Monotone: a larger floor never lowers a limit.
    higher = t.above(floor + step)
    assert higher.target >= lifted.target - 1e-9 and higher.soft >= lifted.soft - 1e-9


@settings(max_examples=examples(100), deadline=None)
@given(t=thresholds)
def test_raised_thresholds_are_continuous_at_the_pivot(t: Thresholds) -> None:
    near = t.above(t.pivot + 1e-7)
    for a, b in ((near.target, t.target), (near.soft, t.soft), (near.warn, t.warn), (near.hard, t.hard)):
        assert abs(a - b) < 1e-5


def test_raised_thresholds_with_the_defaults() -> None:
    t = Thresholds()
    assert t.pivot == pytest.approx(0.3)
    assert t.above(0.3) is t
    sixty = t.above(0.6)
    assert (round(sixty.target, 2), round(sixty.soft, 2), round(sixty.warn, 2), round(sixty.hard, 2)) == (
        0.75,
        0.90,
        0.95,
        0.98,
    )
    # Room under the target and headroom under the soft limit stay equal, as configured (0.2 and 0.2).
    assert sixty.target - 0.6 == pytest.approx(sixty.soft - sixty.target)
    over = t.above(1.4)  # essentials over the budget: valid thresholds, the fit check raises
    assert over.target < over.soft <= 1.0


def _policy(words: int) -> Message:
    return Message(role="system", content="Follow the policy below. " + "rule " * words)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    floor=st.sampled_from([0.45, 0.6, 0.75]),
    messy=st.booleans(),
    cjk=st.sampled_from([0.0, 0.5]),
)
# A newest step kept past a raised target (it left compaction due again at once): found by this test.
@example(seed=509503621, floor=0.75, messy=False, cjk=0.0)
def test_a_system_prompt_filling_most_of_the_budget_keeps_a_summary_and_compacts_rarely(
    seed: int, floor: float, messy: bool, cjk: float
) -> None:
    """Issue 4: the essentials past the target used to leave no room for a summary (``no_room``)
    and made every step compact. The engine now raises its thresholds above them."""
    window = 4000
    convo = make_conversation(
        seed,
        rounds=14,
        steps=(1, 3),
        parallel=2,
        system=False,
        cjk_share=cjk,
        huge_share=0.0,
        output_tokens=(5, 60),
        messy=messy,
    )
    msgs = [_policy(int(floor * window)), *convo]
    engine = ContextEngine(window=window, reserve=0, counter=COUNTER, truncator=None)
    steps = compacting = 0
    summarized = False
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        prepared = _check_promises(msgs[:i], engine)
        assert prepared is not None  # the essentials fit the budget: never an overflow
        report = prepared.report
        steps += 1
        assert not [a for a in report.actions if a.kind == "fallback" and a.reason.startswith("no_room")]
        if report.compacted:
            compacting += 1
            assert report.tokens_after <= report.target
            assert report.target > engine.budget * 0.5  # the raised target
        summarized = summarized or any(a.kind == "summarized" for a in report.actions)
        if summarized:  # once there is a summary, a summary stays in the context
            assert any(_kind(x) == "summary" for x in prepared.messages)
    assert compacting == 0 or summarized
    # Compaction leaves headroom under the raised soft limit: not every step compacts.
    assert compacting <= steps // 4


def _kind(m: Message) -> object:
    meta = m.metadata.get("agentcontext")
    return meta.get("kind") if isinstance(meta, dict) else None


def test_a_quiet_step_under_a_raised_soft_limit_costs_o_new_messages() -> None:
    """Between the configured soft limit and the raised one nothing happens, in O(new) work."""
    counter = WordCounter(cache_size=100_000)
    body = make_conversation(
        3, rounds=300, steps=(1, 2), parallel=1, system=False, huge_share=0.0, output_tokens=(5, 20)
    )[:2000]
    # The policy takes half the budget and the history 28% more: past the configured soft limit
    # (70%), under the raised one (85%).
    budget = int(counter.count_messages(body) / 0.28)
    history = [_policy(budget // 2), *body]
    engine = ContextEngine(window=budget, reserve=0, counter=counter, truncator=None)
    first = engine.prepare(history)
    assert first.report.level == Level.NONE and first.report.usage > 0.7
    for step in range(5):
        history = history + [
            Message(role="user", content=f"next request {step}"),
            Message(role="assistant", content=f"answer {step}"),
        ]
        seq = CountingSequence(history)
        tokenized_before = counter.tokenized
        prepared = engine.prepare(seq)
        assert prepared.report.level == Level.NONE and not prepared.report.compacted
        assert counter.tokenized - tokenized_before == 2
        assert seq.touched <= 10
        assert list(prepared.messages) == history
    status = engine.status(history)
    assert status.level == Level.NONE and status.recommendation.startswith("OK")


def test_a_huge_latest_request_raises_the_limits_and_a_small_one_lowers_them() -> None:
    counter = WordCounter()
    msgs = make_conversation(5, rounds=6, steps=(1, 2), parallel=1, huge_share=0.0, output_tokens=(20, 40))
    window = counter.count_messages(msgs) * 2
    big = Message(role="user", content="paste " * int(window * 0.6))
    engine = ContextEngine(window=window, reserve=0, counter=counter, truncator=None)
    raised = engine.prepare([*msgs, big])
    assert raised.report.target > int(0.5 * engine.budget)
    assert big in list(raised.messages)
    small = Message(role="user", content="thanks, now a small one")
    after = engine.prepare([*msgs, big, Message(role="assistant", content="done"), small])
    assert after.report.target == int(0.5 * engine.budget)


def test_tools_and_instructions_sent_beside_the_messages_are_counted_and_leave_them_less_room() -> None:
    msgs = make_conversation(3, rounds=6, steps=(1, 3), parallel=1, huge_share=0.0)
    tools = [{"type": "function", "function": {"name": "run", "description": "run a shell command " * 20}}]
    instructions = "Follow the house rules. " * 60
    engine = ContextEngine(
        window=COUNTER.count_messages(msgs) * 2, reserve=0, counter=COUNTER, truncator=None
    )
    plain = engine.prepare(msgs, state=EngineState.new())
    dressed = engine.prepare(msgs, tools=tools, instructions=instructions, state=EngineState.new())
    extra = dressed.report.tool_tokens + dressed.report.instruction_tokens
    assert dressed.report.tool_tokens == engine.count([], tools=tools) - engine.count([]) > 0
    assert extra == engine.count([], tools=tools, instructions=instructions) - engine.count([])
    assert dressed.report.tokens_before == plain.report.tokens_before + extra
    assert dressed.report.tokens_after <= engine.budget
    with pytest.raises(ContextOverflowError, match="tool definitions .* and instructions"):
        ContextEngine(window=extra, reserve=0, counter=COUNTER).prepare(
            msgs, tools=tools, instructions=instructions
        )
