"""`SlidingWindow`: keep the newest N messages or N rounds (plus the system prompt and the user's requests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import ConfigError
from ..messages import Message, round_starts, safe_split_points
from ._base import (
    CompactionContext,
    CompactionResult,
    PureStrategy,
    apply_suffix_plan,
    essential_indices,
    plan_at,
)

__all__ = ["SlidingWindow"]


@dataclass(frozen=True, kw_only=True)
class SlidingWindow(PureStrategy):
    """Keep the newest ``keep_last_messages`` messages, or the newest ``keep_last_rounds`` rounds.

    Token counts play no part in choosing the cut (use `TokenBudget` for that).
    The cut moves earlier to the nearest safe split point, so tool calls keep
    their results, and the system prompt, the first user message (the goal) and
    the latest user message are always kept. An elision note marks the gap.

    Args:
        keep_last_messages: how many of the newest messages to keep (default 40 when neither is set).
        keep_last_rounds: how many of the newest rounds (a user turn and what follows) to keep.
    """

    keep_last_messages: int | None = None
    keep_last_rounds: int | None = None
    name: str = "sliding_window"

    def __post_init__(self) -> None:
        if self.keep_last_messages is not None and self.keep_last_rounds is not None:
            raise ConfigError("SlidingWindow takes keep_last_messages or keep_last_rounds, not both")
        for label, value in (
            ("keep_last_messages", self.keep_last_messages),
            ("keep_last_rounds", self.keep_last_rounds),
        ):
            if value is not None and value < 1:
                raise ConfigError(f"SlidingWindow.{label} must be at least 1, got {value}")

    def compact(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionResult:
        """Cut the conversation to its newest messages or rounds."""
        n = len(messages)
        if self.keep_last_rounds is not None:
            starts = round_starts(messages)
            want = starts[-self.keep_last_rounds] if len(starts) >= self.keep_last_rounds else 0
        else:
            want = max(0, n - (self.keep_last_messages or 40))
        head, _ = essential_indices(messages)
        # The latest safe point at or before ``want`` that does not start on a tool message.
        start = len(head)
        for p in safe_split_points(messages):
            if p > want:
                break
            if p >= len(head) and (p == n or messages[p].role != "tool"):
                start = p
        counts = [ctx.count(m) for m in messages]
        plan = plan_at(messages, start)
        reason = (
            f"kept the newest {self.keep_last_rounds} rounds"
            if self.keep_last_rounds is not None
            else f"kept the newest {self.keep_last_messages or 40} messages"
        )
        out, actions = apply_suffix_plan(
            messages, plan, strategy=self.name, counts=counts, reason=reason, recallable=ctx.recallable
        )
        return CompactionResult(messages=tuple(out), actions=tuple(actions), tokens=ctx.total(out))
