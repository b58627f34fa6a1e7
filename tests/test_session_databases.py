"""PostgreSQL and Redis stores: URLs, explicit set-up, administration, large records, the async side.

Against the real servers (``db_servers.py``); each test in its own schema or key prefix.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentcontext.cli import main
from agentcontext.exceptions import (
    ConcurrencyError,
    ConfigError,
    CorruptRecordWarning,
    InvalidMessageError,
    SessionNotFoundError,
    StoreError,
    StoreNotInitializedError,
    StoreUnavailableError,
)
from agentcontext.messages import Message, ToolCall
from agentcontext.session import JSONLStore, MessageRecord, Session, SQLiteStore
from agentcontext.session.stores import SessionDatabase, open_database, open_store
from db_servers import PG_URL, REDIS_URL, database, free_port, need, redis_prefix, unique, with_session

SERVERS = ["postgres", "redis"]


def _rec(seq: int, text: str = "x") -> dict[str, object]:
    return {"seq": seq, "type": "note", "ts": None, "text": text}


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh schema (PostgreSQL) or key prefix (Redis), initialised."""
    with database(str(request.param)) as url:
        yield url


# ----------------------------------------------------------------------------- locations


def test_a_location_picks_its_store(tmp_path: Path) -> None:
    from agentcontext.session.stores import PostgresStore, RedisStore

    jsonl = open_store(tmp_path / "a.jsonl", fsync="never")
    assert isinstance(jsonl, JSONLStore) and jsonl.path == tmp_path / "a.jsonl" and jsonl.fsync == "never"
    assert isinstance(open_store(str(tmp_path / "b.jsonl")), JSONLStore)
    relative = open_store("sqlite:///runs/x.db?session=task-1")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == Path("runs/x.db").absolute() and relative.session_id == "task-1"
    absolute = open_store(f"sqlite:///{tmp_path}/x.db?session=a%20b")
    assert isinstance(absolute, SQLiteStore) and absolute.path == tmp_path / "x.db"
    assert absolute.session_id == "a b"
    pg = open_store("postgresql://app:s3cret@db.internal:5433/agents?session=t1&schema=ac&sslmode=disable")
    assert isinstance(pg, PostgresStore) and pg.session_id == "t1" and pg.schema == "ac"
    assert pg.conninfo == "postgresql://app:s3cret@db.internal:5433/agents?sslmode=disable"
    assert pg.location == "postgresql://app@db.internal:5433/agents?schema=ac#t1"  # no password
    rd = open_store("redis://:s3cret@cache:6380/2?session=t2&prefix=team", read_only=True)
    assert isinstance(rd, RedisStore) and rd.session_id == "t2" and rd.prefix == "team" and rd.read_only
    assert rd.location == "redis://cache:6380/2?prefix=team#t2"


@pytest.mark.parametrize(
    ("location", "options", "message"),
    [
        ("mysql://db/app?session=a", {}, "unknown session location scheme 'mysql://'"),
        ("postgresql://db/app", {}, r"names no session: add \?session=ID"),
        ("redis://:pw@cache/0", {}, r"'redis://:\*\*\*@cache/0' names no session"),
        ("sqlite:///x.db?session=a&timeout=3", {}, "unknown parameter"),
        ("sqlite://host/x.db?session=a", {}, "has no host"),
        ("postgresql://db/app?session=a&session=b", {}, "appears twice"),
        ("postgresql://db/app?session=", {}, "session= is empty"),
        (
            "redis://cache/0?session=a",
            {"fsync": "never"},
            "RedisStore takes no option 'fsync'; it takes prefix",
        ),
        ("postgresql://db/app?session=a", {"session_id": "b"}, "already given by the URL"),
        ("postgresql://db/app?session=a&schema=", {}, "schema= is empty"),
        ("redis://cache/0?session=a&prefix={x}", {}, "prefix must be"),
        # A path is a JSON Lines session: one named like a database is refused, not written as JSON Lines.
        ("runs/agents.sqlite", {}, r"looks like a SQLite database.*sqlite:///runs/agents.sqlite\?session=ID"),
        ("runs.DB", {}, "looks like a SQLite database"),
    ],
)
def test_a_bad_location_is_a_clear_error(location: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        open_store(location, **options)
    assert "pw" not in str(info.value)


def test_the_database_clients_load_only_for_their_urls() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None; sys.modules['redis'] = None\n"
        "from agentcontext.session.stores import open_store\n"
        "import agentcontext.cli\n"
        "open_store('sqlite:///x.db?session=a')\n"
        "for url in ('postgresql://db/app?session=a', 'redis://cache/0?session=a'):\n"
        "    try:\n"
        "        open_store(url)\n"
        "    except ImportError as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        lines[0].startswith("MissingDependencyError") and "pip install 'agentcontext[postgres]'" in lines[0]
    )
    assert lines[1].startswith("MissingDependencyError") and "pip install 'agentcontext[redis]'" in lines[1]


# ----------------------------------------------------------------------------- explicit set-up


@pytest.mark.parametrize("kind", SERVERS)
def test_a_database_that_was_never_initialised_is_a_clear_error_naming_the_command(kind: str) -> None:
    need(kind)
    base = (
        PG_URL + "?schema=" + unique("ac_none_")
        if kind == "postgres"
        else REDIS_URL + "?prefix=" + unique("none:")
    )
    store = open_store(with_session(base, "a"))
    with pytest.raises(StoreNotInitializedError, match="agentcontext db init '") as info:
        store.open(create=True)
    assert base.split("://")[1].split("?")[0] in str(info.value)
    db = open_database(base)
    with pytest.raises(StoreNotInitializedError, match="db init"):
        db.sessions()
    db.close()
    if kind == "postgres":  # nothing was created behind the user's back
        import psycopg

        with psycopg.connect(PG_URL) as conn:
            schema = base.rsplit("=", 1)[1]
            assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None


def test_postgres_init_is_versioned_and_idempotent_and_refuses_newer_tables() -> None:
    need("postgres")
    import psycopg

    from agentcontext.session.stores.postgres import DB_VERSION

    schema = unique("ac_init_")
    url = f"{PG_URL}?schema={schema}"
    db = open_database(url)
    try:
        done = db.init()
        assert done == [f"created schema {schema!r}", f"migrated {db.location} to version {DB_VERSION}"]
        assert db.init() == []  # current: nothing to do
        with psycopg.connect(PG_URL) as conn:
            rows = conn.execute(f'SELECT version, library FROM "{schema}".agentcontext_migrations').fetchall()
            assert [r[0] for r in rows] == [DB_VERSION] and rows[0][1].startswith("agentcontext")
            conn.execute(
                f'INSERT INTO "{schema}".agentcontext_migrations (version) VALUES (%s)', (DB_VERSION + 1,)
            )
            conn.commit()
        with pytest.raises(StoreError, match="newer than this library"):
            db.init()
        with pytest.raises(StoreError, match="newer than this library"):
            open_store(with_session(url, "a")).open(create=True)
    finally:
        db.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_concurrent_inits_of_one_schema_all_succeed() -> None:
    need("postgres")
    import psycopg

    schema = unique("ac_race_")
    url = f"{PG_URL}?schema={schema}"
    databases = [open_database(url) for _ in range(4)]  # a connection each: four real clients
    barrier = threading.Barrier(len(databases))
    results: list[list[str] | BaseException] = []

    def init(db: SessionDatabase) -> None:
        barrier.wait()
        try:
            results.append(db.init())
        except BaseException as exc:  # reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=init, args=(db,)) for db in databases]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert all(isinstance(r, list) for r in results), results
        assert sum(any("migrated" in line for line in r) for r in results if isinstance(r, list)) == 1
    finally:
        for db in databases:
            db.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# ----------------------------------------------------------------------------- sessions and records


def test_sessions_are_listed_deleted_and_pruned(server: str) -> None:
    db = open_database(server)
    refs = {}
    try:
        for sid in ("old", "new"):
            with Session.from_store(open_store(with_session(server, sid))) as s:
                s.append(Message(role="user", content=f"hello from {sid}"))
                refs[sid] = s.artifacts.put(f"artifact of {sid}")
        _age(server, "old", days=40)
        infos = {i.session_id: i for i in db.sessions()}
        assert set(infos) == {"old", "new"} and infos["new"].records == 2
        assert infos["old"].updated is not None and infos["new"].updated is not None
        assert infos["old"].updated < infos["new"].updated
        assert [i.session_id for i in db.sessions()] == ["old", "new"]  # oldest update first
        assert db.prune(timedelta(days=30)) == ["old"]
        assert [i.session_id for i in db.sessions()] == ["new"]
        with pytest.raises(SessionNotFoundError):
            open_store(with_session(server, "old"), read_only=True).open(create=False)
        assert db.delete("new") and not db.delete("new")
        assert db.sessions() == []
        fresh = open_store(with_session(server, "new"))  # a deleted id starts afresh: nothing stale
        fresh.open(create=True)
        assert list(fresh.load()) == [] and refs["new"] not in fresh.default_artifacts()
        fresh.close()
    finally:
        db.close()


def _age(server: str, session_id: str, *, days: int) -> None:
    """Make a session look last updated ``days`` ago, behind the store's back."""
    if server.startswith("postgresql"):
        import psycopg

        base, schema = server.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                f"UPDATE \"{schema}\".agentcontext_sessions SET updated_at = now() - interval '{days} days' "
                "WHERE session_id = %s",
                (session_id,),
            )
    else:
        import redis

        base, prefix = server.split("?prefix=")
        client = redis.Redis.from_url(base)
        seconds, _ = client.time()
        millis = (seconds - days * 86400) * 1000
        client.zadd(f"{prefix}:sessions", {session_id: millis})
        client.hset(f"{prefix}:{{{session_id}}}:meta", "updated", millis)
        client.close()


def test_a_20_mb_message_is_stored_and_restored_whole(server: str) -> None:
    big = "0123456789abcdef" * (20 * 1024 * 1024 // 16)  # 20 MiB of tool output
    url = with_session(server, unique("big"))
    with Session.from_store(
        open_store(url, **({"fsync": "never"} if url.startswith("postgresql") else {}))
    ) as s:
        s.append(Message(role="user", content="read the log"))
        s.append(Message(role="assistant", content=big))
        s.append(Message(role="user", content="thanks"))
    with Session.from_store(open_store(url, read_only=True), create=False) as s:
        assert [len(m.text) for m in s.view] == [12, len(big), 6]
        assert s.view[1].text == big


def test_a_long_log_is_written_in_one_batch_and_read_back_across_pages(server: str) -> None:
    # 6,001 records: past one INSERT's rows (PostgreSQL), several load pages / HMGET batches, read ahead.
    url = with_session(server, unique("long"))
    store = open_store(url)
    store.open(create=True)
    store.append([_rec(i, f"r{i}") for i in range(6_001)], expected_seq=0)
    with pytest.raises(ConcurrencyError):  # the batch moved the log's end as a whole
        store.append([_rec(6_000)], expected_seq=6_000)
    assert [r.data["seq"] for r in store.load()] == list(range(6_001))
    assert [r.data["text"] for r in store.load(after=1_998)][:3] == ["r1999", "r2000", "r2001"]
    assert [r.where for r in store.load(after=5_998)] == ["seq 5999", "seq 6000"]
    partial = store.load()
    assert [next(partial).data["seq"] for _ in range(3)] == [0, 1, 2]
    partial.close()  # a restore abandoned mid-way leaves nothing running

    async def read_async() -> list[object]:
        other = open_store(url, read_only=True)
        await other.aopen(create=False)  # type: ignore[attr-defined]
        seqs = [r.data["seq"] async for r in other.aload(after=2_500)]  # type: ignore[attr-defined]
        await other.aclose()  # type: ignore[attr-defined]
        return seqs

    assert asyncio.run(read_async()) == list(range(2_501, 6_001))
    store.close()


def test_a_session_deleted_while_open_refuses_appends_clearly(server: str) -> None:
    store = open_store(with_session(server, "doomed"))
    store.open(create=True)
    store.append([_rec(0)], expected_seq=0)
    db = open_database(server)
    assert db.delete("doomed")
    db.close()
    with pytest.raises(
        SessionNotFoundError, match="deleted while this store had it open; nothing was written"
    ):
        store.append([_rec(1)], expected_seq=1)
    store.close()


def test_a_session_deleted_and_re_created_under_an_open_worker_is_named_not_retried(server: str) -> None:
    # The worker spun for 10 s (about 200 round trips), then advised a reload that could never help.
    url = with_session(server, unique("again"))
    with Session.open(url) as old:
        old.extend([Message(role="user", content=f"m{i}") for i in range(10)])
        session_id = url.rsplit("session=", 1)[1]
        db = open_database(server)
        assert db.delete(session_id)
        db.close()
        with Session.open(url) as new:
            new.append(Message(role="user", content="a new conversation"))
        calls = 0
        real = old.store.append

        def counted(records: object, *, expected_seq: int) -> None:
            nonlocal calls
            calls += 1
            real(records, expected_seq=expected_seq)  # type: ignore[arg-type]

        old.store.append = counted  # type: ignore[method-assign]
        with pytest.raises(
            SessionNotFoundError, match="before seq 10, which this session has read.*Open the session again"
        ):
            old.append(Message(role="user", content="m10"))
        assert calls == 1


def test_read_only_and_missing_sessions(server: str) -> None:
    with pytest.raises(SessionNotFoundError, match="no session 'ghost'"):
        open_store(with_session(server, "ghost"), read_only=True).open(create=False)
    writer = open_store(with_session(server, "real"))
    writer.open(create=True)
    writer.append([_rec(0)], expected_seq=0)
    reader = open_store(with_session(server, "real"), read_only=True)
    reader.open(create=False)
    assert [r.data["seq"] for r in reader.load()] == [0]
    with pytest.raises(StoreError, match="read-only"):
        reader.append([_rec(1)], expected_seq=1)
    for s in (reader, writer):
        s.close()


@pytest.mark.parametrize("kind", SERVERS)
def test_an_unreachable_server_is_a_clear_error_after_the_retries(kind: str) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://postgres@127.0.0.1:{port}/x" if kind == "postgres" else f"redis://127.0.0.1:{port}/0"
    store = open_store(with_session(url, "a"), retry_timeout=0.3)
    with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{port}") as info:
        store.open(create=True)
    assert "running" in str(info.value)


def test_a_redis_session_that_lost_keys_is_refused_never_started_over() -> None:
    # Under an allkeys-* maxmemory-policy Redis evicts any key: a session's records, or its meta. Such a
    # session used to open empty (or as a new one) without a word, and writes went on at seq 0.
    need("redis")
    import redis

    with redis_prefix() as server:
        client = redis.Redis.from_url(REDIS_URL)
        prefix = server.split("?prefix=")[1]
        try:
            url = with_session(server, "evicted")
            worker = Session.open(url)
            worker.append(Message(role="user", content="the task"))
            worker.append(Message(role="assistant", content="on it"))
            client.delete(f"{prefix}:{{evicted}}:records")
            for create in (True, False):
                with pytest.raises(
                    StoreError, match="says 3 records were written but its records hash is gone"
                ):
                    open_store(url).open(create=create)
            with pytest.raises(StoreError, match="maxmemory-policy to noeviction") as info:
                worker.append(Message(role="user", content="next"))  # a worker that had it open
            assert not isinstance(info.value, (ConcurrencyError, SessionNotFoundError))
            assert client.exists(f"{prefix}:{{evicted}}:records") == 0  # nothing written at seq 3
            worker.close()

            url = with_session(server, "metaless")
            with Session.open(url) as s:
                s.append(Message(role="user", content="the task"))
            client.delete(f"{prefix}:{{metaless}}:meta")
            with pytest.raises(StoreError, match="meta hash .* is gone while its records"):
                Session.open(url)
            assert client.exists(f"{prefix}:{{metaless}}:meta") == 0  # not started over
            client.delete(f"{prefix}:{{metaless}}:records")  # both gone: the listing still knows it
            with pytest.raises(StoreError, match="damaged"):
                open_store(url).open(create=True)
        finally:
            client.close()


def _delete_records(server: str, session_id: str, seqs: list[int]) -> None:
    """Damage a session's log as a stray DELETE or an evicting cache would."""
    if server.startswith("postgresql"):
        import psycopg

        base, schema = server.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                f'DELETE FROM "{schema}".agentcontext_records WHERE session_id = %s AND seq = ANY(%s)',
                (session_id, seqs),
            )
    else:
        import redis

        base, prefix = server.split("?prefix=")
        client = redis.Redis.from_url(base)
        client.hdel(f"{prefix}:{{{session_id}}}:records", *seqs)
        client.close()


def test_records_missing_at_the_end_of_a_log_are_refused_never_read_as_its_end(server: str) -> None:
    # Records lost at the end of a log leave no later record to show the gap. The session used to reopen
    # without them and without a word, and every append after it failed as a race ("another writer has
    # appended") that no reload could cure. The store knows the last seq it acknowledged: it says so.
    url = with_session(server, "tail")
    other = Session.open(url)  # a second worker, already caught up
    with Session.open(url) as writer:
        for text in ("the task", "on it", "found the bug in parse.py", "fixed; tests pass"):
            writer.append(Message(role="user" if text == "the task" else "assistant", content=text))
        last = writer.last_seq
    _delete_records(server, "tail", [last - 1, last])
    with pytest.raises(StoreError, match=f"seqs {last - 1}-{last} are missing at its end") as info:
        Session.open(url)
    assert not isinstance(info.value, ConcurrencyError)
    with pytest.raises(StoreError, match="missing at its end"):
        other.reload()  # a worker that had it open meets the damage at its next catch-up
    with pytest.warns(CorruptRecordWarning, match="missing at its end .*; reading what is left"):
        reader = Session.open(url, read_only=True)
    assert [m.text for m in reader.view] == ["the task", "on it"]
    reader.close()
    other.close()
    with pytest.warns(CorruptRecordWarning), Session.open(url, read_only=True) as check:
        assert check.last_seq == last - 2  # nothing was written over the damage


def test_a_session_deleted_while_a_worker_reads_it_is_not_found_not_damaged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A delete between reading the last seq and the records read as records lost at the end: the worker
    # was told the session was damaged and to restore it from a backup.
    need("redis")
    from agentcontext.session.stores import RedisStore

    with redis_prefix() as server:
        url = with_session(server, "gone")
        writer, reader = Session.open(url), Session.open(url)
        writer.extend([Message(role="user", content=f"m{i}") for i in range(5)])
        db = open_database(server)
        last_op = RedisStore._last_op

        def last_then_deleted(self: RedisStore) -> object:
            last = yield from last_op(self)
            db.delete("gone")  # another process deletes it now
            return last

        monkeypatch.setattr(RedisStore, "_last_op", last_then_deleted)
        with pytest.raises(SessionNotFoundError, match="deleted while it was read"):
            reader.reload()
        db.close()


def test_redis_eviction_is_warned_of_at_init_and_an_evicted_session_is_refused() -> None:
    need("redis")
    import redis

    from db_servers import PrivateRedis

    with PrivateRedis() as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("maxmemory-policy", "allkeys-lru")
        db = open_database(server.url)
        assert db.init() == [f"initialised {server.url} (key layout 1)"]  # no limit: nothing is evicted
        client.config_set("maxmemory", 500_000_000)
        done = db.init()
        assert any("maxmemory-policy allkeys-lru" in line and "noeviction" in line for line in done), done
        db.close()
        # A server that may evict any key is refused for writing: a session that lost all its keys (its
        # records, meta and listing) reopened empty, with nothing left to tell (62 of 158 sessions did in
        # a measured run under allkeys-random). Reading stays possible; a volatile-* policy is safe.
        url = with_session(server.url, "busy")
        with pytest.raises(StoreError, match="evicts any key.*was not opened for writing"):
            Session.open(url)
        client.config_set("maxmemory-policy", "volatile-lru")
        safe = with_session(server.url, "safe")
        with Session.open(safe) as s:
            s.append(Message(role="user", content="kept"))
        client.config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(StoreError, match="allkeys-lru with maxmemory 500,000,000 bytes"):
            Session.open(safe)
        with Session.open(safe, read_only=True) as s:
            assert [m.text for m in s.view] == ["kept"]
        client.config_set("maxmemory", 0)
        with Session.open(url) as s:
            for i in range(20):
                s.append(Message(role="user", content=f"step {i} " + "x" * 2_000))
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", used + 2_000_000)
        keys = ["agentcontext:{busy}:meta", "agentcontext:{busy}:records"]
        filler = "f" * 100_000
        for n in range(400):  # real eviction: fill the server while other sessions keep the shared keys warm
            client.set(f"filler:{n}", filler)
            client.get("agentcontext:version")
            client.zscore("agentcontext:sessions", "busy")
            if client.exists(*keys) < 2:
                break
        assert client.exists(*keys) < 2, "nothing was evicted"
        client.config_set("maxmemory", 0)
        with pytest.raises(StoreError, match="damaged|db init"):
            Session.open(url)
        assert (
            client.exists("agentcontext:{busy}:meta") == 0
            or client.hget("agentcontext:{busy}:meta", "last_seq") == b"20"
        )  # never started over at -1
        client.close()


def test_a_redis_server_that_disables_config_is_still_checked_for_eviction() -> None:
    # Managed Redis services disable CONFIG; `db init` then said only "initialised" on an allkeys-lru
    # server, and sessions were opened on it. INFO answers there.
    need("redis")
    from db_servers import PrivateRedis

    with PrivateRedis(
        "--rename-command", "CONFIG", "", "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lfu"
    ) as server:
        db = open_database(server.url)
        done = db.init()
        db.close()
        assert any(
            "maxmemory-policy allkeys-lfu with maxmemory 104,857,600 bytes" in line for line in done
        ), done
        with pytest.raises(StoreError, match="allkeys-lfu"):
            Session.open(with_session(server.url, "s"))


def test_a_redis_user_without_dangerous_commands_still_opens_sessions() -> None:
    # Least-privilege ACLs take @dangerous away, INFO with it: the eviction check made every writable
    # open fail with NoPermissionError. The policy is then unknown, and the session opens.
    need("redis")
    import redis

    from db_servers import PrivateRedis

    with PrivateRedis() as server:
        admin = redis.Redis.from_url(server.url)
        admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-@dangerous")
        open_database(server.url).init()
        url = with_session(server.url.replace("redis://", "redis://app:pw@"), "s1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis.Redis.from_url(url.split("?")[0]).info("memory")  # what the check asks
        with Session.open(url) as s:
            s.append(Message(role="user", content="the task"))
        with Session.open(url, read_only=True) as s:
            assert [m.text for m in s.view] == ["the task"]
        admin.close()


# ----------------------------------------------------------------------------- two workers, one session


def _interfering(session: Session, other: Session, times: int) -> list[int]:
    """Make ``other`` append just before each of ``session``'s next ``times`` writes, so each loses its race."""
    store = session.store
    real = store.append
    lost: list[int] = []

    def append(records: object, *, expected_seq: int) -> None:
        if len(lost) < times:
            lost.append(expected_seq)
            other.reload()
            other.append(Message(role="user", content=f"meanwhile {len(lost)}"))
        real(records, expected_seq=expected_seq)  # type: ignore[arg-type]

    store.append = append  # type: ignore[method-assign]
    return lost


def test_a_write_that_keeps_losing_races_catches_up_and_lands(server: str) -> None:
    url = with_session(server, unique("races"))
    with Session.open(url) as a, Session.open(url) as b:
        lost = _interfering(a, b, 12)  # more races than a fixed number of retries would take
        a.append(Message(role="user", content="mine", id="mine"))
        assert len(lost) == 12
        lost = _interfering(a, b, 3)
        cp = a.checkpoint()
        assert len(lost) == 3
        lost = _interfering(a, b, 3)
        a.record_usage(prompt_tokens=10)
        assert len(lost) == 3
        b.reload()
        assert [m.content for m in b.view][-3:] == ["meanwhile 1", "meanwhile 2", "meanwhile 3"]
        assert b.view[12].id == "mine" and b.checkpoints[-1].id == cp and b.usage_totals.calls == 1
        # The checkpoint marks the view after catching up: every message appended before it was written.
        assert b.checkpoints[-1].messages == 16
        assert [m.content for m in a.view] == [m.content for m in b.view]


def test_usage_for_a_prompt_another_worker_compacted_away_does_not_inflate_tokens(server: str) -> None:
    # Worker a prepares and calls the model; meanwhile b compacts the session. a's usage is for the
    # long prompt it sent: anchored to b's compacted view, `tokens` read several times the view's size,
    # and the next prepare compacted again for nothing.
    from agentcontext import ContextEngine
    from agentcontext.testing import WordCounter

    def engine() -> ContextEngine:
        return ContextEngine(window=4_000, reserve=100, counter=WordCounter(), truncator=None)

    url = with_session(server, unique("usage"))
    with Session.open(url, engine=engine()) as a, Session.open(url, engine=engine()) as b:
        a.append(Message(role="user", content="the task"))
        for i in range(12):
            a.append(Message(role="assistant", content=f"step {i} " + "word " * 100))
            a.append(Message(role="user", content=f"go on {i}"))
        sent = a.prepare()
        assert not sent.report.compacted  # 1,300 words in a 3,900-word budget
        b.reload()
        b.compact(budget=500)
        a.record_usage(prompt_tokens=1_310)  # loses its race, reads b's compaction, then lands
        counted = WordCounter().count_messages(a.view)
        assert counted < 600 and a.tokens == counted
        assert a.last_usage is not None and not a.last_usage.prompt_in_view
        assert a.usage_totals.prompt_tokens == 1_310  # the usage itself is kept
        b.reload()
        assert b.tokens == counted  # every worker reads the record the same way
        a.prepare()
        a.record_usage(prompt_tokens=counted + 5)  # the next prompt is the view again: it anchors
        assert a.tokens == counted + 5 and a.last_usage is not None and a.last_usage.prompt_in_view

    # The same race when the prompt was built without the session's prepare: sent as the view was (no
    # prepare since the session opened), or prepared by an adapter with the engine itself (report=, as
    # the Agents SDK session does). Both were anchored to the compacted view: 6x too high.
    for how in ("unprepared", "report"):
        url = with_session(server, unique("usage-" + how))
        with Session.open(url, engine=engine()) as a:
            a.append(Message(role="user", content="the task"))
            for i in range(12):
                a.append(Message(role="assistant", content=f"step {i} " + "word " * 100))
                a.append(Message(role="user", content=f"go on {i}"))
        with Session.open(url, engine=engine()) as a, Session.open(url, engine=engine()) as b:
            report = a.engine.prepare(a.view).report if how == "report" else None
            b.compact(budget=500)
            a.record_usage(prompt_tokens=1_310, report=report)
            counted = WordCounter().count_messages(a.view)
            assert counted < 600 and a.tokens == counted, how
            assert a.last_usage is not None and not a.last_usage.prompt_in_view


def test_a_write_that_loses_races_for_too_long_says_to_reload(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcontext.session import _session

    monkeypatch.setattr(_session, "_RACE_TIMEOUT", 0.05)
    url = with_session(server, unique("races"))
    with Session.open(url) as a, Session.open(url) as b:
        _interfering(a, b, 10_000)
        with pytest.raises(ConcurrencyError, match=r"nothing was written.*session\.reload\(\)"):
            a.append(Message(role="user", content="mine", id="mine"))
        assert "mine" not in [m.id for m in b.view]


def test_a_tool_result_for_a_call_another_worker_reverted_is_refused_not_left_an_orphan(server: str) -> None:
    # One worker runs the model, another the tools. The first reverts to a checkpoint before the call while
    # the second runs it: the second's result used to land after the reverted view, answering nothing
    # (exported as an orphan, and turned into user text at the next prepare: the abandoned branch's output
    # in the prompt).
    url = with_session(server, unique("reverted"))
    with Session.open(url) as model, Session.open(url) as tools:
        model.append(Message(role="user", content="list the files"))
        cp = model.checkpoint()
        call = ToolCall(id="call_1", name="ls", arguments="{}")
        model.append(Message(role="assistant", content=None, tool_calls=(call,)))
        tools.reload()  # the tools worker sees the call and runs it
        model.revert_to(cp)
        result = Message(role="tool", tool_call_id="call_1", content="a.txt b.txt")
        with pytest.raises(
            InvalidMessageError, match="call 'call_1' was not appended: another worker reverted"
        ):
            tools.append(result)
        assert [m.role for m in tools.view] == ["user"]  # it read the revert; nothing was written
        model.reload()
        assert [m.role for m in model.view] == ["user"]
        assert not any(isinstance(r, MessageRecord) and r.message.id == result.id for r in model.records())
        # A result for a call still in the view lands after a revert that kept it.
        call2 = ToolCall(id="call_2", name="ls", arguments="{}")
        model.append(Message(role="assistant", content=None, tool_calls=(call2,)))
        cp3 = model.checkpoint()
        tools.reload()
        model.append(Message(role="user", content="also the hidden ones"))
        model.revert_to(cp3)
        tools.append(Message(role="tool", tool_call_id="call_2", content=".env a.txt"))
        model.reload()
        assert [m.role for m in model.view] == ["user", "assistant", "tool"]


def test_a_task_delivered_to_two_workers_is_appended_once(server: str) -> None:
    url = with_session(server, unique("twice"))
    task = Message(role="user", content="task 42", id="task-42")
    with Session.open(url) as a, Session.open(url) as b:
        a.append(task)
        b.reload()  # b has caught up (a prepare does the same) before the task reaches it too
        b.append(task)
        b.extend([task, task])
        a.append(Message(role="assistant", content="on it"))
        b.append(task)  # b is behind now: its write loses the race, and the task is in what it missed
        with pytest.raises(InvalidMessageError, match="already names a different message"):
            b.append(Message(role="user", content="another task", id="task-42"))
        a.reload()
        assert [m.id for m in a.view].count("task-42") == 1 and len(a.view) == 2
        assert sum(1 for r in a.records() if isinstance(r, MessageRecord) and r.message.id == "task-42") == 1


def test_a_worker_behind_the_others_does_not_deny_their_checkpoints_dmails_or_compactions(
    server: str,
) -> None:
    """One worker runs the model, another its tools: the second has read nothing since it opened."""
    from agentcontext.engine import ContextEngine
    from agentcontext.testing import WordCounter

    url = with_session(server, unique("behind"))
    engine = ContextEngine(window=900, reserve=100, counter=WordCounter())
    with Session.open(url, engine=engine) as a, Session.open(url, engine=engine) as b:
        a.append(Message(role="user", content="task"))
        cp = a.checkpoint(label="before the plan")
        a.append(Message(role="assistant", content="plan A"))
        # A checkpoint the model was shown by a is known to b's D-Mail tool and revert.
        assert b.handle_dmail({"checkpoint": None, "message": None}).count("before the plan") == 1
        # A D-Mail a sent is pending for b: cancelling it cancels it, and nobody delivers it later.
        a.send_dmail(cp, "plan A fails, try plan B")
        stale = Session.open(url, engine=engine)
        assert stale.pending_dmail is not None and stale.pending_dmail.text.startswith("plan A fails")
        assert b.cancel_dmail() is True
        b.append(Message(role="user", content="the user goes on after cancelling"))
        assert stale.deliver_dmail() is None and a.deliver_dmail() is None
        a.reload()
        assert [m.text for m in a.view] == ["task", "plan A", "the user goes on after cancelling"]
        # A revert b makes to a checkpoint it never saw taken.
        cp2 = a.checkpoint()
        a.append(Message(role="assistant", content="a step to take back"))
        stale.revert_to(cp2)
        assert [m.text for m in stale.view][-1] == "the user goes on after cancelling"
        stale.close()
        # What a compacted is recallable from b, which never saw the compaction or its artifacts.
        for i in range(12):
            call = ToolCall(id=f"c{i}", name="read", arguments="{}")
            a.extend(
                [
                    Message(role="assistant", tool_calls=(call,)),
                    Message(
                        role="tool", tool_call_id=f"c{i}", content=f"output {i} " + "w " * 120, id=f"out{i}"
                    ),
                ]
            )
        a.prepare()
        assert a.compactions
        n = a.compactions[-1].seq
        assert "output 0" in b.recall(f"compaction:{n}")
        assert "output 0" in b.handle_recall({"ref": "message:out0"})
        assert b.message("out1").text.startswith("output 1")


class _SlowSummarizer:
    """The offline summary, after a model's pause; counts the summaries asked for."""

    def __init__(self, pause: float) -> None:
        from agentcontext.summarizers import ExtractiveSummarizer

        self.pause, self.calls, self.inner = pause, 0, ExtractiveSummarizer()
        self._lock = threading.Lock()

    def summarize(self, request: object) -> str:
        import time

        with self._lock:
            self.calls += 1
        time.sleep(self.pause)
        return self.inner.summarize(request)  # type: ignore[arg-type]

    async def asummarize(self, request: object) -> str:
        with self._lock:
            self.calls += 1
        await asyncio.sleep(self.pause)
        return self.inner.summarize(request)  # type: ignore[arg-type]


def _tool_steps(session: Session, n: int) -> None:
    session.append(Message(role="user", content="fix the parser"))
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="cat", arguments="{}")
        session.extend(
            [
                Message(role="assistant", content=f"step {i}", tool_calls=(call,)),
                Message(role="tool", tool_call_id=f"c{i}", content=" ".join(f"t{i}x{k}" for k in range(60))),
            ]
        )


def test_two_event_loops_preparing_one_session_summarize_a_span_once(server: str) -> None:
    # One owner name per Session: the second loop "renewed" the first one's lease and summarized too.
    from agentcontext.engine import ContextEngine
    from agentcontext.testing import WordCounter

    def summaries_for_one_compaction(loops: int) -> int:
        slow = _SlowSummarizer(0.3)
        engine = ContextEngine(
            window=900, reserve=100, counter=WordCounter(), truncator=None, summarizer=slow
        )
        with Session.open(with_session(server, unique("loops")), engine=engine) as session:
            _tool_steps(session, 14)
            threads = [threading.Thread(target=lambda: asyncio.run(session.aprepare())) for _ in range(loops)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(session.compactions) == 1
        return slow.calls

    assert summaries_for_one_compaction(2) == summaries_for_one_compaction(1)


def test_a_lease_that_runs_out_during_a_prepare_is_reported(server: str) -> None:
    from agentcontext.engine import ContextEngine
    from agentcontext.exceptions import SessionWarning
    from agentcontext.testing import WordCounter

    slow = _SlowSummarizer(0.4)
    engine = ContextEngine(window=900, reserve=100, counter=WordCounter(), truncator=None, summarizer=slow)
    with Session.open(with_session(server, unique("lapse")), engine=engine, lease_ttl=0.2) as session:
        _tool_steps(session, 14)
        with pytest.warns(SessionWarning, match=r"lease ran out \(0.2 s, lease_ttl\).*Raise lease_ttl"):
            session.prepare()


def test_aprepare_leaves_the_event_loop_free_while_the_database_is_slow(server: str) -> None:
    # Store calls ran on the loop (and retried an outage with time.sleep): every other task stood still.
    from agentcontext.engine import ContextEngine
    from agentcontext.testing import WordCounter

    engine = ContextEngine(window=900, reserve=100, counter=WordCounter(), truncator=None)
    with Session.open(with_session(server, unique("loop")), engine=engine) as session:
        _tool_steps(session, 14)
        ticked = threading.Event()
        blocked: list[str] = []
        store = session.store

        def slow(name: str) -> object:
            real = getattr(store, name)

            def call(*args: object, **kwargs: object) -> object:
                # As a server that takes its time: the loop must run meanwhile (its ticker sets the event).
                ticked.clear()
                if not ticked.wait(timeout=5):
                    blocked.append(name)
                return real(*args, **kwargs)

            return call

        for name in ("load", "append", "acquire_lease", "release_lease"):
            setattr(store, name, slow(name))

        async def main() -> None:
            async def ticker() -> None:
                while True:
                    ticked.set()
                    await asyncio.sleep(0.001)

            tick = asyncio.create_task(ticker())
            prepared = await session.aprepare()
            tick.cancel()
            assert prepared.report.compacted

        asyncio.run(main())
        assert blocked == []


# ----------------------------------------------------------------------------- async


def test_the_async_side_speaks_the_same_protocol(server: str) -> None:
    url = with_session(server, unique("async"))

    async def scenario() -> list[object]:
        first, second = open_store(url), open_store(url)
        await first.aopen(create=True)  # type: ignore[attr-defined]
        await second.aopen(create=True)  # type: ignore[attr-defined]
        await first.aappend([_rec(0), _rec(1, "a")], expected_seq=0)  # type: ignore[attr-defined]
        with pytest.raises(ConcurrencyError):
            await second.aappend([_rec(0, "b")], expected_seq=0)  # type: ignore[attr-defined]
        missed = [r.data["seq"] async for r in second.aload(after=-1)]  # type: ignore[attr-defined]
        await second.aappend([_rec(2, "b")], expected_seq=2)  # type: ignore[attr-defined]
        after = [r.data["text"] async for r in first.aload(after=1)]  # type: ignore[attr-defined]
        leased = [
            await first.aacquire_lease("a", 30),  # type: ignore[attr-defined]
            await second.aacquire_lease("b", 30),  # type: ignore[attr-defined]
            await first.arelease_lease("a"),  # type: ignore[attr-defined]
            await second.aacquire_lease("b", 30),  # type: ignore[attr-defined]
        ]
        await first.aclose()  # type: ignore[attr-defined]
        await second.aclose()  # type: ignore[attr-defined]
        return [missed, after, leased]

    missed, after, leased = asyncio.run(scenario())
    assert missed == [0, 1] and after == ["b"] and leased == [True, False, True, True]
    sync = open_store(url, read_only=True)
    sync.open(create=False)
    assert [r.data["seq"] for r in sync.load()] == [
        0,
        1,
        2,
    ]  # what the async side wrote, read by the sync side


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_the_db_commands(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if kind == "sqlite":
        _cli_scenario(f"sqlite:///{tmp_path}/runs.db", capsys, fresh=True)
        return
    need(kind)
    if kind == "postgres":
        import psycopg

        schema = unique("ac_cli_")
        try:
            _cli_scenario(f"{PG_URL}?schema={schema}", capsys, fresh=True)
        finally:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        with redis_prefix() as url:  # already initialised: `db init` then has nothing to do
            _cli_scenario(url, capsys, fresh=False)


def _cli_scenario(url: str, capsys: pytest.CaptureFixture[str], *, fresh: bool) -> None:
    assert main(["db", "init", url]) == 0
    out = capsys.readouterr().out
    assert ("migrated" in out or "created" in out or "initialised" in out) if fresh else "up to date" in out
    assert main(["db", "init", url]) == 0 and "up to date" in capsys.readouterr().out
    for sid in ("alpha", "beta"):
        with Session.from_store(open_store(with_session(url, sid))) as s:
            s.append(Message(role="user", content="hi"))
    assert main(["db", "list", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(row["session"] for row in listed) == ["alpha", "beta"]
    assert all(row["records"] == 2 and row["updated"] for row in listed)
    assert main(["db", "list", url]) == 0 and "2 session(s)" in capsys.readouterr().out
    assert main(["db", "delete", url, "--session", "alpha"]) == 0
    assert "deleted session 'alpha'" in capsys.readouterr().out
    assert main(["db", "delete", url, "--session", "alpha"]) == 3
    assert "no session 'alpha'" in capsys.readouterr().err
    assert main(["db", "delete", with_session(url, "beta")]) == 0  # the session's own URL works too
    capsys.readouterr()
    with Session.from_store(open_store(with_session(url, "gamma"))) as s:
        s.append(Message(role="user", content="hi"))
    assert main(["db", "prune", url, "--older-than", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": [], "would_delete": []}
    assert main(["db", "prune", url, "--older-than", "0", "--dry-run"]) == 0
    assert "would delete 1 session(s)" in capsys.readouterr().out
    assert main(["db", "list", url, "--json"]) == 0 and len(json.loads(capsys.readouterr().out)) == 1
    assert main(["db", "prune", url, "--older-than", "0"]) == 0
    assert "deleted 1 session(s)" in capsys.readouterr().out
    assert main(["db", "list", url, "--json"]) == 0 and json.loads(capsys.readouterr().out) == []


def test_the_db_commands_reject_a_jsonl_path_and_a_bad_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "list", str(tmp_path / "a.jsonl")]) == 3
    assert "a JSONL session is one file" in capsys.readouterr().err
    assert main(["db", "list", "ftp://x/y"]) == 3
    assert "unknown session location scheme" in capsys.readouterr().err
    assert main(["db", "prune", "sqlite:///x.db", "--older-than", "-1"]) == 3
    assert main(["db", "delete", "sqlite:///x.db"]) == 3
    assert "--session ID" in capsys.readouterr().err


def test_the_session_commands_take_a_database_url_through_open_store(server: str) -> None:
    # What `Session.open(url)` will do once it routes through open_store: the same view from any store.
    url = with_session(server, unique("cli"))
    with Session.from_store(open_store(url)) as s:
        s.append(Message(role="user", content="first"))
        cp = s.checkpoint()
        s.append(Message(role="assistant", content="second"))
        s.revert_to(cp)
    with Session.from_store(open_store(url, read_only=True), create=False) as s:
        assert [m.text for m in s.view] == ["first"] and len(s.checkpoints) == 1


# ----------------------------------------------------------------------------- the guide


def test_the_database_guide_runs(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    guide = Path(__file__).resolve().parents[1] / "docs" / "sessions-on-databases.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    session_id = unique("doc")
    url = with_session(server, session_id)
    scope: dict[str, object] = {}
    for block in blocks:
        code = re.sub(r"^URL = .*$", f"URL = {url!r}", block, count=1, flags=re.M)
        exec(compile(code, str(guide), "exec"), scope)
    printed = capsys.readouterr().out.splitlines()
    assert "migrated" not in printed[0] and "initialised" not in printed[0]  # already set up: nothing to do
    assert printed[0] == "[]" or "no persistence" in printed[0]  # (the shared Redis runs without)
    assert printed[1].endswith(f"#{session_id}") and ":" + "//" in printed[1]
    store = open_store(url)
    store.open(create=False)
    assert store.acquire_lease("someone-else", 1)  # the guide's worker released its lease
    store.close()
