"""Keeping a session's view on a client's history: what the LiteLLM proxy and LangChain sessions share.

A client (a chat UI behind the proxy, a LangGraph thread) sends its whole history
with each request; the session logs it and prepares the request from its own view.
While the history only grows, what is new is appended. When the client rewrote it
(went back to an earlier message, deleted one, forked from an old checkpoint), the
view must not keep what the client no longer sends: neither the messages nor a
summary that stands for them, or the model answers from a history the user took
back (another user's, when two conversations were taken for one). The view is then
undone to the raw messages (`Session.undo_compaction`) and rewound to the last one
both share (`Session.rewind`); both are recorded, and the log keeps everything.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..compaction import SYNTHETIC_KINDS, MessageKind, kind_of
from ..exceptions import RecallError, UsageError
from ..messages import Message
from ..session import Session

__all__ = ["Follower"]

_NOTES = (MessageKind.SUMMARY, MessageKind.ELISION)


class Follower:
    """Makes one session's view end with a client's history (`follow`).

    Args:
        session: the session.
        chained: the client's message ids are chained (each derived from the ones
            before it, as the formats derive ids for the wire), so a view that ends
            with a message of the history holds nothing the history lacks; with ids
            of their own (LangChain's), every message of the view is checked.
    """

    def __init__(self, session: Session, *, chained: bool) -> None:
        self.session = session
        self.chained = chained

    def follow(self, messages: Sequence[Message]) -> None:
        """Make the session's view end with the client's ``messages``: blocking (store I/O).

        The view ends with the newest client message it holds (or a copy standing
        for it); what follows in ``messages`` is appended. When the view holds a
        message, or a summary of messages, that the client no longer sends before
        that point, compactions are undone and the view rewound to where both agree.
        """
        session = self.session
        while True:
            view = session.view
            p, j, quick = self._tip(view, messages)
            new = messages[j + 1 :]
            if not quick:
                gone = self._first_gone(view, p, messages[: j + 1])
                if gone is not None:
                    if not self._undo():
                        session.rewind(gone)
                    continue
            if new and self._logged(new[0].id) and self._summarized(view, new[0].id):
                # The client kept part of a span a summary stands for and changed the rest: expand it again.
                if self._undo():
                    continue  # else no compaction is left to undo: re-log what the client sends again
            break
        if p + 1 < len(view):
            session.rewind(p + 1)
        if new:
            session.extend(new)

    def stands_for(self, message: Message) -> str:
        """The id of the client message ``message`` is (or is a masked, cut or shortened copy of)."""
        return self.session.stands_for(message)

    # ------------------------------------------------------------------ helpers

    def _tip(self, view: Sequence[Message], messages: Sequence[Message]) -> tuple[int, int, bool]:
        """``(p, j, quick)``: the newest view position ``p`` standing for a client message, ``messages[j]``
        ((-1, -1): none); ``quick`` when the view ends there and chained ids vouch for all before it."""
        if not view or not messages:
            return -1, -1, False
        # The usual request: the view ends with the previous request's last message, a few messages back.
        last = self.stands_for(view[-1])
        for j in range(len(messages) - 1, max(-1, len(messages) - 65), -1):
            if messages[j].id == last:
                return len(view) - 1, j, self.chained
        positions = {m.id: j for j, m in enumerate(messages)}
        for p in range(len(view) - 1, -1, -1):
            j = positions.get(self.stands_for(view[p]), -1)
            if j >= 0:
                return p, j, False
        return -1, -1, False

    def _first_gone(self, view: Sequence[Message], p: int, kept: Sequence[Message]) -> int | None:
        """Where ``view[:p + 1]`` and the client's ``kept`` messages part: the first position holding a
        message the client no longer sends (or a summary or elision note standing for one), or standing
        for a client message that comes after one the view lacks; None when the view is the history."""
        ids = {m.id for m in kept}
        represented: dict[str, int] = {}
        for q in range(p + 1):
            m = view[q]
            kind = kind_of(m)
            if m.role == "system" and kind is None:
                continue  # the session keeps the system prompt it began with; a request sends today's
            if (
                m.id in ids
            ):  # the client holds this very message (a summary or placeholder written back to it)
                represented.setdefault(m.id, q)
                continue
            if kind in _NOTES:
                covered = self.session.covered_by(m)
                if any(c not in ids for c in covered):
                    return q
                represented.update((c, q) for c in covered)
            elif kind not in SYNTHETIC_KINDS:
                original = self.stands_for(m)
                if original not in ids:
                    return q
                represented.setdefault(original, q)
        if self.chained:
            return None  # chained ids: a view that holds a client message holds every one before it
        dropped: set[str] = (
            set()
        )  # a repair's or a cut's drop, said in its report: not a message the view lacks
        for record in self.session.compactions:
            for action in record.actions:
                named = action.get("message_ids")
                if action.get("kind") == "dropped" and isinstance(named, list):
                    dropped.update(mid for mid in named if isinstance(mid, str))
        for k, m in enumerate(kept):
            if m.role != "system" and m.id not in represented and m.id not in dropped:
                # The client holds a message the view lacks: the view parts from it where it shows a later one.
                later = [represented[x.id] for x in kept[k + 1 :] if x.id in represented]
                return min(later) if later else None
        return None

    def _summarized(self, view: Sequence[Message], message_id: str) -> bool:
        """Whether a summary (or an elision note) in ``view`` stands for message ``message_id``."""
        return any(message_id in self.session.covered_by(m) for m in view if kind_of(m) in _NOTES)

    def _logged(self, message_id: str) -> bool:
        try:
            self.session.message(message_id)
        except RecallError:
            return False
        return True

    def _undo(self) -> bool:
        try:
            self.session.undo_compaction()
        except UsageError:
            return False
        return True
