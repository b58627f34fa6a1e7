"""`ExtractiveSummarizer`: an offline, deterministic summary in the ``state_snapshot`` sections.

Seed 000's "simple summary" kept message counts and nothing else. This one
keeps what an agent needs to carry on, copied from the messages rather than
paraphrased: the user's goal and requests verbatim (shortened when huge), the
files read and changed (from tool-call arguments), the commands run with their
outcome (exit code, error line), the errors seen, the identifiers met (paths,
URLs, ids, numbers with units, error names), and the last state. It fits
whatever token budget it is given, choosing by priority, and integrates a
previous summary it wrote (or any other, kept as a note) instead of starting over.
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
from ._identifiers import extract_identifiers
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
_EDIT_TOOL = re.compile(r"edit|write|patch|replace|insert|create", re.I)
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


@dataclass
class _State:
    """What a summary holds, before it is fitted to a budget."""

    goal: str | None = None
    requests: list[str] = field(default_factory=list)
    errors: dict[str, None] = field(default_factory=dict)
    files: dict[str, set[str]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    ids: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """id -> (source rank: 0 user, 1 agent, 2 tool output; -count; -recency)."""
    notes: list[str] = field(default_factory=list)
    last: str | None = None

    def add_ids(self, text: str, *, source: int, when: int) -> None:
        for ident in extract_identifiers(text):
            old = self.ids.get(ident)
            if old is None:
                self.ids[ident] = (source, -1, -when)
            else:
                self.ids[ident] = (min(old[0], source), old[1] - 1, min(old[2], -when))

    def add_file(self, path: str, op: str) -> None:
        self.files.setdefault(path, set()).add(op)


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
    goal, the current request and the last step first, then the user's
    requests, errors, changed files, recent commands, and the identifiers met.

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
            state.add_ids(text, source=0, when=i)
        elif m.role == "assistant":
            if text.strip():
                state.last = text
                state.add_ids(text, source=1, when=i)
            for call in m.tool_calls:
                self._add_call(state, call.name, call.arguments, results.get(call.id), when=i, lang=lang)
        else:
            state.add_ids(text, source=2, when=i)
            for line in _error_lines(text):
                state.errors.pop(line, None)
                state.errors[line] = None  # newest last
            if m.tool_call_id not in calls:
                state.actions.append(f"{tool_name_for(m, calls)} → {_outcome(text, lang)}")

    def _add_call(
        self, state: _State, name: str, arguments: str, result: Message | None, *, when: int, lang: Language
    ) -> None:
        brief = _brief_arguments(arguments)
        state.add_ids(arguments, source=1, when=when)
        command = f"{name} {arguments}"
        for ident in extract_identifiers(arguments):
            if "://" not in ident and ("/" in ident or "." in ident) and ident[0] not in "0123456789$#":
                state.add_file(ident, _file_op(command, ident))
        outcome = _outcome(result.text, lang) if result is not None else None
        state.actions.append(f"{name}: {brief}" + (f" → {outcome}" if outcome else ""))

    def _merge_summary(self, state: _State, text: str, *, when: int) -> None:
        sections = parse_snapshot(text)
        if sections is None:
            state.notes.append(text.strip())
            state.add_ids(text, source=1, when=when)
            return
        goal = sections.get("overall_goal")
        if goal and state.goal is None:
            state.goal = goal[0]
        state.requests.extend(sections.get("active_constraints", []))
        for item in sections.get("key_knowledge", []):
            label, rest = _split_label(item)
            if label == "error":
                state.errors.setdefault(rest, None)
            elif label == "ids":
                for ident in rest.split(", "):
                    if ident:
                        state.ids.setdefault(ident, (1, -1, -when))
            else:
                state.notes.append(rest)
        for key in ("artifact_trail", "file_system_state"):
            for item in sections.get(key, []):
                label, rest = _split_label(item)
                if label in ("read", "modified", "created", "deleted"):
                    for path in rest.split(", "):
                        if path:
                            state.add_file(path, label)
                else:
                    state.notes.append(rest)
        state.actions.extend(sections.get("recent_actions", []))
        for item in sections.get("task_state", []):
            label, rest = _split_label(item)
            if label == "last" and state.last is None:
                state.last = rest
        state.add_ids(text, source=1, when=when)

    # ------------------------------------------------------------------ fitting and rendering

    def _render(self, state: _State, lang: Language, budget: int) -> str:
        p = _Packer(self, state, lang, budget)
        labels = p.labels
        # 1. The goal, the current request and the last step.
        if state.goal:
            p.take("overall_goal", self._shorten(state.goal, min(self.goal_tokens, max(budget // 4, 16))), 0)
        # Quotes scale with the budget, so a small summary still has room for the identifiers.
        quote = max(budget // 8, 24)
        if state.last:
            last = self._shorten(state.last, min(self.state_tokens, quote))
            p.take("task_state", f"{labels['last']}: {last}", 1)
        # 2-4. Requests, errors, changed files: newest first, each within its share.
        p.fill_requests(p.used + int(budget * 0.2))
        p.fill_errors(p.used + int(budget * 0.15))
        p.fill_files(p.used + int(budget * 0.2))
        # 5. Identifiers not already shown, most telling first: compact, and what a later step
        # most often needs verbatim.
        p.fill_ids()
        # 6. Recent actions, newest first.
        p.fill_actions(p.used + int(budget * 0.25))
        # 7. Whatever room is left: more of everything, in the same order.
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
        return True

    def take_listed(self, section: str, bucket: list[str], item: str) -> bool:
        """Add one entry to a comma-separated list line of ``section``."""
        cost = self.owner._count((", " if bucket else "- x: ") + item) + self._open_cost(section)
        if self.used + cost > self.budget:
            return False
        self.used += cost
        self.opened.add(section)
        bucket.append(item)
        return True

    def fill_requests(self, limit: int) -> None:
        requests = self.state.requests
        for order in range(len(requests) - 1, -1, -1):
            if self.used >= limit:
                break
            quote = min(self.owner.request_tokens, max(self.budget // 8, 24))
            self.take("active_constraints", self.owner._shorten(requests[order], quote), order)

    def fill_errors(self, limit: int) -> None:
        errors = list(self.state.errors)
        for order in range(len(errors) - 1, -1, -1):
            if self.used >= limit:
                break
            self.take("key_knowledge", f"{self.labels['error']}: {errors[order]}", order)

    def fill_files(self, limit: int) -> None:
        ranked = sorted(self.state.files.items(), key=lambda kv: min(_OP_RANK[o] for o in kv[1]))
        for path, ops in ranked:
            if self.used >= limit:
                break
            op = min(ops, key=lambda o: _OP_RANK[o])
            bucket = self.files[op]
            if path not in bucket:
                self.take_listed("artifact_trail" if op == "read" else "file_system_state", bucket, path)

    def fill_actions(self, limit: int) -> None:
        actions = self.state.actions
        for order in range(len(actions) - 1, -1, -1):
            if self.used >= limit:
                break
            self.take("recent_actions", self.owner._shorten(actions[order], 60), order)

    def fill_ids(self) -> None:
        shown = "\n".join(self.lines) + "\n" + "\n".join(p for b in self.files.values() for p in b)
        taken = set(self.ids)
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

    def _drop_one(self) -> bool:
        if self.ids:
            del self.ids[max(len(self.ids) // 2, len(self.ids) - 8) :]
            return True
        for s in ("recent_actions", "key_knowledge", "artifact_trail", "active_constraints", "task_state"):
            if self.chosen[s]:
                self.chosen[s].pop()
                return True
        for bucket in self.files.values():
            if bucket:
                bucket.pop()
                return True
        return False

    def fit(self) -> str:
        """The summary text; per-item counts only approximate the whole, so trim until it really fits."""
        text = self.assemble()
        while self.owner._count(text) > self.budget and self._drop_one():
            text = self.assemble()
        return text


def _file_op(command: str, path: str) -> _Op:
    """What a tool call did to ``path``, judged from the words just before it (and the tool's name)."""
    name, _, arguments = command.partition(" ")
    at = arguments.find(path)
    before = arguments[max(at - 60, 0) : at] if at >= 0 else ""
    if _DELETE.search(before):
        return "deleted"
    if _CREATE.search(before):
        return "created"
    if _MODIFY.search(before) or (_EDIT_TOOL.search(name) and '"view"' not in arguments):
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
        yield _cut(line, 200)
        seen += 1
        if seen >= 3:  # the first few error lines of one output say what went wrong
            return


def _brief_arguments(arguments: str, limit: int = 160) -> str:
    try:
        parsed: JSONValue = json.loads(arguments)
    except ValueError:
        parsed = arguments
    if isinstance(parsed, dict):
        for key in _ARG_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value:
                rest = {k: v for k, v in parsed.items() if k != key}
                text = value if not rest else f"{value} {json.dumps(rest, ensure_ascii=False)}"
                return _cut(text.replace("\n", " ⏎ "), limit)
        return _cut(json.dumps(parsed, ensure_ascii=False), limit)
    return _cut(str(parsed).replace("\n", " ⏎ "), limit)


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
