"""What the engine reports: one call's `Report`, the context's `Status`, and running `EngineStats`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .compaction import COMPACTING_KINDS, Action, Level
from .messages import JSONValue

__all__ = ["EngineStats", "Report", "Status"]


@dataclass(frozen=True, kw_only=True)
class Report:
    """What one `ContextEngine.prepare` call did, and why."""

    level: Level
    """The level the input was at."""
    tokens_before: int
    """Prompt tokens of the input after repairs and ingest truncation (before compaction), tools included."""
    tokens_after: int
    """Prompt tokens of the prepared messages."""
    budget: int
    """Window minus output reserve (minus the safety margin for estimated counts), in the counter's
    tokens (see ``correction``)."""
    window: int
    reserve: int
    target: int
    """Tokens compaction aims at (raised above a large system prompt, `Thresholds.above`)."""
    actions: tuple[Action, ...] = ()
    """Everything this call did: repairs, ingest truncations, masks, drops, summaries."""
    in_effect: tuple[Action, ...] = ()
    """Actions of earlier calls whose effect the prepared messages still carry (what was dropped, masked,
    summarized or cut before), so a report accounts for every message of the input."""
    attempts: int = 0
    """Pipeline runs this call needed (escalations included)."""
    final_level: Level = Level.NONE
    """The level whose pipeline produced the result (higher than ``level`` after escalation)."""
    counter: str = ""
    correction: float = 1.0
    """What provider usage taught a `CalibratedCounter` (1.0 for any other counter). The token
    counts here are the counter's own, uncorrected; ``budget`` is the engine's budget divided by it."""
    incremental: bool = False
    """True when the call only had to process new messages."""
    tool_tokens: int = 0
    """Tokens of the tool definitions sent with the request (included in both token counts)."""
    instruction_tokens: int = 0
    """Tokens of the instructions sent beside the messages (included in both token counts)."""
    fill: bool = False
    """True for a one-shot fit, which fills the budget (less a small margin) instead of
    compacting down to the hysteresis target a running agent uses (`Thresholds.filled`)."""
    notes: tuple[str, ...] = ()

    @property
    def compacted(self) -> bool:
        """True when this call masked, shortened, dropped or summarized anything."""
        return any(a.kind in COMPACTING_KINDS for a in self.actions)

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
            "correction": round(self.correction, 4),
            "incremental": self.incremental,
            "tool_tokens": self.tool_tokens,
            "instruction_tokens": self.instruction_tokens,
            "fill": self.fill,
            "actions": [a.to_dict() for a in self.actions],
            "in_effect": [a.to_dict() for a in self.in_effect],
            "notes": list(self.notes),
        }


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

    Each call is counted once, at the level that triggered it (not once per
    must-fit round), and savings are never negative.
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
    messages_summarized: int = 0
    """Messages replaced by summaries (each call's compaction counts the ones it covered)."""
    messages_dropped: int = 0
    """Messages removed from prompts without a summary (each in its report's ``dropped`` actions)."""
    messages_masked: int = 0
    """Tool results replaced by a placeholder with a recall reference."""
    messages_shortened: int = 0
    """Messages whose text or tool-call arguments compaction cut (ingest cuts are `truncations`)."""
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
            "messages_summarized": self.messages_summarized,
            "messages_dropped": self.messages_dropped,
            "messages_masked": self.messages_masked,
            "messages_shortened": self.messages_shortened,
            "fallbacks": dict(self.fallbacks),
        }
