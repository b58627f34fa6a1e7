"""Where `Summarize` splits the conversation, and which user messages stay verbatim: in O(n log n).

A split ``p`` keeps the system head, a *ledger* of user messages from before
``p`` (pinned ones, the latest request, the first request and the newest ones
that fit the ledger's room), and everything from ``p`` on; the rest is
summarized into whatever room the target leaves. Planning tries many splits,
so the ledger's cost at a split is read from prefix sums and one binary
search, never rebuilt (rebuilding it made a long uncompacted history cost
O(n^2): seconds at 40,000 messages, hours at a million). Only the chosen
split's ledger is materialized.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..compaction import FallbackReason, MessageKind, is_user_request, kind_of
from ..messages import Message, safe_split_points
from ._base import CompactionContext, essential_indices, newest_call

if TYPE_CHECKING:
    from .summarize import Summarize

__all__ = ["SummaryFallback", "SummaryPlan", "plan_summary"]


class SummaryFallback(Exception):
    """Stop summarizing and fall back to the next tier, saying why (never escapes the strategy)."""

    def __init__(self, code: FallbackReason, detail: str) -> None:
        super().__init__(f"{code.value}: {detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True, kw_only=True)
class SummaryPlan:
    """One split: what stays (head, ledger, everything from ``start``), what is summarized, and the room."""

    start: int
    head: tuple[int, ...]
    ledger: tuple[int, ...]
    evicted: tuple[int, ...]
    room: int
    """Tokens the summary may take."""
    ack: bool
    """Whether an acknowledgement must follow (the next kept message is a user turn)."""
    ceiling: int
    """The most tokens the result may take: the target, or past it (up to `CompactionContext.settle`)
    when the split keeps a newest step too large to leave the summary its room under the target."""
    newest: bool = False
    """True when the split keeps the newest step that alone is over the share to keep."""


class _Ledger:
    """The ledger's tokens and size at any split, from prefix sums (O(log n) a split)."""

    def __init__(
        self,
        msgs: Sequence[Message],
        counts: Sequence[int],
        h: int,
        latest_user: int | None,
        ctx: CompactionContext,
        *,
        mode: Literal["all", "pinned", "none"],
        room: int,
        goal_room: int,
    ) -> None:
        n = len(msgs)
        self.h, self.counts, self.mode, self.room, self.goal_room = h, counts, mode, room, goal_room

        def must(i: int) -> bool:
            m = msgs[i]
            return m.role == "system" or (
                m.role == "user" and (m.id in ctx.protected_ids or m.metadata.get("pinned") is True)
            )

        self.must_tokens = [0] * (n + 1)
        self.must_count = [0] * (n + 1)
        for i in range(n):
            member = i >= h and must(i)
            self.must_tokens[i + 1] = self.must_tokens[i] + (counts[i] if member else 0)
            self.must_count[i + 1] = self.must_count[i] + member
        self.latest = (
            latest_user if latest_user is not None and latest_user >= h and not must(latest_user) else None
        )
        self.must = must
        # The optional members, in order: the user's own requests that are neither kept anyway nor the latest.
        self.users = [i for i in range(h, n) if is_user_request(msgs[i]) and not must(i) and i != latest_user]
        self.user_sums = [0]
        for i in self.users:
            self.user_sums.append(self.user_sums[-1] + counts[i])

    def _optional(self, p: int) -> tuple[bool, int, int]:
        """For split ``p``: whether the first request fits, and the newest requests kept (``users[j:k]``)."""
        k = bisect.bisect_left(self.users, p)
        if self.mode != "all" or k == 0:
            return False, k, k
        # The user's first request (the task) is kept whole up to a room of its own, beyond the
        # ledger's: cut to fit a summary, a long task statement lost most of its constraints.
        room = self.room
        goal = self.counts[self.users[0]] <= max(room, self.goal_room)
        if goal:
            room = max(room - self.counts[self.users[0]], 0)
        # The newest requests before p, newest first, while they fit: the longest suffix users[j:k]
        # (j >= 1) whose total fits the room. Totals only grow as j falls, so a binary search finds j.
        sums = self.user_sums
        lo, hi = 1, k
        while lo < hi:
            mid = (lo + hi) // 2
            if sums[k] - sums[mid] <= room:
                hi = mid
            else:
                lo = mid + 1
        return goal, lo, k

    def cost(self, p: int) -> tuple[int, int]:
        """Tokens and number of messages of the ledger for split ``p``."""
        tokens, size = self.must_tokens[p], self.must_count[p]
        if self.latest is not None and self.latest < p:
            tokens += self.counts[self.latest]
            size += 1
        goal, j, k = self._optional(p)
        if goal:
            tokens += self.counts[self.users[0]]
            size += 1
        tokens += self.user_sums[k] - self.user_sums[j]
        size += k - j
        return tokens, size

    def members(self, p: int) -> tuple[int, ...]:
        """The ledger for split ``p``, as sorted indices (O(p): for the chosen split only)."""
        kept = {i for i in range(self.h, p) if self.must(i)}
        if self.latest is not None and self.latest < p:
            kept.add(self.latest)
        goal, j, k = self._optional(p)
        if goal:
            kept.add(self.users[0])
        kept.update(self.users[j:k])
        return tuple(sorted(kept))


def plan_summary(
    strategy: Summarize,
    msgs: Sequence[Message],
    counts: Sequence[int],
    ctx: CompactionContext,
    *,
    wrapper: int,
    ack_tokens: int,
    want: int | None = None,
    keep_newest: bool = True,
) -> SummaryPlan:
    """The split that leaves the summary its share of the target; else the one that leaves it the most room.

    Args:
        strategy: the `Summarize` whose settings apply.
        msgs: the conversation; ``counts`` its messages' tokens.
        ctx: the call's context (target, counter, protected ids).
        wrapper: tokens of the summary message around its text (preamble, tags, a margin).
        ack_tokens: tokens of the acknowledgement that follows a summary before a user turn.
        want: the room the summary needs, when known (a one-shot fit that has seen the summary an offline
            summarizer wrote): replaces the share the strategy asks for, so that the rest of the target
            keeps recent messages verbatim.
        keep_newest: try the split that keeps a newest step over the share first (False: after a
            summary at that split could not work).

    Raises:
        SummaryFallback: no split point, or no split leaves room for a summary.
    """
    n = len(msgs)
    head_idx, latest_user = essential_indices(msgs)
    h = len(head_idx)
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counts[i]
    # A pinned message that is not a user or system message cannot move into the
    # ledger (a tool result needs its call): the summarized part ends before it.
    limit = next(
        (
            i
            for i in range(h, n)
            if msgs[i].id in ctx.protected_ids and msgs[i].role not in ("user", "system")
        ),
        n,
    )
    points = [p for p in safe_split_points(msgs) if h < p <= limit and (p == n or msgs[p].role != "tool")]
    if not points:
        raise SummaryFallback(
            FallbackReason.NOTHING_TO_SUMMARIZE, "no safe split point after the system prompt"
        )
    known = want is not None
    share = want if want is not None else strategy.summary_share * ctx.target
    candidates, newest = _candidates(strategy, msgs, suffix, h, points, ctx, share)
    if not keep_newest and newest is not None:
        candidates, newest = [p for p in candidates if p != newest], None
    head_tokens = sum(counts[i] for i in head_idx)
    # What every split keeps: when that alone leaves no room, say so at once rather than trying every split.
    floor = (
        head_tokens + wrapper + ctx.reply_overhead + (counts[latest_user] if latest_user is not None else 0)
    )
    # The room above what every split keeps. The ledger takes at most half of it, so that when the
    # engine has raised its target above a large system prompt (`Thresholds.above`), a share of
    # that target does not hand the whole room to the ledger and leave none for the summary.
    space = ctx.target - (floor - wrapper)
    if ctx.target - floor < strategy.min_summary_tokens:
        raise SummaryFallback(
            FallbackReason.NO_ROOM,
            f"the system prompt and the latest request alone take {floor:,} of the {ctx.target:,}-token "
            "target, leaving no room for a summary",
        )
    # Keeping a few more recent messages verbatim is not worth a summary too small to hold what it covers.
    want = max(strategy.min_summary_tokens, int(share))
    # The previous summary is the only record of what it covers: a split that leaves the new one
    # less room than the old one had makes it forget, for good, to keep a few recent messages
    # verbatim a step longer. So ask for as much room as it had, up to half the room under the target.
    previous = next(
        (i for i in range(points[-1] - 1, h - 1, -1) if kind_of(msgs[i]) is MessageKind.SUMMARY), None
    )
    kept_before = 0
    if previous is not None and not known:
        kept_before = min(strategy.summary_tokens(msgs[previous], ctx), (ctx.target - floor) // 2)
        want = max(want, kept_before)
    ledger = _Ledger(
        msgs,
        counts,
        h,
        latest_user,
        ctx,
        mode=strategy.ledger,
        room=min(int(strategy.ledger_share * ctx.target), space // 2),
        goal_room=space // 2,
    )
    best: tuple[int, int, bool, int] | None = None
    for p in candidates:
        ledger_tokens, ledger_size = ledger.cost(p)
        if p - h - ledger_size <= 0:
            if p == newest and suffix[0] + ctx.reply_overhead <= max(ctx.settle, ctx.target):
                # Only kept messages precede the newest step, and every other split summarizes that step:
                # the output of the call the agent just made, which it has not read (72% of the budget,
                # summarized unread, and the agent called again). It fits: it stays, settled, for the
                # agent to read; the next compaction summarizes it.
                best = (p, strategy.min_summary_tokens, False, max(ctx.settle, ctx.target))
                break
            continue  # only kept messages before the split: nothing to summarize
        needs_ack = strategy.acknowledge and p < n and msgs[p].role == "user"
        used = (
            head_tokens
            + ledger_tokens
            + suffix[p]
            + ctx.reply_overhead
            + wrapper
            + (ack_tokens if needs_ack else 0)
        )
        room = ctx.target - used
        if p == newest:
            # The newest step, when it alone is over the share to keep, is what the agent reads next.
            # Summarizing it costs the agent a re-read of what it has not even read yet, and the same
            # again at every step as large (a read loop). So it stays whenever the summary beside it
            # keeps the room the previous summary had (the only record of what that one covered:
            # squeezed at every large step, it forgot most of it for good) and at least a twentieth
            # of the target; a step of a quarter of the budget or more (a file read, parallel calls)
            # even past the target and the soft limit, up to the budget (`CompactionContext.settle`):
            # a step that large makes every step compact anyway, and the next compaction summarizes it
            # once the agent has read it. A smaller one stays under the target, so compaction stays rare.
            # Measured (bench_newest_step, bench_summaries): up to the soft limit only, with half the
            # previous room, steps of 50-70% of the budget were summarized unread in 68% of compacting
            # calls and larger ones in all, and 79% of compacted identifiers stayed; up to the budget,
            # with all of it, 6% and those over the budget less the summary, and 85% stayed.
            least = max(strategy.min_summary_tokens, ctx.target // 20, kept_before)
            ceiling = max(ctx.settle, ctx.target) if suffix[p] >= ctx.budget // 4 else ctx.target
            if used + least <= ceiling:
                best = (p, max(room, least), needs_ack, max(ctx.target, used + least))
                break
        if room < strategy.min_summary_tokens:
            continue
        if room >= want:
            best = (p, room, needs_ack, ctx.target)
            break
        if best is None or room > best[1]:
            best = (p, room, needs_ack, ctx.target)
    if best is None:
        raise SummaryFallback(
            FallbackReason.NO_ROOM,
            f"the newest messages and the user's kept messages leave under {strategy.min_summary_tokens} tokens "
            f"for a summary within the {ctx.target:,}-token target",
        )
    p, room, needs_ack, ceiling = best
    members = ledger.members(p)
    kept = set(members)
    cap = strategy.max_summary_tokens
    return SummaryPlan(
        start=p,
        head=tuple(head_idx),
        ledger=members,
        evicted=tuple(i for i in range(h, p) if i not in kept),
        room=min(room, cap) if cap is not None else room,
        ack=needs_ack,
        ceiling=ceiling,
        newest=p == newest,
    )


def _candidates(
    strategy: Summarize,
    msgs: Sequence[Message],
    suffix: Sequence[int],
    h: int,
    points: Sequence[int],
    ctx: CompactionContext,
    summary_room: float,
) -> tuple[list[int], int | None]:
    """Split points that keep at most the newest share (or the last rounds), earliest (most kept) first,
    and the split keeping only the newest step when that step alone is over the share (else None): the
    last call and its results, and the user's messages after them while no model reply has read them.

    A split at a user turn comes first when it keeps at least half of that share:
    a summary then covers whole exchanges. A user turn near the very end (an
    agent's run has often only the task and a last request) would keep almost
    nothing of the agent's recent work verbatim, so it does not jump the queue.
    In a one-shot fit (``ctx.fill``) the share is what the target leaves beside
    the summary's own room (``summary_room``), so the budget is filled with recent messages.
    """
    n = len(msgs)
    if strategy.keep_rounds is not None:
        starts = [i for i in range(h, n) if is_user_request(msgs[i])]
        if strategy.keep_rounds > len(starts):
            first_kept = h + 1  # fewer rounds than asked: any split will do
        else:
            first_kept = starts[-strategy.keep_rounds] if strategy.keep_rounds else n
        preferred = [p for p in points if p >= first_kept]
        keep = float(suffix[first_kept]) if first_kept <= n else 0.0
    else:
        keep = strategy.keep_recent * suffix[h]
        if ctx.fill:
            keep = max(keep, ctx.target - summary_room - (suffix[0] - suffix[h]))
        preferred = [p for p in points if suffix[p] <= keep]
    newest = next((p for p in reversed(points) if p < n), None)
    # The agent's newest step is unread while no assistant message follows its results: the user may
    # have spoken since (a message typed while the tools ran). Its split is the step's call.
    step = newest_call(msgs)
    if step is not None and step != newest and step in points:
        newest = step
    elif step is None and newest is not None:
        # The user's newest turn is every message they sent since the model last spoke: a file sent on its
        # own, then the question about it (chat clients send them so), is read with the question.
        turn = newest
        while turn - 1 > h and is_user_request(msgs[turn - 1]) and turn - 1 in points:
            turn -= 1
        newest = turn
    if strategy.keep_rounds is None and newest is not None and all(p > newest for p in preferred):
        # The newest step alone is over the share (a large tool output): it is what the agent reads
        # next, so it is tried first, rather than a split at the very end summarizing the result of
        # the call the model just made.
        preferred = [newest, *preferred]
    else:
        newest = None
    at_user = [p for p in preferred if p < n and is_user_request(msgs[p]) and suffix[p] >= keep / 2]
    users = set(at_user)
    return at_user + [p for p in preferred if p not in users], newest
