"""`ContextEngine`: levels, pipelines per level, the must-fit guarantee, status and stats.

The engine sits before every model call::

    engine = ContextEngine(model="gpt-4o", window=32_000, reserve=4_000)
    prepared = engine.prepare(history, tools=TOOLS)   # .messages fit, are valid, keep what matters
    reply = call_model(prepared.messages)

What it returns is a `Prepared`: the messages to send, a `Report` of what it
did, a declarative `Compaction` saying how the output derives from the input
(``input[:keep]`` then new messages: what a session appends as its record and an
integration applies to its framework's state), and an `EngineState`.

The state is what makes a step cheap: with it, the engine recognises "the same
history plus new messages" (by ids, which name content) and counts and checks
only the new ones, O(new messages), never a pass over the history. By default
the engine keeps the state of its last call itself (one engine, one
conversation); a caller serving several conversations passes each one's state
back (``state=prepared.state``). Compaction happens in large, rare steps,
aimed at ``target`` usage (default 50%), so the prompt prefix stays the same
between them and provider prompt caches keep hitting. When the system prompt
and the latest request alone take more than 30% of the budget, the target and
the limits rise with them (`Thresholds.above`).

Callers depend on the `Engine` protocol, never on the engine's attributes.

All the logic lives in one generator (`ContextEngine._flow`) that yields
summary requests; `prepare` and `aprepare` are the two thin drivers that
answer them with a sync or async summarizer (httpx's auth-flow pattern).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ._api import Engine, EngineState, Prepared, ToolDefinitions, _Floor, _Lineage
from ._intake import (
    Counted,
    InstructionTokens,
    ToolTokens,
    check_messages,
    count_new,
    floor_of,
    ingest_all,
)
from ._report import EngineStats, Report, Status
from ._thresholds import Thresholds, check_fill
from .compaction import Action, Compaction, Level, SummaryRequest, is_user_request
from .exceptions import (
    ConfigError,
    ContextOverflowError,
    SummarizerBackoff,
    SummarizerTimeout,
    UnknownModelError,
    UsageError,
)
from .messages import Message, MessageView, safe_split_points
from .strategies._base import CompactionContext, CompactionResult, Strategy, essential_indices
from .strategies._horizon import cut_at_horizon, default_horizon
from .strategies.hard_truncate import HardTruncate
from .strategies.pipeline import default_pipelines
from .strategies.summarize import Summarize
from .tokens._base import TokenCounter
from .tokens._calibrate import CalibratedCounter, uncorrected

if TYPE_CHECKING:
    from .artifacts import ArtifactStore
    from .models import ModelSpec
    from .summarizers._base import Summarizer
    from .truncation import ObservationTruncator

__all__ = ["ContextEngine", "Engine", "EngineState", "Prepared", "ToolDefinitions", "default_pipelines"]


_MAX_ATTEMPTS = 5


@dataclass(frozen=True, kw_only=True)
class _Call:
    """One call's inputs and the figures it was judged by."""

    messages: Sequence[Message]
    counted: Counted
    given: EngineState | None
    """The state the call extends (None: a full pass)."""
    tool_tokens: int
    instruction_tokens: int
    limit: int
    """The budget for the whole request, in the counter's uncorrected tokens (`ContextEngine._limit`)."""
    room: int
    """The budget for the messages: ``limit`` less the tool definitions."""
    thresholds: Thresholds
    level: Level
    floor: _Floor
    fill: bool
    recallable: bool
    forced: int | None = None
    """`must_fit` on messages already within the target: the tokens to compact them to (`ContextEngine._forced`)."""
    on_demand: bool = False
    """`must_fit` (and what calls it: `Session.compact`): compaction was asked for, so it must make progress."""
    newest: frozenset[str] = frozenset()
    """With ``forced``: the ids of the newest step, which compacting on demand never takes."""
    correction: float = 1.0
    """The calibrated counter's correction this call was judged with (1.0 uncalibrated)."""
    artifacts: ArtifactStore | Literal[False] | None = None
    """Where ingest truncation keeps full tool outputs for this call."""

    @property
    def beside(self) -> int:
        """Tokens sent beside the messages: tool definitions and instructions."""
        return self.tool_tokens + self.instruction_tokens

    @property
    def in_effect(self) -> tuple[Action, ...]:
        """Actions of earlier calls the output still carries."""
        return self.given._in_effect if self.given is not None else ()


# ----------------------------------------------------------------------------- the engine


class ContextEngine:
    """Keeps a conversation inside a model's context window.

    One engine serves one conversation with no more than ``engine.prepare(history)``
    (it keeps the last call's `EngineState` itself), or many conversations when the
    caller passes each one's state (``state=``).

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
            The engine alone calls it: strategies ask through the `SummaryRequest` they yield.
        truncator: cuts oversized tool outputs when they arrive (default: one sized to
            a quarter of the budget, keeping full outputs in a `MemoryArtifactStore` of at most
            64 MiB, least recently used evicted first, unless the call names an artifact store, as
            a session does: pass one store, ``MemoryArtifactStore(max_bytes=...)`` for another cap
            or a `FileArtifactStore`, as ``artifacts=`` to every call). False or None disables
            ingest truncation.
        strict: refuse invalid input with `InvalidConversationError` instead of repairing it.
        safety_margin: the share of the budget held back when the counter is an
            estimate (default: the model's ``estimate_margin``, else 0).
        timeout: seconds one `prepare` may spend waiting for summaries (default 60); what
            is left of it is each summary request's deadline, and a summary that cannot come
            back in time is given up (the summary is written offline instead, and the report
            says why).
            None: no deadline beyond the summarizer's own.
        horizon: tokens, counted back from the newest message, that the strategies see when they
            compact (default ``"auto"``: eight budgets, at least 1,000,000 tokens and at least what
            the pipelines' summaries may read, see `Summarize.reach`). Older history, which no
            built-in strategy would keep or summarize, is dropped first (by id, in the report), all
            but the system prompt, pinned messages, summaries and the user's requests, so that the
            first prepare of a million-message history costs seconds. None: no horizon (your own
            strategies may then read any distance back, at O(history) a pass).
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
        timeout: float | None = 60.0,
        horizon: int | Literal["auto"] | None = "auto",
    ) -> None:
        # What `with_window` builds its copy from: the arguments as given (defaults re-derived for
        # the new window), the counter as resolved (so a calibrated one keeps what it learned).
        self._config: dict[str, object] = {
            "model": model,
            "reserve": reserve,
            "thresholds": thresholds,
            "pipelines": pipelines,
            "summarizer": summarizer,
            "truncator": truncator,
            "strict": strict,
            "safety_margin": safety_margin,
            "timeout": timeout,
            "horizon": horizon,
        }
        spec, window, reserve, counter = _resolve(model, window, reserve, counter)
        self._config["counter"] = counter
        if safety_margin is None:
            safety_margin = spec.estimate_margin if spec is not None else 0.0
        if not 0.0 <= safety_margin < 0.5:
            raise ConfigError(f"safety_margin must be within [0, 0.5), got {safety_margin}")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        if thresholds is not None and not isinstance(thresholds, Thresholds):
            raise ConfigError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
        from .summarizers._base import check_summarizer
        from .summarizers._extractive import ExtractiveSummarizer

        self.model = spec
        self.window = window
        self.reserve = reserve
        self.counter = counter
        # A calibrated counter's correction changes as usage reports arrive. The engine counts with
        # the uncorrected inner counter, whose counts never change (so the per-message counts
        # and totals an EngineState carries stay valid), and scales each call's budget instead.
        self._units, _ = uncorrected(counter)
        self.thresholds = thresholds or Thresholds()
        self.budget = max(int((window - reserve) * (1.0 - safety_margin)), 1)
        self.timeout = timeout
        # Offline and deterministic: the default engine summarizes without a model; it also
        # answers the requests a summarizer cooldown makes between model calls.
        self._offline: Summarizer = ExtractiveSummarizer(counter=self._units)
        self.summarizer: Summarizer = (
            check_summarizer(summarizer) if summarizer is not None else self._offline
        )
        if getattr(self.summarizer, "calls_model", True) is False:
            self._offline = self.summarizer
        self.pipelines = (
            dict(pipelines) if pipelines is not None else default_pipelines(summarizer=summarizer)
        )
        # A one-shot fit has no later step to spare model calls for: it summarizes before masking, which
        # keeps what masking would drop (the default pipelines only; yours run as given).
        self._fill_pipelines = self.pipelines if pipelines is not None else default_pipelines()
        for required in (Level.NORMAL, Level.AGGRESSIVE, Level.EMERGENCY):
            if required not in self.pipelines:
                raise ConfigError(f"pipelines must cover the {required.label!r} level")
        if horizon == "auto":
            horizon = default_horizon(self.pipelines.values(), self.budget)
        elif horizon is not None and not (
            isinstance(horizon, int) and not isinstance(horizon, bool) and horizon >= self.budget
        ):
            raise ConfigError(
                f"horizon must be 'auto', None or an int of at least the budget ({self.budget:,} tokens), "
                f"got {horizon!r}"
            )
        self.horizon: int | None = horizon
        self.strict = strict
        self._sized_truncator = False
        """Whether the truncator is the engine's own, sized to its budget (`_filled_cuts` may widen it)."""
        self.truncator = self._make_truncator(truncator)
        self.reply_overhead = self._units.count_messages(())
        self.stats = EngineStats()
        self._stats_lock = threading.Lock()
        self._summary_failures = 0
        self._summary_skips = 0
        """Summary requests still to be answered offline before the summarizer is asked again (backoff)."""
        self._last: EngineState | None = None
        self._tools = ToolTokens()
        self._instructions = InstructionTokens()

    def _make_truncator(self, truncator: ObservationTruncator | None | bool) -> ObservationTruncator | None:
        if truncator is False or truncator is None:
            return None
        from .truncation import ObservationTruncator

        if isinstance(truncator, ObservationTruncator):
            return truncator
        if truncator is not True:
            raise ConfigError(
                f"truncator must be an ObservationTruncator, True (the default) or None, got {truncator!r}"
            )
        from .artifacts import MemoryArtifactStore

        self._sized_truncator = True
        return self._sized(max(256, self.budget // 4), MemoryArtifactStore())

    def _sized(self, max_tokens: int, store: ArtifactStore | None) -> ObservationTruncator:
        """The engine's own truncator for outputs of at most ``max_tokens`` (its byte and line limits to match)."""
        from .truncation import ObservationTruncator

        return ObservationTruncator(
            max_tokens=max_tokens,
            max_bytes=max(4096, max_tokens * 8),
            max_lines=max(200, max_tokens // 4),
            counter=self._units,
            store=store,
        )

    def with_window(self, window: int) -> ContextEngine:
        """A new engine configured as this one (counter, thresholds, pipelines, summarizer, truncator,
        reserve, safety margin, timeout, horizon) for a window of ``window`` tokens; its own state and stats.

        For a window known only at run time (LangChain's model profile). What was left to its default
        here is derived again for the new window (the ingest limit, the horizon); the counter is shared,
        so a calibrated one keeps what provider usage taught it.
        """
        return ContextEngine(window=window, **self._config)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ public API

    def prepare(
        self,
        messages: Sequence[Message],
        *,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        state: EngineState | None = None,
        artifacts: ArtifactStore | Literal[False] | None = None,
        fill: bool | float = False,
        recallable: bool = False,
    ) -> Prepared:
        """Return messages that fit, are valid and keep what matters, with a report.

        Compacts when usage passes the soft limit, escalating at most five times
        and then hard-truncating, so the result always fits or
        `ContextOverflowError` says why it cannot. Summarize tiers use the
        engine's summarizer synchronously.

        Args:
            messages: the conversation, as `Message` objects (``formats`` converts provider dicts).
            tools: the tool definitions sent with the request; they are counted, and the
                messages get the budget they leave.
            instructions: a system prompt sent outside the messages (the Responses API's
                ``instructions``, a framework's system message kept apart); counted like a system
                message, never compacted.
            state: this conversation's `Prepared.state` from its previous call (default:
                the state of this engine's previous call made without ``state=``).
            artifacts: where ingest truncation keeps full tool outputs for this call
                (a session passes its own; default: the truncator's store). False keeps them
                nowhere, and the cut outputs say the full text was not kept: for a one-shot
                fit whose process ends with it (``agentcontext fit``), where a reference to
                an in-memory store would send the model after text no one can read.
            fill: a one-shot fit: compact only when over the budget, and then only to fill
                it (less a small margin, or to this share of it: ``fill=0.9``), instead of down to
                the target a running agent uses.
            recallable: the caller keeps the originals and gives the model a recall tool (a
                `Session` does): the notes standing for removed content, and the markers of tool
                outputs cut at ingest, then say how to read it back. Default False: they never
                promise a recall nobody can serve (a cut output's marker says its full text is kept
                outside the conversation, under its reference, or was not kept).

        Raises:
            UsageError: ``messages`` holds something other than `Message` objects.
            ContextOverflowError: the system prompt, the latest request and the tools alone do not fit.
            InvalidConversationError: ``strict=True`` and the input needs repairs.
        """
        return self._drive(
            self._flow(
                messages,
                state,
                tools,
                instructions,
                artifacts,
                budget=None,
                minimum=Level.NONE,
                fill=fill,
                recallable=recallable,
            )
        )

    async def aprepare(
        self,
        messages: Sequence[Message],
        *,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        state: EngineState | None = None,
        artifacts: ArtifactStore | Literal[False] | None = None,
        fill: bool | float = False,
        recallable: bool = False,
    ) -> Prepared:
        """`prepare` with an async summarizer (same logic, async I/O)."""
        return await self._adrive(
            self._flow(
                messages,
                state,
                tools,
                instructions,
                artifacts,
                budget=None,
                minimum=Level.NONE,
                fill=fill,
                recallable=recallable,
            )
        )

    def must_fit(
        self,
        messages: Sequence[Message],
        *,
        budget: int | None = None,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        state: EngineState | None = None,
        artifacts: ArtifactStore | Literal[False] | None = None,
        fill: bool | float = False,
        recallable: bool = False,
    ) -> Prepared:
        """Compact now, to ``budget`` tokens (default: the engine's budget), whatever the level.

        For when a provider rejected a prompt as too long although the counter
        said it fit, or to compact on demand (a ``/compact`` command): this
        compacts at least at the aggressive level, with at most five escalations
        before hard truncation. Messages already within the target are compacted
        all the same, to what a compaction at the soft limit keeps of their size
        (``target / soft``; a report note says so). Other arguments as for `prepare`.
        """
        return self._drive(
            self._flow(
                messages,
                state,
                tools,
                instructions,
                artifacts,
                budget=budget,
                minimum=Level.AGGRESSIVE,
                fill=fill,
                recallable=recallable,
            )
        )

    async def amust_fit(
        self,
        messages: Sequence[Message],
        *,
        budget: int | None = None,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        state: EngineState | None = None,
        artifacts: ArtifactStore | Literal[False] | None = None,
        fill: bool | float = False,
        recallable: bool = False,
    ) -> Prepared:
        """`must_fit` with an async summarizer."""
        return await self._adrive(
            self._flow(
                messages,
                state,
                tools,
                instructions,
                artifacts,
                budget=budget,
                minimum=Level.AGGRESSIVE,
                fill=fill,
                recallable=recallable,
            )
        )

    def count(
        self,
        messages: Sequence[Message],
        *,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
    ) -> int:
        """Prompt tokens of ``messages`` (with ``tools`` and ``instructions``) as they are, reply priming included.

        With a `CalibratedCounter`, corrected by what provider usage taught it.
        """
        check_messages(messages, 0)
        counted = (
            self._units.count_messages(messages)
            + self._tool_tokens(tools)
            + self._instructions.count(instructions, self._units)
        )
        return _corrected(counted, self._correction())

    def status(
        self,
        messages: Sequence[Message],
        *,
        tools: ToolDefinitions | None = None,
        state: EngineState | None = None,
    ) -> Status:
        """How full the context would be if ``messages`` were prepared now, with a recommendation."""
        counted = self._count(messages, self._last if state is None else state, commit=False, artifacts=None)
        tool_tokens = self._tool_tokens(tools)
        correction = self._correction()
        budget = self._limit(self.budget, correction)
        limit = max(budget - tool_tokens, 1)
        tokens = counted.tokens + tool_tokens
        ratio = tokens / budget
        th = self._thresholds(floor_of(counted, self._units), limit)
        level = th.level(counted.tokens / limit)
        return Status(
            tokens=_corrected(tokens, correction),
            budget=self.budget,
            window=self.window,
            reserve=self.reserve,
            ratio=ratio,
            level=level,
            recommendation=self._recommend(ratio, level, th),
        )

    def can_add(self, messages: Sequence[Message], message: Message) -> bool:
        """True when ``message`` can join ``messages`` without pushing them over the budget."""
        counted = self._count(messages, self._last, commit=False, artifacts=None)
        budget = self._limit(self.budget, self._correction())
        return counted.tokens + self._units.count_message(message) <= budget

    def record_usage(self, report: Report, prompt_tokens: int) -> bool:
        """Learn from the prompt tokens a provider billed for a request this engine prepared.

        ``report`` is the `Prepared.report` of that request and ``prompt_tokens``
        what the response's usage says the prompt cost: OpenAI's
        ``usage.prompt_tokens``, Anthropic's ``input_tokens`` plus its cache reads
        and writes, LangChain's ``usage_metadata["input_tokens"]``. When the engine
        counts with a `CalibratedCounter`, the counter learns the ratio, and later
        calls scale their budget by it; an exact counter has nothing to learn. Models
        counted by estimate get one by default, which starts from the model's
        ``estimate_ratio`` and learns down by the safety margin at most; pass your own
        ``counter=CalibratedCounter(...)`` to correct both ways. Sessions and the
        integrations call this for you.

        Returns:
            True when the report was used; False when there is nothing to learn (an
            exact counter, a prompt too small to judge by).

        Raises:
            UsageError: ``report`` is not a `Report` or ``prompt_tokens`` is not an int >= 0.
        """
        if not isinstance(report, Report):
            raise UsageError(f"report must be the Report of a prepared request, got {type(report).__name__}")
        if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 0:
            raise UsageError(f"prompt_tokens must be an int >= 0, got {prompt_tokens!r}")
        counter = self.counter
        if not isinstance(counter, CalibratedCounter):
            return False
        return counter.observe_counted(report.tokens_after, prompt_tokens)

    def reset(self) -> None:
        """Forget the state this engine keeps for calls made without ``state=`` (the next is a full pass)."""
        self._last = None

    # ------------------------------------------------------------------ drivers

    def _drive(self, flow: Generator[SummaryRequest, str, Prepared]) -> Prepared:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            request = next(flow)
            while True:
                try:
                    summarizer, request = self._route(request, deadline)
                except (SummarizerBackoff, SummarizerTimeout) as exc:  # not called: the strategy falls back
                    request = flow.throw(exc)
                    continue
                summarize = getattr(summarizer, "summarize", None)
                if not callable(summarize):
                    flow.close()
                    raise ConfigError(
                        f"the engine's summarizer ({type(summarizer).__name__}) has only asummarize(): "
                        "call aprepare() / amust_fit(), or give it a summarize() method"
                    )
                try:
                    text = summarize(request)
                except Exception as exc:  # its own timeout included: handed to the strategy, and backed off
                    self._summary_failed(request)
                    request = flow.throw(exc)
                else:
                    self._summary_succeeded(request)
                    request = flow.send(text)
        except StopIteration as stop:
            result: Prepared = stop.value
            return result

    async def _adrive(self, flow: Generator[SummaryRequest, str, Prepared]) -> Prepared:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            request = next(flow)
            while True:
                try:
                    summarizer, request = self._route(request, deadline)
                except (SummarizerBackoff, SummarizerTimeout) as exc:
                    request = flow.throw(exc)
                    continue
                asummarize = getattr(summarizer, "asummarize", None)
                try:
                    if callable(asummarize):
                        text = await asummarize(request)
                    else:  # a summarizer written for sync calls only: in a worker thread
                        text = await asyncio.to_thread(summarizer.summarize, request)
                except Exception as exc:
                    self._summary_failed(request)
                    request = flow.throw(exc)
                else:
                    self._summary_succeeded(request)
                    request = flow.send(text)
        except StopIteration as stop:
            result: Prepared = stop.value
            return result

    def _route(self, request: SummaryRequest, deadline: float | None) -> tuple[Summarizer, SummaryRequest]:
        """Who answers ``request`` (the offline summarizer, or the summarizer unless it is backing off),
        and the request with what is left of this call's deadline."""
        if request.offline:
            return self._offline, request
        if self._summary_skips > 0:
            with self._stats_lock:
                self._summary_skips -= 1
                skips = self._summary_skips
            raise SummarizerBackoff(
                f"the summarizer failed {self._summary_failures} time(s) in a row; it is asked again after "
                f"{skips} more summar{'y' if skips == 1 else 'ies'} (backoff)"
            )
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SummarizerTimeout(
                    f"the {self.timeout:g}-second deadline of this prepare call passed before the summary was asked for"
                )
            if request.deadline is None or request.deadline > deadline:
                request = dataclasses.replace(request, deadline=deadline)
        return self.summarizer, request

    def _summary_succeeded(self, request: SummaryRequest) -> None:
        if not request.offline:
            self._summary_failures = 0

    def _summary_failed(self, request: SummaryRequest) -> None:
        """Back off after a failure: the next 1, 2, 4 ... (at most 32) summaries are written offline.

        Without this, a failing LLM summarizer is called (with its own retries and
        backoff) at every step that compacts, which makes every agent step slow;
        Gemini CLI latches auto-compression off for good instead, which gives up
        on summaries for the rest of the session. The backoff counts summaries, not
        prepare calls: compactions come every several calls, and a skip of a few
        calls would expire before the next one, which would then wait on a dead
        endpoint again (a review: a hung one stalled 5 of 6 compactions).
        """
        if request.offline:
            return
        with self._stats_lock:
            self.stats.summarizer_failures += 1
            self._summary_failures += 1
            self._summary_skips = min(2 ** (self._summary_failures - 1), 32)

    # ------------------------------------------------------------------ the logic (one place)

    def _correction(self) -> float:
        """The calibrated counter's correction now (1.0 for any other counter): read once per call."""
        counter = self.counter
        return counter.correction if isinstance(counter, CalibratedCounter) else 1.0

    @staticmethod
    def _limit(budget: int, correction: float) -> int:
        """``budget`` in the counter's uncorrected tokens: the most ``n`` with ``ceil(n * correction) <= budget``."""
        if correction == 1.0:
            return budget
        return max(math.floor(budget / correction + 1e-9), 1)

    def _calibrated(self, correction: float) -> str:
        if correction == 1.0:
            return ""
        return (
            f"; these are the counter's own figures, and the provider bills about {correction:.3f} times them"
        )

    def _tool_tokens(self, tools: ToolDefinitions | None) -> int:
        return self._tools.count(tools, self._units)

    def _count(
        self,
        messages: Sequence[Message],
        state: EngineState | None,
        *,
        commit: bool,
        artifacts: ArtifactStore | Literal[False] | None,
        horizon: int | None = None,
        recallable: bool = False,
        truncator: ObservationTruncator | None = None,
    ) -> Counted:
        """`count_new` with this engine's settings (``truncator``: another than the engine's, `_filled_cuts`)."""
        return count_new(
            messages,
            state,
            counter=self._units,
            truncator=truncator if truncator is not None else self.truncator,
            strict=self.strict,
            reply_overhead=self.reply_overhead,
            commit=commit,
            artifacts=artifacts,
            horizon=horizon,
            recallable=recallable,
        )

    def _filled_cuts(
        self,
        messages: Sequence[Message],
        given: EngineState | None,
        counted: Counted,
        target: int,
        *,
        artifacts: ArtifactStore | Literal[False] | None,
        recallable: bool,
    ) -> Counted:
        """A one-shot fit's intake with tool outputs cut at ingest as far as the room under ``target`` allows.

        The engine cuts an output at a quarter of the budget when it arrives: right for a
        running agent, whose later steps need the room. A one-shot fit has no later step: when
        everything else fits with room to spare, that room goes to the outputs cut (the highest
        limit at which they take no more than the spare room), rather than leaving the lines an
        agent would need (the part of a file it edits next) out of a prompt with room for them.
        Only the engine's own truncator is widened; one you configured keeps its limits.
        """
        truncator = self.truncator
        cuts = [a for a in counted.actions if a.kind == "truncated" and a.strategy == "ingest"]
        free = target - counted.tokens
        if not (self._sized_truncator and truncator is not None and truncator.max_tokens is not None):
            return counted
        if not cuts or free <= 0 or counted.estimated:
            return counted
        from .truncation import output_text, truncate_message

        by_id = {m.id: m for m in messages}
        pairs = [(a, by_id[a.message_ids[0]]) for a in cuts if a.message_ids[0] in by_id]
        if len(pairs) < len(cuts):
            return counted  # a cut whose original is not among the messages (repaired on the way): leave it
        originals = [m for _, m in pairs]
        taken = sum(a.tokens_after for a in cuts) + free - free // 20  # a margin: the marker changes too

        def size(limit: int) -> int:
            """What the outputs cut take, cut by the engine's truncator sized to ``limit`` (nothing stored)."""
            sized = self._sized(limit, None)
            return sum(self._units.count_message(truncate_message(m, sized)[0]) for m in originals)

        # The highest limit at which they take at most what they take now plus the room: by tokens,
        # lines or bytes, whichever cut them (`_sized` scales all three), up to where none is cut.
        lo = truncator.max_tokens
        texts = [(a, output_text(m)) for a, m in pairs]  # a text file's lines are what was cut, too
        hi = max(max(a.tokens_before, 4 * (t.count("\n") + 1), len(t.encode()) // 8) for a, t in texts)
        while lo < hi:  # O(log) probes, each cutting only these outputs
            mid = (lo + hi + 1) // 2
            if size(mid) <= taken:
                lo = mid
            else:
                hi = mid - 1
        if lo <= truncator.max_tokens:
            return counted
        wider = self._count(
            messages,
            given,
            commit=True,
            artifacts=artifacts,
            horizon=self.horizon,
            recallable=recallable,
            truncator=self._sized(lo, truncator.store),
        )
        return wider if wider.tokens <= target else counted

    def _thresholds(self, floor: _Floor, limit: int) -> Thresholds:
        """The thresholds for this call: raised when the floor leaves too little room (`Thresholds.above`)."""
        return self.thresholds.above((floor.tokens + self.reply_overhead) / limit)

    def _flow(
        self,
        messages: Sequence[Message],
        state: EngineState | None,
        tools: ToolDefinitions | None,
        instructions: str | None,
        artifacts: ArtifactStore | Literal[False] | None,
        *,
        budget: int | None,
        minimum: Level,
        fill: bool | float,
        recallable: bool,
    ) -> Generator[SummaryRequest, str, Prepared]:
        own = state is None
        if not own and not isinstance(state, EngineState):
            raise UsageError(
                f"state must be an EngineState (from Prepared.state), got {type(state).__name__}"
            )
        _check_int("budget", budget)
        given = self._last if own else state
        fill = check_fill(fill)  # refuses a bad share now, before the state is touched
        if given is not None and given._widened and not fill:
            given = None  # a one-shot fit widened its cuts: a running call starts from the usual ones
        tool_tokens = self._tool_tokens(tools)
        instruction_tokens = self._instructions.count(instructions, self._units)
        counted = self._count(
            messages, given, commit=True, artifacts=artifacts, horizon=self.horizon, recallable=recallable
        )
        correction = self._correction()
        limit = self._limit(min(budget, self.budget) if budget is not None else self.budget, correction)
        beside = tool_tokens + instruction_tokens
        room = limit - beside  # what the messages may take
        if room <= self.reply_overhead:
            with self._stats_lock:
                self.stats.overflows += 1
            raise ContextOverflowError(
                f"the tool definitions ({tool_tokens:,} tokens) and instructions ({instruction_tokens:,}) alone "
                f"take {beside:,} tokens of the {limit:,}-token budget (window {self.window:,} minus reserve "
                f"{self.reserve:,}{self._calibrated(correction)}); send fewer tools, shorter instructions, or use a larger window",
                required=beside + self.reply_overhead,
                budget=limit,
                window=self.window,
                reserve=self.reserve,
            )
        floor = floor_of(counted, self._units)
        th = self._thresholds(floor, room)
        widened = False
        if fill:
            th = th.filled(None if fill is True else float(fill))
            if counted.base is None and minimum == Level.NONE:
                cut = counted
                counted = self._filled_cuts(
                    messages,
                    given,
                    counted,
                    int(th.target * room),
                    artifacts=artifacts,
                    recallable=recallable,
                )
                widened = counted is not cut
        with self._stats_lock:
            self.stats.calls += 1
            self.stats.repairs += sum(1 for a in counted.actions if a.kind == "repaired")
            self.stats.truncations += sum(1 for a in counted.actions if a.kind == "truncated")
        level = th.level(counted.tokens / room)
        start = max(level, minimum)
        if fill and counted.tokens <= room and minimum == Level.NONE:
            start = Level.NONE
        forced, newest = None, frozenset[str]()
        if minimum > Level.NONE and not fill and counted.tokens <= int(th.target * room):
            found = self._forced(counted, floor, th)
            if found is None:
                start = Level.NONE  # nothing to gain: the newest step and what must stay are all there is
            else:
                forced, newest = found
        call = _Call(
            messages=messages,
            counted=counted,
            given=given if counted.base is not None else None,
            tool_tokens=tool_tokens,
            instruction_tokens=instruction_tokens,
            limit=limit,
            room=room,
            thresholds=th,
            level=level,
            floor=floor,
            fill=bool(fill),
            recallable=recallable,
            forced=forced,
            newest=newest,
            on_demand=minimum > Level.NONE,
            correction=correction,
            artifacts=artifacts,
        )
        if start == Level.NONE:
            prepared = self._quiet(call)
        else:
            prepared = yield from self._compact(call, start)
        if widened:
            prepared = dataclasses.replace(prepared, state=dataclasses.replace(prepared.state, _widened=True))
        if own:
            self._last = prepared.state
        return prepared

    def _quiet(self, call: _Call) -> Prepared:
        """Nothing to compact: extend the lineage's list in place (earlier views keep their length)."""
        counted, messages, n = call.counted, call.messages, len(call.messages)
        stubs = counted.stubs
        if call.given is not None:
            lineage = call.given._lineage
            assert lineage is not None
            lineage.out.extend(counted.messages)
            lineage.counts.extend(counted.counts)
        else:
            lineage = _Lineage(out=list(counted.messages), counts=list(counted.counts), repair=counted.repair)
        out = lineage.out
        tokens = counted.tokens
        out_tokens = tokens - self.reply_overhead - sum(self._units.count_message(m) for m in stubs)
        in_effect = call.in_effect
        # Concatenate only when something happened, so a quiet step stays O(new).
        carried = in_effect + tuple(counted.actions) if counted.actions else in_effect
        keep = counted.keep
        total = tokens + call.beside
        compaction = None
        if keep < n or len(out) != n:
            compaction = Compaction(
                keep=keep,
                messages=MessageView(out, len(out), start=keep),
                actions=tuple(counted.actions),
                level=Level.NONE,
                tokens_before=total,
                tokens_after=total,
            )
        report = Report(
            level=call.level,
            final_level=Level.NONE,
            tokens_before=total,
            tokens_after=total,
            budget=call.limit,
            window=self.window,
            reserve=self.reserve,
            target=int(call.thresholds.target * call.room) + call.beside,
            actions=tuple(counted.actions),
            in_effect=in_effect,
            counter=self.counter.name,
            correction=call.correction,
            incremental=call.given is not None,
            tool_tokens=call.tool_tokens,
            instruction_tokens=call.instruction_tokens,
            fill=call.fill,
        )
        self._record(report)
        return Prepared(
            messages=MessageView(out, len(out), stubs),
            report=report,
            compaction=compaction,
            state=self._state(messages, lineage, keep, out_tokens, carried, call.floor),
        )

    def _compact(self, call: _Call, start: Level) -> Generator[SummaryRequest, str, Prepared]:
        """Run the pipelines from ``start``, escalating until the result fits; materializes the list (rare, O(n))."""
        counted, room = call.counted, call.room
        stubs = counted.stubs
        # Stubs at the tail, so that pairs stay together.
        full: list[Message] = (
            counted.base[: counted.base_len] if counted.base is not None else []
        ) + counted.messages
        full.extend(stubs)
        counts = (
            counted.base_counts[: counted.base_len] if counted.base_counts is not None else []
        ) + counted.counts
        counts.extend(self._units.count_message(m) for m in stubs)
        protected = frozenset(m.id for m in full if m.metadata and m.metadata.get("pinned") is True)
        actions = list(counted.actions)
        notes = self._notes(call)
        if self.horizon is not None and counted.tokens > self.horizon:
            estimated = range(counted.base_len, counted.base_len + counted.estimated)
            late = [0]

            def ingest(part: list[Message]) -> tuple[list[Message], list[int]]:
                # What stays of the messages intake left alone is cut and counted as intake would have.
                late[0] += len(part)
                return ingest_all(
                    part,
                    actions,
                    truncator=self.truncator,
                    counter=self._units,
                    artifacts=call.artifacts,
                    recallable=call.recallable,
                )

            cut = cut_at_horizon(
                full,
                counts,
                self.horizon,
                ledger_room=room,
                protected_ids=protected,
                recallable=call.recallable,
                counter=self._units,
                estimated=estimated,
                ingest=ingest,
            )
            if cut is not None:
                full, counts, dropped = cut
                actions.append(dropped)
            elif estimated:  # nothing could be dropped after all: all of it stays
                full[estimated.start : estimated.stop], counts[estimated.start : estimated.stop] = ingest(
                    full[estimated.start : estimated.stop]
                )
            if len(estimated) > late[0]:
                notes.append(
                    f"{len(estimated) - late[0]:,} messages beyond the {self.horizon:,}-token horizon were dropped "
                    "without being tokenized: tokens_before counts them at an estimate from their length"
                )
        target, settle = self._target(call, notes)
        ctx = CompactionContext(
            counter=self._units,
            budget=room,
            target=target,
            settle=settle,
            reply_overhead=self.reply_overhead,
            protected_ids=protected,
            window=self.window,
            reserve=self.reserve,
            recallable=call.recallable,
            fill=call.fill,
            offline_summaries=self._offline is self.summarizer,
            summarizer_input=_input_limit(self.summarizer),
            known=dict(zip((m.id for m in full), counts, strict=True)),
            inputs=(call.messages, full),  # the messages as processed (cut at ingest) win over the raw ones
        )
        try:
            current, tokens, lvl, attempts = yield from self._escalate(
                tuple(full), ctx, start, call, actions, notes
            )
        except ContextOverflowError:
            with self._stats_lock:
                self.stats.overflows += 1
            raise
        if call.forced is not None and (
            tokens >= counted.tokens or not call.newest <= {m.id for m in current}
        ):
            # Compacting on demand gained nothing, or only by taking the newest step (a second compaction
            # with nothing new since: the next tier dropped the agent's last calls): the messages stay.
            return self._quiet(call)
        # Remember the result without the tail stubs (the real results may arrive next step).
        stub_ids = {m.id for m in stubs}
        out = list(current)
        kept_stubs: tuple[Message, ...] = ()
        while out and out[-1].id in stub_ids:
            kept_stubs = (out.pop(),) + kept_stubs
        repair = counted.repair
        if stubs and not kept_stubs:
            repair.pending.clear()  # their call was compacted away; late results will be orphans, and reported
        out_tokens = tokens - self.reply_overhead - sum(self._units.count_message(m) for m in kept_stubs)
        keep = 0
        for a, b in zip(call.messages, out, strict=False):
            if a.id != b.id:
                break
            keep += 1
        head_idx, latest_user = essential_indices(out)
        out_floor = _Floor(
            head_len=len(head_idx),
            head_tokens=sum(self._units.count_message(out[i]) for i in head_idx),
            user_tokens=self._units.count_message(out[latest_user]) if latest_user is not None else 0,
        )
        n = len(call.messages)
        before, after = counted.tokens + call.beside, tokens + call.beside
        compaction = None
        if keep < n or len(out) != n:
            compaction = Compaction(
                keep=keep,
                messages=MessageView(out, len(out), start=keep),
                actions=tuple(actions),
                level=lvl,
                tokens_before=before,
                tokens_after=after,
            )
        report = Report(
            level=call.level,
            final_level=lvl,
            tokens_before=before,
            tokens_after=after,
            budget=call.limit,
            window=self.window,
            reserve=self.reserve,
            target=ctx.target + call.beside,
            actions=tuple(actions),
            in_effect=call.in_effect,
            attempts=attempts,
            counter=self.counter.name,
            correction=call.correction,
            incremental=call.given is not None,
            tool_tokens=call.tool_tokens,
            instruction_tokens=call.instruction_tokens,
            fill=call.fill,
            notes=tuple(notes),
        )
        self._record(report)
        # The calls the output holds, as a fresh pass over it counts them (a session reopened on this view
        # makes one): a call compacted away no longer makes a later call of its id a duplicate to rename,
        # or the prompts after a restart would differ from those of a run that went on.
        seen = {c.id: 1 for m in out for c in m.tool_calls}
        lineage = _Lineage(
            out=out, counts=[ctx.count(m) for m in out], repair=dataclasses.replace(repair, seen_calls=seen)
        )
        # Earlier actions stay listed: a caller passing its full history each time (not the output) still
        # sees, in every report, why each message it holds is missing from the prompt.
        carried = call.in_effect + tuple(actions)
        return Prepared(
            messages=MessageView(out, len(out), kept_stubs),
            report=report,
            compaction=compaction,
            state=self._state(call.messages, lineage, keep, out_tokens, carried, out_floor),
        )

    def _escalate(
        self,
        current: tuple[Message, ...],
        ctx: CompactionContext,
        start: Level,
        call: _Call,
        actions: list[Action],
        notes: list[str],
    ) -> Generator[SummaryRequest, str, tuple[tuple[Message, ...], int, Level, int]]:
        """Run the level's pipeline, escalating until the result fits (at most five runs, then hard truncation)."""
        soft_tokens = int(call.thresholds.soft * call.room)
        tokens = call.counted.tokens
        lvl, attempts = start, 0
        while True:
            attempts += 1
            pipelines = self._fill_pipelines if call.fill else self.pipelines
            result: CompactionResult = yield from pipelines[lvl].flow(current, ctx)
            actions.extend(result.actions)
            if result.note:
                notes.append(f"{lvl.label}: {result.note}")
            current, tokens = result.messages, result.tokens
            # A result past the soft limit on purpose (`CompactionResult.settled`: a newest step the agent
            # has not read yet, kept whole) ends the call too: a higher level would only summarize that step.
            done = tokens <= soft_tokens or result.settled or lvl == Level.EMERGENCY or call.fill
            if tokens <= call.room and done:
                break
            if attempts >= _MAX_ATTEMPTS:
                hard: CompactionResult = yield from HardTruncate().flow(current, ctx)
                actions.extend(hard.actions)
                current, tokens = hard.messages, hard.tokens
                notes.append("hard truncation after the maximum number of escalations")
                break
            lvl = Level(min(lvl + 1, Level.EMERGENCY))
        if tokens > call.room:  # a custom pipeline fell short: the guarantee still holds
            hard = yield from HardTruncate().flow(current, ctx)
            actions.extend(hard.actions)
            current, tokens = hard.messages, hard.tokens
            notes.append("hard truncation: the configured pipeline did not reach the budget")
        return current, tokens, lvl, attempts

    def _forced(self, counted: Counted, floor: _Floor, th: Thresholds) -> tuple[int, frozenset[str]] | None:
        """What `must_fit` compacts messages already within the target to, and the ids of the newest step,
        which must stay; None when nothing can be gained.

        Compacting on demand (a provider refused a prompt the counter said fit, or a
        ``/compact``) must make progress even there, where every strategy would rightly
        leave the messages alone: they are compacted to what a compaction at the soft
        limit keeps of their size (``target / soft``), but never below what must stay,
        the system prompt, the user's requests and the newest step (the result the agent
        just received), with room for a summary beside them. O(n): on demand only.
        """
        msgs = (counted.base[: counted.base_len] if counted.base is not None else []) + counted.messages
        counts = (
            counted.base_counts[: counted.base_len] if counted.base_counts is not None else []
        ) + counted.counts
        n = len(msgs)
        newest = next((p for p in reversed(safe_split_points(msgs)) if p < n), n)
        # What must stay: the system prompt and the latest request (the floor), the user's other
        # requests (the summary's ledger keeps them verbatim), and the newest step.
        requests = sum(counts[i] for i in range(newest) if is_user_request(msgs[i]))
        kept = floor.tokens + requests + sum(counts[newest:]) + self.reply_overhead
        # Beside it, a summary with its preamble and room (`plan_summary` keeps the newest step only when
        # the summary gets a twentieth of the target too).
        keep = kept + max(4 * Summarize.min_summary_tokens, kept // 8)
        shrunk = max(int(counted.tokens * th.target / th.soft), keep)
        return (shrunk, frozenset(m.id for m in msgs[newest:])) if shrunk < counted.tokens else None

    def _target(self, call: _Call, notes: list[str]) -> tuple[int, int]:
        """The tokens the messages are compacted towards, and how far past it a large newest step may stay.

        A running agent's target is the thresholds' (the budget in a one-shot fill), and a newest
        step the agent has not read yet may stay up to the budget (`plan_summary`); compacting on
        demand, within it, `_forced`'s, and nothing may stay past that.
        """
        th, room = call.thresholds, call.room
        target = int(th.target * room)
        if call.fill:
            return target, room
        if call.forced is not None:
            notes.append(
                f"compacted on demand: the messages ({call.counted.tokens:,} tokens) were already within the "
                f"{target:,}-token target, so they are compacted towards {call.forced:,}, what compaction at "
                "the soft limit keeps (never the newest step)"
            )
            return call.forced, call.forced
        if call.on_demand:
            # Asked for (a provider refused the prompt as too long): nothing stays past the target, not
            # even the newest step, else a conversation of the task and one large step came back unchanged.
            return target, target
        return target, room

    def _notes(self, call: _Call) -> list[str]:
        notes: list[str] = []
        th = call.thresholds
        if call.fill:
            notes.append(f"one-shot fit: filled up to {th.target:.0%} of the budget (no hysteresis target)")
        elif th is not self.thresholds:
            notes.append(
                f"the system prompt and the latest request take {call.floor.tokens + self.reply_overhead:,} of "
                f"the {call.room:,}-token budget: target raised to {th.target:.0%}, soft limit to {th.soft:.0%}"
            )
        if call.correction != 1.0:
            notes.append(
                f"counts are the counter's own; the provider bills about {call.correction:.3f} times "
                f"them, so the {self.budget:,}-token budget is {call.limit:,} of them"
            )
        if call.tool_tokens:
            notes.append(f"the tool definitions take {call.tool_tokens:,} tokens of the budget")
        if call.instruction_tokens:
            notes.append(f"the instructions take {call.instruction_tokens:,} tokens of the budget")
        return notes

    @staticmethod
    def _state(
        messages: Sequence[Message],
        lineage: _Lineage,
        keep: int,
        out_tokens: int,
        in_effect: tuple[Action, ...],
        floor: _Floor,
    ) -> EngineState:
        n = len(messages)
        return EngineState(
            _lineage=lineage,
            _version=lineage.version,
            _in_len=n,
            _in_first=messages[0].id if n else "",
            _in_last=messages[n - 1].id if n else "",
            _in_keep=keep,
            _out_len=len(lineage.out),
            _out_tokens=out_tokens,
            _in_effect=in_effect,
            _floor=floor,
        )

    def _record(self, report: Report) -> None:
        with self._stats_lock:  # an engine may serve several threads, each with its own state
            self._count_in_stats(report)

    def _count_in_stats(self, report: Report) -> None:
        s = self.stats
        s._usage_sum += report.tokens_after / report.budget
        for a in report.actions:
            if a.kind == "summarized":
                s.summaries += 1
                s.messages_summarized += len(a.message_ids)
            elif a.kind == "dropped":
                s.messages_dropped += len(a.message_ids)
            elif a.kind == "masked":
                s.messages_masked += len(a.message_ids)
            elif a.kind in ("shortened", "arguments_shortened"):
                s.messages_shortened += len(a.message_ids)
            elif a.kind == "fallback":
                code = a.fallback.value if a.fallback is not None else a.strategy
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


def _resolve(
    model: str | ModelSpec | None, window: int | None, reserve: int | None, counter: TokenCounter | None
) -> tuple[ModelSpec | None, int, int, TokenCounter]:
    """The model's spec, window, reserve and counter, from what was given and the registry."""
    from . import models

    spec = None
    if model is not None:
        if not isinstance(model, str | models.ModelSpec):
            raise ConfigError(f"model must be a model name (str) or a ModelSpec, got {type(model).__name__}")
        try:
            spec = models.get(model) if isinstance(model, str) else model
        except UnknownModelError:
            if window is None:
                raise
            # A model of your own (a local one, say): its window and counter are what was given.
            if counter is None:
                raise ConfigError(
                    f"{model!r} is not in the registry: give its counter= too (ScriptEstimator() "
                    "estimates any text; counter_for_tokenizer('hf:PATH') counts with its own tokenizer)"
                ) from None
    _check_int("window", window)
    _check_int("reserve", reserve)
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
        raise ConfigError(f"reserve must be within [0, window), got reserve={reserve} for window={window}")
    if counter is None:
        if spec is None:
            raise ConfigError("ContextEngine needs a model name or an explicit counter=")
        # An estimate gets a counter of its own that learns the model's correction from the usage it is
        # given (`record_usage`), starting from `ModelSpec.estimate_ratio` (1.6 for Claude Opus 4.7's
        # tokenizer), down by the safety margin at most. Pass counter=CalibratedCounter(...) to correct both ways.
        counter = models.counter_for(spec, calibrated=True)
    elif not isinstance(counter, TokenCounter):
        raise ConfigError(f"counter must implement TokenCounter, got {type(counter).__name__}")
    return spec, window, reserve, counter


def _input_limit(summarizer: object) -> int | None:
    """What a summarizer says it reads at most in one request (`LLMSummarizerBase.input_limit`), if anything."""
    limit = getattr(summarizer, "input_limit", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def _check_int(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{name} must be an int (tokens), got {type(value).__name__} {value!r}")


if TYPE_CHECKING:

    def _implements_engine(engine: ContextEngine) -> Engine:
        return engine  # a static check: ContextEngine satisfies the Engine protocol


def _corrected(tokens: int, correction: float) -> int:
    """``tokens`` counted uncorrected, as the provider bills them (`CalibratedCounter`'s rounding)."""
    return tokens if correction == 1.0 else math.ceil(tokens * correction - 1e-9)
