"""The PostgreSQL stores' machinery: tables and migrations, connection pools, sync/async drivers.

An operation is a generator that yields statements (`_Step`) and receives their
results; `_drive` and `_adrive` run it on a sync or an async connection, so
each operation is written once for both sides. Imported only when a
``postgresql://`` location is opened.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import threading
import weakref
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar
from urllib.parse import quote

from ...exceptions import (
    ConfigError,
    MissingDependencyError,
    StoreError,
    StoreNotInitializedError,
    StoreUnavailableError,
)
from ...messages import JSONValue

try:  # re-exported ("as"): postgres.py takes the client from here, after the check below
    import psycopg as psycopg
    from psycopg import sql as sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool as AsyncConnectionPool
    from psycopg_pool import ConnectionPool
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise MissingDependencyError(
        "the PostgreSQL session store needs psycopg 3 and its pool: pip install 'agentcontext[postgres]'"
    ) from _exc

_T = TypeVar("_T")

DB_VERSION = 1
"""The version of the tables this library reads and writes (`PostgresDatabase.init` migrates to it)."""

# Each entry migrates from the version before it; "{s}" is the schema, quoted.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {s}.agentcontext_sessions (
        session_id text PRIMARY KEY,
        last_seq bigint NOT NULL DEFAULT -1,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX agentcontext_sessions_updated ON {s}.agentcontext_sessions (updated_at);
    CREATE TABLE {s}.agentcontext_records (
        session_id text NOT NULL REFERENCES {s}.agentcontext_sessions ON DELETE CASCADE,
        seq bigint NOT NULL,
        type text NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE {s}.agentcontext_records_backup (
        session_id text NOT NULL REFERENCES {s}.agentcontext_sessions ON DELETE CASCADE,
        backup integer NOT NULL,
        seq bigint NOT NULL,
        type text NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session_id, backup, seq)
    );
    CREATE TABLE {s}.agentcontext_leases (
        session_id text PRIMARY KEY REFERENCES {s}.agentcontext_sessions ON DELETE CASCADE,
        owner text NOT NULL,
        expires_at timestamptz NOT NULL
    );
    CREATE TABLE {s}.agentcontext_artifacts (
        session_id text NOT NULL REFERENCES {s}.agentcontext_sessions ON DELETE CASCADE,
        digest text NOT NULL,
        media_type text NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (session_id, digest)
    );
    -- lz4 compresses long records several times faster than the default pglz (PostgreSQL 14+,
    -- when built with it); without it the default stays.
    DO $$
    BEGIN
        EXECUTE 'ALTER TABLE {s}.agentcontext_records ALTER COLUMN body SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE {s}.agentcontext_records_backup ALTER COLUMN body SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE {s}.agentcontext_artifacts ALTER COLUMN data SET COMPRESSION lz4';
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END
    $$;
    """,
)
assert len(_MIGRATIONS) == DB_VERSION

_CHUNK = 5_000  # records per INSERT (3 parameters each)
_PAGE = 2_000  # rows per page of a load: ~2 MB of typical records, 100k records in 50 round trips
_TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
_MISSING = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)

Fetch = Literal["none", "one", "all", "rowcount"]


@dataclass(frozen=True, slots=True)
class _Step:
    """One statement of an operation, run by the sync or the async driver."""

    query: sql.Composed | sql.SQL
    params: Sequence[object] | Mapping[str, object] | None = None
    fetch: Fetch = "none"


# An operation yields statements and receives their results; two small drivers run it.
_Op = Generator[_Step, object, _T]


def _redacted(conninfo: str) -> str:
    """``postgresql://user@host:port/db``, for messages: never the password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"not a valid PostgreSQL connection string: {exc}") from None
    user = params.get("user")
    host = params.get("host") or "localhost"
    port = params.get("port")
    db = params.get("dbname") or ""
    return (
        f"postgresql://{quote(str(user)) + '@' if user else ''}{host}{':' + str(port) if port else ''}"
        f"/{quote(str(db))}"
    )


_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(
            f"schema must be a PostgreSQL schema name of letters, digits and underscores (at most 63, "
            f"not starting with a digit), got {schema!r}"
        )
    return schema


class _Tables:
    """The qualified table names of one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        s = sql.Identifier(schema)
        self.s = s
        self.sessions = sql.SQL("{}.agentcontext_sessions").format(s)
        self.records = sql.SQL("{}.agentcontext_records").format(s)
        self.backup = sql.SQL("{}.agentcontext_records_backup").format(s)
        self.leases = sql.SQL("{}.agentcontext_leases").format(s)
        self.artifacts = sql.SQL("{}.agentcontext_artifacts").format(s)
        self.migrations = sql.SQL("{}.agentcontext_migrations").format(s)

    def q(self, text: str) -> sql.Composed:
        """``text`` with ``{sessions}``, ``{records}``... replaced by the qualified names."""
        return sql.SQL(text).format(
            sessions=self.sessions,
            records=self.records,
            backup=self.backup,
            leases=self.leases,
            artifacts=self.artifacts,
            migrations=self.migrations,
        )


# ----------------------------------------------------------------------------- pools


class _SyncPools:
    """Connection pools shared by the stores of this process, one per server and settings.

    A pool outlives the stores that used it (closed at exit, or by `close_pools`):
    a worker that opens and closes a session per request reuses its connections
    instead of connecting again each time. A forked child starts with none (`_forget_in_child`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, int, float, bool], ConnectionPool] = {}

    def forget(self) -> list[ConnectionPool]:
        """Start over with no pools and a fresh lock (in a forked child); returns the pools dropped."""
        self._lock = threading.Lock()
        pools, self._pools = list(self._pools.values()), {}
        return pools

    def get(self, conninfo: str, size: int, timeout: float, *, durable: bool) -> ConnectionPool:
        key = (conninfo, size, timeout, durable)
        with self._lock:
            pool = self._pools.get(key)
            if pool is None or pool.closed:
                kwargs: dict[str, object] = {"autocommit": True}
                if not durable:
                    kwargs["options"] = "-c synchronous_commit=off"
                pool = ConnectionPool(
                    conninfo,
                    min_size=1,
                    max_size=size,
                    kwargs=kwargs,
                    timeout=timeout,
                    open=True,
                    name="agentcontext",
                )
                self._pools[key] = pool
            return pool

    def discard(self, conninfo: str, size: int, timeout: float, *, durable: bool) -> None:
        """Close and forget a pool (one that never reached its server: no point reconnecting in the background)."""
        with self._lock:
            pool = self._pools.pop((conninfo, size, timeout, durable), None)
        if pool is not None:
            pool.close(timeout=0)

    def close_all(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class _AsyncPools:
    """Async pools shared per event loop (a pool belongs to the loop that opened it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop,
            dict[tuple[str, int, float, bool], tuple[AsyncConnectionPool, asyncio.Future[None], int]],
        ] = weakref.WeakKeyDictionary()

    def forget(self) -> list[AsyncConnectionPool]:
        """Start over with no pools and a fresh lock (in a forked child); returns the pools dropped."""
        self._lock = threading.Lock()
        pools = [pool for entries in self._loops.values() for pool, _, _ in entries.values()]
        self._loops = weakref.WeakKeyDictionary()
        return pools

    async def acquire(
        self, conninfo: str, size: int, timeout: float, *, durable: bool
    ) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        key = (conninfo, size, timeout, durable)
        with self._lock:
            pools = self._loops.setdefault(loop, {})
            entry = pools.get(key)
            if entry is None:
                kwargs: dict[str, object] = {"autocommit": True}
                if not durable:
                    kwargs["options"] = "-c synchronous_commit=off"
                pool = AsyncConnectionPool(
                    conninfo,
                    min_size=1,
                    max_size=size,
                    kwargs=kwargs,
                    timeout=timeout,
                    open=False,
                    name="agentcontext",
                )
                opening: asyncio.Future[None] = asyncio.ensure_future(pool.open())
                entry = (pool, opening, 0)
            pool, ready, refs = entry
            pools[key] = (pool, ready, refs + 1)
        await asyncio.shield(ready)
        return pool

    async def release(self, pool: AsyncConnectionPool) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            pools = self._loops.get(loop, {})
            for key, (p, ready, refs) in list(pools.items()):
                if p is pool:
                    if refs > 1:
                        pools[key] = (p, ready, refs - 1)
                        return
                    del pools[key]
                    break
            else:
                return
        await pool.close()


# What a forked child inherited, kept referenced: the parent's pools are never closed, nor finalized, there.
_INHERITED: list[object] = []


def _forget_in_child() -> None:
    """After a fork, in the child: drop the parent's pools; the child opens its own when it needs them.

    A socket inherited across ``fork()`` is the parent's too: two processes
    talking on one connection read each other's results, or wait forever (a
    preloaded gunicorn app, a ``multiprocessing`` worker). Nor may the child
    close them, which would end the parent's sessions on the server; psycopg
    already leaves a connection made by another process alone when it is
    garbage-collected.
    """
    _INHERITED.extend(_POOLS.forget())
    _INHERITED.extend(_APOOLS.forget())


_POOLS = _SyncPools()
_APOOLS = _AsyncPools()
atexit.register(_POOLS.close_all)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)


def close_pools() -> None:
    """Close the connection pools the PostgreSQL stores of this process opened (they reopen when needed)."""
    _POOLS.close_all()


def _fetch(cursor: psycopg.Cursor[tuple[object, ...]], fetch: Fetch) -> object:
    if fetch == "one":
        return cursor.fetchone()
    if fetch == "all":
        return cursor.fetchall()
    if fetch == "rowcount":
        return cursor.rowcount
    return None


async def _afetch(cursor: psycopg.AsyncCursor[tuple[object, ...]], fetch: Fetch) -> object:
    if fetch == "one":
        return await cursor.fetchone()
    if fetch == "all":
        return await cursor.fetchall()
    if fetch == "rowcount":
        return cursor.rowcount
    return None


def _drive(conn: psycopg.Connection[tuple[object, ...]], op: _Op[_T]) -> _T:
    """Run an operation's statements on ``conn``; a database error is thrown into the operation.

    Transient errors (a broken connection) are not: they leave the operation
    for the caller's retry, which starts a fresh one.
    """
    result: object = None
    error: psycopg.Error | None = None
    try:
        while True:
            step = op.send(result) if error is None else op.throw(error)
            error = None
            try:
                result = _fetch(conn.execute(step.query, step.params), step.fetch)
            except _TRANSIENT:
                raise
            except psycopg.Error as exc:
                error = exc
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _adrive(conn: psycopg.AsyncConnection[tuple[object, ...]], op: _Op[_T]) -> _T:
    """`_drive` for async connections."""
    result: object = None
    error: psycopg.Error | None = None
    try:
        while True:
            step = op.send(result) if error is None else op.throw(error)
            error = None
            try:
                result = await _afetch(await conn.execute(step.query, step.params), step.fetch)
            except _TRANSIENT:
                raise
            except psycopg.Error as exc:
                error = exc
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- operations


def _version_op(t: _Tables, location: str) -> _Op[int]:
    """The tables' version; raises `StoreNotInitializedError` when there are none.

    ``location`` is the database's URL without password (and with ``?schema=``), for the command to run.
    """
    try:
        row = yield _Step(t.q("SELECT max(version) FROM {migrations}"), fetch="one")
    except _MISSING:
        row = None
    version = row[0] if isinstance(row, tuple) else None
    if not isinstance(version, int):
        raise StoreNotInitializedError(
            f"{location} has no agentcontext tables (schema {t.schema!r}); create them once with "
            f"`agentcontext db init '{location}'` (add the password if the server needs one)"
        )
    if version < DB_VERSION:
        raise StoreNotInitializedError(
            f"{location} has agentcontext tables of version {version}, this library needs {DB_VERSION}; "
            f"migrate them with `agentcontext db init '{location}'`"
        )
    if version > DB_VERSION:
        raise StoreError(
            f"{location} has agentcontext tables of version {version}, newer than this library's {DB_VERSION}; "
            "upgrade agentcontext"
        )
    return version


def _unreachable(conninfo: str, server: str, exc: StoreUnavailableError) -> StoreUnavailableError:
    """The error for a server that cannot be reached at open, with libpq's own reason when there is one."""
    try:
        psycopg.connect(conninfo, connect_timeout=2).close()
    except psycopg.Error as direct:
        reason = str(direct).strip().splitlines()[0] if str(direct).strip() else type(direct).__name__
        return StoreUnavailableError(
            f"cannot connect to {server}: {reason}. Is PostgreSQL running there (pg_isready -h HOST -p PORT)?"
        )
    return exc


def _values(n: int) -> str:
    """``(%s, %s, %s), ...`` for ``n`` rows of (seq, type, body).

    Rows as parameters, not arrays: ``unnest`` of a text array is several times
    slower for large bodies (a 20 MB record took seconds).
    """
    return ", ".join(["(%s::bigint, %s::text, %s::text)"] * n)


def _insert_steps(t: _Tables, session_id: str, rows: list[tuple[int, str, str]]) -> Iterator[_Step]:
    """INSERTs of ``rows`` in chunks of `_CHUNK` (PostgreSQL takes at most 65,535 parameters a statement)."""
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i : i + _CHUNK]
        yield _Step(
            t.q(
                "INSERT INTO {records} (session_id, seq, type, body) SELECT %s, v.seq, v.type, v.body FROM (VALUES "
                + _values(len(chunk))
                + ") AS v(seq, type, body)"
            ),
            (session_id, *(x for row in chunk for x in row)),
        )


def _int_seq(record: Mapping[str, JSONValue]) -> int:
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise StoreError(f"a record to store needs an integer seq, got {seq!r}")
    return seq


def _check_positive(name: str, value: object, *, integer: bool = False, zero: bool = False) -> None:
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0 or (value == 0 and not zero):
        what = "int" if integer else "number"
        raise ConfigError(f"{name} must be a {'non-negative' if zero else 'positive'} {what}, got {value!r}")


def _library() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"agentcontext {version('agentcontext')}"
    except PackageNotFoundError:
        return "agentcontext"
