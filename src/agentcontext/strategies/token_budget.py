"""`TokenBudget`: keep the longest contiguous suffix that fits a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import ConfigError
from ..messages import Message
from ._base import (
    CompactionContext,
    CompactionResult,
    PureStrategy,
    apply_suffix_plan,
    elision_note,
    plan_suffix,
)

__all__ = ["TokenBudget"]


@dataclass(frozen=True, kw_only=True)
class TokenBudget(PureStrategy):
    """Keep messages from newest to oldest while they fit ``max_tokens`` (default: the engine's target).

    A budget that skips a big message and keeps older small ones gives a
    non-contiguous result that orphans tool results; here the result is the
    system prompt, the user's goal and latest request, and one
    *contiguous* suffix cut at a safe split point. When even the smallest valid
    suffix is over the budget, it returns that and says so in ``note``: the
    engine then escalates to `HardTruncate`.

    Args:
        max_tokens: the budget for the whole prompt; None means the context's target.
        keep_first_user: keep the first user message (the goal) when it fits. Default True.
    """

    max_tokens: int | None = None
    keep_first_user: bool = True
    name: str = "token_budget"

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"TokenBudget.max_tokens must be positive, got {self.max_tokens}")

    def compact(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionResult:
        """Drop the oldest messages until the rest fits."""
        limit = self.max_tokens if self.max_tokens is not None else ctx.target
        counts = [ctx.count(m) for m in messages]
        total = sum(counts) + ctx.reply_overhead
        if total <= limit:
            return CompactionResult(messages=tuple(messages), tokens=total, note="already within budget")
        note_tokens = ctx.count(elision_note(messages[:1], anchor=None)) + 8
        plan = plan_suffix(
            messages,
            counts,
            limit=limit,
            reply_overhead=ctx.reply_overhead,
            note_tokens=note_tokens,
            keep_first_user=self.keep_first_user,
        )
        out, actions = apply_suffix_plan(
            messages,
            plan,
            strategy=self.name,
            counts=counts,
            reason=f"oldest messages dropped to fit {limit} tokens",
            recallable=ctx.recallable,
        )
        tokens = ctx.total(out)
        return CompactionResult(
            messages=tuple(out),
            actions=tuple(actions),
            tokens=tokens,
            note="" if tokens <= limit else f"smallest valid suffix is {tokens} tokens, over {limit}",
        )
