"""The records a session log is made of (schema version 1).

Each record is a frozen dataclass registered with the one codec
(`agentcontext._serde.record_type`), which writes it as one JSON object with
``seq``, ``type`` and ``ts`` first. The view the model sees is *derived* from
these records by replaying them in order; nothing is ever updated in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .._serde import record_type
from ..compaction import Compaction
from ..messages import JSONValue, Message

__all__ = [
    "CheckpointRecord",
    "CompactionRecord",
    "DMailRecord",
    "HeaderRecord",
    "MessageRecord",
    "Record",
    "RevertRecord",
    "RewindRecord",
    "UndoRecord",
    "UsageRecord",
]


@record_type("header")
@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderRecord:
    """The first record of every log: which schema wrote it, and the session's id."""

    seq: int
    ts: str | None = None
    schema_version: int
    session_id: str
    created_by: str | None = None
    """The library (and version) that created the log."""


@record_type("message")
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    """A message appended to the conversation, kept whole forever."""

    seq: int
    ts: str | None = None
    message: Message


@record_type("usage")
@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRecord:
    """Token usage a provider reported for one model call."""

    seq: int
    ts: str | None = None
    prompt_tokens: int
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens served from the provider's cache, when reported."""
    model: str | None = None
    view_len: int
    """How many messages of the view the prompt covered (the view length at the last prepare)."""
    prompt_in_view: bool = True
    """False when another worker rewrote the view (a compaction, a revert) after the prepare this usage
    answers: the prompt is no longer a prefix of the view, so ``prompt_tokens`` says nothing of the view's
    size and `Session.tokens` counts the view instead."""


@record_type("checkpoint")
@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRecord:
    """A point the view can return to. Ids are unique in the session and never reused."""

    seq: int
    ts: str | None = None
    id: int
    label: str | None = None
    view_len: int = 0
    """The view's length at the checkpoint (a consistency check on restore)."""


@record_type("compaction")
@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionRecord:
    """A tombstone: the view was rewritten (compacted, masked, truncated or repaired).

    The new view is the first ``keep`` messages of the old one followed by the
    messages named in ``view``: ids of archived messages or of ``replacements``
    (summaries, placeholders, shortened copies, stub results), which are stored
    here in full. Restoring replays this without running the engine again, so it
    rebuilds exactly the same view. No message record is touched.
    """

    seq: int
    ts: str | None = None
    keep: int
    view: tuple[str, ...]
    replacements: tuple[Message, ...] = ()
    covers: tuple[str, ...] = ()
    """Ids of the messages the actions removed, replaced or shortened."""
    actions: tuple[Mapping[str, JSONValue], ...] = ()
    """The engine's actions (`Action.to_dict`), for reports and recall."""
    compacted: bool = True
    """True when the engine compacted (masked, dropped, summarized...); False for
    ingest truncation and repairs of new messages only."""
    level: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None

    @classmethod
    def of(
        cls,
        compaction: Compaction,
        *,
        seq: int,
        ts: str | None,
        tail: Sequence[Message],
        known: Mapping[str, Message],
    ) -> CompactionRecord:
        """The record of ``compaction``: its messages (``tail``) by id, in full where ``known`` lacks them.

        ``tail`` is the compaction's messages, followed by any the view gained
        while the engine ran (they stay after it).
        """
        return cls(
            seq=seq,
            ts=ts,
            keep=compaction.keep,
            view=tuple(m.id for m in tail),
            replacements=tuple({m.id: m for m in tail if m.id not in known}.values()),
            covers=compaction.removed,
            actions=tuple(a.to_dict() for a in compaction.actions),
            compacted=compaction.compacted,
            level=compaction.level.label,
            tokens_before=compaction.tokens_before,
            tokens_after=compaction.tokens_after,
        )


@record_type("revert")
@dataclass(frozen=True, slots=True, kw_only=True)
class RevertRecord:
    """The view went back to a checkpoint. Records after it stay in the log (recallable)."""

    seq: int
    ts: str | None = None
    checkpoint: int
    dmail: int | None = None
    """The seq of the D-Mail this revert delivered, if any."""


@record_type("rewind")
@dataclass(frozen=True, slots=True, kw_only=True)
class RewindRecord:
    """The view was cut back to its first ``length`` messages (the newest ones taken back).

    Like a revert, it deletes nothing: the messages stay in the log, recallable by id.
    """

    seq: int
    ts: str | None = None
    length: int


@record_type("undo")
@dataclass(frozen=True, slots=True, kw_only=True)
class UndoRecord:
    """The view went back to before a compaction (messages appended since are kept)."""

    seq: int
    ts: str | None = None
    compaction: int
    """The seq of the compaction record undone."""


@record_type("dmail")
@dataclass(frozen=True, slots=True, kw_only=True)
class DMailRecord:
    """A D-Mail sent back to a checkpoint (``status="sent"``) or withdrawn (``"cancelled"``)."""

    seq: int
    ts: str | None = None
    checkpoint: int
    text: str = ""
    status: Literal["sent", "cancelled"] = "sent"


Record = (
    HeaderRecord
    | MessageRecord
    | UsageRecord
    | CheckpointRecord
    | CompactionRecord
    | RevertRecord
    | RewindRecord
    | UndoRecord
    | DMailRecord
)
"""Every record type this version writes."""
