"""Session benchmarks (issues 5 and 12): append throughput, restore time, memory of a restored session.

1. Appends per second, one `Session.append` per message, on the JSONL store with
   each fsync policy, on SQLite (``synchronous=FULL`` and ``OFF``), on
   PostgreSQL (``synchronous_commit`` on and off), on Redis and in memory.
2. Restore time (`Session.from_store` of an existing log) for 10,000 and
   100,000 messages, JSONL, SQLite, PostgreSQL and Redis: wall and CPU time,
   best of three.
3. Memory of a restored 100,000-message session (tracemalloc, after a full
   collection) relative to the text it holds (UTF-8 bytes of message content,
   tool names and arguments) and to the size of its file.

Messages are the 3,522 messages of the 63 real conversations in
``/work/shared/eval/conversations`` (OpenAI format) repeated with fresh ids, so
sizes follow real agent logs (tool outputs dominate); without that directory,
`agentcontext.testing.make_conversation` stands in.

4. Side by side (``--peers``): the OpenAI Agents SDK's own ``RedisSession``
   (``agents.extensions.memory``) on the same messages and the same Redis
   server: ``add_items`` of one item per message, and ``get_items`` of the whole
   history, beside `RedisStore`.

PostgreSQL and Redis are the servers at ``--postgres`` and ``--redis`` (default:
the local ones the tests use); each run works in a fresh schema / key prefix
and removes it afterwards. A server that does not answer is left out of the tables.

Run:  python bench/bench_session.py            (about 3 minutes on 2 cores)
      python bench/bench_session.py --write    (also update the Sessions sections of bench/RESULTS.md)
      python bench/bench_session.py --quick    (small sizes, a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from agentcontext.messages import Message, iter_text
from agentcontext.session import JSONLStore, MemoryStore, Session, SessionStore, SQLiteStore
from agentcontext.session.stores import open_database, open_store
from agentcontext.testing import make_conversation

EVAL = Path("/work/shared/eval/conversations")
RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- session-results -->", "<!-- /session-results -->"
DB_BEGIN, DB_END = "<!-- session-db-results -->", "<!-- /session-db-results -->"


def corpus() -> tuple[list[Message], str]:
    """The message pool to cycle through, and where it came from."""
    if EVAL.is_dir():
        from agentcontext.formats import openai as oai

        pool: list[Message] = []
        for path in sorted(EVAL.glob("*.jsonl")):
            dicts = [
                json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
            ]
            pool.extend(oai.to_messages(dicts))
        return pool, f"the {len(pool):,} messages of the 63 eval conversations"
    pool = make_conversation(seed=1, rounds=400, steps=(1, 4))
    return pool, f"{len(pool):,} generated messages (eval conversations not found)"


def fresh(pool: Sequence[Message], n: int) -> list[Message]:
    """``n`` messages cycled from ``pool``, each with a new random id (as an agent would append them)."""
    out = []
    for i in range(n):
        m = pool[i % len(pool)]
        out.append(
            Message(
                role=m.role,
                content=m.content,
                tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
            )
        )
    return out


def text_bytes(msgs: Sequence[Message]) -> int:
    return sum(len(t.encode("utf-8")) for m in msgs for t in iter_text(m))


# ----------------------------------------------------------------------------- database servers


class Servers:
    """A fresh PostgreSQL schema and Redis key prefix for this run, or None for a server that does not answer."""

    def __init__(self, postgres: str, redis: str) -> None:
        self.postgres: str | None = None
        self.redis: str | None = None
        self._postgres_base, self._redis_base = postgres, redis
        self.notes: list[str] = []

    def __enter__(self) -> Servers:
        tag = uuid.uuid4().hex[:10]
        for kind, base, param in (
            ("postgres", self._postgres_base, f"schema=bench_{tag}"),
            ("redis", self._redis_base, f"prefix=bench:{tag}"),
        ):
            url = f"{base}{'&' if '?' in base else '?'}{param}"
            try:
                db = open_database(url)
                db.init()
                db.close()
            except Exception as exc:  # a missing client or server: leave it out, say why
                self.notes.append(f"{kind} left out: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                print(f"  {self.notes[-1]}", file=sys.stderr)
                continue
            setattr(self, kind, url)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.postgres is not None:
            import psycopg

            schema = self.postgres.rsplit("schema=", 1)[1]
            with psycopg.connect(self._postgres_base, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        if self.redis is not None:
            import redis

            prefix = self.redis.rsplit("prefix=", 1)[1]
            client = redis.Redis.from_url(self._redis_base)
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.unlink(*keys[i : i + 500])
            client.close()

    def store(self, kind: str, session: str, **options: object) -> SessionStore:
        url = self.postgres if kind == "postgres" else self.redis
        assert url is not None
        return open_store(f"{url}&session={session}", **options)


# ----------------------------------------------------------------------------- appends


def bench_appends(
    pool: Sequence[Message], directory: Path, quick: bool, servers: Servers | None = None
) -> list[tuple[str, int, float]]:
    rows = []
    cases: list[tuple[str, Callable[[Path], SessionStore], int]] = [
        ("JSONL, fsync always", lambda d: JSONLStore(d / "a.jsonl", fsync="always"), 300 if quick else 1_000),
        (
            "JSONL, fsync interval (1 s)",
            lambda d: JSONLStore(d / "b.jsonl", fsync="interval"),
            2_000 if quick else 20_000,
        ),
        (
            "JSONL, fsync never",
            lambda d: JSONLStore(d / "c.jsonl", fsync="never"),
            2_000 if quick else 20_000,
        ),
        (
            "SQLite, synchronous FULL",
            lambda d: SQLiteStore(d / "d.db", fsync="always"),
            300 if quick else 1_000,
        ),
        (
            "SQLite, synchronous OFF",
            lambda d: SQLiteStore(d / "e.db", fsync="never"),
            2_000 if quick else 20_000,
        ),
        ("memory", lambda _d: MemoryStore(), 2_000 if quick else 20_000),
    ]
    if servers is not None and servers.postgres:
        cases += [
            (
                "PostgreSQL, synchronous_commit on",
                lambda _d: servers.store("postgres", "appends-durable"),
                300 if quick else 1_000,
            ),
            (
                "PostgreSQL, synchronous_commit off (fsync never)",
                lambda _d: servers.store("postgres", "appends-fast", fsync="never"),
                1_000 if quick else 5_000,
            ),
        ]
    if servers is not None and servers.redis:
        cases.append(("Redis", lambda _d: servers.store("redis", "appends"), 1_000 if quick else 5_000))
    for label, make, n in cases:
        msgs = fresh(pool, n)
        session = Session.from_store(make(directory))
        start = time.perf_counter()
        for m in msgs:
            session.append(m)
        elapsed = time.perf_counter() - start
        session.close()
        rows.append((label, n, n / elapsed))
        print(f"  appends  {label:<30} {n / elapsed:>10,.0f}/s  ({n:,} messages)", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- restore


def build(store: SessionStore, msgs: Sequence[Message]) -> None:
    session = Session.from_store(store)
    for i in range(0, len(msgs), 1_000):
        session.extend(msgs[i : i + 1_000])
    session.close()


def timed_restore(make: Callable[[], SessionStore], runs: int) -> tuple[float, float, int]:
    walls, cpus = [], []
    n = 0
    for _ in range(runs):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        session = Session.from_store(make(), create=False)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        n = len(session.view)
        session.close()
        del session
    return min(walls), min(cpus), n


def timed_load(make: Callable[[], SessionStore], runs: int) -> tuple[float, float, int]:
    """Best-of-``runs`` wall and CPU time of reading every record (``store.load``: fetched and parsed)."""
    walls, cpus = [], []
    n = 0
    for _ in range(runs):
        store = make()
        store.open(create=False)
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        n = sum(1 for _ in store.load())
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        store.close()
    return min(walls), min(cpus), n


def bench_restore(
    pool: Sequence[Message],
    directory: Path,
    sizes: Sequence[int],
    servers: Servers | None = None,
    loads: list[tuple[str, int, float, float, int]] | None = None,
) -> list[tuple[str, int, float, float, int]]:
    rows = []
    for n in sizes:
        msgs = fresh(pool, n)
        jsonl, db = directory / f"r{n}.jsonl", directory / f"r{n}.db"
        build(JSONLStore(jsonl, fsync="never"), msgs)
        build(SQLiteStore(db, fsync="never"), msgs)
        cases: list[tuple[str, Callable[[], SessionStore], int]] = [
            ("JSONL", lambda p=jsonl: JSONLStore(p, read_only=True), jsonl.stat().st_size),
            ("SQLite", lambda p=db: SQLiteStore(p, read_only=True), db.stat().st_size),
        ]
        for kind, label in (("postgres", "PostgreSQL"), ("redis", "Redis")):
            if servers is not None and getattr(servers, kind):
                build(
                    servers.store(kind, f"restore-{n}", **({"fsync": "never"} if kind == "postgres" else {})),
                    msgs,
                )
                size = jsonl.stat().st_size  # the same records, as JSON text
                cases.append(
                    (label, lambda k=kind, n=n: servers.store(k, f"restore-{n}", read_only=True), size)
                )
        for label, make, size in cases:
            wall, cpu, restored = timed_restore(make, runs=3)
            assert restored == n
            rows.append((label, n, wall, cpu, size))
            print(
                f"  restore  {label:<10} {n:>8,} messages  wall {wall:.2f} s  cpu {cpu:.2f} s  ({size / 1e6:.0f} MB)",
                file=sys.stderr,
            )
            if loads is not None:
                wall, cpu, read = timed_load(make, runs=3)
                assert read == n + 1  # the header too
                loads.append((label, n, wall, cpu, size))
                print(
                    f"  load     {label:<10} {n:>8,} records   wall {wall:.2f} s  cpu {cpu:.2f} s",
                    file=sys.stderr,
                )
        del msgs
    return rows


# ----------------------------------------------------------------------------- peers


def bench_sdk_redis(
    pool: Sequence[Message], servers: Servers, sizes: Sequence[int], appends: int
) -> list[tuple[str, int, float]]:
    """The Agents SDK's RedisSession on the same messages (as Chat Completions dicts) and server."""
    try:
        from agents.extensions.memory import RedisSession
    except Exception as exc:  # not installed, or its own extra missing
        servers.notes.append(f"Agents SDK RedisSession left out: {type(exc).__name__}: {exc}")
        return []
    from agentcontext.formats import openai as oai

    assert servers.redis is not None
    base, prefix = servers.redis.split("?prefix=")
    rows: list[tuple[str, int, float]] = []

    async def run() -> None:
        items = oai.from_messages(fresh(pool, appends), validate=False)
        session = RedisSession.from_url(f"sdk-appends-{uuid.uuid4().hex[:8]}", url=base)
        session._messages_key = f"{prefix}:sdk:appends"  # type: ignore[attr-defined]  # under our prefix: cleaned up
        session._session_key = f"{prefix}:sdk:appends:meta"  # type: ignore[attr-defined]
        start = time.perf_counter()
        for item in items:
            await session.add_items([item])  # type: ignore[list-item]
        rows.append(
            ("appends/s (one add_items per message)", appends, appends / (time.perf_counter() - start))
        )
        await session.close()
        for n in sizes:
            session = RedisSession.from_url(f"sdk-restore-{n}", url=base)
            session._messages_key = f"{prefix}:sdk:restore:{n}"  # type: ignore[attr-defined]
            session._session_key = f"{prefix}:sdk:restore:{n}:meta"  # type: ignore[attr-defined]
            msgs = oai.from_messages(fresh(pool, n), validate=False)
            for i in range(0, n, 1_000):
                await session.add_items(msgs[i : i + 1_000])  # type: ignore[arg-type]
            best = float("inf")
            for _ in range(3):
                gc.collect()
                start = time.perf_counter()
                got = await session.get_items()
                best = min(best, time.perf_counter() - start)
                assert len(got) == n
            rows.append(("get_items of the whole history (s)", n, best))
            await session.close()

    asyncio.run(run())
    for label, n, value in rows:
        print(f"  sdk      {label:<40} {value:>10,.2f}  ({n:,} messages)", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- memory


def bench_memory(pool: Sequence[Message], directory: Path, n: int) -> dict[str, float]:
    path = directory / f"r{n}.jsonl"
    if not path.exists():
        build(JSONLStore(path, fsync="never"), fresh(pool, n))
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    session = Session.open(path, read_only=True)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    text = text_bytes(session.view)
    result = {
        "messages": float(len(session.view)),
        "text_bytes": float(text),
        "file_bytes": float(path.stat().st_size),
        "memory_bytes": float(used),
        "peak_bytes": float(peak),
    }
    session.close()
    print(
        f"  memory   {n:,} messages: {used / 1e6:.0f} MB for {text / 1e6:.0f} MB of text "
        f"({used / text:.2f}x; file {path.stat().st_size / 1e6:.0f} MB, peak {peak / 1e6:.0f} MB)",
        file=sys.stderr,
    )
    return result


# ----------------------------------------------------------------------------- report


def report(
    source: str,
    appends: list[tuple[str, int, float]],
    restores: list[tuple[str, int, float, float, int]],
    memory: dict[str, float],
) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        BEGIN,
        f"Messages: {source}, repeated with fresh ids. Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, load average {load:.1f} when the run started (other jobs share the machine: "
        "CPU time is the steadier figure).",
        "",
        "### Appends per second (one `Session.append` per message)",
        "| store | appends/s | messages |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {label} | {rate:,.0f} | {n:,} |" for label, n, rate in appends]
    lines += [
        "",
        "### Restore (`Session.open` of an existing log; best of 3)",
        "| store | messages | file | wall | CPU |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {label} | {n:,} | {size / 1e6:,.0f} MB | {wall:.2f} s | {cpu:.2f} s |"
        for label, n, wall, cpu, size in restores
    ]
    m = memory
    lines += [
        "",
        "### Memory of a restored session (tracemalloc, after a full collection)",
        "| messages | text (UTF-8) | file | memory | memory / text | peak during restore |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {m['messages']:,.0f} | {m['text_bytes'] / 1e6:,.0f} MB | {m['file_bytes'] / 1e6:,.0f} MB | "
        f"{m['memory_bytes'] / 1e6:,.0f} MB | {m['memory_bytes'] / m['text_bytes']:.2f}x | "
        f"{m['peak_bytes'] / 1e6:,.0f} MB |",
        END,
    ]
    return "\n".join(lines)


SECTION_HEAD = """## Sessions

Persistent sessions (issue 5): how fast records are appended under each durability policy, how long a
restore takes, and what a restored session costs in memory. Targets: a 100,000-message restore under 2 s,
memory under 2x the text.

```
python bench/bench_session.py --write   # about 2 minutes on 2 cores
```

"""


def write(section: str) -> None:
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + SECTION_HEAD + section + "\n"
    RESULTS.write_text(text, encoding="utf-8")


DB_SECTION_HEAD = """## Sessions on PostgreSQL and Redis

The stores many workers share (issue 12) beside the embedded ones, in one run: appends per second and
restore time for 10,000 and 100,000 messages. Goal: restore 100,000 messages in at most 2 s from either
server. Then the OpenAI Agents SDK's own `RedisSession` on the same messages and server.

```
python bench/bench_session.py --servers --write   # about 3 minutes on 2 cores
```

"""


def report_servers(
    source: str,
    appends: list[tuple[str, int, float]],
    restores: list[tuple[str, int, float, float, int]],
    loads: list[tuple[str, int, float, float, int]],
    peers: list[tuple[str, int, float]],
    notes: list[str],
) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        DB_BEGIN,
        f"Messages: {source}, repeated with fresh ids. Python {platform.python_version()}, {os.cpu_count()} "
        f"cores, load average {load:.1f} when the run started; PostgreSQL and Redis on the same machine "
        "(loopback), Redis without persistence (a restart loses its data: `agentcontext db init` warns).",
        "",
        "### Appends per second (one `Session.append` per message)",
        "| store | appends/s | messages |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {label} | {rate:,.0f} | {n:,} |" for label, n, rate in appends]
    lines += [
        "",
        "### Restore (`Session.from_store` of an existing log: read, decode, replay; best of 3)",
        "| store | messages | JSON text | wall | CPU |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {label} | {n:,} | {size / 1e6:,.0f} MB | {wall:.2f} s | {cpu:.2f} s |"
        for label, n, wall, cpu, size in restores
    ]
    lines += [
        "",
        "### Reading the records only (`store.load`: fetched and parsed, no replay; best of 3)",
        "| store | messages | wall | CPU |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {label} | {n:,} | {wall:.2f} s | {cpu:.2f} s |" for label, n, wall, cpu, _ in loads]
    if peers:
        lines += [
            "",
            "### The Agents SDK's RedisSession on the same server and messages",
            "| what | messages | value |",
            "| --- | ---: | ---: |",
        ]
        lines += [f"| {label} | {n:,} | {value:,.2f} |" for label, n, value in peers]
        lines += [
            f"| agentcontext `RedisStore.load` (s, from the table above) | {n:,} | {wall:.2f} |"
            for label, n, wall, _, _ in loads
            if label == "Redis"
        ]
    for note in notes:
        lines += ["", f"Note: {note}"]
    lines.append(DB_END)
    return "\n".join(lines)


def write_servers(section: str) -> None:
    text = RESULTS.read_text(encoding="utf-8")
    if DB_BEGIN in text and DB_END in text:
        head, rest = text.split(DB_BEGIN, 1)
        text = head + section + rest.split(DB_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + DB_SECTION_HEAD + section + "\n"
    RESULTS.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--write", action="store_true", help="update the Sessions section of bench/RESULTS.md"
    )
    parser.add_argument(
        "--servers",
        action="store_true",
        help="the database run: PostgreSQL and Redis beside JSONL and SQLite, and the Agents SDK's RedisSession",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("AGENTCONTEXT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"),
        help="PostgreSQL database to use (a fresh schema is made and dropped)",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("AGENTCONTEXT_TEST_REDIS", "redis://127.0.0.1:6379/0"),
        help="Redis server to use (a fresh key prefix is made and removed)",
    )
    args = parser.parse_args()
    pool, source = corpus()
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)
    if args.servers:
        with (
            tempfile.TemporaryDirectory(prefix="bench-session-") as tmp,
            Servers(args.postgres, args.redis) as servers,
        ):
            directory = Path(tmp)
            appends = [
                row
                for row in bench_appends(pool, directory, args.quick, servers)
                if not row[0].startswith(("memory", "JSONL, fsync interval"))
            ]
            loads: list[tuple[str, int, float, float, int]] = []
            restores = bench_restore(pool, directory, sizes, servers, loads)
            peers: list[tuple[str, int, float]] = []
            if servers.redis:
                peers = bench_sdk_redis(pool, servers, sizes, 1_000 if args.quick else 5_000)
            section = report_servers(source, appends, restores, loads, peers, servers.notes)
        print(section)
        if args.write:
            write_servers(section)
            print(f"updated {RESULTS}", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        directory = Path(tmp)
        appends = bench_appends(pool, directory, args.quick)
        restores = bench_restore(pool, directory, sizes)
        memory = bench_memory(pool, directory, sizes[-1])
    section = report(source, appends, restores, memory)
    print(section)
    if args.write:
        write(section)
        print(f"updated {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
