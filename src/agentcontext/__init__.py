"""agentcontext: keep an LLM agent's conversation inside its model's context window.

>>> import agentcontext as ac
>>> engine = ac.ContextEngine(model="gpt-4o", window=32_000, reserve=4_000)
>>> prepared = engine.prepare([ac.Message(role="user", content="hello")])
>>> [m.text for m in prepared.messages], prepared.report.level.label
(['hello'], 'none')
"""

from . import models
from .artifacts import (
    ArtifactRef,
    ArtifactStore,
    FileArtifactStore,
    MemoryArtifactStore,
)
from .engine import (
    ContextEngine,
    EngineStats,
    Level,
    Prepared,
    Report,
    Status,
    Thresholds,
)
from .exceptions import (
    AgentContextError,
    ConcurrencyError,
    ConfigError,
    ContextOverflowError,
    InvalidConversationError,
    InvalidMessageError,
    MissingDependencyError,
    RecallError,
    SessionLockedError,
    StoreError,
    SummarizerError,
    TokenizerError,
    UnknownModelError,
    UsageError,
)
from .invariants import ConversationChecker, Violation, check_messages, ensure_valid
from .messages import (
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
    Action,
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
    SummaryRequest,
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
    "CompactionResult",
    "ConcurrencyError",
    "ConfigError",
    "ContextEngine",
    "ContextOverflowError",
    "ConversationChecker",
    "EngineStats",
    "ExtractiveSummarizer",
    "FileArtifactStore",
    "HardTruncate",
    "HuggingFaceCounter",
    "ImagePart",
    "InvalidConversationError",
    "InvalidMessageError",
    "JSONLStore",
    "Level",
    "MaskObservations",
    "MemoryArtifactStore",
    "MemoryStore",
    "Message",
    "MissingDependencyError",
    "ModelSpec",
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
    "SummarizerError",
    "SummaryRequest",
    "TextPart",
    "Thresholds",
    "Tiered",
    "TiktokenCounter",
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
    "counter_for_tokenizer",
    "ensure_valid",
    "models",
    "recall_tool_anthropic",
    "recall_tool_openai",
    "rounds",
    "safe_split_points",
]
