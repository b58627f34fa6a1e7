"""The Redis stores' machinery: the key layout, the Lua scripts, shared clients, sync/async drivers.

An operation is a generator that yields commands (`_Cmd`, `_Script`) and
receives their replies; `_drive` and `_adrive` run it on a sync or an async
client, so each operation is written once for both sides. Imported only when a
``redis://`` location is opened.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypeVar, cast
from urllib.parse import quote, urlsplit, urlunsplit

from ...exceptions import ConfigError, MissingDependencyError, StoreError, StoreNotInitializedError
from ...messages import JSONValue

try:  # re-exported ("as"): redis.py takes the client from here, after the check below
    import redis as redis
    import redis.asyncio
    from redis.backoff import NoBackoff
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise MissingDependencyError(
        "the Redis session store needs redis-py: pip install 'agentcontext[redis]'"
    ) from _exc

aredis = redis.asyncio

_T = TypeVar("_T")

KEYS_VERSION = 1
"""The version of the key layout this library reads and writes."""

_BATCH = 1_000  # seqs per HMGET while loading
_TRANSIENT: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_SCRIPTS = {
    # KEYS: meta, records, sessions. ARGV: session id, 1 to create the session if it is not there.
    # Returns 1 open, 0 no session, -1 records or a listing without the meta, -2 meta without its
    # records (keys evicted under an allkeys-* maxmemory-policy, or deleted by hand: never started over).
    "open": _NOW
    + """
local last = redis.call('HGET', KEYS[1], 'last_seq')
if not last then
  if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end
  if ARGV[2] ~= '1' then return 0 end
  redis.call('HSET', KEYS[1], 'last_seq', -1, 'created', now, 'updated', now, 'backups', 0)
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  return 1
end
if tonumber(last) >= 0 and redis.call('EXISTS', KEYS[2]) == 0 then return -2 end
return 1
""",
    # KEYS: meta, records, sessions. ARGV: session id, expected seq, bodies...
    # Returns {0, last} written, {1, last} lost the race, {2, -1} no session, {3, last} records lost.
    "append": """
local last = redis.call('HGET', KEYS[1], 'last_seq')
if not last then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {3, -1} end
  return {2, -1}
end
last = tonumber(last)
if last >= 0 and redis.call('EXISTS', KEYS[2]) == 0 then return {3, last} end
local expected = tonumber(ARGV[2])
if last + 1 ~= expected then return {1, last} end
local n = #ARGV - 2
for i = 1, n do
  redis.call('HSET', KEYS[2], expected + i - 1, ARGV[i + 2])
end
"""
    + _NOW
    + """
redis.call('HSET', KEYS[1], 'last_seq', last + n, 'updated', now)
redis.call('ZADD', KEYS[3], now, ARGV[1])
return {0, last + n}
""",
    # KEYS: meta, records. ARGV: backup key prefix, new last seq, seq, body, seq, body...
    "replace": """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local n = redis.call('HINCRBY', KEYS[1], 'backups', 1)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], ARGV[1] .. n) end
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'last_seq', ARGV[2])
return n
""",
    # KEYS: lease, meta. ARGV: owner, ttl ms. Takes a free or expired lease, or renews its own.
    "lease": """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
""",
    # KEYS: lease. ARGV: owner.
    "release": """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
""",
    # KEYS: meta, records, lease, artifacts, sessions. ARGV: session id, backup key prefix.
    "delete": """
local backups = tonumber(redis.call('HGET', KEYS[1], 'backups') or '0')
for i = 1, backups do redis.call('UNLINK', ARGV[2] .. i) end
local existed = redis.call('EXISTS', KEYS[1])
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[5], ARGV[1])
return existed
""",
}


@dataclass(frozen=True, slots=True)
class _Cmd:
    """One Redis command of an operation, run by the sync or the async driver."""

    name: str
    args: tuple[object, ...] = ()
    refusable: bool = False
    """The server may refuse it (``NOPERM``: an ACL user without ``@dangerous`` runs no ``INFO``): the
    operation then gets the error itself as the reply, instead of it being raised."""


@dataclass(frozen=True, slots=True)
class _Script:
    """One of `_SCRIPTS`, with its keys and arguments."""

    name: str
    keys: tuple[str, ...]
    args: tuple[str | int | float, ...]


_Op = Generator[_Cmd | _Script, object, _T]


def _split_url(url: str) -> tuple[str, str]:
    """The URL for redis-py (credentials kept) and the one for messages (no password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"a Redis URL starts with redis://, rediss:// or unix://, got {url!r}")
    shown_netloc = parts.hostname or ""
    if parts.port:
        shown_netloc += f":{parts.port}"
    if parts.username:
        shown_netloc = f"{quote(parts.username)}@{shown_netloc}"
    return url, urlunsplit((parts.scheme, shown_netloc, parts.path or "/0", "", ""))


class _Keys:
    """The key names of one session under a prefix."""

    def __init__(self, prefix: str, session_id: str) -> None:
        base = f"{prefix}:{{{session_id}}}"
        self.meta = f"{base}:meta"
        self.records = f"{base}:records"
        self.lease = f"{base}:lease"
        self.artifacts = f"{base}:artifacts"
        self.backup = f"{base}:backup:"
        self.sessions = f"{prefix}:sessions"
        self.version = f"{prefix}:version"


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{} \t\n"):
        raise ConfigError(f"prefix must be a non-empty str without braces or spaces, got {prefix!r}")
    return prefix


# ----------------------------------------------------------------------------- clients


class _Clients:
    """Clients (each with its connection pool) shared by the stores of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sync: dict[tuple[str, float], tuple[redis.Redis, int]] = {}
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, float], tuple[aredis.Redis, int]]
        ] = weakref.WeakKeyDictionary()

    def forget(self) -> list[object]:
        """Start over with no clients and a fresh lock (in a forked child); returns the clients dropped."""
        self._lock = threading.Lock()
        dropped: list[object] = [client for client, _ in self._sync.values()]
        dropped += [client for clients in self._async.values() for client, _ in clients.values()]
        self._sync, self._async = {}, weakref.WeakKeyDictionary()
        return dropped

    def acquire(self, url: str, timeout: float) -> redis.Redis:
        with self._lock:
            client, refs = self._sync.get((url, timeout), (None, 0))
            if client is None:
                client = redis.Redis.from_url(
                    url,
                    socket_connect_timeout=timeout,
                    socket_timeout=max(timeout, 30.0),
                    retry=redis.retry.Retry(NoBackoff(), 0),  # ours retries, and knows when a write landed
                )
            self._sync[(url, timeout)] = (client, refs + 1)
            return client

    def release(self, client: redis.Redis) -> None:
        with self._lock:
            for key, (c, refs) in list(self._sync.items()):
                if c is client:
                    if refs > 1:
                        self._sync[key] = (c, refs - 1)
                        return
                    del self._sync[key]
                    break
            else:
                return
        client.close()

    def aacquire(self, url: str, timeout: float) -> aredis.Redis:
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._async.setdefault(loop, {})
            client, refs = clients.get((url, timeout), (None, 0))
            if client is None:
                client = aredis.Redis.from_url(
                    url,
                    socket_connect_timeout=timeout,
                    socket_timeout=max(timeout, 30.0),
                    retry=aredis.retry.Retry(NoBackoff(), 0),
                )
            clients[(url, timeout)] = (client, refs + 1)
            return client

    async def arelease(self, client: aredis.Redis) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._async.get(loop, {})
            for key, (c, refs) in list(clients.items()):
                if c is client:
                    if refs > 1:
                        clients[key] = (c, refs - 1)
                        return
                    del clients[key]
                    break
            else:
                return
        await client.aclose()


_CLIENTS = _Clients()
# What a forked child inherited, kept referenced: the parent's clients are never closed, nor finalized, there.
_INHERITED: list[object] = []


def _forget_in_child() -> None:
    """After a fork, in the child: drop the parent's clients; the child makes its own when it needs them.

    A socket inherited across ``fork()`` is the parent's too. redis-py's sync
    pools notice a fork themselves, its asyncio ones do not: two processes on
    one connection read each other's replies.
    """
    _INHERITED.extend(_CLIENTS.forget())


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)


def _drive(client: redis.Redis, op: _Op[_T]) -> _T:
    result: object = None
    try:
        while True:
            step = op.send(result)
            if isinstance(step, _Script):
                result = client.register_script(_SCRIPTS[step.name])(keys=step.keys, args=step.args)
            else:
                try:
                    result = client.execute_command(step.name, *step.args)  # type: ignore[no-untyped-call]
                except redis.ResponseError as exc:
                    if not step.refusable:
                        raise
                    result = exc
    except StopIteration as stop:
        return cast(_T, stop.value)


async def _adrive(client: aredis.Redis, op: _Op[_T]) -> _T:
    result: object = None
    try:
        while True:
            step = op.send(result)
            if isinstance(step, _Script):
                result = await client.register_script(_SCRIPTS[step.name])(keys=step.keys, args=step.args)
            else:
                try:
                    result = await client.execute_command(step.name, *step.args)  # type: ignore[no-untyped-call]
                except redis.ResponseError as exc:
                    if not step.refusable:
                        raise
                    result = exc
    except StopIteration as stop:
        return cast(_T, stop.value)


def _version_op(keys: _Keys, location: str, prefix: str) -> _Op[int]:
    """The key layout's version; raises `StoreNotInitializedError` when it was never set.

    ``location`` is the server's URL without password (and with ``?prefix=``), for the command to run.
    """
    raw = yield _Cmd("GET", (keys.version,))
    if raw is None:
        raise StoreNotInitializedError(
            f"{location} holds no agentcontext data under prefix {prefix!r}; set it up once with "
            f"`agentcontext db init '{location}'` (a Redis server without persistence loses it, sessions "
            "included, at every restart, and one with an allkeys-* maxmemory-policy may evict it)"
        )
    version = int(cast(bytes, raw))
    if version > KEYS_VERSION:
        raise StoreError(
            f"{location} uses agentcontext key layout {version}, newer than this library's {KEYS_VERSION}; "
            "upgrade agentcontext"
        )
    return version


def _eviction_op(server: str) -> _Op[str | None]:
    """Why this server may evict a session's keys (None when it cannot), from ``INFO memory``.

    ``INFO`` answers where ``CONFIG`` is disabled, as on most managed servers. Under an ``allkeys-*``
    policy a full server evicts any key; a session that lost its records with its meta and its listing
    leaves no trace to tell it from one never written (measured: 62 of 158 sessions reopened empty under
    ``allkeys-random``). ``volatile-*`` policies evict only keys with a TTL, which no record key has.
    """
    info = yield _Cmd("INFO", ("memory",), refusable=True)  # refused to a user without @dangerous: unknown
    memory = cast("dict[str, object]", info) if isinstance(info, dict) else {}
    policy = str(memory.get("maxmemory_policy", ""))
    limit = memory.get("maxmemory", 0)
    if not policy.startswith("allkeys") or not isinstance(limit, int) or limit <= 0:
        return None
    return (
        f"{server} has maxmemory-policy {policy} with maxmemory {limit:,} bytes: when it is full it evicts any "
        "key, a session's records included, and a session that lost all its keys cannot tell it was ever "
        "written; set maxmemory-policy noeviction (or a volatile-* policy: agentcontext puts no expiry on "
        "records), or maxmemory 0"
    )


def _keys_lost(location: str, last: int) -> StoreError:
    """The error for a session missing one of its keys: ``last`` is -1 when its meta is gone, else the
    last seq its meta names while its records are gone."""
    if last < 0:
        what = "its meta hash (last seq, created) is gone while its records or its listing are there"
    else:
        what = f"its meta hash says {last + 1} records were written but its records hash is gone"
    return StoreError(
        f"{location}: the session is damaged: {what}. Redis evicts keys under an allkeys-* maxmemory-policy "
        "(or they were deleted by hand). Nothing was written and the session was not started over; set "
        "maxmemory-policy to noeviction (`agentcontext db init` checks it), then restore the keys from a "
        "backup or delete the session"
    )


def _map_error(location: str, exc: redis.RedisError) -> StoreError:
    return StoreError(f"{location}: {type(exc).__name__}: {exc}")


def _int_seq(record: Mapping[str, JSONValue]) -> int:
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise StoreError(f"a record to store needs an integer seq, got {seq!r}")
    return seq


def _ms(value: object) -> datetime | None:
    if value is None:
        return None
    try:
        millis = float(cast("bytes | float", value))
    except (TypeError, ValueError):
        return None
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
