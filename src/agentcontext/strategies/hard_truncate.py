"""`HardTruncate`: the last resort that always fits, or says exactly why it cannot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..compaction import Action, MessageKind, kind_of, marker
from ..exceptions import ConfigError, ContextOverflowError
from ..messages import JSONValue, Message, TextPart, ToolCall
from ..tokens._base import TokenCounter
from ._base import (
    CompactionContext,
    CompactionResult,
    PureStrategy,
    apply_suffix_plan,
    elision_note,
    essential_indices,
    plan_at,
    plan_suffix,
)
from .observation_masking import _shorten_strings

__all__ = ["HardTruncate", "shorten_text"]


def shorten_text(
    text: str, *, counter: TokenCounter, max_tokens: int, head_share: float = 0.4, ref: str | None
) -> str:
    """Cut ``text`` in the middle so it (marker included) takes at most ``max_tokens`` tokens.

    The head and tail are kept verbatim; a marker says how much was cut and
    where the original can be recalled. Makes O(log n) token counts, never one
    per character.
    """
    if counter.count_text(text) <= max_tokens:
        return text

    def build(keep: int) -> str:
        head = int(keep * head_share)
        tail = keep - head
        cut = len(text) - keep
        where = f"; full text: {ref}" if ref else ""
        marker = f"\n[… {cut:,} characters cut to fit the context window{where} …]\n"
        return text[:head] + marker + (text[len(text) - tail :] if tail else "")

    lo, hi = 0, len(text) - 1
    best = build(0)
    if counter.count_text(best) > max_tokens:
        return best  # the marker alone is the floor; callers size max_tokens above it
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = build(mid)
        if counter.count_text(candidate) <= max_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


@dataclass(frozen=True, kw_only=True)
class HardTruncate(PureStrategy):
    """Shorten the largest old messages, then drop the oldest rounds, until the prompt fits.

    Never drops or shortens the system prompt or the latest user message. Only
    if those alone (with the reply priming) do not fit the budget does it raise
    `ContextOverflowError` with the numbers, instead of sending something the
    provider would reject or silently dropping the request (LangChain's
    trim_messages returns nothing then; a hard truncate that may drop the system
    message is worse). The note marking the gap is left out when only it does
    not fit: it is ours, and never a reason to refuse.

    Args:
        head_share: the share of a shortened message kept from its start (the
            rest comes from its end, where errors and results usually are). Default 0.4.
        min_message_tokens: never shorten a message below this. Default 64.
    """

    head_share: float = 0.4
    min_message_tokens: int = 64
    name: str = "hard_truncate"

    def __post_init__(self) -> None:
        if not 0.0 <= self.head_share <= 1.0:
            raise ConfigError(f"HardTruncate.head_share must be within [0, 1], got {self.head_share}")
        if self.min_message_tokens < 16:
            raise ConfigError(
                f"HardTruncate.min_message_tokens must be at least 16, got {self.min_message_tokens}"
            )

    def compact(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionResult:
        """Make ``messages`` fit ``ctx.budget`` (aiming at ``ctx.target``), or raise."""
        counts = [ctx.count(m) for m in messages]
        total = sum(counts) + ctx.reply_overhead
        head, latest_user = essential_indices(messages)
        essential = set(head) | ({latest_user} if latest_user is not None else set())
        floor = ctx.reply_overhead + sum(counts[i] for i in essential)
        if floor > ctx.budget:
            raise ContextOverflowError(
                f"the system prompt and the latest user message alone need {floor:,} tokens "
                f"(with the reply priming), over the {ctx.budget:,}-token budget "
                f"(window {ctx.window:,} minus reserve {ctx.reserve:,}); shorten them or use a larger window",
                required=floor,
                budget=ctx.budget,
                window=ctx.window,
                reserve=ctx.reserve,
            )
        # The note marking the gap is ours: when it is all that does not fit, it goes, never the request.
        note_tokens = ctx.count(elision_note(messages[:1], anchor=None)) + 8
        note = floor + note_tokens <= ctx.budget
        required = floor + (note_tokens if note else 0)
        if total <= ctx.target:
            return CompactionResult(messages=tuple(messages), tokens=total, note="already within target")
        limit = ctx.target if required <= ctx.target else ctx.budget

        # 1. Shorten the largest non-essential messages to a cap.
        room = max(limit - required, 0)
        cap = max(self.min_message_tokens, room // 4)
        work = list(messages)
        actions: list[Action] = []
        order = sorted(
            (i for i in range(len(work)) if i not in essential and counts[i] > cap), key=lambda i: -counts[i]
        )
        for i in order:
            m = work[i]
            new = self._shorten(m, ctx, cap)
            if new is None:
                continue
            new_count = ctx.count(new)
            if new_count >= counts[i]:
                continue
            actions.append(
                Action(
                    kind="shortened",
                    strategy=self.name,
                    message_ids=(m.id,),
                    replacement_ids=(new.id,),
                    tokens_before=counts[i],
                    tokens_after=new_count,
                    reason=f"shortened to about {cap} tokens as a last resort",
                    refs=(f"message:{m.id}",),
                )
            )
            work[i] = new
            counts[i] = new_count

        # 2. Drop the oldest rounds, keeping the longest suffix that fits.
        plan = plan_suffix(
            work,
            counts,
            limit=limit,
            reply_overhead=ctx.reply_overhead,
            note_tokens=note_tokens if note else 0,
        )
        out, dropped = apply_suffix_plan(
            work,
            plan,
            strategy=self.name,
            counts=counts,
            reason=f"dropped to fit {limit} tokens",
            note=note,
            recallable=ctx.recallable,
        )
        tokens = ctx.total(out)
        if tokens > ctx.budget:
            # Even the newest complete exchange does not fit: keep only the essentials.
            plan = plan_at(work, len(work), keep_first_user=False)
            out, dropped = apply_suffix_plan(
                work,
                plan,
                strategy=self.name,
                counts=counts,
                reason="only the essentials fit",
                note=note,
                recallable=ctx.recallable,
            )
            tokens = ctx.total(out)
        actions.extend(dropped)
        # Shortened messages that were then dropped: report them once, as dropped originals.
        kept_ids = {m.id for m in out}
        final: list[Action] = []
        for a in actions:
            if a.kind == "shortened" and a.replacement_ids[0] not in kept_ids:
                continue
            final.append(a)
        final = _map_dropped_to_originals(final, actions)
        if tokens > ctx.budget:  # pragma: no cover - guarded by the `required` check above
            raise ContextOverflowError(
                f"could not fit {tokens:,} tokens into {ctx.budget:,}",
                required=tokens,
                budget=ctx.budget,
                window=ctx.window,
                reserve=ctx.reserve,
            )
        return CompactionResult(messages=tuple(out), actions=tuple(final), tokens=tokens)

    def _shorten(self, m: Message, ctx: CompactionContext, cap: int) -> Message | None:
        ref = f"message:{m.id}" if ctx.recallable else None
        content = m.content
        text_budget = max(cap - 16 * (1 + len(m.tool_calls)), 16)
        new_content: str | tuple[TextPart, ...] | None | object = content
        if isinstance(content, str) and content:
            new_content = shorten_text(
                content, counter=ctx.counter, max_tokens=text_budget, ref=ref, head_share=self.head_share
            )
        elif isinstance(content, tuple) and content:
            text = m.text
            short = shorten_text(
                text, counter=ctx.counter, max_tokens=text_budget, ref=ref, head_share=self.head_share
            )
            if short != text:
                # Images and files are dropped from a shortened message: they are what makes it large.
                new_content = (TextPart(text=short),)
        calls = m.tool_calls
        new_calls = calls
        if calls:
            per_call = max(cap // (2 * len(calls)), 16)
            new_calls = tuple(_shorten_call(c, per_call * 3) for c in calls)
        if new_content == content and new_calls == calls:
            return None
        was = kind_of(
            m
        )  # a shortened summary is still the record of what it covered: the next one reads it so
        fields: dict[str, JSONValue] = (
            {"original_id": m.id} if was is None else {"original_id": m.id, "was": was.value}
        )
        meta = {**m.metadata, "agentcontext": marker(MessageKind.SHORTENED, **fields)}
        return m.evolve(content=new_content, tool_calls=new_calls, metadata=meta)


def _shorten_call(call: ToolCall, max_chars: int) -> ToolCall:
    if len(call.arguments) <= max_chars:
        return call
    try:
        parsed: JSONValue = json.loads(call.arguments)
    except ValueError:
        return ToolCall(
            id=call.id, name=call.name, arguments=json.dumps({"_shortened": call.arguments[:max_chars]})
        )
    short, cut = _shorten_strings(parsed, max(max_chars // 4, 16))
    if cut == 0:
        return call
    return ToolCall(id=call.id, name=call.name, arguments=json.dumps(short, ensure_ascii=False))


def _map_dropped_to_originals(final: list[Action], all_actions: list[Action]) -> list[Action]:
    """A "dropped" action lists the ids it saw; if a message was shortened first, name its original id."""
    replaced = {a.replacement_ids[0]: a for a in all_actions if a.kind == "shortened"}
    out: list[Action] = []
    for a in final:
        if a.kind != "dropped":
            out.append(a)
            continue
        ids = tuple(replaced[i].message_ids[0] if i in replaced else i for i in a.message_ids)
        before = sum(replaced[i].tokens_before if i in replaced else 0 for i in a.message_ids)
        extra = before - sum(replaced[i].tokens_after for i in a.message_ids if i in replaced)
        out.append(
            Action(
                kind=a.kind,
                strategy=a.strategy,
                message_ids=ids,
                replacement_ids=a.replacement_ids,
                tokens_before=a.tokens_before + extra,
                tokens_after=a.tokens_after,
                reason=a.reason,
                refs=tuple(f"message:{i}" for i in ids),
            )
        )
    return out
