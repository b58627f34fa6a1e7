"""The protocol every session store speaks, its errors and warnings.

A store keeps one session's records in order and hands them back. It knows
nothing about what records mean: the session encodes them with the one codec
(`agentcontext._serde`) and the store only persists JSON-ready data.

Appends name the sequence number they expect to write (``expected_seq``), so
stores shared between processes (SQLite here; Redis and PostgreSQL later) can
refuse a writer whose view of the log is stale with `ConcurrencyError`, the
optimistic-concurrency pattern: no lock is held between appends, and a lost
race is detected, never silently merged.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, get_args, runtime_checkable

from ...artifacts import ArtifactStore
from ...exceptions import (
    ConcurrencyError,
    ConfigError,
    CorruptRecordWarning,
    SessionNotFoundError,
    SessionWarning,
    StoreError,
    StorePathError,
    StorePermissionError,
    UnknownRecordWarning,
)
from ...messages import JSONValue

__all__ = [
    "CorruptRecordWarning",
    "FsyncPolicy",
    "SessionNotFoundError",
    "SessionStore",
    "SessionWarning",
    "StorePathError",
    "StorePermissionError",
    "StoredRecord",
    "UnknownRecordWarning",
]

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
    missing), `load` once, then any number of `append` calls, then `close`.
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

    def load(self) -> Iterator[StoredRecord]:
        """Every readable record in order; damaged ones are skipped with a `CorruptRecordWarning`."""
        ...

    def append(self, records: Sequence[Mapping[str, JSONValue]], *, expected_seq: int) -> None:
        """Persist ``records`` (their ``seq`` runs from ``expected_seq`` without gaps) as one batch.

        When this returns, the records are durable per the store's fsync policy.
        A batch is written as a whole or not at all, as far as the store can.

        Raises:
            ConcurrencyError: the log's last seq is not ``expected_seq - 1``
                (another writer appended first); nothing was written.
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
    if expected != last + 1:
        raise ConcurrencyError(
            f"{location}: append expected to write seq {expected}, but the log ends at seq {last}; "
            "another writer has appended since this session was loaded. Reopen the session to see "
            "its records, then retry."
        )
    for i, r in enumerate(records):
        if r.get("seq") != expected + i:
            raise StoreError(
                f"{location}: record {i} of the batch has seq {r.get('seq')!r}, expected {expected + i}"
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
