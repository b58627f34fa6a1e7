"""The engine's promises with the defaults users get: exact o200k counts, ingest truncation, summaries.

`test_engine_properties.py` checks the promises with a cheap word counter and no
ingest step; here the same promises hold with the real tokenizer, the default
truncator (huge tool outputs cut when they arrive, kept in the artifact store)
and the default pipeline (offline summaries), over random conversations.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import ContextOverflowError
from agentcontext.invariants import check_messages
from agentcontext.messages import Message
from agentcontext.testing import make_conversation
from agentcontext.tokens import TiktokenCounter
from promises import assert_refusal_warranted

COUNTER = TiktokenCounter("o200k_base")

conversations = st.builds(
    make_conversation,
    seed=st.integers(0, 10**9),
    rounds=st.integers(1, 6),
    steps=st.sampled_from([(0, 2), (1, 5)]),
    parallel=st.integers(1, 3),
    system=st.booleans(),
    cjk_share=st.sampled_from([0.0, 0.5]),
    huge_share=st.sampled_from([0.0, 0.2, 0.5]),
    messy=st.booleans(),
)


def _accounted(report_actions: tuple[object, ...]) -> set[str]:
    return {i for a in report_actions for i in a.message_ids}  # type: ignore[attr-defined]


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(msgs=conversations, share=st.sampled_from([0.1, 0.3, 0.6, 1.0, 2.0]))
def test_default_engine_keeps_every_promise_step_by_step(msgs: list[Message], share: float) -> None:
    total = COUNTER.count_messages(msgs)
    window = max(400, int(total * share))
    engine = ContextEngine(window=window, reserve=window // 8, counter=COUNTER)
    before = copy.deepcopy(msgs)
    for stop in [i for i, m in enumerate(msgs) if m.role == "assistant"] + [len(msgs)]:
        history = msgs[:stop]
        try:
            prepared = engine.prepare(history)
        except ContextOverflowError as exc:
            assert_refusal_warranted(history, engine, exc)
            continue
        out = list(prepared.messages)
        assert COUNTER.count_messages(out) == prepared.report.tokens_after <= engine.budget
        assert check_messages(out) == []
        users = [m for m in history if m.role == "user" and not m.is_empty()]
        if users:
            assert users[-1] in out
        if history and history[0].role == "system":
            assert history[0] in out
        assert not any(
            m.role == "system" and "agentcontext" in m.metadata for m in out
        )  # no synthetic system messages
        out_ids = {m.id for m in out}
        accounted = _accounted(prepared.report.actions + prepared.report.in_effect)
        for m in history:
            assert m.id in out_ids or m.id in accounted
    assert msgs == before


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9))
def test_a_huge_tool_output_is_cut_at_ingest_and_recallable(seed: int) -> None:
    msgs = make_conversation(seed, rounds=2, steps=(1, 2), parallel=1, huge_share=0.0)
    tool_at = next(i for i, m in enumerate(msgs) if m.role == "tool")
    huge = msgs[tool_at].evolve(content="line of build output\n" * 20_000)
    msgs[tool_at] = huge
    engine = ContextEngine(window=32_000, reserve=4_000, counter=COUNTER)
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    assert huge not in out
    (cut,) = [a for a in prepared.report.actions if a.kind == "truncated"]
    assert cut.message_ids == (huge.id,)
    store = engine.truncator.store  # type: ignore[union-attr]
    assert store is not None and store.get(cut.refs[0]) == huge.text
    shortened = next(m for m in out if m.id == cut.replacement_ids[0])
    assert cut.refs[0] in shortened.text  # the model is told where the full output is
    assert COUNTER.count_messages(out) <= engine.budget


def test_an_engine_for_another_window_keeps_every_setting() -> None:
    # LangChain's window="profile" builds the engine for the model's window from yours: it dropped
    # the reserve, the safety margin, the horizon and the truncator (a disabled one came back on),
    # and the one-shot fill pipelines (it passed the running ones as if they were yours).
    from agentcontext.integrations.langchain import _engine_with_window
    from agentcontext.tokens import ScriptEstimator

    counter = ScriptEstimator()
    mine = ContextEngine(
        window=50_000, reserve=7_000, counter=counter, truncator=None, safety_margin=0.2, timeout=5.0
    )
    other = _engine_with_window(mine, 100_000)
    assert isinstance(other, ContextEngine)
    assert (other.window, other.reserve, other.counter, other.truncator, other.timeout) == (
        100_000,
        7_000,
        counter,
        None,
        5.0,
    )
    assert other.budget == int((100_000 - 7_000) * 0.8)
    assert other._fill_pipelines is not other.pipelines  # the defaults, each for its use
    # Its own ingest limit for its own budget, when the truncator was left to the engine.
    sized = ContextEngine(window=50_000, counter=counter).with_window(100_000)
    assert sized.truncator is not None and sized.truncator.max_tokens == sized.budget // 4


def test_a_history_rebuilt_under_new_ids_at_each_call_is_warned_of() -> None:
    # Messages converted one by one at each call get new ids each time: the engine cannot go on from what it
    # remembered, and every call was a full pass that compacted again (93 of 107 calls against 11, the
    # prompt prefix and the cache lost). Nothing said so.
    from agentcontext import IdentityWarning
    from agentcontext.formats import openai as oai

    dicts: list[dict[str, object]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix the parser."},
    ]
    engine = ContextEngine(model="gpt-4o")
    engine.prepare(oai.to_messages(dicts))
    dicts.append({"role": "assistant", "content": "Looking at parse.py."})
    engine.prepare(oai.to_messages(dicts))  # the whole history at once: the same ids, no warning
    dicts.append({"role": "user", "content": "Go on."})
    with pytest.warns(IdentityWarning, match="under new ids.*to_messages") as caught:
        engine.prepare([oai.to_message(d) for d in dicts])
    assert caught[0].filename == __file__  # it points at the call
    ContextEngine(model="gpt-4o").prepare([oai.to_message(d) for d in dicts])  # a first call: nothing to say
