"""Provider usage corrects an estimated count, and a learned correction never breaks the fit.

A provider bills prompts with its own tokenizer; a model without a public one
(Claude, Gemini) is counted by estimate. `ContextEngine.record_usage` teaches the
engine's `CalibratedCounter` the ratio, and each later call scales its budget by
it. The provider here is simulated: it bills ``ratio`` times the estimate of what
it is sent, and a request is over its limit when that bill exceeds the budget.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext import ContextEngine, Session
from agentcontext.exceptions import ConfigError, UsageError
from agentcontext.messages import Message
from agentcontext.models import ModelSpec
from agentcontext.testing import make_conversation
from agentcontext.tokens import CalibratedCounter, ScriptEstimator, TiktokenCounter

ESTIMATED = ModelSpec(
    name="estimated-model",
    provider="anthropic",
    context_window=8_000,
    max_output_tokens=1_000,
    tokenizer="estimate",
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository and return its text with line numbers.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def _billed(engine: ContextEngine, prepared_report_tokens: int, ratio: float) -> int:
    """What a provider billing ``ratio`` times the engine's own (uncorrected) count charges."""
    return math.ceil(prepared_report_tokens * ratio)


def _words(i: int, n: int) -> str:
    words = "the parser reads each token and the checker reports every mismatch it finds".split()
    return " ".join(words[(i + j) % len(words)] for j in range(n))


def _grow_to(engine: ContextEngine, share: float, *, fill: bool) -> tuple[list[Message], object]:
    """A conversation prepared without compaction up to ``share`` of the budget; its last quiet step."""
    msgs = [Message(role="system", content="You are a careful assistant.")]
    i = 0
    while engine.count(msgs) < share * engine.budget:
        msgs.append(Message(role="user" if i % 2 == 0 else "assistant", content=_words(i, 8)))
        i += 1
    if msgs[-1].role != "user":
        msgs.append(Message(role="user", content="and then?"))
    prepared = engine.prepare(msgs, fill=fill)
    assert not prepared.report.compacted
    return msgs, prepared


@pytest.mark.parametrize("fill", [False, True], ids=["running-agent", "one-shot-fit"])
def test_a_correction_learned_mid_conversation_never_lets_a_prompt_overflow(fill: bool) -> None:
    # A quiet step just under the compaction limit, then the provider says the estimate is 49% low.
    # The engine's state carries the counts of that step; counted the old way (the totals kept, the
    # correction applied to new messages only), the next request billed 1.49 times the budget.
    counter = CalibratedCounter(ScriptEstimator())
    engine = ContextEngine(counter=counter, window=6_000, reserve=500)
    msgs, prepared = _grow_to(engine, 0.93 if fill else 0.67, fill=fill)
    assert engine.record_usage(prepared.report, _billed(engine, prepared.report.tokens_after, 1.49))
    assert counter.correction == pytest.approx(1.49, rel=0.01)
    msgs += [Message(role="assistant", content="ok"), Message(role="user", content="more")]
    after = engine.prepare(msgs, state=prepared.state, fill=fill)
    assert after.report.compacted and after.report.correction == counter.correction
    # The budget in the counter's own tokens: the most that bills no more than the engine's budget.
    c, budget = counter.correction, after.report.budget
    assert math.ceil(budget * c - 1e-9) <= engine.budget < math.ceil((budget + 1) * c - 1e-9)
    assert after.report.tokens_after <= budget
    # What the provider bills for it is within the budget, counted either way.
    assert _billed(engine, after.report.tokens_after, counter.correction) <= engine.budget
    assert counter.count_messages(after.messages) <= engine.budget
    assert any("the provider bills about 1.49" in n for n in after.report.notes)
    assert after.report.to_dict()["correction"] == pytest.approx(1.49, rel=0.01)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    ratio=st.floats(0.85, 1.45),
    fill=st.booleans(),
)
def test_with_usage_fed_back_every_request_fits_what_the_provider_bills(
    seed: int, ratio: float, fill: bool
) -> None:
    # An agent loop: prepare, send, feed the usage back. The first request is the engine's estimate
    # alone (its safety margin covers a provider up to 10% above it); from the first report on,
    # every request fits what the provider bills, however far the estimate was off (within the
    # counter's bounds).
    engine = ContextEngine(ESTIMATED, window=6_000, reserve=800)
    conversation = make_conversation(seed, rounds=6, steps=(1, 4), parallel=2, huge_share=0.1)
    state = None
    learned = False
    for end in range(1, len(conversation) + 1):
        if conversation[end - 1].role not in ("user", "tool"):
            continue
        prepared = engine.prepare(
            conversation[:end], **({} if state is None else {"state": state}), fill=fill
        )
        state = prepared.state
        bill = _billed(engine, prepared.report.tokens_after, ratio)
        if learned:
            assert bill <= engine.budget, (bill, prepared.report.correction, ratio)
        learned = engine.record_usage(prepared.report, bill) or learned


def test_usage_teaches_the_whole_request_tools_and_instructions_included(tmp_path: Path) -> None:
    # A provider that bills exactly what the engine counted teaches a correction of 1.0. The session
    # used to show the counter the messages alone, so the tool definitions read as a 40% error.
    counter = CalibratedCounter(TiktokenCounter("o200k_base"))
    engine = ContextEngine(counter=counter, window=32_000, reserve=2_000)
    with Session.open(tmp_path / "run.jsonl", engine=engine) as session:
        session.append(Message(role="user", content="Read setup.py and tell me which extras it declares."))
        prepared = session.prepare(tools=TOOLS, instructions="Answer in one short paragraph.")
        assert prepared.report.tool_tokens and prepared.report.instruction_tokens
        session.record_usage(prompt_tokens=prepared.report.tokens_after)
        assert counter.calibration.observations == 1 and counter.correction == 1.0
        session.append(Message(role="assistant", content="It declares dev and docs."))
        session.append(Message(role="user", content="And which Python versions does it support?"))
        prepared = session.prepare(tools=TOOLS, instructions="Answer in one short paragraph.")
        session.record_usage(prompt_tokens=round(prepared.report.tokens_after * 1.2))
        assert counter.correction == pytest.approx(1.06, rel=0.01)  # smoothed: 30% of the way to 1.2
        assert session.usage_totals.calls == 2


def test_models_counted_by_estimate_calibrate_by_default() -> None:
    claude = ContextEngine(model="claude-sonnet-4-5")
    assert isinstance(claude.counter, CalibratedCounter) and isinstance(claude.counter.inner, ScriptEstimator)
    # Before any usage, from what is known of the provider's tokenizer (`ModelSpec.estimate_ratio`).
    assert claude.counter.correction == 1.2
    assert ContextEngine(model="claude-opus-4-7").counter.correction == 1.6  # type: ignore[attr-defined]
    default = ContextEngine(ESTIMATED)
    assert isinstance(default.counter, CalibratedCounter)
    # It corrects upward only: a provider billing less than the estimate leaves the safety it gives.
    prepared = default.prepare([Message(role="user", content=_words(0, 300))])
    assert default.record_usage(prepared.report, prepared.report.tokens_after // 2)
    assert default.counter.correction == 1.0
    for _ in range(30):
        assert default.record_usage(prepared.report, prepared.report.tokens_after * 3)
    assert 1.99 < default.counter.correction <= 2.0  # and to twice the estimate at most
    exact = ContextEngine(model="gpt-4o")
    assert not isinstance(exact.counter, CalibratedCounter)
    prepared = exact.prepare([Message(role="user", content=_words(0, 200))])
    assert exact.record_usage(prepared.report, 999) is False  # an exact count has nothing to learn
    assert prepared.report.correction == 1.0 and "correction" in prepared.report.to_dict()


def test_a_usage_too_small_to_judge_by_is_skipped_and_bad_usage_is_refused() -> None:
    engine = ContextEngine(ESTIMATED)
    prepared = engine.prepare([Message(role="user", content="hi")])
    assert engine.record_usage(prepared.report, 40) is False  # under the counter's 64-token floor
    assert engine.record_usage(prepared.report, 0) is False
    assert engine.counter.correction == 1.0  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="report must be the Report of a prepared request, got Prepared"):
        engine.record_usage(prepared, 100)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="prompt_tokens must be an int >= 0, got -3"):
        engine.record_usage(prepared.report, -3)
    with pytest.raises(UsageError, match="prompt_tokens must be an int >= 0, got '120'"):
        engine.record_usage(prepared.report, "120")  # type: ignore[arg-type]


def test_usage_for_a_request_the_session_did_not_prepare_teaches_that_request(tmp_path: Path) -> None:
    # An adapter that prepares the view plus a run's new input with the engine itself says which request
    # the usage is for: the engine learns from that report, not from the session's own last prepare.
    counter = CalibratedCounter(TiktokenCounter("o200k_base"))
    engine = ContextEngine(counter=counter, window=32_000, reserve=2_000)
    with Session.open(tmp_path / "run.jsonl", engine=engine) as session:
        session.append(Message(role="user", content=_words(3, 120)))
        session.prepare()  # the session's own, smaller request
        sent = engine.prepare([*session.view, Message(role="user", content=_words(5, 400))], tools=TOOLS)
        session.record_usage(prompt_tokens=sent.report.tokens_after, report=sent.report)
        assert counter.correction == 1.0  # judged against the request sent: exact
        assert session.last_usage is not None and session.last_usage.view_len == len(session.view)
        with pytest.raises(ConfigError, match="report must be the Report of the request sent, got dict"):
            session.record_usage(prompt_tokens=10, report={"tokens_after": 10})  # type: ignore[arg-type]


class _OwnEngine:
    """An `Engine` of a user's own, written before engines learned from usage: no ``record_usage``."""

    def __init__(self, inner: ContextEngine) -> None:
        self._inner = inner
        self.counter, self.window, self.reserve, self.budget = (
            inner.counter,
            inner.window,
            inner.reserve,
            inner.budget,
        )
        self.prepare, self.aprepare = inner.prepare, inner.aprepare
        self.must_fit, self.amust_fit = inner.must_fit, inner.amust_fit


def test_an_engine_that_does_not_learn_from_usage_costs_the_lesson_never_the_reply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Usage is fed after the model call was made and paid for: an engine without record_usage, or one
    # that fails in it, must not turn a good reply into an error (the session logs the usage either way).
    with Session.open(tmp_path / "run.jsonl", engine=_OwnEngine(ContextEngine(ESTIMATED))) as session:  # type: ignore[arg-type]
        session.append(Message(role="user", content=_words(1, 200)))
        prepared = session.prepare()
        session.record_usage(prompt_tokens=prepared.report.tokens_after * 2)
        assert session.usage_totals.calls == 1

    class Failing(ContextEngine):
        def record_usage(self, report: object, prompt_tokens: int) -> bool:
            raise RuntimeError("the calibration store is down")

    with Session.open(tmp_path / "failing.jsonl", engine=Failing(ESTIMATED)) as session:
        session.append(Message(role="user", content=_words(1, 200)))
        prepared = session.prepare()
        with caplog.at_level("WARNING", logger="agentcontext"):
            session.record_usage(prompt_tokens=prepared.report.tokens_after * 2)
        assert session.usage_totals.calls == 1
        assert "did not take a request's usage: RuntimeError: the calibration store is down" in caplog.text


def test_session_tokens_are_the_same_number_however_the_shared_engines_correction_moved(
    tmp_path: Path,
) -> None:
    # Two sessions on one engine: the other session's usage moves the correction. The token count of
    # a session is a function of its records and the correction now, as a reopened session computes it;
    # a memo of corrected counts mixed the old correction into the new one (3,190 against 4,455).
    engine = ContextEngine(model="claude-sonnet-4-5")
    a = Session.open(tmp_path / "a.jsonl", engine=engine)
    b = Session.open(tmp_path / "b.jsonl", engine=engine)
    for i in range(20):
        a.append(Message(role="user" if i % 2 == 0 else "assistant", content=_words(i, 200)))
    before = a.tokens
    b.append(Message(role="user", content=_words(7, 400)))
    b.record_usage(prompt_tokens=round(b.prepare().report.tokens_after * 1.4))
    assert engine.counter.correction == pytest.approx(1.4, rel=0.01)  # type: ignore[attr-defined]
    a.append(Message(role="assistant", content="ok"))
    assert a.tokens == engine.count(list(a.view)) > before * 1.1  # 1.4 where it was 1.2
    a.close()
    with Session.open(tmp_path / "a.jsonl", engine=engine) as reopened:
        assert reopened.tokens == engine.count(list(reopened.view))
    b.close()
