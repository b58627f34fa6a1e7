"""Trust (issue 14): a store writes only what is its own, locks what it writes, and reads a damaged log record
by record.

- Ownership: a conversation, an empty or foreign file, garbage, a Kimi CLI file not yet migrated is refused
  with `NotASessionError` by every way of opening it, and left byte for byte as it was (mode too), with no
  file made beside it. `agentcontext import` makes a session of a conversation; `agentcontext migrate`
  rewrites an older-schema log, keeping the original.
- Locks are on the file itself: a symbolic link, a hard link or a relative path to a session open for
  writing is refused, and nothing the first writer appends is lost.
- A symbolic link planted at any file a session makes beside itself (lock, torn, backup, temporary,
  artifacts) is never written through.
- Hand-edited logs: each bad record is reported by line and skipped on its own; the records after it load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcontext.cli import main
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import NotASessionError, SessionLockedError, StoreError, StorePathError
from agentcontext.messages import Message, ToolCall
from agentcontext.session import CorruptRecordWarning, JSONLStore, Session, UnknownRecordWarning
from agentcontext.testing import WordCounter

FIXTURES = Path(__file__).parent / "fixtures" / "sessions"

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


def _jsonl(items: list[object]) -> str:
    return "".join(json.dumps(i) + "\n" for i in items)


def _snapshot(root: Path) -> dict[str, tuple[str, ...]]:
    """Every entry under ``root``: content hash and mode for files, the target for links."""
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
        else:
            seen[rel] = ("dir",)
    return seen


def _engine() -> ContextEngine:
    return ContextEngine(window=2500, reserve=400, counter=WordCounter())


# ----------------------------------------------------------------------------- ownership

FOREIGN: dict[str, bytes] = {
    "empty": b"",
    "blank": b"\n\n",
    "garbage": b"this is not a session\n",
    "binary": bytes(range(256)) * 4,
    "conversation-json": json.dumps(CONVERSATION).encode(),
    "conversation-jsonl": _jsonl(CONVERSATION).encode(),  # also what a Kimi CLI context file looks like
    "deep-line": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "object-without-seq": b'{"type": "header", "schema_version": 1}\n',
}

OPENS: dict[str, Callable[[Path], object]] = {
    "Session.open": lambda p: Session.open(p),
    "Session.open(create=False)": lambda p: Session.open(p, create=False),
    "Session.open(engine)": lambda p: Session.open(p, engine=_engine()),
    "JSONLStore.open": lambda p: JSONLStore(p).open(create=True),
}


@pytest.mark.parametrize("how", sorted(OPENS))
@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_a_file_that_is_not_a_session_is_refused_and_left_untouched(
    how: str, name: str, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(FOREIGN[name])
    path.chmod(0o644)
    before = _snapshot(tmp_path)
    with pytest.raises(NotASessionError, match="not a session") as info:
        OPENS[how](path)
    assert "agentcontext import" in str(info.value)  # says how to make a session of it
    assert _snapshot(tmp_path) == before  # bytes and mode, and no lock file beside it


@pytest.mark.parametrize("name", ["empty", "garbage", "binary", "deep-line"])
def test_reading_refuses_it_too(name: str, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(FOREIGN[name])
    before = _snapshot(tmp_path)
    with pytest.raises(NotASessionError):
        Session.open(path, read_only=True)
    assert _snapshot(tmp_path) == before


def test_an_empty_file_a_writer_created_is_still_its_session(tmp_path: Path) -> None:
    # A writer killed between creating the file and writing its header leaves it empty, beside its lock.
    path = tmp_path / "s.jsonl"
    store = JSONLStore(path)
    store.open(create=True)
    store.close()
    assert path.read_bytes() == b"" and store.lock_path.exists()
    with Session.open(path) as s:
        s.append(Message(role="user", content="hi"))
    with Session.open(path, read_only=True) as again:
        assert [m.text for m in again.view] == ["hi"]


@pytest.mark.parametrize("name", ["empty", "text", "foreign-db"])
def test_sqlite_writes_only_its_own_databases(name: str, tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    if name == "empty":
        path.write_bytes(b"")
    elif name == "text":
        path.write_text("notes\n" * 100)
    else:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
            db.execute("INSERT INTO invoices (total) VALUES (9.5)")
        db.close()
    before = _snapshot(tmp_path)
    with pytest.raises(NotASessionError, match="left untouched"):
        Session.open(f"sqlite:///{path}?session=a")
    assert _snapshot(tmp_path) == before
    if name == "foreign-db":  # an explicit `db init` adds the tables; then it is a session database
        assert main(["db", "init", f"sqlite:///{path}"]) == 0
        with Session.open(f"sqlite:///{path}?session=a") as s:
            s.append(Message(role="user", content="hi"))
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT total FROM invoices").fetchall() == [(9.5,)]
        db.close()


def test_a_kimi_file_is_migrated_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = FIXTURES / "v0" / "kimi_context.jsonl"
    path = tmp_path / "context.jsonl"
    shutil.copy(original, path)
    path.chmod(0o640)
    before = _snapshot(tmp_path)
    for argv in (
        ["compact", str(path), "--model", "gpt-4o"],
        ["inspect", str(path)],
        ["revert", str(path), "0"],
    ):
        assert main(argv) == 3
        assert "agentcontext migrate" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before

    assert main(["migrate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "migrated from schema 0 to 1" in out
    backup = tmp_path / "context.bak-1.jsonl"
    assert backup.read_bytes() == original.read_bytes()
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640 and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert json.loads(path.read_text().splitlines()[0])["type"] == "header"
    assert main(["migrate", str(path)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["checkpoints", str(path)]) == 0


def _anthropic_body() -> dict[str, object]:
    return {
        "model": "claude-sonnet-4-5",
        "system": "be brief",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "list /tmp"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]},
            {"role": "assistant", "content": "one file"},
        ],
    }


def _responses_body() -> dict[str, object]:
    return {
        "model": "gpt-4o",
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": "list /tmp"},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"role": "assistant", "content": "one file"},
        ],
    }


IMPORTS: dict[str, tuple[str, Callable[[], str], list[str]]] = {
    "openai-array": ("conv.json", lambda: json.dumps(CONVERSATION), ["system", "user", "assistant", "tool", "assistant"]),
    "openai-jsonl": ("conv.jsonl", lambda: _jsonl(CONVERSATION), ["system", "user", "assistant", "tool", "assistant"]),
    "anthropic-body": ("body.json", lambda: json.dumps(_anthropic_body()), ["system", "user", "assistant", "tool", "assistant"]),
    "responses-body": ("body.json", lambda: json.dumps(_responses_body()), ["system", "user", "assistant", "tool", "assistant"]),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_import_makes_a_new_session_of_a_conversation(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    filename, content, roles = IMPORTS[name]
    source = tmp_path / filename
    source.write_text(content())
    target = tmp_path / "runs" / "s.jsonl"
    before = source.read_bytes()
    assert main(["import", str(source), str(target)]) == 0, capsys.readouterr().err
    assert "new session" in capsys.readouterr().out
    assert source.read_bytes() == before
    with Session.open(target, read_only=True) as s:
        assert [m.role for m in s.view] == roles
        assert s.view[1].text == "list /tmp" and s.view[-1].text == "one file"
    # The session works like any other, and import never writes over something that exists.
    assert main(["compact", str(target), "--model", "gpt-4o"]) == 0
    again = _snapshot(tmp_path)
    assert main(["import", str(source), str(target)]) == 3
    assert "already exists" in capsys.readouterr().err
    assert _snapshot(tmp_path) == again


def test_import_into_a_database_and_a_refused_conversation_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "conv.jsonl"
    source.write_text(_jsonl(CONVERSATION))
    url = f"sqlite:///{tmp_path / 'runs.db'}?session=t1"
    assert main(["import", str(source), url]) == 0
    with Session.open(url, read_only=True) as s:
        assert len(s.view) == 5
    assert main(["import", str(source), url]) == 3
    assert "already holds a session" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_jsonl([{"role": "wizard", "content": "hi"}]))
    before = _snapshot(tmp_path)
    assert main(["import", str(bad), str(tmp_path / "new.jsonl")]) == 3
    assert _snapshot(tmp_path) == before


# ----------------------------------------------------------------------------- locks on the file itself


def _alias(kind: str, tmp_path: Path, real: Path) -> Path:
    if kind == "symlink":
        alias = tmp_path / "alias.jsonl"
        os.symlink(os.path.relpath(real, tmp_path), alias)
        return alias
    if kind == "hardlink":
        alias = tmp_path / "other" / "hard.jsonl"
        alias.parent.mkdir()
        os.link(real, alias)
        return alias
    if kind == "symlinked-directory":
        os.symlink(real.parent.name, tmp_path / "dirlink")
        return tmp_path / "dirlink" / real.name
    return Path(os.path.relpath(tmp_path / "sub" / ".." / real.relative_to(tmp_path)))  # relative, with ..


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "symlinked-directory", "relative"])
def test_a_second_writer_through_another_name_is_refused_and_nothing_is_lost(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    real = sessions / "shared.jsonl"
    first = Session.open(real)
    first.append(Message(role="user", content="one"))
    alias = _alias(kind, tmp_path, real)
    with pytest.raises(SessionLockedError, match="open for writing"):
        Session.open(alias)
    first.append(Message(role="user", content="two"))
    first.close()
    with Session.open(alias) as second:  # once the first is closed, any name opens it
        second.append(Message(role="user", content="three"))
    with Session.open(real, read_only=True) as s:
        assert [m.text for m in s.view] == ["one", "two", "three"]
    if kind == "symlink":
        assert os.path.islink(alias)  # still the link: nothing replaced it


def test_lock_timeout_waits_for_the_holder(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "s.jsonl"
    holder = Session.open(path)
    opened: list[Session] = []
    started = threading.Event()

    def wait_for_it() -> None:
        started.set()
        opened.append(Session.open(path, lock_timeout=60))

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    started.wait()
    holder.append(Message(role="user", content="first"))
    holder.close()
    thread.join()
    second = opened[0]
    second.append(Message(role="user", content="second"))
    assert [m.text for m in second.view] == ["first", "second"]
    second.close()


# ----------------------------------------------------------------------------- side files never through links


def _torn_session(path: Path) -> None:
    with Session.open(path) as s:
        s.append(Message(role="user", content="hi"))
    with path.open("ab") as f:
        f.write(b'{"seq": 2, "type": "message", "mess')


SIDE_FILES: dict[str, tuple[str, Callable[[Path], object]]] = {
    "lock": ("s.jsonl.lock", lambda p: Session.open(p)),
    "torn": ("s.jsonl.torn", lambda p: Session.open(p).append(Message(role="user", content="more"))),
    "backup": ("s.bak-1.jsonl", lambda p: Session.open(p, migrate=True)),
    "temporary": (f".s.jsonl.tmp-{os.getpid()}", lambda p: Session.open(p, migrate=True)),
}


@pytest.mark.parametrize("name", sorted(SIDE_FILES))
def test_a_link_planted_at_a_side_file_is_never_written_through(name: str, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    if name == "torn":
        _torn_session(path)
    elif name in ("backup", "temporary"):
        shutil.copy(FIXTURES / "v0" / "kimi_context.jsonl", path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    side, action = SIDE_FILES[name]
    os.symlink(victim, tmp_path / side)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownRecordWarning)
        warnings.simplefilter("ignore", CorruptRecordWarning)
        try:
            result = action(path)
        except StoreError as exc:
            assert isinstance(exc, StorePathError), exc
            assert "link" in str(exc) and side in str(exc)
        else:
            if isinstance(result, Session):
                result.close()
    assert victim.read_text() == "precious\n"
    assert os.readlink(tmp_path / side) == str(victim)


def test_a_linked_artifacts_directory_is_never_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "s.artifacts")
    engine = ContextEngine(window=2000, reserve=200, counter=WordCounter())
    with Session.open(tmp_path / "s.jsonl", engine=engine) as s:
        s.append(Message(role="user", content="run it"))
        s.append(Message(role="assistant", tool_calls=(ToolCall(id="c1", name="run", arguments="{}"),)))
        s.append(Message(role="tool", tool_call_id="c1", content="output line\n" * 3000))
        with pytest.raises(StoreError, match="symbolic link"):
            s.prepare()  # the ingest truncation would offload the output there
    assert list(elsewhere.iterdir()) == []


# ----------------------------------------------------------------------------- damaged logs, record by record


def _log(tmp_path: Path) -> tuple[Path, list[dict[str, object]]]:
    path = tmp_path / "s.jsonl"
    with Session.open(path, engine=_engine()) as s:
        for i in range(4):
            s.append(Message(role="user", content=f"m{i}", id=f"m{i}"))
        s.checkpoint(label="four")
        for i in range(4, 8):
            s.append(Message(role="user", content=f"m{i}", id=f"m{i}"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return path, records


def _rewrite(path: Path, records: list[dict[str, object] | str]) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def _restore(path: Path) -> tuple[Session, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = Session.open(path, read_only=True)
    return s, " | ".join(str(w.message) for w in caught)


def test_a_seq_that_jumps_is_skipped_and_hides_nothing(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[3]["seq"] = 300  # hand-edited: the record of m2
    _rewrite(path, records)
    s, warned = _restore(path)
    assert "line 4 jumps from seq 2 to seq 300" in warned
    assert [m.text for m in s.view] == ["m0", "m1", "m3", "m4", "m5", "m6", "m7"]
    s.close()


def test_a_repeated_seq_is_skipped(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[4]["seq"] = 3
    _rewrite(path, records)
    s, warned = _restore(path)
    assert "line 5 (seq 3) repeats" in warned
    assert [m.text for m in s.view] == ["m0", "m1", "m2", "m4", "m5", "m6", "m7"]
    s.close()


@pytest.mark.parametrize("keep", [-1, 99])
def test_a_compaction_keeping_outside_the_view_is_skipped(keep: int, tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    n = len(records)
    records.append({"seq": n, "type": "compaction", "ts": None, "keep": keep, "view": ["m7"]})
    records.append({"seq": n + 1, "type": "message", "ts": None, "message": {"id": "m8", "role": "user", "content": "m8"}})  # fmt: skip
    _rewrite(path, records)
    s, warned = _restore(path)
    assert f"line {n + 1} (seq {n}, CompactionRecord) cannot be applied: it keeps {keep} messages" in warned
    assert [m.text for m in s.view][-2:] == ["m7", "m8"] and len(s.view) == 9
    s.close()


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        ({"type": "compaction", "keep": 0, "view": ["nope"]}, "names message 'nope'"),
        ({"type": "revert", "checkpoint": 7}, "no checkpoint 7"),
        ({"type": "dmail", "checkpoint": 7, "text": "go back"}, "checkpoint 7, which the log does not hold"),
        ({"type": "undo", "compaction": 3}, "compaction 3 is not the newest"),
        ({"type": "header", "schema_version": 1, "session_id": "other"}, "a header is only the first record"),
        ({"type": "usage", "prompt_tokens": -5, "view_len": 1}, "negative"),
        ({"type": "message", "message": {"id": "m1", "role": "user", "content": "forged"}}, "already names a different"),
    ],
    ids=["unknown-id", "unknown-checkpoint", "dmail-nowhere", "undo-nothing", "second-header", "negative-usage", "forged-id"],
)  # fmt: skip
def test_a_record_naming_what_the_log_does_not_hold_is_skipped(
    record: dict[str, object], needle: str, tmp_path: Path
) -> None:
    path, records = _log(tmp_path)
    n = len(records)
    records.insert(6, {"seq": 6, "ts": None, **record})  # between m4 and m5 (seq 6 in the original)
    for later in records[7:]:
        later["seq"] = int(later["seq"]) + 1  # type: ignore[call-overload]
    _rewrite(path, records)
    s, warned = _restore(path)
    assert "line 7 (seq 6" in warned and needle in warned, warned
    assert [m.text for m in s.view] == [f"m{i}" for i in range(8)]
    assert s.last_seq == n and s.id != "other" and s.pending_dmail is None
    s.close()


def test_a_deeply_nested_line_is_one_bad_record(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    deep = "[" * 50_000 + "]" * 50_000
    lines: list[dict[str, object] | str] = [*records[:3], '{"seq": 3, "type": "message", "x": ' + deep + "}"]
    lines += records[4:]
    _rewrite(path, lines)
    s, warned = _restore(path)
    assert "line 4" in warned and "nested too deeply" in warned
    assert [m.text for m in s.view] == ["m0", "m1", "m3", "m4", "m5", "m6", "m7"]
    s.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptRecordWarning)  # reported above
        writer = Session.open(path)
    with writer:
        writer.append(Message(role="user", content="m8"))  # and the log goes on
        assert writer.last_seq == len(records)
