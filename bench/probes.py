"""What an agent needs after compaction, asked as probe questions and answered by string match.

Two measures of a compacted context, both computed from the original conversation alone and
independent of the package's own identifier extractor (which the summarizer uses to choose what to
carry, so measuring with it would only measure recall of what it is built to keep):

- **Key identifiers** (`key_identifiers`, `retention`): the definition of the project's external
  retention check, copied here word for word: URLs, paths with an extension, bare file names,
  ``...Error`` / ``...Exception`` names, snake_case names, hex ids of 7-40 digits and numbers of
  4+ digits, taken from what the user and the agent said and did (user and assistant text, tool-call
  arguments); retention is the share of them found anywhere in the compacted context.
- **Probes** (`build_probes`, `answered`): questions an agent resuming the task must be able to
  answer, built from the conversation's own events, each answered when its needles appear in the
  compacted context (whitespace-normalized, literal):

  - ``modified``: each file a tool call changed (an edit tool's path; in shell commands ``sed -i``,
    redirections, ``tee``, ``touch``, ``rm``, ``mv``/``cp`` targets, editor commands such as
    ``create x.py``; an edit command that names no file acted on the file its result names), or
    for a non-file tool (a booking API), each id-like argument of a call whose name says it changes
    something (``update_``, ``cancel_``, ``book_``...). A path counts when written in full or by its
    last two components.
  - ``failed_command`` and ``failed_error``: the last tool call that failed (a non-zero exit code, or,
    where no exit code is reported, an error line: an exception, ``Error:``, ``fatal:``, ``command not
    found``, ``No such file or directory``): its command's head (the tool's name for a non-shell
    tool) and the head of its last error line.
  - ``test_result``: the outcome of the last test run (pytest's counts, unittest's "Ran N tests" and
    its FAILED line).
  - ``instruction``: every user message: the head of its first sentence and the tail of its last.

The compacted context's text is every message's text, each tool call's name and arguments, and the
arguments' string values decoded (so an answer is not missed for JSON escaping).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Probe",
    "answered",
    "build_probes",
    "context_text",
    "key_identifiers",
    "retention",
]

Msg = dict[str, Any]

# ----------------------------------------------------------------------------- key identifiers

ID_RE = re.compile(
    r"(?:https?://[^\s\"'<>)]+)"  # URLs
    r"|(?:[\w.-]*/[\w./-]*\.[A-Za-z]{1,5}\b)"  # paths with an extension
    r"|(?:\b[\w.]*\.(?:py|js|ts|go|rs|java|json|yaml|yml|toml|md|txt|cfg|ini|sh|c|h|cpp)\b)"  # bare file names
    r"|(?:\b[A-Z][A-Za-z]+(?:Error|Exception)\b)"  # error names
    r"|(?:\b[a-z_][a-z0-9]*_[a-z0-9_]+\b)"  # snake_case names
    r"|(?:\b[0-9a-f]{7,40}\b)"  # hex ids
    r"|(?:\b\d{4,}\b)"  # long numbers
)


def text_of(content: Any) -> str:
    """The text of an OpenAI message's content (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))


def _arguments(tc: Msg, written: bool) -> str:
    """A tool call's arguments: the raw JSON string, or (``written``) its string values JSON-unescaped."""
    args = (tc.get("function") or {}).get("arguments") or ""
    if not written:
        return args
    try:
        return "\n".join(_strings(json.loads(args)))
    except ValueError:
        return args


def key_identifiers(msgs: Sequence[Msg], *, written: bool = False) -> set[str]:
    """The external check's key identifiers of a conversation (user and assistant text, tool-call arguments).

    ``written``: the arguments are read as the agent wrote them, not as JSON escapes them, so that a name
    after an escaped new line (``\\nadd_node``) is ``add_node``, not ``nadd_node``; otherwise the same.
    """
    out: set[str] = set()
    for m in msgs:
        if m.get("role") not in ("user", "assistant"):
            continue
        text = text_of(m.get("content"))
        for tc in m.get("tool_calls") or []:
            text += "\n" + _arguments(tc, written)
        out.update(x for x in ID_RE.findall(text) if len(x) >= 4)
    return out


def raw_text(msgs: Sequence[Msg], *, written: bool = False) -> str:
    """Every message's text and every tool call's name and arguments, as the external check reads them."""
    parts = []
    for m in msgs:
        parts.append(text_of(m.get("content")))
        for tc in m.get("tool_calls") or []:
            f = tc.get("function") or {}
            parts.append((f.get("name") or "") + " " + _arguments(tc, written))
    return "\n".join(parts)


def retention(ids: Iterable[str], msgs: Sequence[Msg], *, written: bool = False) -> float:
    """The share of ``ids`` found in ``msgs`` (1.0 when there are none)."""
    ids = list(ids)
    if not ids:
        return 1.0
    text = raw_text(msgs, written=written)
    return sum(1 for x in ids if x in text) / len(ids)


# ----------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class Probe:
    """One question: answered when every group of needles has one needle in the context."""

    kind: str
    question: str
    needles: tuple[tuple[str, ...], ...]


_WS = re.compile(r"\s+")


def norm(text: str) -> str:
    """Whitespace runs as one space: a probe's answer may be reflowed, not reworded."""
    return _WS.sub(" ", text).strip()


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def context_text(msgs: Sequence[Msg]) -> str:
    """The normalized text probes are answered from: `raw_text` plus decoded tool-call arguments."""
    parts = [raw_text(msgs)]
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            args = (tc.get("function") or {}).get("arguments") or ""
            try:
                parts.extend(_strings(json.loads(args)))
            except ValueError:
                pass
    return norm("\n".join(parts))


def answered(probe: Probe, context: str) -> bool:
    """True when the normalized ``context`` holds one needle of each of the probe's groups."""
    return all(any(norm(n) in context for n in group) for group in probe.needles)


# What a command's outcome says.
_EXIT = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>|\bexit(?:ed)? (?:with )?(?:code|status)[:= ]+(-?\d+)|"
    r"\bExit code:?\s*(-?\d+)|\breturncode[=:]\s*(-?\d+)",
    re.I,
)
_ERROR = re.compile(
    r"^(?:E\s+)?(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b(?::|$)"
    r"|^(?:Error|ERROR|error|fatal|FATAL)\b:?"
    r"|command not found|No such file or directory"
)
_TEST_COMMAND = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|runtests\.py|manage\.py test|npm (?:run )?test|yarn test|"
    r"go test|cargo test|make test|mvn test|gradle test|jest|phpunit)\b"
)
_PYTEST_COUNTS = re.compile(
    r"\b\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected)"
    r"(?:, \d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected|warnings?))*"
)
_UNITTEST_RAN = re.compile(r"^Ran \d+ tests?\b", re.M)
_UNITTEST_FAILED = re.compile(r"^FAILED \([^)]*\)", re.M)
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_SEGMENT = re.compile(r"&&|\|\||[;|\n]")
_REDIRECT = re.compile(r"(?<![<>&\d])(?:>>?|&>)\s*([^\s;&|<>()]+)")
_MUTATING_TOOL = re.compile(
    r"^(?:update|cancel|book|create|delete|remove|modify|change|set|add|send|transfer|write|edit|"
    r"insert|append|replace|patch|move|rename|save|submit|post|put|reserve|refund|exchange|return)",
    re.I,
)
_FILE_TOOL = re.compile(r"edit|write|create|patch|replace|insert|append|delete|remove|move|rename|save", re.I)
_PATH_KEYS = ("path", "file", "file_path", "filepath", "filename", "target_file", "dest", "destination")
_COMMAND_KEYS = ("command", "cmd", "script", "code", "input")
_EDIT_WORDS = {"edit", "insert", "append", "str_replace", "replace"}
_PATHISH = re.compile(r"^[\w.~/@+-]*[\w-]\.[A-Za-z0-9]{1,8}$|^[\w.~@+-]*/[\w./@+-]*[\w-]$")
_RESULT_PATH = re.compile(r"(?:/|\b)[\w.@+-]+(?:/[\w.@+-]+)*\.[A-Za-z0-9]{1,8}\b")
_ID_VALUE = re.compile(r"^(?=\S*[0-9A-Z])[\w.:/-]+$")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*|\n+")


def _cut_head(text: str, limit: int) -> str:
    """The start of ``text``, at most ``limit`` characters, ending at a word boundary when one is near."""
    text = norm(text)
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit]


def _cut_tail(text: str, limit: int) -> str:
    text = norm(text)
    if len(text) <= limit:
        return text
    cut = text.find(" ", len(text) - limit)
    return text[cut + 1 if 0 <= cut < len(text) - limit // 2 else len(text) - limit :]


def _path_needles(path: str) -> tuple[str, ...]:
    path = path.strip("'\"")
    parts = [p for p in path.split("/") if p and p != "."]
    if len(parts) >= 2:
        return (path, "/".join(parts[-2:]))
    return (path,)


def _without_heredocs(command: str) -> str:
    out: list[str] = []
    lines = command.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = _HEREDOC.search(line)
        i += 1
        if m is not None:
            while i < len(lines) and lines[i].strip() != m.group(1):
                i += 1
            i += 1  # the terminator
    return "\n".join(out)


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, posix=True)
    except ValueError:
        return segment.split()


def _shell_modified(command: str, result: str) -> list[str]:
    """Files a shell command (or an editor command such as ``create x.py``) changed."""
    found: list[str] = []
    body = _without_heredocs(command)
    for m in _REDIRECT.finditer(body):
        target = m.group(1)
        if not target.startswith("/dev/") and _PATHISH.match(target):
            found.append(target)
    for segment in _SEGMENT.split(body):
        words = _words(segment.strip())
        if not words:
            continue
        verb, args = words[0], [w for w in words[1:] if not w.startswith("-")]
        flags = [w for w in words[1:] if w.startswith("-")]
        if verb in ("sed", "perl") and any("i" in f.lstrip("-") for f in flags) and args:
            found.append(args[-1])
        elif verb in ("touch", "rm", "create", "unlink") or (verb == "tee" and args):
            found.extend(args)
        elif verb in ("mv", "cp") and len(args) >= 2:
            found.extend(args[-1:] if verb == "cp" else args)
        elif verb in _EDIT_WORDS and not any(_PATHISH.match(a) for a in args):
            named = _RESULT_PATH.search(result)
            if named is not None:
                found.append(named.group(0))
    return [f for f in found if _PATHISH.match(f) and not f.startswith("/dev/")]


def _command_of(args: Any) -> str | None:
    if isinstance(args, dict):
        for key in _COMMAND_KEYS:
            if isinstance(args.get(key), str) and args[key].strip():
                return str(args[key])
        return None
    return args if isinstance(args, str) and args.strip() else None


def _modified(name: str, args: Any, result: str) -> list[tuple[str, tuple[str, ...]]]:
    """(what, needles) for everything a tool call changed."""
    out: list[tuple[str, tuple[str, ...]]] = []
    if isinstance(args, dict) and _FILE_TOOL.search(name) and args.get("command") != "view":
        for key in _PATH_KEYS:
            if isinstance(args.get(key), str) and args[key]:
                out.append((args[key], _path_needles(args[key])))
    command = _command_of(args)
    if command is not None and not out:
        for path in _shell_modified(command, result):
            out.append((path, _path_needles(path)))
    if not out and isinstance(args, dict) and _MUTATING_TOOL.match(name):
        for value in args.values():
            # An id names the record changed (a digit or upper-case letters in it); an enumerated
            # value (``economy``, ``round_trip``) is a detail of the change, not what changed.
            if isinstance(value, str) and 4 <= len(value) <= 64 and _ID_VALUE.match(value):
                out.append((f"{name} {value}", (value,)))
    return out


def _failure(result: str) -> str | None:
    """The error line of a failed call's result ("" when it failed without one), None when it did not fail."""
    m = _EXIT.search(result)
    code = next((g for g in m.groups() if g is not None), None) if m else None
    lines = [ln.strip() for ln in result.splitlines()]
    errors = [ln for ln in lines if ln and _ERROR.search(ln)]
    if code is not None:
        return None if code == "0" else (errors[-1] if errors else "")
    return errors[-1] if errors else None


def _test_outcome(result: str) -> tuple[tuple[str, ...], ...] | None:
    counts = list(_PYTEST_COUNTS.finditer(result))
    if counts:
        return ((counts[-1].group(0),),)
    ran = list(_UNITTEST_RAN.finditer(result))
    if ran:
        failed = list(_UNITTEST_FAILED.finditer(result))
        groups: list[tuple[str, ...]] = [(ran[-1].group(0),)]
        if failed:
            groups.append((failed[-1].group(0),))
        return tuple(groups)
    return None


def _sentences(text: str) -> list[str]:
    cjk = bool(_CJK.search(text))
    out = []
    for s in _SENTENCE_END.split(text):
        s = norm(s)
        if (cjk and len(_CJK.findall(s)) >= 4) or (not cjk and len(s.split()) >= 3):
            out.append(s)
    return out


def _instruction(text: str) -> tuple[tuple[str, ...], ...] | None:
    sentences = _sentences(text)
    if not sentences:
        return None
    limit = 30 if _CJK.search(text) else 60
    first, last = _cut_head(sentences[0], limit), _cut_tail(sentences[-1], limit)
    return ((first,), (last,)) if first != last else ((first,),)


def _fold_paths(modified: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """One probe per file: a short form (``x.py``) joins the one longer path that ends with it."""
    out = dict(modified)
    for short in sorted(modified, key=len):
        longer = [p for p in out if p != short and p.endswith("/" + short.removeprefix("./"))]
        if len(longer) == 1:
            out[longer[0]] = (*out[longer[0]], *out.pop(short))
    return out


def build_probes(msgs: Sequence[Msg]) -> list[Probe]:
    """The probe questions of a conversation (OpenAI-format dicts), from its own events."""
    results: dict[str, str] = {}
    for m in msgs:
        if m.get("role") == "tool" and m.get("tool_call_id") is not None:
            results.setdefault(m["tool_call_id"], text_of(m.get("content")))
    probes: list[Probe] = []
    modified: dict[str, tuple[str, ...]] = {}
    last_failure: tuple[str, str, str] | None = None
    last_test: tuple[str, tuple[tuple[str, ...], ...]] | None = None
    for m in msgs:
        role = m.get("role")
        if role == "user":
            needles = _instruction(text_of(m.get("content")))
            if needles is not None:
                probes.append(Probe("instruction", f"user: {needles[0][0]}", needles))
        if role != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            f = tc.get("function") or {}
            name, raw = f.get("name") or "", f.get("arguments") or ""
            try:
                args: Any = json.loads(raw)
            except ValueError:
                args = raw
            result = results.get(tc.get("id") or "", "")
            for what, needles in _modified(name, args, result):
                modified.setdefault(what, needles)
            command = _command_of(args)
            error = _failure(result) if tc.get("id") in results else None
            if error is not None:
                head = _cut_head(command.split("\n", 1)[0], 40) if command else name
                last_failure = (name, head, _cut_head(error, 50))
            if command is not None and _TEST_COMMAND.search(command):
                outcome = _test_outcome(result)
                if outcome is not None:
                    last_test = (_cut_head(command.split("\n", 1)[0], 40), outcome)
    for what, needles in _fold_paths(modified).items():
        probes.append(Probe("modified", f"was {what} modified?", (needles,)))
    if last_failure is not None:
        _, head, error = last_failure
        probes.append(Probe("failed_command", f"last failing command: {head}", ((head,),)))
        if error:
            probes.append(Probe("failed_error", f"its error: {error}", ((error,),)))
    if last_test is not None:
        probes.append(Probe("test_result", f"latest test result of {last_test[0]}", last_test[1]))
    return probes
