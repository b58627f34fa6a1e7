"""Persistent sessions: an append-only log of records, the view derived from it, and stores.

>>> from agentcontext.session import MemoryStore, Session
>>> from agentcontext import Message
>>> session = Session.from_store(MemoryStore())
>>> session.append(Message(role="user", content="hello"))
>>> cp = session.checkpoint()
>>> session.append(Message(role="assistant", content="hi"))
>>> session.revert_to(cp)
>>> [m.text for m in session.view]
['hello']
"""

from .._serde import SCHEMA_VERSION, UnknownRecord
from ._dmail import DMAIL_TOOL_DESCRIPTION, dmail_tool_anthropic, dmail_tool_openai
from ._recall import (
    RECALL_TOOL_DESCRIPTION,
    recall_tool_anthropic,
    recall_tool_openai,
)
from ._records import (
    CheckpointRecord,
    CompactionRecord,
    DMailRecord,
    HeaderRecord,
    MessageRecord,
    Record,
    RevertRecord,
    RewindRecord,
    UndoRecord,
    UsageRecord,
)
from ._session import Session
from ._types import DMAIL_TEMPLATE, Checkpoint, DMail, UsageTotals
from ._view import SessionView
from .stores import (
    AsyncSessionStore,
    CorruptRecordWarning,
    FsyncPolicy,
    JSONLStore,
    MemoryStore,
    NotASessionError,
    SessionDatabase,
    SessionInfo,
    SessionNotFoundError,
    SessionStore,
    SessionWarning,
    SQLiteStore,
    StoredRecord,
    StorePathError,
    StorePermissionError,
    SupportsLease,
    UnknownRecordWarning,
    open_database,
    open_store,
)

__all__ = [
    "DMAIL_TEMPLATE",
    "DMAIL_TOOL_DESCRIPTION",
    "RECALL_TOOL_DESCRIPTION",
    "SCHEMA_VERSION",
    "AsyncSessionStore",
    "Checkpoint",
    "CheckpointRecord",
    "CompactionRecord",
    "CorruptRecordWarning",
    "DMail",
    "DMailRecord",
    "FsyncPolicy",
    "HeaderRecord",
    "JSONLStore",
    "MemoryStore",
    "MessageRecord",
    "NotASessionError",
    "Record",
    "RevertRecord",
    "RewindRecord",
    "SQLiteStore",
    "Session",
    "SessionDatabase",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStore",
    "SessionView",
    "SessionWarning",
    "StorePathError",
    "StorePermissionError",
    "StoredRecord",
    "SupportsLease",
    "UndoRecord",
    "UnknownRecord",
    "UnknownRecordWarning",
    "UsageRecord",
    "UsageTotals",
    "dmail_tool_anthropic",
    "dmail_tool_openai",
    "open_database",
    "open_store",
    "recall_tool_anthropic",
    "recall_tool_openai",
]
