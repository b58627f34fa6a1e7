"""`RedisStore`: sessions in Redis (redis-py), sync and async.

Keys, under a prefix (default ``agentcontext``) so several applications or
test runs can share a server::

    <prefix>:version            the key layout's version (``agentcontext db init URL`` sets it)
    <prefix>:sessions           sorted set: session id -> last update (ms, server clock)
    <prefix>:{<id>}:meta        hash: last_seq, created, updated, backups
    <prefix>:{<id>}:records     hash: seq -> the record's JSON text (the JSONL line)
    <prefix>:{<id>}:lease       the lease holder, expiring (SET PX)
    <prefix>:{<id>}:artifacts   hash: sha256 digest -> full tool output
    <prefix>:{<id>}:backup:<n>  a log replaced by a schema migration

- **Optimistic concurrency in a Lua script.** An append runs one script that
  checks the session's ``last_seq`` against ``expected_seq - 1`` and writes the
  whole batch; Redis runs a script atomically, so the loser of a race gets
  `ConcurrencyError` and nothing is written, and a reader never sees half a batch.
- **Catching up is O(missed).** Records are a hash keyed by seq, so
  ``load(after=N)`` fetches exactly the seqs after N (``HMGET`` in batches).
- **Large records**: a Redis string holds up to 512 MB, so a 20 MB tool output
  is one hash field; nothing is chunked.
- **Broken connections are retried** with jittered exponential backoff for
  ``retry_timeout`` seconds (a restart, a server still loading its data), then
  `StoreUnavailableError`; an append whose reply was lost recognizes its own
  batch on retry and is not written twice.
- **Durability is the server's.** A record is acknowledged once Redis has it in
  memory; it survives a server restart only with persistence on (``appendonly
  yes``; ``appendfsync always`` to lose nothing on a crash). ``agentcontext db
  init`` says when the server has none. A server restarted without persistence
  comes back empty, and opening a session then fails with
  `StoreNotInitializedError` instead of silently starting over.
- **Keys must not be evicted** (``maxmemory-policy noeviction``, or ``volatile-*``).
  A server that may evict any key (an ``allkeys-*`` policy with a ``maxmemory``) is
  refused for writing (`StoreError`; ``db init`` warns of it): a session that lost
  all its keys would leave nothing to tell it from one never written. A session that
  lost its records, its meta while its records or listing remain, or records at
  the end of its log, is refused on open and on append, never started over.

Standalone Redis (or a Sentinel-managed primary) only: the scripts touch the
shared ``sessions`` key beside a session's own, which Redis Cluster forbids.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TypeVar, cast
from urllib.parse import urlencode

from ..._serde import RecordDecodeError, dumps, loads
from ...artifacts import ArtifactRef, ArtifactStore, _check_media_type, _encode, _lenient_ref, parse_ref
from ...exceptions import (
    ConcurrencyError,
    ConfigError,
    RecallError,
    SessionNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from ...messages import JSONValue
from ._base import (
    CorruptRecordWarning,
    SessionInfo,
    StoredRecord,
    WarningLimiter,
    aread_ahead,
    aretry,
    aretry_append,
    check_expected_seq,
    check_lease,
    check_session_id,
    check_tail,
    read_ahead,
    retry,
    retry_append,
)
from ._redis import (
    _BATCH,
    _CLIENTS,
    _SCRIPTS,
    _TRANSIENT,
    KEYS_VERSION,
    _adrive,
    _check_prefix,
    _Cmd,
    _drive,
    _eviction_op,
    _int_seq,
    _Keys,
    _keys_lost,
    _map_error,
    _ms,
    _Op,
    _Script,
    _split_url,
    _version_op,
    aredis,
    redis,
)

__all__ = ["KEYS_VERSION", "RedisArtifactStore", "RedisDatabase", "RedisStore"]

_T = TypeVar("_T")


def _present(seqs: list[int], bodies: list[bytes | None], read: int) -> int:
    """The highest seq of a batch that holds a record, or ``read`` when none does."""
    for seq, body in zip(reversed(seqs), reversed(bodies), strict=True):
        if body is not None:
            return seq
    return read


def _next_batch(last: int) -> Callable[[int, object], int | None]:
    """Where the batch after the one starting at ``start`` starts; None past ``last``."""
    return lambda start, _batch: start + _BATCH if start + _BATCH <= last else None


class RedisStore:
    """One session in Redis (see the module docstring).

    Args:
        url: ``redis://[user:password@]host:port/db`` (``rediss://`` for TLS,
            ``unix:///path.sock``); `open_store` takes the ``?session=ID`` form.
        session_id: which session this store reads and writes.
        prefix: the key prefix; default ``"agentcontext"``.
        read_only: never write (inspection).
        connect_timeout: seconds to wait for a connection; default 5.
        retry_timeout: seconds to keep retrying an operation through broken
            connections before `StoreUnavailableError`; default 30, 0 to fail at once.

    The constructor does no I/O; `open` (or `aopen`) does.
    """

    shared = True
    """Several processes may write one session here: a `Session` catches up with the others' records
    before each step and holds the session's lease while it prepares."""

    def __init__(
        self,
        url: str,
        *,
        session_id: str,
        prefix: str = "agentcontext",
        read_only: bool = False,
        connect_timeout: float = 5.0,
        retry_timeout: float = 30.0,
    ) -> None:
        if not isinstance(url, str):
            raise ConfigError(f"url must be a str, got {type(url).__name__}")
        self.url, self._server = _split_url(url)
        self.session_id = check_session_id(session_id)
        self.prefix = _check_prefix(prefix)
        for name, value in (("connect_timeout", connect_timeout), ("retry_timeout", retry_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"{name} must be a non-negative number of seconds, got {value!r}")
        self.connect_timeout = float(connect_timeout) or 5.0
        self.retry_timeout = float(retry_timeout)
        self._read_only = read_only
        self._keys = _Keys(self.prefix, self.session_id)
        self._client: redis.Redis | None = None
        self._aclient: aredis.Redis | None = None
        self._aclient_pid = 0  # the process that acquired it: a forked child acquires its own

    # ------------------------------------------------------------------ protocol

    @property
    def location(self) -> str:
        """``redis://host:port/db#session`` (with ``?prefix=`` when not the default); no password."""
        prefix = "" if self.prefix == "agentcontext" else "?" + urlencode({"prefix": self.prefix})
        return f"{self._server}{prefix}#{self.session_id}"

    @property
    def read_only(self) -> bool:
        """True when opened read-only."""
        return self._read_only

    def open(self, *, create: bool = True) -> None:
        """Connect, check the key layout's version, create the session when allowed (see `SessionStore.open`).

        Raises:
            StoreNotInitializedError: ``agentcontext db init`` was never run on this server and prefix.
            SessionNotFoundError: no such session, and ``create`` is False or the store is read-only.
            StoreUnavailableError: the server cannot be reached.
        """
        if self._client is not None:
            return
        self._client = _CLIENTS.acquire(self.url, self.connect_timeout)
        try:
            self._call(lambda: self._open_op(create=create))
        except BaseException:
            self.close()
            raise

    def load(self, after: int = -1) -> Iterator[StoredRecord]:
        """The records with a seq above ``after`` (up to the last one when the load started), in order.

        Bodies that are not JSON objects are skipped with a warning; a broken
        connection is retried batch by batch.
        """
        limiter = WarningLimiter(CorruptRecordWarning)
        try:
            last = self._call(self._last_op)
            if last <= after:
                return
            batches = read_ahead(
                lambda start: self._call(lambda: self._batch_op(start, last)), after + 1, _next_batch(last)
            )
            read = after
            for seqs, bodies in batches:
                read = _present(seqs, bodies, read)
                yield from self._decoded(seqs, bodies, limiter)
            if read < last and self._call(self._last_op) < 0:
                raise SessionNotFoundError(f"{self.location}: the session was deleted while it was read")
            check_tail(self.location, read=read, last=last, read_only=self._read_only, limiter=limiter)
        finally:
            limiter.finish(self.location)

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Write ``records`` with one atomic script if the log still ends at ``expected_seq - 1``.

        Raises:
            ConcurrencyError: another writer appended first; nothing was written.
            SessionNotFoundError: the session was deleted while this store had it open.
            StoreUnavailableError: the server stayed unreachable for ``retry_timeout`` seconds.
        """
        self._writable()
        check_expected_seq(self.location, expected_seq, expected_seq - 1, records)
        bodies = [dumps(r) for r in records]
        retry_append(
            lambda: self._run(self._append_op(bodies, expected_seq)),
            lambda: self._call(lambda: self._written_op(bodies, expected_seq)),
            transient=_TRANSIENT,
            location=self.location,
            timeout=self.retry_timeout,
        )

    def replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        """Rename the records hash to a backup key and write ``records``, in one script."""
        self._writable()
        backup = self._call(lambda: self._replace_op(records))
        return f"{self.location} (key {self._keys.backup}{backup})"

    def acquire_lease(self, owner: str, ttl: float) -> bool:
        """Take or renew the session's lease (``SET PX``), expiring ``ttl`` seconds from now."""
        check_lease(owner, ttl)
        self._writable()
        return self._call(lambda: self._lease_op(owner, ttl))

    def release_lease(self, owner: str) -> bool:
        """Give the lease up (see `SupportsLease`)."""
        self._writable()
        return self._call(lambda: self._release_op(owner))

    def default_artifacts(self) -> ArtifactStore:
        """A `RedisArtifactStore` for this session: every worker can recall its full outputs."""
        return RedisArtifactStore(
            self.url,
            session_id=self.session_id,
            prefix=self.prefix,
            connect_timeout=self.connect_timeout,
            retry_timeout=self.retry_timeout,
        )

    def close(self) -> None:
        """Return this store's share of the client; idempotent."""
        client, self._client = self._client, None
        if client is not None:
            _CLIENTS.release(client)

    # ------------------------------------------------------------------ async

    async def aopen(self, *, create: bool = True) -> None:
        """`open` for event loops (a client shared per loop)."""
        if self._aclient is not None:
            return
        self._aclient = _CLIENTS.aacquire(self.url, self.connect_timeout)
        self._aclient_pid = os.getpid()
        try:
            await self._acall(lambda: self._open_op(create=create))
        except BaseException:
            await self.aclose()
            raise

    async def aload(self, after: int = -1) -> AsyncIterator[StoredRecord]:
        """`load` as an async iterator."""
        limiter = WarningLimiter(CorruptRecordWarning)
        try:
            last = await self._acall(self._last_op)
            if last <= after:
                return
            batches = aread_ahead(
                lambda start: self._acall(lambda: self._batch_op(start, last)), after + 1, _next_batch(last)
            )
            read = after
            async for seqs, bodies in batches:
                read = _present(seqs, bodies, read)
                for record in self._decoded(seqs, bodies, limiter):
                    yield record
            if read < last and await self._acall(self._last_op) < 0:
                raise SessionNotFoundError(f"{self.location}: the session was deleted while it was read")
            check_tail(self.location, read=read, last=last, read_only=self._read_only, limiter=limiter)
        finally:
            limiter.finish(self.location)

    async def aappend(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """`append`, awaited."""
        self._writable()
        check_expected_seq(self.location, expected_seq, expected_seq - 1, records)
        bodies = [dumps(r) for r in records]
        await aretry_append(
            lambda: self._arun(self._append_op(bodies, expected_seq)),
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
        client, self._aclient = self._aclient, None
        if client is not None:
            await _CLIENTS.arelease(client)
        self.close()

    def __repr__(self) -> str:
        mode = ", read-only" if self._read_only else ""
        return f"RedisStore({self.location!r}{mode})"

    # ------------------------------------------------------------------ operations

    def _open_op(self, *, create: bool) -> _Op[None]:
        k = self._keys
        yield from _version_op(k, self.location.rsplit("#", 1)[0], self.prefix)
        if not self._read_only:
            hazard = yield from _eviction_op(self._server)
            if hazard is not None:
                raise StoreError(f"{hazard}. The session {self.session_id!r} was not opened for writing")
        create = create and not self._read_only
        status = yield _Script("open", (k.meta, k.records, k.sessions), (self.session_id, int(create)))
        if int(cast(int, status)) == 0:
            raise SessionNotFoundError(
                f"no session {self.session_id!r} in {self._server} (prefix {self.prefix!r})"
            )
        if int(cast(int, status)) < 0:
            last = yield _Cmd("HGET", (k.meta, "last_seq"))
            raise _keys_lost(self.location, -1 if last is None else int(cast(bytes, last)))

    def _last_op(self) -> _Op[int]:
        raw = yield _Cmd("HGET", (self._keys.meta, "last_seq"))
        return -1 if raw is None else int(cast(bytes, raw))

    def _batch_op(self, start: int, last: int) -> _Op[tuple[list[int], list[bytes | None]]]:
        seqs = list(range(start, min(start + _BATCH, last + 1)))
        bodies = yield _Cmd("HMGET", (self._keys.records, *seqs))
        return seqs, cast("list[bytes | None]", bodies)

    def _append_op(self, bodies: list[str], expected: int) -> _Op[None]:
        k = self._keys
        if not bodies:
            raw = yield _Cmd("HGET", (k.meta, "last_seq"))
            status, last = (2, -1) if raw is None else (1, int(cast(bytes, raw)))
        else:
            reply = yield _Script(
                "append", (k.meta, k.records, k.sessions), (self.session_id, expected, *bodies)
            )
            status, last = (int(x) for x in cast("list[int]", reply))
        if status == 3:
            raise _keys_lost(self.location, last)
        if status == 2:
            raise SessionNotFoundError(
                f"{self.location}: the session was deleted while this store had it open; nothing was written"
            )
        if status == 1:
            check_expected_seq(self.location, expected, last, [])
            if bodies:  # pragma: no cover - the script refused, so the seq check above raised
                raise ConcurrencyError(f"{self.location}: seq {expected} was taken by another writer")

    def _written_op(self, bodies: list[str], expected: int) -> _Op[bool]:
        stored = yield _Cmd("HMGET", (self._keys.records, *range(expected, expected + len(bodies))))
        return [
            b.decode("utf-8") if b is not None else None for b in cast("list[bytes | None]", stored)
        ] == bodies

    def _replace_op(self, records: Sequence[Mapping[str, JSONValue]]) -> _Op[int]:
        k = self._keys
        args: list[str | int] = [k.backup, max((_int_seq(r) for r in records), default=-1)]
        for r in records:
            args += [_int_seq(r), dumps(r)]
        n = yield _Script("replace", (k.meta, k.records), tuple(args))
        if int(cast(int, n)) < 0:
            raise SessionNotFoundError(
                f"{self.location}: the session was deleted while this store had it open"
            )
        return int(cast(int, n))

    def _lease_op(self, owner: str, ttl: float) -> _Op[bool]:
        taken = yield _Script(
            "lease", (self._keys.lease, self._keys.meta), (owner, max(1, round(ttl * 1000)))
        )
        if int(cast(int, taken)) < 0:
            raise SessionNotFoundError(f"{self.location}: the session was deleted")
        return int(cast(int, taken)) == 1

    def _release_op(self, owner: str) -> _Op[bool]:
        released = yield _Script("release", (self._keys.lease,), (owner,))
        return int(cast(int, released)) == 1

    # ------------------------------------------------------------------ drivers

    def _run(self, op: _Op[_T]) -> _T:
        client = self._client
        if client is None:
            raise StoreError(f"{self.location} is not open; call open() first (or the session was closed)")
        try:
            return _drive(client, op)
        except _TRANSIENT:
            raise
        except redis.RedisError as exc:
            raise _map_error(self.location, exc) from exc

    def _call(self, make: Callable[[], _Op[_T]]) -> _T:
        return retry(
            lambda: self._run(make()), transient=_TRANSIENT, location=self._server, timeout=self.retry_timeout
        )

    async def _arun(self, op: _Op[_T]) -> _T:
        client = self._aclient
        if client is None:
            raise StoreError(f"{self.location} is not open; call aopen() first (or the session was closed)")
        if self._aclient_pid != os.getpid():  # opened before a fork: the parent's client is not ours to use
            client = self._aclient = _CLIENTS.aacquire(self.url, self.connect_timeout)
            self._aclient_pid = os.getpid()
        try:
            return await _adrive(client, op)
        except _TRANSIENT:
            raise
        except redis.RedisError as exc:
            raise _map_error(self.location, exc) from exc

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

    def _decoded(
        self, seqs: list[int], bodies: list[bytes | None], limiter: WarningLimiter
    ) -> Iterator[StoredRecord]:
        for seq, body in zip(seqs, bodies, strict=True):
            if body is None:
                continue  # a seq a replaced log does not use
            where = f"seq {seq}"
            try:
                yield StoredRecord(where, loads(body, where=where))
            except RecordDecodeError as exc:
                limiter.warn(f"{self.location}: {exc.reason} at {where}; the record is skipped")


# ----------------------------------------------------------------------------- artifacts


class RedisArtifactStore:
    """A session's artifacts (full tool outputs) in the hash ``<prefix>:{<id>}:artifacts``.

    Content-addressed like every `ArtifactStore`; deleting the session deletes them.

    Args:
        url, session_id, prefix, connect_timeout, retry_timeout: as for `RedisStore`.
    """

    def __init__(
        self,
        url: str,
        *,
        session_id: str,
        prefix: str = "agentcontext",
        connect_timeout: float = 5.0,
        retry_timeout: float = 30.0,
    ) -> None:
        self.url, self._server = _split_url(url)
        self.session_id = check_session_id(session_id)
        self._key = _Keys(_check_prefix(prefix), session_id).artifacts
        self.connect_timeout = connect_timeout
        self.retry_timeout = retry_timeout
        self._client: redis.Redis | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize[[redis.Redis], RedisArtifactStore] | None = None

    def put(self, data: str, *, media_type: str = "text/plain") -> ArtifactRef:
        """Store ``data`` (see `ArtifactStore.put`)."""
        _check_media_type(media_type)
        raw = _encode(data)
        ref = ArtifactRef.of(data)
        self._call(lambda c: c.hsetnx(self._key, ref.digest, raw))
        return ref

    def get(self, ref: ArtifactRef | str) -> str:
        """The text under ``ref``; raises `RecallError` when there is none."""
        parsed = parse_ref(ref)
        raw = self._call(lambda c: c.hget(self._key, parsed.digest))
        if raw is None:
            raise RecallError(
                f"no artifact {str(parsed)!r} in {self._server} for session {self.session_id!r}"
            )
        return cast(bytes, raw).decode("utf-8")

    def __contains__(self, ref: object) -> bool:
        parsed = _lenient_ref(ref)
        return parsed is not None and bool(self._call(lambda c: c.hexists(self._key, parsed.digest)))

    def close(self) -> None:
        """Return the client; idempotent (also done when the object is collected)."""
        with self._lock:
            client, self._client = self._client, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
        if client is not None:
            _CLIENTS.release(client)

    def __repr__(self) -> str:
        return f"RedisArtifactStore({self._server!r}, session_id={self.session_id!r})"

    def _call(self, fn: Callable[[redis.Redis], object]) -> object:
        with self._lock:
            if self._client is None:
                self._client = _CLIENTS.acquire(self.url, self.connect_timeout)
                self._finalizer = weakref.finalize(self, _CLIENTS.release, self._client)
            client = self._client

        def once() -> object:
            try:
                return fn(client)
            except _TRANSIENT:
                raise
            except redis.RedisError as exc:
                raise _map_error(self._server, exc) from exc

        return retry(once, transient=_TRANSIENT, location=self._server, timeout=self.retry_timeout)


# ----------------------------------------------------------------------------- administration


class RedisDatabase:
    """The sessions under one prefix of a Redis server, for ``agentcontext db`` (see `SessionDatabase`).

    Args:
        url: ``redis://host:port/db``.
        prefix: the key prefix; default ``"agentcontext"``.
        retry_timeout: seconds to keep retrying through broken connections.
    """

    def __init__(self, url: str, *, prefix: str = "agentcontext", retry_timeout: float = 10.0) -> None:
        self.url, self._server = _split_url(url)
        self.prefix = _check_prefix(prefix)
        self.retry_timeout = retry_timeout
        self._client: redis.Redis | None = None

    @property
    def location(self) -> str:
        """``redis://host:port/db`` (with ``?prefix=``), no password."""
        prefix = "" if self.prefix == "agentcontext" else "?" + urlencode({"prefix": self.prefix})
        return self._server + prefix

    def init(self) -> list[str]:
        """Mark the prefix as holding agentcontext's key layout; returns what was done.

        Redis needs no tables, but the version key lets a later library migrate
        the layout, and lets a store tell "never initialised" (or "lost by a
        restart without persistence") from "empty".
        """
        keys = _Keys(self.prefix, "-")
        done: list[str] = []

        def once(client: redis.Redis) -> None:
            current = client.get(keys.version)
            if current is not None and int(cast(bytes, current)) > KEYS_VERSION:
                raise StoreError(
                    f"{self.location} uses agentcontext key layout {int(cast(bytes, current))}, newer than this "
                    f"library's {KEYS_VERSION}; upgrade agentcontext"
                )
            if current is None and client.set(keys.version, KEYS_VERSION, nx=True):
                done.append(f"initialised {self.location} (key layout {KEYS_VERSION})")
            persistence = cast("dict[str, object]", client.info("persistence"))
            try:
                saves = cast("dict[str, object]", client.config_get("save"))
            except redis.ResponseError:  # CONFIG is often disabled on managed servers: INFO still answers
                saves = {"save": "unknown"}
            hazard = _drive(client, _eviction_op(self._server))
            if hazard is not None:
                done.append(f"warning: {hazard}; sessions are not opened for writing until then")
            if not persistence.get("aof_enabled") and not saves.get("save"):
                done.append(
                    "warning: this Redis server has no persistence (appendonly no, no save points): a restart "
                    "loses every session; set appendonly yes (and appendfsync always to lose nothing)"
                )

        self._call(once)
        return done

    def sessions(self) -> list[SessionInfo]:
        """Every session under the prefix, oldest update first."""
        keys = _Keys(self.prefix, "-")

        def once(client: redis.Redis) -> list[SessionInfo]:
            self._check_version(client)
            members = cast("list[tuple[bytes, float]]", client.zrange(keys.sessions, 0, -1, withscores=True))
            pipe = client.pipeline(transaction=False)
            for member, _ in members:
                pipe.hmget(_Keys(self.prefix, member.decode()).meta, "last_seq", "created", "updated")
            metas = pipe.execute()
            out = []
            for (member, score), (last, created, updated) in zip(members, metas, strict=True):
                if last is None:
                    continue  # deleted since the listing
                out.append(
                    SessionInfo(
                        session_id=member.decode(),
                        records=int(last) + 1,
                        created=_ms(created),
                        updated=_ms(updated) or _ms(score),
                    )
                )
            return out

        return self._call(once)

    def delete(self, session_id: str) -> bool:
        """Delete one session: records, backups, lease, artifacts and its entry in the index."""
        return bool(self._call(lambda c: self._delete(c, session_id)))

    def prune(self, older_than: timedelta) -> list[str]:
        """Delete the sessions not appended to for ``older_than`` (by the server's clock); returns their ids."""
        keys = _Keys(self.prefix, "-")

        def once(client: redis.Redis) -> list[str]:
            self._check_version(client)
            seconds, micros = client.time()
            cutoff = seconds * 1000 + micros // 1000 - older_than.total_seconds() * 1000
            members = cast("list[bytes]", client.zrangebyscore(keys.sessions, "-inf", f"({cutoff}"))
            return sorted(m.decode() for m in members if self._delete(client, m.decode()))

        return self._call(once)

    def close(self) -> None:
        """Return the client; idempotent."""
        client, self._client = self._client, None
        if client is not None:
            _CLIENTS.release(client)

    def __repr__(self) -> str:
        return f"RedisDatabase({self.location!r})"

    def _delete(self, client: redis.Redis, session_id: str) -> bool:
        self._check_version(client)
        k = _Keys(self.prefix, session_id)
        script = client.register_script(_SCRIPTS["delete"])
        return bool(
            script(keys=(k.meta, k.records, k.lease, k.artifacts, k.sessions), args=(session_id, k.backup))
        )

    def _check_version(self, client: redis.Redis) -> None:
        op = _version_op(_Keys(self.prefix, "-"), self.location, self.prefix)
        _drive(client, op)

    def _call(self, fn: Callable[[redis.Redis], _T]) -> _T:
        if self._client is None:
            self._client = _CLIENTS.acquire(self.url, 5.0)
        client = self._client

        def once() -> _T:
            try:
                return fn(client)
            except _TRANSIENT:
                raise
            except redis.RedisError as exc:
                raise _map_error(self.location, exc) from exc

        try:
            return retry(once, transient=_TRANSIENT, location=self._server, timeout=self.retry_timeout)
        except StoreUnavailableError as exc:
            raise StoreUnavailableError(
                f"{exc}; start it with redis-server, or check the URL"
            ) from exc.__cause__
