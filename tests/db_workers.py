"""Worker processes for the concurrency and fault tests (``test_session_database_concurrency.py``).

They run in processes forked from a ``forkserver`` that imported the package
and the database clients once, so starting eight of them (or fifty, one after
another) costs milliseconds, not a Python start-up each. Each writes what it did to a file
line by line, flushed, so a worker killed with SIGKILL leaves the lines of
everything it finished.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path

from agentcontext import _serde
from agentcontext.exceptions import ConcurrencyError
from agentcontext.messages import Message
from agentcontext.session import Session
from agentcontext.session._records import MessageRecord
from agentcontext.session.stores import open_store


def _record(seq: int, worker: str, i: int) -> dict[str, object]:
    message = Message(role="user", content=f"{worker} says {i}", id=f"msg_{worker}_{i}")
    return dict(_serde.encode_record(MessageRecord(seq=seq, ts=None, message=message)))


def options(url: str) -> dict[str, object]:
    """Store options for tests about concurrency, not durability: PostgreSQL commits without waiting for the disk."""
    return {"fsync": "never"} if url.startswith("postgresql") else {}


def append_worker(url: str, worker: str, n: int, out: str) -> None:
    """Append ``n`` messages to one shared session; on `ConcurrencyError`, read what was missed and retry.

    Writes ``{"conflicts": ..., "read": [seqs read while catching up]}`` to ``out``.
    """
    store = open_store(url, **options(url))
    store.open(create=True)
    last = -1
    for r in store.load():
        last = int(r.data["seq"])  # type: ignore[call-overload]
    read: list[int] = []
    conflicts = 0
    for i in range(n):
        while True:
            try:
                store.append([_record(last + 1, worker, i)], expected_seq=last + 1)  # type: ignore[list-item]
                last += 1
                break
            except ConcurrencyError:
                conflicts += 1
                for r in store.load(after=last):
                    last = int(r.data["seq"])  # type: ignore[call-overload]
                    read.append(last)
    store.close()
    Path(out).write_text(json.dumps({"conflicts": conflicts, "read": read}))


async def async_append_worker(url: str, worker: str, n: int) -> dict[str, object]:
    """`append_worker` as an asyncio task (``aopen`` / ``aload`` / ``aappend``)."""
    store = open_store(url, **options(url))
    await store.aopen(create=True)  # type: ignore[attr-defined]
    conflicts, read = await _aappend_racing(store, worker, n)
    await store.aclose()  # type: ignore[attr-defined]
    return {"conflicts": conflicts, "read": read}


async def _aappend_racing(store: object, worker: str, n: int) -> tuple[int, list[int]]:
    """Append ``n`` records to an open store, reading what others wrote after each lost race;
    returns the races lost and the seqs read back."""
    last = -1
    async for r in store.aload():  # type: ignore[attr-defined]
        last = int(r.data["seq"])
    read: list[int] = []
    conflicts = 0
    for i in range(n):
        while True:
            try:
                await store.aappend([_record(last + 1, worker, i)], expected_seq=last + 1)  # type: ignore[attr-defined]
                last += 1
                break
            except ConcurrencyError:
                conflicts += 1
                async for r in store.aload(after=last):  # type: ignore[attr-defined]
                    last = int(r.data["seq"])
                    read.append(last)
        await asyncio.sleep(0)  # let the other tasks in between appends too
    return conflicts, read


def killable_writer(url: str, seed: int, out: str) -> None:
    """Append messages of very different sizes until killed; log ``seq message-id`` after each append returns."""
    rng = random.Random(seed)
    with open(out, "a", encoding="utf-8") as log:
        session = Session.from_store(open_store(url))
        log.write(f"ready {session.last_seq}\n")
        log.flush()
        while True:
            size = rng.choice([5, 300, 3_000, 12_000, 60_000])
            m = Message(role="user", content=f"{rng.random()} " + "y" * size)
            session.append(m)
            log.write(f"{session.last_seq} {m.id}\n")
            log.flush()


def lease_holder(url: str, owner: str, ttl: float, out: str) -> None:
    """Take the session's lease and hold it until killed."""
    store = open_store(url)
    store.open(create=True)
    taken = store.acquire_lease(owner, ttl)  # type: ignore[attr-defined]
    # Written whole, then renamed: the test polls for the file while this process lives.
    Path(out + ".tmp").write_text("leased" if taken else "refused")
    os.replace(out + ".tmp", out)
    while True:
        time.sleep(60)


def session_worker(url: str, worker: str, n: int, out: str) -> None:
    """Append ``n`` messages through a `Session` with an engine, preparing (and so compacting) every 10.

    On `ConcurrencyError` the worker reopens the session, which replays what the
    others wrote (their compactions included), and retries. Writes, as JSON, the
    number of reopenings and whether every prepared prompt was valid.
    """
    from agentcontext.engine import ContextEngine
    from agentcontext.invariants import check_messages
    from agentcontext.testing import WordCounter

    def engine() -> ContextEngine:
        return ContextEngine(window=900, reserve=100, counter=WordCounter(), truncator=None)

    def reopen() -> Session:
        return Session.from_store(open_store(url, **options(url)), engine=engine())

    session = reopen()
    reopened = 0
    invalid: list[str] = []
    for i in range(n):
        words = " ".join(f"{worker}w{i}x{k}" for k in range(30))
        message = Message(role="user", content=words, id=f"msg_{worker}_{i}")
        while True:
            try:
                session.append(message)  # a ConcurrencyError wrote nothing: retrying cannot double it
                break
            except ConcurrencyError:
                session.close()
                session = reopen()
                reopened += 1
        if i % 10 == 9:
            while True:
                try:
                    prepared = session.prepare()
                    invalid += [str(v) for v in check_messages(prepared.messages)]
                    break
                except ConcurrencyError:
                    session.close()
                    session = reopen()
                    reopened += 1
    session.close()
    Path(out).write_text(json.dumps({"reopened": reopened, "invalid": invalid}))


def compacting_writer(url: str, seed: int, out: str) -> None:
    """Append and prepare through a `Session` whose window forces a compaction every few steps, until killed.

    Logs ``m SEQ ID`` after each append returns and ``c SEQ`` after each prepare that
    wrote a compaction record, so a kill lands in an append, a summary or a compaction's write.
    """
    from agentcontext.engine import ContextEngine
    from agentcontext.testing import WordCounter

    rng = random.Random(seed)
    engine = ContextEngine(window=900, reserve=100, counter=WordCounter(), truncator=None)
    with open(out, "a", encoding="utf-8") as log:
        # A short lease: the kill often lands inside a prepare, and the next worker waits for it to expire.
        session = Session.from_store(open_store(url), engine=engine, lease_ttl=2)
        log.write(f"ready {session.last_seq}\n")
        log.flush()
        i = 0
        while True:
            i += 1
            words = " ".join(f"s{seed}w{i}x{k}" for k in range(rng.choice([10, 40, 120, 300])))
            m = Message(role="user", content=words)
            session.append(m)
            log.write(f"m {session.last_seq} {m.id}\n")
            log.flush()
            before = session.last_seq
            session.prepare()
            if session.last_seq != before:
                log.write(f"c {session.last_seq}\n")
                log.flush()


def forked_appender(url: str, worker: str, n: int, out: str) -> None:
    """Append ``n`` messages through a `Session` in a process forked from one that used the database.

    Writes ``ok``, or the error, to ``out``: a connection shared with the parent
    (or a sibling) shows as another query's results, or as a hang.
    """
    try:
        with Session.open(url, **options(url)) as session:  # type: ignore[arg-type]
            for i in range(n):
                session.append(Message(role="user", content=f"{worker} says {i}", id=f"msg_{worker}_{i}"))
        Path(out).write_text("ok")
    except Exception as exc:  # reported to the test, which names it
        Path(out).write_text(f"{type(exc).__name__}: {exc}")


def forked_async_appender(store: object, worker: str, n: int, out: str) -> None:
    """`forked_appender` for a store the parent opened on its event loop (``aopen``) before forking."""

    try:
        asyncio.run(_aappend_racing(store, worker, n))
        Path(out).write_text("ok")
    except Exception as exc:  # reported to the test, which names it
        Path(out).write_text(f"{type(exc).__name__}: {exc}")


def dmail_worker(url: str, worker: str, start_at: float, out: str) -> None:
    """Open the shared session, append one message, then run the loop's D-Mail step, all at ``start_at``.

    Writes ``{"delivered": <whether this worker's deliver_dmail returned the message>}``.
    """
    with Session.from_store(open_store(url, **options(url))) as session:
        time.sleep(max(0.0, start_at - time.time()))
        session.append(Message(role="user", content=f"{worker} ran", id=f"msg_{worker}"))
        delivered = session.deliver_dmail()
    Path(out).write_text(json.dumps({"delivered": delivered is not None}))
