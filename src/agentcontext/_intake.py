"""The engine's intake: what is new since a state, repaired, cut at ingest and counted, in O(new).

Every call starts here. Given the messages and the conversation's `EngineState`,
it finds what is new (the state's output plus new messages, or its input plus
new messages), repairs and truncates only that, and counts it on top of the
state's running total, so a step costs O(new messages) whatever the history.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ._api import EngineState, _Floor
from .compaction import Action, is_observation, is_user_request
from .exceptions import IdentityWarning, InvalidConversationError, UsageError
from .messages import JSONValue, Message, MessageView, derive_id
from .repair import RepairState, repair_messages
from .tokens._base import BaseTokenCounter, TokenCounter, count_all
from .tokens._tools import render_tools
from .truncation import output_text, truncate_message

if TYPE_CHECKING:
    from .artifacts import ArtifactStore
    from .truncation import ObservationTruncator

__all__ = [
    "Counted",
    "InstructionTokens",
    "ToolTokens",
    "check_messages",
    "check_sequence",
    "count_new",
    "floor_of",
    "ingest_all",
    "ingest_within",
    "truncate_new",
]


@dataclass(frozen=True, kw_only=True)
class Counted:
    messages: list[Message]
    """The new messages after repairs and ingest truncation."""
    counts: list[int]
    """Their tokens."""
    tokens: int
    """Prompt tokens of the base, the new messages and the pending stubs, reply priming included."""
    actions: list[Action]
    repair: RepairState
    stubs: tuple[Message, ...]
    """Stub results for the calls still pending at the end (in the prompt, not in the lineage)."""
    base: list[Message] | None
    """The lineage's output list when the call extends it, else None (a full pass)."""
    base_counts: list[int] | None
    """The tokens of each message of ``base``."""
    base_len: int
    base_tokens: int
    keep: int
    """How many leading input messages the output (base + new) keeps unchanged."""
    floor: _Floor | None
    """The state's floor when the call extends it."""
    estimated: int = 0
    """How many leading new messages were not tokenized (beyond the horizon): their counts are estimates."""


def count_new(
    messages: Sequence[Message],
    state: EngineState | None,
    *,
    counter: TokenCounter,
    truncator: ObservationTruncator | None,
    strict: bool,
    reply_overhead: int,
    commit: bool,
    artifacts: ArtifactStore | Literal[False] | None,
    horizon: int | None = None,
    recallable: bool = False,
) -> Counted:
    """Repair, truncate and count what is new since ``state``'s call; O(new messages).

    With a ``horizon``, new messages beyond it are counted at an estimate (`ingest_within`).
    ``recallable``: the model has a recall tool, and the markers of cut outputs may point to it.

    With ``commit`` the state's lineage is advanced in place (and the state
    passed in becomes stale), else it is left as it was.
    """
    check_sequence(messages)
    n = len(messages)
    new: Sequence[Message] = messages
    base: list[Message] | None = None
    base_counts: list[int] | None = None
    base_len = base_tokens = prefix_keep = 0
    aligned = True
    repair_state = RepairState()
    floor: _Floor | None = None
    if state is not None and n and state._current():
        lineage = state._lineage
        assert lineage is not None
        out = lineage.out
        if (
            n >= state._in_len > 0
            and messages[state._in_len - 1].id == state._in_last
            and (messages[0].id == state._in_first)
        ):
            new = messages[state._in_len :]
            base, base_counts = out, lineage.counts
            aligned = state._in_keep == state._in_len == state._out_len
            prefix_keep = state._in_keep
        elif (
            n >= state._out_len > 0
            and messages[state._out_len - 1].id == out[state._out_len - 1].id
            and (messages[0].id == out[0].id)
        ):
            new = messages[state._out_len :]
            base, base_counts = out, lineage.counts
        elif n >= state._in_len > 1 and messages[0].id != out[0].id and messages[0].restates(out[0]):
            # The last call's newest message (kept as it was) at its place again: the same history, rebuilt.
            if messages[state._in_len - 1].restates(out[-1]):
                warnings.warn(
                    "prepare: the conversation starts with the messages of the last call under new ids (a "
                    "history rebuilt from dicts at each call?): ids tell the engine what it has seen, so this "
                    "call starts over, and its compactions, the prompt prefix and the provider's cache with "
                    "it. Keep the Message objects, or convert the whole history at once with "
                    "agentcontext.formats.<format>.to_messages, which derives the same ids for the same history",
                    IdentityWarning,
                    stacklevel=6,  # the caller of ContextEngine.prepare
                )
        if base is not None:
            base_len, base_tokens, floor = state._out_len, state._out_tokens, state._floor
            if commit:
                lineage.version += 1  # what follows changes the lineage: the state given is spent
                repair_state = lineage.repair
            else:
                repair_state = lineage.repair.copy()
    check_messages(new, n - len(new))
    repaired, actions, repair_state = repair_messages(
        new, repair_state, strict=strict, first_index=n - len(new)
    )
    if strict and repair_state.pending:
        pending = ", ".join(repr(c) for c in repair_state.pending)
        at = max(i for i, m in enumerate(messages) if m.tool_calls)  # no other message ends a block
        raise InvalidConversationError(
            f"the conversation ends with tool calls that were never answered ({pending}, in message {at}); "
            "append their results before preparing, or drop strict=True to have stub results added"
        )
    processed, counts, estimated = ingest_within(
        repaired,
        actions,
        horizon,
        truncator=truncator,
        counter=counter,
        artifacts=artifacts,
        recallable=recallable,
    )
    stubs = tuple(repair_state.pending_stubs()) if repair_state.pending else ()
    tokens = base_tokens + sum(counts) + reply_overhead
    if stubs:
        tokens += sum(counter.count_message(m) for m in stubs)
    if aligned:
        # Nothing repaired or cut (no action): the messages are the new ones, unchanged.
        changed = (
            len(new)
            if not actions
            else next(
                (i for i, (a, b) in enumerate(zip(new, processed, strict=False)) if a.id != b.id),
                min(len(new), len(processed)),
            )
        )
        keep = base_len + changed
    else:
        keep = prefix_keep
    return Counted(
        messages=processed,
        counts=counts,
        tokens=tokens,
        actions=actions,
        repair=repair_state,
        stubs=stubs,
        base=base,
        base_counts=base_counts,
        base_len=base_len,
        base_tokens=base_tokens,
        keep=keep,
        floor=floor,
        estimated=estimated,
    )


_CHUNK = 4096
"""Messages ingested at a time, newest first, when a horizon bounds what is tokenized."""
_MARGIN = 256
"""Messages counted past the horizon."""


def ingest_all(
    messages: list[Message],
    actions: list[Action],
    *,
    truncator: ObservationTruncator | None,
    counter: TokenCounter,
    artifacts: ArtifactStore | Literal[False] | None,
    recallable: bool = False,
) -> tuple[list[Message], list[int]]:
    """Cut tool outputs (and observations, `is_observation`) over the ingest limit (when there is a truncator) and count every message."""
    if truncator is None:
        return messages, count_all(messages, counter)
    return truncate_new(messages, actions, truncator, counter, artifacts, recallable=recallable)


def ingest_within(
    messages: list[Message],
    actions: list[Action],
    horizon: int | None,
    *,
    truncator: ObservationTruncator | None,
    counter: TokenCounter,
    artifacts: ArtifactStore | Literal[False] | None,
    recallable: bool = False,
) -> tuple[list[Message], list[int], int]:
    """Truncate and count ``messages``, but only the newest ``horizon`` tokens of them exactly.

    Older messages lie beyond what any strategy keeps or reads (see
    `agentcontext.strategies._horizon`): they are neither cut nor tokenized, and
    their counts are estimates from their length, at the tokens per character of
    the newest ones. A history of a million messages is thus tokenized in its
    newest part only (tokenizing is the one cost that grows with every character).

    Returns:
        The messages (tool outputs over the ingest limit cut), their counts, and how many leading ones
        have estimated counts (0 when ``horizon`` is None or the messages fit within it).
    """
    if horizon is None or len(messages) <= _CHUNK:  # an agent's step: everything, at once
        processed, counts = ingest_all(
            messages,
            actions,
            truncator=truncator,
            counter=counter,
            artifacts=artifacts,
            recallable=recallable,
        )
        return processed, counts, 0
    newest: list[tuple[list[Message], list[int], list[Action]]] = []

    def take(end: int, size: int) -> tuple[int, int]:
        start = max(0, end - size)
        done: list[Action] = []
        part, part_counts = ingest_all(
            messages[start:end],
            done,
            truncator=truncator,
            counter=counter,
            artifacts=artifacts,
            recallable=recallable,
        )
        newest.append((part, part_counts, done))
        return start, sum(part_counts)

    end, total = len(messages), 0
    while end > 0 and total <= horizon:
        end, tokens = take(end, _CHUNK)
        total += tokens
    if end > 0:  # a few more, so that the cut (at a safe point, which may move it back a few messages to
        end, _ = take(end, _MARGIN)  # keep a tool call with its results) falls among messages counted
    processed, counts = messages[:end], _estimates(messages[:end], newest, counter)
    for part, part_counts, done in reversed(newest):
        processed += part
        counts += part_counts
        actions += done
    return processed, counts, end


def _estimates(
    messages: Sequence[Message],
    counted: Sequence[tuple[list[Message], list[int], list[Action]]],
    counter: TokenCounter,
) -> list[int]:
    """Tokens of ``messages`` estimated from their length, at the rate of the ``counted`` ones."""
    if not messages:
        return []
    framing = counter.count_message(Message(role="user", content=""))
    tokens = sum(sum(c) for _, c, _ in counted)
    size = sum(len(p) for p, _, _ in counted)
    chars = sum(_chars(m) for p, _, _ in counted for m in p)
    rate = max(tokens - framing * size, 0) / max(chars, 1)
    return [framing + round(_chars(m) * rate) for m in messages]


def _chars(m: Message) -> int:
    content = m.content
    n = len(content) if type(content) is str else len(m.text)
    for call in m.tool_calls:
        n += len(call.name) + len(call.arguments)
    return n


def truncate_new(
    messages: list[Message],
    actions: list[Action],
    truncator: ObservationTruncator,
    counter: TokenCounter,
    artifacts: ArtifactStore | Literal[False] | None,
    *,
    recallable: bool = False,
) -> tuple[list[Message], list[int]]:
    """Cut tool outputs over the ingest limit (the full text goes to the artifact store); count each message.

    ``artifacts`` (False: none) overrides the truncator's store for this call, and ``recallable`` makes its
    markers point to the recall tool (a truncator made with ``recallable=True`` does so anyway).

    A message the truncator looked at is counted right after, while the counter
    still holds the count of the text the truncator just checked: a tool output
    kept whole is tokenized once, not once here and once more when every new
    message is counted (that doubled the first prepare of a long history). The
    others are counted together (`tokens.count_all`).
    """
    store = None if artifacts is False else truncator.store if artifacts is None else artifacts
    recallable = recallable or truncator.recallable  # a truncator made recallable stays so
    if store is not truncator.store or recallable != truncator.recallable:
        truncator = dataclasses.replace(truncator, store=store, recallable=recallable)
    out: list[Message] = []
    looked: dict[int, int] = {}
    for m in messages:
        if (
            (m.role != "tool" and not is_observation(m))
            or "agentcontext" in m.metadata
            or truncator.surely_fits(output_text(m))
        ):
            out.append(m)
            continue
        short, result = truncate_message(m, truncator)
        if result.truncated:
            after = counter.count_message(short)
            # The original is never tokenized whole here (megabytes of one repeated character cost
            # seconds): its size is the truncator's count or estimate, put in the message's framing.
            if result.original_tokens is not None and result.kept_tokens is not None:
                before = after - result.kept_tokens + result.original_tokens
            else:
                before = counter.count_message(m)
            actions.append(
                Action(
                    kind="truncated",
                    strategy="ingest",
                    message_ids=(m.id,),
                    replacement_ids=(short.id,),
                    tokens_before=before,
                    tokens_after=after,
                    reason="tool output over the ingest limit; " + truncator.full_output_note(result.ref),
                    refs=(str(result.ref),) if result.ref is not None else (),
                )
            )
            m = short
        looked[len(out)] = counter.count_message(m)  # now, while the counter holds its text's count
        out.append(m)
    if not looked:
        return out, count_all(out, counter)
    rest = [i for i in range(len(out)) if i not in looked]
    counts = [0] * len(out)
    for i, n in zip(rest, count_all([out[i] for i in rest], counter), strict=True):
        counts[i] = n
    for i, n in looked.items():
        counts[i] = n
    return out, counts


def floor_of(counted: Counted, counter: TokenCounter) -> _Floor:
    """The floor of the counted messages, from the remembered one and the new messages: O(new)."""
    known = counted.floor if counted.floor is not None else _Floor()
    head_len, head_tokens = known.head_len, known.head_tokens
    new = counted.messages
    if head_len == counted.base_len:  # the system head may continue into the new messages
        for m in new:
            if m.role != "system":
                break
            head_len += 1
            head_tokens += counter.count_message(m)
    user_tokens = known.user_tokens
    for i in range(len(new) - 1, -1, -1):
        if is_user_request(new[i]):
            user_tokens = counter.count_message(new[i])
            break
    return _Floor(head_len=head_len, head_tokens=head_tokens, user_tokens=user_tokens)


def check_sequence(messages: object) -> None:
    """Refuse a container that is not a sequence of messages (a dict, a str, a generator), in O(1)."""
    if type(messages) in (list, tuple, MessageView):
        return
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise UsageError(f"messages must be a list of Message objects, got {type(messages).__name__}")


def check_messages(messages: Sequence[Message], offset: int) -> None:
    """Refuse anything but `Message` objects, naming the first one and how to convert it (O(len))."""
    check_sequence(messages)
    for i, m in enumerate(messages):
        if type(m) is not Message and not isinstance(m, Message):
            hint = (
                "; convert provider dicts first, e.g. agentcontext.formats.openai.to_messages(dicts)"
                if isinstance(m, Mapping)
                else ""
            )
            raise UsageError(
                f"message {offset + i} is a {type(m).__name__}, not an agentcontext Message{hint}"
            )


class ToolTokens:
    """Tokens of a request's tool definitions, counted once per distinct list of definition objects.

    An agent sends the same definitions at every step; recognising them by
    identity keeps a step O(new messages). Changing a definition's dict in
    place is not seen: pass new dicts to change what is sent.
    """

    def __init__(self) -> None:
        # One tuple, replaced whole: threads sharing an engine never see new tools with old tokens.
        self._cached: tuple[tuple[Mapping[str, JSONValue], ...], int] = ((), 0)

    def count(self, tools: Sequence[Mapping[str, JSONValue]] | None, counter: TokenCounter) -> int:
        """Tokens ``tools`` add to a request (0 for none), in ``counter``'s framing."""
        if not tools:
            return 0
        if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
            raise UsageError(f"tools must be a list of tool definitions (dicts), got {type(tools).__name__}")
        cached, cached_tokens = self._cached
        if len(cached) == len(tools) and all(a is b for a, b in zip(cached, tools, strict=True)):
            return cached_tokens
        if isinstance(counter, BaseTokenCounter):
            tokens = counter.count_tools(tools)
        else:
            tokens = counter.count_text(render_tools(tools))
        self._cached = (tuple(tools), tokens)  # holding them keeps their ids unique
        return tokens


class InstructionTokens:
    """Tokens of instructions sent outside the messages (a system prompt a framework keeps apart), cached.

    They are framed as a system message would be. An agent sends the same text at
    every step: the last one is remembered (by identity first, then by value).
    """

    def __init__(self) -> None:
        self._cached: tuple[str, int] = ("", 0)

    def count(self, instructions: str | None, counter: TokenCounter) -> int:
        """Tokens ``instructions`` add to a request (0 for none)."""
        if not instructions:
            return 0
        if not isinstance(instructions, str):
            raise UsageError(f"instructions must be a str, got {type(instructions).__name__}")
        text, tokens = self._cached
        if text is instructions or text == instructions:
            return tokens
        framed = Message(
            role="system", content=instructions, id=derive_id(None, "instructions:" + instructions)
        )
        tokens = counter.count_message(framed)
        self._cached = (instructions, tokens)
        return tokens
