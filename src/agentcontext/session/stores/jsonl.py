"""`JSONLStore`: one session per JSON Lines file, the embedded default.

One record per line, readable by people and by ``jq``. Compared with Kimi
CLI's context file, whose design this takes up:

- **Every append is written before it returns**: one ``write`` of the whole
  batch on a file opened with ``O_APPEND`` (no user-space buffer to lose), then
  an ``fsync`` per the policy (`FsyncPolicy`; Kimi never fsyncs). A process
  killed at any moment loses at most the append in flight.
- **A damaged line never stops a restore.** Kimi's restore aborted on the
  first bad line. Here a torn or corrupt line is skipped with a
  `CorruptRecordWarning` naming its line number, and the rest loads. A torn
  *last* line (an append cut short by a crash) is moved aside, to
  ``<file>.torn``, before the next append, so new records never fuse with it.
- **One writer at a time.** An exclusive, non-blocking ``flock`` on
  ``<file>.lock`` (held while the store is open for writing) makes a second
  writer fail at once with `SessionLockedError` naming the holder's pid; the
  kernel releases it when the holder dies, so a crash never leaves a stale lock.
  Readers (``read_only=True``) take no lock.
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
import shutil
import stat
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ..._serde import RecordDecodeError, dumps, loads
from ...artifacts import ArtifactStore, FileArtifactStore
from ...exceptions import ConfigError, SessionLockedError, StoreError
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
    return StoreError(f"cannot {action} {str(path)!r}: {exc}")


class JSONLStore:
    """A session as a JSON Lines file (see the module docstring).

    Args:
        path: the session file (``runs/task-42.jsonl``). Missing parent
            directories are created when the session is created.
        fsync: when appends are forced to disk (`FsyncPolicy`); default
            ``"always"``, the safe choice: an agent step takes seconds, a flush
            about a millisecond.
        fsync_interval: seconds between flushes for ``fsync="interval"``; default 1.0.
        read_only: open for reading only: no lock, no writes, no repairs.

    The constructor does no I/O; `open` does.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 1.0,
        read_only: bool = False,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise ConfigError(f"path must be a str or a path, got {type(path).__name__}")
        check_fsync(fsync, fsync_interval)
        self.path = Path(path).absolute()
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval = float(fsync_interval)
        self._read_only = read_only
        self._fd: int | None = None
        self._lock_fd: int | None = None
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
        """The lock file next to the session file (``<file>.lock``)."""
        return self.path.with_name(self.path.name + ".lock")

    def open(self, *, create: bool = True) -> None:
        """Check the path, take the writer's lock, create the file if allowed (see `SessionStore.open`)."""
        if self._opened:
            return
        try:
            st = os.stat(self.path)
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
        if self._read_only:
            self._opened = True
            return
        if st is None:
            self._make_parents()
        self._lock()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _FILE_MODE)
        except OSError as exc:
            self._unlock()
            raise _os_error(self.path, "open for writing", exc) from exc
        self._fd = fd
        self._size = os.fstat(fd).st_size
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
            handle = open(self.path, "rb")  # closed in the finally below
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        offset = 0
        number = 0
        complete_end = 0
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
                try:
                    data = loads(line, where=where)
                except RecordDecodeError as exc:
                    if complete:
                        limiter.warn(f"{self.path}: {exc.reason} at {where}; the line is skipped")
                    else:
                        self._torn_at = start
                        limiter.warn(
                            f"{self.path}: {where} is incomplete ({len(line)} bytes, no newline): the last "
                            "append was interrupted; the line is skipped"
                        )
                    continue
                if not complete:
                    self._needs_newline = True
                    complete_end = offset  # a whole record, only its newline is missing
                seq = data.get("seq")
                number_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
                if number_seq is not None and number_seq > self._last_seq:
                    self._last_seq = number_seq
                if after >= 0 and (number_seq is None or number_seq <= after):
                    continue
                yield StoredRecord(where, data)
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        finally:
            handle.close()
            limiter.finish(str(self.path))
        self._remember_read(complete_end, number if complete_end == offset else number - 1)

    def _load_from(self, start: int) -> Iterator[StoredRecord]:
        limiter = WarningLimiter(CorruptRecordWarning)
        try:
            handle = open(self.path, "rb")  # closed in the finally below
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        offset = start
        number = self._read_lines
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
                try:
                    data = loads(line, where=where)
                except RecordDecodeError as exc:
                    limiter.warn(f"{self.path}: {exc.reason} at {where}; the line is skipped")
                    continue
                seq = data.get("seq")
                if isinstance(seq, int) and not isinstance(seq, bool) and seq > self._last_seq:
                    self._last_seq = seq
                yield StoredRecord(where, data)
        except OSError as exc:
            raise _os_error(self.path, "read", exc) from exc
        finally:
            handle.close()
            limiter.finish(str(self.path))
        self._remember_read(offset, number)

    def _remember_read(self, offset: int, lines: int) -> None:
        self._read_offset, self._read_lines, self._read_seq = offset, lines, self._last_seq

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Write ``records`` as lines in one ``write`` call, then fsync per the policy."""
        fd = self._writable_fd()
        check_expected_seq(self.location, expected_seq, self._last_seq, records)
        if not records:
            return
        data = "".join(dumps(r) + "\n" for r in records).encode("utf-8")
        self._repair_tail(fd)
        read_to_end = self._read_offset == self._size
        self._write(fd, data)
        self._last_seq = expected_seq + len(records) - 1
        if read_to_end:  # the next catch-up load starts after what this store wrote itself
            self._remember_read(self._size, self._read_lines + len(records))
        self._dirty = True
        if self.fsync == "always" or (
            self.fsync == "interval" and time.monotonic() - self._last_sync >= self.fsync_interval
        ):
            self._fsync(fd)

    def replace(self, records: Sequence[Mapping[str, JSONValue]]) -> str:
        """Rewrite the file with ``records``; the old file stays as ``<stem>.bak-<n><suffix>``.

        The path holds either the old or the new content at every moment: the
        new file is written and fsynced under a temporary name, the old one is
        hard-linked to a backup name reserved with ``O_CREAT | O_EXCL``, then
        the new one is renamed over the path.
        """
        self._writable_fd()
        backup = self._reserve_backup()
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as handle:
                os.fchmod(handle.fileno(), _FILE_MODE)
                handle.write("".join(dumps(r) + "\n" for r in records).encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.unlink(backup)  # the reserved name; a hard link (instant, atomic) takes it
                os.link(self.path, backup)
            except OSError:  # no hard links on this file system: copy instead
                shutil.copyfile(self.path, backup)
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error(self.path, "rewrite", exc) from exc
        self._sync_dir()
        # The append descriptor still points at the old file (now the backup): reopen.
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, _FILE_MODE)
        self._size = os.fstat(self._fd).st_size
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
        """Artifacts in ``<stem>.artifacts/`` next to the file (``runs/task-42.artifacts/``)."""
        return FileArtifactStore(self.path.with_name(self.path.stem + ".artifacts"))

    def close(self) -> None:
        """Flush per the policy and release the lock; idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._dirty and self.fsync == "interval":
                    with contextlib.suppress(OSError):
                        os.fsync(fd)
            finally:
                os.close(fd)
        self._unlock()
        self._opened = False

    def __repr__(self) -> str:
        mode = "read-only" if self._read_only else f"fsync={self.fsync!r}"
        return f"JSONLStore({str(self.path)!r}, {mode})"

    # ------------------------------------------------------------------ internals

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
            with contextlib.suppress(OSError):
                os.truncate(self.path, self._size)
            raise _os_error(self.path, "append to", exc) from exc
        self._size += written

    def _repair_tail(self, fd: int) -> None:
        if self._torn_at is not None:
            torn_at, self._torn_at = self._torn_at, None
            with open(self.path, "rb") as handle:
                handle.seek(torn_at)
                torn = handle.read()
            if torn.strip():
                # Kept, not destroyed: the bytes of the interrupted append go next to the log.
                with open(self.path.with_name(self.path.name + ".torn"), "ab") as side:
                    side.write(torn + b"\n")
            try:
                os.truncate(self.path, torn_at)
            except OSError as exc:
                raise _os_error(self.path, "repair the torn last line of", exc) from exc
            self._size = torn_at
        elif self._needs_newline:
            self._needs_newline = False
            self._write(fd, b"\n")
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
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            raise StorePathError(
                f"cannot create {str(self.path)!r}: a parent of it is a file, not a directory"
            ) from exc
        except OSError as exc:
            raise _os_error(self.path.parent, "create the directory", exc) from exc

    def _sync_dir(self) -> None:
        # Makes the file's creation (or rename) itself durable on POSIX.
        if os.name != "posix":
            return
        with contextlib.suppress(OSError):
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _reserve_backup(self) -> Path:
        n = 1
        while True:
            candidate = self.path.with_name(f"{self.path.stem}.bak-{n}{self.path.suffix}")
            try:
                fd = os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _FILE_MODE)
            except FileExistsError:
                n += 1
                continue
            except OSError as exc:
                raise _os_error(candidate, "create the backup", exc) from exc
            os.close(fd)
            return candidate

    def _lock(self) -> None:
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        except OSError as exc:
            raise _os_error(self.lock_path, "create the lock file", exc) from exc
        try:
            _try_lock(fd)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise SessionLockedError(
                f"{str(self.path)!r} is open for writing by {who} (lock file {str(self.lock_path)!r}); "
                "close that session first, or open this one with read_only=True to read it"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise _os_error(self.lock_path, "lock", exc) from exc
        # Record who holds it, for the error message above; the lock itself is the flock.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

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
