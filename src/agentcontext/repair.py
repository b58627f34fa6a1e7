"""Repairs for conversations as real agents record them.

Real logs hold tool calls that never got a result (usually the final submit),
results whose call is missing, calls that reuse an id, and empty messages. A
provider rejects all of these with a 400. The engine fixes them on the way in,
one message at a time (so an agent step costs O(new messages)), and lists every
fix in its report; in strict mode it refuses such input instead.

Repairs, each reported as a ``"repaired"`` action:

* an unanswered tool call gets a clearly marked stub result, placed right after
  the call's other results (before the next message that is not a tool result,
  a system message included: providers want a call's results right after it);
* a tool result that arrives after its call's block was closed (a late result:
  another message came between, and the call got a stub) or before any call of
  its id (an early one) is kept as text, in a user message marked as a command's
  output (``metadata["observation"]``), so what it says still reaches the model;
* a tool result inside a block that answers no call of it, or answers one a
  second time, is taken out of the prompt (it stays in the input and the session log);
* a call id used before (in an earlier message, or twice in one) is renamed
  (``id`` -> ``id_2``, with only the characters every provider accepts in ids),
  and results are matched to calls of that id in order, so every id is unique
  and each result stays with the call it answered;
* a conversation whose first non-system message is not from the user gets a
  short user message in front;
* a user, system or assistant message with no content gets a visible marker,
  since providers reject empty text (Kimi CLI #2396).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .compaction import Action, MessageKind, marker
from .exceptions import InvalidConversationError
from .messages import ContentPart, Message, TextPart, ToolCall, derive_id

__all__ = ["RepairState", "repair_messages", "stub_result"]

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
"""Characters some provider refuses in a tool call id (Anthropic accepts ``^[A-Za-z0-9_-]+$``)."""

STUB_TEXT = "[agentcontext: no result followed this tool call]"
EMPTY_TEXT = "[agentcontext: this message was empty]"
START_TEXT = "[agentcontext: the conversation's opening user message is missing; it begins below]"


def stub_result(call_id: str, tool: str, *, anchor: str) -> Message:
    """A marked stand-in result for a tool call that was never answered."""
    return Message(
        role="tool",
        tool_call_id=call_id,
        content=STUB_TEXT,
        id=derive_id(anchor, "stub:" + call_id),
        metadata={"agentcontext": marker(MessageKind.STUB_RESULT, tool=tool)},
    )


@dataclass(kw_only=True)
class RepairState:
    """What the repairer remembers between steps: O(calls) state, advanced message by message."""

    pending: dict[str, str] = field(default_factory=dict)
    """Call ids (after renaming) awaiting a result -> tool name, in issue order."""
    answered: set[str] = field(default_factory=set)
    """Calls answered in the current tool-result block."""
    seen_calls: dict[str, int] = field(default_factory=dict)
    """How often each original call id has been issued."""
    renames: dict[str, list[str]] = field(default_factory=dict)
    """Original id -> the ids (after renaming) of this block's calls issued under it and not yet answered,
    in issue order: the n-th result carrying the id answers the n-th call."""
    has_user: bool = False
    last_id: str | None = None
    """The id of the last message passed through (anchors stub ids)."""

    def copy(self) -> RepairState:
        """A copy safe to advance without touching this one (O(size of the state))."""
        return RepairState(
            pending=dict(self.pending),
            answered=set(self.answered),
            seen_calls=dict(self.seen_calls),
            renames={k: list(v) for k, v in self.renames.items()},
            has_user=self.has_user,
            last_id=self.last_id,
        )

    def close_block(self, out: list[Message], actions: list[Action]) -> None:
        """Answer every pending call with a stub (before the next message that is not a tool result)."""
        if not self.pending:
            self.answered.clear()
            self.renames.clear()
            return
        stubs = [stub_result(cid, tool, anchor=self.last_id or "") for cid, tool in self.pending.items()]
        out.extend(stubs)
        actions.append(
            Action(
                kind="repaired",
                strategy="repair",
                message_ids=(),
                replacement_ids=tuple(s.id for s in stubs),
                reason="tool calls never answered before this message ("
                + ", ".join(repr(c) for c in self.pending)
                + "): stub results added after them",
            )
        )
        self.pending.clear()
        self.answered.clear()
        self.renames.clear()

    def pending_stubs(self) -> list[Message]:
        """Stubs for calls still pending at the end, without changing the state.

        The engine adds these to what it returns but not to what it remembers:
        the real results may still arrive with the next step.
        """
        return [stub_result(cid, tool, anchor=self.last_id or "") for cid, tool in self.pending.items()]


def _repair_one(m: Message, state: RepairState, out: list[Message], actions: list[Action]) -> None:
    # A tool result must follow its call: any other message ends the block, and calls still waiting are
    # answered by stubs before it (a system message too: a result after it would no longer follow its call).
    if m.role != "tool":
        state.close_block(out, actions)
    if m.role == "assistant" and not state.has_user:
        opener = Message(
            role="user",
            content=START_TEXT,
            id=derive_id(m.id, "opener"),
            metadata={"agentcontext": marker(MessageKind.OPENER)},
        )
        out.append(opener)
        state.has_user = True
        actions.append(
            Action(
                kind="repaired",
                strategy="repair",
                message_ids=(),
                replacement_ids=(opener.id,),
                reason="the first non-system message was not from the user; a short user message was put in front",
            )
        )
    if m.role == "user":
        state.has_user = True

    if m.role == "tool":
        assert m.tool_call_id is not None
        queue = state.renames.get(m.tool_call_id)
        cid = queue.pop(0) if queue else m.tool_call_id
        if cid in state.pending:
            state.pending.pop(cid)
            state.answered.add(cid)
            if cid != m.tool_call_id:
                new = m.evolve(tool_call_id=cid)
                actions.append(
                    Action(
                        kind="repaired",
                        strategy="repair",
                        message_ids=(m.id,),
                        replacement_ids=(new.id,),
                        reason=f"result re-pointed to renamed call id {cid!r}",
                    )
                )
                m = new
            out.append(m)
            state.last_id = m.id
            return
        if not state.pending and cid not in state.answered:
            # Between blocks: a late or early result. Its words may be what the model needs next
            # (a failing test's output), so they stay, as text no provider refuses.
            _keep_as_text(m, state, out, actions)
            return
        why = (
            "answers a call that was already answered"
            if cid in state.answered
            else "answers no call of this block"
        )
        actions.append(
            Action(
                kind="repaired",
                strategy="repair",
                message_ids=(m.id,),
                reason=f"tool result for {m.tool_call_id!r} taken out of the prompt: it {why}",
            )
        )
        return

    new_m = m
    if m.tool_calls:
        calls: list[ToolCall] = []
        renamed: list[str] = []
        for call in m.tool_calls:
            original = call.id
            seen = state.seen_calls.get(original, 0)
            state.seen_calls[original] = seen + 1
            cid = original
            if seen:
                base = _UNSAFE_ID.sub("_", original)
                cid = f"{base}_{seen + 1}"
                while cid in state.seen_calls:
                    seen += 1
                    cid = f"{base}_{seen + 1}"
                state.seen_calls[cid] = 1
                renamed.append(f"{original!r} -> {cid!r}")
                call = ToolCall(id=cid, name=call.name, arguments=call.arguments)
            state.renames.setdefault(original, []).append(cid)
            calls.append(call)
            state.pending[cid] = call.name
        if renamed:
            new_m = m.evolve(tool_calls=tuple(calls))
            actions.append(
                Action(
                    kind="repaired",
                    strategy="repair",
                    message_ids=(m.id,),
                    replacement_ids=(new_m.id,),
                    reason="repeated tool call ids renamed (their results are matched in order): "
                    + ", ".join(renamed),
                )
            )
    if new_m.is_empty():
        fixed = new_m.evolve(content=EMPTY_TEXT)
        actions.append(
            Action(
                kind="repaired",
                strategy="repair",
                message_ids=(new_m.id,),
                replacement_ids=(fixed.id,),
                reason=f"empty {m.role} message given a marker (providers reject empty content)",
            )
        )
        new_m = fixed
    out.append(new_m)
    state.last_id = new_m.id


def _keep_as_text(m: Message, state: RepairState, out: list[Message], actions: list[Action]) -> None:
    """A tool result outside any block of its call, as a user message that carries a command's output."""
    state.close_block(out, actions)
    head = (
        f"[agentcontext: the result of tool call {m.tool_call_id!r}"
        + (f" ({m.name})" if m.name else "")
        + ", which did not come right after its call; kept here as text]"
    )
    content = m.content
    if isinstance(content, tuple):
        new_content: str | tuple[ContentPart, ...] = (TextPart(text=head), *content)
    else:
        new_content = f"{head}\n{content or ''}"
    note = Message(
        role="user",
        content=new_content,
        id=derive_id(m.id, "late result"),
        metadata={**m.metadata, "observation": True},
    )
    out.append(note)
    state.last_id = note.id
    actions.append(
        Action(
            kind="repaired",
            strategy="repair",
            message_ids=(m.id,),
            replacement_ids=(note.id,),
            reason=f"tool result for {m.tool_call_id!r} follows no open call of it (it came late or early): "
            "kept as text in a user message",
        )
    )


def repair_messages(
    messages: Iterable[Message],
    state: RepairState | None = None,
    *,
    strict: bool = False,
    first_index: int = 0,
) -> tuple[list[Message], list[Action], RepairState]:
    """Repair ``messages`` (continuing from ``state``); return them, the repairs, and the new state.

    Calls still pending at the end are *not* stubbed here (see
    `RepairState.pending_stubs`). With ``strict=True``, any needed repair raises
    `InvalidConversationError` naming it and the index of the message where it was found
    (``first_index`` is the index of the first of ``messages`` in the caller's list), and
    nothing is changed.
    """
    st = state if state is not None else RepairState()
    out: list[Message] = []
    actions: list[Action] = []
    found_at: list[int] = []  # strict: the index of the message at which each action arose
    for i, m in enumerate(messages, first_index):
        role = m.role
        # The common cases, with nothing to repair: a message without tool calls while no call waits for
        # its result (a system one, one from the user, or from the assistant after the user spoke).
        if (
            role != "tool"
            and not st.pending
            and (role == "system" or (not m.tool_calls and (role == "user" or st.has_user)))
            and not m.is_empty()
        ):
            if role != "system":
                st.answered.clear()
                st.renames.clear()
                st.has_user = True
            out.append(m)
            st.last_id = m.id
            continue
        _repair_one(m, st, out, actions)
        if strict:
            found_at.extend([i] * (len(actions) - len(found_at)))
    if strict and actions:
        reasons = "; ".join(f"message {i}: {a.reason}" for i, a in zip(found_at, actions[:5], strict=False))
        more = f" (and {len(actions) - 5} more)" if len(actions) > 5 else ""
        raise InvalidConversationError(
            f"the conversation breaks provider rules: {reasons}{more}. Fix the input, or drop strict=True "
            "to let agentcontext repair it and report what it did",
            tuple(actions),
        )
    return out, actions, st
