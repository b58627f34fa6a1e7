"""Session stores: where a session's records live (`SessionStore` protocol).

- `JSONLStore`: one JSON Lines file per session, the embedded default.
- `SQLiteStore`: many sessions in one SQLite database (stdlib, WAL mode).
- `PostgresStore`: many sessions in PostgreSQL, shared by many workers
  (``pip install 'agentcontext[postgres]'``).
- `RedisStore`: many sessions in Redis, shared by many workers
  (``pip install 'agentcontext[redis]'``).
- `MemoryStore`: in memory, for tests and ephemeral runs.

`open_store` picks one from a location (a path or a URL);
`open_database` gives the administration side of a database
(``agentcontext db init / list / delete / prune``). The PostgreSQL and Redis
modules, and their clients, are imported only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._base import (
    AsyncSessionStore,
    CorruptRecordWarning,
    FsyncPolicy,
    NotASessionError,
    SessionDatabase,
    SessionInfo,
    SessionNotFoundError,
    SessionStore,
    SessionWarning,
    StoredRecord,
    StorePathError,
    StorePermissionError,
    SupportsLease,
    UnknownRecordWarning,
)
from ._url import open_database, open_store
from .jsonl import JSONLStore
from .memory import MemoryStore
from .sqlite import SQLiteDatabase, SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresArtifactStore, PostgresDatabase, PostgresStore
    from .redis import RedisArtifactStore, RedisDatabase, RedisStore

__all__ = [
    "AsyncSessionStore",
    "CorruptRecordWarning",
    "FsyncPolicy",
    "JSONLStore",
    "MemoryStore",
    "NotASessionError",
    "PostgresArtifactStore",
    "PostgresDatabase",
    "PostgresStore",
    "RedisArtifactStore",
    "RedisDatabase",
    "RedisStore",
    "SQLiteDatabase",
    "SQLiteStore",
    "SessionDatabase",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStore",
    "SessionWarning",
    "StorePathError",
    "StorePermissionError",
    "StoredRecord",
    "SupportsLease",
    "UnknownRecordWarning",
    "open_database",
    "open_store",
]

_LAZY = {
    "PostgresArtifactStore": "postgres",
    "PostgresDatabase": "postgres",
    "PostgresStore": "postgres",
    "RedisArtifactStore": "redis",
    "RedisDatabase": "redis",
    "RedisStore": "redis",
}


def __getattr__(name: str) -> object:
    # The database clients load only when their store is asked for.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)


def _publish() -> None:
    """Give what the private modules define its public module (``agentcontext.session.stores.SessionInfo``)."""
    import types

    namespace = globals()
    for name in __all__:
        obj = namespace.get(name)  # the lazy PostgreSQL and Redis names are not loaded here
        if isinstance(obj, type | types.FunctionType) and obj.__module__.startswith(f"{__name__}._"):
            obj.__module__ = __name__


_publish()
