"""The state a session log replays into, and the one place it changes (event sourcing).

`SessionState` holds what replaying the records gives: the archive of every
message by id, the view (with its undo chain), checkpoints, compactions, the
last usage, a pending D-Mail. Live operations build a record, persist it
(`_commit`) and apply it with the same `_apply` a restore uses, so a restored
session is the live one by construction, not by a second implementation.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import cast

from .. import _serde
from .._serde import SCHEMA_VERSION, RecordDecodeError, UnknownRecord
from ..artifacts import ArtifactRef
from ..compaction import MessageKind, kind_of, original_id
from ..exceptions import ConcurrencyError, NotASessionError, StoreError
from ..messages import JSONValue, Message, new_id
from ._records import (
    CheckpointRecord,
    CompactionRecord,
    DMailRecord,
    HeaderRecord,
    MessageRecord,
    Record,
    RevertRecord,
    RewindRecord,
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

__all__ = ["SessionState", "read_log"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Skip(Exception):
    """A record that cannot apply to the state rebuilt so far (the log is damaged)."""


class SessionState:
    """Replayed state of one session log, and the one place it changes; `Session` is the API over it.

    Its attributes are what the records replay into; `commit` is the only way
    to change them (persist, then apply, as a restore applies). ``on_rewrite``
    is called whenever the view is replaced rather than extended (a compaction,
    a revert, an undo), so whoever keeps something tied to the view (the
    session's engine state) can let it go.
    """

    def __init__(self, store: SessionStore, *, on_rewrite: Callable[[], None]) -> None:
        self.store = store
        self._on_rewrite = on_rewrite
        self.lock = threading.RLock()
        self.closed = False
        self.id = ""
        self.schema_version = SCHEMA_VERSION
        self.migrated_to: str | None = None
        self.seq = -1
        self.archive: dict[str, Message] = {}
        self.view = ViewState([], 0)
        self.checkpoints: dict[int, tuple[CheckpointRecord, ViewState]] = {}
        self.next_checkpoint = 0
        self.compactions: dict[int, CompactionRecord] = {}
        self.usage: UsageRecord | None = None
        self.totals = UsageTotals()
        self.dmail: DMailRecord | None = None
        self.unknown: list[UnknownRecord] = []
        self.known_artifacts: set[str] = set()
        # A copy's id -> the id of the message it replaces one for one (masked, cut, shortened, repaired),
        # from the compactions' actions: an ingest cut names no original in its metadata.
        self.stand_ins: dict[str, str] = {}
        # The SHA-256 of each tool output's text (what an artifact reference names) -> its message id,
        # for the archive's first `_digested` messages: built as recall needs it, each output hashed once.
        self._output_digests: dict[str, str] = {}
        self._digested = 0
        # (view length covered, reported prompt tokens): the last usage, while the view it covers stands.
        self.token_anchor: tuple[int, int] | None = None
        # (view length, reported tokens it starts from, the counter's uncorrected count of the rest) as
        # last computed: a cache only, valid while that prefix stands (and whatever the correction).
        self.token_memo: tuple[int, int, int] | None = None
        self.replaying = False

    def restore(self, *, migrate: bool = False) -> None:
        """Replay the store's log into this state; a writable, empty store gets its header.

        A log of an older schema is read (upcast) when the store is read-only, and
        rewritten in the current schema (`SessionStore.replace`, which keeps the
        original) only when ``migrate``; otherwise a writable open refuses it with
        `NotASessionError`, and nothing is written.
        """
        self.replaying = True
        corrupt = WarningLimiter(CorruptRecordWarning)
        unknown = WarningLimiter(UnknownRecordWarning)
        try:
            stream = self.store.load()
            first = next(stream, None)
            if first is None:
                if not self.store.read_only:
                    header = HeaderRecord(
                        seq=0,
                        ts=_now(),
                        schema_version=SCHEMA_VERSION,
                        session_id="ses_" + new_id()[4:],
                        created_by=_library(),
                    )
                    self.replaying = False
                    try:
                        self.commit([header])
                    except ConcurrencyError:  # another worker created it at the same moment: read theirs
                        self.catch_up()
                return
            version = _serde.detect_version(first.data)
            pairs: Iterable[tuple[str, dict[str, JSONValue]]] = _pairs(first, stream)
            if version is None:
                corrupt.warn(
                    f"{self.store.location}: the first record ({first.where}) is not a header; "
                    f"reading the log as schema {SCHEMA_VERSION}"
                )
            elif version > SCHEMA_VERSION:
                if not self.store.read_only:
                    raise StoreError(
                        f"{self.store.location} was written by a newer agentcontext (schema {version}; this "
                        f"version writes {SCHEMA_VERSION}); open it with read_only=True, or upgrade agentcontext"
                    )
                warnings.warn(
                    f"{self.store.location} uses schema {version}, newer than {SCHEMA_VERSION}; reading what "
                    "this version understands",
                    UnknownRecordWarning,
                    stacklevel=3,
                )
            elif version < SCHEMA_VERSION:
                if not self.store.read_only and not migrate:
                    raise NotASessionError(
                        f"{self.store.location} holds a log of schema {version}, older than {SCHEMA_VERSION}; "
                        "it was left untouched. Open it with migrate=True (or run `agentcontext migrate`) to "
                        "rewrite it in the current schema, its original kept as a backup, or read_only=True"
                    )
                pairs = _serde.upcast(pairs, from_version=version)
            rewrite: list[dict[str, JSONValue]] | None = (
                [] if version is not None and version < SCHEMA_VERSION and not self.store.read_only else None
            )
            self.schema_version = version if version is not None else SCHEMA_VERSION
            for where, data, next_seq in _with_next_seq(pairs):
                record = self._replay_one(where, data, corrupt, unknown, next_seq=next_seq)
                if rewrite is not None:
                    # Re-encoded by the one codec; what it cannot read is carried over verbatim.
                    rewrite.append(_serde.encode_record(record) if record is not None else data)
            self.schema_version = version if version is not None else SCHEMA_VERSION  # as read, not as upcast
            if rewrite is not None:
                self.migrated_to = self.store.replace(rewrite)
        finally:
            self.replaying = False
            corrupt.finish(self.store.location)
            unknown.finish(self.store.location)

    def _replay_one(
        self,
        where: str,
        data: dict[str, JSONValue],
        corrupt: WarningLimiter,
        unknown: WarningLimiter,
        *,
        next_seq: int | None = None,
    ) -> Record | None:
        """Decode, check and apply one stored record; returns it when it is of a known type and decoded.

        A bad record (undecodable, out of sequence, or naming what the log does not
        hold) is skipped with a warning naming it; the records after it still apply.
        ``next_seq`` (the seq of the record after this one, when known) tells a seq
        that jumps ahead by mistake (the next record goes back below it) from records
        lost to damage (the log goes on after the gap).
        """
        seq = data.get("seq")  # (the store's location is built only for a warning: it costs a URL encode)
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > self.seq + 1:
            if next_seq is not None and self.seq < next_seq < seq:
                corrupt.warn(
                    f"{self.store.location}: {where} jumps from seq {self.seq} to seq {seq} while the next record has "
                    f"seq {next_seq}; the record is skipped"
                )
                return None
            # Records lost to damage, a stray delete or an evicting cache: the log goes on after them,
            # and what they held (messages, a compaction) is missing from the view. Said, not passed over.
            missing = f"seq {self.seq + 1}" if seq == self.seq + 2 else f"seqs {self.seq + 1}-{seq - 1}"
            corrupt.warn(
                f"{self.store.location}: {missing} of the log are missing before {where}; the records after "
                "the gap are applied without them"
            )
        try:
            record = _serde.decode_record(data, where=where)
        except RecordDecodeError as exc:
            corrupt.warn(f"{self.store.location}: {exc}; the record is skipped")
            return None
        if isinstance(record, UnknownRecord):
            self.unknown.append(record)
            if record.seq is not None and record.seq > self.seq:
                self.seq = record.seq
            unknown.warn(
                f"{self.store.location}: {where} has record type {record.type!r}, unknown to this version "
                "(written by a newer agentcontext?); it is kept in the log and passed over"
            )
            return None
        record = cast(Record, record)  # decode_record builds only registered types
        if record.seq <= self.seq:
            corrupt.warn(
                f"{self.store.location}: {where} (seq {record.seq}) repeats or goes back to seq {record.seq} after seq "
                f"{self.seq}; the record is skipped"
            )
            return None
        try:
            self._apply(record)
        except _Skip as exc:
            corrupt.warn(
                f"{self.store.location}: {where} (seq {record.seq}, {type(record).__name__}) cannot be applied: {exc}; "
                "the record is skipped"
            )
            self.seq = record.seq
            return None
        return record

    # ------------------------------------------------------------------ the one place state changes

    def commit(self, records: list[Record]) -> None:
        """Persist ``records`` (one batch), then apply them. On a store error nothing changes."""
        encoded = [_serde.encode_record(r) for r in records]
        self.store.append(encoded, expected_seq=self.seq + 1)
        for r in records:
            self._apply(r)

    def _apply(self, record: Record) -> None:
        if self.replaying:
            self._check(record)
        if isinstance(record, MessageRecord):
            m = record.message
            self.archive[m.id] = m
            self._note_refs(m)
            self.view = self.view.appended(m)
        elif isinstance(record, UsageRecord):
            self._apply_usage(record)
        elif isinstance(record, CheckpointRecord):
            self._apply_checkpoint(record)
        elif isinstance(record, CompactionRecord):
            self._apply_compaction(record)
        elif isinstance(record, RewindRecord | RevertRecord | UndoRecord):
            self._apply_move(record)
        elif isinstance(record, DMailRecord):
            self.dmail = record if record.status == "sent" else None
        elif isinstance(record, HeaderRecord):
            self.id = record.session_id
            self.schema_version = record.schema_version
        self.seq = record.seq

    def _check(self, record: Record) -> None:
        """What a record read from a store must satisfy before it applies (live records are built valid)."""
        if isinstance(record, HeaderRecord):
            if self.seq >= 0 or record.seq != 0:
                raise _Skip("a header is only the first record (seq 0)")
        elif isinstance(record, MessageRecord):
            known = self.archive.get(record.message.id)
            if known is not None and known != record.message:
                raise _Skip(f"its message id {record.message.id!r} already names a different message")
        elif isinstance(record, UsageRecord):
            counts = (
                record.prompt_tokens,
                record.completion_tokens,
                record.total_tokens,
                record.cached_tokens,
            )
            if any(c is not None and c < 0 for c in counts) or record.view_len < 0:
                raise _Skip("a token count or view length is negative")
        elif isinstance(record, CheckpointRecord):
            if record.id < 0 or record.view_len < 0:
                raise _Skip(f"checkpoint id {record.id} / view length {record.view_len} is negative")
        elif isinstance(record, DMailRecord):
            if record.status == "sent" and record.checkpoint not in self.checkpoints:
                raise _Skip(f"it is sent to checkpoint {record.checkpoint}, which the log does not hold")

    def _apply_checkpoint(self, record: CheckpointRecord) -> None:
        if record.id in self.checkpoints:
            raise _Skip(f"checkpoint {record.id} already exists")
        if self.replaying and record.view_len != self.view.length:
            warnings.warn(
                f"{self.store.location}: checkpoint {record.id} was taken with {record.view_len} messages "
                f"in view, the restored view has {self.view.length}; earlier records were probably skipped",
                CorruptRecordWarning,
                stacklevel=5,
            )
        self.checkpoints[record.id] = (record, self.view)
        self.next_checkpoint = max(self.next_checkpoint, record.id + 1)

    def _apply_move(self, record: RewindRecord | RevertRecord | UndoRecord) -> None:
        """The records that move the view elsewhere than its end: rewind, revert, undo."""
        view = self.view
        if isinstance(record, RewindRecord):
            if not 0 <= record.length <= view.length:
                raise _Skip(f"it rewinds to {record.length} messages, the view has {view.length}")
            undo = view.undo if view.undo is not None and record.length >= view.undo.after_len else None
            self._set_view(view.rewritten(record.length, (), undo=undo))
        elif isinstance(record, RevertRecord):
            target = self.checkpoints.get(record.checkpoint)
            if target is None:
                raise _Skip(f"no checkpoint {record.checkpoint}")
            self._set_view(target[1])
            if record.dmail is not None:
                self.dmail = None
        else:
            link = view.undo
            if link is None or link.compaction_seq != record.compaction:
                raise _Skip(f"compaction {record.compaction} is not the newest one in the view")
            self._set_view(link.before.extended(view.items[link.after_len : view.length]))

    def _apply_usage(self, record: UsageRecord) -> None:
        t = self.totals
        self.totals = UsageTotals(
            calls=t.calls + 1,
            prompt_tokens=t.prompt_tokens + record.prompt_tokens,
            completion_tokens=t.completion_tokens + (record.completion_tokens or 0),
            cached_tokens=t.cached_tokens + (record.cached_tokens or 0),
        )
        self.usage = record
        self.token_anchor = (
            (record.view_len, record.prompt_tokens)
            if record.prompt_in_view and record.view_len <= self.view.length
            else None
        )
        self.token_memo = None

    def _apply_compaction(self, record: CompactionRecord) -> None:
        view = self.view
        if not 0 <= record.keep <= view.length:
            raise _Skip(f"it keeps {record.keep} messages of a view of {view.length}")
        by_id = {m.id: m for m in record.replacements}
        tail: list[Message] = []
        for mid in record.view:
            m = by_id.get(mid) or self.archive.get(mid)
            if m is None:
                raise _Skip(f"its view names message {mid!r}, which is in no earlier record")
            tail.append(m)
        for m in record.replacements:
            self.archive.setdefault(m.id, m)
            self._note_refs(m)
        for action in record.actions:
            refs = action.get("refs")
            if isinstance(refs, list):
                self.known_artifacts.update(
                    r for r in refs if isinstance(r, str) and r.startswith("artifact:")
                )
            originals, copies = action.get("message_ids"), action.get("replacement_ids")
            if (
                action.get("kind") in REPLACING
                and isinstance(originals, list)
                and isinstance(copies, list)
                and len(originals) == len(copies)
            ):
                self.stand_ins.update(
                    (c, o)
                    for c, o in zip(copies, originals, strict=True)
                    if isinstance(c, str) and isinstance(o, str)
                )
        undo = view.undo
        if record.compacted or (undo is not None and record.keep < undo.after_len):
            undo = UndoLink(before=view, after_len=record.keep + len(tail), compaction_seq=record.seq)
        self.compactions[record.seq] = record
        self.view = view.rewritten(record.keep, tail, undo=undo)
        self._on_rewrite()  # whoever adopts the compaction sets the engine state that goes with it
        # A rewrite past what the usage covers leaves it valid (the common ingest-truncation case).
        anchor, memo = self.token_anchor, self.token_memo
        self.token_anchor = anchor if anchor is not None and anchor[0] <= record.keep else None
        self.token_memo = memo if memo is not None and memo[0] <= record.keep else None

    def stands_for(self, message: Message) -> str:
        """The id of the appended message ``message`` is, or is a copy of (a masked copy of a cut one...)."""
        return self._source(original_id(message))

    def _source(self, mid: str) -> str:
        """The appended message an id names: itself, or what the copy of that id replaces (through copies
        of copies). A copy made and summarized in one prepare never enters the log: only the compaction's
        actions name it, and a summary covers it under its own id."""
        for _ in range(16):
            older = self.stand_ins.get(mid)
            if older is None:
                break
            mid = older
        return mid

    def covered_by(self, note: Message) -> list[str]:
        """The appended messages a summary or elision note stands for, through the summaries folded into it."""
        out: list[str] = []
        if kind_of(note) not in NOTES:
            return out
        pending, seen = [note], set()
        while pending:
            meta = pending.pop().metadata.get("agentcontext")
            covers = meta.get("covers") if isinstance(meta, Mapping) else None
            for covered in covers if isinstance(covers, list) else ():
                if not isinstance(covered, str) or covered in seen:
                    continue
                seen.add(covered)
                m = self.archive.get(covered)
                if m is None:
                    out.append(self._source(covered))
                elif kind_of(m) in NOTES:
                    pending.append(m)  # an earlier summary, folded into this one
                else:
                    out.append(self.stands_for(m))
        return out

    def stood_for(self) -> set[str]:
        """Ids of the appended messages the view holds or stands for: a message, a copy replacing it, a
        summary or elision note covering it, a compaction in force that took it out (a summary's oldest
        messages dropped unread), or a repair that took it out for good (a second result of one call).

        O(view + compactions in force + repairs): for a batch that holds messages already logged.
        """
        view = self.view
        ids: set[str] = set()
        for j in range(view.length):
            m = view.items[j]
            ids.add(m.id)
            ids.add(self.stands_for(m))
            if kind_of(m) in NOTES:
                ids.update(self.covered_by(m))
        link = view.undo
        while link is not None:
            ids.update(self._source(mid) for mid in self.compactions[link.compaction_seq].covers)
            link = link.before.undo
        for record in self.compactions.values():
            if record.compacted:
                continue  # in force through the undo chain, or undone
            for action in record.actions:
                named = action.get("message_ids")
                if (
                    action.get("kind") in ("dropped", "repaired")
                    and not action.get("replacement_ids")
                    and isinstance(named, list)
                ):
                    ids.update(mid for mid in named if isinstance(mid, str))
        return ids

    def _set_view(self, view: ViewState) -> None:
        self.view = view
        self.token_anchor = self.token_memo = None
        self._on_rewrite()

    def held_output(self, digest: str) -> str | None:
        """The text of a tool output in the log whose SHA-256 is ``digest`` (an artifact reference's), or None.

        A cut made outside the session's own prepare (a framework's per-call filter) recorded no
        reference, but a reference names its text. The archive only grows (ids name content, so a
        message is never replaced by another), so each output is hashed once, the first time a
        recall needs it: later recalls, and the pages of one, cost a look-up.
        """
        with self.lock:  # the archive grows under this lock; iterating it unlocked races an append
            fresh = list(itertools.islice(self.archive.values(), self._digested, None))
            for m in fresh:
                if m.role == "tool" and m.text:
                    self._output_digests.setdefault(ArtifactRef.of(m.text).digest, m.id)
            self._digested += len(fresh)
            found = self._output_digests.get(digest)
            return self.archive[found].text if found is not None else None

    def _note_refs(self, m: Message) -> None:
        meta = m.metadata
        if not meta:
            return
        for key in ("truncated", "agentcontext"):
            entry = meta.get(key)
            if isinstance(entry, Mapping):
                ref = entry.get("ref")
                if isinstance(ref, str) and ref.startswith("artifact:"):
                    self.known_artifacts.add(ref)

    def catch_up(self) -> list[Record]:
        """Apply what other writers appended since this state was read; returns the records applied.

        Reads only the records after the last one applied (`SessionStore.load` with
        ``after``): O(missed records), never a full restore. A compaction another
        worker wrote rewrites the view here too (``on_rewrite`` lets the caller drop
        what was tied to the old one), so every worker sends the same prompt prefix.
        """
        applied: list[Record] = []
        with self.lock:
            corrupt = WarningLimiter(CorruptRecordWarning)
            unknown = WarningLimiter(UnknownRecordWarning)
            self.replaying = True
            try:
                stream = ((r.where, r.data) for r in self.store.load(after=self.seq))
                for where, data, next_seq in _with_next_seq(stream):
                    record = self._replay_one(where, data, corrupt, unknown, next_seq=next_seq)
                    if record is not None:
                        applied.append(record)
            finally:
                self.replaying = False
                corrupt.finish(self.store.location)
                unknown.finish(self.store.location)
        return applied

    def next_seqs(self, n: int = 1) -> list[int]:
        return list(range(self.seq + 1, self.seq + 1 + n))

    def check_writable(self) -> None:
        if self.closed:
            raise StoreError(f"the session {self.store.location} is closed; open it again to continue")
        if self.store.read_only:
            raise StoreError(f"the session {self.store.location} was opened read-only; it cannot be changed")


REPLACING = frozenset({"truncated", "masked", "arguments_shortened", "shortened", "repaired"})
"""Action kinds whose replacements stand one for one for the messages they name."""

NOTES = (MessageKind.SUMMARY, MessageKind.ELISION)
"""Kinds of message that stand for several others (their metadata's ``covers``)."""


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


def _with_next_seq(
    pairs: Iterable[tuple[str, dict[str, JSONValue]]],
) -> Iterator[tuple[str, dict[str, JSONValue], int | None]]:
    """Each record with the seq of the one after it (None at the end, or when it has no int seq)."""
    it = iter(pairs)
    current = next(it, None)
    while current is not None:
        following = next(it, None)
        seq = following[1].get("seq") if following is not None else None
        yield current[0], current[1], seq if isinstance(seq, int) and not isinstance(seq, bool) else None
        current = following


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
