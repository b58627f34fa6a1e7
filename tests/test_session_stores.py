"""Session stores: the protocol's promises on JSONL, SQLite, memory, PostgreSQL and Redis, and each store's own.

The PostgreSQL and Redis cases run against the real servers (see ``db_servers.py``), each
test on its own session of a schema / key prefix made for this module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentcontext._serde import dumps
from agentcontext.artifacts import FileArtifactStore, MemoryArtifactStore
from agentcontext.exceptions import (
    ConcurrencyError,
    ConfigError,
    NotASessionError,
    SessionLockedError,
    StoreError,
)
from agentcontext.session import (
    CorruptRecordWarning,
    JSONLStore,
    MemoryStore,
    SessionNotFoundError,
    SessionStore,
    SQLiteStore,
    StorePathError,
    SupportsLease,
)
from agentcontext.session.stores import open_store
from db_servers import database, unique, with_session

KINDS = ["jsonl", "sqlite", "memory", "postgres", "redis"]
SHARED = ["sqlite", "memory", "postgres", "redis"]  # two store objects can write one session
Factory = Callable[..., SessionStore]


def _rec(seq: int, text: str = "x") -> dict[str, object]:
    return {"seq": seq, "type": "note", "ts": None, "text": text}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with database("postgres") as url:
        yield url


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with database("redis") as url:
        yield url


@pytest.fixture
def server_url(kind: str, request: pytest.FixtureRequest) -> str:
    """The URL of this test's own session on the shared server ("" for the embedded stores)."""
    if kind not in ("postgres", "redis"):
        return ""
    return with_session(request.getfixturevalue(f"{kind}_url"), unique("s"))


@pytest.fixture
def make(kind: str, tmp_path: Path, server_url: str) -> Iterator[Factory]:
    opened: list[SessionStore] = []
    memory = MemoryStore()

    def factory(**kwargs: object) -> SessionStore:
        store: SessionStore
        if kind == "jsonl":
            store = JSONLStore(tmp_path / "s.jsonl", **kwargs)  # type: ignore[arg-type]
        elif kind == "sqlite":
            store = SQLiteStore(tmp_path / "s.db", **kwargs)  # type: ignore[arg-type]
        elif kind == "memory":
            store = memory
        else:
            store = open_store(server_url, **kwargs)
        opened.append(store)
        return store

    yield factory
    for s in opened:
        s.close()


def _load(store: SessionStore) -> list[dict[str, object]]:
    return [r.data for r in store.load()]


# ----------------------------------------------------------------------------- the protocol, on every store


def test_appended_records_load_back_in_order_after_reopening(make: Factory) -> None:
    store = make()
    store.open(create=True)
    assert _load(store) == []
    store.append([_rec(0), _rec(1, "中文")], expected_seq=0)
    store.append([_rec(2)], expected_seq=2)
    store.close()
    again = make()
    again.open(create=False)
    assert _load(again) == [_rec(0), _rec(1, "中文"), _rec(2)]
    again.append([_rec(3)], expected_seq=3)
    assert [r["seq"] for r in _load(again)] == [0, 1, 2, 3]


def test_an_append_with_a_stale_expected_seq_is_refused_and_writes_nothing(make: Factory) -> None:
    store = make()
    store.open(create=True)
    list(store.load())
    store.append([_rec(0)], expected_seq=0)
    with pytest.raises(ConcurrencyError, match="expected to write seq 0, but the log ends at seq 0"):
        store.append([_rec(0)], expected_seq=0)
    with pytest.raises(SessionNotFoundError, match="ends at seq 0, before seq 4"):  # not a race: lost records
        store.append([_rec(5)], expected_seq=5)
    with pytest.raises(StoreError, match="record 1 of the batch has seq 3"):
        store.append([_rec(1), _rec(3)], expected_seq=1)
    assert [r["seq"] for r in _load(store)] == [0]


def test_a_damaged_record_is_skipped_with_a_warning_that_names_it(
    kind: str, make: Factory, tmp_path: Path, server_url: str
) -> None:
    store = make()
    store.open(create=True)
    list(store.load())
    store.append([_rec(0), _rec(1), _rec(2)], expected_seq=0)
    store.close()
    if kind == "jsonl":
        lines = (tmp_path / "s.jsonl").read_text().splitlines()
        lines[1] = '{"seq": 1, "type": "note", "te'  # torn in the middle of the file
        (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
        where = "line 2"
    elif kind == "sqlite":
        with sqlite3.connect(tmp_path / "s.db") as db:
            db.execute("UPDATE records SET body = 'not json' WHERE seq = 1")
        where = "seq 1"
    elif kind == "memory":
        assert isinstance(store, MemoryStore)
        store.lines[1] = "[1, 2"
        where = "line 2"
    else:
        _damage(kind, store, server_url, seq=1, body="not json")
        where = "seq 1"
    again = make()
    again.open(create=False)
    with pytest.warns(CorruptRecordWarning, match=f"{where}.*skipped"):
        loaded = _load(again)
    assert [r["seq"] for r in loaded] == [0, 2]


def test_many_damaged_records_give_a_bounded_number_of_warnings(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("garbage\n" * 50 + json.dumps(_rec(0)) + "\n")
    with pytest.raises(NotASessionError, match="first line"):
        JSONLStore(path).open(create=False)  # written only when its first line is a record
    store = JSONLStore(path, read_only=True)  # read: a record among its first lines
    store.open(create=False)
    with pytest.warns(CorruptRecordWarning) as caught:
        assert [r["seq"] for r in _load(store)] == [0]
    store.close()
    assert len(caught) == 11
    assert "40 more" in str(caught[-1].message)


def test_replace_keeps_the_old_log_as_a_backup(
    kind: str, make: Factory, tmp_path: Path, server_url: str
) -> None:
    store = make()
    store.open(create=True)
    list(store.load())
    store.append([_rec(0, "old"), _rec(1, "old")], expected_seq=0)
    before = (tmp_path / "s.jsonl").read_bytes() if kind == "jsonl" else b""
    where = store.replace([_rec(0, "new")])
    assert _load(store) == [_rec(0, "new")]
    store.append([_rec(1, "after")], expected_seq=1)
    assert [r["text"] for r in _load(store)] == ["new", "after"]
    if kind == "jsonl":
        assert Path(where).name == "s.bak-1.jsonl"
        assert Path(where).read_bytes() == before
    elif kind == "sqlite":
        with sqlite3.connect(tmp_path / "s.db") as db:
            rows = db.execute("SELECT seq, body FROM records_backup ORDER BY seq").fetchall()
        assert [json.loads(body)["text"] for _, body in rows] == ["old", "old"]
    elif kind == "memory":
        assert isinstance(store, MemoryStore)
        assert len(store.backups) == 1 and len(store.backups[0]) == 2
    else:
        assert [json.loads(b)["text"] for b in _backup_bodies(kind, store)] == ["old", "old"]
        assert store.location.split("#")[0] in where


def test_default_artifacts_belong_to_the_session(
    kind: str, make: Factory, tmp_path: Path, server_url: str
) -> None:
    store = make()
    artifacts = store.default_artifacts()
    if kind == "memory":
        assert isinstance(artifacts, MemoryArtifactStore)
    elif kind in ("postgres", "redis"):
        # In the database, so every worker recalls what any worker offloaded; gone with the session.
        store.open(create=True)
        ref = artifacts.put("a long tool output " * 100)
        assert artifacts.get(ref) == "a long tool output " * 100 and ref in artifacts
        other = open_store(server_url + "-other")
        other.open(create=True)
        assert ref not in other.default_artifacts()
        other.close()
    else:
        assert isinstance(artifacts, FileArtifactStore)
        assert artifacts.directory.parent.parent == tmp_path or artifacts.directory.parent == tmp_path
        assert artifacts.directory.name in ("s.artifacts", "default")


def test_fsync_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="'always', 'never' or 'interval'"):
        JSONLStore("x.jsonl", fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fsync_interval"):
        JSONLStore("x.jsonl", fsync="interval", fsync_interval=0)
    with pytest.raises(ConfigError, match="session_id"):
        SQLiteStore("x.db", session_id="")


# ----------------------------------------------------------------------------- bad locations


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_missing_session_is_a_clear_error_unless_created(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "runs" / ("nope.jsonl" if kind == "jsonl" else "nope.db")
    store_cls = JSONLStore if kind == "jsonl" else SQLiteStore
    for store in (store_cls(path, read_only=True), store_cls(path)):
        with pytest.raises(SessionNotFoundError, match=str(path)):
            store.open(create=False) if not store.read_only else store.open(create=True)
    assert not path.exists()
    created = store_cls(path)
    created.open(create=True)  # missing parent directories are made
    created.close()
    assert path.is_file()
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_directory_in_place_of_the_file_is_a_clear_error(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.mkdir()
    store = JSONLStore(path) if kind == "jsonl" else SQLiteStore(path)
    with pytest.raises(StorePathError, match="is a directory"):
        store.open(create=True)


def test_a_parent_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("oops")
    with pytest.raises(StorePathError, match="a parent of it is a file"):
        JSONLStore(tmp_path / "runs" / "a.jsonl").open(create=True)


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some text, not SQLite\n" * 100)
    with pytest.raises(StoreError, match="not a SQLite database"):
        SQLiteStore(path).open(create=True)


_PERMISSION_CHILD = textwrap.dedent(
    """
    import os, sys
    from agentcontext.session import JSONLStore, SQLiteStore, StorePermissionError
    path, kind, read_only = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if os.geteuid() == 0:  # root ignores file modes: become nobody (after the imports)
        os.setgid(65534)
        os.setuid(65534)
    cls = JSONLStore if kind == "jsonl" else SQLiteStore
    store = cls(path, read_only=read_only)
    try:
        store.open(create=True)
        list(store.load())
    except StorePermissionError as exc:
        print("PermissionError:", exc)
    else:
        print("opened")
    """
)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_permission_problem_is_a_clear_error(kind: str, read_only: bool, tmp_path: Path) -> None:
    # Root ignores file modes, so the check runs in a child that drops to an unprivileged user;
    # the directory must be reachable for that user, so it is not under pytest's 0700 tmp tree.
    base = Path(tempfile.mkdtemp(prefix="agentcontext-perm-"))
    base.chmod(0o755)
    try:
        _check_permission_error(kind, read_only, base)
    finally:
        shutil.rmtree(base)


def _check_permission_error(kind: str, read_only: bool, base: Path) -> None:
    path = base / ("locked.jsonl" if kind == "jsonl" else "locked.db")
    store = JSONLStore(path) if kind == "jsonl" else SQLiteStore(path)
    store.open(create=True)
    store.append([_rec(0)], expected_seq=0)
    store.close()
    path.chmod(0o000)
    result = subprocess.run(
        [sys.executable, "-c", _PERMISSION_CHILD, str(path), kind, "1" if read_only else "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=base,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("PermissionError:"), result.stdout + result.stderr
    assert str(path) in result.stdout and "permission" in result.stdout.lower()


# ----------------------------------------------------------------------------- JSONL specifics


def test_jsonl_lines_are_one_compact_record_each(tmp_path: Path) -> None:
    store = JSONLStore(tmp_path / "s.jsonl")
    store.open(create=True)
    store.append([_rec(0, "naïve 中文"), _rec(1)], expected_seq=0)
    store.close()
    raw = (tmp_path / "s.jsonl").read_text(encoding="utf-8")
    # The first line of a batch of two says so (the store's framing: a crash cannot apply half of it).
    assert raw == dumps({**_rec(0, "naïve 中文"), "batch": 2}) + "\n" + dumps(_rec(1)) + "\n"


def test_a_torn_last_line_is_skipped_then_moved_aside_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(dumps(_rec(0)) + "\n" + '{"seq": 1, "type": "no')  # the writer died mid-line
    store = JSONLStore(path)
    store.open(create=False)
    with pytest.warns(CorruptRecordWarning, match="line 2 is incomplete"):
        assert [r["seq"] for r in _load(store)] == [0]
    store.append([_rec(1)], expected_seq=1)
    store.close()
    assert path.read_text() == dumps(_rec(0)) + "\n" + dumps(_rec(1)) + "\n"
    assert (tmp_path / "s.jsonl.torn").read_text() == '{"seq": 1, "type": "no\n'
    reread = JSONLStore(path, read_only=True)
    reread.open(create=False)
    assert [r["seq"] for r in _load(reread)] == [0, 1]  # and no warning any more


@pytest.mark.parametrize("cut", ["at a line's end", "inside a line"])
def test_a_batch_cut_short_by_a_crash_is_applied_not_at_all_then_moved_aside(
    cut: str, tmp_path: Path
) -> None:
    # A crash during one write of a tool call and its result left the call alone in the log, and the
    # restore applied it (the D-Mail batch: the revert without the D-Mail, which was then lost).
    path = tmp_path / "s.jsonl"
    store = JSONLStore(path)
    store.open(create=True)
    store.append([_rec(0)], expected_seq=0)
    store.append([_rec(1, "call"), _rec(2, "result"), _rec(3, "after")], expected_seq=1)
    store.close()
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    assert b'"batch":3' in lines[1] and b"batch" not in lines[2]  # the first line of a batch says its size
    kept = b"".join(lines[:3]) if cut == "at a line's end" else b"".join(lines[:3]) + lines[3][:9]
    path.write_bytes(kept)
    store = JSONLStore(path)
    store.open(create=False)
    with pytest.warns(CorruptRecordWarning) as caught:  # and, cut inside a line, that line is incomplete
        assert _load(store) == [_rec(0)]
    said = [str(w.message) for w in caught]
    assert any(re.search("lines 2-[34] are 2 of the 3 records of one append", m) for m in said), said
    store.append([_rec(1, "again")], expected_seq=1)  # the batch goes aside first, as a torn line does
    store.close()
    assert path.read_bytes() == lines[0] + dumps(_rec(1, "again")).encode() + b"\n"
    assert (tmp_path / "s.jsonl.torn").read_bytes().startswith(lines[1])
    reread = JSONLStore(path, read_only=True)
    reread.open(create=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _load(reread) == [_rec(0), _rec(1, "again")]  # the framing is the store's: never handed on


def test_a_reader_following_the_writer_waits_for_a_whole_batch(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    writer = JSONLStore(path)
    writer.open(create=True)
    writer.append([_rec(0)], expected_seq=0)
    reader = JSONLStore(path, read_only=True)
    reader.open(create=False)
    assert _load(reader) == [_rec(0)]
    writer.append([_rec(1), _rec(2)], expected_seq=1)
    writer.close()
    whole = path.read_bytes()
    first_two = b"".join(whole.splitlines(keepends=True)[:2])
    path.write_bytes(first_two)  # as the reader would find it while the writer is mid-batch
    assert [r.data for r in reader.load(after=0)] == []
    path.write_bytes(whole)
    assert [r.data for r in reader.load(after=0)] == [_rec(1), _rec(2)]


def test_a_complete_last_record_without_newline_is_kept_and_terminated(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(dumps(_rec(0)))
    store = JSONLStore(path)
    store.open(create=False)
    assert [r["seq"] for r in _load(store)] == [0]
    store.append([_rec(1)], expected_seq=1)
    store.close()
    assert path.read_text().splitlines() == [dumps(_rec(0)), dumps(_rec(1))]


@pytest.mark.parametrize("how", ["deleted", "moved", "replaced"])
def test_a_jsonl_file_taken_away_while_open_refuses_appends_instead_of_losing_them(
    how: str, tmp_path: Path
) -> None:
    # Appends went on "succeeding" into the unlinked file, and were gone when the store closed.
    path = tmp_path / "s.jsonl"
    store = JSONLStore(path)
    store.open(create=True)
    store.append([_rec(0)], expected_seq=0)
    if how == "deleted":
        path.unlink()
    elif how == "moved":
        path.rename(tmp_path / "rotated.jsonl")
    else:
        path.unlink()
        path.write_text(dumps(_rec(0, "someone else's")) + "\n")
    with pytest.raises(
        SessionNotFoundError, match="deleted or moved while this store had it open; nothing was written"
    ):
        store.append([_rec(1)], expected_seq=1)
    store.close()


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    first = JSONLStore(path)
    first.open(create=True)
    with pytest.raises(SessionLockedError, match=f"process {os.getpid()}"):
        JSONLStore(path).open(create=True)
    reader = JSONLStore(path, read_only=True)  # readers take no lock
    reader.open(create=False)
    first.close()
    second = JSONLStore(path)
    second.open(create=True)  # released on close
    second.close()


def test_a_lock_held_by_another_process_names_that_process(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from agentcontext.session import JSONLStore; s = JSONLStore(sys.argv[1]); "
            "s.open(create=True); print('locked', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "locked"
            with pytest.raises(SessionLockedError, match=f"process {child.pid}") as info:
                JSONLStore(path).open(create=True)
            assert "read_only=True" in str(info.value)
        finally:
            child.kill()
            child.wait(timeout=30)
    # The kernel released the dead holder's lock: no stale lock file problem.
    store = JSONLStore(path)
    store.open(create=True)
    store.close()


@pytest.mark.parametrize(
    ("policy", "interval", "during", "at_close"),
    [("always", 1.0, 3, 0), ("never", 1.0, 0, 0), ("interval", 3600.0, 0, 1), ("interval", 1e-9, 3, 0)],
)
def test_jsonl_fsync_policy(
    policy: str, interval: float, during: int, at_close: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JSONLStore(tmp_path / "s.jsonl", fsync=policy, fsync_interval=interval)  # type: ignore[arg-type]
    store.open(create=True)
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    for seq in range(3):
        store.append([_rec(seq)], expected_seq=seq)
    assert len(calls) == during
    store.close()
    assert len(calls) == during + at_close


_EFBIG_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    from agentcontext.exceptions import StoreError
    from agentcontext.session import JSONLStore
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # get EFBIG instead of being killed
    store = JSONLStore(sys.argv[1], fsync="never")
    store.open(create=True)
    store.append([{"seq": 0, "type": "note", "ts": None, "text": "small"}], expected_seq=0)
    size = store.path.stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, resource.RLIM_INFINITY))
    try:
        store.append([{"seq": 1, "type": "note", "ts": None, "text": "x" * 50000}], expected_seq=1)
    except StoreError as exc:
        print("refused:", exc)
    store.append([{"seq": 1, "type": "note", "ts": None, "text": "fits"}], expected_seq=1)
    store.close()
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE behaviour")
def test_a_failed_write_leaves_no_partial_line_behind(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    result = subprocess.run(
        [sys.executable, "-c", _EFBIG_CHILD, str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused:") and str(path) in result.stdout
    lines = path.read_text().splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["small", "fits"]


# ----------------------------------------------------------------------------- SQLite specifics


def test_sqlite_holds_many_sessions_and_readers_see_committed_appends(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    a, b = SQLiteStore(path, session_id="a"), SQLiteStore(path, session_id="b")
    for s in (a, b):
        s.open(create=True)
        list(s.load())
    a.append([_rec(0, "from a")], expected_seq=0)
    b.append([_rec(0, "from b"), _rec(1)], expected_seq=0)
    reader = SQLiteStore(path, session_id="a", read_only=True)
    reader.open(create=False)
    assert [r["text"] for r in _load(reader)] == ["from a"]
    with pytest.raises(SessionNotFoundError, match="no session 'c'"):
        SQLiteStore(path, session_id="c", read_only=True).open(create=False)
    with pytest.raises(StoreError, match="read-only"):
        reader.append([_rec(1)], expected_seq=1)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for s in (a, b, reader):
        s.close()


def test_sqlite_two_writers_on_one_session_race_optimistically(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    for s in (first, second):
        s.open(create=True)
        list(s.load())
    first.append([_rec(0, "first")], expected_seq=0)
    with pytest.raises(ConcurrencyError, match="another writer"):
        second.append([_rec(0, "second")], expected_seq=0)
    second.append([_rec(1, "second, after reloading")], expected_seq=1)
    assert [r["text"] for r in _load(first)] == ["first", "second, after reloading"]
    first.close()
    second.close()


def test_sqlite_artifact_directories_never_take_their_name_from_an_odd_session_id(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", session_id="../../etc")
    directory = store.default_artifacts().directory  # type: ignore[attr-defined]
    assert directory.parent == tmp_path / "runs.artifacts"
    assert directory.name.startswith("s-") and ".." not in directory.name


def _damage(kind: str, store: SessionStore, url: str, *, seq: int, body: str) -> None:
    """Overwrite one stored record's body behind the store's back."""
    if kind == "postgres":
        import psycopg

        from agentcontext.session.stores import PostgresStore

        assert isinstance(store, PostgresStore)
        with psycopg.connect(store.conninfo, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{store.schema}".agentcontext_records SET body = %s WHERE session_id = %s AND seq = %s',
                (body, store.session_id, seq),
            )
    else:
        import redis

        from agentcontext.session.stores import RedisStore

        assert isinstance(store, RedisStore)
        client = redis.Redis.from_url(store.url)
        client.hset(f"{store.prefix}:{{{store.session_id}}}:records", str(seq), body)
        client.close()


def _backup_bodies(kind: str, store: SessionStore) -> list[str]:
    if kind == "postgres":
        import psycopg

        from agentcontext.session.stores import PostgresStore

        assert isinstance(store, PostgresStore)
        with psycopg.connect(store.conninfo) as conn:
            rows = conn.execute(
                f'SELECT body FROM "{store.schema}".agentcontext_records_backup WHERE session_id = %s ORDER BY seq',
                (store.session_id,),
            ).fetchall()
        return [r[0] for r in rows]
    import redis

    from agentcontext.session.stores import RedisStore

    assert isinstance(store, RedisStore)
    client = redis.Redis.from_url(store.url)
    stored = client.hgetall(f"{store.prefix}:{{{store.session_id}}}:backup:1")
    client.close()
    return [stored[k].decode() for k in sorted(stored, key=int)]


# ----------------------------------------------------------------------------- catching up and leases


def test_load_after_a_seq_reads_only_the_newer_records(make: Factory) -> None:
    store = make()
    store.open(create=True)
    list(store.load())
    store.append([_rec(i) for i in range(10)], expected_seq=0)
    assert [r["seq"] for r in (x.data for x in store.load(after=6))] == [7, 8, 9]
    assert list(store.load(after=9)) == []
    store.append([_rec(10)], expected_seq=10)
    assert [x.data["seq"] for x in store.load(after=9)] == [10]
    assert [x.data["seq"] for x in store.load()] == list(range(11))


@pytest.mark.parametrize("kind", SHARED)
def test_the_loser_of_a_race_reads_what_it_missed_and_retries(make: Factory) -> None:
    first, second = make(), make()
    for s in (first, second):
        s.open(create=True)
        list(s.load())
    first.append([_rec(0, "first"), _rec(1, "first")], expected_seq=0)
    with pytest.raises(ConcurrencyError, match="expected to write seq 0, but the log ends at seq 1"):
        second.append([_rec(0, "second")], expected_seq=0)
    missed = [r.data for r in second.load(after=-1)]
    assert [r["text"] for r in missed] == ["first", "first"]
    second.append([_rec(2, "second")], expected_seq=2)
    with pytest.raises(ConcurrencyError):
        first.append([_rec(2, "first again")], expected_seq=2)
    assert [r.data["text"] for r in first.load(after=1)] == ["second"]
    assert [r["text"] for r in _load(first)] == ["first", "first", "second"]


def test_a_jsonl_reader_follows_the_writer_reading_only_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    writer = JSONLStore(path)
    writer.open(create=True)
    writer.append([_rec(i) for i in range(3)], expected_seq=0)
    reader = JSONLStore(path, read_only=True)
    reader.open(create=False)
    assert [r["seq"] for r in _load(reader)] == [0, 1, 2]
    # Damage a line the reader has read: a catch-up that re-read the file would warn about it.
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"seq":1,', b'"seq":1 ', 1))
    writer.append([_rec(3), _rec(4)], expected_seq=3)
    assert [r.data["seq"] for r in reader.load(after=2)] == [3, 4]  # no CorruptRecordWarning: line 2 not read
    with path.open("ab") as handle:
        handle.write(dumps(_rec(5)).encode()[:10])  # an append in flight: not read until it is whole
    assert list(reader.load(after=4)) == []
    with path.open("ab") as handle:
        handle.write(dumps(_rec(5)).encode()[10:] + b"\n")
    assert [(r.where, r.data["seq"]) for r in reader.load(after=4)] == [("line 6", 5)]
    writer.close()


def test_a_lease_has_one_holder_until_released_or_expired(kind: str, make: Factory) -> None:
    store = make()
    store.open(create=True)
    list(store.load())
    assert isinstance(store, SupportsLease)
    assert store.acquire_lease("worker-a", 30)
    assert not store.acquire_lease("worker-b", 30)
    assert store.acquire_lease("worker-a", 30)  # the holder renews
    assert not store.release_lease("worker-b")
    assert store.release_lease("worker-a")
    assert not store.release_lease("worker-a")
    assert store.acquire_lease("worker-b", 0.05)
    time.sleep(0.2)  # past the lease's ttl: it lapsed, as a killed holder's would
    assert store.acquire_lease("worker-a", 30)
    assert not store.release_lease("worker-b")  # an expired lease is no longer its holder's to release
    with pytest.raises(ConfigError, match="ttl"):
        store.acquire_lease("worker-a", 0)
    with pytest.raises(ConfigError, match="owner"):
        store.acquire_lease("", 1)


@pytest.mark.parametrize("kind", SHARED)
def test_two_store_objects_share_one_lease(make: Factory) -> None:
    first, second = make(), make()
    for s in (first, second):
        s.open(create=True)
    assert isinstance(first, SupportsLease) and isinstance(second, SupportsLease)
    assert first.acquire_lease("a", 30)
    assert not second.acquire_lease("b", 30)
    assert first.release_lease("a")
    assert second.acquire_lease("b", 30)


# ----------------------------------------------------------------------------- retrying through broken connections


class _Broken(ConnectionError):
    """Stands for a dropped connection (what the network stores retry)."""


def test_an_append_whose_reply_was_lost_is_not_written_twice() -> None:
    from agentcontext.session.stores._base import retry_append

    log: list[str] = []
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            log.append("batch")  # committed ...
            raise _Broken("connection reset")  # ... but the reply never came
        if log:
            raise ConcurrencyError("the seq is taken")
        log.append("batch")

    retry_append(attempt, lambda: log == ["batch"], transient=(_Broken,), location="db", timeout=5)
    assert log == ["batch"] and attempts == 2


def test_a_lost_race_after_a_broken_connection_is_still_a_lost_race() -> None:
    from agentcontext.session.stores._base import retry_append

    calls = iter([_Broken("reset"), ConcurrencyError("another writer")])

    def attempt() -> None:
        raise next(calls)

    with pytest.raises(ConcurrencyError, match="another writer"):
        retry_append(attempt, lambda: False, transient=(_Broken,), location="db", timeout=5)

    def lost() -> None:
        raise ConcurrencyError("another writer")

    def written() -> bool:
        pytest.fail("written() is asked only after a broken connection")

    with pytest.raises(ConcurrencyError):  # a plain lost race: no second look
        retry_append(lost, written, transient=(_Broken,), location="db", timeout=5)


def test_retrying_gives_up_with_a_clear_error_when_the_time_is_up() -> None:
    from agentcontext.exceptions import StoreUnavailableError
    from agentcontext.session.stores._base import retry

    tries = 0

    def down() -> None:
        nonlocal tries
        tries += 1
        raise _Broken("connection refused")

    with pytest.raises(
        StoreUnavailableError, match=r"cannot reach db \(_Broken: connection refused\); gave up after"
    ):
        retry(down, transient=(_Broken,), location="db", timeout=0.2)
    assert tries >= 2  # it did retry, with backoff, before giving up
