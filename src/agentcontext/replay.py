"""Replay a recorded agent conversation through an engine, as the agent lived it.

Before each assistant message, the engine prepares the context from everything
that came before, exactly as an agent loop calls it. The result says what the
model would have been sent at every call: tokens, compactions, how much a
provider's prompt cache would have served, what it would have cost, and how
many identifiers (paths, ids, URLs, error names...) from evicted messages are
still in the context.

>>> from agentcontext.engine import ContextEngine
>>> from agentcontext.testing import WordCounter, make_conversation
>>> result = replay(make_conversation(1, rounds=4), ContextEngine(window=50_000, counter=WordCounter()))
>>> result.calls > 0 and result.violations == 0
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .engine import ContextEngine, Level
from .exceptions import ContextOverflowError
from .invariants import check_messages
from .messages import JSONValue, Message

if TYPE_CHECKING:
    from .models import ModelSpec
    from .tokens import TokenCounter

__all__ = ["CacheModel", "CallRecord", "ReplayResult", "cached_tokens", "replay"]

CacheModel = Literal["automatic_prefix", "explicit_breakpoints", "none"]

_MIN_CACHEABLE = 1024
_CACHE_STEP = 128


def cached_tokens(
    *, style: CacheModel, prompt: int, common_prefix: int, previous_prompt: int, system: int
) -> tuple[int, int]:
    """Tokens a provider's prompt cache would serve for a call, and tokens it would write.

    ``automatic_prefix`` (OpenAI, DeepSeek, Moonshot): the longest prefix shared
    with the previous request, for prompts of at least 1,024 tokens, in steps of
    128 tokens; no write surcharge. ``explicit_breakpoints`` (Anthropic): the
    agent marks a breakpoint after the system prompt and at the end of each
    request (the usual setup, within the limit of 4); a call reads the previous
    request's cache only when its prefix matches up to that breakpoint (else
    the system prompt's, when that still matches), and writes the rest at the
    write rate. Minimum cacheable size 1,024 tokens.
    """
    if style == "none" or prompt < _MIN_CACHEABLE:
        return 0, 0
    if style == "automatic_prefix":
        if common_prefix < _MIN_CACHEABLE:
            return 0, 0
        return common_prefix - common_prefix % _CACHE_STEP, 0
    read = 0
    if previous_prompt and common_prefix >= previous_prompt >= _MIN_CACHEABLE:
        read = previous_prompt
    elif common_prefix >= system >= _MIN_CACHEABLE:
        read = system
    return read, prompt - read


@dataclass(frozen=True, kw_only=True)
class CallRecord:
    """One model call of the replay."""

    index: int
    """Index of the assistant message this call produced."""
    tokens: int
    """Prompt tokens sent."""
    level: Level
    compacted: bool
    cached: int
    """Prompt tokens the provider's cache would serve."""
    written: int
    """Prompt tokens written to the cache at the write rate (Anthropic-style caches)."""
    output: int
    """Tokens of the reply (the recorded assistant message)."""
    overflow: bool = False
    """True when even the essentials did not fit (`ContextOverflowError`); nothing was sent."""


@dataclass(kw_only=True)
class ReplayResult:
    """What a replay measured."""

    model: str
    window: int
    reserve: int
    budget: int
    soft: int
    warn: int
    hard: int
    target: int
    records: list[CallRecord] = field(default_factory=list)
    compactions: dict[str, int] = field(default_factory=dict)
    violations: int = 0
    """Prompts that broke a provider rule (always 0 unless something is wrong)."""
    over_budget: int = 0
    """Prompts over the budget (always 0 unless something is wrong)."""
    identifiers_evicted: int = 0
    identifiers_kept: int = 0
    input_cost: float | None = None
    input_cost_cached: float | None = None
    output_cost: float | None = None

    @property
    def calls(self) -> int:
        """Model calls replayed."""
        return len(self.records)

    @property
    def overflows(self) -> int:
        """Calls where even the essentials did not fit."""
        return sum(1 for r in self.records if r.overflow)

    @property
    def peak_tokens(self) -> int:
        """The largest prompt sent."""
        return max((r.tokens for r in self.records), default=0)

    @property
    def mean_tokens(self) -> float:
        """The mean prompt size."""
        sent = [r.tokens for r in self.records if not r.overflow]
        return sum(sent) / len(sent) if sent else 0.0

    @property
    def total_input(self) -> int:
        """Prompt tokens sent over all calls."""
        return sum(r.tokens for r in self.records)

    @property
    def total_cached(self) -> int:
        """Prompt tokens a prompt cache would serve over all calls."""
        return sum(r.cached for r in self.records)

    @property
    def cache_share(self) -> float:
        """Share of prompt tokens served from the cache."""
        return self.total_cached / self.total_input if self.total_input else 0.0

    @property
    def identifiers_retained(self) -> float | None:
        """Share of identifiers from evicted messages still in the context (None when nothing was evicted)."""
        return self.identifiers_kept / self.identifiers_evicted if self.identifiers_evicted else None

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict of the figures (what `agentcontext replay --json` prints)."""
        return {
            "model": self.model,
            "window": self.window,
            "reserve": self.reserve,
            "budget": self.budget,
            "calls": self.calls,
            "compactions": dict(self.compactions),
            "overflows": self.overflows,
            "violations": self.violations,
            "over_budget": self.over_budget,
            "peak_tokens": self.peak_tokens,
            "mean_tokens": round(self.mean_tokens, 1),
            "total_input_tokens": self.total_input,
            "cached_input_tokens": self.total_cached,
            "cache_share": round(self.cache_share, 4),
            "input_cost_usd": None if self.input_cost is None else round(self.input_cost, 6),
            "input_cost_with_cache_usd": None
            if self.input_cost_cached is None
            else round(self.input_cost_cached, 6),
            "output_cost_usd": None if self.output_cost is None else round(self.output_cost, 6),
            "identifiers_evicted": self.identifiers_evicted,
            "identifiers_kept": self.identifiers_kept,
            "identifiers_retained": None
            if self.identifiers_retained is None
            else round(self.identifiers_retained, 4),
            "tokens_per_call": [r.tokens for r in self.records],
            "compacted_calls": [r.index for r in self.records if r.compacted],
        }


def _identifiers(message: Message, cache: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    from .summarizers import extract_identifiers

    hit = cache.get(message.id)
    if hit is None:
        text = "\n".join([message.text, *(c.arguments for c in message.tool_calls)])
        hit = cache[message.id] = tuple(extract_identifiers(text))
    return hit


def replay(
    messages: Sequence[Message],
    engine: ContextEngine,
    *,
    spec: ModelSpec | None = None,
    identifiers: bool = True,
    progress: object = None,
) -> ReplayResult:
    """Replay ``messages`` through ``engine``: prepare before every assistant message.

    Args:
        messages: the recorded conversation.
        engine: a fresh engine (it remembers the conversation between calls).
        spec: the model whose prices and cache style the cost figures use
            (default: the engine's model; no costs without one).
        identifiers: measure identifier retention (costs a regex pass per message).
        progress: a callable taking the number of calls done, for progress bars.
    """
    spec = spec or engine.model
    budget = engine.budget
    t = engine.thresholds
    result = ReplayResult(
        model=spec.name if spec is not None else "custom",
        window=engine.window,
        reserve=engine.reserve,
        budget=budget,
        soft=int(t.soft * budget),
        warn=int(t.warn * budget),
        hard=int(t.hard * budget),
        target=int(t.target * budget),
    )
    style: CacheModel = spec.cache_style if spec is not None else "none"
    counter = engine.counter
    ident_cache: dict[str, tuple[str, ...]] = {}
    previous: list[Message] = []
    previous_tokens = 0
    stops = [i for i, m in enumerate(messages) if m.role == "assistant" and i > 0]
    for n, stop in enumerate(stops):
        history = messages[:stop]
        output = counter.count_message(messages[stop])
        try:
            prepared = engine.prepare(history)
        except ContextOverflowError:
            result.records.append(
                CallRecord(
                    index=stop,
                    tokens=0,
                    level=Level.EMERGENCY,
                    compacted=False,
                    cached=0,
                    written=0,
                    output=output,
                    overflow=True,
                )
            )
            engine.reset()
            previous, previous_tokens = [], 0
            continue
        out = list(prepared.messages)
        report = prepared.report
        if check_messages(out):
            result.violations += 1
        if report.tokens_after > budget:
            result.over_budget += 1
        common, system = _shared_prefix(previous, out, counter)
        cached, written = cached_tokens(
            style=style,
            prompt=report.tokens_after,
            common_prefix=common,
            previous_prompt=previous_tokens,
            system=system,
        )
        result.records.append(
            CallRecord(
                index=stop,
                tokens=report.tokens_after,
                level=report.level,
                compacted=report.compacted,
                cached=cached,
                written=written,
                output=output,
            )
        )
        if report.compacted:
            key = max(report.level, Level.NORMAL).label
            result.compactions[key] = result.compactions.get(key, 0) + 1
        if identifiers:
            evicted, kept = _identifier_retention(history, out, ident_cache)
            result.identifiers_evicted += evicted
            result.identifiers_kept += kept
        previous, previous_tokens = out, report.tokens_after
        if callable(progress):
            progress(n + 1)
    _costs(result, spec)
    return result


def _shared_prefix(
    previous: Sequence[Message], out: Sequence[Message], counter: TokenCounter
) -> tuple[int, int]:
    """Tokens of the longest common prefix (by message id) with the previous call, and of the system prompt."""
    common = 0
    for a, b in zip(previous, out, strict=False):
        if a.id != b.id:
            break
        common += counter.count_message(a)
    system = 0
    for m in out:
        if m.role != "system":
            break
        system += counter.count_message(m)
    return common, system


def _identifier_retention(
    history: Sequence[Message], out: Sequence[Message], cache: dict[str, tuple[str, ...]]
) -> tuple[int, int]:
    """Identifiers in messages of ``history`` missing from ``out``, and how many of them ``out`` still mentions."""
    out_ids = {m.id for m in out}
    evicted: dict[str, None] = {}
    for m in history:
        if m.id not in out_ids:
            for ident in _identifiers(m, cache):
                evicted.setdefault(ident, None)
    if not evicted:
        return 0, 0
    haystack = "\n".join(part for m in out for part in (m.text, *(c.arguments for c in m.tool_calls)))
    return len(evicted), sum(1 for ident in evicted if ident in haystack)


def _costs(result: ReplayResult, spec: ModelSpec | None) -> None:
    if spec is None or spec.input_price is None:
        return
    per = 1_000_000
    result.input_cost = result.total_input * spec.input_price / per
    cached_price = spec.cached_input_price if spec.cached_input_price is not None else spec.input_price
    write_price = spec.cache_write_price if spec.cache_write_price is not None else spec.input_price
    cost = 0.0
    for r in result.records:
        plain = r.tokens - r.cached - r.written
        cost += (plain * spec.input_price + r.cached * cached_price + r.written * write_price) / per
    result.input_cost_cached = cost
    if spec.output_price is not None:
        result.output_cost = sum(r.output for r in result.records) * spec.output_price / per
