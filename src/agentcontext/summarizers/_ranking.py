"""Which identifiers an extractive summary carries first: ranked by where the conversation met them.

An agent resuming a task needs the names it was working with: what the user wrote, what its own
tool calls acted on (the files it edited, the functions it grepped for, the ids it passed), the
errors it met, then what it said itself. What tool output merely listed (a directory listing, a
traceback's frames, a search result) comes last, and what is noise there is left out: durations,
percentages and sizes (progress and timing lines), dates (log stamps), hashes nobody acted on,
code symbols of files the agent only read, licence links.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ._identifiers import classify_identifier, extract_identifiers, extract_numbers, extract_symbols

__all__ = ["AGENT", "ERROR_NAME", "OUTPUT", "TARGET", "USER", "IdentifierIndex", "Rank"]

USER, TARGET, ERROR_NAME, AGENT, OUTPUT = range(5)
"""Where an identifier was met, most important first: the user's words, the agent's tool-call
arguments, an error, the agent's own words, tool output."""
Rank = tuple[int, int, int, int]
"""(tier, minor, -times seen, -the last message it was seen in): sorts best first. ``minor`` is 1
for a bare number, which ranks after the names met in the same place (``8080`` in a command
matters less than the file the command edited) and before those met in the next."""

_LICENCE = re.compile(r"licen[cs]e|opensource\.org|creativecommons\.org|/copyleft", re.I)


class IdentifierIndex:
    """The identifiers of the messages summarized, each with its best rank."""

    def __init__(self) -> None:
        self.ranks: dict[str, Rank] = {}

    def __contains__(self, ident: str) -> bool:
        return ident in self.ranks

    def get(self, ident: str) -> Rank | None:
        """The rank of ``ident``, None when it was not met."""
        return self.ranks.get(ident)

    def add_text(self, text: str, *, tier: int, when: int) -> None:
        """Every identifier of ``text``, met at ``tier`` in message ``when`` (noise of tool output left out)."""
        output = tier >= OUTPUT
        for ident in extract_identifiers(text):
            kind = classify_identifier(ident)
            here = tier
            if kind == "error":
                here = min(tier, ERROR_NAME)
            elif kind == "quantity" and output:
                continue  # durations, percentages, sizes: progress and timing lines
            elif kind == "date" and output:
                continue  # log stamps
            elif kind == "url" and _LICENCE.search(ident):
                continue
            elif output and kind == "id" and ident.islower() and not ident.isalpha():
                continue  # a hash in a listing (a commit, an object id) that nobody acted on
            self.put(ident, (here, 0, -1, -when))
        if output:
            return  # the names in a file the agent read are the file's, not the task's
        for ident in extract_symbols(text):
            self.put(ident, (tier, 0, -1, -when))
        for number in extract_numbers(text):
            self.put(number, (tier, 1, -1, -when))

    def put(self, ident: str, rank: Rank) -> None:
        """Record ``ident`` at ``rank``, merged with what is known: best place, counts added, newest use."""
        old = self.ranks.get(ident)
        if old is None:
            self.ranks[ident] = rank
        else:
            self.ranks[ident] = (*min(old[:2], rank[:2]), old[2] + rank[2], min(old[3], rank[3]))

    def ordered(self) -> Iterator[tuple[str, Rank]]:
        """Identifiers best first (ties: in the order first met, which is stable across re-summaries)."""
        return iter(sorted(self.ranks.items(), key=lambda kv: kv[1]))

    def fold_paths(self, files: dict[str, set[str]]) -> None:
        """Fold a path into the one longer path that contains it (``x.py`` into ``/repo/src/x.py``).

        Tool output and commands name the same file in several forms (bare, relative,
        absolute). Listing each spends the summary's room on one file; the longest form
        is the most precise and contains the others word for word. A short form that
        more than one longer path could complete stays as it is: it is ambiguous.
        ``files`` (path to what was done to it) is folded the same way.
        """
        paths = [i for i in {*self.ranks, *files} if "://" not in i and classify_identifier(i) == "path"]
        by_name: dict[str, list[str]] = {}
        for path in paths:
            by_name.setdefault(path.rstrip("/").rsplit("/", 1)[-1], []).append(path)
        for group in by_name.values():
            if len(group) < 2:
                continue
            group.sort(key=len, reverse=True)
            for k in range(len(group) - 1, 0, -1):
                short = group[k]
                longer = [g for g in group[:k] if _completes(g, short)]
                # ``./a/x.py`` and ``/repo/a/x.py`` name one file; ``a/x.py`` and ``b/x.py`` do not.
                if not longer or any(not _completes(longer[0], g.removeprefix("./")) for g in longer[1:]):
                    continue
                rank = self.ranks.pop(short, None)
                if rank is not None:
                    self.put(longer[0], rank)
                ops = files.pop(short, None)
                if ops is not None:
                    files.setdefault(longer[0], set()).update(ops)


def _completes(longer: str, short: str) -> bool:
    """True when ``short`` is a tail of the path ``longer`` (at a ``/`` boundary)."""
    if longer == short or short.startswith("./"):
        return False  # ``./x.py`` is not a literal part of ``/repo/x.py``: it stays apart
    return longer.endswith("/" + short) or (short.startswith("/") and longer.endswith(short))
