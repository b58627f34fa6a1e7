"""What a tool call did and how it ended, read from its name, its arguments and its result.

The extractive summarizer records an agent's steps from these: the files a call read, created,
modified or deleted (from shell commands and edit tools), the external records a call changed
(``update_...``, ``cancel_...`` tools), the plan a to-do tool set, how a command ended (exit code, the error that happened,
a test run's counts), and a short form of its arguments.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Literal

from ..messages import JSONValue
from ._snapshot import LABELS
from ._transcript import Language

__all__ = [
    "OP_RANK",
    "Op",
    "brief_arguments",
    "cut",
    "edited_file",
    "error_lines",
    "failed",
    "file_op",
    "is_change",
    "is_plan_tool",
    "is_verdict",
    "plan_of",
    "outcome",
    "test_summary",
    "word_end",
    "word_start",
]

Op = Literal["read", "modified", "created", "deleted"]
OP_RANK: dict[str, int] = {"deleted": 0, "created": 1, "modified": 2, "read": 3}

_WRAPPING_TAGS = re.compile(r"^(?:<[\w-]+>\s*)+|(?:</[\w-]+>\s*)+$")  # on a stripped line
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
# grep -n's hit without a space after the line number (``525:class X(Error):``, ``a.py:12:raise X``).
_GREP_HIT = re.compile(r"^(?:[\w./-]+:)?\d+[:-](?=\S)")
_REPORT_START = re.compile(
    r"(?:E\s+)?(?:[\w.]+\.)?[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)\b:|(?i:error|fatal|panic|warning|failed)\b"
)
_CODE_LINE = re.compile(
    r"^(?:>|#|//|@|raise\b|except\b|assert\b|def\b|class\b|import\b|from\s+\S+\s+import\b|return\b|"
    r"if\b|elif\b|try\b|with\b|throw\b|catch\b|const\b|let\b|var\b|new\s)"
    r"|assertRaises|pytest\.raises|\braise\s+[A-Z]|\bexcept\s+\(?[A-Z]"
)
# A line that is only names and commas (``HttpRequest, QueryDict, UnreadablePostError,``): a list in
# source code (``__all__``, an import) or a listing, which names errors without reporting one.
_NAME_LIST = re.compile(r"""^(?:['"]?[\w.]+['"]?\s*,\s*)+(?:['"]?[\w.]+['"]?)?$""")
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b")
_TRACEBACK_HEAD = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
# A test run's result line: pytest's closing counts, unittest's "Ran N tests" and its verdict,
# the counts other runners print (jest, cargo, go).
_PYTEST_SUMMARY = re.compile(
    r"^=+ ((?:\d+ \w+(?:, )?)+)(?: in [\d.]+s)?(?: \([^)]*\))? =+$|^=+ (no tests ran)(?: in [\d.]+s)? =+$",
    re.M,
)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests?\b", re.M)
_UNITTEST_VERDICT = re.compile(r"^(OK(?: \([^)]*\))?|FAILED \([^)]*\))\s*$", re.M)
_TEST_COMMAND = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|runtests|manage\.py test|npm (?:run )?test|yarn test|pnpm test|"
    r"go test|cargo test|make (?:test|check)|mvn test|gradle test|jest|vitest|mocha|phpunit|rspec|ctest)\b"
)
_VERDICT_LINE = re.compile(r"^=+ .* =+$|^FAILED \(|^Ran \d+ tests?")
_COUNTS = re.compile(r"\b\d+ (?:passed|failed)\b[^\n]*")
_TIMING = re.compile(r",?\s*(?:in|finished in|Time:)\s*[\d.]+\s*m?s\b.*$")
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
_QUOTED = re.compile(r"'[^'\n]*'|\\\"(?:[^\\\n]|\\(?!\"))*?\\\"")
"""A quoted word of a shell command, as it stands in JSON arguments (single quotes, or escaped doubles)."""
_EDIT_TOOL = re.compile(r"edit|write|patch|replace|insert|create", re.I)
# An editor command that names no file acts on the open one, which its result names.
_EDIT_COMMAND = re.compile(r"^\s*(?:edit|insert|append|str_replace|replace)\b(?![./\w])")
_RESULT_PATH = re.compile(r"(?:^|[\s\[(:'\"])((?:/|\.{1,2}/)?[\w.@+-]+(?:/[\w.@+-]+)*\.[A-Za-z0-9]{1,8})\b")
# A tool whose name says it changes a record (a booking, a ticket, a row), not a file.
_CHANGE_TOOL = re.compile(
    r"^(?:update|cancel|book|create|delete|remove|modify|change|set|add|send|transfer|post|put|patch|reserve|"
    r"refund|exchange|return|submit|approve|close|assign|insert|upsert|merge|deploy)(?:_|[A-Z]|$)",
    re.I,
)
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
    "input",
)
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


def file_op(command: str, path: str, *, target: str | None = None) -> Op:
    """What a tool call did to ``path``, judged from the words before each mention (and the tool's name).

    ``command`` is the tool's name, a space, and its arguments. The strongest effect of any
    mention counts: ``sed -n 1p x.py && sed -i ... x.py`` modified x.py. ``target``: the file an
    edit tool's arguments name as the one it acts on (``path``, ``file_path``...): another file its
    content merely mentions was not changed by it.
    """
    name, _, arguments = command.partition(" ")
    best: Op = "read"
    at = arguments.find(path)
    while at >= 0:
        op = _op_before(arguments[:at])
        if OP_RANK[op] < OP_RANK[best]:
            best = op
        at = arguments.find(path, at + len(path))
    if (
        best == "read"
        and _EDIT_TOOL.search(name)
        and '"view"' not in arguments
        and (target is None or path == target or target.endswith("/" + path) or path.endswith("/" + target))
    ):
        return "modified"
    return best


def _op_before(text: str) -> Op:
    # Only the command the mention belongs to counts: it starts after a pipe, ``;``, ``&`` or a new
    # line (escaped in the JSON arguments), so ``sed -i ... a.py\ncat b.py`` does not modify b.py.
    # Quoted words are a command's data, not its verb: ``grep -n 'def remove' cart.py`` reads cart.py.
    segment = _QUOTED.sub(" ", _COMMAND_START.split(text[-600:])[-1])
    before = segment[-60:]
    if _DELETE.search(before):
        return "deleted"
    if _CREATE.search(before):
        return "created"
    # An in-place edit's expression can be longer than the 60 characters looked at otherwise.
    if _MODIFY.search(before) or _IN_PLACE.search(segment):
        return "modified"
    return "read"


def edited_file(command: str, result: str) -> str | None:
    """The file an editor command that names none (``edit 5:7``, ``insert 3``) changed: the one its
    result names first (``[File: /repo/x.py (90 lines total)]``), else None."""
    if not _EDIT_COMMAND.match(command):
        return None
    head = "\n".join(result.splitlines()[:3])
    m = _RESULT_PATH.search(head)
    return m.group(1) if m else None


def is_change(name: str, arguments: JSONValue) -> bool:
    """True for a call of a tool that changes a record (``update_reservation``, ``cancelOrder``), not a file."""
    return (
        isinstance(arguments, dict)
        and _CHANGE_TOOL.match(name) is not None
        and not any(
            key in arguments for key in ("command", "cmd", "code", "path", "file", "file_path", "filename")
        )
    )


def error_lines(text: str, limit: int = 3) -> list[str]:
    """The lines of ``text`` that report an error: the first and the last ones, at most ``limit``.

    A traceback's final line (the exception raised) is the last; the first says where a long
    output started to go wrong. Stack frames and source code naming an error are not reports.
    """
    found = _error_report_lines(text)
    if len(found) > limit:
        found = found[:1] + found[len(found) - limit + 1 :]
    return list(dict.fromkeys(found))


@functools.lru_cache(maxsize=1024)
def _error_report_lines(text: str) -> tuple[str, ...]:
    # Cached: a tool output is read for its errors, its outcome and whether it failed.
    if _ERROR_LINE.search(text) is None:
        return ()
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _TRACEBACK_HEAD.match(line) or not _ERROR_LINE.search(line):
            continue
        if line.startswith(("File ", "at ")):  # stack frames: the error line after them says more
            continue
        if not _is_error_report(line):
            continue
        found.append(cut(line, 160))
    return tuple(found)


def _is_error_report(line: str) -> bool:
    """False for a line of source code that only names an error (see `_CODE_LINE`)."""
    numbered = _NUMBERED.match(line)
    if numbered:
        # A numbered line is a listing or a grep hit; keep it only when the rest reads as a
        # report (``src/app.py:12: error: ...`` from a linter, a log line), not as code.
        return _REPORT_START.match(line[numbered.end() :].lstrip()) is not None
    if line.startswith("+") and not line.startswith("+++"):
        return False  # a line a diff adds: a file's content, not a report
    grep = _GREP_HIT.match(line)
    code = line[grep.end() :] if grep else line
    return _CODE_LINE.search(code) is None and _NAME_LIST.match(code) is None


def test_summary(text: str, *, command: str = "") -> str | None:
    """A test run's result (``2 failed, 10 passed``, ``Ran 5 tests; FAILED (errors=1)``), timings left out.

    pytest's and unittest's closing lines are recognized in any output; other runners' counts
    (``3 passed``) only when ``command`` runs tests, since other output can say "2 failed" too.
    """
    pytest_lines = list(_PYTEST_SUMMARY.finditer(text))
    if pytest_lines:
        m = pytest_lines[-1]
        return (m.group(1) or m.group(2)).rstrip(", ")
    ran = list(_UNITTEST_RAN.finditer(text))
    if ran:
        verdicts = list(_UNITTEST_VERDICT.finditer(text))
        head = ran[-1].group(0)
        return f"{head}; {verdicts[-1].group(1)}" if verdicts else head
    counts = list(_COUNTS.finditer(text)) if _TEST_COMMAND.search(command) else []
    if counts:
        return _TIMING.sub("", counts[-1].group(0)).strip() or None
    return None


def is_verdict(line: str) -> bool:
    """True for a test run's closing line (``==== 1 failed, 2 passed in 0.3s ====``, ``FAILED (errors=1)``):
    the run's counts say it, so it is not listed as an error of its own."""
    return _VERDICT_LINE.match(line) is not None


def failed(text: str, *, command: str = "") -> bool:
    """True when a command's output reports a failure: a non-zero exit code, or an error line.

    After an exit code of 0 (a pipe's last command, ``pytest | tail``, exits 0 for the output it shows),
    a test run's counts say whether it failed when there are any (``command`` lets other runners' counts
    be read), and a traceback is a failure; else error lines are, unless the command only reads or searches
    (``cat errors.md``, ``grep -rn ValueError``): what it prints is what it found.
    """
    m = _EXIT.search(text)
    if m is None:
        return bool(error_lines(text, 1))
    if next(g for g in m.groups() if g is not None) != "0":
        return True
    tests = test_summary(text, command=command)
    if tests is not None:
        return _FAILING.search(tests) is not None
    if "Traceback (most recent call last)" in text:
        return True
    return _READING.match(_shell(command)) is None and bool(error_lines(text, 1))


def _shell(command: str) -> str:
    """The shell command a tool call ran (``bash {"command": "cat x"}`` → ``cat x``), else ``command``."""
    _, _, arguments = command.partition(" ")
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return command
    if isinstance(parsed, dict):
        parsed = parsed.get("command", parsed.get("cmd"))
    return parsed if isinstance(parsed, str) else command


_READING = re.compile(
    r"\s*(?:cd\s+\S+\s*&&\s*)?(?:cat|grep|egrep|fgrep|rg|ag|head|tail|less|more|find|ls|tree|wc|nl|awk|"
    r"sed\s+-n|git\s+(?:log|show|diff|grep|blame|status))\b"
)
"""A shell command that only reads or searches (what it prints is data, not its own error)."""


_FAILING = re.compile(r"\b(?:failed|failures?|errors?)\b", re.I)


def outcome(text: str, lang: Language, *, command: str = "") -> str:
    """How a command ended, in a few words: exit code, a test run's counts, the error (or the first line)."""
    labels = LABELS[lang]
    exit_code = None
    m = _EXIT.search(text)
    if m:
        exit_code = next(g for g in m.groups() if g is not None)
    errors = error_lines(text)
    # An exception line says more than a generic "FAILED" or "error:" line.
    named = [e for e in errors if _EXCEPTION.search(e)]
    parts: list[str] = []
    if exit_code is not None:
        parts.append(f"{labels['exit']} {exit_code}")
    tests = test_summary(text, command=command)
    if tests:
        parts.append(tests)
        # The run's own verdict line ("==== 1 failed ... ====", "FAILED (errors=1)") is said by the counts.
        errors = [e for e in errors if not is_verdict(e)]
        named = [e for e in errors if _EXCEPTION.search(e)]
    if errors:
        parts.append(cut((named or errors)[-1], 160))
    elif not tests:
        # The first line of the output itself; else the tool's status line, its tags taken off (Kimi
        # CLI's ``<system>File successfully edited.</system>``). Return codes and bare tags say nothing.
        lines = [ln.strip() for ln in text.splitlines() if not _EXIT.search(ln)]
        first = next((ln for ln in lines if ln and not ln.startswith("<")), None)
        if first is None:
            first = next((s for s in (_WRAPPING_TAGS.sub("", ln).strip() for ln in lines) if s), None)
        if first is not None:
            parts.append(cut(first, 100))
        elif not text.strip():
            parts.append("(empty)")
    return "; ".join(parts) if parts else labels["no_result"]


# A to-do list or plan, whatever the tool is called (Claude Code's TodoWrite, Codex's update_plan,
# Kimi CLI's SetTodoList...): under a key that names one, a list of items, each with a status from
# this vocabulary and a text. Records with a status under another key (``issues``, ``orders``) are
# changes to records, not a plan.
_PLAN_KEYS = frozenset({"todos", "todo", "todolist", "plan", "steps", "tasks", "checklist"})
_PLAN_STATUS = frozenset(
    {
        "pending",
        "in_progress",
        "in progress",
        "completed",
        "complete",
        "done",
        "todo",
        "to do",
        "not_started",
        "not started",
        "cancelled",
        "canceled",
        "blocked",
        "skipped",
        "failed",
    }
)
_PLAN_TEXT = ("content", "step", "title", "text", "task", "description", "name")
_PLAN_TOOL = re.compile(r"plan|todo", re.I)


def plan_of(arguments: JSONValue) -> list[str] | None:
    """The items a call that sets a plan or to-do list gives it (``[status] text`` each); None for any other call."""
    if not isinstance(arguments, dict):
        return None
    for key, value in arguments.items():
        if key.replace("_", "").lower() not in _PLAN_KEYS or not (isinstance(value, list) and value):
            continue
        items: list[str] = []
        for item in value:
            status = item.get("status", item.get("state")) if isinstance(item, dict) else None
            if not (isinstance(status, str) and status.strip().lower() in _PLAN_STATUS):
                break
            assert isinstance(item, dict)
            text = next((t for k in _PLAN_TEXT if isinstance(t := item.get(k), str) and t.strip()), None)
            if text is None:
                break
            items.append(f"[{status.strip()}] {text.strip()}")
        else:
            return items
    return None


def is_plan_tool(name: str) -> bool:
    """True for a tool whose name says it keeps the plan (``TodoWrite``, ``update_plan``): setting it changes no record."""
    return _PLAN_TOOL.search(name) is not None


def brief_arguments(arguments: str, limit: int = 160) -> str:
    """A tool call's arguments in short: its command (here-document bodies left out), or ``key=value`` pairs."""
    try:
        parsed: JSONValue = json.loads(arguments)
    except ValueError:
        parsed = arguments
    text = str(parsed)
    if isinstance(parsed, dict):
        text = _compact(parsed, top=True)
        for key in _ARG_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value:
                value = _without_heredoc_body(value)
                rest = {k: v for k, v in parsed.items() if k != key}
                text = value if not rest else f"{value} {_compact(rest, top=True)}"
                break
    return cut(text.replace("\n", " ⏎ "), limit)


def _compact(value: JSONValue, *, top: bool = False) -> str:
    """JSON without its quotes and spaces: ``reservation_id=ZFA04Y, flights=[{number=HAT1, date=...}]``."""
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={_compact(v)}" for k, v in value.items())
        return inner if top else "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    if isinstance(value, str):
        return cut(value, 200)
    return json.dumps(value)


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


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a word's end, marked with an ellipsis."""
    return text if len(text) <= limit else text[: word_end(text, limit - 1)].rstrip() + "…"


def word_end(text: str, at: int) -> int:
    """``at``, moved back to the end of a word when it falls inside one (so no identifier is cut)."""
    if at <= 0 or at >= len(text) or text[at].isspace() or text[at - 1].isspace():
        return max(at, 0)
    space = max(text.rfind(" ", 0, at), text.rfind("\n", 0, at))
    return space if space > at - 80 and space > 0 else at


def word_start(text: str, at: int) -> int:
    """``at``, moved on to the start of a word when it falls inside one."""
    if at <= 0 or at >= len(text) or text[at - 1].isspace():
        return min(max(at, 0), len(text))
    candidates = [i for i in (text.find(" ", at), text.find("\n", at)) if i != -1]
    nxt = min(candidates) if candidates else -1
    return nxt + 1 if nxt != -1 and nxt < at + 80 else at
