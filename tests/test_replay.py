"""`agentcontext.replay`: its figures equal a from-scratch computation at every call, and its cost is linear."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from types import FrameType

import pytest

import agentcontext.replay as replay_module
from agentcontext import models
from agentcontext.engine import ContextEngine
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, MessageView
from agentcontext.replay import replay
from agentcontext.summarizers import extract_identifiers
from agentcontext.testing import WordCounter, make_conversation


def conversation(rounds: int, seed: int = 7) -> list[Message]:
    return make_conversation(seed, rounds=rounds, steps=(1, 4), huge_share=0.1)


def engine() -> ContextEngine:
    return ContextEngine(window=3_000, reserve=500, counter=WordCounter())


def keys(message: Message) -> set[str]:
    """What a search of the prompt's text finds: its identifiers, and each path's tails."""
    found: set[str] = set()
    for ident in identifiers(message):
        found.add(ident)
        start = ident.find("://") + 3 if "://" in ident else 0
        found.update(
            ident[i + 1 :] for i in range(start, len(ident)) if ident[i] == "/" and len(ident) - i > 3
        )
    return found


def identifiers(message: Message) -> set[str]:
    return set(extract_identifiers("\n".join([message.text, *(c.arguments for c in message.tool_calls)])))


def from_scratch(messages: Sequence[Message]) -> dict[str, int]:
    """The replay's figures, each recomputed over whole prompts and whole histories at every call."""
    eng, counter = engine(), None
    totals = {"violations": 0, "cached_prefix": 0, "evicted": 0, "kept": 0, "calls": 0}
    previous: list[Message] = []
    for stop in [i for i, m in enumerate(messages) if m.role == "assistant" and i > 0]:
        prepared = eng.prepare(list(messages[:stop]))
        counter = eng.counter
        out = list(prepared.messages)
        totals["calls"] += 1
        totals["violations"] += bool(check_messages(out))
        common = 0
        for a, b in zip(previous, out, strict=False):
            if a.id != b.id:
                break
            common += counter.count_message(a)
        totals["cached_prefix"] += common
        sent = {m.id for m in out}
        evicted = set().union(*(identifiers(m) for m in messages[:stop] if m.id not in sent))
        present = set().union(*(keys(m) for m in out))
        totals["evicted"] += len(evicted)
        totals["kept"] += len(evicted & present)
        previous = out
    return totals


@pytest.mark.parametrize("seed", [3, 7])
def test_the_incremental_figures_equal_a_recomputation_at_every_call(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = conversation(12, seed)
    expected = from_scratch(messages)
    prefixes: list[int] = []
    original = replay_module._shared_prefix

    def spy(*args: object) -> tuple[int, int, int]:
        common, previous_prefix, system = original(*args)  # type: ignore[arg-type]
        prefixes.append(common)
        return common, previous_prefix, system

    monkeypatch.setattr(replay_module, "_shared_prefix", spy)
    result = replay(messages, engine())
    assert result.calls == expected["calls"] > 20
    assert sum(1 for r in result.records if r.compacted) >= 3  # the figures cross compactions
    assert result.violations == expected["violations"] == 0
    assert sum(prefixes) == expected["cached_prefix"]
    assert result.identifiers_evicted == expected["evicted"] > 0
    assert result.identifiers_kept == expected["kept"]


def calls_inside_replay(messages: list[Message]) -> int:
    """Python function calls made by code in `agentcontext.replay` while replaying ``messages``."""
    source = replay_module.__file__
    count = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event == "call" and frame.f_code.co_filename == source:
            count += 1

    eng = engine()
    sys.setprofile(profile)
    try:
        replay(messages, eng)
    finally:
        sys.setprofile(None)
    return count


def test_replay_is_linear_in_the_conversation() -> None:
    """Doubling the conversation doubles the work: nothing per call walks the whole history.

    (Recomputing identifier retention over the whole history at every call made
    replay quadratic: 17 s for 3,000 lines, 133 s for 12,000.)
    """
    small = conversation(20)
    large = conversation(40)
    assert len(large) > 1.8 * len(small)
    per_message_small = calls_inside_replay(small) / len(small)
    per_message_large = calls_inside_replay(large) / len(large)
    assert per_message_large < 1.25 * per_message_small


def test_the_history_is_given_as_a_view_not_a_copy() -> None:
    seen: list[type] = []

    class Recording(ContextEngine):
        def prepare(self, messages, **kwargs):  # type: ignore[no-untyped-def,override]
            seen.append(type(messages))
            return super().prepare(messages, **kwargs)

    replay(conversation(3), Recording(window=3_000, reserve=500, counter=WordCounter()))
    assert seen and set(seen) == {MessageView}


@pytest.mark.parametrize("with_tools", [False, True])
def test_a_prompt_that_only_grew_reads_the_previous_request_from_an_anthropic_cache(with_tools: bool) -> None:
    """Claude caches up to a breakpoint at the end of each request: a call that only appended reads all of
    the previous request from the cache and writes only what is new, so caching costs less than not."""
    messages = make_conversation(5, rounds=30, steps=(1, 3), huge_share=0.0)
    model = models.get("claude-sonnet-4-5")
    assert model.cache_style == "explicit_breakpoints"
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    eng = ContextEngine(model=model, window=200_000, reserve=4_000)
    result = replay(messages, eng, tools=tools if with_tools else None)
    assert not any(r.compacted for r in result.records)  # every call only grew
    large = [(previous, r) for previous, r in itertools.pairwise(result.records) if previous.tokens >= 1_100]
    assert len(large) >= 10
    for previous, record in large:
        assert record.cached >= previous.tokens - 10  # the previous request, less its reply priming
        assert record.cached + record.written == record.tokens
    assert result.input_cost_cached is not None and result.input_cost is not None
    assert result.input_cost_cached < 0.5 * result.input_cost
    # In the provider's tokens: the estimate scaled by what is known of Claude's tokenizer.
    last = result.records[-1]
    assert last.tokens == eng.count(messages[: last.index], tools=tools if with_tools else None)
    assert result.over_budget == 0
