"""agentcontext: keep an LLM agent's conversation inside its model's context window.

>>> import agentcontext as ac
>>> engine = ac.ContextEngine(model="gpt-4o", window=32_000, reserve=4_000)
>>> prepared = engine.prepare([ac.Message(role="user", content="hello")])
>>> [m.text for m in prepared.messages], prepared.report.level.label
(['hello'], 'none')
"""

from . import models as models
from .artifacts import (
    ArtifactRef as ArtifactRef,
    ArtifactStore as ArtifactStore,
    FileArtifactStore as FileArtifactStore,
    MemoryArtifactStore as MemoryArtifactStore,
)
from .engine import (
    ContextEngine as ContextEngine,
    EngineStats as EngineStats,
    Level as Level,
    Prepared as Prepared,
    Report as Report,
    Status as Status,
    Thresholds as Thresholds,
)
from .exceptions import (
    AgentContextError as AgentContextError,
    ConcurrencyError as ConcurrencyError,
    ConfigError as ConfigError,
    ContextOverflowError as ContextOverflowError,
    InvalidConversationError as InvalidConversationError,
    InvalidMessageError as InvalidMessageError,
    RecallError as RecallError,
    SessionLockedError as SessionLockedError,
    StoreError as StoreError,
    SummarizerError as SummarizerError,
    TokenizerError as TokenizerError,
    UnknownModelError as UnknownModelError,
    UsageError as UsageError,
)
from .invariants import Violation as Violation, check_messages as check_messages
from .messages import (
    ImagePart as ImagePart,
    Message as Message,
    TextPart as TextPart,
    ToolCall as ToolCall,
    rounds as rounds,
    safe_split_points as safe_split_points,
)
from .models import ModelSpec as ModelSpec, counter_for as counter_for
from .strategies import (
    Action as Action,
    CompactionResult as CompactionResult,
    HardTruncate as HardTruncate,
    MaskObservations as MaskObservations,
    SlidingWindow as SlidingWindow,
    Tiered as Tiered,
    TokenBudget as TokenBudget,
)
from .tokens import TokenCounter as TokenCounter
from .truncation import (
    ObservationTruncator as ObservationTruncator,
    TruncationResult as TruncationResult,
)

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AgentContextError",
    "ArtifactRef",
    "ArtifactStore",
    "CompactionResult",
    "ConcurrencyError",
    "ConfigError",
    "ContextEngine",
    "ContextOverflowError",
    "EngineStats",
    "FileArtifactStore",
    "HardTruncate",
    "ImagePart",
    "InvalidConversationError",
    "InvalidMessageError",
    "Level",
    "MaskObservations",
    "MemoryArtifactStore",
    "Message",
    "ModelSpec",
    "ObservationTruncator",
    "Prepared",
    "RecallError",
    "Report",
    "SessionLockedError",
    "SlidingWindow",
    "Status",
    "StoreError",
    "SummarizerError",
    "TextPart",
    "Thresholds",
    "Tiered",
    "TokenBudget",
    "TokenCounter",
    "TokenizerError",
    "ToolCall",
    "TruncationResult",
    "UnknownModelError",
    "UsageError",
    "Violation",
    "check_messages",
    "counter_for",
    "models",
    "rounds",
    "safe_split_points",
]
