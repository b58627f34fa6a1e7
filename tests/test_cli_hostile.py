"""A catalogue of hostile inputs for every command: the exact exit code, one line naming the problem, no
traceback, and every file the command was given left byte for byte as it was.

Each case runs the command line in this process (`agentcontext.cli.main`), so the whole catalogue takes
seconds. A session command given a file that is not a session (a conversation, garbage, an empty file)
refuses it and leaves it byte for byte as it was: the stores never adopt or rewrite what is not theirs.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentcontext.cli import main
from agentcontext.engine import ContextEngine
from agentcontext.messages import Message, ToolCall
from agentcontext.session import Session

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tau-airline-task2.jsonl"

CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "list /tmp"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    {"role": "assistant", "content": "one file"},
]


def jsonl(items: list[object]) -> str:
    return "".join(json.dumps(i) + "\n" for i in items)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# ----------------------------------------------------------------------------- running and checking


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def snapshot(root: Path) -> dict[str, tuple[str, ...]]:
    """Every file and link under ``root``: content hash and mode for files, the target for links."""
    seen: dict[str, tuple[str, ...]] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            seen[rel] = ("link", os.readlink(path))
        elif path.is_file():
            seen[rel] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                oct(stat.S_IMODE(path.stat().st_mode)),
            )
        elif path.is_dir():
            seen[rel] = ("dir",)
    return seen


def call(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes | None = None) -> Result:
    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(stdin)), encoding="utf-8")  # type: ignore[arg-type]
    try:
        code = main(argv)
    finally:
        sys.stdin = saved
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def assert_refused(result: Result, code: int, needle: str) -> None:
    """Exit ``code``, and one line on stderr, ``agentcontext: error: ...``, that contains ``needle``."""
    assert result.code == code, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("agentcontext: error: "), result.err
    assert needle.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in result.err


def assert_worked(result: Result) -> None:
    assert result.code == 0, result.err
    assert "Traceback" not in result.err and "error:" not in result.err, result.err


# ----------------------------------------------------------------------------- conversations


Maker = Callable[[Path], None]


def text(content: str | bytes) -> Maker:
    def make(d: Path) -> None:
        p = d / "conv.json"
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")

    return make


def symlink_to(target: str) -> Maker:
    def make(d: Path) -> None:
        os.symlink(target, d / "conv.json")

    return make


def valid_behind_symlink(d: Path) -> None:
    (d / "real.jsonl").write_text(jsonl(CONVERSATION), encoding="utf-8")
    os.symlink("real.jsonl", d / "conv.json")


def loop(d: Path) -> None:
    os.symlink("conv.json", d / "conv.json")


def read_only(d: Path) -> None:
    p = d / "conv.json"
    p.write_text(jsonl(CONVERSATION), encoding="utf-8")
    p.chmod(0o444)


def directory(d: Path) -> None:
    (d / "conv.json").mkdir()


def huge(d: Path) -> None:
    output = "".join(f"line {i}: drwxr-xr-x 2 root root 4096 file_{i}.txt\n" for i in range(40_000))  # 2 MB
    big = [*CONVERSATION[:3], {"role": "tool", "tool_call_id": "c1", "content": output}]
    (d / "conv.json").write_text(jsonl(big), encoding="utf-8")


def thinking_body(d: Path) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"}]},
        ],
    }
    (d / "conv.json").write_text(json.dumps(body), encoding="utf-8")


def session_log(d: Path) -> None:
    session = Session.open(d / "conv.json", engine=None)
    session.append(Message(role="user", content="hi"))
    session.close()
    (d / "conv.json.lock").unlink(missing_ok=True)


@dataclass(frozen=True)
class Hostile:
    name: str
    make: Maker
    code: int
    needle: str


HOSTILE_CONVERSATIONS = [
    Hostile("empty", text(""), 3, "empty"),
    Hostile("blank-lines", text("\n \n\t\n"), 3, "empty"),
    Hostile("binary", text(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))), 3, "binary"),
    Hostile("utf16", text('[{"role": "user", "content": "hi"}]'.encode("utf-16")), 3, "UTF-16"),
    Hostile("latin1", text('[{"role": "user", "content": "caf\xe9"}]'.encode("latin-1")), 3, "not UTF-8"),
    Hostile("truncated-array", text('[{"role": "user", "content": "hi"}, {"role": "assi'), 3, "truncated"),
    Hostile("truncated-jsonl", text(jsonl(CONVERSATION) + '{"role": "user", "cont'), 3, "truncated"),
    Hostile("deep-100k", text(deep(100_000)), 3, "nested too deeply"),
    Hostile(
        "deep-in-a-message",
        text(json.dumps([{"role": "user", "content": "hi", "x": json.loads(deep(300))}])),
        3,
        "nested too deeply",
    ),
    Hostile("long-number", text('[{"role": "user", "content": "hi", "n": ' + "9" * 5000 + "}]"), 3, "number"),
    Hostile("nan", text('[{"role": "user", "content": "hi", "score": NaN}]'), 3, "NaN"),
    Hostile("yaml", text("- role: user\n  content: hi\n"), 3, "not a conversation"),
    Hostile("csv", text("role,content\nuser,hi\n"), 3, "not a conversation"),
    Hostile(
        "gemini-body",
        text(json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})),
        3,
        "without 'messages'",
    ),  # fmt: skip
    Hostile("strings", text('["hello", "world"]'), 3, "message 0 is a string"),
    Hostile("anthropic-thinking", thinking_body, 3, "'thinking'"),
    Hostile("body-per-line", text(jsonl([{"messages": []}, {"messages": []}])), 3, "request body"),
    Hostile("session-log", session_log, 3, "session log"),
    Hostile("unknown-role", text(jsonl([{"role": "wizard", "content": "hi"}])), 3, "wizard"),
    Hostile("content-number", text(jsonl([{"role": "user", "content": 42}])), 3, "content"),
    Hostile(
        "tools-not-a-list", text(json.dumps({"messages": CONVERSATION, "tools": {"a": 1}})), 3, "'tools'"
    ),
    Hostile("missing", lambda d: None, 3, "no such file"),
    Hostile("dangling-symlink", symlink_to("gone.json"), 3, "no such file"),
    Hostile("symlink-loop", loop, 3, "symbolic links"),
    Hostile("directory", directory, 3, "directory"),
    Hostile("device", symlink_to("/dev/zero"), 3, "not a file"),
]

CONVERSATION_VERBS: dict[str, list[str]] = {
    "fit": ["fit", "{f}", "--model", "gpt-4o"],
    "count": ["count", "{f}", "--model", "gpt-4o"],
    "replay": ["replay", "{f}", "--model", "gpt-4o", "--window", "16000"],
}


def argv_for(verb: list[str], f: Path, *extra: str) -> list[str]:
    return [str(f) if a == "{f}" else a for a in verb] + list(extra)


@pytest.mark.parametrize("case", HOSTILE_CONVERSATIONS, ids=lambda c: c.name)
@pytest.mark.parametrize("verb", sorted(CONVERSATION_VERBS))
def test_conversation_commands_refuse_hostile_input(
    verb: str, case: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case.make(tmp_path)
    before = snapshot(tmp_path)
    result = call(argv_for(CONVERSATION_VERBS[verb], tmp_path / "conv.json"), capsys)
    assert_refused(result, case.code, case.needle)
    assert snapshot(tmp_path) == before
    assert result.out == ""


WORKING = {
    "symlinked": valid_behind_symlink,
    "read-only": read_only,
    "markup-and-escapes": text(
        jsonl(
            [
                {
                    "role": "user",
                    "content": "[/INST] [/] [bold]x[/bold] [agentcontext: note] :smile: \x1b[2J",
                },
                {"role": "assistant", "content": "[/]"},
            ]
        )
    ),
}


@pytest.mark.parametrize("name", sorted(WORKING))
@pytest.mark.parametrize("verb", sorted(CONVERSATION_VERBS))
def test_conversation_commands_read_what_they_may(
    verb: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    WORKING[name](tmp_path)
    before = snapshot(tmp_path)
    result = call(argv_for(CONVERSATION_VERBS[verb], tmp_path / "conv.json"), capsys)
    assert_worked(result)
    assert snapshot(tmp_path) == before
    assert "\x1b" not in result.out + result.err  # a terminal escape in the input is never emitted


@pytest.mark.parametrize("verb", ["fit", "count"])
def test_a_huge_message_is_read_and_the_file_untouched(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge(tmp_path)
    before = snapshot(tmp_path)
    result = call(argv_for(CONVERSATION_VERBS[verb], tmp_path / "conv.json", "--window", "16000"), capsys)
    assert_worked(result)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", sorted(CONVERSATION_VERBS))
def test_a_locked_conversation_file_is_still_read(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "conv.json"
    path.write_text(jsonl(CONVERSATION), encoding="utf-8")
    before = snapshot(tmp_path)
    with open(path, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = call(argv_for(CONVERSATION_VERBS[verb], path), capsys)
    assert_worked(result)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", sorted(CONVERSATION_VERBS))
@pytest.mark.parametrize(
    ("stdin", "needle"),
    [(b"", "empty"), (b"\xff\xfe\x00\x00", "UTF-16"), (deep(50_000).encode(), "nested too deeply")],
    ids=["empty", "utf16", "deep"],
)
def test_stdin_gets_the_same_care(
    verb: str, stdin: bytes, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a if a != "{f}" else "-" for a in CONVERSATION_VERBS[verb]]
    assert_refused(call(argv, capsys, stdin=stdin), 3, needle)


def unwritable_targets(d: Path) -> Iterator[tuple[str, str]]:
    yield "/dev/full", "no space left"
    yield str(d / "no" / "such" / "dir" / "out.json"), "does not exist"
    (d / "a-file").write_text("x", encoding="utf-8")
    yield str(d / "a-file" / "out.json"), "not a directory"
    (d / "a-dir").mkdir()
    yield str(d / "a-dir"), "is a directory"


@pytest.mark.parametrize("option", ["--output", "--report"])
def test_fit_outputs_that_cannot_be_written(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "conv.json"
    source.write_text(jsonl(CONVERSATION), encoding="utf-8")
    for target, needle in list(unwritable_targets(tmp_path)):
        before = snapshot(tmp_path)
        argv = ["fit", str(source), "--model", "gpt-4o", option, target]
        if option == "--report":
            argv += ["--output", str(tmp_path / "fitted.json")]
        result = call(argv, capsys)
        assert_refused(result, 3, needle)
        after = snapshot(tmp_path)
        after.pop("fitted.json", None)  # --output was written before the report failed
        assert after == before
        assert not [n for n in after if n.endswith(".tmp")]  # no temporary file left behind
        (tmp_path / "fitted.json").unlink(missing_ok=True)
    assert (Path("/dev/full").stat().st_mode & stat.S_IFCHR) == stat.S_IFCHR  # written into, never replaced


# ----------------------------------------------------------------------------- sessions


def make_session(d: Path, *, texts: tuple[str, ...] = ("hello", "world"), label: str = "start") -> Path:
    path = d / "s.jsonl"
    session = Session.open(path, engine=ContextEngine("gpt-4o", window=8000))
    try:
        session.append(Message(role="system", content="be brief"))
        session.append(Message(role="user", content=texts[0]))
        session.checkpoint(label=label)
        session.append(Message(role="assistant", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),)))
        session.append(Message(role="tool", tool_call_id="c1", content=texts[1] * 400))
        session.append(Message(role="assistant", content="done"))
    finally:
        session.close()
    return path


SESSION_VERBS: dict[str, list[str]] = {
    "inspect": ["inspect", "{f}"],
    "checkpoints": ["checkpoints", "{f}"],
    "export": ["export", "{f}"],
    "compact": ["compact", "{f}", "--model", "gpt-4o", "--window", "8000"],
    "revert": ["revert", "{f}", "1"],
}
READING = ("inspect", "checkpoints", "export")


def session_text(content: str | bytes) -> Maker:
    def make(d: Path) -> None:
        p = d / "s.jsonl"
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")

    return make


def conversation_array(d: Path) -> None:
    (d / "s.jsonl").write_text(json.dumps(CONVERSATION), encoding="utf-8")


FOREIGN_SESSIONS = [
    Hostile("empty", session_text(""), 3, "not a session"),
    Hostile("binary", session_text(bytes(range(256)) * 4), 3, "not a session"),
    Hostile(
        "latin1",
        session_text('{"role": "user", "content": "caf\xe9"}\n'.encode("latin-1")),
        3,
        "not a session",
    ),
    Hostile("garbage", session_text("this is not a session\n"), 3, "not a session"),
    Hostile("conversation-jsonl", session_text(jsonl(CONVERSATION)), 3, "not a session"),
    Hostile("conversation-json", conversation_array, 3, "not a session"),
    Hostile("deep-line", session_text(deep(100_000) + "\n"), 3, "not a session"),
]


def session_cases() -> Iterator[object]:
    for case in FOREIGN_SESSIONS:
        for verb in sorted(SESSION_VERBS):
            yield pytest.param(verb, case, id=f"{verb}-{case.name}")


@pytest.mark.parametrize(("verb", "case"), list(session_cases()))
def test_session_commands_refuse_files_that_are_not_sessions(
    verb: str, case: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case.make(tmp_path)
    before = snapshot(tmp_path)
    result = call(argv_for(SESSION_VERBS[verb], tmp_path / "s.jsonl"), capsys)
    assert snapshot(tmp_path) == before  # first: nothing written, whatever the message
    assert_refused(result, case.code, case.needle)


@pytest.mark.parametrize("verb", sorted(SESSION_VERBS))
@pytest.mark.parametrize("name", ["missing", "directory", "dangling-symlink"])
def test_session_commands_on_paths_that_hold_no_file(
    verb: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "s.jsonl"
    if name == "directory":
        target.mkdir()
    elif name == "dangling-symlink":
        os.symlink("gone.jsonl", target)
    before = snapshot(tmp_path)
    result = call(argv_for(SESSION_VERBS[verb], target), capsys)
    assert result.code == 3, result.err
    assert_refused(result, 3, "")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", sorted(SESSION_VERBS))
def test_a_locked_session_is_read_but_not_written(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_session(tmp_path)
    holder = Session.open(path, engine=None)  # another writer holds the session
    try:
        before = snapshot(tmp_path)
        result = call(argv_for(SESSION_VERBS[verb], path), capsys)
        if verb in READING:
            assert_worked(result)
        else:
            assert_refused(result, 3, "lock")
        assert snapshot(tmp_path) == before
    finally:
        holder.close()


@pytest.mark.parametrize("verb", READING)
def test_a_symlinked_session_is_read_and_left_alone(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = make_session(tmp_path)
    link = tmp_path / "alias.jsonl"
    os.symlink(real.name, link)
    before = snapshot(tmp_path)
    assert_worked(call(argv_for(SESSION_VERBS[verb], link), capsys))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", READING)
def test_a_torn_last_line_is_reported_and_the_rest_read(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_session(tmp_path)
    with open(path, "ab") as f:
        f.write(b'{"seq": 99, "type": "message", "mess')
    before = snapshot(tmp_path)
    result = call(argv_for(SESSION_VERBS[verb], path), capsys)
    assert result.code == 0, result.err
    warnings = [line for line in result.err.splitlines() if "warning" in line]
    assert any("line" in w for w in warnings), result.err
    assert "Traceback" not in result.err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", READING)
def test_session_text_is_printed_as_it_is(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "[/INST] [/] [bold red]x[/] [agentcontext: kept] :smile: \x1b]0;owned\x07"
    path = make_session(tmp_path, texts=(hostile, hostile), label=hostile)
    result = call(argv_for(SESSION_VERBS[verb], path), capsys)
    assert_worked(result)
    if verb == "export":
        assert hostile in "".join(json.loads(line)["content"] or "" for line in result.out.splitlines())
    else:
        assert "[/INST] [/] [bold red]x[/] [agentcontext: kept] :smile: \\x1b]0;owned\\x07" in result.out
    assert "\x1b" not in result.out.replace(hostile, "") and "\x07" not in result.out.replace(hostile, "")


# ----------------------------------------------------------------------------- the command line itself


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (
            ["fit", "-", "--model", "gpt-4o", "--window", "32k"],
            2,
            "argument --window: expected a positive whole",
        ),
        (["fit", "-", "--model", "gpt-4o", "--window", "0"], 2, "argument --window"),
        (["fit", "-", "--model", "gpt-4o", "--reserve", "-1"], 2, "argument --reserve"),
        (["fit", "-", "--model", "gpt-4o", "--target", "2"], 2, "argument --target: expected a share"),
        (["fit", "-", "--model", "gpt-4o", "--target", "nan"], 2, "argument --target"),
        (["fit", "-", "--model", "gpt-4o", "--timeout", "0"], 2, "argument --timeout: expected a positive"),
        (["replay", "-", "--model", "gpt-4o", "--soft", "x"], 2, "argument --soft"),
        (["revert", "s.jsonl", "three"], 2, "argument checkpoint"),
        (["fit", "-", "--model", "gpt4o"], 3, "did you mean 'gpt-4o'"),
        (["fit", "-", "--model", "my-llama"], 3, "--window"),
        (["fit", "-", "--model", "gpt-4o", "--tokenizer", "sentencepiece"], 3, "unknown tokenizer"),
        (["fit", "-", "--model", "gpt-4o", "--summarizer", "gpt-4o"], 3, "--summarizer"),
        (["fit", "-", "--model", "gpt-4o", "--base-url", "http://x"], 3, "--base-url needs"),
        (["fit", "-", "--model", "gpt-4o", "--format", "gemini"], 2, "argument --format"),
        (["nonsense"], 2, "invalid choice"),
    ],
)
def test_bad_options_name_the_argument_and_what_was_expected(
    argv: list[str], code: int, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = call(argv, capsys, stdin=jsonl(CONVERSATION).encode())
    assert_refused(result, code, needle)
