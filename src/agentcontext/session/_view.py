"""The derived view: what the model sees, as cheap immutable snapshots.

A view is a list plus a length. Appending to the newest view extends the list
in place; every older snapshot keeps its own (shorter) length, so it still sees
exactly what it saw. Only when a snapshot that is not the list's full length
is extended (after a revert) or the view is rewritten (a compaction, an undo)
is a new list made. A checkpoint therefore costs O(1), not a copy of the
history (what Kimi CLI gets by rotating its file, without rewriting any file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..messages import Message, MessageView

__all__ = ["SessionView", "UndoLink", "ViewState"]


SessionView = MessageView
"""A read-only snapshot of a session's view (`agentcontext.messages.MessageView`); it never changes."""


@dataclass(frozen=True, slots=True)
class UndoLink:
    """What undoing the newest compaction of a view goes back to."""

    before: ViewState
    """The view just before the compaction."""
    after_len: int
    """The view's length just after it; later messages are kept by an undo."""
    compaction_seq: int


class ViewState:
    """One immutable view: ``items[:length]`` and its undo chain.

    A plain slotted class rather than a frozen dataclass: one is made per
    appended message, and a restore of 100,000 messages makes 100,000 of them.
    Treat it as immutable.
    """

    __slots__ = ("items", "length", "undo")

    def __init__(self, items: list[Message], length: int, undo: UndoLink | None = None) -> None:
        self.items = items
        self.length = length
        self.undo = undo

    def snapshot(self) -> SessionView:
        """The view as a read-only sequence (O(1))."""
        return SessionView(self.items, self.length)

    def extended(self, messages: Iterable[Message]) -> ViewState:
        """This view plus ``messages``: in place when this is the list's newest view, else a copy."""
        items = self.items
        if len(items) != self.length:
            items = items[: self.length]  # another snapshot owns the longer list: copy on write
        before = len(items)
        items.extend(messages)
        return ViewState(items, self.length + (len(items) - before), self.undo)

    def appended(self, message: Message) -> ViewState:
        """This view plus one message (the hot path of appends and restores)."""
        items = self.items
        if len(items) != self.length:
            items = items[: self.length]
        items.append(message)
        return ViewState(items, len(items), self.undo)

    def rewritten(self, keep: int, tail: Sequence[Message], *, undo: UndoLink | None) -> ViewState:
        """``self[:keep] + tail`` as a new view (a new list: older snapshots keep theirs)."""
        items = self.items[:keep]
        items.extend(tail)
        return ViewState(items, len(items), undo)

    def __repr__(self) -> str:
        return f"ViewState({self.length} messages, undo={self.undo is not None})"
