"""Session locations as URLs: `open_store` and `open_database` pick the store for a location.

=====================================================  =====================
location                                               store
=====================================================  =====================
``runs/task-42.jsonl`` (a path: anything without ://)  `JSONLStore`
``sqlite:///runs.db?session=ID``                       `SQLiteStore`
``sqlite:////abs/path/runs.db?session=ID``             (four slashes: absolute)
``postgresql://user@host:5432/db?session=ID``          `PostgresStore`
``redis://host:6379/0?session=ID``                     `RedisStore`
=====================================================  =====================

PostgreSQL URLs also take ``schema=`` (default ``public``) and any libpq
parameter (``sslmode=require``...); Redis URLs take ``prefix=`` (default
``agentcontext``), and ``rediss://`` (TLS) and ``unix:///path.sock`` work too.
The database clients are imported only when such a URL is opened.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ...exceptions import ConfigError
from ._base import SessionDatabase, SessionStore

__all__ = ["Location", "open_database", "open_store", "parse_location"]

_FORMS = (
    "a file path (JSONL), sqlite:///path.db?session=ID, postgresql://user@host/db?session=ID "
    "or redis://host:6379/0?session=ID"
)
_OURS = {"sqlite": {"session"}, "postgres": {"session", "schema"}, "redis": {"session", "prefix"}}


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed session location."""

    kind: str
    """``"jsonl"``, ``"sqlite"``, ``"postgres"`` or ``"redis"``."""
    target: str
    """The path, or the URL for the database client (agentcontext's own parameters removed)."""
    params: dict[str, str]
    """agentcontext's parameters from the URL: ``session``, ``schema``, ``prefix``."""

    @property
    def session(self) -> str | None:
        """The ``?session=`` parameter, if any."""
        return self.params.get("session")


_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def _jsonl(path: str) -> Location:
    """A path names a JSON Lines session; one named like a SQLite database is refused, not written as JSONL."""
    if path.lower().endswith(_SQLITE_SUFFIXES):
        raise ConfigError(
            f"{path!r} looks like a SQLite database, but a path names a JSON Lines session: open a SQLite "
            f"session by URL, sqlite:///{path}?session=ID (or name the file .jsonl)"
        )
    return Location("jsonl", path, {})


def parse_location(location: str | os.PathLike[str]) -> Location:
    """Tell what kind of store ``location`` names; raises `ConfigError` for an unknown scheme."""
    if isinstance(location, os.PathLike):
        return _jsonl(os.fspath(location))
    if not isinstance(location, str) or not location:
        raise ConfigError(f"a session location is {_FORMS}; got {location!r}")
    if "://" not in location:
        return _jsonl(location)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        kind = "sqlite"
    elif scheme in ("postgresql", "postgres"):
        kind = "postgres"
    elif scheme in ("redis", "rediss", "unix"):
        kind = "redis"
    elif scheme == "file":
        return Location("jsonl", unquote(parts.path), {})
    else:
        raise ConfigError(f"unknown session location scheme {parts.scheme + '://'!r}: use {_FORMS}")
    params, rest = _split_query(parts.query, kind, location)
    if kind == "sqlite":
        if parts.netloc:
            raise ConfigError(
                f"a SQLite URL has no host: sqlite:///relative.db or sqlite:////absolute.db, got {_shown(location)!r}"
            )
        if rest:
            names = ", ".join(sorted({k for k, _ in rest}))
            raise ConfigError(
                f"unknown parameter(s) {names} in {_shown(location)!r}; a SQLite URL takes session="
            )
        path = unquote(parts.path[1:])  # SQLAlchemy's form: three slashes then the path
        if not path:
            raise ConfigError(f"{_shown(location)!r} names no database file: sqlite:///runs.db?session=ID")
        return Location("sqlite", path, params)
    target = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), ""))
    return Location(kind, target, params)


def _split_query(query: str, kind: str, location: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """agentcontext's own parameters, and the rest (for the database client)."""
    params: dict[str, str] = {}
    rest = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _OURS[kind]:
            rest.append((key, value))
        elif key in params:
            raise ConfigError(f"{key}= appears twice in {_shown(location)!r}")
        elif not value:
            raise ConfigError(f"{key}= is empty in {_shown(location)!r}")
        else:
            params[key] = value
    return params, rest


def open_store(location: str | os.PathLike[str], **options: object) -> SessionStore:
    """The store for a session location (see the module docstring); nothing is opened yet.

    Args:
        location: a path (JSONL) or a URL; database URLs need ``?session=ID``.
        **options: passed to the store's constructor (``read_only=True``,
            ``fsync="never"``, ``retry_timeout=5``...); an option the store does
            not take is a `ConfigError` naming the ones it does.

    Raises:
        ConfigError: an unknown scheme, a missing ``session=``, or an option the store does not take.
        MissingDependencyError: the database client is not installed (the message has the pip command).
    """
    loc = parse_location(location)
    if loc.kind == "jsonl":
        from .jsonl import JSONLStore

        return _build(JSONLStore, loc.target, {}, options, location)
    if loc.session is None:
        raise ConfigError(f"{_shown(str(location))!r} names no session: add ?session=ID to the URL")
    if loc.kind == "sqlite":
        from .sqlite import SQLiteStore

        return _build(SQLiteStore, Path(loc.target), {"session_id": loc.session}, options, location)
    if loc.kind == "postgres":
        from .postgres import PostgresStore

        fixed: dict[str, object] = {"session_id": loc.session}
        if "schema" in loc.params:
            fixed["schema"] = loc.params["schema"]
        return _build(PostgresStore, loc.target, fixed, options, location)
    from .redis import RedisStore

    fixed = {"session_id": loc.session}
    if "prefix" in loc.params:
        fixed["prefix"] = loc.params["prefix"]
    return _build(RedisStore, loc.target, fixed, options, location)


def open_database(location: str) -> SessionDatabase:
    """The administration side (`SessionDatabase`) of a SQLite, PostgreSQL or Redis location.

    A ``session=`` parameter is allowed (a session's own URL) and ignored here.

    Raises:
        ConfigError: a JSONL path (one file is one session: delete the file) or an unknown scheme.
    """
    loc = parse_location(location)
    if loc.kind == "jsonl":
        raise ConfigError(
            f"{str(location)!r} is a path, and a JSONL session is one file: list, delete or prune the files "
            "themselves; `agentcontext db` works on sqlite:///, postgresql:// and redis:// URLs"
        )
    if loc.kind == "sqlite":
        from .sqlite import SQLiteDatabase

        return SQLiteDatabase(loc.target)
    if loc.kind == "postgres":
        from .postgres import PostgresDatabase

        return PostgresDatabase(loc.target, schema=loc.params.get("schema", "public"))
    from .redis import RedisDatabase

    return RedisDatabase(loc.target, prefix=loc.params.get("prefix", "agentcontext"))


def _build(
    cls: Callable[..., SessionStore],
    target: object,
    fixed: dict[str, object],
    options: dict[str, object],
    location: object,
) -> SessionStore:
    accepted = [
        name
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in fixed
    ]
    for name in options:
        if name in fixed:
            raise ConfigError(f"{name} is already given by the URL {_shown(str(location))!r}; pass it once")
        if name not in accepted:
            raise ConfigError(
                f"{getattr(cls, '__name__', cls)} takes no option {name!r}; it takes {', '.join(accepted)}"
            )
    return cls(target, **fixed, **options)


def _shown(location: str) -> str:
    """``location`` without a password, for messages."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if parts.password is None:
        return location
    netloc = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:***@{netloc}", parts.path, parts.query, parts.fragment))
