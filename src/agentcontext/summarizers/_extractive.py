"""`ExtractiveSummarizer`: an offline, deterministic summary in the ``state_snapshot`` sections.

Seed 000's "simple summary" kept message counts and nothing else. This one
keeps what an agent needs to carry on, copied from the messages rather than
paraphrased: the user's goal and requests verbatim (shortened when huge), the
files read and changed (from tool-call arguments), the commands run with their
outcome (exit code, error line), the errors seen, the identifiers met (paths,
URLs, ids, numbers with units, error names: a compact index, each once), and
the last state. It fits whatever token budget it is given, choosing by
priority, and integrates a previous summary it wrote (or another writer's,
whose words it keeps) instead of starting over.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..exceptions import ConfigError
from ..messages import JSONValue, Message, ToolCall, tool_call_index, tool_name_for
from ..strategies._base import SummaryRequest
from ..tokens._base import TokenCounter
from ._identifiers import classify_identifier, extract_identifiers
from ._transcript import Language, detect_language, summary_kind

__all__ = ["ExtractiveSummarizer", "parse_snapshot"]

SECTIONS = (
    "overall_goal",
    "active_constraints",
    "key_knowledge",
    "artifact_trail",
    "file_system_state",
    "recent_actions",
    "task_state",
)
_TAGS: dict[Language, dict[str, str]] = {
    "en": {s: s for s in ("state_snapshot", *SECTIONS)},
    "zh": {
        "state_snapshot": "状态快照",
        "overall_goal": "总体目标",
        "active_constraints": "用户要求",
        "key_knowledge": "关键信息",
        "artifact_trail": "涉及资源",
        "file_system_state": "文件状态",
        "recent_actions": "最近操作",
        "task_state": "任务状态",
    },
}
_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "error": "error",
        "ids": "ids",
        "note": "note",
        "read": "read",
        "modified": "modified",
        "created": "created",
        "deleted": "deleted",
        "request": "current request",
        "last": "last step",
        "exit": "exit",
        "no_result": "no result recorded",
        "earlier": "earlier",
        "goal_kept": "(the user's first message, kept verbatim after this summary)",
    },
    "zh": {
        "error": "错误",
        "ids": "标识",
        "note": "备注",
        "read": "读取",
        "modified": "修改",
        "created": "创建",
        "deleted": "删除",
        "request": "当前请求",
        "last": "最后一步",
        "exit": "退出码",
        "no_result": "无结果",
        "earlier": "更早",
        "goal_kept": "（见本摘要之后原文保留的用户第一条消息）",
    },
}
_ZH_TAGS = re.compile(r"<(?:状态快照|总体目标)>")
_SECTION_OF_TAG = {tag: key for lang in _TAGS.values() for key, tag in lang.items()}
_LABEL_KEY = {text: key for lang in _LABELS.values() for key, text in lang.items()}

_EXIT = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>|exit(?:ed)?(?: with)?(?: code| status)[:= ]+(-?\d+)|"
    r"Exit code:?\s*(-?\d+)|returncode[=:]\s*(-?\d+)",
    re.I,
)
_ERROR_LINE = re.compile(
    r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b|\bFAILED\b|\bERROR\b|\berror(?:\[\w+\])?:|\bfatal:|\bpanic:|"
    r"\bfailed\b|\bnot found\b|\bNo such file\b|\bcommand not found\b|失败|错误|异常"
)
# Source code that merely names an error (a grep hit on ``raise OSError(...)``, a line of a listing,
# a test asserting an exception) is not an error that happened: quoting it as one would spend the
# summary's room on noise and mislead the agent. Such lines start with a line number (grep -n,
# cat -n, nl, sed -n with numbers), a code keyword, a decorator or comment, or pytest's ``>`` marker.
_NUMBERED = re.compile(r"^(?:[\w./-]+[:-])?\d+(?:[:-]\s|\t|\s{2,})")
_REPORT_START = re.compile(
    r"(?:E\s+)?(?:[\w.]+\.)?[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)\b:|(?i:error|fatal|panic|warning|failed)\b"
)
_CODE_LINE = re.compile(
    r"^(?:>|#|//|@|raise\b|except\b|assert\b|def\b|class\b|import\b|from\s+\S+\s+import\b|return\b|"
    r"if\b|elif\b|try\b|with\b|throw\b|catch\b|const\b|let\b|var\b|new\s)"
    r"|assertRaises|pytest\.raises|\braise\s+[A-Z]|\bexcept\s+\(?[A-Z]"
)
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b")
_TRACEBACK_HEAD = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
# What a command does to the path right after these words (checked on the 60 characters before it).
_CREATE = re.compile(
    r"(?:\b(?:touch|mkdir|create|new_file|write_file|create_file)\b[^|;&\n]*|(?<![<>&\d])>\s*)$", re.I
)
_MODIFY = re.compile(
    r"(?:\b(?:sed\s+-i|str_replace|edit|insert|patch|apply|append|write|replace)\w*\b[^|;&\n]*|>>\s*)$", re.I
)
_DELETE = re.compile(r"\b(?:rm|unlink|delete|remove)\b[^|;&\n]*$", re.I)
_IN_PLACE = re.compile(r"\b(?:sed|perl)\s+(?:-[a-zA-Z]+\s+)*-[a-zA-Z]*i")
_COMMAND_START = re.compile(r"[|;&]|\\n")
_EDIT_TOOL = re.compile(r"edit|write|patch|replace|insert|create", re.I)
# The argument that says what a tool call does, in the order looked for.
_ARG_KEYS = (
    "command",
    "cmd",
    "code",
    "query",
    "path",
    "file",
    "filename",
    "file_path",
    "url",
    "pattern",
    "q",
)

_Op = Literal["read", "modified", "created", "deleted"]
_OP_RANK: dict[str, int] = {"deleted": 0, "created": 1, "modified": 2, "read": 3}


def _estimate(text: str) -> int:
    # Conservative without a tokenizer: about 3 UTF-8 bytes per token overcounts
    # English (~4 characters a token) and Chinese (~0.7 tokens a character) alike,
    # so the summary stays within its budget by any real count.
    return (len(text.encode("utf-8")) + 2) // 3


# How much an identifier matters to an agent carrying on, best first: what the user wrote, what the
# agent's tool calls acted on (files, URLs, ids it passed), the errors it met, what it wrote in its own
# words, and last what tool output merely listed. A summary with little room keeps the first kinds.
_USER, _TARGET, _ERROR_NAME, _AGENT, _OUTPUT = range(5)
_Rank = tuple[int, int, int]
"""(tier, -times seen, -recency): sorts best first."""


@dataclass
class _State:
    """What a summary holds, before it is fitted to a budget."""

    goal: str | None = None
    requests: list[str] = field(default_factory=list)
    errors: dict[str, None] = field(default_factory=dict)
    files: dict[str, set[str]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    notable: set[int] = field(default_factory=set)
    """Indices of the actions that failed: what an agent should not blindly repeat."""
    ids: dict[str, _Rank] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """agentcontext's own notes (an elision note, an earlier summary's ``note:`` items): kept if room is left."""
    prior: list[tuple[str, str]] = field(default_factory=list)
    """(section, text) of another writer's earlier summary (an LLM's), in its order: distilled
    knowledge that exists nowhere else in the context, so it ranks right after the user's words."""
    last: str | None = None

    def add_ids(self, text: str, *, tier: int, when: int) -> None:
        for ident in extract_identifiers(text):
            if tier > _ERROR_NAME and classify_identifier(ident) == "error":
                tier_here = _ERROR_NAME
            else:
                tier_here = tier
            old = self.ids.get(ident)
            if old is None:
                self.ids[ident] = (tier_here, -1, -when)
            else:
                self.ids[ident] = (min(old[0], tier_here), old[1] - 1, min(old[2], -when))

    def add_file(self, path: str, op: str) -> None:
        self.files.setdefault(path, set()).add(op)

    def add_action(self, text: str, *, notable: bool) -> None:
        if notable:
            self.notable.add(len(self.actions))
        self.actions.append(text)

    def absorb_paths(self) -> None:
        """Fold a path into the one longer path that contains it (``x.py`` into ``/repo/src/x.py``).

        Tool output and commands name the same file in several forms (bare, relative,
        absolute). Listing each spends the summary's room on one file; the longest form
        is the most precise and contains the others word for word. A short form that
        more than one longer path could complete stays as it is: it is ambiguous.
        """
        paths = [i for i in {*self.ids, *self.files} if "://" not in i and classify_identifier(i) == "path"]
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
                self._fold(short, longer[0])

    def _fold(self, short: str, into: str) -> None:
        rank = self.ids.pop(short, None)
        if rank is not None:
            old = self.ids.get(into)
            self.ids[into] = (
                rank if old is None else (min(old[0], rank[0]), old[1] + rank[1], min(old[2], rank[2]))
            )
        ops = self.files.pop(short, None)
        if ops is not None:
            self.files.setdefault(into, set()).update(ops)


def _completes(longer: str, short: str) -> bool:
    """True when ``short`` is a tail of the path ``longer`` (at a ``/`` boundary)."""
    if longer == short or short.startswith("./"):
        return False  # ``./x.py`` is not a literal part of ``/repo/x.py``: it stays apart
    return longer.endswith("/" + short) or (short.startswith("/") and longer.endswith(short))


def parse_snapshot(text: str) -> dict[str, list[str]] | None:
    """The sections of a summary `ExtractiveSummarizer` wrote (English or Chinese tags), else None.

    Each section maps to its items (``- `` lines, continuation lines joined);
    the goal section maps to one item, its whole text.
    """
    sections: dict[str, list[str]] = {}
    for tag, key in _SECTION_OF_TAG.items():
        if key == "state_snapshot" or key in sections:
            continue
        m = re.search(f"<{re.escape(tag)}>\n?(.*?)\n?</{re.escape(tag)}>", text, re.S)
        if m is None:
            continue
        body = m.group(1)
        if key == "overall_goal":
            sections[key] = [body.strip()] if body.strip() else []
            continue
        items: list[str] = []
        for line in body.split("\n"):
            if line.startswith("- "):
                items.append(line[2:])
            elif line.startswith("  ") and items:
                items[-1] += "\n" + line[2:]
            elif line.strip():
                items.append(line.strip())
        sections[key] = items
    return sections or None


def _split_label(item: str) -> tuple[str | None, str]:
    head, sep, rest = item.partition(": ")
    if sep and head in _LABEL_KEY:
        return _LABEL_KEY[head], rest
    return None, item


@dataclass(frozen=True, kw_only=True)
class ExtractiveSummarizer:
    """An offline, deterministic summarizer: no model, no I/O, the same output for the same input.

    The default when no LLM summarizer is configured. Its summary uses the
    ``state_snapshot`` sections (goal, user requirements, key knowledge,
    artifact trail, file-system state, recent actions, task state), with
    headings in the conversation's main language (a Chinese conversation gets
    Chinese headings). What does not fit the budget is chosen by priority: the
    goal and the last step first, then the user's requests, an earlier summary
    another writer (an LLM) wrote (up to half the room), the commands that
    failed with their error, other errors, the files changed and read, a
    compact index of the identifiers met, then the other commands. The index
    lists each identifier once, not repeating what the sections show, the
    longest form of a path standing for its shorter forms, ranked by what the
    user wrote, what the agent's tool calls acted on, errors, the agent's own
    words, and last what tool output listed. Identifiers of an earlier summary
    keep their rank, so re-summarizing does not push out what the task touched.

    Args:
        counter: counts tokens to fit the budget; None uses a conservative
            estimate (about three UTF-8 bytes a token), which leaves the summary
            smaller than it could be. The engine passes its own counter.
        max_tokens: the budget when the request gives none. Default 2,000.
        goal_tokens: the user's first request is quoted up to this many tokens
            (head and tail kept beyond). Default 400.
        request_tokens: each later request is quoted up to this many. Default 150.
        state_tokens: the last assistant message, up to this many. Default 200.
        language: ``"auto"`` (default) detects it from the user's and assistant's text.
    """

    counter: TokenCounter | None = field(default=None, repr=False, compare=False)
    max_tokens: int = 2000
    goal_tokens: int = 400
    request_tokens: int = 150
    state_tokens: int = 200
    language: Literal["auto", "en", "zh"] = "auto"

    def __post_init__(self) -> None:
        for name in ("max_tokens", "goal_tokens", "request_tokens", "state_tokens"):
            value = getattr(self, name)
            if value < 16:
                raise ConfigError(f"ExtractiveSummarizer.{name} must be at least 16, got {value}")
        if self.language not in ("auto", "en", "zh"):
            raise ConfigError(
                f"ExtractiveSummarizer.language must be 'auto', 'en' or 'zh', got {self.language!r}"
            )

    # ------------------------------------------------------------------ the Summarizer protocol

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request``, within ``request.max_tokens`` (or ``max_tokens``)."""
        lang = self._language(request)
        state = self._collect(request, lang)
        budget = request.max_tokens if request.max_tokens is not None else self.max_tokens
        return self._render(state, lang, max(budget, 1))

    async def asummarize(self, request: SummaryRequest) -> str:
        """Same as `summarize` (no I/O to wait for)."""
        return self.summarize(request)

    # ------------------------------------------------------------------ collecting

    def _count(self, text: str) -> int:
        return self.counter.count_text(text) if self.counter is not None else _estimate(text)

    def _language(self, request: SummaryRequest) -> Language:
        if self.language != "auto":
            return self.language
        if any(
            m.role in ("user", "assistant") and summary_kind(m) is None and m.text.strip()
            for m in request.messages
        ):
            return detect_language(request.messages)
        # Only tool output and summaries: keep the language of the summaries.
        earlier = (request.previous_summary or "") + "".join(
            m.text for m in request.messages if summary_kind(m) == "summary"
        )
        return "zh" if _ZH_TAGS.search(earlier) else "en"

    def _collect(self, request: SummaryRequest, lang: Language) -> _State:
        state = _State()
        if request.previous_summary:
            self._merge_summary(state, request.previous_summary, when=0)
        messages = request.messages
        calls = tool_call_index(messages)
        results: dict[str, Message] = {}
        for m in messages:
            if m.role == "tool" and m.tool_call_id is not None:
                results.setdefault(m.tool_call_id, m)
        for i, m in enumerate(messages, start=1):
            kind = summary_kind(m)
            if kind == "summary":
                self._merge_summary(state, m.text, when=i)
            elif kind == "elision":
                state.notes.append(m.text)
            elif kind != "summary_ack":
                self._add_message(state, m, i, calls, results, lang)
        return state

    def _add_message(
        self,
        state: _State,
        m: Message,
        i: int,
        calls: dict[str, tuple[int, ToolCall]],
        results: dict[str, Message],
        lang: Language,
    ) -> None:
        text = m.text
        if summary_kind(m) == "verbatim":
            # Kept word for word next to the summary: point to it, do not repeat it.
            if state.goal is None and m.role == "user":
                state.goal = _LABELS[lang]["goal_kept"]
            return
        if m.role in ("user", "system"):
            if m.role == "user" and state.goal is None:
                state.goal = text
            else:
                state.requests.append(text)
            state.add_ids(text, tier=_USER, when=i)
        elif m.role == "assistant":
            if text.strip():
                state.last = text
                state.add_ids(text, tier=_AGENT, when=i)
            for call in m.tool_calls:
                self._add_call(state, call.name, call.arguments, results.get(call.id), when=i, lang=lang)
        else:
            state.add_ids(text, tier=_OUTPUT, when=i)
            for line in _error_lines(text):
                state.errors.pop(line, None)
                state.errors[line] = None  # newest last
            if m.tool_call_id not in calls:
                state.add_action(f"{tool_name_for(m, calls)} → {_outcome(text, lang)}", notable=_failed(text))

    def _add_call(
        self, state: _State, name: str, arguments: str, result: Message | None, *, when: int, lang: Language
    ) -> None:
        brief = _brief_arguments(arguments)
        state.add_ids(arguments, tier=_TARGET, when=when)
        command = f"{name} {arguments}"
        for ident in extract_identifiers(arguments):
            if "://" not in ident and ("/" in ident or "." in ident) and ident[0] not in "0123456789$#":
                state.add_file(ident, _file_op(command, ident))
        outcome = _outcome(result.text, lang) if result is not None else None
        notable = result is not None and _failed(result.text)
        state.add_action(f"{name}: {brief}" + (f" → {outcome}" if outcome else ""), notable=notable)

    def _merge_summary(self, state: _State, text: str, *, when: int) -> None:
        """Fold an earlier summary in: its items return to their sections, its identifiers keep their tier.

        An identifier keeps the importance it had (a file the agent changed stays a
        file it changed), so re-summarizing does not slowly demote what the task
        touched below what the newest tool output listed. Prose is not repeated:
        items are re-chosen by the same priorities as new ones.
        """
        sections = parse_snapshot(text)
        if sections is None:
            state.prior.append(("key_knowledge", text.strip()))
            state.add_ids(text, tier=_AGENT, when=when)
            return
        goal = sections.get("overall_goal")
        if goal and state.goal is None:
            state.goal = goal[0]
            state.add_ids(goal[0], tier=_USER, when=when)
        for item in sections.get("active_constraints", []):
            state.requests.append(item)
            state.add_ids(item, tier=_USER, when=when)
        for item in sections.get("key_knowledge", []):
            self._merge_knowledge(state, item, when=when)
        for key in ("artifact_trail", "file_system_state"):
            for item in sections.get(key, []):
                label, rest = _split_label(item)
                if label in ("read", "modified", "created", "deleted"):
                    for path in rest.split(", "):
                        if path:
                            state.add_file(path, label)
                            state.add_ids(path, tier=_TARGET, when=when)
                else:
                    self._keep_other(state, key, label, rest)
                    state.add_ids(rest, tier=_AGENT, when=when)
        for item in sections.get("recent_actions", []):
            command, _, outcome = item.partition(" → ")
            state.add_action(item, notable=_failed(outcome))
            state.add_ids(command, tier=_TARGET, when=when)
            state.add_ids(outcome, tier=_OUTPUT, when=when)
        for item in sections.get("task_state", []):
            label, rest = _split_label(item)
            if label == "last":
                if state.last is None:
                    state.last = rest
            else:
                self._keep_other(state, "task_state", label, rest)
            state.add_ids(rest, tier=_AGENT, when=when)

    def _merge_knowledge(self, state: _State, item: str, *, when: int) -> None:
        label, rest = _split_label(item)
        if label == "error":
            state.errors.setdefault(rest, None)
            state.add_ids(rest, tier=_ERROR_NAME, when=when)
        elif label == "ids":
            # The index was written best first: equal ranks keep that order (the sort is stable).
            for ident in rest.split(", "):
                if ident:
                    old = state.ids.get(ident)
                    rank = (_AGENT, -1, -when)
                    state.ids[ident] = rank if old is None else min(old, rank)
        else:
            self._keep_other(state, "key_knowledge", label, rest)
            state.add_ids(rest, tier=_AGENT, when=when)

    @staticmethod
    def _keep_other(state: _State, section: str, label: str | None, text: str) -> None:
        """An item that is not one of ours: a note we wrote, or another writer's words (kept in place)."""
        if label == "note":
            state.notes.append(text)
        else:
            state.prior.append((section, text))

    # ------------------------------------------------------------------ fitting and rendering

    def _render(self, state: _State, lang: Language, budget: int) -> str:
        state.absorb_paths()
        p = _Packer(self, state, lang, budget)
        labels = p.labels
        # 1. The goal and the last step: what the task is and where it stands.
        if state.goal:
            p.take("overall_goal", self._shorten(state.goal, min(self.goal_tokens, max(budget // 4, 16))), 0)
        # Quotes scale with the budget, so a small summary still has room for the identifiers.
        quote = max(budget // 8, 24)
        if state.last:
            last = self._shorten(state.last, min(self.state_tokens, quote))
            p.take("task_state", f"{labels['last']}: {last}", 1)
        # 2-5. Requests, an earlier writer's summary, failed commands, errors, the files the task
        # touched: newest first, each within its share, so that no one kind crowds out the others.
        p.fill_requests(p.used + int(budget * 0.2))
        # An earlier summary by another writer (an LLM): its prose is the only record of what it
        # covered, so it keeps up to half the room, cut in the middle when longer.
        p.fill_prior(p.used + budget // 2)
        # Commands that failed, with their error: what the agent should not blindly repeat. An
        # error shown with its command is not listed again among the errors.
        p.fill_actions(p.used + int(budget * 0.1), notable_only=True)
        p.fill_errors(p.used + int(budget * 0.1))
        p.fill_files(p.used + int(budget * 0.2))
        # 6. The identifier index: each identifier not shown yet, once, best first (what the user
        # wrote, what the agent's calls acted on, errors, ...). At a few tokens an entry it is the
        # densest record of what the agent may need verbatim; it does not repeat what is shown above.
        p.fill_ids()
        # 7. Whatever room is left: more of everything, in the same order, then the other commands
        # (the newest steps are kept verbatim after the summary anyway).
        p.fill_requests(budget)
        p.fill_errors(budget)
        p.fill_files(budget)
        p.fill_actions(budget)
        for n, note in enumerate(state.notes):
            p.take("key_knowledge", f"{labels['note']}: " + self._shorten(note, 200), 10_000 + n)
        return p.fit()

    def _shorten(self, text: str, max_tokens: int) -> str:
        """``text`` cut in the middle to about ``max_tokens`` tokens (head 60%, tail 40%), at word boundaries."""
        text = text.strip()
        tokens = self._count(text)
        if tokens <= max_tokens:
            return text
        keep = int(len(text) * max_tokens / tokens)
        short = text
        for _ in range(6):
            head = _word_end(text, int(keep * 0.6))
            tail = _word_start(text, len(text) - (keep - int(keep * 0.6)))
            # The marker carries no number: a count would read as an identifier ("1,579 chars").
            short = f"{text[:head].rstrip()} […] {text[tail:].lstrip()}"
            if self._count(short) <= max_tokens or keep <= 8:
                return short
            keep = int(keep * 0.8)
        return short


class _Packer:
    """Chooses what goes into a summary, by priority, until the token budget is spent."""

    def __init__(self, owner: ExtractiveSummarizer, state: _State, lang: Language, budget: int) -> None:
        self.owner = owner
        self.state = state
        self.tags = _TAGS[lang]
        self.labels = _LABELS[lang]
        self.budget = budget
        self.chosen: dict[str, list[tuple[int, str]]] = {s: [] for s in SECTIONS}
        self.lines: set[str] = set()
        self.files: dict[str, list[str]] = {"read": [], "modified": [], "created": [], "deleted": []}
        self.ids: list[str] = []
        # Everything taken, in the order taken (best first), with its estimated cost: when the
        # exact count of the whole is over the budget, the last (least important) go first.
        self.taken: list[tuple[list[str] | list[tuple[int, str]], int]] = []
        frame = f"<{self.tags['state_snapshot']}>\n</{self.tags['state_snapshot']}>"
        self.used = owner._count(frame)
        self.section_cost = {s: owner._count(f"<{self.tags[s]}>\n</{self.tags[s]}>\n") for s in SECTIONS}
        self.opened: set[str] = set()

    def _open_cost(self, section: str) -> int:
        return self.section_cost[section] if section not in self.opened else 0

    def take(self, section: str, text: str, order: int) -> bool:
        """Add one item to ``section`` if it fits (and is not there already)."""
        line = text if section == "overall_goal" else "- " + text.replace("\n", "\n  ")
        if line in self.lines:
            return True
        cost = self.owner._count(line + "\n") + self._open_cost(section)
        if self.used + cost > self.budget:
            return False
        self.used += cost
        self.opened.add(section)
        self.lines.add(line)
        self.chosen[section].append((order, line))
        self.taken.append((self.chosen[section], cost))
        return True

    def take_listed(self, section: str, bucket: list[str], item: str) -> bool:
        """Add one entry to a comma-separated list line of ``section``."""
        cost = self.owner._count((", " if bucket else "- x: ") + item) + self._open_cost(section)
        if self.used + cost > self.budget:
            return False
        self.used += cost
        self.opened.add(section)
        bucket.append(item)
        self.taken.append((bucket, cost))
        return True

    def fill_requests(self, limit: int) -> None:
        requests = self.state.requests
        for order in range(len(requests) - 1, -1, -1):
            if self.used >= limit:
                break
            quote = min(self.owner.request_tokens, max(self.budget // 8, 24))
            self.take("active_constraints", self.owner._shorten(requests[order], quote), order)

    def fill_prior(self, limit: int) -> None:
        for order, (section, text) in enumerate(self.state.prior):
            room = limit - self.used - self._open_cost(section) - 4
            if room < 8:
                break
            self.take(section, self.owner._shorten(text, room), 5_000 + order)

    def fill_errors(self, limit: int) -> None:
        errors = list(self.state.errors)
        actions = self.chosen["recent_actions"]
        for order in range(len(errors) - 1, -1, -1):
            if self.used >= limit:
                break
            if any(errors[order] in line for _, line in actions):
                continue  # already shown with the command that raised it
            self.take("key_knowledge", f"{self.labels['error']}: {errors[order]}", order)

    def fill_files(self, limit: int) -> None:
        # Changed files first (deleted, created, modified), then those read; within each,
        # the ones the summary's identifiers rank highest (seen most, most recently).
        ids = self.state.ids
        worst: _Rank = (_OUTPUT + 1, 0, 0)

        def key(kv: tuple[str, set[str]]) -> tuple[int, _Rank]:
            return min(_OP_RANK[o] for o in kv[1]), ids.get(kv[0], worst)

        for path, ops in sorted(self.state.files.items(), key=key):
            if self.used >= limit:
                break
            op = min(ops, key=lambda o: _OP_RANK[o])
            bucket = self.files[op]
            if path not in bucket:
                self.take_listed("artifact_trail" if op == "read" else "file_system_state", bucket, path)

    def fill_actions(self, limit: int, *, notable_only: bool = False) -> None:
        actions = self.state.actions
        # A command line is worth a few tokens, not a tenth of a small summary.
        quote = min(60, max(self.budget // 10, 20))
        for order in range(len(actions) - 1, -1, -1):
            if self.used >= limit:
                break
            if notable_only and order not in self.state.notable:
                continue
            self.take("recent_actions", self.owner._shorten(actions[order], quote), order)

    def fill_ids(self) -> None:
        shown = "\n".join(self.lines) + "\n" + "\n".join(p for b in self.files.values() for p in b)
        taken: set[str] = set(self.ids)
        for ident, _ in sorted(self.state.ids.items(), key=lambda kv: kv[1]):
            if ident in taken or ident in shown:
                continue
            if self.take_listed("key_knowledge", self.ids, ident):
                taken.add(ident)

    def assemble(self) -> str:
        tags, labels = self.tags, self.labels
        body: dict[str, list[str]] = {s: [line for _, line in sorted(self.chosen[s])] for s in SECTIONS}
        if self.ids:
            body["key_knowledge"].append(f"- {labels['ids']}: " + ", ".join(self.ids))
        if self.files["read"]:
            body["artifact_trail"].insert(0, f"- {labels['read']}: " + ", ".join(self.files["read"]))
        for op in ("deleted", "created", "modified"):
            if self.files[op]:
                body["file_system_state"].insert(0, f"- {labels[op]}: " + ", ".join(self.files[op]))
        out = [f"<{tags['state_snapshot']}>"]
        for s in SECTIONS:
            if body[s]:
                out.extend((f"<{tags[s]}>", *body[s], f"</{tags[s]}>"))
        out.append(f"</{tags['state_snapshot']}>")
        return "\n".join(out)

    def fit(self) -> str:
        """The summary text; per-item counts only approximate the whole, so trim until it really fits.

        The overshoot is a few tokens of joins between items: drop the least
        important items taken until their estimated cost covers it, then count again.
        """
        text = self.assemble()
        over = self.owner._count(text) - self.budget
        while over > 0 and self.taken:
            freed = 0
            while freed < over and self.taken:
                holder, cost = self.taken.pop()
                item = holder.pop()
                if isinstance(item, tuple):
                    self.lines.discard(item[1])
                freed += cost
            text = self.assemble()
            over = self.owner._count(text) - self.budget
        return text


def _file_op(command: str, path: str) -> _Op:
    """What a tool call did to ``path``, judged from the words before each mention (and the tool's name).

    The strongest effect of any mention counts: ``sed -n 1p x.py && sed -i ... x.py`` modified x.py.
    """
    name, _, arguments = command.partition(" ")
    best: _Op = "read"
    at = arguments.find(path)
    while at >= 0:
        op = _op_before(arguments[:at])
        if _OP_RANK[op] < _OP_RANK[best]:
            best = op
        at = arguments.find(path, at + len(path))
    if best == "read" and _EDIT_TOOL.search(name) and '"view"' not in arguments:
        return "modified"
    return best


def _op_before(text: str) -> _Op:
    # Only the command the mention belongs to counts: it starts after a pipe, ``;``, ``&`` or a new
    # line (escaped in the JSON arguments), so ``sed -i ... a.py\ncat b.py`` does not modify b.py.
    segment = _COMMAND_START.split(text[-600:])[-1]
    before = segment[-60:]
    if _DELETE.search(before):
        return "deleted"
    if _CREATE.search(before):
        return "created"
    # An in-place edit's expression can be longer than the 60 characters looked at otherwise.
    if _MODIFY.search(before) or _IN_PLACE.search(segment):
        return "modified"
    return "read"


def _error_lines(text: str) -> Iterable[str]:
    seen = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _TRACEBACK_HEAD.match(line) or not _ERROR_LINE.search(line):
            continue
        if line.startswith(("File ", "at ")):  # stack frames: the error line after them says more
            continue
        if not _is_error_report(line):
            continue
        yield _cut(line, 160)
        seen += 1
        if seen >= 3:  # the first few error lines of one output say what went wrong
            return


def _is_error_report(line: str) -> bool:
    """False for a line of source code that only names an error (see `_CODE_LINE`)."""
    numbered = _NUMBERED.match(line)
    if numbered:
        # A numbered line is a listing or a grep hit; keep it only when the rest reads as a
        # report (``src/app.py:12: error: ...`` from a linter, a log line), not as code.
        return _REPORT_START.match(line[numbered.end() :].lstrip()) is not None
    return _CODE_LINE.search(line) is None


def _brief_arguments(arguments: str, limit: int = 160) -> str:
    try:
        parsed: JSONValue = json.loads(arguments)
    except ValueError:
        parsed = arguments
    if isinstance(parsed, dict):
        for key in _ARG_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value:
                value = _without_heredoc_body(value)
                rest = {k: v for k, v in parsed.items() if k != key}
                text = value if not rest else f"{value} {json.dumps(rest, ensure_ascii=False)}"
                return _cut(text.replace("\n", " ⏎ "), limit)
        return _cut(json.dumps(parsed, ensure_ascii=False), limit)
    return _cut(str(parsed).replace("\n", " ⏎ "), limit)


_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


def _without_heredoc_body(command: str) -> str:
    """``command`` without the body of a here-document: file content, not the command, and the
    file it writes is listed among the files already."""
    m = _HEREDOC.search(command)
    if m is None:
        return command
    line_end = command.find("\n", m.end())
    if line_end == -1:
        return command
    end = re.search(rf"^\s*{re.escape(m.group(1))}\s*$", command[line_end:], re.M)
    after = command[line_end + end.end() :].strip() if end else ""
    return command[:line_end].rstrip() + " …" + (f" ⏎ {after}" if after else "")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: _word_end(text, limit - 1)].rstrip() + "…"


def _word_end(text: str, at: int) -> int:
    """``at``, moved back to the end of a word when it falls inside one (so no identifier is cut)."""
    if at <= 0 or at >= len(text) or text[at].isspace() or text[at - 1].isspace():
        return max(at, 0)
    space = max(text.rfind(" ", 0, at), text.rfind("\n", 0, at))
    return space if space > at - 80 and space > 0 else at


def _word_start(text: str, at: int) -> int:
    """``at``, moved on to the start of a word when it falls inside one."""
    if at <= 0 or at >= len(text) or text[at - 1].isspace():
        return min(max(at, 0), len(text))
    candidates = [i for i in (text.find(" ", at), text.find("\n", at)) if i != -1]
    nxt = min(candidates) if candidates else -1
    return nxt + 1 if nxt != -1 and nxt < at + 80 else at


def _failed(text: str) -> bool:
    """True when a command's output reports a failure: a non-zero exit code or an error line."""
    m = _EXIT.search(text)
    if m is not None:
        code = next(g for g in m.groups() if g is not None)
        if code != "0":
            return True
    return next(iter(_error_lines(text)), None) is not None


def _outcome(text: str, lang: Language) -> str:
    labels = _LABELS[lang]
    exit_code = None
    m = _EXIT.search(text)
    if m:
        exit_code = next(g for g in m.groups() if g is not None)
    errors = list(_error_lines(text))
    # An exception line says more than a generic "FAILED" or "error:" line.
    named = [e for e in errors if _EXCEPTION.search(e)]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("<")]
    parts: list[str] = []
    if exit_code is not None:
        parts.append(f"{labels['exit']} {exit_code}")
    if errors:
        parts.append(_cut((named or errors)[-1], 160))
    elif lines:
        parts.append(_cut(lines[0], 100))
    elif not text.strip():
        parts.append("(empty)")
    return "; ".join(parts) if parts else labels["no_result"]
