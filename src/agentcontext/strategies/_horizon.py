"""The horizon: history too far back for any strategy to keep or read is dropped before they run.

A first `prepare` of a very long history (a million messages, or the first call
after reopening a long session) would otherwise have every tier of every
escalation walk all of it, several passes each, to produce a prompt that holds
a few hundred of them. What a compaction can use is bounded: the prompt holds
at most the budget, and one summary reads at most what `Summarize` allows
(``max_input_tokens`` x ``max_input_chunks``, or ``max_offline_input_tokens``);
`Summarize` already drops, and reports, everything older than that. The horizon
makes that bound the engine's, so the strategies see only the part they could
use and their cost is bounded by it, not by the history.

Beyond the horizon, what a strategy would keep whatever its age stays: the
system messages, pinned messages, the latest summary's group, the user's first
and latest requests, and the newest of the user's requests up to a ledger's
room. The rest is replaced by one elision note and reported as dropped, by id,
so a session can recall it. The cut is always at a safe split point (no tool
result parted from its call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..compaction import Action, MessageKind, is_user_request, kind_of
from ..messages import Message
from ..tokens._base import TokenCounter, count_all
from ._base import SuffixPlan, apply_suffix_plan

if TYPE_CHECKING:
    from ._base import Strategy

__all__ = ["HORIZON_FLOOR", "cut_at_horizon", "default_horizon"]

HORIZON_FLOOR = 1_000_000
"""The default horizon is never shorter than this many tokens: a history under it is never cut early."""

_KEPT_KINDS = frozenset({MessageKind.SUMMARY, MessageKind.SUMMARY_ACK, MessageKind.VERBATIM})


def default_horizon(pipelines: Iterable[Strategy], budget: int) -> int:
    """Eight budgets, at least `HORIZON_FLOOR`, and at least what the pipelines' summaries may read.

    A strategy says how far back it reads with ``reach(budget)`` (tokens back
    from the newest message); a strategy without one is taken to stay within
    the budget, as every built-in one but `Summarize` does.
    """
    reach = 0
    stack = list(pipelines)
    while stack:
        strategy = stack.pop()
        stack.extend(getattr(strategy, "tiers", ()))
        of = getattr(strategy, "reach", None)
        if callable(of):
            reach = max(reach, int(of(budget)))
    return max(8 * budget, HORIZON_FLOOR, budget + reach)


def cut_at_horizon(
    messages: Sequence[Message],
    counts: Sequence[int],
    horizon: int,
    *,
    ledger_room: int,
    protected_ids: frozenset[str],
    recallable: bool,
    counter: TokenCounter,
    estimated: range = range(0),
    ingest: Callable[[list[Message]], tuple[list[Message], list[int]]] | None = None,
) -> tuple[list[Message], list[int], Action] | None:
    """Drop what lies more than ``horizon`` tokens before the newest message, but what stays at any age.

    Args:
        messages: the conversation; ``counts`` its messages' tokens.
        horizon: tokens, counted back from the newest message, kept for the strategies.
        ledger_room: the most tokens of older user requests a ledger could keep (newest first).
        protected_ids: ids of pinned messages.
        recallable: whether the elision note may say the messages can be recalled.
        counter: counts the elision note.
        estimated: the indices of messages not ingested yet (not cut at the ingest limit, not tokenized;
            their counts are estimates, see `ingest_within`): those that stay go through ``ingest``, those
            dropped are reported at their estimate.
        ingest: cuts and counts messages as the engine's intake does (default: counts them).

    Returns:
        The messages the strategies should see, their counts (the note's last, where it stands), and the
        action reporting what was dropped; None when nothing lies beyond the horizon.
    """
    n = len(messages)
    head = 0
    while head < n and messages[head].role == "system":
        head += 1
    kept_tokens, cut = 0, n
    while cut > head and kept_tokens + counts[cut - 1] <= horizon:
        kept_tokens += counts[cut - 1]
        cut -= 1
    if cut <= head:
        return None
    # A pinned tool result or call cannot stand alone in front of the cut: the cut moves before it.
    pinned = (
        next(
            (
                i
                for i in range(head, cut)
                if messages[i].id in protected_ids and messages[i].role not in ("user", "system")
            ),
            None,
        )
        if protected_ids
        else None
    )
    cut = _safe_cut(messages, cut if pinned is None else pinned, head)
    if cut <= head:
        return None
    keep = set(range(head))
    users: list[int] = []
    for i in range(head, cut):
        m = messages[i]
        role, meta = m.role, m.metadata
        if role == "system" or (meta and (m.id in protected_ids or kind_of(m) in _KEPT_KINDS)):
            keep.add(i)
        elif role == "user" and is_user_request(m):
            users.append(i)
    if users:
        keep.add(users[0])  # the goal
        latest = next((i for i in range(n - 1, cut - 1, -1) if is_user_request(messages[i])), None)
        if latest is None:
            keep.add(users[-1])  # the latest request lies beyond the horizon: it stays too
        room = ledger_room
        for i in reversed(users):
            if counts[i] > room:
                break
            room -= counts[i]
            keep.add(i)
    kept = sorted(keep)
    plan = SuffixPlan(start=cut, head=tuple(kept), removed=tuple(i for i in range(cut) if i not in keep))
    if not plan.removed:
        return None
    late = [i for i in kept if i in estimated] + list(range(max(cut, estimated.start), estimated.stop))
    if late:
        done, exact = (
            ingest([messages[i] for i in late])
            if ingest is not None
            else ([messages[i] for i in late], count_all([messages[i] for i in late], counter))
        )
        messages, counts = list(messages), list(counts)
        for i, m, c in zip(late, done, exact, strict=True):
            messages[i], counts[i] = m, c
    out, actions = apply_suffix_plan(
        messages,
        plan,
        strategy="horizon",
        counts=counts,
        recallable=recallable,
        reason=(
            f"more than {horizon:,} tokens before the newest message: beyond what any strategy keeps or "
            "reads (the engine's horizon), so it was dropped before compacting; the system prompt, pinned "
            "messages, summaries and the user's requests a ledger could keep stayed"
            + (
                "; tokens_before is an estimate from their length (they were not tokenized)"
                if estimated and any(i in estimated for i in (plan.removed[0], plan.removed[-1]))
                else ""
            )
        ),
    )
    note = out[len(kept)]
    out_counts = [counts[i] for i in kept] + [counter.count_message(note)] + list(counts[cut:])
    return out, out_counts, actions[0]


def _safe_cut(messages: Sequence[Message], cut: int, head: int) -> int:
    """The latest index at or before ``cut`` that parts no tool result from its call (``head`` at worst).

    Walks back from the end to ``cut`` gathering the results whose call is not
    after them, then on until every one of those calls is passed: O(what is
    kept), never a pass over the history before it.
    """
    waiting: set[str] = set()
    at = len(messages)
    while at > head and (at > cut or waiting):
        at -= 1
        m = messages[at]
        for call in m.tool_calls:
            waiting.discard(call.id)
        if m.role == "tool" and m.tool_call_id is not None:
            waiting.add(m.tool_call_id)
    return at
