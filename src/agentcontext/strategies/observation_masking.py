"""`MaskObservations`: micro-compaction of old tool results, with recall references; `ShortenArguments`:
the newest call's arguments, when they alone make its step too large to stay."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..compaction import Action, ActionKind, MessageKind, is_observation, marker
from ..exceptions import ConfigError
from ..messages import JSONValue, Message, ToolCall, attachment_note, tool_call_index, tool_name_for
from ..summarizers._commands import cut, failed, outcome, test_summary
from ..truncation import output_text
from ._base import CompactionContext, CompactionResult, PureStrategy, newest_call

__all__ = ["MaskObservations", "ShortenArguments", "masked_placeholder"]


def _recall_ref(message: Message) -> str:
    """Where the original of ``message`` can be recalled from: its ingest artifact, else its message id."""
    meta = message.metadata.get("truncated")
    if isinstance(meta, dict):
        ref = meta.get("ref")
        if isinstance(ref, str):
            return ref
    return f"message:{message.id}"


def masked_placeholder(
    *,
    tool: str,
    tokens: int,
    lines: int,
    ref: str | None,
    ended: str | None = None,
    attached: Sequence[str] = (),
) -> str:
    """The text that replaces a masked tool result.

    It names the tool, the original size, how a failed command or a test run ended
    (``ended``: its exit code, test counts and last error line), the images and
    files it held (``attached``: their `attachment_note` s) and the recall
    reference, so the model knows something was there, what went wrong without
    recalling it, and how to get it back (a bare "content compressed" placeholder
    says none of this; Claude Code's microcompact says nothing, and neither keeps
    the error an agent must not repeat).
    """
    recall = f" Recall the full output with ref {ref}." if ref else ""
    how = f" It ended: {ended}." if ended else ""
    held = f" It held {', '.join(attached)}." if attached else ""
    return (
        f"[tool result cleared to save context: {tool} returned {tokens:,} tokens ({lines:,} lines)."
        f"{how}{held}{recall}]"
    )


def _ended(text: str, command: str) -> str | None:
    """How a tool output ended when that matters later: a failure or a test run; None otherwise."""
    if not failed(text, command=command) and test_summary(text, command=command) is None:
        return None
    return cut(outcome(text, "en", command=command), 200)


def _shorten_strings(value: JSONValue, max_chars: int) -> tuple[JSONValue, int]:
    """Shorten every string longer than ``max_chars`` inside a JSON value; return it and the chars cut."""
    if isinstance(value, str):
        if len(value) > max_chars:
            cut = len(value) - max_chars
            return value[:max_chars] + f"…[{cut:,} chars cut]", cut
        return value, 0
    if isinstance(value, list):
        total = 0
        out_list: list[JSONValue] = []
        for item in value:
            v, c = _shorten_strings(item, max_chars)
            out_list.append(v)
            total += c
        return out_list, total
    if isinstance(value, dict):
        total = 0
        out_dict: dict[str, JSONValue] = {}
        for k, item in value.items():
            v, c = _shorten_strings(item, max_chars)
            out_dict[k] = v
            total += c
        return out_dict, total
    return value, 0


@dataclass(frozen=True, kw_only=True)
class MaskObservations(PureStrategy):
    """Replace older tool results (and observations: `is_observation`) with a short placeholder; keep the newest ``keep_recent``.

    Masking goes oldest first and stops once the prompt is at the target, but it
    only acts at all when it frees at least ``clear_at_least`` tokens: each mask
    rewrites the prompt's prefix and costs the provider's prompt cache, so small
    clears are not worth it (Anthropic's context-editing docs say the same).

    Args:
        keep_recent: the newest tool results to keep intact. Default 3.
        protected_tools: tool names whose results are never masked (a skill's
            instructions, a memory read...). Nothing is protected by default
            (a built-in list guesses wrong for someone); name what matters to you.
        clear_at_least: the fewest tokens a masking pass must free to be applied;
            None means 5% of the budget.
        min_tokens: results this small or smaller are left alone (a placeholder
            would save nothing). Default 64.
        shorten_arguments_over: when set, old tool calls' argument strings longer
            than this many characters are shortened too (kept valid JSON).
    """

    keep_recent: int = 3
    protected_tools: frozenset[str] = field(default_factory=frozenset)
    clear_at_least: int | None = None
    min_tokens: int = 64
    shorten_arguments_over: int | None = None
    name: str = "mask_observations"

    def __post_init__(self) -> None:
        if self.keep_recent < 0:
            raise ConfigError(f"MaskObservations.keep_recent must be >= 0, got {self.keep_recent}")
        if self.clear_at_least is not None and self.clear_at_least < 0:
            raise ConfigError(f"MaskObservations.clear_at_least must be >= 0, got {self.clear_at_least}")
        if self.min_tokens < 0:
            raise ConfigError(f"MaskObservations.min_tokens must be >= 0, got {self.min_tokens}")
        if self.shorten_arguments_over is not None and self.shorten_arguments_over < 16:
            raise ConfigError(
                f"MaskObservations.shorten_arguments_over must be at least 16 characters, got {self.shorten_arguments_over}"
            )
        if not isinstance(self.protected_tools, frozenset):
            object.__setattr__(self, "protected_tools", frozenset(self.protected_tools))

    def compact(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionResult:
        """Mask old tool results (and optionally old arguments) until the target is reached."""
        counts = [ctx.count(m) for m in messages]
        total = sum(counts) + ctx.reply_overhead
        # A command's output sent back as a user message (`is_observation`) is a tool result too.
        tool_idx = [i for i, m in enumerate(messages) if m.role == "tool" or is_observation(m)]
        recent = set(tool_idx[len(tool_idx) - self.keep_recent :]) if self.keep_recent else set()
        boundary = min(recent) if recent else len(messages)
        calls = tool_call_index(messages)
        clear_at_least = self.clear_at_least if self.clear_at_least is not None else max(1, ctx.budget // 20)

        replaced: dict[int, Message] = {}
        actions: list[Action] = []
        freed = 0

        def take(i: int, new: Message, kind: ActionKind, reason: str, ref: str) -> None:
            """Use ``new`` for message ``i`` when it is smaller, and record what was done."""
            nonlocal freed
            new_count = ctx.count(new)
            if new_count >= counts[i]:
                return
            replaced[i] = new
            freed += counts[i] - new_count
            actions.append(
                Action(
                    kind=kind,
                    strategy=self.name,
                    message_ids=(messages[i].id,),
                    replacement_ids=(new.id,),
                    tokens_before=counts[i],
                    tokens_after=new_count,
                    reason=reason,
                    refs=(ref,),
                )
            )

        for i in tool_idx:
            if i in recent or (total - freed <= ctx.target and freed >= clear_at_least):
                break
            m = messages[i]
            if m.id in ctx.protected_ids or m.metadata.get("agentcontext") is not None:
                continue  # already a placeholder or a summary, or pinned by the caller
            tool = tool_name_for(m, calls) if m.role == "tool" else "the command"
            if tool in self.protected_tools or counts[i] <= self.min_tokens:
                continue
            text = output_text(m)  # how it ended may be in a log it returned as a file
            ref = _recall_ref(m)
            issued = calls.get(m.tool_call_id or "") if m.role == "tool" else None
            call = issued[1] if issued is not None else None
            placeholder = masked_placeholder(
                tool=tool,
                tokens=counts[i],
                lines=text.count("\n") + 1,
                ref=ref if ctx.recallable else None,
                ended=_ended(text, f"{call.name} {call.arguments}" if call is not None else ""),
                attached=[attachment_note(p) for p in m.attachments],
            )
            new = m.evolve(
                content=placeholder,
                metadata={
                    **m.metadata,
                    "agentcontext": marker(MessageKind.MASKED, original_id=m.id, ref=ref),
                },
            )
            take(i, new, "masked", f"old {tool} result masked (newest {self.keep_recent} kept)", ref)
        if self.shorten_arguments_over is not None and total - freed > ctx.target:
            for i in range(boundary):
                m = messages[i]
                if not m.tool_calls or m.id in ctx.protected_ids:
                    continue
                short = _with_shortened_arguments(m, self.shorten_arguments_over)
                if short is None:
                    continue
                reason = f"old tool-call arguments over {self.shorten_arguments_over} characters shortened"
                take(i, short, "arguments_shortened", reason, f"message:{m.id}")
                if total - freed <= ctx.target and freed >= clear_at_least:
                    break
        if not actions:
            return CompactionResult(
                messages=tuple(messages), tokens=total, note="nothing old enough or large enough to mask"
            )
        if freed < clear_at_least:
            return CompactionResult(
                messages=tuple(messages),
                tokens=total,
                note=f"masking would free {freed} tokens, under clear_at_least={clear_at_least}; prefix left intact",
            )
        out = tuple(replaced.get(i, m) for i, m in enumerate(messages))
        return CompactionResult(messages=out, actions=tuple(actions), tokens=total - freed)


def _with_shortened_arguments(m: Message, max_chars: int) -> Message | None:
    """``m`` with its tool calls' JSON argument strings over ``max_chars`` shortened, marked; None if none is."""
    calls = _shorten_calls(m.tool_calls, max_chars)
    if calls is None:
        return None
    return m.evolve(
        tool_calls=calls,
        metadata={**m.metadata, "agentcontext": marker(MessageKind.ARGUMENTS_SHORTENED, original_id=m.id)},
    )


def _shorten_calls(calls: Sequence[ToolCall], max_chars: int) -> tuple[ToolCall, ...] | None:
    """``calls`` with JSON argument strings over ``max_chars`` shortened (still valid JSON); None if none is."""
    changed = False
    out: list[ToolCall] = []
    for call in calls:
        if len(call.arguments) <= max_chars:
            out.append(call)
            continue
        try:
            parsed: JSONValue = json.loads(call.arguments)
        except ValueError:
            out.append(call)  # not JSON: cutting it would make it unusable for Anthropic
            continue
        short, cut = _shorten_strings(parsed, max_chars)
        if cut == 0:
            out.append(call)
            continue
        out.append(ToolCall(id=call.id, name=call.name, arguments=json.dumps(short, ensure_ascii=False)))
        changed = True
    return tuple(out) if changed else None


@dataclass(frozen=True, kw_only=True)
class ShortenArguments(PureStrategy):
    """Shorten the newest step's tool-call argument strings over ``over`` characters when that step alone
    takes over half the budget: a step that could not stay beside the rest otherwise.

    A file written in one call (tens of thousands of tokens of arguments) made the newest step larger
    than the budget, and the summary then took it whole, with every earlier round that did fit (a
    review: 25,042 tokens compacted to 323 in an 18,000-token budget). The call already ran: its head
    and tail say what it did, and the original stays recallable (``message:<id>``). Older calls are left
    to the summary, which reads their arguments whole (shortened first, their names were lost).
    """

    over: int = 2_000
    name: str = "shorten_arguments"

    def __post_init__(self) -> None:
        if self.over < 16:
            raise ConfigError(f"ShortenArguments.over must be at least 16 characters, got {self.over}")

    def compact(self, messages: Sequence[Message], ctx: CompactionContext) -> CompactionResult:
        """Shorten the newest step's long arguments when the step takes over half the budget."""
        msgs = tuple(messages)
        total = ctx.total(msgs)
        step = newest_call(msgs)
        if step is None or msgs[step].id in ctx.protected_ids:
            return CompactionResult(messages=msgs, tokens=total, note="no newest tool call")
        if sum(ctx.count(x) for x in msgs[step:]) <= ctx.budget // 2:
            return CompactionResult(messages=msgs, tokens=total, note="the newest step fits beside the rest")
        m = msgs[step]
        new = _with_shortened_arguments(m, self.over)
        before = ctx.count(m)
        if new is None or ctx.count(new) >= before:
            return CompactionResult(messages=msgs, tokens=total, note="no argument long enough to shorten")
        after = ctx.count(new)
        action = Action(
            kind="arguments_shortened",
            strategy=self.name,
            message_ids=(m.id,),
            replacement_ids=(new.id,),
            tokens_before=before,
            tokens_after=after,
            reason=f"the newest tool call's arguments over {self.over:,} characters shortened: with them, its "
            "step took over half the budget",
            refs=(f"message:{m.id}",),
        )
        out = (*msgs[:step], new, *msgs[step + 1 :])
        return CompactionResult(messages=out, actions=(action,), tokens=total - before + after)
