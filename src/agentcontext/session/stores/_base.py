"""The protocol every session store speaks, its errors and warnings.

A store keeps one session's records in order and hands them back. It knows
nothing about what records mean: the session encodes them with the one codec
(`agentcontext._serde`) and the store only persists JSON-ready data.

Appends name the sequence number they expect to write (``expected_seq``), so
stores shared between processes (SQLite, PostgreSQL, Redis) can refuse a
writer whose view of the log is stale with `ConcurrencyError`, the
optimistic-concurrency pattern: no lock is held between appends, and a lost
race is detected, never silently merged. The loser reads what it missed with
``load(after=<the last seq it knows>)``, which costs O(missed records), not a
full restore, and tries again.

Two optional protocols sit beside `SessionStore`:

- `SupportsLease`: a lease on the session with an expiry, held in the same
  database, so that two workers never summarize the same span at once; a
  lease whose holder was killed expires by itself.
- `AsyncSessionStore`: ``aopen`` / ``aload`` / ``aappend`` / ``aclose`` for
  event loops (the PostgreSQL and Redis stores).

`SessionDatabase` is the administration side of a database holding many
sessions (``agentcontext db init / list / delete / prune``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol, TypeAlias, TypeVar, get_args, runtime_checkable

from ...artifacts import ArtifactStore
from ...exceptions import (
    ConcurrencyError,
    ConfigError,
    CorruptRecordWarning,
    NotASessionError,
    SessionNotFoundError,
    SessionWarning,
    StoreError,
    StorePathError,
    StorePermissionError,
    StoreUnavailableError,
    UnknownRecordWarning,
)
from ...messages import JSONValue

__all__ = [
    "AsyncSessionStore",
    "CorruptRecordWarning",
    "FsyncPolicy",
    "NotASessionError",
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
]

_T = TypeVar("_T")
_A = TypeVar("_A")

FsyncPolicy: TypeAlias = Literal["always", "never", "interval"]
"""When appended records are forced to the disk with ``fsync``.

- ``"always"``: after every append, before it returns. Survives power loss; costs
  a disk flush per append (about a millisecond on an SSD; see bench/RESULTS.md).
- ``"interval"``: at an append once ``fsync_interval`` seconds have passed since the
  last flush, and at close. A power loss can lose the last interval's records.
- ``"never"``: leave it to the OS. Survives a crash or a kill of the process
  (every append is written to the OS before it returns), not a power loss.
"""


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as a store read it: JSON-ready data and where it came from."""

    where: str
    """Position for messages: ``"line 12"`` (JSONL), ``"seq 12"`` (SQLite)..."""
    data: dict[str, JSONValue]
    """The parsed record."""


@runtime_checkable
class SessionStore(Protocol):
    """Where one session's records live.

    Lifecycle: `open` (checks the location, takes locks, creates what is
    missing), `load` once, then any number of `append` calls (and
    ``load(after=...)`` calls to catch up with other writers), then `close`.
    """

    @property
    def location(self) -> str:
        """Where the records are, for messages (a path, ``path#session``...)."""
        ...

    @property
    def read_only(self) -> bool:
        """True when the store was opened for reading only."""
        ...

    def open(self, *, create: bool) -> None:
        """Make the store ready; create an empty session when ``create`` and there is none.

        Raises:
            SessionNotFoundError: no session there, and ``create`` is False or the store is read-only.
            StorePathError: the location cannot hold a session.
            StorePermissionError: the OS refused access.
            SessionLockedError: another writer holds the session.
        """
        ...

    def load(self, after: int = -1) -> Iterator[StoredRecord]:
        """The readable records whose seq is greater than ``after``, in order.

        ``after=-1`` (the default) reads the whole log. A writer that lost a
        race passes the last seq it has applied and gets only what the others
        appended since, in O(missed records). Damaged records are skipped with a
        `CorruptRecordWarning`. Records without an integer seq (a log of an
        older schema) come only with a full load.
        """
        ...

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Persist ``records`` (their ``seq`` runs from ``expected_seq`` without gaps) as one batch.

        When this returns, the records are durable per the store's fsync policy.
        A batch is written as a whole or not at all, as far as the store can.

        Raises:
            ConcurrencyError: the log's last seq is past ``expected_seq - 1``
                (another writer appended first); nothing was written.
            SessionNotFoundError: the log ends before ``expected_seq - 1`` (it was
                deleted and re-created, or lost records); nothing was written.
            StoreError: the write failed; nothing of the batch is kept.
        """
        ...

    def replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        """Atomically replace the whole log with ``records``, keeping the old log as a backup.

        Used only to migrate a log written by an older schema version. Returns
        where the backup is.
        """
        ...

    def default_artifacts(self) -> ArtifactStore:
        """The artifact store that belongs with this session (full tool outputs)."""
        ...

    def close(self) -> None:
        """Flush what the fsync policy owes, release locks; idempotent."""
        ...


@runtime_checkable
class SupportsLease(Protocol):
    """A store that can lease its session to one owner at a time, with an expiry.

    A worker about to summarize a span takes the lease first; a second worker
    that fails to get it leaves the compaction to the holder instead of
    summarizing the same span again. The lease lives in the store's own
    database (a table, a Redis key, a file's lock), and it expires ``ttl``
    seconds after it was last taken, so a killed holder blocks the others for
    at most ``ttl``.
    """

    def acquire_lease(self, owner: str, ttl: float) -> bool:
        """Take (or renew, when ``owner`` already holds it) the lease for ``ttl`` seconds.

        Returns:
            True when ``owner`` now holds the lease; False when another owner's
            unexpired lease stands.
        """
        ...

    def release_lease(self, owner: str) -> bool:
        """Give the lease up; returns False (and changes nothing) when ``owner`` does not hold it."""
        ...


@runtime_checkable
class AsyncSessionStore(Protocol):
    """The async twin of `SessionStore`'s I/O, for stores used from an event loop.

    Same meanings, same errors; a store may be used through either side (not both at once).
    """

    async def aopen(self, *, create: bool) -> None:
        """`SessionStore.open`, awaited."""
        ...

    def aload(self, after: int = -1) -> AsyncIterator[StoredRecord]:
        """`SessionStore.load`, as an async iterator."""
        ...

    async def aappend(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """`SessionStore.append`, awaited."""
        ...

    async def aacquire_lease(self, owner: str, ttl: float) -> bool:
        """`SupportsLease.acquire_lease`, awaited."""
        ...

    async def arelease_lease(self, owner: str) -> bool:
        """`SupportsLease.release_lease`, awaited."""
        ...

    async def aclose(self) -> None:
        """`SessionStore.close`, awaited."""
        ...


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session of a database, as `SessionDatabase.sessions` lists it."""

    session_id: str
    """The id the session was opened with (``?session=ID``)."""
    records: int
    """How many records its log holds (the header included)."""
    created: datetime | None
    """When it was created (UTC), when the database knows."""
    updated: datetime | None
    """When a record was last appended (UTC), when the database knows."""


@runtime_checkable
class SessionDatabase(Protocol):
    """A database holding many sessions: schema set-up, listing, deletion, retention."""

    @property
    def location(self) -> str:
        """Where the database is, for messages (passwords left out)."""
        ...

    def init(self) -> list[str]:
        """Create or migrate what the stores need; returns what was done (empty: already current)."""
        ...

    def sessions(self) -> list[SessionInfo]:
        """Every session, oldest update first."""
        ...

    def delete(self, session_id: str) -> bool:
        """Delete one session with its records, backups, lease and artifacts; False when there was none."""
        ...

    def prune(self, older_than: timedelta) -> list[str]:
        """Delete the sessions not appended to for ``older_than``; returns their ids."""
        ...

    def close(self) -> None:
        """Release the connection; idempotent."""
        ...


def check_fsync(policy: object, interval: object) -> None:
    """Validate an fsync policy and interval; raises `ConfigError` with the accepted values."""
    if policy not in get_args(FsyncPolicy):
        raise ConfigError(f"fsync must be 'always', 'never' or 'interval', got {policy!r}")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
        raise ConfigError(f"fsync_interval must be a positive number of seconds, got {interval!r}")


def check_expected_seq(
    location: str, expected: int, last: int, records: Sequence[Mapping[str, JSONValue]]
) -> None:
    """The checks every store makes before an append (see `SessionStore.append`)."""
    if last < expected - 1:
        # Not a race: nobody appended what this writer read. Retrying after a reload could never succeed.
        raise SessionNotFoundError(
            f"{location}: the log ends at seq {last}, before seq {expected - 1}, which this session has read: "
            "it was deleted and re-created, or lost records (a Redis restart without persistence?), and "
            "nothing was written. Open the session again"
        )
    if expected != last + 1:
        raise ConcurrencyError(
            f"{location}: append expected to write seq {expected}, but the log ends at seq {last}; "
            "another writer has appended since this log was last read, and nothing was written. Read what "
            "it wrote (session.reload(), or load(after=...) on a store), then retry."
        )
    for i, r in enumerate(records):
        if r.get("seq") != expected + i:
            raise StoreError(
                f"{location}: record {i} of the batch has seq {r.get('seq')!r}, expected {expected + i}"
            )


def check_tail(location: str, *, read: int, last: int, read_only: bool, limiter: WarningLimiter) -> None:
    """The check a store that keeps its log's last seq apart from its records makes after a load.

    ``read`` is the highest seq the load found (or where it started), ``last`` the seq the store says
    was written last when the load began. Records missing at the end leave no later record to show the
    gap (the session's replay warns of one in the middle), and an append after them could only fail as
    a race: a writable store refuses the session, a read-only one warns and reads what is left.
    """
    if read >= last:
        return
    missing = f"seq {last} is" if read == last - 1 else f"seqs {read + 1}-{last} are"
    what = (
        f"{location}: the session is damaged: its log was written up to seq {last}, but {missing} "
        "missing at its end (deleted outside agentcontext, or evicted by the server)"
    )
    if read_only:
        limiter.warn(f"{what}; reading what is left")
        return
    raise StoreError(
        f"{what}. Nothing was written and the session was not started over; restore the records from a "
        "backup, or open it read-only to read what is left"
    )


class WarningLimiter:
    """Warn about the first ``limit`` problems individually, then once with a count.

    A log with thousands of damaged lines should not print thousands of warnings.
    """

    def __init__(self, category: type[Warning], *, limit: int = 10) -> None:
        self.category = category
        self.limit = limit
        self.count = 0
        self._tail = ""

    def warn(self, message: str) -> None:
        """Record one problem; warn for it unless the limit is reached."""
        self.count += 1
        if self.count <= self.limit:
            warnings.warn(message, self.category, stacklevel=4)
        else:
            self._tail = message

    def finish(self, location: str) -> None:
        """Warn once about the problems beyond the limit, if any."""
        extra = self.count - self.limit
        if extra > 0:
            warnings.warn(
                f"{location}: {extra} more such problem(s) were passed over (the last: {self._tail})",
                self.category,
                stacklevel=4,
            )


def check_lease(owner: object, ttl: object) -> None:
    """Validate a lease request; raises `ConfigError` naming the bad argument."""
    if not isinstance(owner, str) or not owner:
        raise ConfigError(f"a lease owner must be a non-empty str (e.g. a worker id), got {owner!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise ConfigError(f"a lease ttl must be a positive number of seconds, got {ttl!r}")


def check_session_id(session_id: object) -> str:
    """A session id is a non-empty str; raises `ConfigError` otherwise."""
    if not isinstance(session_id, str) or not session_id:
        raise ConfigError(f"session_id must be a non-empty str, got {session_id!r}")
    return session_id


class LocalLease:
    """A lease kept in this process: for stores with a single writer (memory, JSONL).

    A JSONL file has one writer at a time (its lock), and a `MemoryStore` lives
    in one process, so a lease only has to arbitrate between the owners that
    share the store object. Expiry uses the monotonic clock.
    """

    def __init__(self) -> None:
        self._holder: tuple[str, float] | None = None
        self._lock = threading.Lock()

    def acquire(self, owner: str, ttl: float) -> bool:
        """See `SupportsLease.acquire_lease`."""
        check_lease(owner, ttl)
        now = time.monotonic()
        with self._lock:
            held = self._holder
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._holder = (owner, now + ttl)
            return True

    def release(self, owner: str) -> bool:
        """See `SupportsLease.release_lease`."""
        with self._lock:
            held = self._holder
            if held is None or held[0] != owner or held[1] <= time.monotonic():
                return False
            self._holder = None
            return True


class Backoff:
    """Waits between attempts to reach a database server: exponential, jittered, bounded in total.

    Network stores retry an operation that failed because the connection broke
    (a server restart, a dropped socket) until ``timeout`` seconds have passed
    since the first failure, then give up with `StoreUnavailableError`.

    Args:
        location: named in the error.
        timeout: total seconds to keep retrying; 0 fails at the first error.
        first: the first wait, doubled after each failure up to ``cap``.
    """

    def __init__(self, location: str, timeout: float, *, first: float = 0.05, cap: float = 1.0) -> None:
        self.location = location
        self.timeout = timeout
        self.attempts = 0
        self._next = first
        self._cap = cap
        self._deadline = time.monotonic() + timeout

    def wait_time(self, exc: BaseException) -> float:
        """How long to wait before the next attempt; raises `StoreUnavailableError` when time is up."""
        self.attempts += 1
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise StoreUnavailableError(
                f"cannot reach {self.location} ({type(exc).__name__}: {_first_line(exc)}); gave up after "
                f"{self.attempts} attempt(s) over {self.timeout:g} s. Is the server running and reachable?"
            ) from exc
        wait = min(self._next, left) * random.uniform(0.5, 1.0)
        self._next = min(self._next * 2, self._cap)
        return wait

    def wait(self, exc: BaseException) -> None:
        """Sleep before the next attempt (see `wait_time`)."""
        time.sleep(self.wait_time(exc))

    async def await_(self, exc: BaseException) -> None:
        """`wait`, without blocking the event loop."""
        await asyncio.sleep(self.wait_time(exc))


def retry(
    call: Callable[[], _T], *, transient: tuple[type[BaseException], ...], location: str, timeout: float
) -> _T:
    """Run ``call``, retrying with `Backoff` while it raises one of the ``transient`` errors."""
    backoff: Backoff | None = None
    while True:
        try:
            return call()
        except transient as exc:
            backoff = backoff or Backoff(location, timeout)
            backoff.wait(exc)


async def aretry(
    call: Callable[[], Awaitable[_T]],
    *,
    transient: tuple[type[BaseException], ...],
    location: str,
    timeout: float,
) -> _T:
    """`retry` for coroutines."""
    backoff: Backoff | None = None
    while True:
        try:
            return await call()
        except transient as exc:
            backoff = backoff or Backoff(location, timeout)
            await backoff.await_(exc)


def retry_append(
    attempt: Callable[[], None],
    written: Callable[[], bool],
    *,
    transient: tuple[type[BaseException], ...],
    location: str,
    timeout: float,
) -> None:
    """Run one append ``attempt``, retrying through broken connections without writing twice.

    An attempt cut off by a broken connection may or may not have committed. When the retry then
    finds the seq taken (`ConcurrencyError`), ``written()`` compares what is stored there with the
    batch: if it is the batch, the first attempt had committed and the append succeeded.
    """
    backoff: Backoff | None = None
    while True:
        try:
            attempt()
            return
        except ConcurrencyError:
            if backoff is not None and written():
                return
            raise
        except transient as exc:
            backoff = backoff or Backoff(location, timeout)
            backoff.wait(exc)


async def aretry_append(
    attempt: Callable[[], Awaitable[None]],
    written: Callable[[], Awaitable[bool]],
    *,
    transient: tuple[type[BaseException], ...],
    location: str,
    timeout: float,
) -> None:
    """`retry_append` for coroutines."""
    backoff: Backoff | None = None
    while True:
        try:
            await attempt()
            return
        except ConcurrencyError:
            if backoff is not None and await written():
                return
            raise
        except transient as exc:
            backoff = backoff or Backoff(location, timeout)
            await backoff.await_(exc)


def read_ahead(
    fetch: Callable[[_A], _T], first: _A, following: Callable[[_A, _T], _A | None]
) -> Iterator[_T]:
    """The pages ``fetch(first)``, ``fetch(following(first, page))``..., each fetched while the caller works on the previous one.

    A restore spends its time parsing what one page brought and waiting for the
    server to send the next; fetching the next page in a background thread
    (the database clients release the GIL while they wait) overlaps the two.
    ``following`` returns None after the last page; a single page starts no thread.
    """
    page = fetch(first)
    arg = following(first, page)
    if arg is None:
        yield page
        return
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentcontext-read-ahead")
    try:
        while arg is not None:
            future = executor.submit(fetch, arg)
            yield page
            page = future.result()
            arg = following(arg, page)
        yield page
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


async def aread_ahead(
    fetch: Callable[[_A], Awaitable[_T]], first: _A, following: Callable[[_A, _T], _A | None]
) -> AsyncIterator[_T]:
    """`read_ahead` for coroutines: the next page is a task of the running loop."""
    page = await fetch(first)
    arg = following(first, page)
    while arg is not None:
        task = asyncio.ensure_future(fetch(arg))
        try:
            yield page
        except BaseException:
            task.cancel()
            raise
        page = await task
        arg = following(arg, page)
    yield page


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no details"
