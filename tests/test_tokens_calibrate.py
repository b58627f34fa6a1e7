"""CalibratedCounter learns a bounded, smoothed correction from provider-reported usage."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.exceptions import ConfigError, UsageError
from agentcontext.messages import JSONValue, Message
from agentcontext.tokens import CalibratedCounter, ScriptEstimator, TiktokenCounter, TokenCounter


def _conversation(rng: random.Random, n: int) -> list[Message]:
    words = [
        "flight",
        "booking",
        "refund",
        "passenger",
        "economy",
        "baggage",
        "the",
        "a",
        "is",
        "please",
        "42",
    ]
    return [
        Message(
            role="user" if i % 2 == 0 else "assistant",
            content=" ".join(rng.choices(words, k=rng.randint(20, 80))),
        )
        for i in range(n)
    ]


def _simulate(
    counter: CalibratedCounter, true_ratio: float, *, steps: int, noise: float, seed: int = 1
) -> None:
    rng = random.Random(seed)
    inner = counter.inner
    for step in range(steps):
        msgs = _conversation(rng, 4 + step % 5)
        truth = inner.count_messages(msgs) * true_ratio * (1 + rng.uniform(-noise, noise))
        counter.observe(msgs, round(truth))


@pytest.mark.parametrize("true_ratio", [1.2, 0.87, 1.0, 1.37])
def test_converges_on_the_true_ratio_in_both_directions(true_ratio: float) -> None:
    counter = CalibratedCounter(ScriptEstimator())
    _simulate(counter, true_ratio, steps=40, noise=0.03)
    # With +-3% noise the moving average wanders by about 0.7% (one standard deviation).
    assert counter.correction == pytest.approx(true_ratio, rel=0.03)
    band = counter.error_band
    assert band is not None and -0.06 <= band[0] <= band[1] <= 0.06


def test_corrected_counts_track_what_the_provider_bills() -> None:
    inner = TiktokenCounter()
    counter = CalibratedCounter(inner)
    _simulate(counter, 1.25, steps=30, noise=0.0)
    msgs = _conversation(random.Random(99), 6)
    assert counter.count_messages(msgs) == pytest.approx(inner.count_messages(msgs) * 1.25, rel=0.01)
    assert counter.count_text("hello world " * 50) >= inner.count_text("hello world " * 50)


def test_the_correction_is_bounded() -> None:
    counter = CalibratedCounter(ScriptEstimator(), min_correction=0.8, max_correction=1.5)
    _simulate(counter, 3.0, steps=10, noise=0.0)
    assert counter.correction == 1.5
    _simulate(counter, 0.1, steps=60, noise=0.0)
    assert counter.correction == pytest.approx(0.8)


def test_one_outlier_moves_the_correction_only_partly() -> None:
    counter = CalibratedCounter(ScriptEstimator(), smoothing=0.3)
    _simulate(counter, 1.1, steps=20, noise=0.0)
    msgs = _conversation(random.Random(5), 5)
    counter.observe(msgs, round(counter.inner.count_messages(msgs) * 1.5))
    assert 1.1 < counter.correction < 1.25


def test_the_first_report_is_taken_as_is_and_tiny_prompts_are_skipped() -> None:
    counter = CalibratedCounter(TiktokenCounter(), min_tokens=64)
    assert counter.calibration.observations == 0 and counter.error_band is None
    assert counter.observe([Message(role="user", content="hi")], 30) is False
    assert counter.correction == 1.0
    msgs = _conversation(random.Random(3), 6)
    predicted = counter.inner.count_messages(msgs)
    assert counter.observe(msgs, round(predicted * 1.2)) is True
    assert counter.correction == pytest.approx(1.2, rel=0.01)
    assert counter.error_band is None  # a band needs a prediction made before the report
    counter.reset()
    assert counter.correction == 1.0 and counter.calibration.observations == 0


def test_extra_tokens_account_for_tool_definitions() -> None:
    inner = TiktokenCounter()
    counter = CalibratedCounter(inner)
    tools: list[dict[str, JSONValue]] = [
        {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {}},
        }
    ]
    msgs = _conversation(random.Random(4), 6)
    exact = inner.count_messages(msgs) + inner.count_tools(tools)
    counter.observe(msgs, exact, extra_tokens=inner.count_tools(tools))
    assert counter.correction == 1.0
    assert counter.count_tools(tools) == inner.count_tools(tools)


def test_is_a_token_counter_and_validates_its_options() -> None:
    counter = CalibratedCounter(TiktokenCounter())
    assert isinstance(counter, TokenCounter)
    assert counter.name == "calibrated(tiktoken:o200k_base)"
    for bad in (
        {"smoothing": 0},
        {"min_correction": 1.2},
        {"max_correction": 0.9},
        {"window": 0},
        {"min_tokens": -1},
    ):
        with pytest.raises(ConfigError):
            CalibratedCounter(TiktokenCounter(), **bad)
    with pytest.raises(ConfigError):
        CalibratedCounter("tiktoken")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        counter.observe([], -5)
    with pytest.raises(UsageError):
        counter.observe([], 10.5)  # type: ignore[arg-type]


class _Plain:
    """A minimal third-party TokenCounter (not a BaseTokenCounter): one token per word."""

    name = "words"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        return 3 + self.count_text(message.text)

    def count_messages(self, messages: Sequence[Message]) -> int:
        return 3 + sum(self.count_message(m) for m in messages)


def test_wraps_any_token_counter_but_only_base_counters_count_tools() -> None:
    counter = CalibratedCounter(_Plain(), min_tokens=1)
    msgs = [Message(role="user", content="one two three four five six seven eight nine ten")]
    assert counter.inner.count_messages(msgs) == 16
    counter.observe(msgs, 20)
    assert counter.correction == pytest.approx(1.25)
    assert counter.count_messages(msgs) == 20
    with pytest.raises(UsageError, match="BaseTokenCounter"):
        counter.count_tools([{"name": "x"}])


@settings(max_examples=examples(30), deadline=None)
@given(reports=st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=1, max_size=30))
def test_the_correction_always_stays_within_its_bounds(reports: list[float]) -> None:
    counter = CalibratedCounter(TiktokenCounter(), min_tokens=1)
    msgs = [Message(role="user", content="a reasonably long message about flights " * 5)]
    predicted = counter.inner.count_messages(msgs)
    for r in reports:
        counter.observe(msgs, max(1, round(predicted * r)))
        assert 0.8 <= counter.correction <= 1.5


def test_initial_is_the_correction_until_the_first_report_replaces_it() -> None:
    counter = CalibratedCounter(ScriptEstimator(), min_correction=1.0, max_correction=2.0, initial=1.6)
    text = "the parser reads each token and reports every mismatch " * 20
    assert counter.count_text(text) == math.ceil(ScriptEstimator().count_text(text) * 1.6 - 1e-9)
    predicted = counter.inner.count_text(text)
    assert counter.observe_counted(predicted, round(predicted * 1.3))
    assert counter.correction == pytest.approx(1.3, rel=0.01)  # the first report, as it is
    counter.reset()
    assert counter.correction == 1.6
    with pytest.raises(ConfigError, match="initial must be within"):
        CalibratedCounter(ScriptEstimator(), min_correction=1.0, initial=0.9)
