"""The rules a conversation must keep for providers to accept it, checked in one pass.

`check_messages` walks a whole list; `ConversationChecker` checks one message at
a time (the engine feeds it appended messages, so validating a long session
never re-walks its history). `check_messages` is a loop over the checker, so
the two cannot disagree.

The rules, each a `Rule` name on the `Violation` that reports it:

- ``unanswered_tool_call``: an assistant's tool call gets no result before the
  next non-tool message (or before the end). With parallel calls, every result
  must come before that message; their order among themselves is free.
- ``orphan_tool_result``: a tool result answers no call of the assistant
  message right before its block of tool results (never issued, or issued
  earlier and already closed by a user, assistant or system message).
- ``duplicate_tool_call_id``: a call id already used by an earlier call
  anywhere in the conversation (Anthropic rejects repeated ``tool_use`` ids;
  OpenAI cannot tell which result answers which call).
- ``duplicate_tool_result``: a second result for a call already answered.
- ``first_not_user``: the first non-system message is not from the user.
- ``empty_content``: a message providers reject as empty (see `Rule`).
- ``system_not_first``: a system message after a non-system one. OpenAI accepts
  it, Anthropic's Messages API cannot carry it, so it is only checked when asked
  (``system_first_only=True``; the Anthropic format does).
- ``dangling_reasoning``: a message made from OpenAI Responses API items
  (`agentcontext.formats.responses`) ends with a ``reasoning`` item: the item
  the reasoning belongs to is missing, and the API rejects the request
  ("Item 'rs_...' of type 'reasoning' was provided without its required
  following item"). Calls and their outputs of that API are checked by the
  tool-pairing rules above, which apply to its messages as to any other.

>>> from agentcontext.messages import Message, ToolCall
>>> msgs = [Message(role="user", content="list files"),
...         Message(role="assistant", tool_calls=[ToolCall(id="c1", name="ls")])]
>>> [(v.index, v.rule) for v in check_messages(msgs)]
[(1, 'unanswered_tool_call')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, TypeAlias

from .exceptions import InvalidConversationError, InvalidMessageError
from .messages import Message

__all__ = ["LAYOUT_KEY", "ConversationChecker", "Rule", "Violation", "check_messages", "ensure_valid"]

LAYOUT_KEY = "responses"
"""The `Message.metadata` key where `agentcontext.formats.responses` keeps the items a message came from."""

Rule: TypeAlias = Literal[
    "unanswered_tool_call",
    "orphan_tool_result",
    "duplicate_tool_call_id",
    "duplicate_tool_result",
    "first_not_user",
    "empty_content",
    "system_not_first",
    "dangling_reasoning",
]
"""The name of a broken rule.

``empty_content`` is the intersection of what OpenAI and Anthropic accept, so a
conversation that passes is accepted by both:

- user and system messages need text that is not just whitespace, or an image
  (Anthropic: "all messages must have non-empty content"; its text blocks must
  hold non-whitespace text);
- assistant messages need text, an image or a tool call (OpenAI: content is
  "required unless tool_calls is specified"; an empty assistant turn is also
  rejected by Anthropic unless it is the final prefill, which agents never send);
- tool results may be the empty string: a command with no output is a real,
  common result (the tau-bench logs, recorded against OpenAI, hold several),
  OpenAI accepts it, and Anthropic's ``tool_result.content`` is optional (the
  Anthropic format omits it for an empty result). A tool result whose content
  is ``None`` is reported: OpenAI requires the field.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One broken rule: where, which, what is wrong and how to fix it."""

    index: int
    """Position of the offending message in the conversation."""
    rule: Rule
    """Which rule is broken."""
    message: str
    """What is wrong, naming the tool call id when there is one."""
    fix: str
    """How to fix it."""
    tool_call_id: str | None = None
    """The tool call id concerned, for the tool-pairing rules (lets a repair act on it)."""

    def __str__(self) -> str:
        return f"message {self.index} [{self.rule}]: {self.message}. Fix: {self.fix}"


class _IssuedLog:
    """Every call id issued, in order, shareable between checker copies.

    A checker owns the prefix ``ids[:length]`` of the log it points at. Copies
    share the log, so `ConversationChecker.copy` costs O(1) in the history; a
    checker that appends to a log another copy has already extended forks its
    own prefix first (O(history), once, and only when two copies really diverge,
    as when the engine reverts to a snapshot).
    """

    __slots__ = ("first", "ids")

    def __init__(self, ids: list[tuple[str, int]]) -> None:
        self.ids = ids
        """(call id, index of the issuing message), in issue order."""
        self.first: dict[str, int] = {}
        """Call id -> position in ``ids`` of its first issue."""
        for pos, (call_id, _) in enumerate(ids):
            self.first.setdefault(call_id, pos)


class ConversationChecker:
    """Checks a conversation one message at a time, in O(1) per message and tool call.

    Feed messages in order with `feed`; each call returns the violations that
    message makes decidable (a call left unanswered is reported when the next
    non-tool message arrives). `finish` reports the calls still unanswered at
    the end without changing the state, so feeding can go on afterwards.

    Args:
        system_first_only: report system messages after the first non-system
            message (``system_not_first``). Default ``False``: OpenAI accepts
            them; pass ``True`` when the target is Anthropic.

    >>> from agentcontext.messages import Message, ToolCall
    >>> checker = ConversationChecker()
    >>> checker.feed(Message(role="user", content="hi"))
    []
    >>> checker.feed(Message(role="assistant", tool_calls=[ToolCall(id="c1", name="ls")]))
    []
    >>> checker.pending_tool_call_ids
    ('c1',)
    >>> [v.rule for v in checker.finish()]
    ['unanswered_tool_call']
    """

    __slots__ = (
        "_answered",
        "_count",
        "_log",
        "_log_length",
        "_pending",
        "_seen_non_system",
        "system_first_only",
    )

    def __init__(self, *, system_first_only: bool = False) -> None:
        self.system_first_only = system_first_only
        self._count = 0
        self._seen_non_system = False
        # The open block of tool results: calls of the last assistant message
        # still waiting for a result (id -> issuing index), and those answered.
        self._pending: dict[str, int] = {}
        self._answered: set[str] = set()
        self._log = _IssuedLog([])
        self._log_length = 0

    # ------------------------------------------------------------------ state

    @property
    def messages_seen(self) -> int:
        """How many messages were fed; the index the next message gets."""
        return self._count

    @property
    def pending_tool_call_ids(self) -> tuple[str, ...]:
        """Ids of the calls still waiting for a result, in call order."""
        return tuple(self._pending)

    @property
    def pending_calls(self) -> Mapping[str, int]:
        """The calls still waiting for a result: call id -> index of the assistant message that issued it."""
        return MappingProxyType(dict(self._pending))

    def copy(self) -> ConversationChecker:
        """Return an independent checker in the same state.

        Costs O(open tool calls), not O(history): the call-id history is
        shared until one of the copies diverges from the other.
        """
        other = ConversationChecker.__new__(ConversationChecker)
        other.system_first_only = self.system_first_only
        other._count = self._count
        other._seen_non_system = self._seen_non_system
        other._pending = dict(self._pending)
        other._answered = set(self._answered)
        other._log = self._log
        other._log_length = self._log_length
        return other

    # ------------------------------------------------------------------ checking

    def feed(self, message: Message) -> list[Violation]:
        """Check the next message; return the violations it makes decidable.

        Raises:
            InvalidMessageError: ``message`` is not a `Message`.
        """
        if not isinstance(message, Message):
            raise InvalidMessageError(
                f"expected an agentcontext Message, got {type(message).__name__}; "
                "convert provider dicts first with agentcontext.formats.openai.to_messages",
                index=self._count,
            )
        index = self._count
        self._count += 1
        found: list[Violation] = []
        role = message.role
        if role == "tool":
            self._tool_result(message, index, found)
        else:
            # Any non-tool message closes the block of tool results: OpenAI wants
            # the results right after their assistant message, and Anthropic puts
            # them in the very next (user) message.
            self._close_block(found)
            if role == "system":
                if self.system_first_only and self._seen_non_system:
                    found.append(
                        Violation(
                            index=index,
                            rule="system_not_first",
                            message="a system message after the conversation started, which Anthropic cannot carry",
                            fix="move its instructions into the leading system prompt, or send them as a user message",
                        )
                    )
            elif role == "assistant":
                self._first_non_system(message, index, found)
                self._issue_calls(message, index, found)
            else:
                self._first_non_system(message, index, found)
        if role != "system":
            self._seen_non_system = True
        empty = _empty_content(message, index)
        if empty is not None:
            found.append(empty)
        if LAYOUT_KEY in message.metadata:
            dangling = _dangling_reasoning(message, index)
            if dangling is not None:
                found.append(dangling)
        return found

    def finish(self) -> list[Violation]:
        """Report the calls still unanswered at the end; the state is left as it was."""
        return [_unanswered(call_id, at) for call_id, at in self._pending.items()]

    # ------------------------------------------------------------------ rules

    def _first_non_system(self, message: Message, index: int, found: list[Violation]) -> None:
        if self._seen_non_system or message.role == "user":
            return
        found.append(
            Violation(
                index=index,
                rule="first_not_user",
                message=f"the conversation starts with a {message.role} message; providers want a user message first",
                fix="put the user's request before it (after any system messages)",
            )
        )

    def _close_block(self, found: list[Violation]) -> None:
        if self._pending:
            found.extend(_unanswered(call_id, at) for call_id, at in self._pending.items())
            self._pending = {}
        if self._answered:
            self._answered = set()

    def _issue_calls(self, message: Message, index: int, found: list[Violation]) -> None:
        for call in message.tool_calls:
            earlier = self._issued_at(call.id)
            if earlier is not None:
                where = "in this same message" if earlier == index else f"by message {earlier}"
                found.append(
                    Violation(
                        index=index,
                        rule="duplicate_tool_call_id",
                        message=f"tool call id {call.id!r} was already used {where}",
                        fix="give every tool call a unique id (and its result the same new id)",
                        tool_call_id=call.id,
                    )
                )
            self._record_issue(call.id, index)
            if call.id not in self._pending:
                self._pending[call.id] = index

    def _tool_result(self, message: Message, index: int, found: list[Violation]) -> None:
        self._first_non_system(message, index, found)
        call_id = message.tool_call_id
        if call_id is None:  # pragma: no cover - Message requires it on tool messages
            return
        if call_id in self._pending:
            del self._pending[call_id]
            self._answered.add(call_id)
        elif call_id in self._answered:
            found.append(
                Violation(
                    index=index,
                    rule="duplicate_tool_result",
                    message=f"tool call {call_id!r} is answered a second time",
                    fix="keep one result per call: merge the two results or drop one",
                    tool_call_id=call_id,
                )
            )
        else:
            earlier = self._issued_at(call_id)
            if earlier is None:
                what = f"no earlier assistant message calls {call_id!r}"
                fix = "drop this tool result, or restore the assistant message that made the call"
            else:
                what = (
                    f"its call {call_id!r} (message {earlier}) was already closed by a later "
                    "user, assistant or system message"
                )
                fix = f"move it right after message {earlier} with the other results of that call, or drop it"
            found.append(
                Violation(
                    index=index,
                    rule="orphan_tool_result",
                    message=f"tool result without a matching call: {what}",
                    fix=fix,
                    tool_call_id=call_id,
                )
            )

    # ------------------------------------------------------------------ call-id history

    def _issued_at(self, call_id: str) -> int | None:
        pos = self._log.first.get(call_id)
        if pos is None or pos >= self._log_length:
            return None
        return self._log.ids[pos][1]

    def _record_issue(self, call_id: str, index: int) -> None:
        log = self._log
        if len(log.ids) != self._log_length:
            # Another copy has extended the shared log past our prefix: fork.
            log = self._log = _IssuedLog(log.ids[: self._log_length])
        if call_id not in log.first:
            log.first[call_id] = len(log.ids)
        log.ids.append((call_id, index))
        self._log_length += 1


def _unanswered(call_id: str, at: int) -> Violation:
    return Violation(
        index=at,
        rule="unanswered_tool_call",
        message=f"tool call {call_id!r} gets no tool result before the next non-tool message",
        fix=f"add a tool message with tool_call_id={call_id!r} right after this message's other results, "
        "or remove the call",
        tool_call_id=call_id,
    )


def _empty_content(message: Message, index: int) -> Violation | None:
    role = message.role
    if role == "tool":
        if message.content is not None:
            return None
        return Violation(
            index=index,
            rule="empty_content",
            message="a tool result with no content (None)",
            fix="use the empty string '' for a tool that printed nothing",
            tool_call_id=message.tool_call_id,
        )
    if not message.is_empty():
        return None
    if role == "assistant":
        what, fix = "an assistant message with no text and no tool calls", "drop it, or give it its text"
    else:
        what, fix = (
            f"a {role} message with no text (or only whitespace) and no image",
            "drop it, or give it its text",
        )
    return Violation(index=index, rule="empty_content", message=what, fix=fix)


def _dangling_reasoning(message: Message, index: int) -> Violation | None:
    layout = message.metadata[LAYOUT_KEY]
    if not isinstance(layout, Mapping) or layout.get("id") != message.id:
        return None  # changed since conversion: the format writes it without its reasoning
    items = layout.get("items")
    last = items[-1] if isinstance(items, list) and items else None
    if not (isinstance(last, Mapping) and last.get("as") == "reasoning"):
        return None
    return Violation(
        index=index,
        rule="dangling_reasoning",
        message="a Responses API reasoning item is not followed by the item it belongs to",
        fix="append the rest of the model's response after it, or drop the reasoning item "
        "(the engine's repair drops it)",
    )


def check_messages(messages: Iterable[Message], *, system_first_only: bool = False) -> list[Violation]:
    """Every rule ``messages`` break, sorted by message index; ``[]`` when valid.

    O(n) in the messages and tool calls. See the module docstring for the rules.

    Args:
        messages: the conversation, in canonical form.
        system_first_only: also report system messages after the first
            non-system message (``system_not_first``). Default ``False``
            (OpenAI accepts them); the Anthropic format passes ``True``.

    Raises:
        InvalidMessageError: an element is not a `Message`.
    """
    checker = ConversationChecker(system_first_only=system_first_only)
    found: list[Violation] = []
    for message in messages:
        found.extend(checker.feed(message))
    found.extend(checker.finish())
    # Unanswered calls are detected at the next message but belong to the call's
    # message; a stable sort puts every violation at its place.
    found.sort(key=lambda v: v.index)
    return found


def ensure_valid(
    messages: Iterable[Message],
    *,
    system_first_only: bool = False,
    ignore: Iterable[Rule] = (),
    target: str = "providers",
    hint: str = "",
) -> None:
    """Raise `InvalidConversationError` when `check_messages` finds anything.

    The error's message names the first few violations (index, rule, fix) and
    its ``violations`` attribute holds them all.

    Args:
        messages: the conversation, in canonical form.
        system_first_only: as for `check_messages`.
        ignore: rules the target does not enforce (the Responses API accepts a
            conversation that starts with an assistant message).
        target: who would reject the conversation, for the error message.
        hint: a sentence appended to the error message (the formats mention ``validate=False``).

    Raises:
        InvalidConversationError: the conversation breaks at least one rule.
        InvalidMessageError: an element is not a `Message`.
    """
    skip = frozenset(ignore)
    found = [v for v in check_messages(messages, system_first_only=system_first_only) if v.rule not in skip]
    if not found:
        return
    shown = "; ".join(str(v) for v in found[:3])
    more = f" (and {len(found) - 3} more in .violations)" if len(found) > 3 else ""
    raise InvalidConversationError(
        f"{len(found)} problem{'s' if len(found) != 1 else ''} that {target} would reject: {shown}{more}."
        + (f" {hint}" if hint else ""),
        tuple(found),
    )
