"""Compaction strategies: one small class each behind one protocol.

>>> from agentcontext.strategies import MaskObservations, TokenBudget, Tiered
>>> pipeline = Tiered(tiers=(MaskObservations(keep_recent=3), TokenBudget()))
"""

from ._base import (
    Action as Action,
    ActionKind as ActionKind,
    CompactionContext as CompactionContext,
    CompactionFlow as CompactionFlow,
    CompactionResult as CompactionResult,
    PureStrategy as PureStrategy,
    Strategy as Strategy,
    SummaryRequest as SummaryRequest,
)
from .hard_truncate import HardTruncate as HardTruncate
from .observation_masking import MaskObservations as MaskObservations
from .pipeline import Tiered as Tiered
from .sliding_window import SlidingWindow as SlidingWindow
from .token_budget import TokenBudget as TokenBudget

__all__ = [
    "Action",
    "ActionKind",
    "CompactionContext",
    "CompactionFlow",
    "CompactionResult",
    "HardTruncate",
    "MaskObservations",
    "PureStrategy",
    "SlidingWindow",
    "Strategy",
    "SummaryRequest",
    "Tiered",
    "TokenBudget",
]
