"""`Tiered`: run strategies from cheap to expensive and stop once the target is met."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import ConfigError
from ..messages import Message
from ._base import Action, CompactionContext, CompactionFlow, CompactionResult, Strategy

__all__ = ["Tiered"]


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
        for tier in self.tiers:
            if tokens <= ctx.target:
                break
            result: CompactionResult = yield from tier.flow(current, ctx)
            current = result.messages
            tokens = result.tokens
            actions.extend(result.actions)
            if result.note:
                notes.append(f"{tier.name}: {result.note}")
        return CompactionResult(
            messages=current, actions=tuple(actions), tokens=tokens, note="; ".join(notes)
        )
