"""Writing the snapshot within a token budget: what goes in first, and how it is packed.

Items are chosen by priority until the budget is spent: the goal and where the task stands
(the last step, the latest test run, the agent's plan), the user's requests, another writer's earlier summary,
what failed and the errors, what the agent changed, the identifiers it touched, the files it
read, then whatever room is left goes to more of everything and the other commands, newest
first. The least important go first when the exact count of the whole is over the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._builder import State, Step
from ._commands import OP_RANK, word_end, word_start
from ._identifiers import classify_identifier
from ._ranking import OUTPUT, Rank
from ._snapshot import LABELS, SECTIONS, TAGS
from ._transcript import Language

__all__ = ["Quotas", "render", "shorten"]

Counter = Callable[[str], int]

# The shortest quote of a request worth a line: about a sentence from each end, in any script (a
# Chinese character costs about a token, an English word a little more).
BRIEF_QUOTE = 48


@dataclass(frozen=True)
class Quotas:
    """How long a quote of each kind may be, in tokens (the summarizer's settings)."""

    goal: int
    request: int
    state: int


def shorten(text: str, max_tokens: int, count: Counter) -> str:
    """``text`` cut in the middle to about ``max_tokens`` tokens (head 60%, tail 40%), at word boundaries."""
    text = text.strip()
    tokens = count(text)
    if tokens <= max_tokens:
        return text
    keep = int(len(text) * max_tokens / tokens)
    short = text
    for _ in range(6):
        head = word_end(text, int(keep * 0.6))
        tail = word_start(text, len(text) - (keep - int(keep * 0.6)))
        # The marker carries no number: a count would read as an identifier ("1,579 chars").
        short = f"{text[:head].rstrip()} […] {text[tail:].lstrip()}"
        if count(short) <= max_tokens or keep <= 8:
            return short
        keep = int(keep * 0.8)
    return short


def render(state: State, lang: Language, budget: int, quotas: Quotas, count: Counter) -> str:
    """The snapshot of ``state`` within ``budget`` tokens."""
    state.index.fold_paths(state.files)
    p = _Packer(state, lang, budget, count)
    labels = p.labels
    # 1. The goal and where the task stands: the last step, the latest test run, the plan.
    if state.goal:
        p.take("overall_goal", shorten(state.goal, min(quotas.goal, max(budget // 4, 16)), count), 0)
    # Quotes scale with the budget, so a small summary still has room for the identifiers.
    quote = max(budget // 8, 24)
    if state.last:
        p.take("task_state", f"{labels['last']}: {shorten(state.last, min(quotas.state, quote), count)}", 0)
    if state.test:
        p.take("task_state", f"{labels['test']}: {shorten(state.test, min(quote, 80), count)}", 1)
    if state.plan:  # where the agent is going: its latest plan or to-do list
        p.take("task_state", f"{labels['plan']}:\n{shorten(state.plan, max(budget // 3, 64), count)}", 2)
    # 2-6. Requests, an earlier writer's summary, what failed, errors, what the agent changed: newest
    # first, each within its share, so that no one kind crowds out the others.
    p.fill_requests(p.used + int(budget * 0.2), min(quotas.request, quote))
    # An earlier summary by another writer (an LLM): its prose is the only record of what it
    # covered, so it keeps up to half the room, cut in the middle when longer.
    p.fill_prior(p.used + budget // 2)
    # Commands that failed, with their error: what the agent should not blindly repeat. An
    # error shown with its command is not listed again among the errors.
    p.fill_steps(p.used + int(budget * 0.1), lambda s: s.failed, quote)
    p.fill_errors(p.used + int(budget * 0.1))
    changes = p.used + int(budget * 0.2)
    p.fill_steps(changes, lambda s: s.change and not s.failed, quote * 2)
    p.fill_files(changes, changed=True)
    # 7. The identifiers the task touched, each not shown yet, once, best first (what the user wrote,
    # what the agent's calls acted on, errors, its own words): at a few tokens an entry, the densest
    # record of what the agent may need verbatim.
    p.fill_ids(below=OUTPUT)
    p.fill_files(p.used + int(budget * 0.1), changed=False)
    p.fill_ids(below=None)
    # 8. Whatever room is left: more of everything, in the same order, then the other commands
    # (the newest steps are kept verbatim after the summary anyway).
    p.fill_requests(budget, min(quotas.request, quote))
    p.fill_steps(budget, lambda _: True, quote)
    p.fill_errors(budget)
    p.fill_files(budget, changed=False)
    for n, note in enumerate(state.notes):
        p.take("key_knowledge", f"{labels['note']}: " + shorten(note, 200, count), 10_000 + n)
    # 9. Room still left: what the agent said before its last message (its findings, the cause it
    # found, what it decided), newest first, shown in the order it was said. Only their identifiers
    # were indexed; a one-shot fit whose split cannot move earlier would leave this room empty.
    said = [text for text in dict.fromkeys(reversed(state.said)) if text != state.last]
    for n, text in enumerate(said):
        if p.used + 24 > budget:
            break
        p.take(
            "key_knowledge",
            f"{labels['said']}: " + shorten(text, min(quotas.state, quote), count),
            20_000 - n,
        )
    return p.fit()


def _line(section: str, text: str) -> str:
    """How ``text`` is written in ``section``: the goal as it is, anything else as a bullet."""
    return text if section == "overall_goal" else "- " + text.replace("\n", "\n  ")


class _Item:
    """One line of the snapshot, or one entry of a listed line (``bucket``)."""

    __slots__ = ("before", "bucket", "cost", "line", "order", "section")

    def __init__(self, section: str, order: int, line: str, cost: int, bucket: str | None = None) -> None:
        self.section = section
        self.order = order
        self.line = line
        self.cost = cost
        self.bucket = bucket
        self.before: tuple[str, int] | None = None
        """The line and cost before the line grew (`_Packer.replace`): what trimming goes back to."""


# Listed lines: (section, bucket), in the order they open their section.
_LISTS = (
    ("file_system_state", "deleted"),
    ("file_system_state", "created"),
    ("file_system_state", "modified"),
    ("artifact_trail", "read"),
    ("key_knowledge", "ids"),
    ("key_knowledge", "symbols"),
)


class _Packer:
    """Chooses what goes into a summary, by priority, until the token budget is spent."""

    def __init__(self, state: State, lang: Language, budget: int, count: Counter) -> None:
        self.count = count
        self.state = state
        self.tags = TAGS[lang]
        self.labels = LABELS[lang]
        self.budget = budget
        # Everything taken, in the order taken (best first): when the exact count of the whole is
        # over the budget, the last (least important) go first.
        self.items: list[_Item] = []
        self.grown: list[_Item] = []  # items whose line grew, in the order they grew
        self.lines: set[str] = set()
        self.listed: dict[str, list[_Item]] = {bucket: [] for _, bucket in _LISTS}
        frame = f"<{self.tags['state_snapshot']}>\n</{self.tags['state_snapshot']}>"
        self.used = count(frame)
        self.section_cost = {s: count(f"<{self.tags[s]}>\n</{self.tags[s]}>\n") for s in SECTIONS}
        self.opened: set[str] = set()
        self.steps_taken: set[int] = set()
        # Requests quoted so far: each one's item and the quote it was given (to quote it longer later).
        self.quoted: dict[int, tuple[_Item, int]] = {}

    def _open_cost(self, section: str) -> int:
        return self.section_cost[section] if section not in self.opened else 0

    def take(self, section: str, text: str, order: int) -> _Item | None:
        """Add one item to ``section`` if it fits (and is not there already)."""
        line = _line(section, text)
        if line in self.lines:
            return None
        cost = self.count(line + "\n") + self._open_cost(section)
        if self.used + cost > self.budget:
            return None
        self.used += cost
        self.opened.add(section)
        self.lines.add(line)
        item = _Item(section, order, line, cost)
        self.items.append(item)
        return item

    def replace(self, item: _Item, text: str) -> bool:
        """Put ``text``, a longer form of ``item``'s, in its place if the difference fits; False if it does not.

        The growth is the least important thing taken so far: trimming undoes it first.
        """
        line = _line(item.section, text)
        if line in self.lines:
            return False
        cost = self.count(line + "\n")
        if self.used + cost - item.cost > self.budget:
            return False
        self.used += cost - item.cost
        if item.before is None:
            item.before = (item.line, item.cost)
            self.grown.append(item)
        self._set_line(item, line, cost)
        return True

    def _set_line(self, item: _Item, line: str, cost: int) -> None:
        self.lines.discard(item.line)
        self.lines.add(line)
        item.line, item.cost = line, cost

    def take_listed(self, section: str, bucket: str, entry: str) -> bool:
        """Add one entry to a comma-separated list line of ``section``."""
        entries = self.listed[bucket]
        cost = self.count((", " if entries else "- x: ") + entry) + self._open_cost(section)
        if self.used + cost > self.budget:
            return False
        self.used += cost
        self.opened.add(section)
        item = _Item(section, 0, entry, cost, bucket)
        entries.append(item)
        self.items.append(item)
        return True

    def fill_requests(self, limit: int, quote: int) -> None:
        """The user's requests, each quoted up to ``quote`` tokens, within the room up to ``limit``.

        Every request not listed yet gets a line first, newest first, of its even share of the room
        (and no less than `BRIEF_QUOTE` tokens: a sentence or so from each end), so that every question
        the user asked is listed before any is quoted at length; only what does not fit even briefly
        (the oldest) goes. Then the room left quotes the newest at greater length.
        """
        requests = self.state.requests
        # A request the user repeated is quoted once, where it was last made.
        newest = {text: n for n, text in enumerate(requests)}
        newest_first = sorted(newest.values(), reverse=True)
        pending = [n for n in newest_first if n not in self.quoted or self.quoted[n][1] < quote]
        new = [n for n in pending if n not in self.quoted]
        for left, n in enumerate(new):
            room = limit - self.used
            if room <= 0:
                return
            self._quote_request(n, min(quote, max(BRIEF_QUOTE, room // (len(pending) - left))))
        for n in pending:
            room = limit - self.used
            if room <= 0:
                return
            if n in self.quoted and self.quoted[n][1] < quote:
                self._quote_request(n, min(quote, self.quoted[n][1] + room))

    def _quote_request(self, n: int, quote: int) -> None:
        text = shorten(self.state.requests[n], quote, self.count)
        if n in self.quoted:
            item = self.quoted[n][0]
            if not self.replace(item, text):
                return
        else:
            taken = self.take("active_constraints", text, n)
            if taken is None:
                return
            item = taken
        self.quoted[n] = (item, quote)

    def fill_prior(self, limit: int) -> None:
        for order, (section, text) in enumerate(self.state.prior):
            room = limit - self.used - self._open_cost(section) - 4
            if room < 8:
                break
            self.take(section, shorten(text, room, self.count), 5_000 + order)

    def fill_errors(self, limit: int) -> None:
        errors = list(self.state.errors)
        shown = "\n".join(item.line for item in self.items if item.section == "recent_actions")
        for order in range(len(errors) - 1, -1, -1):
            if self.used >= limit:
                break
            if errors[order] in shown:
                continue  # already shown with the command that raised it
            self.take("key_knowledge", f"{self.labels['error']}: {errors[order]}", order)

    def fill_files(self, limit: int, *, changed: bool) -> None:
        # Changed files first (deleted, created, modified), then those read; within each,
        # the ones the summary's identifiers rank highest (seen most, most recently).
        index = self.state.index
        worst: Rank = (OUTPUT + 1, 0, 0, 0)

        def key(kv: tuple[str, set[str]]) -> tuple[int, Rank]:
            return min(OP_RANK[o] for o in kv[1]), index.get(kv[0]) or worst

        for path, ops in sorted(self.state.files.items(), key=key):
            if self.used >= limit:
                break
            op = min(ops, key=lambda o: OP_RANK[o])
            if (op == "read") == changed:
                continue
            if any(item.line == path for item in self.listed[op]):
                continue
            self.take_listed("artifact_trail" if op == "read" else "file_system_state", op, path)

    def fill_steps(self, limit: int, which: Callable[[Step], bool], quote: int) -> None:
        """Steps chosen by ``which``, newest first, each quoted up to ``quote`` tokens."""
        steps = sorted(enumerate(self.state.steps), key=lambda e: (e[1].seq, e[0]))
        # A command line is worth a few tokens, not a tenth of a small summary.
        call_quote = min(60, max(self.budget // 10, 20), quote)
        for order in range(len(steps) - 1, -1, -1):
            if self.used >= limit:
                break
            n, step = steps[order]
            if n in self.steps_taken or not which(step):
                continue
            if step.change:
                text = f"{self.labels['changed']}: {shorten(step.text, quote, self.count)}"
                item = self.take("file_system_state", text, order)
            else:
                item = self.take("recent_actions", shorten(step.text, call_quote, self.count), order)
            if item is not None:
                self.steps_taken.add(n)

    def fill_ids(self, *, below: int | None) -> None:
        """Identifiers not shown yet, best first; only those ranked above tier ``below`` when given."""
        shown = "\n".join(item.line for item in self.items)
        for ident, rank in self.state.index.ordered():
            if below is not None and rank[0] >= below:
                break
            if ident in shown:
                continue
            kind = classify_identifier(ident)
            bucket = "symbols" if kind in ("symbol", "term") else "ids"
            if not self.take_listed("key_knowledge", bucket, ident):
                if self.used + 4 > self.budget:
                    return
                continue

    def assemble(self) -> str:
        tags, labels = self.tags, self.labels
        body: dict[str, list[tuple[int, str]]] = {s: [] for s in SECTIONS}
        for item in self.items:
            if item.bucket is None:
                body[item.section].append((item.order, item.line))
        lists: dict[str, list[str]] = {s: [] for s in SECTIONS}
        for section, bucket in _LISTS:
            entries = self.listed[bucket]
            if entries:
                lists[section].append(f"- {labels[bucket]}: " + ", ".join(e.line for e in entries))
        out = [f"<{tags['state_snapshot']}>"]
        for s in SECTIONS:
            lines = [line for _, line in sorted(body[s], key=lambda e: e[0])]
            lines = lists[s] + lines if s != "key_knowledge" else lines + lists[s]
            if lines:
                out.extend((f"<{tags[s]}>", *lines, f"</{tags[s]}>"))
        out.append(f"</{tags['state_snapshot']}>")
        return "\n".join(out)

    def fit(self) -> str:
        """The summary text; per-item counts only approximate the whole, so trim until it really fits.

        The overshoot is a few tokens of joins between items: undo the lines that grew, newest
        growth first, then drop the least important items taken, until their estimated cost covers
        it, then count again.
        """
        text = self.assemble()
        over = self.count(text) - self.budget
        while over > 0 and (self.items or self.grown):
            freed = 0
            while freed < over and self.grown:  # lines that grew go back to their first form
                item = self.grown.pop()
                assert item.before is not None
                freed += item.cost - item.before[1]
                self._set_line(item, *item.before)
                item.before = None
            while freed < over and self.items:
                item = self.items.pop()
                if item.bucket is not None:
                    self.listed[item.bucket].remove(item)
                else:
                    self.lines.discard(item.line)
                freed += item.cost
            text = self.assemble()
            over = self.count(text) - self.budget
        return text
