"""`Tiered`: run strategies from cheap to expensive and stop once the target is met; the default pipelines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..compaction import Action, Level
from ..exceptions import ConfigError
from ..messages import Message
from ._base import CompactionContext, CompactionFlow, CompactionResult, Strategy

if TYPE_CHECKING:
    from ..summarizers._base import Summarizer

__all__ = ["Tiered", "default_pipelines"]


@dataclass(frozen=True, kw_only=True)
class Tiered:
    """A pipeline of strategies, cheapest first.

    Each tier works on the previous tier's output; the pipeline stops as soon
    as the prompt is at or under the target, so expensive tiers (a summary)
    only run when the cheap ones (masking) were not enough.
    """

    tiers: tuple[Strategy, ...]
    name: str = "tiered"

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ConfigError("Tiered needs at least one strategy")
        if isinstance(self.tiers, list):
            object.__setattr__(self, "tiers", tuple(self.tiers))

    def flow(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionFlow:
        """Run the tiers in order until the target is reached."""
        current = tuple(messages)
        actions: list[Action] = []
        notes: list[str] = []
        tokens = ctx.total(current)
        settled = False
        for tier in self.tiers:
            if tokens <= ctx.target or settled:
                break
            result: CompactionResult = yield from tier.flow(current, ctx)
            current = result.messages
            tokens = result.tokens
            settled = result.settled
            actions.extend(result.actions)
            if result.note:
                notes.append(f"{tier.name}: {result.note}")
        return CompactionResult(
            messages=current, actions=tuple(actions), tokens=tokens, note="; ".join(notes), settled=settled
        )


def default_pipelines(*, summarizer: Summarizer | None = None) -> dict[Level, Strategy]:
    """The default pipeline per level: mask, summarize, then drop (or hard-truncate).

    Normal masks old tool results (keep 3) when that frees enough, summarizes
    the oldest part (the newest 30% kept verbatim, the user's messages kept in
    the ledger; written offline when the summarizer fails) and, should a summary
    not help, drops the oldest rounds to the target. Aggressive keeps one recent result, shortens old tool-call
    arguments and keeps 20% verbatim. Emergency (at or over the limit) first shortens
    the newest call's arguments when they make its step over half the budget, then
    tries a summary too, chunked so the summarizer never sees more than it can read,
    before hard truncation guarantees the fit.

    With no summarizer or one that makes no model call (``calls_model = False``,
    like the offline `ExtractiveSummarizer`), summarizing costs no more than
    masking and keeps the identifiers masking would drop, so it runs first;
    with an LLM summarizer, masking runs first to spare model calls.
    """
    from .hard_truncate import HardTruncate
    from .observation_masking import MaskObservations, ShortenArguments
    from .summarize import Summarize
    from .token_budget import TokenBudget

    offline = summarizer is None or getattr(summarizer, "calls_model", True) is False

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
            tiers=(
                # A newest step made large by its own arguments (a file written in one call) is
                # shortened first: otherwise the summary takes it whole, and what fitted beside it.
                ShortenArguments(),
                *tiers(
                    MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=200),
                    Summarize(keep_recent=0.1),
                    HardTruncate(),
                ),
            ),
            name="emergency",
        ),
    }
