"""What every compaction strategy shares: the protocol, its context, its result, and cut-point helpers.

A strategy is a small frozen dataclass whose fields are its configuration. Its
one method, `Strategy.flow`, is a generator: pure strategies never yield and
simply return a `CompactionResult`; the summarize strategy yields a
`SummaryRequest` and receives the summary text (or an exception thrown into it),
so the engine's sync and async drivers do all I/O and the strategies stay pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, runtime_checkable

from ..compaction import Action, MessageKind, SummaryRequest, is_user_request, kind_of, marker, original_id
from ..messages import JSONValue, Message, safe_split_points
from ..tokens._base import TokenCounter

__all__ = [
    "CompactionContext",
    "CompactionFlow",
    "CompactionResult",
    "PureStrategy",
    "Strategy",
    "elision_note",
    "essential_indices",
    "is_summary",
    "plan_at",
    "plan_suffix",
]


@dataclass(frozen=True, kw_only=True)
class CompactionResult:
    """What a strategy returns: the new messages and everything it did to get them."""

    messages: tuple[Message, ...]
    actions: tuple[Action, ...] = ()
    tokens: int = 0
    """Prompt tokens of ``messages`` (reply priming included), by the context's counter."""
    note: str = ""
    """Why the strategy did nothing or stopped early, when it did (for reports)."""
    settled: bool = False
    """The strategy stopped past the target on purpose, within `CompactionContext.settle` (a summary
    that keeps a newest step too large to leave it room under the target): later tiers leave it."""

    @property
    def changed(self) -> bool:
        """True when the strategy changed anything."""
        return bool(self.actions)


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
    settle: int = 0
    """The most a result may take and still end this call's compaction: the budget (the target when
    compacting on demand); 0 means the target. A strategy may stop past the target, up to it, on purpose
    (`CompactionResult.settled`): only to keep a large newest step whole."""
    reply_overhead: int = 3
    """Tokens the chat format adds once per prompt (reply priming)."""
    protected_ids: frozenset[str] = field(default_factory=frozenset)
    """Ids that must be kept verbatim (beyond the system prompt and the latest user message)."""
    window: int = 0
    """The model's context window (for error messages)."""
    reserve: int = 0
    """Tokens reserved for the reply (for error messages)."""
    recallable: bool = False
    """True when the caller keeps the originals and gives the model a way to read them back (a `Session`
    and its recall tool): notes then say how to recall what they replace. Otherwise they never promise it."""
    fill: bool = False
    """A one-shot fit: strategies keep as much as the target holds (the target is near the budget),
    rather than leaving headroom for the next steps of a running agent."""
    offline_summaries: bool = False
    """True when the engine's summarizer makes no model call (the offline extractive one): a summary then
    reads the whole part it covers in one request, with no chunking (bounded by
    `Summarize.max_offline_input_tokens`)."""

    summarizer_input: int | None = None
    """The most the engine's summarizer reads in one request, when it knows its model's window (an LLM
    summarizer's `input_limit`); None: as much as the agent's model."""

    inputs: tuple[Sequence[Message], ...] = field(default=(), compare=False, repr=False)
    """Where the originals of masked or shortened copies are (`original`): the call's messages and what
    the caller passed. A summary written after masking in the same call read the placeholders, so the
    errors in the outputs it covered never reached it (a review of the LLM path)."""
    _originals: dict[str, Message] = field(default_factory=dict, compare=False, repr=False)

    known: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    """Token counts of this call's messages by id, filled by the engine and as strategies count: every
    message is counted once per call, whatever the counter's own cache holds (a history larger than
    that cache would otherwise be tokenized again at every pass)."""

    def count(self, message: Message) -> int:
        """Tokens of one message."""
        n = self.known.get(message.id)
        if n is None:
            n = self.known[message.id] = self.counter.count_message(message)
        return n

    def total(self, messages: Iterable[Message]) -> int:
        """Prompt tokens of ``messages``, reply priming included."""
        return sum(self.count(m) for m in messages) + self.reply_overhead

    def original(self, message: Message) -> Message:
        """The message a masked or shortened copy stands for, when this call has it; else ``message``.

        The index of `inputs` is built on the first copy asked about: O(messages) once per call.
        """
        oid = original_id(message)
        if oid == message.id:
            return message
        if not self._originals:
            for part in self.inputs:
                self._originals.update((m.id, m) for m in part)
        return self._originals.get(oid, message)


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


def newest_call(messages: Sequence[Message]) -> int | None:
    """The index of the last assistant message when it called tools: the newest step, which no model
    reply has read yet (its results, and any user message sent meanwhile, come after it); else None."""
    step = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
    return step if step is not None and messages[step].tool_calls else None


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


def is_summary(message: Message) -> bool:
    """True for a summary message agentcontext wrote (a chunk's partial summary is not one)."""
    if kind_of(message) is not MessageKind.SUMMARY:
        return False
    meta = message.metadata["agentcontext"]
    return not (isinstance(meta, Mapping) and meta.get("partial"))


def latest_summary_group(messages: Sequence[Message]) -> list[int]:
    """Indices of the latest summary, its acknowledgement and the user's verbatim ledger after it.

    Dropping strategies keep this group when it fits, as they keep the goal:
    the summary is what the dropped history became, and the ledger holds the
    user's instructions, which must survive every compaction.
    """
    for i in range(len(messages) - 1, -1, -1):
        if is_summary(messages[i]):
            group = [i]
            j = i + 1
            while j < len(messages):
                if kind_of(messages[j]) not in (MessageKind.SUMMARY_ACK, MessageKind.VERBATIM):
                    break
                group.append(j)
                j += 1
            return group
    return []


def elision_note(removed: Sequence[Message], *, anchor: str | None, recallable: bool = False) -> Message:
    """A short user-role note standing where ``removed`` messages were, so the model knows they existed.

    Peers drop history silently and the model cannot tell (Claude Code #57788);
    this note says how many messages went and that they can be recalled. It is
    written as data, not as an instruction, and never as a system message.
    """
    from ..messages import derive_id

    n = len(removed)
    covers: list[JSONValue] = [original_id(m) for m in removed]  # what recall reads back: never a copy
    note_id = derive_id(
        anchor, "elision:" + ",".join(m.id for m in list(removed[:1]) + list(removed[-1:])) + f":{n}"
    )
    text = f"[agentcontext: {n} earlier message{'s' if n != 1 else ''} of this conversation " + (
        "were removed here to fit the context window; they are kept in the session log and can be "
        f"recalled with message:{note_id}.]"
        if recallable
        else "were removed here to fit the context window.]"
    )
    return Message(
        role="user",
        content=text,
        id=note_id,
        metadata={"agentcontext": marker(MessageKind.ELISION, covers=covers)},
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
    calls and their results; never starting on a tool message). With
    ``note_tokens=0`` (no elision note in front) a suffix that would open the
    conversation with an assistant message is passed over. When nothing fits,
    the plan keeps the smallest valid suffix and the caller decides (escalate,
    shorten, or raise). O(n) with suffix sums.
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
            if not note_tokens and not pins and p < n and p > len(head) and messages[p].role != "user":
                # Without the note (a user-role message) in front, the kept part must open with the user.
                continue
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
    messages: Sequence[Message],
    plan: SuffixPlan,
    *,
    strategy: str,
    counts: Sequence[int],
    reason: str,
    note: bool = True,
    recallable: bool = False,
) -> tuple[list[Message], list[Action]]:
    """Build the kept list for ``plan``, with an elision note where messages were removed.

    ``note=False`` leaves the note out (when only the note would not fit); the
    report still lists every removed message.
    """
    if not plan.removed:
        return list(messages), []
    removed_msgs = [messages[i] for i in plan.removed]
    kept_head = [messages[i] for i in plan.head]
    anchor = kept_head[-1].id if kept_head else None
    notes = [elision_note(removed_msgs, anchor=anchor, recallable=recallable)] if note else []
    out = kept_head + notes + list(messages[plan.start :])
    action = Action(
        kind="dropped",
        strategy=strategy,
        message_ids=tuple(m.id for m in removed_msgs),
        replacement_ids=tuple(n.id for n in notes),
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
