"""`JSONLStore`: one session per JSON Lines file, the embedded default.

One record per line, readable by people and by ``jq``. Compared with Kimi
CLI's context file, whose design this takes up:

- **Every append is written before it returns**: one ``write`` of the whole
  batch on a file opened with ``O_APPEND`` (no user-space buffer to lose), then
  an ``fsync`` per the policy (`FsyncPolicy`; Kimi never fsyncs). A process
  killed at any moment loses at most the append in flight.
- **A batch is all or nothing.** The first line of a batch of several
  records (a tool call and its result, a D-Mail's revert and its message)
  carries ``"batch": n``; a restore that finds fewer than ``n`` whole lines
  after it (a crash cut the ``write``) skips the whole batch as torn, rather
  than applying its first records (a call without its result, a revert
  without its D-Mail). A reader following the writer waits for the whole
  batch.
- **A damaged line never stops a restore.** Kimi's restore aborted on the
  first bad line. Here a torn or corrupt line is skipped with a
  `CorruptRecordWarning` naming its line number, and the rest loads. A torn
  *last* line (an append cut short by a crash) is moved aside, to
  ``<file>.torn``, before the next append, so new records never fuse with it.
- **Only its own files.** A store writes only to a file it created or whose
  first line is one of its records; anything else (a conversation, an empty
  file, garbage, a Kimi CLI context file not yet migrated) is refused with
  `NotASessionError` before anything is created or written, and is left byte
  for byte as it was, mode included. A headerless Kimi CLI file is rewritten
  only when asked (``migrate=True``): the original stays as a backup.
- **One writer at a time.** An exclusive ``flock`` on ``<file>.lock`` beside
  the *resolved* file (a symlink, a relative path or ``..`` name the same
  lock) and one on the file itself (a hard link shares its inode), held while
  the store is open for writing, make a second writer fail with
  `SessionLockedError` naming the holder's pid, at once or after
  ``lock_timeout`` seconds of waiting. The kernel releases them when the holder
  dies, so a crash never leaves a stale lock. Readers (``read_only=True``)
  take no lock.
- **Side files are never written through links.** The lock, ``.torn``,
  backup and temporary files sit in the session file's own directory and are
  opened with ``O_NOFOLLOW`` (``O_EXCL`` where created), so a symbolic link
  planted at one of those names is refused, never written through.
- **Clear errors**: a missing file, a directory in its place or a permission
  problem raise `SessionNotFoundError`, `StorePathError` and
  `StorePermissionError`, each naming the path.
- **Catching up is O(new).** The store remembers where its last read ended,
  so ``load(after=<the last seq read>)`` (a reader following a writer) reads
  only the lines appended since.
- **A lease needs no file.** The writer's lock already keeps every other
  process out, so the lease (`SupportsLease`) only arbitrates between owners
  sharing this store object, in memory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from ..._serde import RecordDecodeError, dumps, loads
from ...artifacts import ArtifactStore, FileArtifactStore
from ...exceptions import ConfigError, NotASessionError, SessionLockedError, StoreError
from ...messages import JSONValue
from ._base import (
    CorruptRecordWarning,
    FsyncPolicy,
    LocalLease,
    SessionNotFoundError,
    StoredRecord,
    StorePathError,
    StorePermissionError,
    WarningLimiter,
    check_expected_seq,
    check_fsync,
)

__all__ = ["JSONLStore"]

_FILE_MODE = 0o600
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_SNIFF_LINES = 64
"""How many lines a read-only open looks through for a record when the first line is damaged."""
_SNIFF_BYTES = 1 << 20
"""How much of a file is read to tell whose it is (a header line is ~150 bytes)."""


def _os_error(path: Path, action: str, exc: OSError) -> StoreError:
    """Map an OS error to the clearest store error, naming the path and how to fix it."""
    if isinstance(exc, PermissionError):
        return StorePermissionError(
            f"permission denied to {action} {str(path)!r}: {exc.strerror}; check the owner and mode "
            f"(ls -l {str(path.parent)!r}), or open the session read_only=True to read it"
        )
    if isinstance(exc, IsADirectoryError) or exc.errno == errno.EISDIR:
        return StorePathError(
            f"{str(path)!r} is a directory, not a session file; pass a file path such as "
            f"{str(path / 'session.jsonl')!r}"
        )
    if isinstance(exc, NotADirectoryError):
        return StorePathError(f"cannot {action} {str(path)!r}: a parent of it is a file, not a directory")
    if exc.errno == errno.EROFS:
        return StorePathError(
            f"cannot {action} {str(path)!r}: it is on a read-only file system; open the session "
            "read_only=True to read it"
        )
    if exc.errno == errno.ELOOP:
        return StorePathError(
            f"cannot {action} {str(path)!r}: it is a symbolic link (or a loop of them), and a session's "
            "lock, backup and .torn files are never written through links; remove the link"
        )
    return StoreError(f"cannot {action} {str(path)!r}: {exc}")


def _first_lines(path: Path, *, lines: int) -> tuple[int, list[bytes]]:
    """The file's size and its first ``lines`` lines (at most `_SNIFF_BYTES` in all)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        out: list[bytes] = []
        budget = _SNIFF_BYTES
        while len(out) < lines and budget > 0:
            line = handle.readline(budget)
            if not line:
                break
            budget -= len(line)
            out.append(line)
    return size, out


_BATCH = "batch"
"""The key the first line of a multi-record batch carries: how many lines the batch has (the store's framing,
taken off before a record is handed on)."""


def _batch_lines(records: Sequence[Mapping[str, JSONValue]]) -> bytes:
    """The lines of one append; the first of several says how many there are."""
    if len(records) > 1:
        records = [{**records[0], _BATCH: len(records)}, *records[1:]]
    return "".join(dumps(r) + "\n" for r in records).encode("utf-8")


class _Batch:
    """Records of a batch being read, held until its last line is read (see `_batch_lines`)."""

    def __init__(self, size: int, start: int, first_line: int) -> None:
        self.left = size
        self.size = size
        self.start = start
        """Byte offset of its first line."""
        self.first_line = first_line
        self.records: list[tuple[str, dict[str, JSONValue] | None]] = []

    def member(self, data: dict[str, JSONValue] | None, where: str) -> bool:
        """Take the batch's next line (None: a damaged one, which counts but is skipped); True when it
        was the last."""
        self.records.append((where, data))
        self.left -= 1
        return self.left <= 0

    def torn(self, path: object, last_line: int) -> str:
        """The warning for a batch that ends at ``last_line`` short of its size."""
        got = self.size - self.left
        return (
            f"{path}: lines {self.first_line}-{last_line} are {got} of the {self.size} records of one append "
            "that was interrupted; none of it is applied"
        )


Framed = list[tuple[str, dict[str, JSONValue] | None]]


def _frame(
    batch: _Batch | None,
    data: dict[str, JSONValue] | None,
    where: str,
    start: int,
    number: int,
    warn: Callable[[str], None],
    path: object,
) -> tuple[_Batch | None, Framed]:
    """One line through the batch framing (``data`` None: a damaged line, which counts in a batch):
    the batch still open, and the records now whole to hand on (a batch's once its last line is read)."""
    n = data.get(_BATCH) if data is not None else None
    if isinstance(n, int) and not isinstance(n, bool) and n > 1 and data is not None:
        if batch is not None:  # a batch cut short, then appended after: never applied
            warn(batch.torn(path, number - 1))
        data.pop(_BATCH)
        batch = _Batch(n, start, number)
    if batch is None:
        return None, [(where, data)]
    if batch.member(data, where):
        return None, batch.records
    return batch, []


def _is_record(data: Mapping[str, JSONValue]) -> bool:
    seq = data.get("seq")
    return (
        isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 and isinstance(data.get("type"), str)
    )


def _is_legacy(data: Mapping[str, JSONValue]) -> bool:
    # A version-0 (Kimi CLI context) line; an OpenAI conversation line looks the same.
    return "role" in data and "type" not in data


def _not_a_session(path: Path, why: str) -> NotASessionError:
    return NotASessionError(
        f"{str(path)!r} is not a session file ({why}); it was left untouched. To make a session of a "
        f"conversation, run `agentcontext import {str(path)!r} NEW.jsonl`; to start a new session, pass a new path"
    )


def legacy_error(path: str | Path) -> NotASessionError:
    """The refusal for a file without an agentcontext header whose lines look like messages."""
    return NotASessionError(
        f"{str(path)!r} is not a session file: it has no agentcontext header (it looks like a conversation "
        "in JSON Lines, or a Kimi CLI context file); it was left untouched. Make a session of a conversation "
        f"with `agentcontext import {str(path)!r} NEW.jsonl`; convert a Kimi CLI context file in place, "
        f"its original kept as a backup, with `agentcontext migrate {str(path)!r}` (Python: "
        "Session.open(path, migrate=True))"
    )


class JSONLStore:
    """A session as a JSON Lines file (see the module docstring).

    Args:
        path: the session file (``runs/task-42.jsonl``). Missing parent
            directories are created when the session is created. A symbolic
            link is followed once, at `open`: the lock, backups and artifacts
            sit beside the file it points to.
        fsync: when appends are forced to disk (`FsyncPolicy`); default
            ``"always"``, the safe choice: an agent step takes seconds, a flush
            about a millisecond.
        fsync_interval: seconds between flushes for ``fsync="interval"``; default 1.0.
        read_only: open for reading only: no lock, no writes, no repairs.
        lock_timeout: seconds `open` waits for another writer to release the
            session; default 0 (refuse at once). Cooperating processes that
            take turns on one session (open, append, close) pass a few seconds.
        migrate: accept a log of an older schema (a headerless Kimi CLI context
            file) for writing, so that the session rewrites it in the current
            schema (`Session.open` with ``migrate=True``); without it such a file
            is refused, untouched.

    The constructor does no I/O; `open` does.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 1.0,
        read_only: bool = False,
        lock_timeout: float = 0.0,
        migrate: bool = False,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise ConfigError(f"path must be a str or a path, got {type(path).__name__}")
        check_fsync(fsync, fsync_interval)
        if (
            isinstance(lock_timeout, bool)
            or not isinstance(lock_timeout, int | float)
            or not lock_timeout >= 0
        ):
            raise ConfigError(f"lock_timeout must be a number of seconds >= 0, got {lock_timeout!r}")
        self.path = Path(path).absolute()
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval = float(fsync_interval)
        self.lock_timeout = float(lock_timeout)
        self.migrate = bool(migrate)
        self._read_only = read_only
        self._real = self.path  # the file itself, symbolic links resolved at open()
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._legacy = False
        self._last_seq = -1
        self._size = 0
        self._torn_at: int | None = None
        self._needs_newline = False
        self._dirty = False
        self._last_sync = time.monotonic()
        self._opened = False
        # Where the last read stopped: after the last complete line, its line number and the highest seq.
        self._read_offset: int | None = None
        self._read_lines = 0
        self._read_seq = -1
        self._lease = LocalLease()

    # ------------------------------------------------------------------ protocol

    @property
    def location(self) -> str:
        """The file's path."""
        return str(self.path)

    @property
    def read_only(self) -> bool:
        """True when opened for reading only."""
        return self._read_only

    @property
    def lock_path(self) -> Path:
        """The lock file beside the session file (``<file>.lock``; beside the link's target for a link)."""
        return self._side(".lock")

    def open(self, *, create: bool = True) -> None:
        """Check the path and whose file it is, take the writer's locks, create the file if allowed.

        See `SessionStore.open`. An existing file must be this store's (its first
        line a record; for reading, a record among its first lines, or a
        headerless older-schema log); anything else raises `NotASessionError`
        before any lock file is made.
        """
        if self._opened:
            return
        self._real = self._resolve()
        try:
            st = os.stat(self._real)
        except FileNotFoundError:
            if self._read_only or not create:
                raise SessionNotFoundError(
                    f"no session file at {str(self.path)!r}"
                    + ("" if self._read_only else "; pass create=True to start a new session there")
                ) from None
            st = None
        except OSError as exc:
            raise _os_error(self.path, "open", exc) from exc
        if st is not None and not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise _os_error(self.path, "open", IsADirectoryError(errno.EISDIR, "is a directory"))
            raise StorePathError(f"{str(self.path)!r} is not a regular file; a session needs a plain file")
        if st is not None:
            self._check_owned()  # before any lock file: a refused file leaves no trace beside it
        if self._read_only:
            self._opened = True
            return
        if st is None:
            self._make_parents()
        deadline = time.monotonic() + self.lock_timeout
        self._lock(deadline)
        try:
            try:
                fd = os.open(self._real, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, _FILE_MODE)
            except OSError as exc:
                raise _os_error(self.path, "open for writing", exc) from exc
            try:
                # The file's own inode too: another name for it (a hard link) has its own lock file.
                self._wait_for(fd, deadline, self._inode_locked)
                self._check_owned()  # again, under the lock: the file may have changed meanwhile
                self._size = os.fstat(fd).st_size
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            self._unlock()
            raise
        self._fd = fd
        if st is None:
            self._sync_dir()
        self._opened = True

    def load(self, after: int = -1) -> Iterator[StoredRecord]:
        """The readable lines with a seq above ``after``, in order (see `SessionStore.load`).

        When ``after`` is the highest seq the previous load read, only the lines
        appended since are read (an incomplete last line is left for the next
        call: its writer may still be writing it). Otherwise the whole file is
        read and lines up to ``after`` are skipped.
        """
        if after >= 0 and after == self._read_seq and self._read_offset is not None:
            yield from self._load_from(self._read_offset)
            return
        yield from self._load_all(after)

    def _load_all(self, after: int) -> Iterator[StoredRecord]:
        limiter = WarningLimiter(CorruptRecordWarning)
        self._last_seq = -1
        self._torn_at = None
        self._needs_newline = False
        self._read_offset = None
        try:
            handle = open(self._real, "rb")  # closed in the finally below
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        offset = 0
        number = 0
        complete_end = 0
        batch: _Batch | None = None
        try:
            for line in handle:
                number += 1
                start = offset
                offset += len(line)
                complete = line.endswith(b"\n")
                if complete:
                    complete_end = offset
                # Our lines start with "{": test one byte before copying the line to strip it.
                if line[:1] != b"{" and not line.strip():
                    if not complete:
                        self._torn_at = start  # trailing blanks without a newline: harmless, tidy them
                    continue
                where = f"line {number}"
                data: dict[str, JSONValue] | None
                try:
                    data = loads(line, where=where)
                except RecordDecodeError as exc:
                    if not complete:
                        self._torn_at = start
                        limiter.warn(
                            f"{self.path}: {where} is incomplete ({len(line)} bytes, no newline): the last "
                            "append was interrupted; the line is skipped"
                        )
                        continue
                    limiter.warn(f"{self.path}: {exc.reason} at {where}; the line is skipped")
                    data = None
                if data is not None and not complete:
                    self._needs_newline = True
                    complete_end = offset  # a whole record, only its newline is missing
                batch, whole = _frame(batch, data, where, start, number, limiter.warn, self.path)
                yield from self._emit(whole, after)
            if batch is not None:
                # The file ends inside a batch: the append was cut, and none of it is applied. The
                # next append moves it aside, with a torn last line's bytes (`_repair_tail`).
                limiter.warn(batch.torn(self.path, number))
                self._torn_at = batch.start
                self._needs_newline = False
                complete_end, number, offset = batch.start, batch.first_line - 1, batch.start
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        finally:
            handle.close()
            limiter.finish(str(self.path))
        self._remember_read(complete_end, number if complete_end == offset else number - 1)

    def _emit(self, records: Framed, after: int) -> Iterator[StoredRecord]:
        """Hand on whole records (a batch once all of it is read), noting the highest seq."""
        for where, data in records:
            if data is None:
                continue
            seq = data.get("seq")
            number_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
            if number_seq is not None and number_seq > self._last_seq:
                self._last_seq = number_seq
            if after >= 0 and (number_seq is None or number_seq <= after):
                continue
            yield StoredRecord(where, data)

    def _load_from(self, start: int) -> Iterator[StoredRecord]:
        limiter = WarningLimiter(CorruptRecordWarning)
        try:
            handle = open(self._real, "rb")  # closed in the finally below
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        offset = start
        number = self._read_lines
        batch: _Batch | None = None
        try:
            handle.seek(start)
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # being written (or torn): read it once it is whole, or at the next full load
                number += 1
                offset += len(line)
                if line[:1] != b"{" and not line.strip():
                    continue
                where = f"line {number}"
                data: dict[str, JSONValue] | None
                try:
                    data = loads(line, where=where)
                except RecordDecodeError as exc:
                    limiter.warn(f"{self.path}: {exc.reason} at {where}; the line is skipped")
                    data = None
                batch, whole = _frame(batch, data, where, offset - len(line), number, limiter.warn, self.path)
                yield from self._emit(whole, -1)
            if batch is not None:  # the writer is still writing it: read it whole next time
                offset, number = batch.start, batch.first_line - 1
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        finally:
            handle.close()
            limiter.finish(str(self.path))
        self._remember_read(offset, number)

    def _remember_read(self, offset: int, lines: int) -> None:
        self._read_offset, self._read_lines, self._read_seq = offset, lines, self._last_seq

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Write ``records`` as lines in one ``write`` call, then fsync per the policy.

        On any failure (the write, or the fsync after it) the file is cut back
        to where it ended, so a failed append leaves no trace that a restore
        would read.
        """
        fd = self._writable_fd()
        if self._legacy:
            raise StoreError(
                f"{str(self.path)!r} holds a log of an older schema: it is migrated (replace()) before "
                "anything is appended"
            )
        check_expected_seq(self.location, expected_seq, self._last_seq, records)
        if not records:
            return
        self._check_still_there(fd)
        data = _batch_lines(records)
        self._repair_tail(fd)
        size = self._size
        read_to_end = self._read_offset == size
        self._write(fd, data)
        self._dirty = True
        if self.fsync == "always" or (
            self.fsync == "interval" and time.monotonic() - self._last_sync >= self.fsync_interval
        ):
            try:
                self._fsync(fd)
            except StoreError:
                # Not known to be on disk: take it back, so that an append the caller saw fail is
                # not found by the next restore either.
                with contextlib.suppress(StoreError):
                    self._cut(size)
                raise
        self._last_seq = expected_seq + len(records) - 1
        if read_to_end:  # the next catch-up load starts after what this store wrote itself
            self._remember_read(self._size, self._read_lines + len(records))

    def _check_still_there(self, fd: int) -> None:
        """Refuse to write when the file open here is no longer the one at the path (two ``stat`` calls).

        A clean-up job, ``rm`` or log rotation took it away: appends went to an
        unlinked file and were lost when the store closed, reported as written
        (the database stores refuse such writes too).
        """
        try:
            mine = os.fstat(fd)
            try:
                there: os.stat_result | None = os.stat(self._real)
            except FileNotFoundError:
                there = None
        except OSError as exc:
            raise _os_error(self.path, "check", exc) from exc
        if mine.st_nlink == 0 or there is None or (there.st_ino, there.st_dev) != (mine.st_ino, mine.st_dev):
            raise SessionNotFoundError(
                f"{str(self.path)!r}: the session file was deleted or moved while this store had it open; "
                "nothing was written. Open the session again (a new file there starts a new session)"
            )

    def replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        """Rewrite the file with ``records``; the old file stays as ``<stem>.bak-<n><suffix>``.

        The path holds either the old or the new content at every moment: the
        new file is written and fsynced under a temporary name (with the old
        file's mode), the old one is hard-linked to a backup name reserved with
        ``O_CREAT | O_EXCL`` (so the backup is the original, bytes and mode),
        then the new one is renamed over the path.
        """
        self._writable_fd()
        try:
            mode = stat.S_IMODE(os.stat(self._real).st_mode)
        except OSError as exc:
            raise _os_error(self.path, "rewrite", exc) from exc
        backup = self._reserve_backup()
        tmp = self._real.with_name(f".{self._real.name}.tmp-{os.getpid()}")
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, _FILE_MODE)
            except FileExistsError:
                with contextlib.suppress(OSError):
                    os.unlink(backup)
                raise StorePathError(
                    f"cannot rewrite {str(self.path)!r}: {str(tmp)!r} is in the way (a leftover of an "
                    "interrupted rewrite, or a symbolic link); it is never written through: remove it"
                ) from None
            try:
                os.fchmod(fd, mode)
                data = "".join(dumps(r) + "\n" for r in records).encode("utf-8")
                view = memoryview(data)
                written = 0
                while written < len(data):
                    written += os.write(fd, view[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.unlink(backup)  # the reserved name; a hard link (instant, atomic) takes it
                os.link(self._real, backup, follow_symlinks=False)
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    raise  # someone put something at the reserved name meanwhile: never overwrite it
                self._copy_backup(backup, mode)  # no hard links on this file system: copy instead
            os.replace(tmp, self._real)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error(self.path, "rewrite", exc) from exc
        self._sync_dir()
        # The append descriptor and the inode lock still point at the old file (now the backup): reopen.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            fd = os.open(self._real, os.O_WRONLY | os.O_APPEND | _NOFOLLOW)
        except OSError as exc:
            raise _os_error(self.path, "reopen after rewriting", exc) from exc
        self._fd = fd
        self._wait_for(fd, time.monotonic() + max(self.lock_timeout, 1.0), self._inode_locked)
        self._legacy = False
        self._size = os.fstat(fd).st_size
        self._torn_at = None
        self._needs_newline = False
        seqs = [r.get("seq") for r in records]
        self._last_seq = max((s for s in seqs if isinstance(s, int)), default=-1)
        self._remember_read(self._size, len(records))
        return str(backup)

    def acquire_lease(self, owner: str, ttl: float) -> bool:
        """Take the session's lease (see `SupportsLease`); a read-only store cannot."""
        self._writable_fd()
        return self._lease.acquire(owner, ttl)

    def release_lease(self, owner: str) -> bool:
        """Give the lease up (see `SupportsLease`)."""
        return self._lease.release(owner)

    def default_artifacts(self) -> ArtifactStore:
        """Artifacts in ``<stem>.artifacts/`` beside the file (``runs/task-42.artifacts/``).

        Beside the file a symbolic link points to; the directory is never entered
        through a link (`FileArtifactStore` with ``follow_links=False``).
        """
        real = self._real if self._opened else self._resolve()
        return FileArtifactStore(real.with_name(real.stem + ".artifacts"), follow_links=False)

    def close(self) -> None:
        """Flush per the policy and release the locks; idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._dirty and self.fsync == "interval":
                    with contextlib.suppress(OSError):
                        os.fsync(fd)
            finally:
                os.close(fd)  # closing releases the inode's flock
        self._unlock()
        self._opened = False

    def __repr__(self) -> str:
        mode = "read-only" if self._read_only else f"fsync={self.fsync!r}"
        return f"JSONLStore({str(self.path)!r}, {mode})"

    # ------------------------------------------------------------------ internals

    def _resolve(self) -> Path:
        """The file itself: symbolic links (of the file and its directories) and ``..`` resolved."""
        try:
            return Path(os.path.realpath(self.path, strict=False))
        except OSError as exc:  # a loop of links
            raise _os_error(self.path, "resolve", exc) from exc

    def _side(self, suffix: str) -> Path:
        """A file beside the session file, in its own directory (``s.jsonl.lock``, ``s.jsonl.torn``)."""
        return self._real.with_name(self._real.name + suffix)

    def _check_owned(self) -> None:
        """Raise `NotASessionError` unless the file is this store's (see `open`)."""
        try:
            size, lines = _first_lines(self._real, lines=1 if not self._read_only else _SNIFF_LINES)
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        self._legacy = False
        if size == 0 or not lines or not lines[0].strip():
            if size == 0 and os.path.lexists(self.lock_path):
                return  # created by a writer that stopped before its first record: ours, still empty
            if size == 0:
                raise _not_a_session(self.path, "it is empty")
            raise _not_a_session(self.path, "its first line is blank")
        for number, line in enumerate(lines, 1):
            try:
                data = loads(line, where=f"line {number}")
            except RecordDecodeError as exc:
                if number == 1 and not self._read_only:
                    raise _not_a_session(self.path, f"its first line is {exc.reason}") from None
                continue
            if _is_record(data):
                if number > 1 and not self._read_only:
                    raise _not_a_session(self.path, "its first line is not a session record")
                return
            if number == 1 and _is_legacy(data):
                if self._read_only or self.migrate:
                    self._legacy = True
                    return
                raise legacy_error(self.path)
            if number == 1 and not self._read_only:
                break
        raise _not_a_session(self.path, "its first line is not a session record")

    def _writable_fd(self) -> int:
        if self._read_only:
            raise StoreError(
                f"{str(self.path)!r} was opened read-only; open it without read_only=True to write"
            )
        if self._fd is None:
            raise StoreError(f"{str(self.path)!r} is not open; call open() first (or the session was closed)")
        return self._fd

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, view[written:])
        except OSError as exc:
            # A half-written batch would become a corrupt line in the middle of the log
            # once a later append succeeds: cut it off so the file ends where it did.
            with contextlib.suppress(StoreError):
                self._cut(self._size)
            raise _os_error(self.path, "append to", exc) from exc
        self._size += written

    def _cut(self, size: int) -> None:
        """Truncate the file back to ``size`` bytes (taking back a failed append)."""
        fd = self._fd
        try:
            if fd is None:
                raise OSError(errno.EBADF, "not open")
            os.ftruncate(fd, size)
        except OSError as exc:
            raise _os_error(self.path, "take back a failed append to", exc) from exc
        self._size = size

    def _repair_tail(self, fd: int) -> None:
        if self._torn_at is not None:
            torn_at = self._torn_at
            with open(self._real, "rb") as handle:
                handle.seek(torn_at)
                torn = handle.read()
            if torn.strip():
                # Kept, not destroyed: the bytes of the interrupted append go next to the log.
                side = self._side(".torn")
                try:
                    tfd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, _FILE_MODE)
                    try:
                        os.write(tfd, torn + b"\n")
                    finally:
                        os.close(tfd)
                except OSError as exc:
                    raise _os_error(side, "keep the torn last line in", exc) from exc
            try:
                os.ftruncate(fd, torn_at)
            except OSError as exc:
                raise _os_error(self.path, "repair the torn last line of", exc) from exc
            self._torn_at = None
            self._size = torn_at
        elif self._needs_newline:
            self._write(fd, b"\n")
            self._needs_newline = False
            if self._read_offset == self._size - 1:
                self._read_offset = self._size

    def _fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _os_error(self.path, "fsync", exc) from exc
        self._dirty = False
        self._last_sync = time.monotonic()

    def _make_parents(self) -> None:
        try:
            self._real.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            raise StorePathError(
                f"cannot create {str(self.path)!r}: a parent of it is a file, not a directory"
            ) from exc
        except OSError as exc:
            raise _os_error(self._real.parent, "create the directory", exc) from exc

    def _sync_dir(self) -> None:
        # Makes the file's creation (or rename) itself durable on POSIX.
        if os.name != "posix":
            return
        with contextlib.suppress(OSError):
            dfd = os.open(self._real.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _reserve_backup(self) -> Path:
        n = 1
        while True:
            candidate = self._real.with_name(f"{self._real.stem}.bak-{n}{self._real.suffix}")
            try:
                fd = os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, _FILE_MODE)
            except FileExistsError:  # an older backup, or anything else there (a link): never reused
                n += 1
                continue
            except OSError as exc:
                raise _os_error(candidate, "create the backup", exc) from exc
            os.close(fd)
            return candidate

    def _copy_backup(self, backup: Path, mode: int) -> None:
        fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, _FILE_MODE)
        try:
            with open(self._real, "rb") as source:
                while chunk := source.read(1 << 20):
                    view = memoryview(chunk)
                    written = 0
                    while written < len(chunk):
                        written += os.write(fd, view[written:])
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _lock(self, deadline: float) -> None:
        lock_path = self.lock_path
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, _FILE_MODE)
        except OSError as exc:
            raise _os_error(lock_path, "create the lock file", exc) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorePathError(f"{str(lock_path)!r} is not a regular file; remove it")
            self._wait_for(fd, deadline, self._path_locked)
        except BaseException:
            os.close(fd)
            raise
        # Record who holds it, for the error message above; the lock itself is the flock.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _wait_for(self, fd: int, deadline: float, refused: Callable[[int], SessionLockedError]) -> None:
        """Take the flock on ``fd``, polling with jittered backoff until ``deadline``."""
        pause = 0.001
        while True:
            try:
                _try_lock(fd)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise refused(fd) from None
                time.sleep(min(left, pause * random.uniform(0.5, 1.5)))
                pause = min(pause * 2, 0.05)
            except OSError as exc:
                raise _os_error(self.lock_path, "lock", exc) from exc

    def _path_locked(self, fd: int) -> SessionLockedError:
        holder = _read_holder(fd)
        who = f"process {holder}" if holder else "another process"
        waited = f" (waited {self.lock_timeout:g} s)" if self.lock_timeout else ""
        return SessionLockedError(
            f"{str(self.path)!r} is open for writing by {who}{waited} (lock file {str(self.lock_path)!r}); "
            "close that session first, or open this one with read_only=True to read it"
        )

    def _inode_locked(self, _fd: int) -> SessionLockedError:
        return SessionLockedError(
            f"{str(self.path)!r} is open for writing by another process under another name (a hard link to "
            "the same file); close that session first, or open this one with read_only=True to read it"
        )

    def _unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        # The lock file stays: deleting it would let a second writer lock a new
        # inode while a third still holds the old one.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing releases the flock


def _read_holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return text
    return ""


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> None:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError as exc:
            raise BlockingIOError(str(exc)) from exc

else:
    import fcntl

    def _try_lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
