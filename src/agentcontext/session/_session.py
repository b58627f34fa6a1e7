"""`Session`: an agent's history as an append-only log, with the view derived from it.

::

    engine = ContextEngine(model="gpt-4o", window=32_000, reserve=4_000)
    with Session.open("runs/task-42.jsonl", engine=engine) as session:
        session.append(Message(role="user", content="fix the failing test"))
        while True:
            cp = session.checkpoint()
            prepared = session.prepare()           # compacts when needed; the log keeps every original
            reply = call_model(prepared.messages)
            session.record_usage(prompt_tokens=reply.usage.prompt_tokens)
            session.append(reply.message)
            ...                                     # tool results: session.append(...)
            if session.deliver_dmail():             # a tool called session.send_dmail(cp, "...")
                continue

Give the model the recall tool (`recall_tool_openai` / `recall_tool_anthropic`,
answered by `Session.handle_recall`) so it can read back what compaction took
out, and, if it may rewind, the D-Mail tool (`dmail_tool_openai` /
`dmail_tool_anthropic`, answered by `Session.handle_dmail`).

Everything the session does is a record appended to its store (`SessionStore`):
messages, provider usage, checkpoints, compactions, reverts, undos and
D-Mails. The view is what replaying the records gives, so restoring a session
(`Session.open` on an existing file) rebuilds exactly the view it had, without
running the engine again, and nothing is ever deleted or rewritten.

Compared with Kimi CLI's ``Context``, whose design this takes up:

- **Checkpoint ids never reset.** Kimi restarts them at 0 after every compaction,
  so a D-Mail aimed at an older checkpoint lands somewhere else. Here ids are
  unique for the session's life and a compaction leaves every checkpoint valid.
- **No CHECKPOINT messages in the context.** Kimi appends a
  ``<system>CHECKPOINT n</system>`` user message at every step so the model
  can name checkpoints; they eat context and count as preserved messages. Here
  checkpoints are records only; the model's context holds just the conversation.
- **Tool results are counted.** Kimi's token count is the last reported usage,
  so tool output appended since (possibly huge) is invisible to its trigger.
  `Session.tokens` is the last reported prompt tokens plus the counted tokens
  of everything appended since, tool results included, and it never reads 0
  after a compaction (it recounts the compacted view).
- **A revert loses nothing.** Kimi rotates the file and copies the kept lines
  back. Here a revert is one record: the reverted-away messages stay in the log
  (recallable by id) and a later checkpoint stays valid, so a revert can
  itself be undone by reverting "forward". It costs O(1), not a file copy, and
  works the same on every store.
- **A damaged line never stops a restore** (see `JSONLStore`): a record that
  is torn, nested too deeply, out of sequence or naming what the log does not
  hold is skipped with a warning naming it, and the records after it load. A
  log written by an older schema (Kimi's own format is version 0) is read as
  it is, and migrated only when asked (``migrate=True``), its original kept as
  a backup. A file that is not a session is never written.

A session is safe to share between threads (one lock guards every change); it
is not a way for two processes to share a JSONL file (the store's lock refuses
the second writer).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import socket
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, cast

from .. import _serde
from .._api import EngineState, feed_usage
from .._report import Report
from .._serde import RecordDecodeError, UnknownRecord
from ..artifacts import ArtifactStore
from ..exceptions import (
    ConcurrencyError,
    ConfigError,
    InvalidMessageError,
    RecallError,
    SessionLockedError,
    SessionWarning,
    UsageError,
)
from ..messages import Message, new_id
from ..tokens._base import TokenCounter
from ..tokens._calibrate import uncorrected
from ._dmail import answer_dmail_call
from ._recall import RecallSources, answer_recall_call, parse_recall_ref, recall_text
from ._records import (
    CheckpointRecord,
    CompactionRecord,
    DMailRecord,
    MessageRecord,
    Record,
    RevertRecord,
    RewindRecord,
    UndoRecord,
    UsageRecord,
)
from ._state import SessionState, _now, read_log
from ._types import (
    DEFAULT_RECALL_MAX_CHARS,
    DMAIL_TEMPLATE,
    Checkpoint,
    DMail,
    UsageTotals,
)
from ._view import SessionView, ViewState
from .stores import open_store
from .stores._base import (
    CorruptRecordWarning,
    FsyncPolicy,
    SessionStore,
    SupportsLease,
)
from .stores._url import parse_location

if TYPE_CHECKING:
    from ..engine import Engine, Prepared, ToolDefinitions

__all__ = ["Session"]

DEFAULT_LEASE_TTL = 90.0
"""Seconds one `Session.prepare` may hold a shared session's lease (a killed holder blocks others this long)."""

_RACES = 8
"""How many times `prepare` runs the engine again when another writer rewrote the view meanwhile."""

_T = TypeVar("_T")

_RACE_TIMEOUT = 10.0
"""Seconds a write that keeps losing races to other writers goes on catching up and trying again."""


def _restated(batch: list[tuple[int, Message]], archive: Mapping[str, Message]) -> bool:
    """Whether ``batch`` starts with the session's first two messages again under new ids, as a loop that
    rebuilds its whole history from dicts at every step sends it (``Message(...)`` or a per-message
    ``to_message`` give each message a new id each time). Three messages at least: a turn repeated word
    for word (a greeting, its reply) is two."""
    if len(batch) < 3 or len(archive) < 2 or batch[0][1].id in archive or batch[1][1].id in archive:
        return False
    first = list(itertools.islice(archive.values(), 2))
    return all(m.restates(logged) for (_, m), logged in zip(batch[:2], first, strict=True))


def _refuse_reverted_results(batch: list[tuple[int, Message]], was: ViewState, now: ViewState) -> None:
    """Raise for a tool result of ``batch`` whose call was in the view it was written for (``was``) and
    that a revert or rewind read since (``now``) took back: written after it, the result would answer
    nothing, and the abandoned branch's output would stand in the view as user text."""
    answers = [(i, m) for i, m in batch if m.role == "tool" and m.tool_call_id]
    if not answers:
        return

    def calls(view: ViewState) -> set[str]:
        return {c.id for j in range(view.length) for c in view.items[j].tool_calls}

    before, after = calls(was), calls(now)
    for i, m in answers:
        if m.tool_call_id in before and m.tool_call_id not in after:
            raise InvalidMessageError(
                f"the tool result for call {m.tool_call_id!r} was not appended: another worker reverted the "
                "session meanwhile, and the call it answers is no longer in the view (the log keeps both). "
                "Nothing of the batch was written; read the view (session.view) and go on from there",
                index=i,
                field="tool_call_id",
            )


class _Races:
    """The retries of a write that lost a race to another writer (its store refused it, nothing written).

    Each retry comes after a jittered pause that doubles from 1 ms up to 100 ms, so
    writers that collided spread out instead of colliding again in lockstep; after
    `_RACE_TIMEOUT` seconds of losing, the write gives up with `ConcurrencyError`.
    ``pause=False`` retries without pausing (inside an event loop, where sleeping
    would block it), still for at most that long.
    """

    def __init__(self, *, pause: bool = True) -> None:
        self._deadline = time.monotonic() + _RACE_TIMEOUT
        self._pause = 0.001 if pause else 0.0

    def again(self) -> bool:
        """After a lost race: pause, then True to retry; False when the time is up."""
        if time.monotonic() >= self._deadline:
            return False
        if self._pause:
            time.sleep(random.uniform(0.0, self._pause))
            self._pause = min(2 * self._pause, 0.1)
        return True


class Session:
    """One agent conversation, persisted as an append-only log (see the module docstring).

    Make one with `Session.open` (a JSON Lines file, the default) or
    `Session.from_store` (any `SessionStore`); both restore what the store
    already holds.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        engine: Engine | None = None,
        counter: TokenCounter | None = None,
        artifacts: ArtifactStore | None = None,
        recall_max_chars: int = DEFAULT_RECALL_MAX_CHARS,
        lease_ttl: float = DEFAULT_LEASE_TTL,
    ) -> None:
        """Set up a session on ``store`` without reading it; prefer `open` / `from_store`."""
        if not isinstance(store, SessionStore):
            raise ConfigError(f"store must implement SessionStore, got {type(store).__name__}")
        if counter is not None and not isinstance(counter, TokenCounter):
            raise ConfigError(f"counter must implement TokenCounter, got {type(counter).__name__}")
        if (
            isinstance(recall_max_chars, bool)
            or not isinstance(recall_max_chars, int)
            or recall_max_chars < 100
        ):
            raise ConfigError(f"recall_max_chars must be an int >= 100, got {recall_max_chars!r}")
        if isinstance(lease_ttl, bool) or not isinstance(lease_ttl, int | float) or not lease_ttl > 0:
            raise ConfigError(f"lease_ttl must be a positive number of seconds, got {lease_ttl!r}")
        self._log = SessionState(store, on_rewrite=self._view_rewritten)
        # Several workers may write this session (a database store): catch up before each step, and hold
        # the session's lease while preparing, so that no two workers summarize the same span.
        self._shared = bool(getattr(store, "shared", False)) and isinstance(store, SupportsLease)
        self._lease_ttl = float(lease_ttl)
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{new_id()[4:]}"
        self._engine = engine
        # The engine's state for this view (O(new) prepare while the view only grows), and the view
        # length the engine last returned (what a usage record covers).
        self._engine_state = EngineState.new()
        self._prepared_len: int | None = None
        self._prompt_gone = False
        """Another worker rewrote the view since this one's last prepare: its prompt is not the view's."""
        self._opened = False
        """The open's restore is done: a rewrite read after it is another worker's."""
        self._counter = counter if counter is not None else (engine.counter if engine is not None else None)
        self._artifacts: ArtifactStore = artifacts if artifacts is not None else store.default_artifacts()
        self.recall_max_chars = recall_max_chars
        self._last_report: Report | None = None
        self._async_locks: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._prepare_lock = threading.Lock()
        """Sync prepares take turns (the async ones take turns per loop, `_async_lock`)."""

    def _view_rewritten(self) -> None:
        """The view was replaced rather than extended: what was tied to the old one goes."""
        # Read from another worker (while catching up), the rewrite leaves whatever prompt this worker
        # built before it tied to no view, prepared here or not (an adapter's own prepare, a usage for
        # the view as it was): its usage must not say how large this view is (it read 6x too high after
        # a compaction to a sixth). A rewrite of this worker's own (a revert) starts over: a usage
        # without a prepare covers the whole view.
        self._prompt_gone = self._log.replaying and self._opened
        self._engine_state = EngineState.new()
        self._prepared_len = None
        self._last_report = None  # the prompt it came from is no longer the view's

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        location: str | Path,
        *,
        engine: Engine | None = None,
        counter: TokenCounter | None = None,
        create: bool = True,
        read_only: bool = False,
        fsync: FsyncPolicy | None = None,
        fsync_interval: float | None = None,
        artifacts: ArtifactStore | None = None,
        recall_max_chars: int = DEFAULT_RECALL_MAX_CHARS,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        lock_timeout: float | None = None,
        migrate: bool = False,
    ) -> Session:
        """Open (or create) the session at ``location``, restoring what it holds.

        What is there decides what happens, and nothing that is not a session is
        ever written:

        - nothing: a new session is created (its header written) when ``create``
          is True (the default), else `SessionNotFoundError`;
        - a session: it is restored, and appended to unless ``read_only``;
        - anything else (a conversation file, an empty or foreign file, garbage):
          `NotASessionError`, whatever ``create`` says, and the file is left byte
          for byte as it was. Make a session of a conversation with
          ``agentcontext import CONVERSATION SESSION``;
        - a log of an older schema (a Kimi CLI context file): read with
          ``read_only=True``; rewritten in the current schema only with
          ``migrate=True`` (the original is kept beside it as a backup, its mode
          too; see `migrated_backup`), else `NotASessionError`.

        Args:
            location: a JSON Lines file (``"runs/task-42.jsonl"``, the default store), or a database
                URL (``sqlite:///runs.db?session=ID``, ``postgresql://...?session=ID``,
                ``redis://...?session=ID``; see `agentcontext.session.stores.open_store`).
            engine: the engine `prepare` runs (a `ContextEngine`, or anything implementing
                `Engine`); its ingest truncation keeps full tool outputs in the session's
                artifact store (``<stem>.artifacts/`` beside a file), so they survive a restart and
                stay recallable.
            counter: counts tokens for `tokens` (default: the engine's counter).
            create: start a new session when there is none (default True).
            read_only: read without locking or writing (inspection, a second reader).
            fsync: `FsyncPolicy` for appends, for the stores that take one (default: the store's,
                ``"always"`` for files).
            fsync_interval: seconds between syncs for ``fsync="interval"``.
            artifacts: where offloaded outputs live (default: the store's own).
            recall_max_chars: page size of `handle_recall`; default 20,000.
            lease_ttl: on a store several workers share, how long one `prepare` may hold the
                session's lease (so that no two workers summarize the same span); a killed holder
                blocks the others at most this long. Default 90 seconds.
            lock_timeout: for a JSON Lines file, seconds to wait while another process has the
                session open for writing (default: refuse at once). Processes that take turns on
                one session (open, append or prepare, close) pass a few seconds.
            migrate: rewrite a log of an older schema in the current one (see above).

        Raises:
            ConfigError: a location no store understands, or an option its store does not take.
            NotASessionError: the location holds something that is not a session (see above).
            SessionNotFoundError: no session and ``create`` is False (or ``read_only``).
            StorePathError: the path is a directory or not a regular file.
            StorePermissionError: the file or its directory cannot be accessed.
            SessionLockedError: another process has the session open for writing.
            StoreError: the log was written by a newer schema and ``read_only`` is False.
        """
        options: dict[str, object] = {"read_only": read_only}
        if fsync is not None:
            options["fsync"] = fsync
        if fsync_interval is not None:
            options["fsync_interval"] = fsync_interval
        if lock_timeout is not None:
            options["lock_timeout"] = lock_timeout
        if migrate and parse_location(location).kind == "jsonl":
            options["migrate"] = True  # the JSONL store accepts a headerless (version 0) file for this open
        return cls.from_store(
            open_store(location, **options),
            engine=engine,
            counter=counter,
            create=create,
            artifacts=artifacts,
            recall_max_chars=recall_max_chars,
            lease_ttl=lease_ttl,
            migrate=migrate,
        )

    @classmethod
    def from_store(
        cls,
        store: SessionStore,
        *,
        engine: Engine | None = None,
        counter: TokenCounter | None = None,
        create: bool = True,
        artifacts: ArtifactStore | None = None,
        recall_max_chars: int = DEFAULT_RECALL_MAX_CHARS,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        migrate: bool = False,
    ) -> Session:
        """Open the session held by ``store`` (`SQLiteStore`, `MemoryStore`...), restoring it.

        Arguments as for `open`. A damaged record is skipped with a
        `CorruptRecordWarning` and a record of an unknown type with an
        `UnknownRecordWarning`; the rest loads.
        """
        session = cls(
            store,
            engine=engine,
            counter=counter,
            artifacts=artifacts,
            recall_max_chars=recall_max_chars,
            lease_ttl=lease_ttl,
        )
        store.open(create=create)
        try:
            session._log.restore(migrate=migrate)
        except BaseException:
            store.close()
            raise
        session._opened = True
        return session

    # ------------------------------------------------------------------ messages

    def append(self, message: Message) -> None:
        """Append one message to the log and the view; O(1) plus one write.

        A message already in the view (the same id and content: a task delivered
        to two workers, a retried request, a loop that passes its whole history
        at every step) is not appended again; the call does nothing. So is one a
        compaction in the view stands for (summarized, masked, cut or dropped: the
        compaction is its place in the view). A message a revert or rewind took
        back is appended again. On a store several workers share, an append that
        loses a race to another writer reads what it missed and is written after
        it (see `extend`).

        Raises:
            InvalidMessageError: ``message`` is not a `Message`, or its id is
                already in this session with different content (ids name content;
                build a new message, or use `Message.evolve`), or it is a tool result
                whose call another worker reverted meanwhile (read when the append
                lost its race; nothing is written).
            ConcurrencyError: other writers kept winning for 10 seconds; nothing was written.
            StoreError: the write failed; the session is unchanged.
        """
        self.extend((message,))

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages as one batch (one write, one fsync); messages already in the view are left out.

        When another writer appended first (its store refuses ours, with nothing
        written), the session reads only what it missed and writes the batch after
        it, less the messages that are now in the view; it retries with a jittered
        growing pause for up to 10 seconds before raising `ConcurrencyError`.
        """
        batch = list(messages)
        with self._log.lock:
            self._log.check_writable()
            for i, m in enumerate(batch):
                if not isinstance(m, Message):
                    raise InvalidMessageError(
                        f"a session holds Message objects, got {type(m).__name__}", index=i
                    )
            new = self._new_messages(list(enumerate(batch)))
            ts = _now()
            races = _Races()
            while new:
                seqs = self._log.next_seqs(len(new))
                try:
                    self._log.commit(
                        [MessageRecord(seq=s, ts=ts, message=m) for s, (_, m) in zip(seqs, new, strict=True)]
                    )
                    return
                except ConcurrencyError:
                    # Another writer appended first (nothing of ours was written): read what it wrote and
                    # append after it. A message it already appended (a task delivered to two workers) is
                    # not appended twice, even when its compaction took it out of the view meanwhile.
                    if not races.again():
                        raise
                    was = self._log.view
                    missed = self._log.catch_up()
                    if any(isinstance(r, RevertRecord | RewindRecord) for r in missed):
                        _refuse_reverted_results(new, was, self._log.view)
                    theirs = {r.message.id for r in missed if isinstance(r, MessageRecord)}
                    new = self._new_messages([(i, m) for i, m in new if m.id not in theirs])

    def _new_messages(self, batch: list[tuple[int, Message]]) -> list[tuple[int, Message]]:
        """``batch`` (messages with their index in the caller's) less those the view already holds or
        stands for, and those earlier in it.

        Raises `InvalidMessageError` for an id that already names other content.
        """
        log = self._log
        if _restated(batch, log.archive):
            first = next(iter(log.archive))
            if first in log.stood_for():  # still the start of the view (not after a clear or a rewind to 0)
                raise InvalidMessageError(
                    "the batch starts with this session's first messages again, under new ids: ids tell what "
                    "is already logged, so the whole history would be appended again. Pass the same Message "
                    "objects, or convert the whole history at once with agentcontext.formats.<format>."
                    "to_messages (it derives the same ids for the same history); nothing was written",
                    index=batch[0][0],
                    field="id",
                )
        seen: dict[str, Message] = {}
        new: list[tuple[int, Message]] = []
        in_view: set[str] | None = None
        stood_for: set[str] | None = None
        for i, m in batch:
            known = seen.get(m.id) or self._log.archive.get(m.id)
            if known is not None and known != m:
                raise InvalidMessageError(
                    f"id {m.id!r} already names a different message in this session; ids name content, "
                    "so give the new message its own id (omit id=, or use message.evolve(...))",
                    index=i,
                    field="id",
                )
            if m.id in seen:
                continue
            seen[m.id] = m
            if known is not None:
                # Only a message the log holds can be in the view or stood for: the ids of both are read
                # once per batch (a loop passing its whole history at every step cost O(history x view)).
                # A compaction that put a copy or a summary in its place stands for it: appending it again
                # would put it beside that (such a loop grew its log by the compacted history each step).
                if in_view is None:
                    view = log.view
                    in_view = {view.items[j].id for j in range(view.length)}
                if m.id in in_view:
                    continue
                if stood_for is None:
                    stood_for = log.stood_for()
                if m.id in stood_for:
                    continue
            new.append((i, m))
        return new

    @property
    def view(self) -> SessionView:
        """What the model sees now (before `prepare` compacts it further): a read-only snapshot."""
        return self._log.view.snapshot()

    def message(self, message_id: str) -> Message:
        """The message with this id (any message ever appended, or any replacement); raises `RecallError`.

        On a store several workers share, an id not known here is looked for again
        after reading what the others wrote (another worker may have appended it).
        """
        m = self._log.archive.get(message_id)
        if m is None and self._shared:
            self._read_others()
            m = self._log.archive.get(message_id)
        if m is None:
            raise RecallError(
                f"no message {message_id!r} in session {self._log.id!r} ({self._log.store.location})"
            )
        return m

    def stands_for(self, message: Message) -> str:
        """The id of the appended message ``message`` is, or is a copy of: a masked, cut, shortened or
        repaired copy names the message it replaces (through copies of copies)."""
        with self._log.lock:
            return self._log.stands_for(message)

    def covered_by(self, note: Message) -> list[str]:
        """The ids of the appended messages a summary or elision note stands for (through the summaries
        folded into it), as `stands_for` names them; [] for any other message."""
        with self._log.lock:
            return self._log.covered_by(note)

    def _read_others(self) -> None:
        """On a store several workers share, apply what the others wrote (one round trip, O(missed)).

        Called before whatever answers from what this worker knows and would be
        wrong about the others' work: a checkpoint, a D-Mail, a compaction, an
        artifact another worker recorded must not be denied (or a cancel
        answered "there was none" while theirs is pending).
        """
        if self._shared:
            self._log.catch_up()

    # ------------------------------------------------------------------ the engine

    def prepare(
        self,
        *,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        fill: bool | float = False,
    ) -> Prepared:
        """Run the engine on the view; record what it changed so a restore rebuilds it.

        When the engine changes the view (compacts, truncates or repairs), its
        `Compaction` is appended as a compaction record, and the session's view
        becomes the engine's output (stub results for calls still awaiting theirs
        stay in the prompt only). Nothing is written on a quiet step, and a quiet
        step is O(new messages). The compaction is in force only once its record
        is written: if the write fails, the view and the engine state stay as
        they were.

        On a store several workers share, the session first reads what the others
        wrote (a compaction one of them made included, so every worker sends the
        same prompt prefix), and holds the session's lease while the engine runs, so
        that no two workers summarize the same span. A record that loses a race is
        written again after what won it, or, when the view was rewritten meanwhile,
        the step is prepared again.

        Args:
            tools: the tool definitions sent with the request (counted against the budget).
            instructions: a system prompt sent outside the view (counted, never compacted).
            fill: a one-shot fit: fill the budget (less a small margin, or to this share of it:
                ``fill=0.9``) instead of compacting to the engine's target (see `ContextEngine.prepare`).

        Returns:
            The engine's `Prepared`: ``.messages`` to send, ``.report`` of what it did.

        Raises:
            ConfigError: the session has no engine.
            ContextOverflowError: even the essentials do not fit (from the engine).
            StoreError: the compaction record could not be written; nothing changed.
        """
        engine = self._require_engine()
        return self._run(
            lambda view, state: engine.prepare(
                view,
                tools=tools,
                instructions=instructions,
                state=state,
                artifacts=self._artifacts,
                fill=fill,
                recallable=True,
            )
        )

    async def aprepare(
        self,
        *,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        fill: bool | float = False,
    ) -> Prepared:
        """`prepare` with the engine's async driver (async summarizers); same records.

        Tasks of one event loop take turns (each sees the others' compactions).
        If another thread rewrites the view while the engine runs (a revert, an
        undo, a compaction), the result is stale and `ConcurrencyError` says so;
        messages appended meanwhile are kept after the compaction.
        """
        engine = self._require_engine()
        return await self._arun(
            lambda view, state: engine.aprepare(
                view,
                tools=tools,
                instructions=instructions,
                state=state,
                artifacts=self._artifacts,
                fill=fill,
                recallable=True,
            )
        )

    def compact(
        self,
        *,
        budget: int | None = None,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        fill: bool | float = False,
    ) -> Prepared:
        """Compact the view now, whatever its level (`ContextEngine.must_fit`), and record it.

        For when a provider rejected a prompt as too long although the counter
        said it fit, or to compact on demand (``agentcontext compact``).
        Recorded like `prepare`; `undo_compaction` takes it back.

        Args:
            budget: the most prompt tokens allowed (default: the engine's budget).
            tools: the tool definitions sent with the request (counted against the budget).
            fill: keep as much as ``budget`` holds (less a small margin) instead of compacting
                down to the engine's target; for a one-shot export rather than a running agent.
        """
        engine = self._require_engine()
        return self._run(
            lambda view, state: engine.must_fit(
                view,
                budget=budget,
                tools=tools,
                instructions=instructions,
                state=state,
                artifacts=self._artifacts,
                fill=fill,
                recallable=True,
            )
        )

    async def acompact(
        self,
        *,
        budget: int | None = None,
        tools: ToolDefinitions | None = None,
        instructions: str | None = None,
        fill: bool | float = False,
    ) -> Prepared:
        """`compact` with the engine's async driver."""
        engine = self._require_engine()
        return await self._arun(
            lambda view, state: engine.amust_fit(
                view,
                budget=budget,
                tools=tools,
                instructions=instructions,
                state=state,
                artifacts=self._artifacts,
                fill=fill,
                recallable=True,
            )
        )

    def _run(self, call: Callable[[SessionView, EngineState], Prepared]) -> Prepared:
        """Run the engine on the view and adopt its result (see `prepare`).

        Prepares take turns (`_prepare_lock`), but the session's own lock is held only to read the
        view and to record the result: appends from other threads go on while the engine (a model's
        summary) runs, and are kept after the compaction (`_adopt`); they waited for the summary.
        """
        with self._prepare_lock, self._leased():
            for race in range(_RACES):
                before, state = self._begin()
                prepared = call(before.snapshot(), state)
                try:
                    self._finish(before, prepared, pause=True)
                except ConcurrencyError:
                    if race == _RACES - 1:
                        raise
                    continue  # the view was rewritten (another writer, another thread): prepare again from it
                return prepared
        raise AssertionError("unreachable")  # pragma: no cover

    async def _arun(self, call: Callable[[SessionView, EngineState], Awaitable[Prepared]]) -> Prepared:
        """`_run` for async engines: tasks of one loop take turns; the thread lock is not held across awaits.

        On a store several workers share, its reads and writes (and their retries through an outage)
        run in a worker thread: on the loop they stopped every other task for as long as the server
        was away (a review: 0 ticks of a 10 ms ticker in 3 s).
        """
        async with self._async_lock(), self._aleased():
            for race in range(_RACES):
                before, state = await self._off_loop(self._begin)
                prepared = await call(before.snapshot(), state)
                try:
                    # Paused between lost races only off the loop, where sleeping blocks no one.
                    await self._off_loop(self._finish, before, prepared, self._shared)
                except ConcurrencyError:
                    if race == _RACES - 1 or not self._shared:
                        raise
                    continue
                return prepared
        raise AssertionError("unreachable")  # pragma: no cover

    def _begin(self) -> tuple[ViewState, EngineState]:
        """The view to prepare (after reading what other writers wrote) and the engine state for it."""
        with self._log.lock:
            self._log.check_writable()
            if self._shared:
                self._log.catch_up()
            return self._log.view, self._engine_state

    def _finish(self, before: ViewState, prepared: Prepared, pause: bool) -> None:
        """Record the engine's result on ``before`` (`_adopt`), pausing between lost races with ``pause``."""
        with self._log.lock:
            self._log.check_writable()
            self._adopt(before, prepared, pause=pause)

    async def _off_loop(self, work: Callable[..., _T], *args: object) -> _T:
        """``work(*args)`` in a worker thread on a shared store (database round trips), else on the loop."""
        if self._shared:
            return await asyncio.to_thread(work, *args)
        return work(*args)

    @contextlib.contextmanager
    def _leased(self) -> Iterator[None]:
        """Hold the session's lease on a shared store (no other worker summarizes meanwhile)."""
        if not self._shared:
            yield
            return
        store = cast(SupportsLease, self._log.store)
        owner = self._call_owner()
        waited, pause = 0.0, 0.01
        while not store.acquire_lease(owner, self._lease_ttl):
            self._check_waited(waited)
            time.sleep(pause)
            waited += pause
            pause = min(pause * 2, 0.5)
        try:
            yield
        finally:
            self._released(store.release_lease(owner))

    @contextlib.asynccontextmanager
    async def _aleased(self) -> AsyncIterator[None]:
        """`_leased` without blocking the event loop while another worker holds the lease."""
        if not self._shared:
            yield
            return
        store = cast(SupportsLease, self._log.store)
        owner = self._call_owner()
        waited, pause = 0.0, 0.01
        while not await asyncio.to_thread(store.acquire_lease, owner, self._lease_ttl):
            self._check_waited(waited)
            await asyncio.sleep(pause)
            waited += pause
            pause = min(pause * 2, 0.5)
        try:
            yield
        finally:
            self._released(await asyncio.to_thread(store.release_lease, owner))

    def _call_owner(self) -> str:
        """The lease's owner for one prepare: its own, so that two event loops (or threads) preparing
        one `Session` exclude each other as two workers do (one owner let both summarize the same span)."""
        return f"{self._owner}:{new_id()[4:16]}"

    def _check_waited(self, waited: float) -> None:
        if waited > 2 * self._lease_ttl:
            raise SessionLockedError(
                f"session {self._log.id!r} has been leased by another worker for over {waited:.0f} s; "
                f"its lease should have expired after {self._lease_ttl:g} s (check the workers' clocks)"
            )

    def _released(self, held: bool) -> None:
        """Say when the lease ran out during the prepare: another worker may have summarized the same span."""
        if not held:
            warnings.warn(
                f"{self._log.store.location}: the session's lease ran out ({self._lease_ttl:g} s, lease_ttl) "
                "while this worker prepared; another worker may have summarized the same span. Raise "
                "lease_ttl above the longest prepare (its summarizer's timeout and retries)",
                SessionWarning,
                stacklevel=4,
            )

    def _require_engine(self) -> Engine:
        if self._engine is None:
            raise ConfigError("this session has no engine: pass engine= to Session.open to use prepare()")
        return self._engine

    def _async_lock(self) -> asyncio.Lock:
        """One lock per event loop, so that the tasks of a loop prepare in turn."""
        loop = asyncio.get_running_loop()
        locks = self._async_locks
        if locks is None or locks[0] is not loop:
            with self._log.lock:
                locks = self._async_locks
                if locks is None or locks[0] is not loop:
                    locks = self._async_locks = (loop, asyncio.Lock())
        return locks[1]

    def _commit(self, build: Callable[[int], Sequence[Record]], *, pause: bool = True) -> None:
        """Commit the records ``build`` makes, numbered from the seq it is given (none: nothing to write);
        after a race lost to another writer, read what it wrote and build them again (`_Races`)."""
        races = _Races(pause=pause)
        while True:
            (seq,) = self._log.next_seqs()
            records = build(seq)
            if not records:
                return
            try:
                self._log.commit(list(records))
                return
            except ConcurrencyError:
                if not races.again():
                    raise
                self._log.catch_up()

    def _adopt(self, before: ViewState, prepared: Prepared, *, pause: bool = True) -> None:
        """Record the engine's compaction of ``before`` (the view it was given) and take its state.

        Messages appended since ``before`` was read (by this process, or by another
        writer whose records a lost race brings in) are kept after the compaction.
        A view rewritten since (revert, undo, another compaction) makes the result
        stale: nothing is recorded and `ConcurrencyError` says so.
        """
        compaction = prepared.compaction

        def records(seq: int) -> list[Record]:
            # After a lost race, the compaction goes after the other writer's records.
            now = self._log.view
            extra: Sequence[Message] = ()
            if now is not before:
                if not (now.items is before.items and now.length >= before.length):
                    raise ConcurrencyError(
                        f"the view of session {self._log.id!r} was rewritten (a revert, an undo or another "
                        "compaction) while the engine prepared it; the result is stale and nothing was "
                        "recorded. Call prepare() again"
                    )
                extra = now.items[before.length : now.length]
            if compaction is None:
                return []
            tail = [*compaction.messages, *extra]
            return [CompactionRecord.of(compaction, seq=seq, ts=_now(), tail=tail, known=self._log.archive)]

        self._commit(records, pause=pause)
        # Taken only now: a failed write above leaves the engine state as it was with the view.
        self._engine_state = prepared.state
        self._prepared_len = prepared.state.length
        self._prompt_gone = False
        self._last_report = prepared.report

    def reload(self) -> int:
        """Read what other writers appended to this session since it was read; returns how many records.

        O(missed records) (`SessionStore.load` with ``after``), never a full
        restore. `prepare` does this itself on stores several workers share; call
        it before reading `view` or `tokens` when another worker may have written.
        """
        return len(self._log.catch_up())

    # ------------------------------------------------------------------ tokens

    def record_usage(
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int | None = None,
        total_tokens: int | None = None,
        cached_tokens: int | None = None,
        model: str | None = None,
        report: Report | None = None,
    ) -> None:
        """Record the usage a provider reported for the last model call.

        The prompt is taken to be the view as the last `prepare` returned it (or,
        without a prepare since the session was opened or reverted, the whole
        view now: then call this before appending the reply). From here on,
        `tokens` is ``prompt_tokens`` plus the counted tokens of every message
        appended since; when this session read another worker's rewrite of the view
        (a compaction, a revert) since its last prepare or usage, with a prepare or
        without, the prompt is not the view's, and `tokens` counts the view (the
        usage is kept in `usage_totals`). The engine learns from it too (`ContextEngine.record_usage`:
        an engine counting by estimate corrects its counts with it) when this usage
        is the reply to the session's last `prepare`.

        Args:
            report: the `Report` of the request this usage is for, when the session's
                own `prepare` did not make it (an adapter that prepared the view and the
                run's new input with the engine itself). The engine learns from it
                instead of from the last `prepare`, and the prompt is taken to be the
                whole view now (unless another worker rewrote it, as above).

        Raises:
            ConfigError: a token count is negative or not an int, or ``report`` is not a `Report`.
        """
        if report is not None and not isinstance(report, Report):
            raise ConfigError(f"report must be the Report of the request sent, got {type(report).__name__}")
        for name, value in (
            ("prompt_tokens", prompt_tokens),
            ("completion_tokens", completion_tokens),
            ("total_tokens", total_tokens),
            ("cached_tokens", cached_tokens),
        ):
            if value is None and name != "prompt_tokens":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
        with self._log.lock:
            self._log.check_writable()
            sent = report or self._last_report

            def records(seq: int) -> list[Record]:
                # Recomputed after a lost race: messages another worker appended are not in the prompt
                # (the prepared length still bounds it), and a view it rewrote is taken whole.
                covered = self._log.view.length
                if report is None and self._prepared_len is not None:
                    covered = min(self._prepared_len, covered)
                return [
                    UsageRecord(
                        prompt_in_view=not self._prompt_gone,
                        seq=seq,
                        ts=_now(),
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                        total_tokens=total_tokens,
                        cached_tokens=cached_tokens,
                        model=model,
                        view_len=covered,
                    )
                ]

            self._commit(records)
            self._last_report = None
            self._prompt_gone = False
        if sent is not None and self._engine is not None:
            # Never raises (logged): an engine's failure must not undo the record just written.
            feed_usage(self._engine, sent, prompt_tokens)

    @property
    def tokens(self) -> int:
        """Prompt tokens the view costs now: the last reported usage plus everything counted since.

        Without a usage to start from (a new session, after a revert or a
        compaction) the view is counted; counts are cached per message, so each
        call costs O(messages appended since the last call).

        Raises:
            ConfigError: the session has neither an engine nor a counter.
        """
        counter = self._counter
        if counter is None:
            raise ConfigError("counting tokens needs a counter: pass engine= or counter= to Session.open")
        # A calibrated counter's correction moves with usage (any session's, when they share an
        # engine): the memo keeps the uncorrected count, corrected when read.
        units, correct = uncorrected(counter)
        with self._log.lock:
            view = self._log.view
            # A pure function of the records and the counter (a restored session gives the same
            # number); the memo only saves recounting the prefix it covers.
            memo, anchor = self._log.token_memo, self._log.token_anchor
            if memo is not None and memo[0] <= view.length:
                covered, reported, counted = memo
            elif anchor is not None and anchor[0] <= view.length:
                (covered, reported), counted = anchor, 0
            else:
                covered, reported, counted = view.length, 0, units.count_messages(view.snapshot())
            counted += sum(units.count_message(view.items[i]) for i in range(covered, view.length))
            self._log.token_memo = (view.length, reported, counted)
        return reported + correct(counted)

    @property
    def last_usage(self) -> UsageRecord | None:
        """The newest usage record, or None."""
        return self._log.usage

    @property
    def usage_totals(self) -> UsageTotals:
        """Reported usage summed over every call of the session."""
        return self._log.totals

    # ------------------------------------------------------------------ checkpoints and revert

    def checkpoint(self, *, label: str | None = None) -> int:
        """Mark the current view; returns the checkpoint's id (0, 1, 2, ...), valid for the session's life.

        Costs one small record and O(1) memory; nothing enters the model's context.
        On a store several workers share, a checkpoint that loses a race to another
        writer first reads what it wrote, like `prepare` does: the checkpoint then
        marks the view with the other worker's records, the view the next
        `prepare` would start from.
        """
        if label is not None and not isinstance(label, str):
            raise ConfigError(f"label must be a str or None, got {type(label).__name__}")
        with self._log.lock:
            self._log.check_writable()
            made: list[CheckpointRecord] = []

            def records(seq: int) -> list[Record]:
                # After a lost race, the checkpoint marks the view with what the other writer wrote.
                made.append(
                    CheckpointRecord(
                        seq=seq,
                        ts=_now(),
                        id=self._log.next_checkpoint,
                        label=label,
                        view_len=self._log.view.length,
                    )
                )
                return [made[-1]]

            self._commit(records)
            return made[-1].id

    @property
    def checkpoints(self) -> tuple[Checkpoint, ...]:
        """Every checkpoint, oldest first (including those a revert went back past)."""
        return tuple(
            Checkpoint(id=r.id, seq=r.seq, ts=r.ts, label=r.label, messages=v.length)
            for r, v in sorted(self._log.checkpoints.values(), key=lambda item: item[0].id)
        )

    def revert_to(self, checkpoint_id: int) -> None:
        """Return the view to what it was at ``checkpoint_id``.

        The records after the checkpoint stay in the log: their messages can
        still be recalled by id, and every checkpoint stays valid, so reverting
        to a later checkpoint undoes the revert. Appends continue from the
        checkpoint's view.

        On a store several workers share, a checkpoint another worker took is found
        (this worker reads what they wrote first).

        Raises:
            UsageError: no such checkpoint.
            ConcurrencyError: another writer wrote since this worker last read the
                session; nothing was reverted (it would take back their work unseen).
        """
        with self._log.lock:
            self._log.check_writable()
            self._require_checkpoint(checkpoint_id)
            (seq,) = self._log.next_seqs()
            self._write_once(
                RevertRecord(seq=seq, ts=_now(), checkpoint=checkpoint_id), f"revert_to({checkpoint_id})"
            )

    def rewind(self, length: int) -> None:
        """Take back the newest messages of the view: keep only its first ``length``.

        Like a revert, nothing is deleted: the taken-back messages stay in the
        log, recallable by id, and a checkpoint taken before still returns to
        them. For a framework's "pop the last item" (the Agents SDK's
        ``pop_item``) without a checkpoint at every step.

        Raises:
            UsageError: ``length`` is not an int within ``[0, len(view)]``.
        """
        with self._log.lock:
            self._log.check_writable()
            size = self._log.view.length
            if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= size:
                raise UsageError(
                    f"rewind takes a length within [0, {size}] (the view's length), got {length!r}"
                )
            if length == size:
                return
            (seq,) = self._log.next_seqs()
            self._write_once(RewindRecord(seq=seq, ts=_now(), length=length), f"rewind({length})")

    def clear(self) -> None:
        """Empty the view (`rewind` to 0); the log keeps every message, recallable by id."""
        self.rewind(0)

    def _write_once(self, record: Record, what: str) -> None:
        """Write ``record``, which undoes part of the view: refused, not redone, when another writer wrote
        since this worker last read the session (it would undo their work unseen)."""
        try:
            self._log.commit([record])
        except ConcurrencyError as e:
            raise ConcurrencyError(
                f"{what} was not written: another writer wrote to session {self._log.id!r} "
                f"({self._log.store.location}) since this worker last read it, and it would take back "
                "their work unseen. Call reload(), look at the view, then try again"
            ) from e

    def _require_checkpoint(self, checkpoint_id: object) -> int:
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int):
            raise UsageError(f"a checkpoint id is an int, got {type(checkpoint_id).__name__}")
        if checkpoint_id not in self._log.checkpoints:
            self._read_others()  # another worker may have taken it (its id was shown to the model)
        if checkpoint_id not in self._log.checkpoints:
            known = sorted(self._log.checkpoints)
            span = f"0..{known[-1]}" if known else "none yet; call checkpoint() first"
            raise UsageError(f"no checkpoint {checkpoint_id} in this session (checkpoints: {span})")
        return checkpoint_id

    # ------------------------------------------------------------------ D-Mail

    def send_dmail(self, checkpoint_id: int, text: str) -> DMail:
        """Send a message back to a checkpoint; `deliver_dmail` delivers it (Kimi CLI's D-Mail).

        Typically a tool handler calls this when the model decides an earlier
        step went wrong. The D-Mail is a record, so it survives a crash before
        delivery. At most one is pending. On a store several workers share, a
        send that loses a race reads what the other writer wrote and is retried
        like an append (a D-Mail that writer sent meanwhile makes it refuse).

        Raises:
            UsageError: no such checkpoint, ``text`` is empty, or a D-Mail is already pending
                (deliver or `cancel_dmail` it first).
        """
        if not isinstance(text, str) or not text.strip():
            raise UsageError("a D-Mail needs non-empty text")
        with self._log.lock:
            self._log.check_writable()
            self._require_checkpoint(checkpoint_id)
            sent: list[DMail] = []

            def records(seq: int) -> list[Record]:
                # Checked again after a lost race: the other writer may have sent one meanwhile.
                if self._log.dmail is not None:
                    raise UsageError(
                        f"a D-Mail to checkpoint {self._log.dmail.checkpoint} is already pending; "
                        "deliver_dmail() or cancel_dmail() it first"
                    )
                sent.append(DMail(checkpoint=checkpoint_id, text=text, seq=seq))
                return [DMailRecord(seq=seq, ts=_now(), checkpoint=checkpoint_id, text=text)]

            self._commit(records)
            return sent[-1]

    @property
    def pending_dmail(self) -> DMail | None:
        """The D-Mail waiting for `deliver_dmail`, or None."""
        d = self._log.dmail
        return None if d is None else DMail(checkpoint=d.checkpoint, text=d.text, seq=d.seq)

    def cancel_dmail(self) -> bool:
        """Withdraw the pending D-Mail; returns False when there was none (or another worker delivered or
        cancelled it first)."""
        with self._log.lock:
            self._log.check_writable()
            self._read_others()  # a D-Mail another worker sent is pending here too
            cancelled: list[DMailRecord] = []

            def records(seq: int) -> list[Record]:
                # Read again after a lost race: the other writer may have delivered or cancelled it.
                d = self._log.dmail
                cancelled[:] = (
                    []
                    if d is None
                    else [DMailRecord(seq=seq, ts=_now(), checkpoint=d.checkpoint, status="cancelled")]
                )
                return list(cancelled)

            self._commit(records)
            return bool(cancelled)

    def deliver_dmail(self) -> Message | None:
        """The agent loop's D-Mail step: revert to the D-Mail's checkpoint and append it as a user message.

        Call it after each step's tool results. Returns the injected message, or
        None when no D-Mail is pending. The revert and the message are written as
        one batch, so a crash leaves either both or neither. Of several workers
        running this step on one shared session, one delivers it and the others
        get None.
        """
        with self._log.lock:
            self._log.check_writable()
            self._read_others()
            delivered: list[Message] = []

            def records(seq: int) -> list[Record]:
                # Read again after a lost race: the other writer may have delivered or cancelled it. A
                # D-Mail goes back to its checkpoint, so what the other writer appended meanwhile is left
                # behind with the rest of the abandoned branch (in the log, recallable), as intended.
                d = self._log.dmail
                delivered.clear()
                if d is None:
                    return []
                delivered.append(
                    Message(
                        role="user",
                        content=DMAIL_TEMPLATE.format(text=d.text),
                        metadata={"dmail": {"checkpoint": d.checkpoint, "sent_seq": d.seq}},
                    )
                )
                ts = _now()
                return [
                    RevertRecord(seq=seq, ts=ts, checkpoint=d.checkpoint, dmail=d.seq),
                    MessageRecord(seq=seq + 1, ts=ts, message=delivered[0]),
                ]

            self._commit(records)
            return delivered[0] if delivered else None

    def handle_dmail(self, arguments: str | Mapping[str, object]) -> str:
        """Answer a model's D-Mail tool call (`dmail_tool_openai`, `dmail_tool_anthropic`).

        Without a checkpoint, returns the list of checkpoints (the newest 20: id,
        label, messages in view). With a checkpoint and a message, queues the
        D-Mail with `send_dmail`; your loop's `deliver_dmail` delivers it once
        the step's tool results are in. Mistakes come back as ``dmail failed:
        ...`` text for the model, never as exceptions.
        """
        with self._log.lock:
            self._read_others()  # the model may name a checkpoint another worker showed it
        return answer_dmail_call(arguments, checkpoints=self.checkpoints, send=self.send_dmail)

    # ------------------------------------------------------------------ undo

    def undo_compaction(self) -> CompactionRecord:
        """Return the view to just before its newest compaction; messages appended since are kept.

        For re-compacting differently (another summarizer or prompt): undo, then
        `prepare` again. Undoing again goes one compaction further back. The
        compaction record stays in the log.

        Returns:
            The compaction that was undone.

        Raises:
            UsageError: the view has no compaction to undo.
        """
        with self._log.lock:
            self._log.check_writable()
            link = self._log.view.undo
            if link is None:
                raise UsageError("the current view has no compaction to undo")
            (seq,) = self._log.next_seqs()
            self._write_once(
                UndoRecord(seq=seq, ts=_now(), compaction=link.compaction_seq), "undo_compaction()"
            )
            return self._log.compactions[link.compaction_seq]

    @property
    def compactions(self) -> tuple[CompactionRecord, ...]:
        """Every compaction record, oldest first (undone ones included)."""
        return tuple(self._log.compactions[s] for s in sorted(self._log.compactions))

    # ------------------------------------------------------------------ recall

    def recall(self, ref: str) -> str:
        """The full original behind a reference from this session's context.

        - ``message:<id>``: any message ever appended (compacted away, masked,
          reverted: the log keeps it), or a replacement; a message cut at ingest
          gives its full output.
        - ``artifact:sha256:<hex>``: an offloaded tool output this session recorded.
        - ``compaction:<n>``: the messages compaction ``n`` replaced, as a transcript.
        - a bare message id is accepted too.

        Raises:
            RecallError: the reference is malformed, or names nothing in *this*
                session (another session's ids and artifacts, paths and URLs are
                refused, whatever exists on disk).
            StoreError: the artifact file exists but cannot be read or is damaged.
        """
        with self._log.lock:
            self._read_others()  # what another worker compacted or offloaded is recallable here too
        return recall_text(ref, self._sources())

    def recall_message(self, ref: str) -> Message:
        """The `Message` behind a ``message:<id>`` reference (or a bare id); raises `RecallError`."""
        kind, key = parse_recall_ref(ref)
        if kind not in ("message", None):
            raise RecallError(f"{ref!r} does not name a message; expected message:<id>")
        return self.message(key)

    def handle_recall(self, arguments: str | Mapping[str, object]) -> str:
        """Answer a model's recall tool call; returns the text for the tool result.

        Args:
            arguments: the call's arguments as the provider gave them: the JSON
                string of an OpenAI tool call, or the ``input`` dict of an
                Anthropic ``tool_use`` block. ``{"ref": ..., "offset": ...}``.

        Returns:
            At most `recall_max_chars` characters from ``offset``, with a note on
            how to read on when there is more. A bad reference or argument comes
            back as a ``recall failed: ...`` text the model can act on (it is
            the model's mistake, not the program's).

        Raises:
            StoreError: an artifact file is unreadable or damaged (a real fault).
        """
        with self._log.lock:
            self._read_others()
        return answer_recall_call(arguments, self._sources(), max_chars=self.recall_max_chars)

    def _sources(self) -> RecallSources:
        return RecallSources(
            archive=self._log.archive,
            held_output=self._log.held_output,
            compactions=self._log.compactions,
            known_artifacts=self._log.known_artifacts,
            stores=(self._artifacts,),
        )

    # ------------------------------------------------------------------ inspection and lifecycle

    @property
    def id(self) -> str:
        """The session's id, from its header record."""
        return self._log.id

    @property
    def location(self) -> str:
        """Where the session is stored (a path, ``path#session``...)."""
        return self._log.store.location

    @property
    def store(self) -> SessionStore:
        """The store holding the records."""
        return self._log.store

    @property
    def engine(self) -> Engine | None:
        """The engine `prepare` runs, if any; assign another for the next prepares (below)."""
        return self._engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        """Prepare with ``engine`` from now on: one of the same model with another reply reserve (a request
        asking for a longer reply), without reopening the session. What the previous engine knew of the view
        carries over (it is checked on use: a full pass when it does not fit); a counter taken from the old
        engine is taken from the new one."""
        if not all(hasattr(engine, name) for name in ("prepare", "aprepare", "counter", "budget")):
            raise ConfigError(f"engine must implement agentcontext.Engine, got {type(engine).__name__}")
        with self._prepare_lock, self._log.lock:
            if self._engine is not None and self._counter is self._engine.counter:
                self._counter = engine.counter
            self._engine = engine

    @property
    def artifacts(self) -> ArtifactStore:
        """Where this session's offloaded tool outputs live."""
        return self._artifacts

    @property
    def last_seq(self) -> int:
        """The seq of the newest record (0 is the header)."""
        return self._log.seq

    @property
    def schema_version(self) -> int:
        """The schema the log was written with, as read (older ones are upcast and migrated on write)."""
        return self._log.schema_version

    @property
    def migrated_backup(self) -> str | None:
        """Where the original of a migrated older-schema log was kept, when this open migrated it."""
        return self._log.migrated_to

    @property
    def unknown_records(self) -> tuple[UnknownRecord, ...]:
        """Records of types this version does not know, kept as read."""
        return tuple(self._log.unknown)

    @property
    def read_only(self) -> bool:
        """True when opened read-only."""
        return self._log.store.read_only

    def records(self) -> Iterator[object]:
        """Re-read and decode every record from the store, oldest first (for inspection tools).

        Yields record objects (`MessageRecord`, `CompactionRecord`...) and
        `UnknownRecord` for types this version does not know; damaged ones are
        skipped with a warning. Costs a full read of the store.
        """
        for where, data in read_log(self._log.store)[1]:
            try:
                yield _serde.decode_record(data, where=where)
            except RecordDecodeError as exc:
                warnings.warn(
                    f"{self._log.store.location}: {exc}; skipped", CorruptRecordWarning, stacklevel=2
                )

    def close(self) -> None:
        """Release the store (its lock, file or connection); idempotent."""
        with self._log.lock:
            if not self._log.closed:
                self._log.closed = True
                self._log.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Session({self._log.store.location!r}, id={self._log.id!r}, view={self._log.view.length} messages, "
            f"records={self._log.seq + 1})"
        )
