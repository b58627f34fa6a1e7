"""Several workers, one conversation: each step may run on any worker, and every worker sends one history.

Each worker is its own `Session` (its own engine, its own connection) on the
same stored session: SQLite always, PostgreSQL and Redis when their servers
answer. The steps of an agent alternate between workers. A compaction one
worker writes is read by the next (`prepare` catches up first), so the prompt
prefix stays the same whichever worker serves a step, and the session's lease
keeps two workers from summarizing the same span at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcontext import ContextEngine, Message, Session, SummaryRequest, ToolCall
from agentcontext.invariants import check_messages
from agentcontext.testing import WordCounter
from db_servers import database, unique, with_session


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?session={unique()}"
        return
    with database(request.param) as url:
        yield with_session(url, unique())


class CountingSummarizer:
    """An offline-quality summarizer that counts its calls and the spans it was asked for."""

    calls_model = True

    def __init__(self) -> None:
        self.spans: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def summarize(self, request: SummaryRequest) -> str:
        with self.lock:
            self.spans.append(tuple(m.id for m in request.messages))
        return "the steps so far: " + ", ".join(m.text[:12] for m in request.messages[:4])

    async def asummarize(self, request: SummaryRequest) -> str:
        return self.summarize(request)


def _worker(location: str, summarizer: CountingSummarizer) -> Session:
    engine = ContextEngine(
        window=1_200, reserve=200, counter=WordCounter(), summarizer=summarizer, truncator=None
    )
    return Session.open(location, engine=engine, lease_ttl=5)


def _step(i: int) -> list[Message]:
    call = ToolCall(id=f"c{i}", name="run", arguments=f'{{"step": {i}}}')
    return [
        Message(role="assistant", content=f"step {i}", tool_calls=(call,)),
        Message(role="tool", tool_call_id=f"c{i}", content=" ".join(f"out{i}w{k}" for k in range(60))),
    ]


def test_steps_alternating_between_workers_see_one_history(location: str) -> None:
    summarizer = CountingSummarizer()
    workers = [_worker(location, summarizer) for _ in range(3)]
    try:
        workers[0].append(Message(role="system", content="You are an agent."))
        workers[0].append(Message(role="user", content="do the task in many steps"))
        prompts: list[list[str]] = []
        for i in range(24):
            w = workers[i % 3]
            prepared = w.prepare()  # catches up with the other workers' records first
            out = list(prepared.messages)
            assert check_messages(out) == []
            prompts.append([m.id for m in out])
            w.extend(_step(i))
        # Every worker ends on the same history, exactly what a restore rebuilds.
        for w in workers:
            w.reload()
        views = {tuple(m.id for m in w.view) for w in workers}
        assert len(views) == 1
        fresh = Session.open(location, read_only=True, counter=WordCounter())
        assert tuple(m.id for m in fresh.view) in views
        fresh.close()
        # Compactions happened, each span was summarized once, and between compactions the prompt of a
        # step starts with the whole prompt of the step before, whichever worker served it.
        compactions = [
            i for i in range(1, len(prompts)) if prompts[i][: len(prompts[i - 1])] != prompts[i - 1]
        ]
        assert 0 < len(compactions) < len(prompts) // 3
        assert len(summarizer.spans) == len(set(summarizer.spans))
    finally:
        for w in workers:
            w.close()


def test_workers_preparing_at_once_never_summarize_the_same_span_twice(location: str) -> None:
    summarizer = CountingSummarizer()
    setup = _worker(location, summarizer)
    setup.append(Message(role="system", content="You are an agent."))
    setup.append(Message(role="user", content="do the task"))
    for i in range(12):
        setup.extend(_step(i))  # well past the soft limit: the next prepare compacts
    setup.close()
    workers: list[Session] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:  # each worker opens its own session, as a worker process would
        try:
            w = _worker(location, summarizer)
            workers.append(w)
            barrier.wait()
            w.prepare()
            w.reload()
            assert len(w.compactions) == 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        # One of them compacted under the lease; the others read its compaction and had nothing to do.
        assert len(summarizer.spans) == 1
    finally:
        for w in workers:
            w.close()


def test_rewind_and_clear_take_messages_back_without_deleting_them(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "s.jsonl", fsync="never")
    msgs = [Message(role="user", content=f"m{i}") for i in range(5)]
    s.extend(msgs)
    cp = s.checkpoint()
    s.rewind(3)
    assert [m.text for m in s.view] == ["m0", "m1", "m2"]
    assert s.message(msgs[4].id) == msgs[4]  # still in the log, recallable
    s.clear()
    assert len(s.view) == 0
    s.revert_to(cp)  # a checkpoint taken before still returns to them
    assert [m.text for m in s.view] == [m.text for m in msgs]
    with pytest.raises(ValueError, match=r"within \[0, 5\]"):
        s.rewind(6)
    s.close()
    again = Session.open(tmp_path / "s.jsonl", read_only=True)
    assert [m.text for m in again.view] == [m.text for m in msgs]
    again.close()
