"""agentcontext: keep an LLM agent's conversation inside its model's context window.

>>> import agentcontext as ac
>>> engine = ac.ContextEngine(model="gpt-4o", window=32_000, reserve=4_000)
>>> prepared = engine.prepare([ac.Message(role="user", content="hello")])
>>> [m.text for m in prepared.messages], prepared.report.level.label
(['hello'], 'none')
"""

from . import models
from ._api import Engine, EngineState, Prepared, ToolDefinitions
from ._report import EngineStats, Report, Status
from ._thresholds import Thresholds
from .artifacts import (
    ArtifactRef,
    ArtifactStore,
    FileArtifactStore,
    MemoryArtifactStore,
)
from .compaction import (
    Action,
    Compaction,
    FallbackReason,
    Level,
    MessageKind,
    SummaryRequest,
)
from .engine import ContextEngine
from .exceptions import (
    AgentContextError,
    ConcurrencyError,
    ConfigError,
    ContextOverflowError,
    ConversionWarning,
    IdentityWarning,
    InvalidConversationError,
    InvalidMessageError,
    MissingDependencyError,
    NotASessionError,
    RecallError,
    SessionLockedError,
    StoreError,
    SummarizerBackoff,
    SummarizerError,
    SummarizerTimeout,
    TokenizerError,
    UnknownModelError,
    UsageError,
)
from .invariants import ConversationChecker, Violation, check_messages, ensure_valid
from .messages import (
    FilePart,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    rounds,
    safe_split_points,
)
from .models import ModelSpec, counter_for
from .session import (
    JSONLStore,
    MemoryStore,
    Session,
    SessionStore,
    SQLiteStore,
    recall_tool_anthropic,
    recall_tool_openai,
)
from .strategies import (
    CompactionResult,
    HardTruncate,
    MaskObservations,
    SlidingWindow,
    Summarize,
    Tiered,
    TokenBudget,
)
from .summarizers import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    OpenAISummarizer,
    PromptTemplate,
    RetryPolicy,
    Summarizer,
)
from .tokens import (
    CalibratedCounter,
    HuggingFaceCounter,
    ScriptEstimator,
    TiktokenCounter,
    TokenCounter,
    counter_for_tokenizer,
)
from .truncation import (
    ObservationTruncator,
    TruncationResult,
)

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AgentContextError",
    "AnthropicSummarizer",
    "ArtifactRef",
    "ArtifactStore",
    "CalibratedCounter",
    "Compaction",
    "CompactionResult",
    "ConcurrencyError",
    "ConfigError",
    "ContextEngine",
    "ContextOverflowError",
    "ConversationChecker",
    "ConversionWarning",
    "Engine",
    "EngineState",
    "EngineStats",
    "ExtractiveSummarizer",
    "FallbackReason",
    "FileArtifactStore",
    "FilePart",
    "HardTruncate",
    "HuggingFaceCounter",
    "IdentityWarning",
    "ImagePart",
    "InvalidConversationError",
    "InvalidMessageError",
    "JSONLStore",
    "Level",
    "MaskObservations",
    "MemoryArtifactStore",
    "MemoryStore",
    "Message",
    "MessageKind",
    "MissingDependencyError",
    "ModelSpec",
    "NotASessionError",
    "ObservationTruncator",
    "OpenAISummarizer",
    "Prepared",
    "PromptTemplate",
    "RecallError",
    "Report",
    "RetryPolicy",
    "SQLiteStore",
    "ScriptEstimator",
    "Session",
    "SessionLockedError",
    "SessionStore",
    "SlidingWindow",
    "Status",
    "StoreError",
    "Summarize",
    "Summarizer",
    "SummarizerBackoff",
    "SummarizerError",
    "SummarizerTimeout",
    "SummaryRequest",
    "TextPart",
    "Thresholds",
    "Tiered",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCounter",
    "TokenizerError",
    "ToolCall",
    "ToolDefinitions",
    "TruncationResult",
    "UnknownModelError",
    "UsageError",
    "Violation",
    "check_messages",
    "counter_for",
    "counter_for_tokenizer",
    "ensure_valid",
    "models",
    "recall_tool_anthropic",
    "recall_tool_openai",
    "rounds",
    "safe_split_points",
]


def _publish() -> None:
    """Give public classes and functions their public module (``agentcontext.Message``, not
    ``agentcontext.messages.Message``) in reprs, tracebacks and docs, as httpx does."""
    import types

    namespace = globals()
    for name in __all__:
        obj = namespace[name]
        if isinstance(obj, type | types.FunctionType):
            obj.__module__ = __name__


_publish()
