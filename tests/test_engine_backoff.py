"""A failing summarizer is backed off, not called again at every step that compacts."""

from __future__ import annotations

import pytest

from agentcontext.engine import ContextEngine
from agentcontext.exceptions import ConfigError, SummarizerError
from agentcontext.invariants import check_messages
from agentcontext.testing import ScriptedSummarizer, WordCounter, make_conversation


def replay_steps(engine: ContextEngine, seed: int = 5) -> tuple[int, list[str]]:
    """Prepare before every assistant message; return the compacting steps and the fallback reasons."""
    msgs = make_conversation(seed, rounds=30, steps=(2, 4), parallel=2, output_tokens=(40, 120))
    counter = engine.counter
    compacting = 0
    reasons: list[str] = []
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        prepared = engine.prepare(msgs[:i])
        out = list(prepared.messages)
        assert counter.count_messages(out) <= engine.budget
        assert check_messages(out) == []
        if prepared.report.compacted:
            compacting += 1
        reasons += [a.reason for a in prepared.report.actions if a.kind == "fallback"]
    return compacting, reasons


def test_a_failing_summarizer_is_called_rarely_and_the_prompt_still_fits() -> None:
    failing = ScriptedSummarizer(replies=[SummarizerError("503 from the provider, after 3 tries")])
    engine = ContextEngine(window=1_500, reserve=200, counter=WordCounter(), summarizer=failing)
    compacting, reasons = replay_steps(engine)
    assert compacting >= 30  # the window is tight: a compaction every few steps (35 here)
    # After each failure the next 1, 2, 4, 8... summaries are written offline: 5 requests here, against 7
    # when the backoff counted prepare calls (a skip expired between compactions) and 34 without backoff.
    assert 1 <= len(failing.requests) <= 5
    assert engine.stats.summarizer_failures == len(failing.requests)
    assert any("backoff" in r for r in reasons)


def test_one_success_ends_the_backoff() -> None:
    flaky = ScriptedSummarizer(
        replies=[SummarizerError("timeout"), SummarizerError("timeout"), "the summary so far"]
    )
    engine = ContextEngine(window=1_500, reserve=200, counter=WordCounter(), summarizer=flaky)
    compacting, _ = replay_steps(engine)
    assert engine.stats.summarizer_failures == 2
    # After the success, the summarizer is asked whenever a summary is due (no lingering backoff).
    assert len(flaky.requests) > 3
    assert engine.stats.summaries >= 1
    assert compacting >= 10


def test_an_object_that_is_not_a_summarizer_is_refused_when_the_engine_is_built() -> None:
    # Accepted before, it failed at every compaction: each summary written offline instead, the
    # cause (an AttributeError) visible only in the failure stats.
    def summarize(request: object) -> str:
        return "a summary"

    with pytest.raises(ConfigError, match="the function 'summarize' has neither"):
        ContextEngine(window=2_000, counter=WordCounter(), summarizer=summarize)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="object has neither"):
        ContextEngine(window=2_000, counter=WordCounter(), summarizer=object())  # type: ignore[arg-type]


def test_a_summarizer_with_one_of_the_two_methods_serves_the_calls_it_can_and_names_the_others() -> None:
    import asyncio

    class SyncOnly:
        def summarize(self, request: object) -> str:
            return "sync summary of the early steps"

    class AsyncOnly:
        async def asummarize(self, request: object) -> str:
            return "async summary of the early steps"

    msgs = make_conversation(seed=3, rounds=10, output_tokens=(40, 120))

    def sync_only() -> ContextEngine:
        return ContextEngine(window=900, reserve=100, counter=WordCounter(), summarizer=SyncOnly())  # type: ignore[arg-type]

    for prepared in (sync_only().prepare(msgs), asyncio.run(sync_only().aprepare(msgs))):
        assert any("sync summary of the early steps" in m.text for m in prepared.messages)
        assert not [a for a in prepared.report.actions if a.kind == "fallback"]
    async_only = ContextEngine(window=900, reserve=100, counter=WordCounter(), summarizer=AsyncOnly())  # type: ignore[arg-type]
    prepared = asyncio.run(async_only.aprepare(msgs))
    assert any("async summary of the early steps" in m.text for m in prepared.messages)
    with pytest.raises(ConfigError, match=r"has only asummarize\(\): call aprepare"):
        ContextEngine(window=900, reserve=100, counter=WordCounter(), summarizer=AsyncOnly()).prepare(msgs)  # type: ignore[arg-type]
