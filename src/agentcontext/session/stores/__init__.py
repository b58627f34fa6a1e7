"""Session stores: where a session's records live (`SessionStore` protocol).

- `JSONLStore`: one JSON Lines file per session, the embedded default.
- `SQLiteStore`: many sessions in one SQLite database (stdlib, WAL mode).
- `MemoryStore`: in memory, for tests and ephemeral runs.
"""

from ._base import (
    CorruptRecordWarning,
    FsyncPolicy,
    SessionNotFoundError,
    SessionStore,
    SessionWarning,
    StoredRecord,
    StorePathError,
    StorePermissionError,
    UnknownRecordWarning,
)
from .jsonl import JSONLStore
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "CorruptRecordWarning",
    "FsyncPolicy",
    "JSONLStore",
    "MemoryStore",
    "SQLiteStore",
    "SessionNotFoundError",
    "SessionStore",
    "SessionWarning",
    "StorePathError",
    "StorePermissionError",
    "StoredRecord",
    "UnknownRecordWarning",
]
