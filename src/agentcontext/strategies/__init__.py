"""Compaction strategies: one small class each behind one protocol.

>>> from agentcontext.strategies import MaskObservations, TokenBudget, Tiered
>>> pipeline = Tiered(tiers=(MaskObservations(keep_recent=3), TokenBudget()))
"""

from ..compaction import Action as Action
from ..compaction import ActionKind as ActionKind
from ..compaction import SummaryRequest as SummaryRequest
from ._base import (
    CompactionContext as CompactionContext,
)
from ._base import (
    CompactionFlow as CompactionFlow,
)
from ._base import (
    CompactionResult as CompactionResult,
)
from ._base import (
    PureStrategy as PureStrategy,
)
from ._base import (
    Strategy as Strategy,
)
from .hard_truncate import HardTruncate as HardTruncate
from .observation_masking import MaskObservations as MaskObservations
from .observation_masking import ShortenArguments as ShortenArguments
from .pipeline import Tiered as Tiered
from .sliding_window import SlidingWindow as SlidingWindow
from .summarize import Summarize as Summarize
from .token_budget import TokenBudget as TokenBudget

__all__ = [
    "Action",
    "ActionKind",
    "CompactionContext",
    "CompactionFlow",
    "CompactionResult",
    "HardTruncate",
    "MaskObservations",
    "ShortenArguments",
    "PureStrategy",
    "SlidingWindow",
    "Strategy",
    "Summarize",
    "SummaryRequest",
    "Tiered",
    "TokenBudget",
]
