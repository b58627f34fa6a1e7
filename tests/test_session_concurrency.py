"""One session shared by threads or asyncio tasks: every record lands, or the caller is told why not.

The view is read and the compaction record written under one lock (threads), or
the tasks of one event loop take turns (asyncio); a view rewritten while an
async summary was awaited makes that prepare refuse with `ConcurrencyError`,
never a silently missing record. Each scenario ends with a restore that must
rebuild exactly the live view.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentcontext import ConcurrencyError, ContextEngine, Message, Session, SummaryRequest
from agentcontext.invariants import check_messages
from agentcontext.testing import WordCounter


def _engine(**kwargs: object) -> ContextEngine:
    return ContextEngine(window=900, reserve=100, counter=WordCounter(), truncator=None, **kwargs)  # type: ignore[arg-type]


def _words(tag: str, n: int = 40) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))


def _assert_restores_exactly(path: Path, live: Session) -> None:
    view = [m.id for m in live.view]
    again = Session.open(path, read_only=True, counter=WordCounter())
    try:
        assert [m.id for m in again.view] == view
        assert again.last_seq == live.last_seq
    finally:
        again.close()


def test_threads_appending_and_preparing_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    session = Session.open(path, engine=_engine(), fsync="never")
    session.append(Message(role="system", content="be brief"))
    appended: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    per_thread, threads_n = 40, 4

    def worker(k: int) -> None:
        mine: list[str] = []
        try:
            for i in range(per_thread):
                m = Message(role="user" if i % 2 == 0 else "assistant", content=_words(f"t{k}i{i}"))
                session.append(m)
                mine.append(m.id)
                if i % 5 == 4:
                    out = list(session.prepare().messages)
                    assert check_messages(out) == []
        except BaseException as exc:  # surfaced below, with the thread's number
            errors.append(exc)
        appended[k] = mine

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert session.compactions, "the window is small: the threads' prepares must have compacted"
    # Every message ever appended is in the log (recallable), whatever was compacted away.
    for ids in appended.values():
        for mid in ids:
            assert session.message(mid).id == mid
    records = list(session.records())
    appended_records = [r for r in records if type(r).__name__ == "MessageRecord"]
    assert len(appended_records) == 1 + per_thread * threads_n
    seqs = [r.seq for r in records]
    assert seqs == list(range(len(records)))  # no gap, no duplicate
    _assert_restores_exactly(path, session)
    session.close()


class _GatedSummarizer:
    """An async summarizer that yields to the event loop (and can run a callback) before answering."""

    calls_model = True

    def __init__(self) -> None:
        self.before_answer: list[object] = []

    def summarize(self, request: SummaryRequest) -> str:
        return "summary of " + " ".join(m.id for m in request.messages[:3])

    async def asummarize(self, request: SummaryRequest) -> str:
        for _ in range(3):
            await asyncio.sleep(0)
        while self.before_answer:
            action = self.before_answer.pop(0)
            action()  # type: ignore[operator]
        return self.summarize(request)


def test_asyncio_tasks_take_turns_and_every_record_lands(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    summarizer = _GatedSummarizer()
    session = Session.open(path, engine=_engine(summarizer=summarizer), fsync="never")
    session.append(Message(role="system", content="be brief"))
    appended: list[str] = []

    async def task(k: int) -> None:
        for i in range(30):
            m = Message(role="user" if i % 2 == 0 else "assistant", content=_words(f"a{k}i{i}"))
            session.append(m)
            appended.append(m.id)
            if i % 3 == 2:
                prepared = await session.aprepare()
                assert check_messages(list(prepared.messages)) == []
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(task(k) for k in range(6)))

    asyncio.run(main())
    assert session.compactions
    for mid in appended:
        assert session.message(mid).id == mid
    messages = [r for r in session.records() if type(r).__name__ == "MessageRecord"]
    assert len(messages) == 1 + len(appended)
    _assert_restores_exactly(path, session)
    session.close()


def _filled(session: Session, rounds: int) -> None:
    session.append(Message(role="system", content="be brief"))
    for i in range(rounds):
        session.append(Message(role="user", content=_words(f"u{i}")))
        session.append(Message(role="assistant", content=_words(f"r{i}")))


def test_appends_made_while_a_summary_is_awaited_stay_after_the_compaction(tmp_path: Path) -> None:
    summarizer = _GatedSummarizer()
    session = Session.open(tmp_path / "s.jsonl", engine=_engine(summarizer=summarizer), fsync="never")
    _filled(session, 12)
    late = Message(role="user", content="arrived while the summary was being written")
    summarizer.before_answer.append(lambda: session.append(late))
    prepared = asyncio.run(session.aprepare())
    assert prepared.compaction is not None and prepared.report.compacted
    assert late not in prepared.messages  # it was not in what the engine prepared...
    assert session.view[-1] == late  # ...but the view keeps it, after the compaction
    _assert_restores_exactly(tmp_path / "s.jsonl", session)
    session.close()


def test_an_append_from_another_thread_does_not_wait_for_a_sync_prepare_s_summary(tmp_path: Path) -> None:
    # prepare held the session's lock through the whole engine run: appends from other threads waited
    # for the model's summary (1.7 s in a review).
    appended = threading.Event()
    waited: list[bool] = []

    class Slow:
        def summarize(self, request: SummaryRequest) -> str:
            # Another thread appends meanwhile; the summary waits (at most 5 s) for that append to return.
            if not waited:
                threading.Thread(target=lambda: (session.append(late), appended.set())).start()
                waited.append(not appended.wait(timeout=5))
            return "the summary"

    session = Session.open(tmp_path / "s.jsonl", engine=_engine(summarizer=Slow()), fsync="never")
    _filled(session, 12)
    late = Message(role="user", content="arrived while the summary was being written")
    prepared = session.prepare()
    assert waited == [False]  # the append went through while the summary was being written
    assert prepared.report.compacted and late not in prepared.messages
    assert session.view[-1] == late  # kept, after the compaction
    _assert_restores_exactly(tmp_path / "s.jsonl", session)
    session.close()


def test_a_view_rewritten_while_a_summary_is_awaited_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    summarizer = _GatedSummarizer()
    session = Session.open(tmp_path / "s.jsonl", engine=_engine(summarizer=summarizer), fsync="never")
    session.append(Message(role="system", content="be brief"))
    cp = session.checkpoint()
    _filled(session, 12)
    records_before = session.last_seq
    summarizer.before_answer.append(lambda: session.revert_to(cp))  # another caller rewinds meanwhile
    with pytest.raises(ConcurrencyError, match="rewritten .* while the engine prepared it"):
        asyncio.run(session.aprepare())
    assert session.last_seq == records_before + 1  # the revert's record, and no compaction record
    assert session.compactions == ()
    assert len(session.view) == 1
    # The next prepare starts from the reverted view and records normally.
    session.append(Message(role="user", content="start over"))
    assert list(session.prepare().messages)[-1].text == "start over"
    session.close()


def test_a_failed_compaction_write_leaves_the_session_and_its_engine_state_as_they_were(
    tmp_path: Path,
) -> None:
    session = Session.open(tmp_path / "s.jsonl", engine=_engine(), fsync="never")
    _filled(session, 12)
    view = [m.id for m in session.view]
    seq = session.last_seq
    store = session.store
    original = store.append

    def failing_append(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    store.append = failing_append  # type: ignore[method-assign]
    with pytest.raises(OSError, match="disk full"):
        session.prepare()
    store.append = original  # type: ignore[method-assign]
    assert [m.id for m in session.view] == view and session.last_seq == seq
    # The compaction was not in force: the next prepare compacts again, from the same view, and records it.
    prepared = session.prepare()
    assert prepared.report.compacted and len(session.compactions) == 1
    _assert_restores_exactly(tmp_path / "s.jsonl", session)
    session.close()
