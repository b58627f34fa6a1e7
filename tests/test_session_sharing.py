"""Bounded cost when sharing (issue 15): processes taking turns on one JSONL session wait for its lock instead
of failing or polling; SQLite reads from read-only media and says so when asked to write there; a session on
SQLite works from several threads, as the docs promise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from agentcontext.engine import ContextEngine
from agentcontext.messages import Message
from agentcontext.session import MessageRecord, Session, SQLiteStore
from agentcontext.testing import WordCounter

WRITERS = 8
TURNS = 4

_TURN_TAKER = textwrap.dedent(
    """
    import sys
    from agentcontext.engine import ContextEngine
    from agentcontext.messages import Message
    from agentcontext.session import Session
    from agentcontext.testing import WordCounter
    path, writer, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    engine = ContextEngine(window=1500, reserve=200, counter=WordCounter())
    for turn in range(turns):
        # Each turn: wait for the session, add a question and an answer, compact when needed, let go.
        with Session.open(path, engine=engine, lock_timeout=300, fsync="never") as s:
            s.append(Message(role="user", content=f"writer {writer} turn {turn}: " + "word " * 120,
                             id=f"w{writer}-t{turn}-q"))
            s.prepare()
            s.append(Message(role="assistant", content=f"answer {writer}.{turn} " + "word " * 60,
                             id=f"w{writer}-t{turn}-a"))
    print("done", flush=True)
    """
)


def test_writers_taking_turns_on_one_jsonl_session_all_get_through(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    Session.open(path).close()  # the header: every writer then opens an existing session
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _TURN_TAKER, str(path), str(w), str(TURNS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0 and out.strip() == "done", err
    with Session.open(path, read_only=True) as s:
        ids = [r.message.id for r in s.records() if isinstance(r, MessageRecord)]
        compactions = s.compactions
    wanted = {f"w{w}-t{t}-{k}" for w in range(WRITERS) for t in range(TURNS) for k in "qa"}
    assert len(ids) == len(wanted) and set(ids) == wanted  # every append of every writer, once
    assert compactions  # and the turns that needed a compaction wrote it


# ----------------------------------------------------------------------------- SQLite on read-only media


def _can_mount_read_only() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o ro none /mnt"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


_ON_READ_ONLY_MEDIA = textwrap.dedent(
    """
    import sys
    from agentcontext.exceptions import StoreError
    from agentcontext.session import Session
    db, jsonl = sys.argv[1], sys.argv[2]
    with Session.open(f"sqlite:///{db}?session=s", read_only=True) as s:
        print("read", [m.text for m in s.view])
    for where in (f"sqlite:///{db}?session=s", jsonl):
        try:
            Session.open(where).close()
        except StoreError as exc:
            print(type(exc).__name__, exc)
    """
)


@pytest.mark.skipif(not _can_mount_read_only(), reason="needs unshare to mount a read-only file system")
def test_sqlite_reads_from_read_only_media_and_names_it_when_asked_to_write(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    db, jsonl = media / "runs.db", media / "s.jsonl"
    with Session.from_store(SQLiteStore(db, session_id="s")) as s:
        s.append(Message(role="user", content="kept on a CD"))
    with Session.open(jsonl) as s:
        s.append(Message(role="user", content="also"))
    assert not (media / "runs.db-shm").exists()  # WAL mode, closed cleanly: SQLite must make -shm to read
    script = (
        f"mount --bind {media} {media} && mount -o remount,ro,bind {media} && "
        f"{sys.executable} -c '{_ON_READ_ONLY_MEDIA}' {db} {jsonl}"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "read ['kept on a CD']"
    assert len(lines) == 3, result.stdout
    for line in lines[1:]:
        assert line.startswith("StorePathError") and "read-only file system" in line, line
        assert "permission" not in line.lower()


# ----------------------------------------------------------------------------- SQLite from several threads


def test_a_sqlite_session_is_shared_by_threads(tmp_path: Path) -> None:
    engine = ContextEngine(window=3000, reserve=300, counter=WordCounter())
    session = Session.from_store(
        SQLiteStore(tmp_path / "runs.db", session_id="t", fsync="never"), engine=engine
    )
    per_thread = 40
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            for i in range(per_thread):
                session.append(Message(role="user", content=f"{name} {i} " + "word " * 30, id=f"{name}-{i}"))
                if i % 10 == 9:
                    session.prepare()
                    session.checkpoint(label=f"{name} {i}")
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    view = list(session.view)
    checkpoints = session.checkpoints
    session.close()
    again = Session.from_store(SQLiteStore(tmp_path / "runs.db", session_id="t", read_only=True))
    with again:
        ids = {r.message.id for r in again.records() if isinstance(r, MessageRecord)}
        assert ids >= {f"{n}-{i}" for n in "ab" for i in range(per_thread)}
        assert list(again.view) == view and again.checkpoints == checkpoints
