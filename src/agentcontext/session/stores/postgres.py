"""`PostgresStore`: sessions in PostgreSQL (psycopg 3 and its connection pool), sync and async.

Many sessions share one database, one row per record, in tables that
``agentcontext db init URL`` creates (`PostgresDatabase.init`: explicit and
versioned; opening a database without them is a `StoreNotInitializedError`
naming that command, never a silent ``CREATE``)::

    agentcontext_sessions (session_id PK, last_seq, created_at, updated_at)
    agentcontext_records  (session_id, seq, type, body,  PRIMARY KEY (session_id, seq))
    agentcontext_leases   (session_id PK, owner, expires_at)
    agentcontext_artifacts, agentcontext_records_backup, agentcontext_migrations

``body`` is the record's JSON text, exactly the line the JSONL store would
write (``text`` holds up to 1 GB; a 20 MB tool output is an ordinary row).

- **Optimistic concurrency in one statement.** An append updates the
  session's ``last_seq`` from ``expected_seq - 1`` and inserts the batch in
  the same statement (one transaction, one round trip; a batch of more than
  5,000 records takes one transaction of several statements). Of two writers
  on the same stale state, the second waits for the first's row lock, then
  finds ``last_seq`` moved and writes nothing: `ConcurrencyError`. The primary
  key ``(session_id, seq)`` backs this up.
- **Catching up is an index range.** ``load(after=N)`` reads ``seq > N`` in
  pages of the primary key, so a writer that lost a race reads only what it
  missed; a long restore fetches the next page while it parses the current one.
- **Broken connections are retried** with jittered exponential backoff for
  ``retry_timeout`` seconds (a server restart, a dropped socket), then
  `StoreUnavailableError`. An append cut off mid-flight may have committed:
  the retry recognizes its own batch and does not write it twice.
- **Leases** (`SupportsLease`) are rows with an expiry taken by the server's
  clock, so workers on different machines agree on when one has lapsed.
- **Artifacts** (full tool outputs cut at ingest) go to ``agentcontext_artifacts``,
  so every worker can recall them.

Connection pools are shared by the stores of one process that use the same
connection string and settings, and stay open for the next store after the
last one closes (until exit, or `close_pools`); async pools are shared per
event loop and closed with their last store. A forked child never uses its
parent's pools: it opens its own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TypeVar, cast
from urllib.parse import quote

from ..._serde import RecordDecodeError, dumps, loads
from ...artifacts import ArtifactRef, ArtifactStore, _check_media_type, _encode, _lenient_ref, parse_ref
from ...exceptions import (
    ConcurrencyError,
    ConfigError,
    RecallError,
    SessionNotFoundError,
    StoreError,
    StoreNotInitializedError,
    StoreUnavailableError,
)
from ...messages import JSONValue
from ._base import (
    CorruptRecordWarning,
    FsyncPolicy,
    SessionInfo,
    StoredRecord,
    WarningLimiter,
    aread_ahead,
    aretry,
    aretry_append,
    check_expected_seq,
    check_fsync,
    check_lease,
    check_session_id,
    check_tail,
    read_ahead,
    retry,
    retry_append,
)
from ._postgres import (
    _APOOLS,
    _CHUNK,
    _MIGRATIONS,
    _MISSING,
    _PAGE,
    _POOLS,
    _TRANSIENT,
    DB_VERSION,
    AsyncConnectionPool,
    _adrive,
    _check_positive,
    _check_schema,
    _drive,
    _insert_steps,
    _int_seq,
    _library,
    _Op,
    _redacted,
    _Step,
    _Tables,
    _unreachable,
    _values,
    _version_op,
    close_pools,
    psycopg,
    sql,
)

__all__ = ["DB_VERSION", "PostgresArtifactStore", "PostgresDatabase", "PostgresStore", "close_pools"]

_T = TypeVar("_T")


_Page = tuple[int, list[tuple[int, str]]]
"""The session's last seq as its row says, and a page of its records' ``(seq, body)``."""


class _Seen:
    """What a load saw of the log: where it started, the last seq the session's row named when the load
    began and on its latest page (-1: the row is gone), and the last seq read."""

    def __init__(self, after: int) -> None:
        self.after = self.read = after
        self.last: int | None = None
        self.latest = -1


def _next_page(_after: int, page: _Page) -> int | None:
    """Where the page after this one starts; None when it was the last (a short page)."""
    rows = page[1]
    return rows[-1][0] if len(rows) == _PAGE else None


class PostgresStore:
    """One session in a PostgreSQL database (see the module docstring).

    Args:
        conninfo: a libpq connection string or URL
            (``"postgresql://user@host:5432/db"``); `open_store` takes the
            ``?session=ID`` form.
        session_id: which session of the database this store reads and writes.
        schema: the PostgreSQL schema holding the tables; default ``"public"``.
        fsync: ``"always"`` (the default) acknowledges an append once the
            server has flushed it to its write-ahead log; ``"never"`` and
            ``"interval"`` turn ``synchronous_commit`` off for this store's
            connections: appends return before the flush (several times
            faster), and a crash of the *server* can lose the last fraction of
            a second of them (never tear or reorder them).
        read_only: never write (inspection).
        pool_size: most connections this process opens to the database (shared
            by every store on the same ``conninfo``); default 4.
        connect_timeout: seconds to wait for a pooled connection; default 5.
        retry_timeout: seconds to keep retrying an operation through broken
            connections (a server restart) before `StoreUnavailableError`;
            default 30, 0 to fail at once.

    The constructor does no I/O; `open` (or `aopen`) does.
    """

    shared = True
    """Several processes may write one session here: a `Session` catches up with the others' records
    before each step and holds the session's lease while it prepares."""

    def __init__(
        self,
        conninfo: str,
        *,
        session_id: str,
        schema: str = "public",
        fsync: FsyncPolicy = "always",
        read_only: bool = False,
        pool_size: int = 4,
        connect_timeout: float = 5.0,
        retry_timeout: float = 30.0,
    ) -> None:
        if not isinstance(conninfo, str):
            raise ConfigError(f"conninfo must be a str, got {type(conninfo).__name__}")
        self.session_id = check_session_id(session_id)
        self._tables = _Tables(_check_schema(schema))
        check_fsync(fsync, 1.0)
        self.fsync: FsyncPolicy = fsync
        _check_positive("pool_size", pool_size, integer=True)
        _check_positive("connect_timeout", connect_timeout)
        _check_positive("retry_timeout", retry_timeout, zero=True)
        self.conninfo = conninfo
        self.pool_size = pool_size
        self.connect_timeout = float(connect_timeout)
        self.retry_timeout = float(retry_timeout)
        self._read_only = read_only
        self._server = _redacted(conninfo)
        self._open = False
        self._apool: AsyncConnectionPool | None = None
        self._apool_pid = 0  # the process that acquired it: a forked child acquires its own
        # How long one attempt waits for a pooled connection: the retry loop covers the rest.
        self._wait = min(self.connect_timeout, max(self.retry_timeout, 1.0))

    # ------------------------------------------------------------------ protocol

    @property
    def location(self) -> str:
        """``postgresql://user@host:port/db#session`` (with ``?schema=`` when not public); no password."""
        schema = "" if self._tables.schema == "public" else f"?schema={quote(self._tables.schema)}"
        return f"{self._server}{schema}#{self.session_id}"

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._tables.schema

    @property
    def read_only(self) -> bool:
        """True when opened read-only."""
        return self._read_only

    def open(self, *, create: bool = True) -> None:
        """Connect, check the tables' version, create the session row when allowed (see `SessionStore.open`).

        Raises:
            StoreNotInitializedError: the database has no agentcontext tables (run ``agentcontext db init``).
            SessionNotFoundError: no such session, and ``create`` is False or the store is read-only.
            StoreUnavailableError: the server cannot be reached.
        """
        if self._open:
            return
        self._open = True
        try:
            self._call(lambda: self._open_op(create=create))
        except StoreUnavailableError as exc:
            self.close()
            _POOLS.discard(
                self.conninfo, self.pool_size, self.connect_timeout, durable=self.fsync == "always"
            )
            raise self._unreachable(exc) from exc.__cause__
        except BaseException:
            self.close()
            raise

    def load(self, after: int = -1) -> Iterator[StoredRecord]:
        """The session's records with a seq above ``after``, in pages of the primary key (see `SessionStore.load`).

        Each page is one indexed range query, retried on its own through a
        broken connection, so a restart in the middle of a restore resumes
        where it stopped. Bodies that are not JSON objects are skipped with a warning.
        """
        limiter = WarningLimiter(CorruptRecordWarning)
        try:
            seen = _Seen(after)
            for page in read_ahead(lambda start: self._call(lambda: self._page_op(start)), after, _next_page):
                yield from self._records(page, seen, limiter)
            self._check_end(seen, limiter)
        finally:
            limiter.finish(self.location)

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Write ``records`` in one statement if the log still ends at ``expected_seq - 1`` (see the module docstring).

        Raises:
            ConcurrencyError: another writer appended first; nothing was written.
            SessionNotFoundError: the session was deleted while this store had it open.
            StoreUnavailableError: the server stayed unreachable for ``retry_timeout`` seconds.
        """
        self._writable()
        check_expected_seq(self.location, expected_seq, expected_seq - 1, records)  # the batch's own seqs
        bodies = [dumps(r) for r in records]
        types = [str(r.get("type")) for r in records]
        retry_append(
            lambda: self._run(self._append_op(bodies, types, expected_seq), transaction=len(bodies) > _CHUNK),
            lambda: self._call(lambda: self._written_op(bodies, expected_seq)),
            transient=_TRANSIENT,
            location=self.location,
            timeout=self.retry_timeout,
        )

    def replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        """Move the session's rows to ``agentcontext_records_backup`` and insert ``records``, in one transaction."""
        self._writable()
        bodies = [dumps(r) for r in records]
        types = [str(r.get("type")) for r in records]
        seqs = [_int_seq(r) for r in records]
        backup = self._call(lambda: self._replace_op(bodies, types, seqs), transaction=True)
        return f"{self.location} (table agentcontext_records_backup, backup {backup})"

    def acquire_lease(self, owner: str, ttl: float) -> bool:
        """Take or renew the session's lease, expiring ``ttl`` seconds from now by the server's clock."""
        check_lease(owner, ttl)
        self._writable()
        return self._call(lambda: self._lease_op(owner, ttl))

    def release_lease(self, owner: str) -> bool:
        """Give the lease up (see `SupportsLease`)."""
        self._writable()
        return self._call(lambda: self._release_op(owner))

    def default_artifacts(self) -> ArtifactStore:
        """A `PostgresArtifactStore` for this session: every worker can recall its full outputs."""
        return PostgresArtifactStore(
            self.conninfo,
            session_id=self.session_id,
            schema=self._tables.schema,
            pool_size=self.pool_size,
            connect_timeout=self.connect_timeout,
            retry_timeout=self.retry_timeout,
        )

    def close(self) -> None:
        """Let go of the connection pool (it stays open for the next store; see `close_pools`); idempotent."""
        self._open = False

    # ------------------------------------------------------------------ async

    async def aopen(self, *, create: bool = True) -> None:
        """`open` for event loops (an async pool shared per loop)."""
        if self._apool is not None:
            return
        self._apool = await _APOOLS.acquire(
            self.conninfo, self.pool_size, self.connect_timeout, durable=self.fsync == "always"
        )
        self._apool_pid = os.getpid()
        try:
            await self._acall(lambda: self._open_op(create=create))
        except StoreUnavailableError as exc:
            await self.aclose()
            raise self._unreachable(exc) from exc.__cause__
        except BaseException:
            await self.aclose()
            raise

    async def aload(self, after: int = -1) -> AsyncIterator[StoredRecord]:
        """`load` as an async iterator."""
        limiter = WarningLimiter(CorruptRecordWarning)
        try:
            seen = _Seen(after)
            pages = aread_ahead(lambda start: self._acall(lambda: self._page_op(start)), after, _next_page)
            async for page in pages:
                for record in self._records(page, seen, limiter):
                    yield record
            self._check_end(seen, limiter)
        finally:
            limiter.finish(self.location)

    async def aappend(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """`append`, awaited."""
        self._writable()
        check_expected_seq(self.location, expected_seq, expected_seq - 1, records)
        bodies = [dumps(r) for r in records]
        types = [str(r.get("type")) for r in records]
        await aretry_append(
            lambda: self._arun(
                self._append_op(bodies, types, expected_seq), transaction=len(bodies) > _CHUNK
            ),
            lambda: self._acall(lambda: self._written_op(bodies, expected_seq)),
            transient=_TRANSIENT,
            location=self.location,
            timeout=self.retry_timeout,
        )

    async def aacquire_lease(self, owner: str, ttl: float) -> bool:
        """`acquire_lease`, awaited."""
        check_lease(owner, ttl)
        self._writable()
        return await self._acall(lambda: self._lease_op(owner, ttl))

    async def arelease_lease(self, owner: str) -> bool:
        """`release_lease`, awaited."""
        self._writable()
        return await self._acall(lambda: self._release_op(owner))

    async def aclose(self) -> None:
        """`close` for the async side; also closes the sync side if it was opened."""
        pool, self._apool = self._apool, None
        if pool is not None:
            await _APOOLS.release(pool)
        self.close()

    def __repr__(self) -> str:
        mode = ", read-only" if self._read_only else ""
        return f"PostgresStore({self.location!r}{mode})"

    # ------------------------------------------------------------------ operations

    def _open_op(self, *, create: bool) -> _Op[None]:
        t = self._tables
        yield from _version_op(t, self.location.rsplit("#", 1)[0])
        if create and not self._read_only:
            yield _Step(
                t.q("INSERT INTO {sessions} (session_id) VALUES (%s) ON CONFLICT DO NOTHING"),
                (self.session_id,),
            )
            return
        row = yield _Step(t.q("SELECT 1 FROM {sessions} WHERE session_id = %s"), (self.session_id,), "one")
        if row is None:
            raise SessionNotFoundError(
                f"no session {self.session_id!r} in {self._server} (schema {t.schema!r})"
            )

    def _page_op(self, after: int) -> _Op[_Page]:
        """A page of records after ``after``, with the last seq the session's row names, in one query.

        No row (the session was deleted: its records go with it) reads as an empty log.
        """
        rows = yield _Step(
            self._tables.q(
                "SELECT s.last_seq, r.seq, r.body FROM {sessions} s LEFT JOIN LATERAL "
                "(SELECT seq, body FROM {records} WHERE session_id = s.session_id AND seq > %s "
                "ORDER BY seq LIMIT %s) r ON true WHERE s.session_id = %s"
            ),
            (after, _PAGE, self.session_id),
            "all",
        )
        found = cast("list[tuple[int, int | None, str | None]]", rows)
        last = int(found[0][0]) if found else -1
        return last, [(seq, body) for _, seq, body in found if seq is not None and body is not None]

    def _append_op(self, bodies: list[str], types: list[str], expected: int) -> _Op[None]:
        """One statement for a batch of up to `_CHUNK` records; a transaction (see `append`) beyond."""
        t = self._tables
        n = len(bodies)
        rows = [(expected + i, types[i], bodies[i]) for i in range(n)]
        if 0 < n <= _CHUNK:
            written = yield _Step(
                t.q(
                    "WITH s AS (UPDATE {sessions} SET last_seq = %s, updated_at = now() "
                    "WHERE session_id = %s AND last_seq = %s RETURNING session_id) "
                    "INSERT INTO {records} (session_id, seq, type, body) "
                    "SELECT s.session_id, v.seq, v.type, v.body FROM s, (VALUES "
                    + _values(n)
                    + ") AS v(seq, type, body)"
                ),
                (expected + n - 1, self.session_id, expected - 1, *(x for row in rows for x in row)),
                "rowcount",
            )
            if written == n:
                return
        elif n:
            updated = yield _Step(
                t.q(
                    "UPDATE {sessions} SET last_seq = %s, updated_at = now() "
                    "WHERE session_id = %s AND last_seq = %s"
                ),
                (expected + n - 1, self.session_id, expected - 1),
                "rowcount",
            )
            if updated == 1:
                yield from _insert_steps(t, self.session_id, rows)
                return
        row = yield _Step(
            t.q("SELECT last_seq FROM {sessions} WHERE session_id = %s"), (self.session_id,), "one"
        )
        if not isinstance(row, tuple):
            raise SessionNotFoundError(
                f"{self.location}: the session was deleted while this store had it open; nothing was written"
            )
        check_expected_seq(self.location, expected, int(row[0]), [])
        if n:  # pragma: no cover - last_seq moved and moved back: only a concurrent replace can do that
            raise ConcurrencyError(f"{self.location}: seq {expected} was taken by another writer")

    def _written_op(self, bodies: list[str], expected: int) -> _Op[bool]:
        rows = yield _Step(
            self._tables.q(
                "SELECT body FROM {records} WHERE session_id = %s AND seq >= %s AND seq < %s ORDER BY seq"
            ),
            (self.session_id, expected, expected + len(bodies)),
            "all",
        )
        return [r[0] for r in rows] == bodies  # type: ignore[attr-defined]

    def _replace_op(self, bodies: list[str], types: list[str], seqs: list[int]) -> _Op[int]:
        t = self._tables
        sid = self.session_id
        row = yield _Step(t.q("SELECT 1 FROM {sessions} WHERE session_id = %s FOR UPDATE"), (sid,), "one")
        if row is None:
            raise SessionNotFoundError(
                f"{self.location}: the session was deleted while this store had it open"
            )
        row = yield _Step(
            t.q("SELECT coalesce(max(backup), 0) + 1 FROM {backup} WHERE session_id = %s"), (sid,), "one"
        )
        backup = int(row[0])  # type: ignore[index]
        yield _Step(
            t.q(
                "INSERT INTO {backup} (session_id, backup, seq, type, body) "
                "SELECT session_id, %s, seq, type, body FROM {records} WHERE session_id = %s"
            ),
            (backup, sid),
        )
        yield _Step(t.q("DELETE FROM {records} WHERE session_id = %s"), (sid,))
        yield from _insert_steps(t, sid, list(zip(seqs, types, bodies, strict=True)))
        yield _Step(
            t.q("UPDATE {sessions} SET last_seq = %s, updated_at = now() WHERE session_id = %s"),
            (max(seqs, default=-1), sid),
        )
        return backup

    def _lease_op(self, owner: str, ttl: float) -> _Op[bool]:
        try:
            row = yield _Step(
                self._tables.q(
                    "INSERT INTO {leases} AS l (session_id, owner, expires_at) "
                    "VALUES (%s, %s, clock_timestamp() + %s * interval '1 second') "
                    "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
                    "WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp() RETURNING 1"
                ),
                (self.session_id, owner, float(ttl)),
                "one",
            )
        except psycopg.errors.ForeignKeyViolation:
            raise SessionNotFoundError(f"{self.location}: the session was deleted") from None
        return row is not None

    def _release_op(self, owner: str) -> _Op[bool]:
        n = yield _Step(
            self._tables.q(
                "DELETE FROM {leases} WHERE session_id = %s AND owner = %s AND expires_at > clock_timestamp()"
            ),
            (self.session_id, owner),
            "rowcount",
        )
        return n == 1

    # ------------------------------------------------------------------ drivers

    def _run(self, op: _Op[_T], *, transaction: bool = False) -> _T:
        """Run ``op`` once on a pooled connection; errors are mapped, transient ones re-raised as is."""
        if not self._open:
            raise StoreError(f"{self.location} is not open; call open() first (or the session was closed)")
        pool = _POOLS.get(self.conninfo, self.pool_size, self.connect_timeout, durable=self.fsync == "always")
        try:
            with pool.connection(timeout=self._wait) as conn:
                if transaction:
                    with conn.transaction():
                        return _drive(conn, op)
                return _drive(conn, op)
        except _TRANSIENT:
            raise
        except _MISSING as exc:
            raise StoreNotInitializedError(
                f"{self._server}: {exc}; run `agentcontext db init URL` to create the tables"
            ) from exc
        except psycopg.errors.UniqueViolation as exc:
            raise ConcurrencyError(f"{self.location}: another writer took the same seq ({exc})") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {type(exc).__name__}: {exc}") from exc

    def _call(self, make: Callable[[], _Op[_T]], *, transaction: bool = False) -> _T:
        """Run a fresh ``make()`` operation, retrying through broken connections."""
        return retry(
            lambda: self._run(make(), transaction=transaction),
            transient=_TRANSIENT,
            location=self._server,
            timeout=self.retry_timeout,
        )

    async def _arun(self, op: _Op[_T], *, transaction: bool = False) -> _T:
        pool = self._apool
        if pool is None:
            raise StoreError(f"{self.location} is not open; call aopen() first (or the session was closed)")
        if self._apool_pid != os.getpid():  # opened before a fork: the parent's pool is not ours to use
            pool = self._apool = await _APOOLS.acquire(
                self.conninfo, self.pool_size, self.connect_timeout, durable=self.fsync == "always"
            )
            self._apool_pid = os.getpid()
        try:
            async with pool.connection(timeout=self._wait) as conn:
                if transaction:
                    async with conn.transaction():
                        return await _adrive(conn, op)
                return await _adrive(conn, op)
        except _TRANSIENT:
            raise
        except _MISSING as exc:
            raise StoreNotInitializedError(
                f"{self._server}: {exc}; run `agentcontext db init URL` to create the tables"
            ) from exc
        except psycopg.errors.UniqueViolation as exc:
            raise ConcurrencyError(f"{self.location}: another writer took the same seq ({exc})") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {type(exc).__name__}: {exc}") from exc

    async def _acall(self, make: Callable[[], _Op[_T]]) -> _T:
        return await aretry(
            lambda: self._arun(make()),
            transient=_TRANSIENT,
            location=self._server,
            timeout=self.retry_timeout,
        )

    def _writable(self) -> None:
        if self._read_only:
            raise StoreError(f"{self.location} was opened read-only; open it without read_only=True to write")

    def _records(self, page: _Page, seen: _Seen, limiter: WarningLimiter) -> Iterator[StoredRecord]:
        """A page's records, decoded; ``seen`` notes where the log ended and what was read."""
        last, rows = page
        seen.last = last if seen.last is None else seen.last  # as the load began
        seen.latest = last
        for seq, body in rows:
            seen.read = seq
            record = self._decode(seq, body, limiter)
            if record is not None:
                yield record

    def _check_end(self, seen: _Seen, limiter: WarningLimiter) -> None:
        """After a load: a session deleted meanwhile is not found; records missing at the end are damage."""
        last = seen.after if seen.last is None else seen.last
        if seen.read < last and seen.latest < 0:
            raise SessionNotFoundError(f"{self.location}: the session was deleted while it was read")
        check_tail(self.location, read=seen.read, last=last, read_only=self._read_only, limiter=limiter)

    def _decode(self, seq: int, body: str, limiter: WarningLimiter) -> StoredRecord | None:
        where = f"seq {seq}"
        try:
            return StoredRecord(where, loads(body, where=where))
        except RecordDecodeError as exc:
            limiter.warn(f"{self.location}: {exc.reason} at {where}; the record is skipped")
            return None

    def _unreachable(self, exc: StoreUnavailableError) -> StoreUnavailableError:
        return _unreachable(self.conninfo, self._server, exc)


# ----------------------------------------------------------------------------- artifacts


class PostgresArtifactStore:
    """A session's artifacts (full tool outputs) in ``agentcontext_artifacts``, shared by every worker.

    Content-addressed like every `ArtifactStore`: putting the same text twice
    stores one row. Deleting the session deletes its artifacts.

    Args:
        conninfo, session_id, schema, pool_size, connect_timeout, retry_timeout: as for `PostgresStore`.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        session_id: str,
        schema: str = "public",
        pool_size: int = 4,
        connect_timeout: float = 5.0,
        retry_timeout: float = 30.0,
    ) -> None:
        self.session_id = check_session_id(session_id)
        self._tables = _Tables(_check_schema(schema))
        self.conninfo = conninfo
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.retry_timeout = retry_timeout
        self._server = _redacted(conninfo)

    def put(self, data: str, *, media_type: str = "text/plain") -> ArtifactRef:
        """Store ``data`` (see `ArtifactStore.put`)."""
        _check_media_type(media_type)
        ref = ArtifactRef.of(data) if _encode(data) else ArtifactRef.of(data)
        self._call(
            "INSERT INTO {artifacts} (session_id, digest, media_type, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (self.session_id, ref.digest, media_type, data),
            fetch=False,
        )
        return ref

    def get(self, ref: ArtifactRef | str) -> str:
        """The text under ``ref``; raises `RecallError` when there is none."""
        parsed = parse_ref(ref)
        row = self._call(
            "SELECT data FROM {artifacts} WHERE session_id = %s AND digest = %s",
            (self.session_id, parsed.digest),
        )
        if row is None:
            raise RecallError(
                f"no artifact {str(parsed)!r} in {self._server} for session {self.session_id!r}"
            )
        return str(row[0])

    def __contains__(self, ref: object) -> bool:
        parsed = _lenient_ref(ref)
        if parsed is None:
            return False
        row = self._call(
            "SELECT 1 FROM {artifacts} WHERE session_id = %s AND digest = %s",
            (self.session_id, parsed.digest),
        )
        return row is not None

    def __repr__(self) -> str:
        return f"PostgresArtifactStore({self._server!r}, session_id={self.session_id!r})"

    def _call(
        self, query: str, params: tuple[object, ...], *, fetch: bool = True
    ) -> tuple[object, ...] | None:
        pool = _POOLS.get(self.conninfo, self.pool_size, self.connect_timeout, durable=True)
        q = self._tables.q(query)

        def once() -> tuple[object, ...] | None:
            try:
                with pool.connection() as conn:
                    cursor = conn.execute(q, params)
                    return cursor.fetchone() if fetch else None
            except _TRANSIENT:
                raise
            except psycopg.errors.ForeignKeyViolation as exc:
                raise SessionNotFoundError(f"no session {self.session_id!r} in {self._server}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"{self._server}: artifacts of {self.session_id!r}: {exc}") from exc

        return retry(once, transient=_TRANSIENT, location=self._server, timeout=self.retry_timeout)


# ----------------------------------------------------------------------------- administration


class PostgresDatabase:
    """The sessions of one PostgreSQL database (schema), for ``agentcontext db`` (see `SessionDatabase`).

    Args:
        conninfo: a libpq connection string or URL.
        schema: the PostgreSQL schema holding the tables; default ``"public"``.
        retry_timeout: seconds to keep retrying through broken connections.
    """

    def __init__(self, conninfo: str, *, schema: str = "public", retry_timeout: float = 10.0) -> None:
        self.conninfo = conninfo
        self._tables = _Tables(_check_schema(schema))
        self.retry_timeout = retry_timeout
        self._server = _redacted(conninfo)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    @property
    def location(self) -> str:
        """``postgresql://user@host:port/db`` (with ``?schema=``), no password."""
        schema = "" if self._tables.schema == "public" else f"?schema={quote(self._tables.schema)}"
        return self._server + schema

    def version(self) -> int | None:
        """The version of the tables in the database, or None when there are none."""
        try:
            return self._run(lambda: _version_op(self._tables, self.location))
        except StoreNotInitializedError as exc:
            if "has no agentcontext tables" in str(exc):
                return None
            return self._raw_version()

    def init(self) -> list[str]:
        """Create the schema and the tables, or migrate them to `DB_VERSION`, in one transaction.

        Safe to run from several processes at once (an advisory lock orders
        them) and again on a current database (it then does nothing).

        Returns:
            One line per migration applied (empty when the tables were current).

        Raises:
            StoreError: the tables are newer than this library.
        """
        return self._run(self._init_op, transaction=True)

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest update first."""
        rows = self._run(self._sessions_op)
        return [SessionInfo(session_id=r[0], records=r[1] + 1, created=r[2], updated=r[3]) for r in rows]

    def delete(self, session_id: str) -> bool:
        """Delete one session; its records, backups, lease and artifacts go with it (``ON DELETE CASCADE``)."""

        def op() -> _Op[bool]:
            yield from _version_op(self._tables, self.location)
            n = yield _Step(
                self._tables.q("DELETE FROM {sessions} WHERE session_id = %s"), (session_id,), "rowcount"
            )
            return n == 1

        return self._run(op)

    def prune(self, older_than: timedelta) -> list[str]:
        """Delete the sessions not appended to for ``older_than`` (by the server's clock); returns their ids."""

        def op() -> _Op[list[str]]:
            yield from _version_op(self._tables, self.location)
            rows = yield _Step(
                self._tables.q("DELETE FROM {sessions} WHERE updated_at < now() - %s RETURNING session_id"),
                (older_than,),
                "all",
            )
            return sorted(str(r[0]) for r in cast("list[tuple[object, ...]]", rows))

        return self._run(op)

    def close(self) -> None:
        """Close the connection; idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.location!r})"

    def _init_op(self) -> _Op[list[str]]:
        t = self._tables
        # One init at a time per schema: concurrent inits would race on CREATE TABLE.
        yield _Step(sql.SQL("SELECT pg_advisory_xact_lock(hashtext(%s))"), (f"agentcontext:{t.schema}",))
        done: list[str] = []
        row = yield _Step(sql.SQL("SELECT 1 FROM pg_namespace WHERE nspname = %s"), (t.schema,), "one")
        if row is None:
            yield _Step(sql.SQL("CREATE SCHEMA {}").format(t.s))
            done.append(f"created schema {t.schema!r}")
        yield _Step(
            t.q(
                "CREATE TABLE IF NOT EXISTS {migrations} (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now(), library text)"
            )
        )
        row = yield _Step(t.q("SELECT coalesce(max(version), 0) FROM {migrations}"), fetch="one")
        current = int(row[0])  # type: ignore[index]
        if current > DB_VERSION:
            raise StoreError(
                f"{self.location} has agentcontext tables of version {current}, newer than this library's "
                f"{DB_VERSION}; upgrade agentcontext"
            )
        for version in range(current + 1, DB_VERSION + 1):
            yield _Step(sql.SQL(_MIGRATIONS[version - 1]).format(s=t.s))
            yield _Step(
                t.q("INSERT INTO {migrations} (version, library) VALUES (%s, %s)"), (version, _library())
            )
            done.append(f"migrated {self.location} to version {version}")
        return done

    def _sessions_op(self) -> _Op[list[tuple[str, int, datetime, datetime]]]:
        yield from _version_op(self._tables, self.location)
        rows = yield _Step(
            self._tables.q(
                "SELECT session_id, last_seq, created_at, updated_at FROM {sessions} ORDER BY updated_at, session_id"
            ),
            fetch="all",
        )
        return rows  # type: ignore[return-value]

    def _raw_version(self) -> int | None:
        def op() -> _Op[int | None]:
            row = yield _Step(self._tables.q("SELECT max(version) FROM {migrations}"), fetch="one")
            return row[0] if isinstance(row, tuple) else None

        return self._run(op)

    def _run(self, make: Callable[[], _Op[_T]], *, transaction: bool = False) -> _T:
        def once() -> _T:
            try:
                conn = self._connect()
                if transaction:
                    with conn.transaction():
                        return _drive(conn, make())
                return _drive(conn, make())
            except _TRANSIENT:
                self.close()
                raise
            except _MISSING as exc:
                raise StoreNotInitializedError(
                    f"{self.location} has no agentcontext tables; run `agentcontext db init URL` once to create them"
                ) from exc
            except psycopg.Error as exc:
                raise StoreError(f"{self.location}: {type(exc).__name__}: {exc}") from exc

        try:
            return retry(once, transient=_TRANSIENT, location=self._server, timeout=self.retry_timeout)
        except StoreUnavailableError as exc:
            raise _unreachable(self.conninfo, self._server, exc) from exc.__cause__

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)
        return self._conn
