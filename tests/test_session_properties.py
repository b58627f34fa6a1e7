"""Property: any sequence of session operations restores to exactly the state it left.

Random programs of appends, prepares (with compactions), checkpoints, reverts,
undos, usage reports, D-Mails and restarts run against a session and a small
model of what its view must be. After every step the view matches the model;
after every restart the restored session matches the live one in everything
(view, checkpoints, compactions, pending D-Mail, usage, token count, seq).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import UsageError
from agentcontext.messages import Message
from agentcontext.session import MemoryStore, Session, SessionStore, SQLiteStore
from agentcontext.testing import WordCounter, make_conversation
from db_servers import database, unique, with_session

_KINDS = (
    ["append"] * 4 + ["prepare"] * 3 + ["checkpoint"] * 2 + ["revert", "undo", "usage", "dmail", "reopen"]
)
OPS = st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(0, 60)), min_size=15, max_size=60)


def _engine() -> ContextEngine:
    return ContextEngine(window=1200, reserve=200, counter=WordCounter())


def _is_pending_stub(m: Message) -> bool:
    meta = m.metadata.get("agentcontext")
    return m.role == "tool" and isinstance(meta, dict) and meta.get("kind") == "stub_result"


def _state(s: Session) -> tuple[object, ...]:
    return (
        [m.id for m in s.view],
        list(s.view),
        s.checkpoints,
        [(c.seq, c.keep, c.view) for c in s.compactions],
        s.pending_dmail,
        s.usage_totals,
        s.tokens,
        s.last_seq,
    )


class Model:
    """What the view must be: a list, checkpoint snapshots, and the stack of undoable compactions."""

    def __init__(self) -> None:
        self.view: list[str] = []
        self.undo: tuple[tuple[list[str], int], ...] = ()
        self.checkpoints: dict[int, tuple[list[str], tuple[tuple[list[str], int], ...]]] = {}


def _run(store_factory: object, conversation_seed: int, ops: list[tuple[str, int]]) -> None:
    msgs = make_conversation(
        seed=conversation_seed, rounds=10, steps=(0, 3), output_tokens=(20, 250), messy=True
    )
    make_store = store_factory  # a fresh store object on the same storage each call
    session = Session.from_store(make_store(), engine=_engine())  # type: ignore[operator]
    model = Model()
    cursor = 0
    try:
        for op, arg in ops:
            if op == "append":
                batch = msgs[cursor : cursor + 1 + arg % 8]
                cursor += len(batch)
                session.extend(batch)
                model.view += [m.id for m in batch]
            elif op == "prepare":
                before = list(model.view)
                prepared = session.prepare()
                out = list(prepared.messages)
                while out and _is_pending_stub(out[-1]):
                    out.pop()
                model.view = [m.id for m in out]
                keep = 0
                while keep < min(len(before), len(out)) and before[keep] == out[keep].id:
                    keep += 1
                if prepared.report.compacted or (model.undo and keep < model.undo[-1][1]):
                    model.undo = (*model.undo, (before, len(out)))
            elif op == "checkpoint":
                cp = session.checkpoint()
                model.checkpoints[cp] = (list(model.view), model.undo)
            elif op in ("revert", "dmail"):
                if not model.checkpoints:
                    with pytest.raises(UsageError):
                        session.revert_to(arg)
                    continue
                cp = sorted(model.checkpoints)[arg % len(model.checkpoints)]
                view, undo = model.checkpoints[cp]
                if op == "revert":
                    session.revert_to(cp)
                    model.view, model.undo = list(view), undo
                else:
                    session.send_dmail(cp, f"note {arg}")
                    injected = session.deliver_dmail()
                    assert injected is not None
                    model.view, model.undo = [*view, injected.id], undo
            elif op == "undo":
                if not model.undo:
                    with pytest.raises(UsageError):
                        session.undo_compaction()
                    continue
                session.undo_compaction()
                before, after_len = model.undo[-1]
                model.view = before + model.view[after_len:]
                model.undo = model.undo[:-1]
            elif op == "usage":
                session.record_usage(prompt_tokens=arg)
            elif op == "reopen":
                live = _state(session)
                session.close()
                session = Session.from_store(make_store(), engine=_engine())  # type: ignore[operator]
                assert _state(session) == live
            assert [m.id for m in session.view] == model.view, f"after {op}"
        live = _state(session)
        session.close()
        # No engine this time: the records alone rebuild everything (same counts: same counter kind).
        session = Session.from_store(make_store(), counter=WordCounter())  # type: ignore[operator]
        assert _state(session) == live
    finally:
        session.close()


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), ops=OPS)
def test_memory_sessions_restore_exactly(seed: int, ops: list[tuple[str, int]]) -> None:
    store = MemoryStore()
    _run(lambda: store, seed, ops)


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 10_000), ops=OPS, kind=st.sampled_from(["jsonl", "sqlite"]))
def test_file_sessions_restore_exactly(
    seed: int, ops: list[tuple[str, int]], kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base: Path = tmp_path_factory.mktemp("prop")

    def make() -> SessionStore:
        if kind == "jsonl":
            from agentcontext.session import JSONLStore

            return JSONLStore(base / "run.jsonl", fsync="never")
        return SQLiteStore(base / "run.db", fsync="never")

    _run(make, seed, ops)


@pytest.fixture(scope="module", params=["postgres", "redis"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with database(str(request.param)) as url:
        yield url


@settings(
    max_examples=examples(8),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 10_000), ops=OPS)
def test_database_sessions_restore_exactly(seed: int, ops: list[tuple[str, int]], server: str) -> None:
    from agentcontext.session.stores import open_store

    url = with_session(server, unique("prop"))  # a new session per example
    options = {"fsync": "never"} if url.startswith("postgresql") else {}
    _run(lambda: open_store(url, **options), seed, ops)
