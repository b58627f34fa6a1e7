"""Many writers, one session, real servers: nothing lost, nothing doubled, nothing torn.

- Eight processes, and eight asyncio tasks, append to one session. A writer
  that loses a race gets `ConcurrencyError`, reads only what it missed
  (``load(after=...)``) and retries. The log ends with exactly every message,
  each once, in each writer's order, with no gap in the seqs.
- Processes (four; eight in the long profile) share one session through the
  `Session` API, preparing (and so compacting) every ten appends: a worker
  that loses a race reopens the session, which replays the others' records,
  compactions included; every prompt is valid and every message is in the log
  once.
- A writer killed with SIGKILL at random moments never loses an append that
  returned, and never leaves a torn record (a restore with warnings as errors).
- The database server is killed and restarted while writers run (a private
  server on a free port, never the shared one): writers retry through the
  outage, and no acknowledged record is lost or written twice.
- A lease left by a killed worker expires.

The sizes follow ``tests/_sizes.py``: the long profile appends 1,000 messages
per writer and kills the writer 50 times.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.context import ForkServerContext
from pathlib import Path

import pytest

import db_workers
from _sizes import runs
from agentcontext.exceptions import ConcurrencyError
from agentcontext.messages import Message
from agentcontext.session import Session, SessionStore, SupportsLease
from agentcontext.session.stores import open_database, open_store
from agentcontext.session.stores.postgres import close_pools
from db_servers import PrivatePostgres, PrivateRedis, database, need, unique, with_session

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and forkserver")

SERVERS = ["postgres", "redis"]
WRITERS = 8


@pytest.fixture(scope="module")
def workers() -> ForkServerContext:
    """Processes forked from a server that has imported the package and the database clients once."""
    context = multiprocessing.get_context("forkserver")
    # By module name, from the server's own sys.path (Python 3.11's forkserver ignores the tests'
    # sys.path): the package and its clients; the workers then import only db_workers itself.
    context.set_forkserver_preload(
        ["agentcontext.session", "agentcontext.session.stores.postgres", "agentcontext.session.stores.redis"]
    )
    return context


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with database(str(request.param)) as url:
        yield url


def _all_records(url: str) -> list[dict[str, object]]:
    store = open_store(url, read_only=True)
    store.open(create=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn or damaged record would be a warning
        records = [r.data for r in store.load()]
    store.close()
    return records


def _check_log(url: str, writers: list[str], n: int) -> list[str]:
    """Exactly ``n`` messages from each writer, once each, in its order; seqs 0..N without a gap."""
    records = _all_records(url)
    assert [r["seq"] for r in records] == list(range(1 + len(writers) * n)), "a gap or a duplicate seq"
    ids = [str(r["message"]["id"]) for r in records[1:]]  # type: ignore[index]
    assert len(set(ids)) == len(ids)
    for w in writers:
        assert [i for i in ids if i.startswith(f"msg_{w}_")] == [f"msg_{w}_{j}" for j in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Session.from_store(open_store(url, read_only=True), create=False) as session:
            assert [m.id for m in session.view] == ids  # the view every worker would restore
    return ids


def _check_catch_up(ids: list[str], writer: str, read: list[int]) -> None:
    """A writer read each record it missed once, and never its own: O(missed), not a restore per race."""
    own = {seq for seq, i in enumerate(ids, start=1) if i.startswith(f"msg_{writer}_")}
    assert len(read) == len(set(read)), f"{writer} read a record twice"
    assert not own & set(read), f"{writer} re-read its own records"


def _run_all(workers: ForkServerContext, target: Callable[..., None], args: list[tuple[object, ...]]) -> None:
    """Start one worker process per argument tuple, all at once, and wait for each to succeed."""
    procs = [workers.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0


# ----------------------------------------------------------------------------- races


def test_eight_processes_append_to_one_session(
    server: str, workers: ForkServerContext, tmp_path: Path
) -> None:
    url = with_session(server, unique("race"))
    Session.from_store(open_store(url)).close()  # the header, seq 0
    n = runs(20, 1000)
    names = [f"p{i}" for i in range(WRITERS)]
    _run_all(workers, db_workers.append_worker, [(url, name, n, str(tmp_path / name)) for name in names])
    ids = _check_log(url, names, n)
    results = {name: json.loads((tmp_path / name).read_text()) for name in names}
    for name, result in results.items():
        _check_catch_up(ids, name, result["read"])


def test_workers_forked_after_the_parent_used_the_database_have_their_own_connections(
    server: str, tmp_path: Path
) -> None:
    """A preloaded app (gunicorn --preload) opens a session, then forks workers: none may use the parent's sockets."""
    url = with_session(server, unique("fork"))
    parent = Session.open(url, **db_workers.options(url))  # type: ignore[arg-type]
    parent.append(Message(role="user", content="before the fork", id="before"))
    Session.open(url).close()  # closed, but its pool (and connection) stays for reuse
    n, names = 10, ["f0", "f1", "f2", "f3"]
    assert _forked(db_workers.forked_appender, [(url, name, n, str(tmp_path / name)) for name in names])
    # The parent's connections outlived its children (none was closed under it).
    parent.append(Message(role="user", content="after the fork", id="after"))
    ids = [m.id for m in parent.view]
    parent.close()
    assert ids[0] == "before" and ids[-1] == "after" and len(ids) == 2 + n * len(names)
    for name in names:
        assert [i for i in ids if i.startswith(f"msg_{name}_")] == [f"msg_{name}_{j}" for j in range(n)]


def test_a_store_opened_on_an_event_loop_before_a_fork_gets_its_own_connections_in_the_child(
    server: str, tmp_path: Path
) -> None:
    url = with_session(server, unique("afork"))
    store = open_store(url)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(store.aopen(create=True))  # type: ignore[attr-defined]
        loop.run_until_complete(store.aappend([{"seq": 0, "type": "note", "ts": None}], expected_seq=0))  # type: ignore[attr-defined]
        names = ["a0", "a1", "a2"]
        assert _forked(
            db_workers.forked_async_appender, [(store, name, 10, str(tmp_path / name)) for name in names]
        )
        loop.run_until_complete(store.aclose())  # type: ignore[attr-defined]
    finally:
        loop.close()
    assert len(_all_records(url)) == 31


def _forked(target: Callable[..., None], calls: list[tuple[object, ...]]) -> bool:
    """Run ``target(*call)`` in processes forked from this one; True when each wrote ``ok`` to its file (the last argument)."""
    context = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() of a process with threads
        procs = [context.Process(target=target, args=call) for call in calls]
        for p in procs:
            p.start()
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    outs = [Path(str(call[-1])) for call in calls]
    results = [out.read_text() if out.exists() else "hung" for out in outs]
    assert results == ["ok"] * len(calls)
    return True


def test_eight_processes_share_one_session_and_its_compactions(
    server: str, workers: ForkServerContext, tmp_path: Path
) -> None:
    # Through the Session API: whoever prepares may compact, and the others see that compaction
    # when they reopen after losing a race; no message is lost, every prompt sent is valid.
    url = with_session(server, unique("shared"))
    Session.from_store(open_store(url)).close()
    n = runs(10, 200)  # each worker prepares every 10 appends
    names = [f"s{i}" for i in range(runs(4, WRITERS))]
    _run_all(workers, db_workers.session_worker, [(url, name, n, str(tmp_path / name)) for name in names])
    results = [json.loads((tmp_path / name).read_text()) for name in names]
    assert all(r["invalid"] == [] for r in results), results
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Session.from_store(open_store(url, read_only=True), create=False) as session:
            for name in names:
                for i in range(n):
                    assert session.message(f"msg_{name}_{i}").id == f"msg_{name}_{i}"  # all in the log
            assert session.compactions, "the window is small: the prepares must have compacted"
            records = list(session.records())
            assert [r.seq for r in records] == list(range(len(records)))  # type: ignore[attr-defined]
            appended = [r for r in records if type(r).__name__ == "MessageRecord"]
            assert len(appended) == len(names) * n  # each message once


def test_a_dmail_eight_workers_race_to_deliver_is_delivered_once(
    server: str, workers: ForkServerContext, tmp_path: Path
) -> None:
    url = with_session(server, unique("dmail"))
    with Session.from_store(open_store(url)) as session:
        session.append(Message(role="user", content="task"))
        cp = session.checkpoint()
        session.append(Message(role="assistant", content="a wrong turn"))
        session.send_dmail(cp, "Take the other branch.")
    names = [f"d{i}" for i in range(WRITERS)]
    start_at = time.time() + 1.0
    _run_all(
        workers, db_workers.dmail_worker, [(url, name, start_at, str(tmp_path / name)) for name in names]
    )
    delivered = [json.loads((tmp_path / name).read_text())["delivered"] for name in names]
    assert delivered.count(True) == 1, delivered
    with Session.from_store(open_store(url, read_only=True), create=False) as session:
        reverts = [r for r in session.records() if type(r).__name__ == "RevertRecord"]
        assert len(reverts) == 1 and session.pending_dmail is None
        texts = [m.text for m in session.view]
        assert texts[0] == "task" and sum("Take the other branch." in t for t in texts) == 1
        for name in names:  # every worker's append is in the log, whichever side of the revert it fell
            assert session.message(f"msg_{name}").text == f"{name} ran"


def test_eight_asyncio_tasks_append_to_one_session(server: str) -> None:
    url = with_session(server, unique("tasks"))
    Session.from_store(open_store(url)).close()
    n = runs(25, 1000)
    names = [f"t{i}" for i in range(WRITERS)]

    async def race() -> list[dict[str, object]]:
        return list(await asyncio.gather(*(db_workers.async_append_worker(url, name, n) for name in names)))

    results = asyncio.run(race())
    ids = _check_log(url, names, n)
    for name, result in zip(names, results, strict=True):
        _check_catch_up(ids, name, result["read"])  # type: ignore[arg-type]
    assert sum(int(r["conflicts"]) for r in results) > 0  # type: ignore[call-overload]  # tasks interleave


# ----------------------------------------------------------------------------- kills


@pytest.mark.slow
def _kill_after_ready(
    workers: ForkServerContext, target: object, args: tuple[object, ...], log: Path, delay: float
) -> list[str]:
    """Start a worker that logs ``ready ...`` first, SIGKILL it ``delay`` seconds later; its finished lines."""
    child = workers.Process(target=target, args=args)
    child.start()
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().startswith("ready")):
        assert child.is_alive() and time.monotonic() < deadline, "the writer did not start"
        time.sleep(0.005)
    time.sleep(delay)
    child.kill()
    child.join(timeout=60)
    return log.read_text().split("\n")[:-1]  # a last line without newline was not finished


def _check_confirmed(url: str, confirmed: dict[int, str], round_no: int) -> dict[int, dict[str, object]]:
    """No torn record, no gap, and every append that returned is in the log at its seq; the records by seq."""
    records = _all_records(url)  # no torn record: warnings are errors there
    assert [r["seq"] for r in records] == list(range(len(records)))
    by_seq = {int(r["seq"]): r for r in records}  # type: ignore[call-overload]
    for seq, mid in confirmed.items():
        assert by_seq[seq]["message"]["id"] == mid, f"round {round_no}: seq {seq} lost"  # type: ignore[index]
    return by_seq


def test_a_writer_killed_at_random_moments_never_loses_an_acknowledged_append(
    server: str, workers: ForkServerContext, tmp_path: Path
) -> None:
    url = with_session(server, unique("kill"))
    rng = random.Random(20240601)
    confirmed: dict[int, str] = {}  # seq -> message id, logged after append returned
    kills = runs(6, 50)
    mid_loop = 0
    for round_no in range(kills):
        log = tmp_path / f"round{round_no}.log"
        args = (url, round_no, str(log))
        lines = _kill_after_ready(workers, db_workers.killable_writer, args, log, rng.uniform(0.0, 0.05))
        ready = int(lines[0].split()[1])
        assert ready >= max(confirmed, default=0), "the restore lost records"
        done = [line.split() for line in lines[1:]]
        confirmed.update((int(seq), mid) for seq, mid in done)
        mid_loop += bool(done)
        _check_confirmed(url, confirmed, round_no)
    assert mid_loop >= kills // 2, "the kills should mostly land while the writer is appending"


def test_a_worker_killed_mid_compaction_leaves_a_log_that_restores_to_a_valid_view(
    server: str, workers: ForkServerContext, tmp_path: Path
) -> None:
    """SIGKILL while appending, summarizing or writing a compaction: nothing acknowledged is lost, a
    compaction record is whole or absent, and the next worker restores a valid view and carries on."""
    from agentcontext.engine import ContextEngine
    from agentcontext.invariants import check_messages
    from agentcontext.testing import WordCounter

    url = with_session(server, unique("killc"))
    rng = random.Random(20241124)
    confirmed: dict[int, str] = {}
    compactions: set[int] = set()
    kills = runs(4, 50)
    for round_no in range(kills):
        log = tmp_path / f"round{round_no}.log"
        args = (url, round_no, str(log))
        lines = _kill_after_ready(workers, db_workers.compacting_writer, args, log, rng.uniform(0.02, 0.3))
        for line in lines[1:]:
            kind, seq, *rest = line.split()
            if kind == "m":
                confirmed[int(seq)] = rest[0]
            else:
                compactions.add(int(seq))
        by_seq = _check_confirmed(url, confirmed, round_no)
        for seq in compactions:
            assert by_seq[seq]["type"] == "compaction", f"round {round_no}: compaction {seq} lost"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            engine = ContextEngine(window=900, reserve=100, counter=WordCounter(), truncator=None)
            with Session.from_store(open_store(url), engine=engine, create=False, lease_ttl=2) as session:
                assert check_messages(session.view) == []
                assert check_messages(session.prepare().messages) == []
    assert len(compactions) >= kills // 2, "the writer should compact between most kills"


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_a_lease_left_by_a_killed_worker_expires(
    kind: str, workers: ForkServerContext, tmp_path: Path
) -> None:
    if kind == "sqlite":
        _lease_scenario(f"sqlite:///{tmp_path}/runs.db?session=s", workers, tmp_path)
        return
    need(kind)
    with database(kind) as server:
        _lease_scenario(with_session(server, unique("lease")), workers, tmp_path)


def _lease_scenario(url: str, workers: ForkServerContext, tmp_path: Path) -> None:
    marker = tmp_path / "leased"
    # A ttl long enough that the kill and the next worker's first try come before it lapses on a busy machine.
    holder = workers.Process(target=db_workers.lease_holder, args=(url, "killed-worker", 3.0, str(marker)))
    holder.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert holder.is_alive() and time.monotonic() < deadline
        time.sleep(0.005)
    assert marker.read_text() == "leased"
    holder.kill()
    holder.join(timeout=60)
    store = open_store(url)
    store.open(create=True)
    assert isinstance(store, SupportsLease)
    refused = 0
    while not store.acquire_lease("next-worker", 30):
        refused += 1  # the dead worker's lease stands until its ttl runs out ...
        assert refused < 1000, "the lease never expired"
        time.sleep(0.02)
    assert refused > 0  # ... and then it lapses by itself
    assert not store.release_lease("killed-worker")
    assert store.release_lease("next-worker")
    store.close()


# ----------------------------------------------------------------------------- server restarts


class _Appenders:
    """Writer threads appending to one session, each retrying through outages; counts what was acknowledged."""

    def __init__(self, url: str, writers: int, n: int) -> None:
        self.url = url
        self.names = [f"r{i}" for i in range(writers)]
        self.n = n
        self.acked = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(name,)) for name in self.names]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=600)

    def _run(self, name: str) -> None:
        try:
            store: SessionStore = open_store(self.url, retry_timeout=60)
            store.open(create=True)
            last = max((int(r.data["seq"]) for r in store.load()), default=-1)  # type: ignore[call-overload]
            for i in range(self.n):
                while True:
                    try:
                        record = db_workers._record(last + 1, name, i)
                        store.append([record], expected_seq=last + 1)  # type: ignore[list-item]
                        last += 1
                        break
                    except ConcurrencyError:
                        for r in store.load(after=last):
                            last = int(r.data["seq"])  # type: ignore[call-overload]
                with self._lock:
                    self.acked += 1
                time.sleep(0.002)
            store.close()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def wait_for(self, acked: int) -> None:
        deadline = time.monotonic() + 120
        while self.acked < acked and not self.errors:
            assert time.monotonic() < deadline
            time.sleep(0.01)


def test_redis_restarts_while_writers_run_lose_nothing_acknowledged() -> None:
    restarts = runs(2, 5)
    with PrivateRedis() as redis_server:
        db = open_database(redis_server.url)
        db.init()
        db.close()
        url = with_session(redis_server.url, "restarts")
        Session.from_store(open_store(url)).close()
        n = runs(40, 300)
        writers = _Appenders(url, 4, n)
        writers.start()
        for k in range(restarts):
            writers.wait_for((k + 1) * 4 * n // (restarts + 2))
            redis_server.kill()  # SIGKILL mid-stream: appendfsync always keeps what was acknowledged
            time.sleep(0.3)
            redis_server.start()
        writers.join()
        assert not writers.errors, writers.errors
        _check_log(url, writers.names, n)


def test_postgres_restarts_while_writers_run_lose_nothing_acknowledged() -> None:
    restarts = runs(1, 5)
    with PrivatePostgres() as pg:
        db = open_database(pg.url)
        db.init()
        db.close()
        url = with_session(pg.url, "restarts")
        Session.from_store(open_store(url)).close()
        n = runs(20, 300)
        writers = _Appenders(url, 4, n)
        writers.start()
        try:
            for k in range(restarts):
                writers.wait_for((k + 1) * 4 * n // (restarts + 2))
                pg.restart()  # immediate mode: a crash as far as the database can tell, then recovery
            writers.join()
        finally:
            close_pools()  # the pools to this private server would otherwise outlive it
        assert not writers.errors, writers.errors
        _check_log(url, writers.names, n)
