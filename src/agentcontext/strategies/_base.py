"""What every compaction strategy shares: the protocol, its context, its result, and cut-point helpers.

A strategy is a small frozen dataclass whose fields are its configuration. Its
one method, `Strategy.flow`, is a generator: pure strategies never yield and
simply return a `CompactionResult`; the summarize strategy yields a
`SummaryRequest` and receives the summary text (or an exception thrown into it),
so the engine's sync and async drivers do all I/O and the strategies stay pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from ..messages import JSONValue, Message, safe_split_points
from ..tokens._base import TokenCounter

__all__ = [
    "Action",
    "ActionKind",
    "CompactionContext",
    "CompactionFlow",
    "CompactionResult",
    "PureStrategy",
    "Strategy",
    "SummaryRequest",
    "elision_note",
    "essential_indices",
    "plan_at",
    "plan_suffix",
]

ActionKind: TypeAlias = Literal[
    "truncated",  # a tool output was cut at ingest; the full text went to the artifact store
    "masked",  # an old tool result was replaced by a placeholder
    "arguments_shortened",  # an old tool call's long argument strings were shortened
    "shortened",  # a message's text was cut (hard truncation)
    "dropped",  # messages were removed from the context
    "summarized",  # messages were replaced by a summary
    "repaired",  # the input broke a provider rule and was fixed (stub result, renamed id...)
    "fallback",  # a strategy could not do its job and the next one took over
]


@dataclass(frozen=True, kw_only=True)
class Action:
    """One thing a strategy (or the engine's ingest step) did to the messages.

    Every message removed, replaced or shortened appears in exactly one action's
    ``message_ids``, so a report accounts for everything that changed.
    """

    kind: ActionKind
    """What was done."""
    strategy: str
    """Who did it (``"mask_observations"``, ``"token_budget"``, ``"ingest"``, ``"repair"``...)."""
    message_ids: tuple[str, ...]
    """Ids of the original messages affected (removed, replaced or shortened)."""
    replacement_ids: tuple[str, ...] = ()
    """Ids of the messages that now stand in their place (placeholders, summaries, shortened copies)."""
    tokens_before: int = 0
    """Tokens of the affected messages before the action."""
    tokens_after: int = 0
    """Tokens of their replacements after it (0 when dropped)."""
    reason: str = ""
    """Why, in words a person can read."""
    refs: tuple[str, ...] = ()
    """Recall references for what was removed (artifact refs, message refs)."""

    @property
    def tokens_saved(self) -> int:
        """``tokens_before - tokens_after``."""
        return self.tokens_before - self.tokens_after

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict of this action."""
        return {
            "kind": self.kind,
            "strategy": self.strategy,
            "message_ids": list(self.message_ids),
            "replacement_ids": list(self.replacement_ids),
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "tokens_saved": self.tokens_saved,
            "reason": self.reason,
            "refs": list(self.refs),
        }


@dataclass(frozen=True, kw_only=True)
class CompactionResult:
    """What a strategy returns: the new messages and everything it did to get them."""

    messages: tuple[Message, ...]
    actions: tuple[Action, ...] = ()
    tokens: int = 0
    """Prompt tokens of ``messages`` (reply priming included), by the context's counter."""
    note: str = ""
    """Why the strategy did nothing or stopped early, when it did (for reports)."""

    @property
    def changed(self) -> bool:
        """True when the strategy changed anything."""
        return bool(self.actions)


@dataclass(frozen=True, kw_only=True)
class SummaryRequest:
    """What a summarize step asks its driver for: a summary of ``messages``.

    The engine's drivers hand this to the configured `Summarizer` (sync or
    async) and send the text back into the strategy, or throw the summarizer's
    exception into it so the strategy can fall back.
    """

    messages: tuple[Message, ...]
    """The messages to summarize (tool calls and results included)."""
    previous_summary: str | None = None
    """The summary these messages follow, for incremental summaries."""
    current_request: str | None = None
    """The latest user request, so the summary keeps what it needs."""
    instructions: str | None = None
    """Extra instructions (e.g. identifiers the previous attempt missed)."""
    max_tokens: int | None = None
    """The longest summary that still helps."""


CompactionFlow: TypeAlias = Generator[SummaryRequest, str, CompactionResult]


@dataclass(frozen=True, kw_only=True)
class CompactionContext:
    """What a strategy knows about the call it serves."""

    counter: TokenCounter
    """Counts tokens (cached by message id, so recounting is cheap)."""
    budget: int
    """The most prompt tokens allowed: window minus output reserve (minus a safety margin for estimates)."""
    target: int
    """The prompt size compaction aims at, below the soft limit, so it does not fire again next step."""
    reply_overhead: int = 3
    """Tokens the chat format adds once per prompt (reply priming)."""
    protected_ids: frozenset[str] = field(default_factory=frozenset)
    """Ids that must be kept verbatim (beyond the system prompt and the latest user message)."""
    window: int = 0
    """The model's context window (for error messages)."""
    reserve: int = 0
    """Tokens reserved for the reply (for error messages)."""

    def count(self, message: Message) -> int:
        """Tokens of one message."""
        return self.counter.count_message(message)

    def total(self, messages: Iterable[Message]) -> int:
        """Prompt tokens of ``messages``, reply priming included."""
        return sum(self.counter.count_message(m) for m in messages) + self.reply_overhead


@runtime_checkable
class Strategy(Protocol):
    """A compaction strategy: a generator that may yield summary requests and returns a result."""

    @property
    def name(self) -> str:
        """Short name used in reports and stats."""
        ...

    def flow(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionFlow:
        """Compact ``messages`` towards ``ctx.target``; never mutate them."""
        ...


class PureStrategy:
    """Base for strategies that need no I/O: implement `compact`, get `flow` for free."""

    name: str = "strategy"

    def compact(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionResult:
        """Compact ``messages`` towards ``ctx.target``."""
        raise NotImplementedError

    def flow(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionFlow:
        """Run `compact` as a generator that never yields (the protocol the pipeline drives)."""
        return self.compact(messages, ctx)
        yield  # pragma: no cover - makes this a generator function


# ----------------------------------------------------------------------------- shared helpers


def essential_indices(messages: Sequence[Message]) -> tuple[list[int], int | None]:
    """Indices of the leading system messages, and of the latest user message.

    These are what every strategy keeps verbatim (promise 3).
    """
    head: list[int] = []
    for i, m in enumerate(messages):
        if m.role != "system":
            break
        head.append(i)
    latest_user = None
    for i in range(len(messages) - 1, -1, -1):
        if is_user_request(messages[i]):
            latest_user = i
            break
    return head, latest_user


def latest_summary_group(messages: Sequence[Message]) -> list[int]:
    """Indices of the latest summary, its acknowledgement and the user's verbatim ledger after it.

    Dropping strategies keep this group when it fits, as they keep the goal:
    the summary is what the dropped history became, and the ledger holds the
    user's instructions, which must survive every compaction.
    """
    for i in range(len(messages) - 1, -1, -1):
        meta = messages[i].metadata.get("agentcontext")
        if isinstance(meta, dict) and meta.get("kind") == "summary" and not meta.get("partial"):
            group = [i]
            j = i + 1
            while j < len(messages):
                follow = messages[j].metadata.get("agentcontext")
                if not (isinstance(follow, dict) and follow.get("kind") in ("summary_ack", "verbatim")):
                    break
                group.append(j)
                j += 1
            return group
    return []


def is_user_request(message: Message) -> bool:
    """True for a user message the user wrote (not a note, summary or stub agentcontext added)."""
    return message.role == "user" and "agentcontext" not in message.metadata


def elision_note(removed: Sequence[Message], *, anchor: str | None) -> Message:
    """A short user-role note standing where ``removed`` messages were, so the model knows they existed.

    Peers drop history silently and the model cannot tell (Claude Code #57788);
    this note says how many messages went and that they can be recalled. It is
    written as data, not as an instruction, and never as a system message.
    """
    n = len(removed)
    covers: list[JSONValue] = [m.id for m in removed]
    text = (
        f"[agentcontext: {n} earlier message{'s' if n != 1 else ''} of this conversation "
        "were removed here to fit the context window; they are kept in the session log and can be "
        "recalled by id.]"
    )
    from ..messages import derive_id

    return Message(
        role="user",
        content=text,
        id=derive_id(
            anchor, "elision:" + ",".join(m.id for m in list(removed[:1]) + list(removed[-1:])) + f":{n}"
        ),
        metadata={"agentcontext": {"kind": "elision", "covers": covers}},
    )


@dataclass(frozen=True, kw_only=True)
class SuffixPlan:
    """A cut of the conversation: keep ``head`` indices, then a contiguous suffix from ``start``."""

    start: int
    head: tuple[int, ...]
    removed: tuple[int, ...]


def plan_suffix(
    messages: Sequence[Message],
    counts: Sequence[int],
    *,
    limit: int,
    reply_overhead: int,
    note_tokens: int,
    keep_first_user: bool = True,
    min_start: int = 0,
) -> SuffixPlan:
    """Choose the earliest safe cut whose kept messages fit ``limit`` tokens.

    Kept: the leading system messages, the first user message (the goal, when
    ``keep_first_user`` and it fits), the latest user message, and the longest
    suffix starting at a safe split point (never between an assistant's tool
    calls and their results; never starting on a tool message). When nothing
    fits, the plan keeps the smallest valid suffix and the caller decides
    (escalate, shorten, or raise). O(n) with suffix sums.
    """
    n = len(messages)
    head, latest_user = essential_indices(messages)
    head_set = set(head)
    points = [
        p for p in safe_split_points(messages) if p >= min_start and (p == n or messages[p].role != "tool")
    ]
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counts[i]
    base = reply_overhead + sum(counts[i] for i in head)

    first_user = next((i for i, m in enumerate(messages) if is_user_request(m)), None)
    summary_group = latest_summary_group(messages)

    def pins_for(start: int, with_first: bool, with_summary: bool = False) -> list[int]:
        pins = []
        if with_first and first_user is not None and first_user < start and first_user not in head_set:
            pins.append(first_user)
        if with_summary:
            pins.extend(i for i in summary_group if i < start and i not in head_set and i not in pins)
        if (
            latest_user is not None
            and latest_user < start
            and latest_user not in head_set
            and latest_user not in pins
        ):
            pins.append(latest_user)
        return sorted(pins)

    def cost(start: int, pins: list[int]) -> int:
        # Head indices all lie before ``start`` (points start at len(head)); anything
        # else before ``start`` that is not pinned is removed and needs the note.
        removed = start - len(head) - len(pins)
        return base + suffix[start] + sum(counts[i] for i in pins) + (note_tokens if removed > 0 else 0)

    # Points are sorted ascending: the earliest that fits keeps the most.
    points = [p for p in points if p >= len(head)] or [n]
    # Keep the goal and the latest summary (with the user's ledger) when they fit; give them up
    # one at a time, the goal first (the summary restates it), before giving up on the suffix.
    variants = [(True, True), (False, True), (True, False), (False, False)]
    for with_first, with_summary in variants:
        if with_first and not keep_first_user:
            continue
        if with_summary and not summary_group:
            continue
        for p in points:
            pins = pins_for(p, with_first, with_summary)
            if cost(p, pins) <= limit:
                return _make_plan(p, head, pins)
    # Nothing fits: the smallest valid suffix.
    p = points[-1]
    return _make_plan(p, head, pins_for(p, False))


def plan_at(messages: Sequence[Message], start: int, *, keep_first_user: bool = True) -> SuffixPlan:
    """The plan that keeps the suffix from ``start``, the leading system messages and the user's requests.

    The first user message (the goal, when ``keep_first_user``) and the latest
    user message are pinned when they fall before ``start``.
    """
    head, latest_user = essential_indices(messages)
    pins: list[int] = []
    if keep_first_user:
        first_user = next((i for i, m in enumerate(messages) if is_user_request(m)), None)
        if first_user is not None and len(head) <= first_user < start:
            pins.append(first_user)
    if keep_first_user:
        pins.extend(i for i in latest_summary_group(messages) if len(head) <= i < start and i not in pins)
    if latest_user is not None and len(head) <= latest_user < start and latest_user not in pins:
        pins.append(latest_user)
    return _make_plan(start, head, sorted(pins))


def _make_plan(start: int, head: list[int], pins: list[int]) -> SuffixPlan:
    kept_head = tuple(sorted(set(head) | set(pins)))
    kept = set(kept_head)
    removed = tuple(i for i in range(start) if i not in kept)
    return SuffixPlan(start=start, head=kept_head, removed=removed)


def apply_suffix_plan(
    messages: Sequence[Message], plan: SuffixPlan, *, strategy: str, counts: Sequence[int], reason: str
) -> tuple[list[Message], list[Action]]:
    """Build the kept list for ``plan``, with an elision note where messages were removed."""
    if not plan.removed:
        return list(messages), []
    removed_msgs = [messages[i] for i in plan.removed]
    kept_head = [messages[i] for i in plan.head]
    anchor = kept_head[-1].id if kept_head else None
    note = elision_note(removed_msgs, anchor=anchor)
    out = kept_head + [note] + list(messages[plan.start :])
    action = Action(
        kind="dropped",
        strategy=strategy,
        message_ids=tuple(m.id for m in removed_msgs),
        replacement_ids=(note.id,),
        tokens_before=sum(counts[i] for i in plan.removed),
        tokens_after=0,
        reason=reason,
        refs=tuple(f"message:{m.id}" for m in removed_msgs),
    )
    return out, [action]


def first_index_at_or_after(points: Sequence[int], value: int) -> int | None:
    """The smallest element of sorted ``points`` that is >= ``value``."""
    i = bisect.bisect_left(points, value)
    return points[i] if i < len(points) else None
