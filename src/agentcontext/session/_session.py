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

Compared with seed 003 (Kimi CLI's ``Context``), which this redoes:

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
- **A damaged line never stops a restore** (see `JSONLStore`), and a log
  written by an older schema (Kimi's own format is version 0) is upcast and
  migrated, its original kept as a backup.

A session is safe to share between threads (one lock guards every change); it
is not a way for two processes to share a JSONL file (the store's lock refuses
the second writer).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from .. import _serde
from .._serde import RecordDecodeError, UnknownRecord
from ..artifacts import ArtifactStore, MemoryArtifactStore
from ..exceptions import (
    ConfigError,
    InvalidMessageError,
    RecallError,
    UsageError,
)
from ..messages import Message
from ..tokens._base import TokenCounter
from ._dmail import answer_dmail_call
from ._recall import RecallSources, answer_recall_call, parse_recall_ref, recall_text
from ._records import (
    CheckpointRecord,
    CompactionRecord,
    DMailRecord,
    MessageRecord,
    RevertRecord,
    UndoRecord,
    UsageRecord,
)
from ._state import SessionState, _is_pending_stub, _now, read_log
from ._types import (
    DEFAULT_RECALL_MAX_CHARS,
    DMAIL_TEMPLATE,
    Checkpoint,
    DMail,
    SupportsCalibration,
    UsageTotals,
)
from ._view import SessionView, ViewState
from .stores._base import (
    CorruptRecordWarning,
    FsyncPolicy,
    SessionStore,
)
from .stores.jsonl import JSONLStore

if TYPE_CHECKING:
    from ..engine import ContextEngine, Prepared

__all__ = ["Session"]


class Session(SessionState):
    """One agent conversation, persisted as an append-only log (see the module docstring).

    Make one with `Session.open` (a JSON Lines file, the default) or
    `Session.from_store` (any `SessionStore`); both restore what the store
    already holds.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        engine: ContextEngine | None = None,
        counter: TokenCounter | None = None,
        artifacts: ArtifactStore | None = None,
        recall_max_chars: int = DEFAULT_RECALL_MAX_CHARS,
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
        super().__init__(store, engine=engine)
        self._counter = counter if counter is not None else (engine.counter if engine is not None else None)
        self._artifacts: ArtifactStore = artifacts if artifacts is not None else store.default_artifacts()
        self._other_artifacts: tuple[ArtifactStore, ...] = ()
        self.recall_max_chars = recall_max_chars
        self._last_prompt: Sequence[Message] | None = None
        if engine is not None:
            self._attach_engine(engine)

    def _view_rewritten(self) -> None:
        self._last_prompt = None  # the prompt it came from is no longer the view's

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        engine: ContextEngine | None = None,
        counter: TokenCounter | None = None,
        create: bool = True,
        read_only: bool = False,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 1.0,
        artifacts: ArtifactStore | None = None,
        recall_max_chars: int = DEFAULT_RECALL_MAX_CHARS,
    ) -> Session:
        """Open (or create) the session in a JSON Lines file, restoring what it holds.

        Args:
            path: the session file, e.g. ``"runs/task-42.jsonl"``.
            engine: the `ContextEngine` `prepare` runs; its ingest truncator is
                pointed at the session's artifact directory (``<stem>.artifacts/``)
                so offloaded tool outputs survive a restart and stay recallable.
            counter: counts tokens for `tokens` (default: the engine's counter).
            create: start a new session when the file does not exist (default True).
            read_only: read without locking or writing (inspection, a second reader).
            fsync: `FsyncPolicy` for appends; default ``"always"``.
            fsync_interval: seconds between syncs for ``fsync="interval"``.
            artifacts: where offloaded outputs live (default ``<stem>.artifacts/``).
            recall_max_chars: page size of `handle_recall`; default 20,000.

        Raises:
            SessionNotFoundError: no file and ``create`` is False (or ``read_only``).
            StorePathError: the path is a directory or not a regular file.
            StorePermissionError: the file or its directory cannot be accessed.
            SessionLockedError: another process has the session open for writing.
            StoreError: the log was written by a newer schema and ``read_only`` is False.
        """
        store = JSONLStore(path, fsync=fsync, fsync_interval=fsync_interval, read_only=read_only)
        return cls.from_store(
            store,
            engine=engine,
            counter=counter,
            create=create,
            artifacts=artifacts,
            recall_max_chars=recall_max_chars,
        )

    @classmethod
    def from_store(
        cls,
        store: SessionStore,
        *,
        engine: ContextEngine | None = None,
        counter: TokenCounter | None = None,
        create: bool = True,
        artifacts: ArtifactStore | None = None,
        recall_max_chars: int = DEFAULT_RECALL_MAX_CHARS,
    ) -> Session:
        """Open the session held by ``store`` (`SQLiteStore`, `MemoryStore`...), restoring it.

        Arguments as for `open`. A damaged record is skipped with a
        `CorruptRecordWarning` and a record of an unknown type with an
        `UnknownRecordWarning`; the rest loads.
        """
        session = cls(
            store, engine=engine, counter=counter, artifacts=artifacts, recall_max_chars=recall_max_chars
        )
        store.open(create=create)
        try:
            session._restore()
        except BaseException:
            store.close()
            raise
        return session

    def _attach_engine(self, engine: ContextEngine) -> None:
        truncator = engine.truncator
        if truncator is not None:
            if truncator.store is None or isinstance(truncator.store, MemoryArtifactStore):
                # The default keeps full outputs in memory, lost at exit: keep them with the session.
                engine.truncator = dataclasses.replace(truncator, store=self._artifacts)
            elif truncator.store is not self._artifacts:
                self._other_artifacts = (truncator.store,)
        engine.reset()

    # ------------------------------------------------------------------ messages

    def append(self, message: Message) -> None:
        """Append one message to the log and the view; O(1) plus one write.

        Raises:
            InvalidMessageError: ``message`` is not a `Message`, or its id is
                already in this session with different content (ids name content;
                build a new message, or use `Message.evolve`).
            StoreError: the write failed; the session is unchanged.
        """
        self.extend((message,))

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages as one batch (one write, one fsync)."""
        batch = list(messages)
        with self._lock:
            self._check_writable()
            seen: dict[str, Message] = {}
            for i, m in enumerate(batch):
                if not isinstance(m, Message):
                    raise InvalidMessageError(
                        f"a session holds Message objects, got {type(m).__name__}", index=i
                    )
                known = seen.get(m.id) or self._archive.get(m.id)
                if known is not None and known != m:
                    raise InvalidMessageError(
                        f"id {m.id!r} already names a different message in this session; ids name content, "
                        "so give the new message its own id (omit id=, or use message.evolve(...))",
                        index=i,
                        field="id",
                    )
                seen[m.id] = m
            seqs = self._next(len(batch))
            ts = _now()
            self._commit([MessageRecord(seq=s, ts=ts, message=m) for s, m in zip(seqs, batch, strict=True)])

    @property
    def view(self) -> SessionView:
        """What the model sees now (before `prepare` compacts it further): a read-only snapshot."""
        return self._view.snapshot()

    def message(self, message_id: str) -> Message:
        """The message with this id (any message ever appended, or any replacement); raises `RecallError`."""
        m = self._archive.get(message_id)
        if m is None:
            raise RecallError(f"no message {message_id!r} in session {self._id!r}")
        return m

    # ------------------------------------------------------------------ the engine

    def prepare(self) -> Prepared:
        """Run the engine on the view; record what it changed so a restore rebuilds it.

        When the engine compacts (or truncates or repairs), a compaction record
        names what it replaced and the messages that stand in their place, and
        the session's view becomes the engine's output (minus stub results for
        calls still awaiting theirs). Nothing else is written on a quiet step, and
        a quiet step is O(new messages).

        Returns:
            The engine's `Prepared`: ``.messages`` to send, ``.report`` of what it did.

        Raises:
            ConfigError: the session has no engine.
            ContextOverflowError: even the essentials do not fit (from the engine).
        """
        engine = self._require_engine()
        with self._lock:
            self._check_writable()
            before = self._view
            prepared = engine.prepare(before.snapshot())
            self._after_prepare(before, prepared)
            return prepared

    async def aprepare(self) -> Prepared:
        """`prepare` with the engine's async driver (async summarizers); same records."""
        engine = self._require_engine()
        self._check_writable()
        before = self._view
        prepared = await engine.aprepare(before.snapshot())
        with self._lock:
            self._after_prepare(before, prepared)
        return prepared

    def compact(self, *, budget: int | None = None) -> Prepared:
        """Compact the view now, whatever its level (`ContextEngine.must_fit`), and record it.

        For when a provider rejected a prompt as too long although the counter
        said it fit, or to compact on demand (``agentcontext compact``).
        Recorded like `prepare`; `undo_compaction` takes it back.

        Args:
            budget: the most prompt tokens allowed (default: the engine's budget).
        """
        engine = self._require_engine()
        with self._lock:
            self._check_writable()
            before = self._view
            prepared = engine.must_fit(before.snapshot(), budget=budget)
            self._after_prepare(before, prepared)
            return prepared

    async def acompact(self, *, budget: int | None = None) -> Prepared:
        """`compact` with the engine's async driver."""
        engine = self._require_engine()
        self._check_writable()
        before = self._view
        prepared = await engine.amust_fit(before.snapshot(), budget=budget)
        with self._lock:
            self._after_prepare(before, prepared)
        return prepared

    def _require_engine(self) -> ContextEngine:
        if self._engine is None:
            raise ConfigError("this session has no engine: pass engine= to Session.open to use prepare()")
        return self._engine

    def _after_prepare(self, before: ViewState, prepared: Prepared) -> None:
        now = self._view
        if now is not before and not (now.items is before.items and now.length >= before.length):
            return  # the view was reverted or rewritten while the engine ran: its result is stale
        extra = now.items[before.length : now.length] if now is not before else []
        out = prepared.messages
        n = len(out)
        while n and _is_pending_stub(out[n - 1]):
            n -= 1  # the real results may still come: a stub is only for this call's prompt
        report = prepared.report
        actions = report.actions
        if any(a.message_ids or a.replacement_ids for a in actions):
            fast = report.incremental and not report.compacted
            keep = self._common_prefix(before, out, n, fast=fast)
            if not (keep == n == before.length):
                tail = [out[i] for i in range(keep, n)] + extra
                covers = dict.fromkeys(i for a in actions for i in a.message_ids)
                record = CompactionRecord(
                    seq=self._seq + 1,
                    ts=_now(),
                    keep=keep,
                    view=tuple(m.id for m in tail),
                    replacements=tuple(m for m in tail if m.id not in self._archive),
                    covers=tuple(covers),
                    actions=tuple(a.to_dict() for a in actions),
                    compacted=report.compacted,
                    level=report.final_level.label,
                    tokens_before=report.tokens_before,
                    tokens_after=report.tokens_after,
                )
                self._commit([record])
        self._prepared_len = n
        self._last_prompt = out

    def _common_prefix(self, before: ViewState, out: Sequence[Message], n: int, *, fast: bool) -> int:
        items = before.items
        limit = min(before.length, n)
        start = 0
        k = self._prepared_len
        # The engine extended what it returned last time (our view's first k messages): skip them.
        if fast and k is not None and 0 < k <= limit and out[k - 1].id == items[k - 1].id:
            start = k
        i = start
        while i < limit and out[i].id == items[i].id:
            i += 1
        return i

    # ------------------------------------------------------------------ tokens

    def record_usage(
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int | None = None,
        total_tokens: int | None = None,
        cached_tokens: int | None = None,
        model: str | None = None,
    ) -> None:
        """Record the usage a provider reported for the last model call.

        The prompt is taken to be the view as the last `prepare` returned it (or,
        without a prepare since the session was opened or reverted, the whole
        view now: then call this before appending the reply). From here on,
        `tokens` is ``prompt_tokens`` plus the counted tokens of every message
        appended since. When the engine's counter can learn from usage
        (`SupportsCalibration`, e.g. ``CalibratedCounter``), it is given the
        prompt and the reported size.

        Raises:
            ConfigError: a token count is negative or not an int.
        """
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
        with self._lock:
            self._check_writable()
            covered = self._prepared_len if self._prepared_len is not None else self._view.length
            covered = min(covered, self._view.length)
            (seq,) = self._next()
            self._commit(
                [
                    UsageRecord(
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
            )
            prompt, self._last_prompt = self._last_prompt, None
            counter = self._counter
            if prompt is not None and isinstance(counter, SupportsCalibration):
                counter.observe(prompt, prompt_tokens)

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
        with self._lock:
            view = self._view
            # A pure function of the records (a restored session gives the same number); the memo
            # only saves recounting the prefix it covers.
            start = self._token_memo or self._token_anchor
            if start is None or start[0] > view.length:
                total = counter.count_messages(view.snapshot())
            else:
                covered, tokens = start
                total = tokens + sum(
                    counter.count_message(view.items[i]) for i in range(covered, view.length)
                )
            self._token_memo = (view.length, total)
            return total

    @property
    def last_usage(self) -> UsageRecord | None:
        """The newest usage record, or None."""
        return self._usage

    @property
    def usage_totals(self) -> UsageTotals:
        """Reported usage summed over every call of the session."""
        return self._totals

    # ------------------------------------------------------------------ checkpoints and revert

    def checkpoint(self, *, label: str | None = None) -> int:
        """Mark the current view; returns the checkpoint's id (0, 1, 2, ...), valid for the session's life.

        Costs one small record and O(1) memory; nothing enters the model's context.
        """
        if label is not None and not isinstance(label, str):
            raise ConfigError(f"label must be a str or None, got {type(label).__name__}")
        with self._lock:
            self._check_writable()
            cp_id = self._next_checkpoint
            (seq,) = self._next()
            self._commit(
                [CheckpointRecord(seq=seq, ts=_now(), id=cp_id, label=label, view_len=self._view.length)]
            )
            return cp_id

    @property
    def checkpoints(self) -> tuple[Checkpoint, ...]:
        """Every checkpoint, oldest first (including those a revert went back past)."""
        return tuple(
            Checkpoint(id=r.id, seq=r.seq, ts=r.ts, label=r.label, messages=v.length)
            for r, v in sorted(self._checkpoints.values(), key=lambda item: item[0].id)
        )

    def revert_to(self, checkpoint_id: int) -> None:
        """Return the view to what it was at ``checkpoint_id``.

        The records after the checkpoint stay in the log: their messages can
        still be recalled by id, and every checkpoint stays valid, so reverting
        to a later checkpoint undoes the revert. Appends continue from the
        checkpoint's view.

        Raises:
            UsageError: no such checkpoint.
        """
        with self._lock:
            self._check_writable()
            self._require_checkpoint(checkpoint_id)
            (seq,) = self._next()
            self._commit([RevertRecord(seq=seq, ts=_now(), checkpoint=checkpoint_id)])

    def _require_checkpoint(self, checkpoint_id: object) -> int:
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int):
            raise UsageError(f"a checkpoint id is an int, got {type(checkpoint_id).__name__}")
        if checkpoint_id not in self._checkpoints:
            known = sorted(self._checkpoints)
            span = f"0..{known[-1]}" if known else "none yet; call checkpoint() first"
            raise UsageError(f"no checkpoint {checkpoint_id} in this session (checkpoints: {span})")
        return checkpoint_id

    # ------------------------------------------------------------------ D-Mail

    def send_dmail(self, checkpoint_id: int, text: str) -> DMail:
        """Send a message back to a checkpoint; `deliver_dmail` delivers it (seed 003's D-Mail).

        Typically a tool handler calls this when the model decides an earlier
        step went wrong. The D-Mail is a record, so it survives a crash before
        delivery. At most one is pending.

        Raises:
            UsageError: no such checkpoint, ``text`` is empty, or a D-Mail is already pending
                (deliver or `cancel_dmail` it first).
        """
        if not isinstance(text, str) or not text.strip():
            raise UsageError("a D-Mail needs non-empty text")
        with self._lock:
            self._check_writable()
            self._require_checkpoint(checkpoint_id)
            if self._dmail is not None:
                raise UsageError(
                    f"a D-Mail to checkpoint {self._dmail.checkpoint} is already pending; "
                    "deliver_dmail() or cancel_dmail() it first"
                )
            (seq,) = self._next()
            self._commit([DMailRecord(seq=seq, ts=_now(), checkpoint=checkpoint_id, text=text)])
            return DMail(checkpoint=checkpoint_id, text=text, seq=seq)

    @property
    def pending_dmail(self) -> DMail | None:
        """The D-Mail waiting for `deliver_dmail`, or None."""
        d = self._dmail
        return None if d is None else DMail(checkpoint=d.checkpoint, text=d.text, seq=d.seq)

    def cancel_dmail(self) -> bool:
        """Withdraw the pending D-Mail; returns False when there was none."""
        with self._lock:
            self._check_writable()
            d = self._dmail
            if d is None:
                return False
            (seq,) = self._next()
            self._commit([DMailRecord(seq=seq, ts=_now(), checkpoint=d.checkpoint, status="cancelled")])
            return True

    def deliver_dmail(self) -> Message | None:
        """The agent loop's D-Mail step: revert to the D-Mail's checkpoint and append it as a user message.

        Call it after each step's tool results. Returns the injected message, or
        None when no D-Mail is pending. The revert and the message are written as
        one batch, so a crash leaves either both or neither.
        """
        with self._lock:
            self._check_writable()
            d = self._dmail
            if d is None:
                return None
            message = Message(
                role="user",
                content=DMAIL_TEMPLATE.format(text=d.text),
                metadata={"dmail": {"checkpoint": d.checkpoint, "sent_seq": d.seq}},
            )
            revert_seq, message_seq = self._next(2)
            ts = _now()
            self._commit(
                [
                    RevertRecord(seq=revert_seq, ts=ts, checkpoint=d.checkpoint, dmail=d.seq),
                    MessageRecord(seq=message_seq, ts=ts, message=message),
                ]
            )
            return message

    def handle_dmail(self, arguments: str | Mapping[str, object]) -> str:
        """Answer a model's D-Mail tool call (`dmail_tool_openai`, `dmail_tool_anthropic`).

        Without a checkpoint, returns the list of checkpoints (the newest 20: id,
        label, messages in view). With a checkpoint and a message, queues the
        D-Mail with `send_dmail`; your loop's `deliver_dmail` delivers it once
        the step's tool results are in. Mistakes come back as ``dmail failed:
        ...`` text for the model, never as exceptions.
        """
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
        with self._lock:
            self._check_writable()
            link = self._view.undo
            if link is None:
                raise UsageError("the current view has no compaction to undo")
            (seq,) = self._next()
            self._commit([UndoRecord(seq=seq, ts=_now(), compaction=link.compaction_seq)])
            return self._compactions[link.compaction_seq]

    @property
    def compactions(self) -> tuple[CompactionRecord, ...]:
        """Every compaction record, oldest first (undone ones included)."""
        return tuple(self._compactions[s] for s in sorted(self._compactions))

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
        return answer_recall_call(arguments, self._sources(), max_chars=self.recall_max_chars)

    def _sources(self) -> RecallSources:
        return RecallSources(
            archive=self._archive,
            compactions=self._compactions,
            known_artifacts=self._known_artifacts,
            stores=(self._artifacts, *self._other_artifacts),
        )

    # ------------------------------------------------------------------ inspection and lifecycle

    @property
    def id(self) -> str:
        """The session's id, from its header record."""
        return self._id

    @property
    def location(self) -> str:
        """Where the session is stored (a path, ``path#session``...)."""
        return self._store.location

    @property
    def store(self) -> SessionStore:
        """The store holding the records."""
        return self._store

    @property
    def engine(self) -> ContextEngine | None:
        """The engine `prepare` runs, if any."""
        return self._engine

    @property
    def artifacts(self) -> ArtifactStore:
        """Where this session's offloaded tool outputs live."""
        return self._artifacts

    @property
    def last_seq(self) -> int:
        """The seq of the newest record (0 is the header)."""
        return self._seq

    @property
    def schema_version(self) -> int:
        """The schema the log was written with, as read (older ones are upcast and migrated on write)."""
        return self._schema_version

    @property
    def migrated_backup(self) -> str | None:
        """Where the original of a migrated older-schema log was kept, when this open migrated it."""
        return self._migrated_to

    @property
    def unknown_records(self) -> tuple[UnknownRecord, ...]:
        """Records of types this version does not know, kept as read."""
        return tuple(self._unknown)

    @property
    def read_only(self) -> bool:
        """True when opened read-only."""
        return self._store.read_only

    def records(self) -> Iterator[object]:
        """Re-read and decode every record from the store, oldest first (for inspection tools).

        Yields record objects (`MessageRecord`, `CompactionRecord`...) and
        `UnknownRecord` for types this version does not know; damaged ones are
        skipped with a warning. Costs a full read of the store.
        """
        for where, data in read_log(self._store)[1]:
            try:
                yield _serde.decode_record(data, where=where)
            except RecordDecodeError as exc:
                warnings.warn(f"{self._store.location}: {exc}; skipped", CorruptRecordWarning, stacklevel=2)

    def close(self) -> None:
        """Release the store (its lock, file or connection); idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Session({self._store.location!r}, id={self._id!r}, view={self._view.length} messages, "
            f"records={self._seq + 1})"
        )
