"""The state a session log replays into, and the one place it changes (event sourcing).

`SessionState` holds what replaying the records gives: the archive of every
message by id, the view (with its undo chain), checkpoints, compactions, the
last usage, a pending D-Mail. Live operations build a record, persist it
(`_commit`) and apply it with the same `_apply` a restore uses, so a restored
session is the live one by construction, not by a second implementation.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, cast

from .. import _serde
from .._serde import SCHEMA_VERSION, RecordDecodeError, UnknownRecord
from ..exceptions import StoreError
from ..messages import JSONValue, Message, new_id
from ._records import (
    CheckpointRecord,
    CompactionRecord,
    DMailRecord,
    HeaderRecord,
    MessageRecord,
    Record,
    RevertRecord,
    UndoRecord,
    UsageRecord,
)
from ._types import UsageTotals
from ._view import UndoLink, ViewState
from .stores._base import (
    CorruptRecordWarning,
    SessionStore,
    StoredRecord,
    UnknownRecordWarning,
    WarningLimiter,
)

if TYPE_CHECKING:
    from ..engine import ContextEngine

__all__ = ["SessionState", "read_log"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _is_pending_stub(m: Message) -> bool:
    meta = m.metadata.get("agentcontext") if m.metadata else None
    return m.role == "tool" and isinstance(meta, Mapping) and meta.get("kind") == "stub_result"


class _Skip(Exception):
    """A record that cannot apply to the state rebuilt so far (the log is damaged)."""


class SessionState:
    """Replayed state of one session log; `Session` adds the API that writes records."""

    def __init__(self, store: SessionStore, *, engine: ContextEngine | None) -> None:
        self._store = store
        self._engine = engine
        self._lock = threading.RLock()
        self._closed = False
        self._id = ""
        self._schema_version = SCHEMA_VERSION
        self._migrated_to: str | None = None
        self._seq = -1
        self._archive: dict[str, Message] = {}
        self._view = ViewState([], 0)
        self._checkpoints: dict[int, tuple[CheckpointRecord, ViewState]] = {}
        self._next_checkpoint = 0
        self._compactions: dict[int, CompactionRecord] = {}
        self._usage: UsageRecord | None = None
        self._totals = UsageTotals()
        self._dmail: DMailRecord | None = None
        self._unknown: list[UnknownRecord] = []
        self._known_artifacts: set[str] = set()
        # (view length covered, reported prompt tokens): the last usage, while the view it covers stands.
        self._token_anchor: tuple[int, int] | None = None
        # (view length, tokens) as last computed: a cache only, valid while that prefix stands.
        self._token_memo: tuple[int, int] | None = None
        # The view length the engine last returned (its remembered prefix), for O(new) prepare.
        self._prepared_len: int | None = None
        self._replaying = False

    def _view_rewritten(self) -> None:
        """Called when the view is replaced rather than extended (a revert or an undo)."""

    def _restore(self) -> None:
        self._replaying = True
        corrupt = WarningLimiter(CorruptRecordWarning)
        unknown = WarningLimiter(UnknownRecordWarning)
        try:
            stream = self._store.load()
            first = next(stream, None)
            if first is None:
                if not self._store.read_only:
                    header = HeaderRecord(
                        seq=0,
                        ts=_now(),
                        schema_version=SCHEMA_VERSION,
                        session_id="ses_" + new_id()[4:],
                        created_by=_library(),
                    )
                    self._replaying = False
                    self._commit([header])
                return
            version = _serde.detect_version(first.data)
            pairs: Iterable[tuple[str, dict[str, JSONValue]]] = _pairs(first, stream)
            if version is None:
                corrupt.warn(
                    f"{self._store.location}: the first record ({first.where}) is not a header; "
                    f"reading the log as schema {SCHEMA_VERSION}"
                )
            elif version > SCHEMA_VERSION:
                if not self._store.read_only:
                    raise StoreError(
                        f"{self._store.location} was written by a newer agentcontext (schema {version}; this "
                        f"version writes {SCHEMA_VERSION}); open it with read_only=True, or upgrade agentcontext"
                    )
                warnings.warn(
                    f"{self._store.location} uses schema {version}, newer than {SCHEMA_VERSION}; reading what "
                    "this version understands",
                    UnknownRecordWarning,
                    stacklevel=3,
                )
            elif version < SCHEMA_VERSION:
                pairs = _serde.upcast(pairs, from_version=version)
            migrate: list[dict[str, JSONValue]] | None = (
                [] if version is not None and version < SCHEMA_VERSION and not self._store.read_only else None
            )
            self._schema_version = version if version is not None else SCHEMA_VERSION
            for where, data in pairs:
                record = self._replay_one(where, data, corrupt, unknown)
                if migrate is not None:
                    # Re-encoded by the one codec; what it cannot read is carried over verbatim.
                    migrate.append(_serde.encode_record(record) if record is not None else data)
            self._schema_version = (
                version if version is not None else SCHEMA_VERSION
            )  # as read, not as upcast
            if migrate is not None:
                self._migrated_to = self._store.replace(migrate)
        finally:
            self._replaying = False
            corrupt.finish(self._store.location)
            unknown.finish(self._store.location)

    def _replay_one(
        self, where: str, data: dict[str, JSONValue], corrupt: WarningLimiter, unknown: WarningLimiter
    ) -> Record | None:
        """Decode and apply one stored record; returns it when it is of a known type and decoded."""
        location = self._store.location
        try:
            record = _serde.decode_record(data, where=where)
        except RecordDecodeError as exc:
            corrupt.warn(f"{location}: {exc}; the record is skipped")
            return None
        if isinstance(record, UnknownRecord):
            self._unknown.append(record)
            if record.seq is not None and record.seq > self._seq:
                self._seq = record.seq
            unknown.warn(
                f"{location}: {where} has record type {record.type!r}, unknown to this version "
                "(written by a newer agentcontext?); it is kept in the log and passed over"
            )
            return None
        record = cast(Record, record)  # decode_record builds only registered types
        if record.seq <= self._seq:
            corrupt.warn(
                f"{location}: {where} repeats or goes back to seq {record.seq}; the record is skipped"
            )
            return None
        try:
            self._apply(record)
        except _Skip as exc:
            corrupt.warn(f"{location}: {where} ({type(record).__name__}) cannot be applied: {exc}; skipped")
            self._seq = record.seq
        return record

    # ------------------------------------------------------------------ the one place state changes

    def _commit(self, records: list[Record]) -> None:
        """Persist ``records`` (one batch), then apply them. On a store error nothing changes."""
        encoded = [_serde.encode_record(r) for r in records]
        self._store.append(encoded, expected_seq=self._seq + 1)
        for r in records:
            self._apply(r)

    def _apply(self, record: Record) -> None:
        if isinstance(record, MessageRecord):
            m = record.message
            self._archive[m.id] = m
            self._note_refs(m)
            self._view = self._view.appended(m)
        elif isinstance(record, UsageRecord):
            self._apply_usage(record)
        elif isinstance(record, CheckpointRecord):
            if record.id in self._checkpoints:
                raise _Skip(f"checkpoint {record.id} already exists")
            if self._replaying and record.view_len != self._view.length:
                warnings.warn(
                    f"{self._store.location}: checkpoint {record.id} was taken with {record.view_len} messages "
                    f"in view, the restored view has {self._view.length}; earlier records were probably skipped",
                    CorruptRecordWarning,
                    stacklevel=4,
                )
            self._checkpoints[record.id] = (record, self._view)
            self._next_checkpoint = max(self._next_checkpoint, record.id + 1)
        elif isinstance(record, CompactionRecord):
            self._apply_compaction(record)
        elif isinstance(record, RevertRecord):
            target = self._checkpoints.get(record.checkpoint)
            if target is None:
                raise _Skip(f"no checkpoint {record.checkpoint}")
            self._set_view(target[1])
            if record.dmail is not None:
                self._dmail = None
        elif isinstance(record, UndoRecord):
            link = self._view.undo
            if link is None or link.compaction_seq != record.compaction:
                raise _Skip(f"compaction {record.compaction} is not the newest one in the view")
            tail = self._view.items[link.after_len : self._view.length]
            self._set_view(link.before.extended(tail))
        elif isinstance(record, DMailRecord):
            self._dmail = record if record.status == "sent" else None
        elif isinstance(record, HeaderRecord):
            self._id = record.session_id
            self._schema_version = record.schema_version
        self._seq = record.seq

    def _apply_usage(self, record: UsageRecord) -> None:
        t = self._totals
        self._totals = UsageTotals(
            calls=t.calls + 1,
            prompt_tokens=t.prompt_tokens + record.prompt_tokens,
            completion_tokens=t.completion_tokens + (record.completion_tokens or 0),
            cached_tokens=t.cached_tokens + (record.cached_tokens or 0),
        )
        self._usage = record
        self._token_anchor = (
            (record.view_len, record.prompt_tokens) if record.view_len <= self._view.length else None
        )
        self._token_memo = None

    def _apply_compaction(self, record: CompactionRecord) -> None:
        view = self._view
        if record.keep > view.length:
            raise _Skip(f"it keeps {record.keep} messages of a view of {view.length}")
        by_id = {m.id: m for m in record.replacements}
        tail: list[Message] = []
        for mid in record.view:
            m = by_id.get(mid) or self._archive.get(mid)
            if m is None:
                raise _Skip(f"its view names message {mid!r}, which is in no earlier record")
            tail.append(m)
        for m in record.replacements:
            self._archive.setdefault(m.id, m)
            self._note_refs(m)
        for action in record.actions:
            refs = action.get("refs")
            if isinstance(refs, list):
                self._known_artifacts.update(
                    r for r in refs if isinstance(r, str) and r.startswith("artifact:")
                )
        undo = view.undo
        if record.compacted or (undo is not None and record.keep < undo.after_len):
            undo = UndoLink(before=view, after_len=record.keep + len(tail), compaction_seq=record.seq)
        self._compactions[record.seq] = record
        self._view = view.rewritten(record.keep, tail, undo=undo)
        # A rewrite past what the usage covers leaves it valid (the common ingest-truncation case).
        anchor, memo = self._token_anchor, self._token_memo
        self._token_anchor = anchor if anchor is not None and anchor[0] <= record.keep else None
        self._token_memo = memo if memo is not None and memo[0] <= record.keep else None

    def _set_view(self, view: ViewState) -> None:
        self._view = view
        self._token_anchor = self._token_memo = None
        self._prepared_len = None
        self._view_rewritten()
        if not self._replaying and self._engine is not None:
            self._engine.reset()

    def _note_refs(self, m: Message) -> None:
        meta = m.metadata
        if not meta:
            return
        for key in ("truncated", "agentcontext"):
            entry = meta.get(key)
            if isinstance(entry, Mapping):
                ref = entry.get("ref")
                if isinstance(ref, str) and ref.startswith("artifact:"):
                    self._known_artifacts.add(ref)

    def _next(self, n: int = 1) -> list[int]:
        return list(range(self._seq + 1, self._seq + 1 + n))

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreError(f"the session {self._store.location} is closed; open it again to continue")
        if self._store.read_only:
            raise StoreError(f"the session {self._store.location} was opened read-only; it cannot be changed")


def read_log(store: SessionStore) -> tuple[int | None, Iterable[tuple[str, dict[str, JSONValue]]]]:
    """The schema version a store's log was written with, and its records upcast to the current one.

    Returns ``(None, ())`` for an empty log. The version is None too when the
    first record is neither a header nor a version-0 line (the header is lost);
    the records are then read as the current version.
    """
    stream = store.load()
    first = next(stream, None)
    if first is None:
        return None, ()
    version = _serde.detect_version(first.data)
    pairs: Iterable[tuple[str, dict[str, JSONValue]]] = _pairs(first, stream)
    if version is not None and version < SCHEMA_VERSION:
        pairs = _serde.upcast(pairs, from_version=version)
    return version, pairs


def _pairs(first: StoredRecord, rest: Iterator[StoredRecord]) -> Iterator[tuple[str, dict[str, JSONValue]]]:
    yield first.where, first.data
    for r in rest:
        yield r.where, r.data


def _library() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"agentcontext {version('agentcontext')}"
    except PackageNotFoundError:
        return "agentcontext"
