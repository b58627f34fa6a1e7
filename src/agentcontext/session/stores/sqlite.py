"""`SQLiteStore`: sessions in a SQLite database (stdlib ``sqlite3``, WAL mode).

Many sessions share one database file, one row per record::

    CREATE TABLE records (session_id TEXT, seq INTEGER, type TEXT, body TEXT,
                          PRIMARY KEY (session_id, seq))

(an ordinary rowid table: ``WITHOUT ROWID`` stores large rows badly, and a
record body is often kilobytes of tool output)

``body`` is the record's JSON, exactly the line the JSONL store would write,
so ``SELECT body FROM records`` piped to ``jq`` reads the same.

Concurrency is optimistic: an append runs in a ``BEGIN IMMEDIATE`` transaction
that checks the session's last seq against ``expected_seq`` before inserting,
so of two writers appending on the same stale state one wins and the other
gets `ConcurrencyError`, never a silent interleaving. Several processes may
read and write the same database; WAL mode lets readers run during a write.

The fsync policy maps onto ``PRAGMA synchronous``: ``"always"`` is ``FULL``
(each commit is synced), ``"interval"`` is ``NORMAL`` (WAL syncs at
checkpoints: a power loss can lose the latest commits, a crash cannot) and
``"never"`` is ``OFF``.

A ``leases`` table holds the session's lease (`SupportsLease`), with its
expiry in wall-clock seconds (the processes sharing a SQLite file share a
clock). `SQLiteDatabase` lists, deletes and prunes the sessions of a file.

The store writes only to a database it created or that already holds its
``records`` table: a file that is not a SQLite database (an empty one
included), or someone else's database, raises `NotASessionError` and is left
as it was (``agentcontext db init`` adds the tables to a database on purpose).
``read_only=True`` opens with ``mode=ro``, and on read-only media (where SQLite
cannot make its ``-shm`` file) with ``immutable=1``. One store may be used from
several threads (the connection is made with ``check_same_thread=False`` and
every use of it holds the store's lock), as a `Session` shared between threads
needs.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..._serde import RecordDecodeError, dumps, loads
from ...artifacts import ArtifactStore, FileArtifactStore
from ...exceptions import ConcurrencyError, ConfigError, NotASessionError, StoreError
from ...messages import JSONValue
from ._base import (
    CorruptRecordWarning,
    FsyncPolicy,
    SessionInfo,
    SessionNotFoundError,
    StoredRecord,
    StorePathError,
    StorePermissionError,
    WarningLimiter,
    check_expected_seq,
    check_fsync,
    check_lease,
)

__all__ = ["SQLiteDatabase", "SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS records_backup (
    session_id TEXT NOT NULL,
    backup INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, backup, seq)
);
CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
_SYNCHRONOUS = {"always": "FULL", "interval": "NORMAL", "never": "OFF"}
_MAGIC = b"SQLite format 3\x00"
_COLUMNS = {"session_id", "seq", "type", "body"}
_FETCH = 256
"""Rows a load fetches per turn of the store's lock."""
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class SQLiteStore:
    """One session inside a SQLite database file (see the module docstring).

    Args:
        path: the database file; created (with missing parent directories) when
            the session is created.
        session_id: which session of the database this store reads and writes.
            Default ``"default"``.
        fsync: the durability policy (`FsyncPolicy`), mapped to ``PRAGMA synchronous``.
        read_only: open the database read-only (``mode=ro``).
        timeout: seconds to wait for another writer's transaction; default 5.0.

    The constructor does no I/O; `open` does.
    """

    shared = True
    """Several processes may write one session here: a `Session` catches up with the others' records
    before each step and holds the session's lease while it prepares."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        session_id: str = "default",
        fsync: FsyncPolicy = "always",
        read_only: bool = False,
        timeout: float = 5.0,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise ConfigError(f"path must be a str or a path, got {type(path).__name__}")
        if not isinstance(session_id, str) or not session_id:
            raise ConfigError(f"session_id must be a non-empty str, got {session_id!r}")
        check_fsync(fsync, 1.0)
        self.path = Path(path).absolute()
        self.session_id = session_id
        self.fsync: FsyncPolicy = fsync
        self.timeout = timeout
        self._read_only = read_only
        self._db: sqlite3.Connection | None = None
        self._last_seq = -1
        # The connection is shared by the threads of a session: one of them uses it at a time.
        self._lock = threading.RLock()

    @property
    def location(self) -> str:
        """``<path>#<session_id>``."""
        return f"{self.path}#{self.session_id}"

    @property
    def read_only(self) -> bool:
        """True when opened read-only."""
        return self._read_only

    def open(self, *, create: bool = True) -> None:
        """Connect, check the database is ours, set WAL mode and the sync level, create the tables.

        See `SessionStore.open`.
        """
        with self._lock:
            if self._db is None:
                self._open(create)

    def _open(self, create: bool) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
            if self._read_only or not create:
                raise SessionNotFoundError(f"no session database at {str(self.path)!r}") from None
        except OSError as exc:
            raise self._error("open", exc) from exc
        if st is not None and not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise StorePathError(
                f"{str(self.path)!r} is {kind}; a SQLite session store needs a database file"
            )
        if st is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._error("create the directory for", exc) from exc
        else:
            self._check_existing()
        try:
            if self._read_only:
                db = self._connect_read_only()
            else:
                db = sqlite3.connect(
                    self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
                )
                try:
                    if st is not None:
                        self._check_tables(db)  # before anything (WAL mode included) writes to the file
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute(f"PRAGMA synchronous={_SYNCHRONOUS[self.fsync]}")
                    db.executescript(_SCHEMA)
                    if st is None:
                        os.chmod(
                            self.path, 0o600
                        )  # conversations are private: owner-only, whatever the umask
                except BaseException:
                    db.close()
                    raise
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except (sqlite3.Error, OSError) as exc:
            raise self._error("open", exc) from exc
        self._db = db
        if self._read_only or not create:
            if not self._has_session():
                self.close()
                raise SessionNotFoundError(f"no session {self.session_id!r} in {str(self.path)!r}")

    def _check_existing(self) -> None:
        """An existing file: a SQLite database, that this store may open as asked."""
        self._check_magic()
        if not self._read_only and _read_only_fs(self.path):
            raise self._error("open for writing", OSError(errno.EROFS, os.strerror(errno.EROFS)))
        if not os.access(self.path, os.R_OK | (0 if self._read_only else os.W_OK)):
            raise self._error("open", PermissionError(errno.EACCES, "permission denied"))

    def _check_magic(self) -> None:
        """Refuse a file that is not a SQLite database (an empty file included): it is left as it was."""
        try:
            with open(self.path, "rb") as handle:
                head = handle.read(len(_MAGIC))
        except OSError as exc:
            raise self._error("open", exc) from exc
        if head != _MAGIC:
            what = "an empty file" if not head else "not a SQLite database"
            raise NotASessionError(
                f"{str(self.path)!r} is {what}, not a SQLite database of sessions; it was left untouched. "
                "Pass the path of a session database, or a new path"
            )

    def _check_tables(self, db: sqlite3.Connection) -> None:
        """Refuse someone else's database: one with tables, but not agentcontext's ``records``."""
        tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        if not tables:
            return  # an empty database: nothing in it to take over
        if "records" in tables:
            columns = {r[1] for r in db.execute("PRAGMA table_info(records)")}
            if _COLUMNS <= columns:
                return
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise NotASessionError(
            f"{str(self.path)!r} is a SQLite database without agentcontext's tables (it holds {shown}); it was "
            f"left untouched. To keep sessions in it, add them on purpose: `agentcontext db init "
            f"sqlite:///{self.path}`"
        )

    def _connect_read_only(self) -> sqlite3.Connection:
        """``mode=ro``; on read-only media, where SQLite cannot create the WAL index, ``immutable=1``."""
        uri = self.path.as_uri()
        db = sqlite3.connect(
            f"{uri}?mode=ro", uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return db
        except sqlite3.OperationalError:
            db.close()
            if not _read_only_fs(self.path) and os.access(self.path.parent, os.W_OK):
                raise
        # Nothing can change a file on read-only media: SQLite may skip locking and the WAL index.
        return sqlite3.connect(
            f"{uri}?mode=ro&immutable=1",
            uri=True,
            timeout=self.timeout,
            isolation_level=None,
            check_same_thread=False,
        )

    def load(self, after: int = -1) -> Iterator[StoredRecord]:
        """The session's rows after seq ``after``, in seq order (an index range: O(rows read)).

        Rows whose body is not a JSON object are skipped with a warning. Rows are
        fetched a few hundred at a time under the store's lock, so another thread
        may use the store between them.
        """
        limiter = WarningLimiter(CorruptRecordWarning)
        self._last_seq = max(after, -1)
        last = after
        try:
            while True:
                with self._lock:
                    db = self._conn()
                    try:
                        rows = db.execute(
                            "SELECT seq, body FROM records WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                            (self.session_id, last, _FETCH),
                        ).fetchall()
                    except sqlite3.Error as exc:
                        raise self._error("read", exc) from exc
                for seq, body in rows:
                    last = seq
                    self._last_seq = max(self._last_seq, seq)
                    where = f"seq {seq}"
                    try:
                        data = loads(body, where=where)
                    except RecordDecodeError as exc:
                        limiter.warn(f"{self.location}: {exc.reason} at {where}; the record is skipped")
                        continue
                    yield StoredRecord(where, data)
                if len(rows) < _FETCH:
                    return
        finally:
            limiter.finish(self.location)

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Insert ``records`` in one transaction, after checking the last seq (optimistic concurrency)."""
        with self._lock:
            self._append(records, expected_seq)

    def _append(self, records: Sequence[Mapping[str, JSONValue]], expected_seq: int) -> None:
        db = self._writable()
        rows = [(self.session_id, r.get("seq"), str(r.get("type")), dumps(r)) for r in records]
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error("start a write transaction in", exc) from exc
        try:
            # Read the real last seq inside the write lock: another process may have appended.
            (last,) = db.execute(
                "SELECT COALESCE(MAX(seq), -1) FROM records WHERE session_id = ?", (self.session_id,)
            ).fetchone()
            check_expected_seq(self.location, expected_seq, last, records)
            db.executemany("INSERT INTO records (session_id, seq, type, body) VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            db.execute("ROLLBACK")
            raise ConcurrencyError(
                f"{self.location}: seq {expected_seq} was taken by another writer"
            ) from exc
        except (sqlite3.Error, StoreError) as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, StoreError):
                raise
            raise self._error("append to", exc) from exc
        if records:
            self._last_seq = expected_seq + len(records) - 1

    def replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        """Move the session's rows to ``records_backup`` and insert ``records``, in one transaction."""
        with self._lock:
            return self._replace(records)

    def _replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        db = self._writable()
        rows = [(self.session_id, r.get("seq"), str(r.get("type")), dumps(r)) for r in records]
        try:
            db.execute("BEGIN IMMEDIATE")
            (backup,) = db.execute(
                "SELECT COALESCE(MAX(backup), 0) + 1 FROM records_backup WHERE session_id = ?",
                (self.session_id,),
            ).fetchone()
            db.execute(
                "INSERT INTO records_backup SELECT session_id, ?, seq, type, body FROM records WHERE session_id = ?",
                (backup, self.session_id),
            )
            db.execute("DELETE FROM records WHERE session_id = ?", (self.session_id,))
            db.executemany("INSERT INTO records (session_id, seq, type, body) VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise self._error("rewrite", exc) from exc
        seqs = [r.get("seq") for r in records]
        self._last_seq = max((s for s in seqs if isinstance(s, int)), default=-1)
        return f"{self.location} (table records_backup, backup {backup})"

    def acquire_lease(self, owner: str, ttl: float) -> bool:
        """Take or renew the session's lease in the ``leases`` table (see `SupportsLease`)."""
        check_lease(owner, ttl)
        with self._lock:
            return self._acquire_lease(owner, ttl)

    def _acquire_lease(self, owner: str, ttl: float) -> bool:
        db = self._writable()
        now = time.time()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                cursor = db.execute(
                    "INSERT INTO leases (session_id, owner, expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, "
                    "expires_at = excluded.expires_at WHERE leases.owner = excluded.owner OR leases.expires_at <= ?",
                    (self.session_id, owner, now + ttl, now),
                )
                taken = cursor.rowcount == 1
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._error("take the lease in", exc) from exc
        return taken

    def release_lease(self, owner: str) -> bool:
        """Give the lease up (see `SupportsLease`)."""
        with self._lock:
            db = self._writable()
            try:
                cursor = db.execute(
                    "DELETE FROM leases WHERE session_id = ? AND owner = ? AND expires_at > ?",
                    (self.session_id, owner, time.time()),
                )
            except sqlite3.Error as exc:
                raise self._error("release the lease in", exc) from exc
            return cursor.rowcount == 1

    def default_artifacts(self) -> ArtifactStore:
        """Artifacts in ``<stem>.artifacts/<session id>/`` next to the database."""
        return FileArtifactStore(_artifact_dir(self.path, self.session_id))

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                with contextlib.suppress(sqlite3.Error):
                    db.close()

    def __repr__(self) -> str:
        mode = "read-only" if self._read_only else f"fsync={self.fsync!r}"
        return f"SQLiteStore({str(self.path)!r}, session_id={self.session_id!r}, {mode})"

    # ------------------------------------------------------------------ internals

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"{self.location} is not open; call open() first (or the session was closed)")
        return self._db

    def _writable(self) -> sqlite3.Connection:
        if self._read_only:
            raise StoreError(f"{self.location} was opened read-only; open it without read_only=True to write")
        return self._conn()

    def _has_session(self) -> bool:
        try:
            row = (
                self._conn()
                .execute("SELECT 1 FROM records WHERE session_id = ? LIMIT 1", (self.session_id,))
                .fetchone()
            )
        except sqlite3.OperationalError:  # no table yet: an empty or foreign database
            return False
        return row is not None

    def _error(self, action: str, exc: BaseException) -> StoreError:
        where = str(self.path)
        if (isinstance(exc, OSError) and exc.errno == errno.EROFS) or (
            isinstance(exc, sqlite3.OperationalError) and _read_only_fs(self.path)
        ):
            return StorePathError(
                f"cannot {action} {where!r}: it is on a read-only file system; open it with read_only=True "
                "to read it"
            )
        if isinstance(exc, PermissionError):
            return StorePermissionError(
                f"permission denied to {action} {where!r}: check the owner and mode (ls -l {where!r})"
            )
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return StoreError(
                f"{where!r} is not a SQLite database ({exc}); pass the path of a session database"
            )
        if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc).replace(" ", ""):
            return StorePermissionError(f"cannot {action} {where!r}: the database is read-only ({exc})")
        return StoreError(f"cannot {action} {where!r}: {exc}")


def _read_only_fs(path: Path) -> bool:
    """True when ``path`` (or, for a missing file, its directory) is on a file system mounted read-only."""
    probe = path if path.exists() else path.parent
    try:
        return bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def _artifact_dir(path: Path, session_id: str) -> Path:
    name = session_id
    if not _SAFE_ID.fullmatch(name) or name in (".", ".."):
        # A session id is the caller's string: never let it shape a path.
        name = "s-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return path.with_name(path.stem + ".artifacts") / name


def _parse_ts(body: str) -> datetime | None:
    try:
        ts = loads(body, where="").get("ts")
    except RecordDecodeError:
        return None
    if not isinstance(ts, str):
        return None
    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


class SQLiteDatabase:
    """The sessions of one SQLite file, for ``agentcontext db`` (see `SessionDatabase`).

    SQLite keeps no per-session times of its own: a session's creation and last
    update are the ``ts`` of its first and last records.

    Args:
        path: the database file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()
        self._db: sqlite3.Connection | None = None

    @property
    def location(self) -> str:
        """The file's path."""
        return str(self.path)

    def init(self) -> list[str]:
        """Create the tables (a session store also creates them when it creates a session)."""
        existed = self.path.exists()
        db = self._conn(create=True)
        before = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        try:
            db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot create the tables in {str(self.path)!r}: {exc}") from exc
        if not existed:
            os.chmod(self.path, 0o600)
        added = sorted({"records", "records_backup", "leases"} - before)
        return [f"created table {name}" for name in added]

    def sessions(self) -> list[SessionInfo]:
        """Every session in the file, oldest update first."""
        db = self._conn()
        out = []
        try:
            groups = db.execute(
                "SELECT session_id, COUNT(*), MIN(seq), MAX(seq) FROM records GROUP BY session_id"
            ).fetchall()
            for session_id, count, first, last in groups:
                bodies = dict(
                    db.execute(
                        "SELECT seq, body FROM records WHERE session_id = ? AND seq IN (?, ?)",
                        (session_id, first, last),
                    ).fetchall()
                )
                out.append(
                    SessionInfo(
                        session_id=session_id,
                        records=count,
                        created=_parse_ts(bodies.get(first, "")),
                        updated=_parse_ts(bodies.get(last, "")),
                    )
                )
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise StoreError(f"cannot read {str(self.path)!r}: {exc}") from exc
        epoch = datetime.min.replace(tzinfo=timezone.utc)
        return sorted(out, key=lambda i: (i.updated or epoch, i.session_id))

    def delete(self, session_id: str) -> bool:
        """Delete the session's records, backups, lease and artifact directory."""
        db = self._conn()
        try:
            db.execute("BEGIN IMMEDIATE")
            cursor = db.execute("DELETE FROM records WHERE session_id = ?", (session_id,))
            found = cursor.rowcount > 0
            db.execute("DELETE FROM records_backup WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM leases WHERE session_id = ?", (session_id,))
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if "no such table" in str(exc):
                return False
            raise StoreError(f"cannot delete session {session_id!r} from {str(self.path)!r}: {exc}") from exc
        shutil.rmtree(_artifact_dir(self.path, session_id), ignore_errors=True)
        return found

    def prune(self, older_than: timedelta) -> list[str]:
        """Delete the sessions whose last record is older than ``older_than``."""
        cutoff = datetime.now(timezone.utc) - older_than
        gone = [i.session_id for i in self.sessions() if i.updated is not None and i.updated < cutoff]
        return [sid for sid in gone if self.delete(sid)]

    def close(self) -> None:
        """Close the connection; idempotent."""
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _conn(self, *, create: bool = False) -> sqlite3.Connection:
        if self._db is None:
            if not create and not self.path.is_file():
                raise SessionNotFoundError(f"no SQLite database at {str(self.path)!r}")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
            except (sqlite3.Error, OSError) as exc:
                raise StoreError(f"cannot open {str(self.path)!r}: {exc}") from exc
            self._db = db
        return self._db

    def __repr__(self) -> str:
        return f"SQLiteDatabase({str(self.path)!r})"
