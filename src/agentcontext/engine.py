"""`ContextEngine`: levels, pipelines per level, the must-fit guarantee, status and stats.

The engine sits before every model call::

    engine = ContextEngine(model="gpt-4o", window=32_000, reserve=4_000)
    prepared = engine.prepare(history)      # .messages fit, are valid, keep what matters
    reply = call_model(prepared.messages)

It remembers what it returned last time (one engine per conversation), so when
the agent passes the same history plus a new message or two, it counts and
checks only the new ones: O(new messages), never a pass over the history.
Compaction happens in large, rare steps, aimed at ``target`` usage (default
50%), so the prompt prefix stays the same between them and provider prompt
caches keep hitting. When the system prompt and the latest request alone take
more than 30% of the budget, the target and the limits rise with them
(`Thresholds.above`), so a summary still fits and compaction still leaves
headroom.

All the logic lives in one generator (`ContextEngine._flow`) that yields
summary requests; `prepare` and `aprepare` are the two thin drivers that
answer them with a sync or async summarizer (httpx's auth-flow pattern).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from .exceptions import ConfigError, ContextOverflowError, InvalidConversationError, SummarizerError
from .messages import JSONValue, Message, MessageView
from .repair import RepairState, repair_messages
from .strategies._base import (
    Action,
    CompactionContext,
    CompactionResult,
    Strategy,
    SummaryRequest,
    essential_indices,
    is_user_request,
)
from .strategies.hard_truncate import HardTruncate
from .strategies.observation_masking import MaskObservations
from .strategies.pipeline import Tiered
from .strategies.token_budget import TokenBudget
from .tokens._base import TokenCounter

if TYPE_CHECKING:
    from .models import ModelSpec
    from .summarizers._base import Summarizer
    from .truncation import ObservationTruncator

__all__ = ["ContextEngine", "EngineStats", "Level", "Prepared", "Report", "Status", "Thresholds"]

_MAX_ATTEMPTS = 5


class Level(IntEnum):
    """How full the context is, and so how hard the engine works to shrink it."""

    NONE = 0
    """Below the soft limit: nothing happens."""
    NORMAL = 1
    """Past soft (70%): mask old tool results, then summarize or drop the oldest part."""
    AGGRESSIVE = 2
    """Past warn (85%): the same with fewer results and rounds kept."""
    EMERGENCY = 3
    """Past hard (95%) or over: a chunked summary if it helps, then hard truncation,
    guaranteed to fit or to raise."""

    @property
    def label(self) -> str:
        """Lower-case name for reports (``"none"``, ``"normal"``, ...)."""
        return self.name.lower()


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """Usage ratios (of window minus reserve) that pick the level, and the target compaction aims at.

    The engine uses them as they are unless the system prompt and the latest
    request fill more than `pivot` of the budget; then it uses `above`.
    """

    soft: float = 0.70
    warn: float = 0.85
    hard: float = 0.95
    target: float = 0.50
    """Compaction shrinks the prompt to this share of the budget, well under ``soft``,
    so the next few steps do not trigger it again."""

    def __post_init__(self) -> None:
        if not 0.0 < self.target < self.soft <= self.warn <= self.hard <= 1.0:
            raise ConfigError(
                "thresholds must satisfy 0 < target < soft <= warn <= hard <= 1, got "
                f"target={self.target}, soft={self.soft}, warn={self.warn}, hard={self.hard}"
            )

    @property
    def pivot(self) -> float:
        """The floor (share of the budget) above which `above` raises the thresholds.

        It is where the room the target leaves above the floor shrinks to the gap
        between target and soft limit (or to half the target, if that is smaller):
        0.3 with the defaults.
        """
        return self.target - min(self.soft - self.target, self.target / 2)

    def above(self, floor: float) -> Thresholds:
        """These thresholds for a context of which ``floor`` (a share of the budget) cannot be compacted.

        The floor is what every compaction keeps verbatim: the system prompt and
        the latest user request. Up to `pivot` (0.3 with the defaults) the
        thresholds are returned as they are. Past it, the configured target would
        leave too little room above the floor for a summary and the recent
        messages (none at all once the floor passes it, the ``no_room`` fallback),
        and a floor past the soft limit would make every call compact. So the
        limits rise with the floor: with ``free = (1 - floor) / (1 - pivot)``, the
        share of the free space still left, each of soft, warn and hard keeps
        ``free ** 2`` of its distance to the budget, and the target stays where it
        was between the floor and the soft limit (halfway, with the defaults).
        A floor of 60% gives target 75%, soft 90%, warn 95%, hard 98%.

        The trade-off: the room under the target and the headroom before the next
        compaction shrink in proportion to the free space, while the escalation
        band above the soft limit (which only grades how hard the engine works)
        shrinks faster, so that room and headroom get most of what is free. The
        mapping is continuous at the pivot. As the floor nears the budget,
        compactions come more often (each one frees a share of what is free, never
        nothing), and a floor at or over the budget cannot fit at all: the limits
        then sit just under 1 and `HardTruncate` raises `ContextOverflowError`.
        """
        pivot = self.pivot
        if floor <= pivot:
            return self
        floor = min(floor, 0.999)  # keeps the limits strictly ordered; the fit check raises anyway
        keep = ((1.0 - floor) / (1.0 - pivot)) ** 2

        def lift(x: float) -> float:
            return 1.0 - (1.0 - x) * keep

        soft = lift(self.soft)
        # The target keeps its place between the floor and the soft limit (continuous at the pivot).
        target = floor + (soft - floor) * (self.target - pivot) / (self.soft - pivot)
        return Thresholds(soft=soft, warn=lift(self.warn), hard=lift(self.hard), target=target)

    def level(self, ratio: float) -> Level:
        """The level for a usage ratio."""
        if ratio >= self.hard:
            return Level.EMERGENCY
        if ratio >= self.warn:
            return Level.AGGRESSIVE
        if ratio >= self.soft:
            return Level.NORMAL
        return Level.NONE


@dataclass(frozen=True, kw_only=True)
class Report:
    """What one `ContextEngine.prepare` call did, and why."""

    level: Level
    """The level the input was at."""
    tokens_before: int
    """Prompt tokens of the input (after repairs, before ingest truncation and compaction)."""
    tokens_after: int
    """Prompt tokens of the prepared messages."""
    budget: int
    """Window minus output reserve (minus the safety margin for estimated counts)."""
    window: int
    reserve: int
    target: int
    """Tokens compaction aims at (raised above a large system prompt, `Thresholds.above`)."""
    actions: tuple[Action, ...] = ()
    """Everything this call did: repairs, ingest truncations, masks, drops, summaries."""
    in_effect: tuple[Action, ...] = ()
    """Actions of earlier calls whose effect the prepared messages still carry."""
    attempts: int = 0
    """Pipeline runs this call needed (escalations included)."""
    final_level: Level = Level.NONE
    """The level whose pipeline produced the result (higher than ``level`` after escalation)."""
    counter: str = ""
    incremental: bool = False
    """True when the call only had to process new messages."""
    notes: tuple[str, ...] = ()

    @property
    def compacted(self) -> bool:
        """True when this call masked, shortened, dropped or summarized anything."""
        return any(
            a.kind in ("masked", "arguments_shortened", "shortened", "dropped", "summarized")
            for a in self.actions
        )

    @property
    def usage(self) -> float:
        """``tokens_after / budget``."""
        return self.tokens_after / self.budget if self.budget else math.inf

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict (what `agentcontext fit --report` writes)."""
        return {
            "level": self.level.label,
            "final_level": self.final_level.label,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "budget": self.budget,
            "window": self.window,
            "reserve": self.reserve,
            "target": self.target,
            "usage": round(self.usage, 4),
            "compacted": self.compacted,
            "attempts": self.attempts,
            "counter": self.counter,
            "incremental": self.incremental,
            "actions": [a.to_dict() for a in self.actions],
            "in_effect": [a.to_dict() for a in self.in_effect],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """The result of `ContextEngine.prepare`: messages to send, and the report."""

    messages: Sequence[Message]
    report: Report


@dataclass(frozen=True, kw_only=True)
class Status:
    """How full the context is (`ContextEngine.status`)."""

    tokens: int
    budget: int
    window: int
    reserve: int
    ratio: float
    level: Level
    recommendation: str

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict."""
        return {
            "tokens": self.tokens,
            "budget": self.budget,
            "window": self.window,
            "reserve": self.reserve,
            "ratio": round(self.ratio, 4),
            "level": self.level.label,
            "recommendation": self.recommendation,
        }


@dataclass(kw_only=True)
class EngineStats:
    """Running statistics of one engine, counted once per `prepare` call on every path.

    Seed 001 counted only some paths, counted each must-fit round separately and
    could record negative savings; here each call is counted once, at the level
    that triggered it.
    """

    calls: int = 0
    compactions: dict[str, int] = field(
        default_factory=lambda: {"normal": 0, "aggressive": 0, "emergency": 0}
    )
    """Calls that compacted, by the level that triggered them."""
    emergencies: int = 0
    """Calls whose compaction reached the emergency pipeline (hard truncation)."""
    escalations: int = 0
    """Extra pipeline runs after the first one fell short."""
    tokens_saved: int = 0
    """Sum over compactions of tokens before minus after (never negative)."""
    repairs: int = 0
    truncations: int = 0
    overflows: int = 0
    """Calls that raised `ContextOverflowError`."""
    summarizer_failures: int = 0
    """Summarizer calls that raised (each one made its strategy fall back)."""
    summaries: int = 0
    """Summaries inserted."""
    fallbacks: dict[str, int] = field(default_factory=dict)
    """Strategy fallbacks by reason (``"summarizer_error"``, ``"over_target"``, ``"no_progress"``...)."""
    _ratio_sum: float = 0.0
    _usage_sum: float = 0.0

    @property
    def total_compactions(self) -> int:
        """Calls that compacted, at any level."""
        return sum(self.compactions.values())

    @property
    def mean_compaction_ratio(self) -> float:
        """Mean of tokens after / tokens before over compactions (lower compacts more); 1.0 when none."""
        return self._ratio_sum / self.total_compactions if self.total_compactions else 1.0

    @property
    def mean_usage(self) -> float:
        """Mean usage (prepared tokens / budget) over calls."""
        return self._usage_sum / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict."""
        return {
            "calls": self.calls,
            "compactions": dict(self.compactions),
            "total_compactions": self.total_compactions,
            "emergencies": self.emergencies,
            "escalations": self.escalations,
            "tokens_saved": self.tokens_saved,
            "mean_compaction_ratio": round(self.mean_compaction_ratio, 4),
            "mean_usage": round(self.mean_usage, 4),
            "repairs": self.repairs,
            "truncations": self.truncations,
            "overflows": self.overflows,
            "summarizer_failures": self.summarizer_failures,
            "summaries": self.summaries,
            "fallbacks": dict(self.fallbacks),
        }


class _BackingOff(SummarizerError):
    """The summarizer was not called: it is backing off after failures."""


@dataclass(kw_only=True)
class _State:
    """What the engine remembers from its last call, to make the next one O(new)."""

    in_len: int
    in_first: str
    in_last: str
    out: list[Message]
    out_len: int
    out_tokens: int
    """Sum of message counts of ``out[:out_len]`` (reply priming excluded)."""
    repair: RepairState
    in_effect: tuple[Action, ...]
    floor: _Floor


@dataclass(frozen=True, kw_only=True)
class _Floor:
    """What no compaction removes from ``out``: the leading system messages and the latest user request."""

    head_len: int = 0
    """How many messages at the start are system messages."""
    head_tokens: int = 0
    user_tokens: int = 0
    """Tokens of the latest user request (0 when there is none)."""

    @property
    def tokens(self) -> int:
        """Tokens of the system head and the latest request (reply priming excluded)."""
        return self.head_tokens + self.user_tokens


@dataclass(frozen=True, kw_only=True)
class _Counted:
    messages: list[Message]
    tokens: int
    actions: list[Action]
    repair: RepairState
    base: list[Message] | None
    base_len: int
    base_tokens: int
    incremental: bool


def default_pipelines(*, summarizer: Summarizer | None = None) -> dict[Level, Strategy]:
    """The default pipeline per level: mask, summarize, then drop (or hard-truncate).

    Normal masks old tool results (keep 3) when that frees enough, summarizes
    the oldest part (the newest 30% kept verbatim, the user's messages kept in
    the ledger) and, should the summary fall back, drops the oldest rounds to
    the target. Aggressive keeps one recent result, shortens old tool-call
    arguments and keeps 20% verbatim. Emergency (at or over the limit) tries a
    summary too, chunked so the summarizer never sees more than it can read,
    before hard truncation guarantees the fit.

    With no summarizer or the offline `ExtractiveSummarizer`, summarizing costs
    no more than masking and keeps the identifiers masking would drop, so it
    runs first; with an LLM summarizer, masking runs first to spare model calls.
    """
    from .strategies.summarize import Summarize
    from .summarizers._extractive import ExtractiveSummarizer

    offline = summarizer is None or isinstance(summarizer, ExtractiveSummarizer)

    def tiers(mask: Strategy, summarize: Strategy, last: Strategy) -> tuple[Strategy, ...]:
        return (summarize, mask, last) if offline else (mask, summarize, last)

    return {
        Level.NORMAL: Tiered(
            tiers=tiers(MaskObservations(keep_recent=3), Summarize(), TokenBudget()), name="normal"
        ),
        Level.AGGRESSIVE: Tiered(
            tiers=tiers(
                MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=400),
                Summarize(keep_recent=0.2),
                TokenBudget(),
            ),
            name="aggressive",
        ),
        Level.EMERGENCY: Tiered(
            tiers=tiers(
                MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=200),
                Summarize(keep_recent=0.1),
                HardTruncate(),
            ),
            name="emergency",
        ),
    }


class ContextEngine:
    """Keeps a conversation inside a model's context window; one engine per conversation.

    Args:
        model: a registry name (``"gpt-4o"``, ``"claude-sonnet-4-5-20250929"``...) or a `ModelSpec`;
            optional when ``window`` and ``counter`` are given.
        window: the context window in tokens (overrides the model's).
        reserve: tokens kept free for the reply (default: the model's default reserve,
            or 25% of ``window`` capped at 16,384 when there is no model).
        counter: the token counter (default: the best one for the model).
        thresholds: soft / warn / hard levels and the compaction target; raised for a call
            whose system prompt and latest request take more than `Thresholds.pivot` of the
            budget (`Thresholds.above`), and ``Report.target`` then says what was aimed at.
        pipelines: the strategy to run at each level (default: `default_pipelines`).
        summarizer: writes the summaries of summarize tiers (default: the offline, deterministic
            `ExtractiveSummarizer`, counting with ``counter``; pass an LLM summarizer for model-written ones).
        truncator: cuts oversized tool outputs when they arrive (default: one sized to
            a quarter of the budget, keeping full outputs in memory; pass your own with a
            `FileArtifactStore` to keep them on disk). None disables ingest truncation.
        strict: refuse invalid input with `InvalidConversationError` instead of repairing it.
        safety_margin: the share of the budget held back when the counter is an
            estimate (default: the model's ``estimate_margin``, else 0).
    """

    def __init__(
        self,
        model: str | ModelSpec | None = None,
        *,
        window: int | None = None,
        reserve: int | None = None,
        counter: TokenCounter | None = None,
        thresholds: Thresholds | None = None,
        pipelines: dict[Level, Strategy] | None = None,
        summarizer: Summarizer | None = None,
        truncator: ObservationTruncator | None | bool = True,
        strict: bool = False,
        safety_margin: float | None = None,
    ) -> None:
        spec = None
        if model is not None:
            from . import models

            spec = models.get(model) if isinstance(model, str) else model
        if window is None:
            if spec is None:
                raise ConfigError("ContextEngine needs a model name or an explicit window=")
            window = spec.context_window
        if window < 16:
            raise ConfigError(f"window must be at least 16 tokens, got {window}")
        if reserve is None:
            reserve = (
                spec.default_reserve
                if spec is not None and spec.context_window == window
                else min(window // 4, 16_384)
            )
        if not 0 <= reserve < window:
            raise ConfigError(
                f"reserve must be within [0, window), got reserve={reserve} for window={window}"
            )
        if counter is None:
            if spec is None:
                raise ConfigError("ContextEngine needs a model name or an explicit counter=")
            from .models import counter_for

            counter = counter_for(spec)
        if safety_margin is None:
            safety_margin = spec.estimate_margin if spec is not None else 0.0
        if not 0.0 <= safety_margin < 0.5:
            raise ConfigError(f"safety_margin must be within [0, 0.5), got {safety_margin}")
        self.model = spec
        self.window = window
        self.reserve = reserve
        self.counter = counter
        self.thresholds = thresholds or Thresholds()
        self.budget = max(int((window - reserve) * (1.0 - safety_margin)), 1)
        if summarizer is None:
            from .summarizers._extractive import ExtractiveSummarizer

            # Offline and deterministic: the default engine summarizes without a model.
            self.summarizer: Summarizer = ExtractiveSummarizer(counter=counter)
        else:
            self.summarizer = summarizer
        self.pipelines = (
            dict(pipelines) if pipelines is not None else default_pipelines(summarizer=summarizer)
        )
        for required in (Level.NORMAL, Level.AGGRESSIVE, Level.EMERGENCY):
            if required not in self.pipelines:
                raise ConfigError(f"pipelines must cover the {required.label!r} level")
        self.strict = strict
        self.truncator = self._make_truncator(truncator)
        self.reply_overhead = counter.count_messages(())
        self.stats = EngineStats()
        self._summary_failures = 0
        self._summary_skip_until = 0
        self._state: _State | None = None

    def _make_truncator(self, truncator: ObservationTruncator | None | bool) -> ObservationTruncator | None:
        if truncator is False or truncator is None:
            return None
        from .truncation import ObservationTruncator

        if isinstance(truncator, ObservationTruncator):
            return truncator
        from .artifacts import MemoryArtifactStore

        max_tokens = max(256, self.budget // 4)
        return ObservationTruncator(
            max_tokens=max_tokens,
            max_bytes=max(4096, max_tokens * 8),
            max_lines=max(200, max_tokens // 4),
            counter=self.counter,
            store=MemoryArtifactStore(),
        )

    # ------------------------------------------------------------------ public API

    def prepare(self, messages: Sequence[Message]) -> Prepared:
        """Return messages that fit, are valid and keep what matters, with a report.

        Compacts when usage passes the soft limit, escalating at most five times
        and then hard-truncating, so the result always fits or
        `ContextOverflowError` says why it cannot. Summarize tiers use the
        engine's summarizer synchronously.
        """
        return self._drive(self._flow(messages, budget=None, minimum=Level.NONE))

    async def aprepare(self, messages: Sequence[Message]) -> Prepared:
        """`prepare` with an async summarizer (same logic, async I/O)."""
        return await self._adrive(self._flow(messages, budget=None, minimum=Level.NONE))

    def must_fit(self, messages: Sequence[Message], *, budget: int | None = None) -> Prepared:
        """Compact now, to ``budget`` tokens (default: the engine's budget), whatever the level.

        For when a provider rejected a prompt as too long although the counter
        said it fit: this compacts at least at the aggressive level, with at
        most five escalations before hard truncation.
        """
        return self._drive(self._flow(messages, budget=budget, minimum=Level.AGGRESSIVE))

    async def amust_fit(self, messages: Sequence[Message], *, budget: int | None = None) -> Prepared:
        """`must_fit` with an async summarizer."""
        return await self._adrive(self._flow(messages, budget=budget, minimum=Level.AGGRESSIVE))

    def count(self, messages: Sequence[Message]) -> int:
        """Prompt tokens of ``messages`` as they are (no repairs, no truncation), reply priming included."""
        return self.counter.count_messages(messages)

    def status(self, messages: Sequence[Message]) -> Status:
        """How full the context would be if ``messages`` were prepared now, with a recommendation."""
        counted = self._count(messages, commit=False)
        tokens = counted.tokens
        ratio = tokens / self.budget
        th = self._thresholds(self._floor(counted), self.budget)
        level = th.level(ratio)
        return Status(
            tokens=tokens,
            budget=self.budget,
            window=self.window,
            reserve=self.reserve,
            ratio=ratio,
            level=level,
            recommendation=self._recommend(ratio, level, th),
        )

    def can_add(self, messages: Sequence[Message], message: Message) -> bool:
        """True when ``message`` can join ``messages`` without pushing them over the budget."""
        return self.status(messages).tokens + self.counter.count_message(message) <= self.budget

    def reset(self) -> None:
        """Forget the remembered history (the next call is a full pass). Stats are kept."""
        self._state = None

    # ------------------------------------------------------------------ drivers

    def _drive(self, flow: Generator[SummaryRequest, str, Prepared]) -> Prepared:
        try:
            request = next(flow)
            while True:
                try:
                    text = self._summarizer_for_call().summarize(request)
                except _BackingOff as exc:  # not called: the strategy falls back and reports why
                    request = flow.throw(exc)
                except Exception as exc:  # handed to the strategy, which falls back and reports it
                    self._summary_failed()
                    request = flow.throw(exc)
                else:
                    self._summary_failures = 0
                    request = flow.send(text)
        except StopIteration as stop:
            result: Prepared = stop.value
            return result

    async def _adrive(self, flow: Generator[SummaryRequest, str, Prepared]) -> Prepared:
        try:
            request = next(flow)
            while True:
                try:
                    text = await self._summarizer_for_call().asummarize(request)
                except _BackingOff as exc:
                    request = flow.throw(exc)
                except Exception as exc:
                    self._summary_failed()
                    request = flow.throw(exc)
                else:
                    self._summary_failures = 0
                    request = flow.send(text)
        except StopIteration as stop:
            result: Prepared = stop.value
            return result

    def _summarizer_for_call(self) -> Summarizer:
        """The summarizer, unless it is backing off after failures (then `_BackingOff`)."""
        if self.summarizer is None:
            raise SummarizerError(
                "a summarize strategy ran but the engine has no summarizer; pass summarizer="
            )
        if self.stats.calls <= self._summary_skip_until:
            raise _BackingOff(
                f"the summarizer failed {self._summary_failures} time(s) in a row; it is not called again "
                f"before prepare call {self._summary_skip_until + 1} (backoff), so the next strategy takes over"
            )
        return self.summarizer

    def _summary_failed(self) -> None:
        """Back off after a failure: skip the summarizer for 1, 2, 4 ... (at most 32) prepare calls.

        Without this, a failing LLM summarizer is called (with its own retries and
        backoff) at every step that compacts, which makes every agent step slow;
        Gemini CLI latches auto-compression off for good instead, which gives up
        on summaries for the rest of the session.
        """
        self.stats.summarizer_failures += 1
        self._summary_failures += 1
        self._summary_skip_until = self.stats.calls + min(2 ** (self._summary_failures - 1), 32)

    # ------------------------------------------------------------------ the logic (one place)

    def _count(self, messages: Sequence[Message], *, commit: bool) -> _Counted:
        """Repair, truncate and count what is new since the last call; O(new messages)."""
        st = self._state
        n = len(messages)
        base: list[Message] | None = None
        base_len = 0
        base_tokens = 0
        new: Sequence[Message] = messages
        repair_state = RepairState()
        incremental = False
        if st is not None and n:
            if (
                n >= st.in_len > 0
                and messages[st.in_len - 1].id == st.in_last
                and messages[0].id == st.in_first
            ):
                new = messages[st.in_len :]
                incremental = True
            elif (
                n >= st.out_len > 0
                and messages[st.out_len - 1].id == st.out[st.out_len - 1].id
                and messages[0].id == st.out[0].id
            ):
                new = messages[st.out_len :]
                incremental = True
            if incremental:
                base, base_len, base_tokens = st.out, st.out_len, st.out_tokens
                repair_state = st.repair if commit else st.repair.copy()
        repaired, actions, repair_state = repair_messages(new, repair_state, strict=self.strict)
        if self.strict and repair_state.pending:
            pending = ", ".join(repr(c) for c in repair_state.pending)
            raise InvalidConversationError(
                f"the conversation ends with tool calls that were never answered ({pending}); append their "
                "results before preparing, or drop strict=True to have stub results added"
            )
        processed: list[Message] = []
        for m in repaired:
            if m.role == "tool" and self.truncator is not None and m.metadata.get("agentcontext") is None:
                from .truncation import truncate_message

                short, result = truncate_message(m, self.truncator)
                if result.truncated:
                    actions.append(
                        Action(
                            kind="truncated",
                            strategy="ingest",
                            message_ids=(m.id,),
                            replacement_ids=(short.id,),
                            tokens_before=self.counter.count_message(m),
                            tokens_after=self.counter.count_message(short),
                            reason="tool output over the ingest limit; the full text is in the artifact store",
                            refs=(str(result.ref),) if result.ref is not None else (),
                        )
                    )
                    m = short
            processed.append(m)
        tokens = base_tokens + sum(self.counter.count_message(m) for m in processed)
        stubs = repair_state.pending_stubs()
        tokens += sum(self.counter.count_message(m) for m in stubs) + self.reply_overhead
        return _Counted(
            messages=processed,
            tokens=tokens,
            actions=actions,
            repair=repair_state,
            base=base,
            base_len=base_len,
            base_tokens=base_tokens,
            incremental=incremental,
        )

    def _floor(self, counted: _Counted) -> _Floor:
        """The floor of the counted messages, from the remembered one and the new messages: O(new)."""
        st = self._state
        known = st.floor if counted.base is not None and st is not None else _Floor()
        head_len, head_tokens = known.head_len, known.head_tokens
        new = counted.messages
        if head_len == counted.base_len:  # the system head may continue into the new messages
            for m in new:
                if m.role != "system":
                    break
                head_len += 1
                head_tokens += self.counter.count_message(m)
        user_tokens = known.user_tokens
        for i in range(len(new) - 1, -1, -1):
            if is_user_request(new[i]):
                user_tokens = self.counter.count_message(new[i])
                break
        return _Floor(head_len=head_len, head_tokens=head_tokens, user_tokens=user_tokens)

    def _thresholds(self, floor: _Floor, limit: int) -> Thresholds:
        """The thresholds for this call: raised when the floor leaves too little room (`Thresholds.above`)."""
        return self.thresholds.above((floor.tokens + self.reply_overhead) / limit)

    def _flow(
        self, messages: Sequence[Message], *, budget: int | None, minimum: Level
    ) -> Generator[SummaryRequest, str, Prepared]:
        counted = self._count(messages, commit=True)
        self.stats.calls += 1
        self.stats.repairs += sum(1 for a in counted.actions if a.kind == "repaired")
        self.stats.truncations += sum(1 for a in counted.actions if a.kind == "truncated")
        limit = min(budget, self.budget) if budget is not None else self.budget
        tokens = counted.tokens
        floor = self._floor(counted)
        th = self._thresholds(floor, limit)
        level = th.level(tokens / limit)
        start_level = max(level, minimum)
        stubs = tuple(counted.repair.pending_stubs())
        in_effect = self._state.in_effect if counted.incremental and self._state is not None else ()

        if start_level == Level.NONE:
            # Nothing to compact: extend the remembered list in place (views keep their length).
            if counted.base is not None:
                out = counted.base
                del out[counted.base_len :]  # drop anything past the view we extend (a branch)
            else:
                out = []
            out.extend(counted.messages)
            out_tokens = tokens - self.reply_overhead - sum(self.counter.count_message(m) for m in stubs)
            # Concatenate only when something happened, so a quiet step stays O(new).
            carried = in_effect + tuple(counted.actions) if counted.actions else in_effect
            self._remember(messages, out, out_tokens, counted.repair, carried, floor)
            report = Report(
                level=level,
                final_level=Level.NONE,
                tokens_before=tokens,
                tokens_after=tokens,
                budget=limit,
                window=self.window,
                reserve=self.reserve,
                target=int(th.target * limit),
                actions=tuple(counted.actions),
                in_effect=in_effect,
                counter=self.counter.name,
                incremental=counted.incremental,
            )
            self._record(report)
            return Prepared(messages=MessageView(out, len(out), stubs), report=report)

        # Compaction: materialize the whole list (rare, O(n)), stubs at the tail so pairs stay together.
        full: list[Message] = (
            counted.base[: counted.base_len] if counted.base is not None else []
        ) + counted.messages
        full.extend(stubs)
        stub_ids = {m.id for m in stubs}
        protected = frozenset(m.id for m in full if m.metadata.get("pinned") is True)
        ctx = CompactionContext(
            counter=self.counter,
            budget=limit,
            target=int(th.target * limit),
            reply_overhead=self.reply_overhead,
            protected_ids=protected,
            window=self.window,
            reserve=self.reserve,
        )
        soft_tokens = int(th.soft * limit)
        actions = list(counted.actions)
        notes: list[str] = []
        if th is not self.thresholds:
            notes.append(
                f"the system prompt and the latest request take {floor.tokens + self.reply_overhead:,} of the "
                f"{limit:,}-token budget: target raised to {th.target:.0%}, soft limit to {th.soft:.0%}"
            )
        current: tuple[Message, ...] = tuple(full)
        current_tokens = tokens
        lvl: Level = start_level
        attempts = 0
        try:
            while True:
                attempts += 1
                result: CompactionResult = yield from self.pipelines[lvl].flow(current, ctx)
                actions.extend(result.actions)
                if result.note:
                    notes.append(f"{lvl.label}: {result.note}")
                current, current_tokens = result.messages, result.tokens
                if current_tokens <= limit and (current_tokens <= soft_tokens or lvl == Level.EMERGENCY):
                    break
                if attempts >= _MAX_ATTEMPTS:
                    hard: CompactionResult = yield from HardTruncate().flow(current, ctx)
                    actions.extend(hard.actions)
                    current, current_tokens = hard.messages, hard.tokens
                    notes.append("hard truncation after the maximum number of escalations")
                    break
                lvl = Level(min(lvl + 1, Level.EMERGENCY))
        except ContextOverflowError:
            self.stats.overflows += 1
            raise
        if current_tokens > limit:  # a custom pipeline fell short: the guarantee still holds
            hard = yield from HardTruncate().flow(current, ctx)
            actions.extend(hard.actions)
            current, current_tokens = hard.messages, hard.tokens
            notes.append("hard truncation: the configured pipeline did not reach the budget")

        # Remember the result without the tail stubs (the real results may arrive next step).
        out = list(current)
        kept_stubs: tuple[Message, ...] = ()
        while out and out[-1].id in stub_ids:
            kept_stubs = (out.pop(),) + kept_stubs
        repair = counted.repair
        if stubs and not kept_stubs:
            repair.pending.clear()  # their call was compacted away; late results will be orphans, and reported
        out_tokens = (
            current_tokens - self.reply_overhead - sum(self.counter.count_message(m) for m in kept_stubs)
        )
        new_in_effect = in_effect + tuple(actions)
        head_idx, latest_user = essential_indices(out)
        out_floor = _Floor(
            head_len=len(head_idx),
            head_tokens=sum(self.counter.count_message(out[i]) for i in head_idx),
            user_tokens=self.counter.count_message(out[latest_user]) if latest_user is not None else 0,
        )
        self._remember(messages, out, out_tokens, repair, new_in_effect, out_floor)
        report = Report(
            level=level,
            final_level=lvl,
            tokens_before=tokens,
            tokens_after=current_tokens,
            budget=limit,
            window=self.window,
            reserve=self.reserve,
            target=ctx.target,
            actions=tuple(actions),
            in_effect=in_effect,
            attempts=attempts,
            counter=self.counter.name,
            incremental=counted.incremental,
            notes=tuple(notes),
        )
        self._record(report)
        return Prepared(messages=MessageView(out, len(out), kept_stubs), report=report)

    def _remember(
        self,
        messages: Sequence[Message],
        out: list[Message],
        out_tokens: int,
        repair: RepairState,
        in_effect: tuple[Action, ...],
        floor: _Floor,
    ) -> None:
        if not messages:
            self._state = None
            return
        self._state = _State(
            in_len=len(messages),
            in_first=messages[0].id,
            in_last=messages[-1].id,
            out=out,
            out_len=len(out),
            out_tokens=out_tokens,
            repair=repair,
            in_effect=in_effect,
            floor=floor,
        )

    def _record(self, report: Report) -> None:
        s = self.stats
        s._usage_sum += report.tokens_after / report.budget
        for a in report.actions:
            if a.kind == "summarized":
                s.summaries += 1
            elif a.kind == "fallback":
                code = a.reason.split(":", 1)[0].strip() or a.strategy
                s.fallbacks[code] = s.fallbacks.get(code, 0) + 1
        if report.compacted:
            s.compactions[max(report.level, Level.NORMAL).label] += 1
            s.escalations += max(report.attempts - 1, 0)
            if report.final_level == Level.EMERGENCY:
                s.emergencies += 1
            s.tokens_saved += max(report.tokens_before - report.tokens_after, 0)
            if report.tokens_before:
                s._ratio_sum += report.tokens_after / report.tokens_before

    def _recommend(self, ratio: float, level: Level, t: Thresholds) -> str:
        used = f"{ratio:.0%} of the {self.budget:,}-token budget used"
        if ratio > 1.0:
            return f"OVER: {used}; the next prepare() must hard-truncate. Compact now with a summary to keep more."
        if level == Level.EMERGENCY:
            return f"CRITICAL: {used}, past the hard limit ({t.hard:.0%}); the next prepare() hard-truncates."
        if level == Level.AGGRESSIVE:
            return f"WARNING: {used}, past the warn limit ({t.warn:.0%}); the next prepare() compacts aggressively to {t.target:.0%}."
        if level == Level.NORMAL:
            return f"INFO: {used}, past the soft limit ({t.soft:.0%}); the next prepare() compacts to {t.target:.0%}."
        return f"OK: {used}; nothing to do until {t.soft:.0%}."
