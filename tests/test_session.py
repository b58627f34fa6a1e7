"""Sessions: the log, the derived view, restore, compaction records, checkpoints, D-Mail, undo, recall, tokens."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentcontext.compaction import MessageKind, is_user_request, kind_of
from agentcontext.engine import ContextEngine, Prepared
from agentcontext.exceptions import (
    ConcurrencyError,
    ConfigError,
    InvalidMessageError,
    NotASessionError,
    RecallError,
    StoreError,
    UsageError,
)
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, ToolCall
from agentcontext.session import (
    DMAIL_TEMPLATE,
    CorruptRecordWarning,
    MemoryStore,
    MessageRecord,
    Session,
    SessionStore,
    SQLiteStore,
    UnknownRecordWarning,
    dmail_tool_anthropic,
    dmail_tool_openai,
    recall_tool_anthropic,
    recall_tool_openai,
)
from agentcontext.testing import WordCounter, make_conversation
from agentcontext.tokens import CalibratedCounter, counter_for_tokenizer
from realdata import load, manifest

FIXTURES = Path(__file__).parent / "fixtures" / "sessions"
KINDS = ["jsonl", "sqlite", "memory"]


def _engine(window: int = 2500, **kwargs: object) -> ContextEngine:
    return ContextEngine(window=window, reserve=400, counter=WordCounter(), **kwargs)  # type: ignore[arg-type]


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Session]]:
    """Opens (and reopens) one session on the parametrized store kind."""
    memory = MemoryStore()
    sessions: list[Session] = []

    def open_session(**kwargs: object) -> Session:
        if request.param == "jsonl":
            s = Session.open(tmp_path / "run.jsonl", fsync="never", **kwargs)  # type: ignore[arg-type]
        elif request.param == "sqlite":
            s = Session.from_store(SQLiteStore(tmp_path / "runs.db", session_id="t", fsync="never"), **kwargs)  # type: ignore[arg-type]
        else:
            s = Session.from_store(memory, **kwargs)  # type: ignore[arg-type]
        sessions.append(s)
        return s

    yield open_session
    for s in sessions:
        s.close()


def _ids(messages: object) -> list[str]:
    return [m.id for m in messages]  # type: ignore[attr-defined]


def _run_agent(session: Session, msgs: list[Message]) -> list[Prepared]:
    """Append a conversation as an agent loop would, preparing before every assistant turn."""
    prepared = []
    for m in msgs:
        if m.role == "assistant":
            prepared.append(session.prepare())
        session.append(m)
    prepared.append(session.prepare())
    return prepared


def _state(s: Session) -> tuple[object, ...]:
    return (
        _ids(s.view),
        list(s.view),
        s.checkpoints,
        [c.seq for c in s.compactions],
        s.pending_dmail,
        s.usage_totals,
        s.last_seq,
        s.id,
    )


# ----------------------------------------------------------------------------- the log and the view


def test_a_new_session_starts_with_a_header_and_restores_empty(opener: Callable[..., Session]) -> None:
    s = opener()
    assert s.id.startswith("ses_") and s.last_seq == 0 and len(s.view) == 0
    s.close()
    again = opener()
    assert again.id == s.id and again.last_seq == 0


def test_appended_messages_are_the_view_and_survive_a_restart(opener: Callable[..., Session]) -> None:
    msgs = make_conversation(seed=4, rounds=3, messy=True)
    s = opener()
    for m in msgs:
        s.append(m)
    assert list(s.view) == msgs
    s.close()
    again = opener()
    assert list(again.view) == msgs and _ids(again.view) == _ids(msgs)
    assert again.message(msgs[3].id) == msgs[3]


def test_the_jsonl_file_is_one_readable_record_per_line(tmp_path: Path) -> None:
    with Session.open(tmp_path / "run.jsonl") as s:
        s.append(Message(role="user", content="修复测试", id="u1"))
        s.checkpoint(label="start")
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["seq"], r["type"]) for r in lines] == [(0, "header"), (1, "message"), (2, "checkpoint")]
    assert lines[0]["schema_version"] == 1
    assert lines[1]["message"] == {"id": "u1", "role": "user", "content": "修复测试"}
    assert "修复测试" in (tmp_path / "run.jsonl").read_text(encoding="utf-8")  # not \\u-escaped


def test_append_refuses_what_is_not_a_message_and_ids_that_name_other_content(
    opener: Callable[..., Session],
) -> None:
    s = opener()
    m = Message(role="user", content="a", id="same")
    s.append(m)
    s.append(m)  # already in the view (a task delivered twice, a retried request): nothing to do
    s.extend([m, Message(role="user", content="b", id="b"), m])
    assert [x.id for x in s.view] == ["same", "b"] and s.last_seq == 2
    s.rewind(0)
    s.append(m)  # only the log holds it now (after a revert or a rewind): appended again
    assert [x.id for x in s.view] == ["same"]
    with pytest.raises(InvalidMessageError, match="id 'same' already names a different message"):
        s.append(Message(role="user", content="b", id="same"))
    with pytest.raises(InvalidMessageError, match="message 1: a session holds Message objects, got dict"):
        s.extend([Message(role="user", content="ok"), {"role": "user"}])  # type: ignore[list-item]
    assert len(s.view) == 1  # a refused batch writes nothing
    s.close()
    assert [x.id for x in opener().view] == ["same"]  # restored the same way


def test_inputs_are_never_mutated(tmp_path: Path) -> None:
    msgs = make_conversation(seed=8, rounds=6, huge_share=0.5, output_tokens=(50, 300))
    before = copy.deepcopy(msgs)
    with Session.open(tmp_path / "run.jsonl", engine=_engine(), fsync="never") as s:
        _run_agent(s, msgs)
    assert msgs == before


def test_a_closed_or_read_only_session_refuses_changes(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl")
    s.append(Message(role="user", content="a"))
    reader = Session.open(tmp_path / "run.jsonl", read_only=True)
    assert len(reader.view) == 1
    with pytest.raises(StoreError, match="read-only"):
        reader.append(Message(role="user", content="b"))
    s.close()
    with pytest.raises(StoreError, match="is closed"):
        s.checkpoint()
    reader.close()


def test_two_sessions_on_one_shared_store_catch_up_and_lose_nothing() -> None:
    store = MemoryStore()
    first = Session.from_store(store)
    second = Session.from_store(store)
    first.append(Message(role="user", content="first"))
    second.append(
        Message(role="user", content="second")
    )  # lost the race: reads first's record, appends after
    assert [m.text for m in second.view] == ["first", "second"]
    # A message both forward (a task delivered to two workers) is appended once.
    shared = Message(role="assistant", content="delivered twice")
    first.reload()
    first.append(shared)
    second.append(shared)
    third = Session.from_store(store)
    assert [m.text for m in third.view] == ["first", "second", "delivered twice"]
    # What is not safe to redo on a view another writer changed is refused, and changes nothing.
    cp = first.checkpoint()
    second.append(Message(role="user", content="later"))
    with pytest.raises(ConcurrencyError, match="another writer"):
        first.revert_to(cp)
    assert first.last_seq < second.last_seq and [m.text for m in first.view][-1] == "delivered twice"


def test_dmail_on_a_shared_store_survives_lost_races_and_is_delivered_once() -> None:
    store = MemoryStore()
    first, second = Session.from_store(store), Session.from_store(store)
    first.append(Message(role="user", content="task"))
    cp = first.checkpoint()
    second.reload()
    first.append(Message(role="assistant", content="a wrong turn"))
    # Sent on a stale state (second has not read the append): it lost the race, read it, went in after.
    sent = second.send_dmail(cp, "Take the other branch.")
    assert first.reload() and first.pending_dmail == sent
    # A second D-Mail that loses its race finds the first pending, and says so.
    first.append(Message(role="assistant", content="still wrong"))
    with pytest.raises(UsageError, match="already pending"):
        second.send_dmail(cp, "and another")
    # Both workers run the loop's delivery step: it is delivered once, the other finds nothing to deliver.
    injected = second.deliver_dmail()
    assert injected is not None and first.deliver_dmail() is None
    assert [m.text for m in Session.from_store(store).view] == ["task", injected.text]
    # A cancel that lost to a delivery returns False and writes nothing.
    second.send_dmail(cp, "once more")
    first.reload()
    second.deliver_dmail()
    records = second.last_seq
    assert first.cancel_dmail() is False and first.last_seq == records


def test_appends_from_many_threads_all_land_in_order(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl", fsync="never")
    per_thread = 50

    def worker(k: int) -> None:
        for i in range(per_thread):
            s.append(Message(role="user", content=f"{k}-{i}"))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s.close()
    again = Session.open(tmp_path / "run.jsonl", read_only=True)
    assert len(again.view) == 4 * per_thread and again.last_seq == 4 * per_thread
    for k in range(4):  # each thread's messages keep their order
        mine = [m.text for m in again.view if m.text.startswith(f"{k}-")]
        assert mine == [f"{k}-{i}" for i in range(per_thread)]


# ----------------------------------------------------------------------------- prepare and compaction records


def test_restore_rebuilds_exactly_the_compacted_view_without_running_the_engine(
    opener: Callable[..., Session],
) -> None:
    msgs = make_conversation(seed=11, rounds=12, steps=(1, 4), output_tokens=(40, 400), messy=True)
    s = opener(engine=_engine())
    prepared = _run_agent(s, msgs)
    assert any(p.report.compacted for p in prepared), "the window is small enough to force compactions"
    assert s.compactions
    # The view is the engine's last output, minus stub results for calls still awaiting theirs.
    assert _ids(s.view) == _ids(prepared[-1].messages)[: len(s.view)]
    live = _state(s)
    s.close()
    restored = opener()  # no engine at all: the records alone rebuild the view
    assert _state(restored) == live


def test_compaction_never_deletes_a_message_record(opener: Callable[..., Session]) -> None:
    msgs = make_conversation(seed=12, rounds=10, steps=(1, 3), output_tokens=(60, 300))
    s = opener(engine=_engine())
    _run_agent(s, msgs)
    view_ids = set(_ids(s.view))
    assert any(m.id not in view_ids for m in msgs), "some originals left the view"
    s.close()
    again = opener()
    for m in msgs:  # every original is still in the log, byte for byte
        assert again.message(m.id) == m
        assert again.recall(f"message:{m.id}") != ""
    stored = [r for r in again.records() if type(r).__name__ == "MessageRecord"]
    assert len(stored) == len(msgs)


def test_a_quiet_prepare_writes_no_record(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl", engine=_engine(window=100_000))
    s.append(Message(role="user", content="hello"))
    seq = s.last_seq
    for _ in range(3):
        prepared = s.prepare()
        assert prepared.report.actions == ()
    assert s.last_seq == seq
    s.close()


def test_a_pending_tool_call_gets_a_stub_in_the_prompt_but_not_in_the_view(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl", engine=_engine(window=100_000))
    s.append(Message(role="user", content="list files"))
    call = Message(role="assistant", tool_calls=(ToolCall(id="c1", name="ls"),))
    s.append(call)
    prepared = s.prepare()
    assert prepared.messages[-1].role == "tool"  # the provider needs an answer to every call
    assert _ids(s.view)[-1] == call.id  # ...but the real result may still come
    s.append(Message(role="tool", tool_call_id="c1", content="a.txt"))
    assert [m.text for m in s.prepare().messages][-1] == "a.txt"
    s.close()


def test_ingest_truncated_outputs_stay_recallable_after_a_restart(tmp_path: Path) -> None:
    huge = "\n".join(f"line {i}: " + "word " * 12 for i in range(3000))
    engine = _engine(window=100_000)
    assert engine.truncator is not None
    s = Session.open(tmp_path / "run.jsonl", engine=engine)
    s.append(Message(role="user", content="run the tests"))
    s.append(Message(role="assistant", tool_calls=(ToolCall(id="c1", name="pytest"),)))
    original = Message(role="tool", tool_call_id="c1", name="pytest", content=huge)
    s.append(original)
    s.prepare()
    short = s.view[-1]
    assert short.id != original.id and len(short.text) < len(huge)
    ref = short.metadata["truncated"]["ref"]  # type: ignore[index]
    assert isinstance(ref, str) and ref in short.text
    assert (tmp_path / "run.artifacts").is_dir()  # the session's own artifact directory
    s.close()
    again = Session.open(tmp_path / "run.jsonl", engine=_engine(window=100_000))
    assert again.recall(ref) == huge
    assert again.recall(f"message:{original.id}") == huge
    assert again.recall(f"message:{short.id}") == huge  # the preview's own id leads to the full output
    assert again.view[-1] == short
    again.close()


def test_aprepare_records_the_same_way(tmp_path: Path) -> None:
    msgs = make_conversation(seed=5, rounds=8, steps=(1, 3), output_tokens=(60, 300))
    sync = Session.open(tmp_path / "a.jsonl", engine=_engine(), fsync="never")
    asyn = Session.open(tmp_path / "b.jsonl", engine=_engine(), fsync="never")

    async def run() -> None:
        for m in msgs:
            if m.role == "assistant":
                sync.prepare()
                await asyn.aprepare()
            sync.append(m)
            asyn.append(m)

    asyncio.run(run())
    assert _ids(sync.view) == _ids(asyn.view)
    assert [c.view for c in sync.compactions] == [c.view for c in asyn.compactions]
    sync.close()
    asyn.close()


def test_prepare_needs_an_engine(tmp_path: Path) -> None:
    with Session.open(tmp_path / "run.jsonl") as s, pytest.raises(ConfigError, match="engine="):
        s.prepare()


# ----------------------------------------------------------------------------- checkpoints and revert


def test_checkpoint_ids_survive_compactions_and_restarts(opener: Callable[..., Session]) -> None:
    msgs = make_conversation(seed=13, rounds=12, steps=(1, 4), output_tokens=(40, 400))
    s = opener(engine=_engine())
    views: dict[int, list[str]] = {}
    for m in msgs:
        if m.role == "user":
            cp = s.checkpoint(label=f"before {len(views)}")
            views[cp] = _ids(s.view)
        if m.role == "assistant":
            s.prepare()
        s.append(m)
    assert len(s.compactions) >= 2
    assert [c.id for c in s.checkpoints] == list(range(len(views)))  # never reset (Kimi CLI resets them)
    s.close()
    again = opener(engine=_engine())
    assert [(c.id, c.label) for c in again.checkpoints] == [(i, f"before {i}") for i in range(len(views))]
    for cp, ids in views.items():  # every checkpoint still leads to the view it marked
        again.revert_to(cp)
        assert _ids(again.view) == ids


def test_revert_keeps_the_reverted_records_and_can_be_undone_by_reverting_forward(
    opener: Callable[..., Session],
) -> None:
    s = opener()
    s.append(Message(role="user", content="start"))
    cp0 = s.checkpoint()
    wrong = [Message(role="assistant", content="a wrong turn"), Message(role="user", content="no")]
    s.extend(wrong)
    cp1 = s.checkpoint()
    s.revert_to(cp0)
    assert [m.text for m in s.view] == ["start"]
    s.append(Message(role="assistant", content="a better turn"))
    assert [m.text for m in s.view] == ["start", "a better turn"]
    for m in wrong:  # reverted away, not lost
        assert s.recall(f"message:{m.id}") == m.text
    s.revert_to(cp1)
    assert [m.text for m in s.view] == ["start", "a wrong turn", "no"]
    live = _state(s)
    s.close()
    assert _state(opener()) == live


def test_revert_to_an_unknown_checkpoint_says_which_exist(opener: Callable[..., Session]) -> None:
    s = opener()
    with pytest.raises(UsageError, match="none yet"):
        s.revert_to(0)
    s.checkpoint()
    s.checkpoint()
    with pytest.raises(UsageError, match=r"no checkpoint 7 .*0\.\.1"):
        s.revert_to(7)
    with pytest.raises(UsageError, match="is an int"):
        s.revert_to("1")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- D-Mail


def test_dmail_reverts_and_injects_the_message_and_survives_a_crash_before_delivery(
    opener: Callable[..., Session],
) -> None:
    s = opener()
    s.append(Message(role="user", content="deploy the app"))
    cp = s.checkpoint()
    s.append(Message(role="assistant", content="deploying to prod without tests"))
    s.append(Message(role="user", content="it broke"))
    sent = s.send_dmail(cp, "Run the tests before deploying.")
    assert s.pending_dmail == sent
    with pytest.raises(UsageError, match="already pending"):
        s.send_dmail(cp, "again")
    s.close()
    s = opener()  # the process died before delivery: the D-Mail is a record, it waits
    assert s.pending_dmail == sent
    injected = s.deliver_dmail()
    assert injected is not None
    assert injected.text == DMAIL_TEMPLATE.format(text="Run the tests before deploying.")
    assert injected.metadata["dmail"] == {"checkpoint": cp, "sent_seq": sent.seq}
    assert [m.text for m in s.view] == ["deploy the app", injected.text]
    assert s.pending_dmail is None and s.deliver_dmail() is None
    assert all("CHECKPOINT" not in m.text for m in s.view)  # checkpoints never enter the context
    live = _state(s)
    s.close()
    assert _state(opener()) == live


def test_a_dmail_can_be_cancelled_and_needs_text_and_a_checkpoint(opener: Callable[..., Session]) -> None:
    s = opener()
    s.append(Message(role="user", content="x"))
    with pytest.raises(UsageError, match="no checkpoint"):
        s.send_dmail(0, "hi")
    cp = s.checkpoint()
    with pytest.raises(UsageError, match="non-empty text"):
        s.send_dmail(cp, "  ")
    assert s.cancel_dmail() is False
    s.send_dmail(cp, "hi")
    assert s.cancel_dmail() is True
    assert s.pending_dmail is None and s.deliver_dmail() is None
    assert [m.text for m in s.view] == ["x"]


def test_dmail_targets_stay_valid_after_compactions(tmp_path: Path) -> None:
    msgs = make_conversation(seed=21, rounds=10, steps=(1, 4), output_tokens=(40, 400))
    s = Session.open(tmp_path / "run.jsonl", engine=_engine(), fsync="never")
    s.append(msgs[0])
    s.append(msgs[1])
    first = s.checkpoint()
    early = _ids(s.view)
    _run_agent(s, msgs[2:])
    assert s.compactions
    s.send_dmail(first, "Start with the failing test.")
    injected = s.deliver_dmail()
    assert injected is not None and _ids(s.view) == [*early, injected.id]
    s.close()


def test_a_model_lists_checkpoints_on_demand_and_sends_a_dmail_through_the_tool(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl")
    assert s.handle_dmail("{}") == "There are no checkpoints yet; a D-Mail cannot be sent."
    s.append(Message(role="user", content="migrate the database"))
    s.checkpoint(label="before the migration")
    s.append(Message(role="assistant", content="dropping the old table first"))
    s.checkpoint()
    listing = s.handle_dmail(json.dumps({"checkpoint": None, "message": None}))  # OpenAI strict shape
    assert listing.splitlines() == [
        "Checkpoints, oldest first:",
        "checkpoint 0: before the migration (1 messages in view)",
        "checkpoint 1: (no label) (2 messages in view)",
    ]
    assert s.handle_dmail({"checkpoint": 0}).startswith("dmail failed: pass the message")
    assert "no checkpoint 9" in s.handle_dmail({"checkpoint": 9, "message": "x"})
    assert s.handle_dmail("[").startswith("dmail failed")
    answer = s.handle_dmail({"checkpoint": 0, "message": "Back up the table before dropping it."})
    assert answer.startswith("D-Mail queued for checkpoint 0")
    assert "already pending" in s.handle_dmail({"checkpoint": 1, "message": "again"})
    injected = s.deliver_dmail()
    assert injected is not None and "Back up the table" in injected.text
    assert [m.text for m in s.view] == ["migrate the database", injected.text]
    s.close()


def test_dmail_tool_definitions_follow_each_providers_format() -> None:
    chat = dmail_tool_openai()
    fn = chat["function"]
    assert isinstance(fn, dict) and fn["name"] == "send_dmail" and fn["strict"] is True
    params = fn["parameters"]
    assert isinstance(params, dict) and params["required"] == ["checkpoint", "message"]
    assert params["additionalProperties"] is False
    flat = dmail_tool_openai(api="responses")
    assert flat["name"] == "send_dmail" and flat["parameters"] == params
    anthropic = dmail_tool_anthropic(name="dmail")
    assert anthropic["name"] == "dmail" and set(anthropic) == {"name", "description", "input_schema"}


def test_compact_now_is_recorded_and_undoable(tmp_path: Path) -> None:
    msgs = make_conversation(seed=40, rounds=6, steps=(1, 3), output_tokens=(60, 300))
    s = Session.open(tmp_path / "run.jsonl", engine=_engine(window=100_000), fsync="never")
    s.extend(msgs)
    before = _ids(s.view)
    prepared = s.compact(budget=600)
    assert prepared.report.compacted and prepared.report.tokens_after <= 600
    assert _ids(s.view) != before and s.compactions
    live = _state(s)
    s.close()
    s = Session.open(tmp_path / "run.jsonl", engine=_engine(window=100_000))
    assert _state(s) == live
    s.undo_compaction()
    assert _ids(s.view) == before
    asyncio.run(s.acompact(budget=600))
    assert _ids(s.view) != before
    s.close()


def test_compact_now_makes_progress_on_a_conversation_already_within_the_target(tmp_path: Path) -> None:
    # ``/compact`` at 10% of the window, or a provider refusing a prompt the counter said fit: leaving
    # the messages as they are (every strategy's answer under the target) would send the same prompt.
    msgs = make_conversation(seed=41, rounds=8, steps=(1, 3), output_tokens=(60, 300))
    engine = _engine(window=100_000)
    s = Session.open(tmp_path / "run.jsonl", engine=engine, fsync="never")
    s.extend(msgs)
    size = engine.count(list(s.view))
    assert size < engine.thresholds.target * engine.budget / 4  # well within the target
    prepared = s.compact()
    th = engine.thresholds
    assert prepared.report.compacted and s.compactions
    assert prepared.report.tokens_after <= size * th.target / th.soft
    assert any("compacted on demand" in n for n in prepared.report.notes)
    check_messages(prepared.messages)
    assert [m.text for m in prepared.messages if is_user_request(m)][-1] == [
        m.text for m in msgs if is_user_request(m)
    ][-1]
    # Nothing left to compact (a system prompt and one request) is left alone, without an error.
    tiny = [Message(role="system", content="be brief"), Message(role="user", content="hi")]
    assert not engine.must_fit(tiny).report.compacted
    s.close()


def test_compact_now_never_grows_the_prompt_nor_takes_the_step_the_agent_just_made() -> None:
    # The first version compacted a 44-token conversation to 50 (a removal note for one round) and
    # summarized the test output the agent had just received out of a conversation at 1% of its window.
    engine = ContextEngine(window=100_000, reserve=4_000, counter=WordCounter())
    call = ToolCall(id="c1", name="run_tests", arguments="{}")

    def conversation(requests: int, lines: int) -> list[Message]:
        out = [Message(role="system", content="You are a coding agent.")]
        for i in range(requests):
            out += [
                Message(role="user", content=f"request {i}: look at module_{i}.py"),
                Message(
                    role="assistant", content=f"module_{i}.py defines func_{i}, which " + "does a lot " * 40
                ),
            ]
        out += [
            Message(role="user", content="Now fix the failing test."),
            Message(role="assistant", content="", tool_calls=(call,)),
            Message(role="tool", tool_call_id="c1", content="FAILED test_parser.py::test_k\n" * lines),
        ]
        return out

    for requests, lines in [(0, 0), (0, 50), (20, 300), (30, 10)]:
        msgs = conversation(requests, lines)
        prepared = engine.must_fit(msgs)
        assert prepared.report.tokens_after <= prepared.report.tokens_before
        assert [m.id for m in prepared.messages][-2:] == [m.id for m in msgs][-2:]  # the newest step
        check_messages(prepared.messages)
    assert prepared.report.compacted  # 30 long exchanges before it: those were summarized


def test_compacting_again_with_nothing_new_changes_nothing() -> None:
    # A second /compact with nothing new since the first: the summary had nothing new to cover, so
    # the next tier dropped rounds, the agent's last calls and their results with them, and a third
    # left the task alone (a review, Letta #2601's wipe).
    msgs = [
        Message(role="system", content="You are a coding agent."),
        Message(role="user", content="Fix it."),
    ]
    for i in range(12):
        call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"cmd": f"pytest -k t{i}"}))
        msgs.append(Message(role="assistant", content=f"Looking at step {i}.", tool_calls=(call,)))
        msgs.append(
            Message(role="tool", tool_call_id=call.id, content=f"FAILED test_{i} AssertionError\n" * 25)
        )
    with Session.from_store(MemoryStore(), engine=ContextEngine(window=16_000, counter=WordCounter())) as s:
        s.extend(msgs)
        first = s.compact()
        assert first.report.compacted and [m.id for m in first.messages][-2:] == [m.id for m in msgs][-2:]
        for _ in range(2):
            again = s.compact()
            assert not again.report.compacted and list(again.messages) == list(first.messages)


def test_a_loop_passing_its_whole_history_at_every_step_appends_only_what_is_new() -> None:
    # `extend` leaves out what the view holds, so a loop may pass its whole history at every step. What a
    # compaction took out of the view (summarized, masked, cut at ingest) was appended again as new: the
    # log held 1,348 messages for a history of 82, and every prepare re-compacted the re-appended history
    # beside the summary that stood for it (orphaned results "repaired" at each step).
    engine = ContextEngine(window=12_000, reserve=100, counter=WordCounter())
    history = [
        Message(role="system", content="You fix bugs."),
        Message(role="user", content="Fix the parser."),
    ]
    with Session.from_store(MemoryStore(), engine=engine) as s:
        compacted = 0
        for i in range(40):
            call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"cmd": f"pytest -k t{i}"}))
            history.append(Message(role="assistant", content=f"Step {i}.", tool_calls=(call,)))
            output = f"FAILED test_{i}\n" + "trace line\n" * (
                2_000 if i % 7 == 3 else 120
            )  # some cut at ingest
            history.append(Message(role="tool", tool_call_id=call.id, content=output))
            s.extend(history)
            prepared = s.prepare()
            compacted += prepared.report.compacted
            assert not any(a.kind == "repaired" for a in prepared.report.actions), i
        logged = [r.message.id for r in s.records() if isinstance(r, MessageRecord)]
        assert sorted(logged) == sorted(m.id for m in history)  # each once
        assert compacted >= 2 and len(s.view) < len(history)
        s.extend(history)  # once more, after the last compaction: nothing new
        assert len([r for r in s.records() if isinstance(r, MessageRecord)]) == len(history)
        # A message repair took out for good (a retried tool's second result) is not appended again either.
        retried = Message(
            role="tool", tool_call_id=history[-1].tool_call_id, content="the same output, again"
        )
        history.append(retried)
        for _ in range(3):
            s.extend(history)
            s.prepare()
        assert [r.message.id for r in s.records() if isinstance(r, MessageRecord)].count(retried.id) == 1
        # A message a revert took back is appended again: the user sends it anew.
        cp = s.checkpoint()
        extra = Message(role="user", content="Also update the changelog.")
        s.append(extra)
        s.revert_to(cp)
        s.append(extra)
        assert [m.id for m in s.view][-1] == extra.id


def test_a_copy_cut_and_summarized_in_one_prepare_is_covered_under_the_appended_message() -> None:
    # A huge output cut at ingest and summarized in the same prepare: the summary covered the cut copy,
    # which never enters the log. `covered_by` named ids recall refused, and a loop passing its whole
    # history re-appended the originals (orphan results of 137k characters in the view).
    msgs = make_conversation(seed=3, rounds=8, steps=(2, 5), huge_share=0.2)
    engine = ContextEngine(model="gpt-4o", window=8_000)
    history: list[Message] = []
    with Session.from_store(MemoryStore(), engine=engine) as s:
        summaries = 0
        for m in msgs:
            history.append(m)
            if m.role != "assistant" or not m.tool_calls:
                continue
            s.extend(history)  # the whole history, then a prepare before each model call
            s.prepare()
            for note in s.view:
                covered = s.covered_by(note)
                summaries += bool(covered)
                for mid in covered:
                    assert s.message(mid) is not None and s.recall(f"message:{mid}")
        logged = [r.message.id for r in s.records() if isinstance(r, MessageRecord)]
        assert summaries and len(logged) == len(set(logged))
        assert not [v for v in check_messages(list(s.view)) if v.rule == "orphan_tool_result"]


def test_a_session_reopened_mid_run_prepares_what_the_uninterrupted_run_prepares(tmp_path: Path) -> None:
    # Real agents reuse tool-call ids. A call compacted away was still remembered by the running engine,
    # which renamed a later call of the same id; the engine of a reopened session, reading only the view,
    # did not: the same view gave different prompts (ids and a result), and the prompt cache missed.
    history = [
        Message(role="system", content="You fix bugs."),
        Message(role="user", content="Fix the parser."),
    ]
    for i in range(24):
        cid = "call_read" if i % 3 == 0 else f"c{i}"  # the agent reuses one id for its reads
        call = ToolCall(id=cid, name="read" if i % 3 == 0 else "bash", arguments=json.dumps({"step": i}))
        history.append(Message(role="assistant", content=f"Step {i}.", tool_calls=(call,)))
        history.append(Message(role="tool", tool_call_id=cid, content=f"output {i} " + "line\n" * 150))

    def run(reopen_every: int | None) -> list[list[Message]]:
        location = tmp_path / f"run-{reopen_every}.jsonl"
        prompts: list[list[Message]] = []

        def opened() -> Session:
            return Session.open(
                location, engine=ContextEngine(window=3_000, reserve=100, counter=WordCounter())
            )

        s = opened()
        for step in range(2, len(history) + 1, 2):
            if reopen_every and len(prompts) % reopen_every == reopen_every - 1:
                s.close()
                s = opened()
            s.extend(history[step - 2 : step])
            prompts.append(list(s.prepare().messages))
        s.close()
        return prompts

    straight, reopened = run(None), run(3)
    assert sum(1 for p in straight if any(kind_of(m) is MessageKind.SUMMARY for m in p)) >= 3
    assert [[(m.id, m.content) for m in p] for p in reopened] == [
        [(m.id, m.content) for m in p] for p in straight
    ]


def test_a_history_rebuilt_under_new_ids_is_refused_not_appended_again() -> None:
    # A loop keeping OpenAI dicts and converting them one by one at each step gives every message a new id
    # each time: the whole history was appended again at every step (11,772 records for 216 messages).
    from agentcontext.formats import openai as oai

    dicts: list[dict[str, object]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix the parser."},
    ]
    with Session.from_store(MemoryStore(), engine=ContextEngine(window=8_000, counter=WordCounter())) as s:
        s.extend(oai.to_messages(dicts))
        dicts.append({"role": "assistant", "content": "Looking at parse.py."})
        with pytest.raises(InvalidMessageError, match="first messages again, under new ids.*to_messages"):
            s.extend([oai.to_message(d) for d in dicts])
        assert len(s.view) == 2  # nothing was written
        s.extend(oai.to_messages(dicts))  # the whole history converted at once: the same ids
        assert [m.text for m in s.view] == ["You fix bugs.", "Fix the parser.", "Looking at parse.py."]
        # Saying the same thing again later, in a new message, is a new message.
        s.extend(
            [Message(role="user", content="Fix the parser."), Message(role="assistant", content="On it.")]
        )
        assert len(s.view) == 5
        # After the view was taken back to nothing, a new run may start the same way.
        s.rewind(0)
        s.extend([oai.to_message(d) for d in dicts])
        assert [m.text for m in s.view] == ["You fix bugs.", "Fix the parser.", "Looking at parse.py."]


# ----------------------------------------------------------------------------- undo


def test_undo_compaction_restores_the_view_before_it_keeping_later_messages(
    opener: Callable[..., Session],
) -> None:
    msgs = make_conversation(seed=14, rounds=12, steps=(1, 4), output_tokens=(40, 400))
    s = opener(engine=_engine())
    snapshots: list[list[str]] = []
    for m in msgs:
        if m.role == "assistant":
            before = _ids(s.view)
            p = s.prepare()
            if p.report.compacted:
                snapshots.append(before)
        s.append(m)
    assert snapshots
    tail = Message(role="user", content="one more thing")
    s.append(tail)
    last = s.compactions[-1]
    undone = s.undo_compaction()
    assert undone == last
    assert _ids(s.view)[: len(snapshots[-1])] == snapshots[-1]
    assert _ids(s.view)[-1] == tail.id
    live = _state(s)
    s.close()
    again = opener(engine=_engine(window=100_000))
    assert _state(again) == live
    again.prepare()  # a bigger window: the re-prepared view is the uncompacted one
    assert _ids(again.view)[: len(snapshots[-1])] == snapshots[-1]


def test_undo_without_a_compaction_is_a_usage_error(opener: Callable[..., Session]) -> None:
    s = opener()
    s.append(Message(role="user", content="x"))
    with pytest.raises(UsageError, match="no compaction to undo"):
        s.undo_compaction()


# ----------------------------------------------------------------------------- recall


def _compacted_session(tmp_path: Path, name: str = "run") -> tuple[Session, list[Message]]:
    msgs = make_conversation(seed=15, rounds=12, steps=(1, 4), output_tokens=(60, 400))
    s = Session.open(tmp_path / f"{name}.jsonl", engine=_engine(), fsync="never")
    _run_agent(s, msgs)
    assert s.compactions
    return s, msgs


def test_recall_finds_masked_and_dropped_originals_and_whole_compactions(tmp_path: Path) -> None:
    s, msgs = _compacted_session(tmp_path)
    masked = [m for m in s.view if isinstance(m.metadata.get("agentcontext"), dict)]
    for placeholder in masked:
        meta = placeholder.metadata["agentcontext"]
        assert isinstance(meta, dict)
        if meta.get("kind") == "masked":
            original = s.message(str(meta["original_id"]))
            assert s.recall(str(meta["ref"])) == original.text
    compaction = s.compactions[0]
    transcript = s.recall(f"compaction:{compaction.seq}")
    assert f"compaction:{compaction.seq}" in transcript
    for mid in compaction.covers:
        assert mid in transcript
    assert s.recall(f"  `message:{msgs[1].id}`  ") == msgs[1].text  # quoted as models do
    assert s.recall(msgs[1].id) == msgs[1].text  # a bare id
    s.close()


@pytest.mark.parametrize(
    "ref",
    [
        "/etc/passwd",
        "../../run.jsonl",
        "file:///etc/passwd",
        "https://example.com/x",
        "message:",
        "message:../../etc/passwd",
        "compaction:abc",
        "compaction:999",
        "artifact:sha256:../../../etc/passwd",
        "artifact:sha256:" + "0" * 64,
        "",
    ],
)
def test_recall_refuses_anything_outside_the_sessions_own_records(tmp_path: Path, ref: str) -> None:
    with Session.open(tmp_path / "run.jsonl") as s:
        s.append(Message(role="user", content="x"))
        with pytest.raises(RecallError):
            s.recall(ref)


def test_recall_refuses_another_sessions_messages_and_artifacts_even_in_a_shared_store(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared-artifacts"
    huge = "\n".join("x " * 40 for _ in range(3000))

    def run(name: str) -> tuple[Session, str, str]:
        from agentcontext.artifacts import FileArtifactStore

        engine = _engine(window=100_000)
        s = Session.open(tmp_path / f"{name}.jsonl", engine=engine, artifacts=FileArtifactStore(shared))
        s.append(Message(role="user", content=name))
        s.append(Message(role="assistant", tool_calls=(ToolCall(id="c", name="cat"),)))
        s.append(Message(role="tool", tool_call_id="c", content=huge + name))
        s.prepare()
        ref = s.view[-1].metadata["truncated"]["ref"]  # type: ignore[index]
        return s, str(ref), s.view[0].id

    a, ref_a, msg_a = run("a")
    b, ref_b, msg_b = run("b")
    assert b.recall(ref_b).endswith("b") and a.recall(ref_a).endswith("a")
    with pytest.raises(RecallError, match="not an artifact of this session"):
        b.recall(ref_a)  # the file is right there in the shared directory, and still refused
    with pytest.raises(RecallError, match="no message"):
        b.recall(f"message:{msg_a}")
    a.close()
    b.close()


def test_handle_recall_takes_provider_arguments_and_pages_long_originals(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl", recall_max_chars=100)
    long_text = "".join(f"{i:04d}|" for i in range(60))  # 300 characters
    m = Message(role="user", content=long_text)
    s.append(m)
    first = s.handle_recall(json.dumps({"ref": f"message:{m.id}", "offset": None}))  # OpenAI: a JSON string
    assert first.startswith(long_text[:100]) and "offset=100" in first
    second = s.handle_recall({"ref": f"message:{m.id}", "offset": 100})  # Anthropic: the input dict
    assert second.startswith(long_text[100:200])
    last = s.handle_recall({"ref": f"message:{m.id}", "offset": 200})
    assert last.startswith(long_text[200:]) and "(the end)" in last
    pages = [first, second, last]
    assert "".join(p.split("\n[recall:")[0] for p in pages) == long_text
    short = Message(role="user", content="short")
    s.append(short)
    assert s.handle_recall({"ref": f"message:{short.id}"}) == "short"
    for bad, says in [
        ("not json", "not a JSON object"),
        ("[1]", "must be a JSON object"),
        ({"ref": "message:nope"}, "no message 'nope'"),
        ({"ref": 5}, "must be a string"),
        ({"ref": f"message:{m.id}", "offset": -1}, "offset must be"),
        ({"ref": f"message:{m.id}", "offset": 5000}, "past the end"),
    ]:
        answer = s.handle_recall(bad)  # type: ignore[arg-type]
        assert answer.startswith("recall failed:") and says in answer, answer
    s.close()


def test_recall_tool_definitions_follow_each_providers_format() -> None:
    chat = recall_tool_openai()
    assert chat["type"] == "function"
    fn = chat["function"]
    assert isinstance(fn, dict) and fn["name"] == "recall" and fn["strict"] is True
    params = fn["parameters"]
    assert isinstance(params, dict)
    # Strict mode: every property required, no extra properties, optional ones nullable.
    assert params["required"] == ["ref", "offset"] and params["additionalProperties"] is False
    responses = recall_tool_openai(api="responses", name="recall_context")
    assert responses["name"] == "recall_context" and responses["parameters"] == params
    assert "function" not in responses
    anthropic = recall_tool_anthropic()
    assert set(anthropic) == {"name", "description", "input_schema"}
    schema = anthropic["input_schema"]
    assert isinstance(schema, dict) and schema["required"] == ["ref"] and schema["type"] == "object"
    with pytest.raises(ConfigError, match="tool name"):
        recall_tool_anthropic(name="recall tool")
    with pytest.raises(ConfigError, match="'chat' or 'responses'"):
        recall_tool_openai(api="assistants")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- tokens


def test_tokens_are_the_reported_usage_plus_everything_appended_since(opener: Callable[..., Session]) -> None:
    counter = counter_for_tokenizer("o200k_base")
    engine = ContextEngine(window=128_000, reserve=4_000, counter=counter)
    s = opener(engine=engine)
    s.append(Message(role="system", content="You are terse."))
    s.append(Message(role="user", content="How many files are there?"))
    prepared = s.prepare()
    s.record_usage(prompt_tokens=1_000, completion_tokens=12, cached_tokens=0)
    assert s.tokens == 1_000
    reply = Message(role="assistant", tool_calls=(ToolCall(id="c1", name="ls", arguments='{"path": "."}'),))
    result = Message(role="tool", tool_call_id="c1", content="a.py\nb.py\n" * 200)
    s.extend([reply, result])
    # Tool results count (Kimi CLI ignores them until the next model call).
    assert s.tokens == 1_000 + counter.count_message(reply) + counter.count_message(result)
    assert s.last_usage is not None and s.last_usage.view_len == len(prepared.messages)
    s.close()
    again = opener(engine=ContextEngine(window=128_000, reserve=4_000, counter=counter))
    assert again.tokens == 1_000 + counter.count_message(reply) + counter.count_message(result)
    assert again.usage_totals.calls == 1 and again.usage_totals.prompt_tokens == 1_000


def test_tokens_are_counted_not_zero_after_a_compaction_or_revert(tmp_path: Path) -> None:
    msgs = make_conversation(seed=16, rounds=12, steps=(1, 4), output_tokens=(40, 400))
    counter = WordCounter()
    engine = ContextEngine(window=2500, reserve=400, counter=counter)
    s = Session.open(tmp_path / "run.jsonl", engine=engine, fsync="never")
    cp = s.checkpoint()
    compacted = False
    for m in msgs:
        if m.role == "assistant":
            s.record_usage(prompt_tokens=5_000)  # a provider that counts very differently
            compacted = s.prepare().report.compacted
            if compacted:
                break
        s.append(m)
    assert compacted
    # The compaction rewrote what the usage covered: the view is recounted (Kimi CLI reads 0 here).
    assert s.last_usage is not None and s.compactions[-1].keep < s.last_usage.view_len
    assert s.tokens == counter.count_messages(s.view) > 0
    s.record_usage(prompt_tokens=777)
    s.append(Message(role="assistant", content="three more words"))
    assert s.tokens == 777 + counter.count_message(s.view[-1])
    s.revert_to(cp)
    assert s.tokens == counter.count_messages(s.view) > 0
    s.close()


def test_a_session_prepares_with_the_engine_it_is_given_next(tmp_path: Path) -> None:
    # A request asking for a longer reply needs an engine with a larger reserve: the session takes it, as
    # it is, instead of being closed and reopened (which replayed its log).
    counter = WordCounter()
    s = Session.open(tmp_path / "run.jsonl", engine=ContextEngine(window=4_000, reserve=500, counter=counter))
    s.append(Message(role="user", content="hello there"))
    assert s.prepare().report.reserve == 500
    s.engine = ContextEngine(window=4_000, reserve=1_500, counter=counter)
    assert s.prepare().report.reserve == 1_500 and s.tokens == counter.count_messages(s.view)
    with pytest.raises(ConfigError, match="engine must implement agentcontext.Engine, got str"):
        s.engine = "gpt-4o"  # type: ignore[assignment]
    s.close()


def test_usage_feeds_the_counters_calibration(tmp_path: Path) -> None:
    counter = CalibratedCounter(counter_for_tokenizer("o200k_base"))
    engine = ContextEngine(window=128_000, reserve=4_000, counter=counter)
    s = Session.open(tmp_path / "run.jsonl", engine=engine)
    s.append(Message(role="user", content="Summarise the design document in three bullet points. " * 20))
    prepared = s.prepare()
    predicted = counter.count_messages(prepared.messages)
    s.record_usage(prompt_tokens=int(predicted * 1.2))
    assert counter.calibration.observations == 1
    assert counter.correction == pytest.approx(1.2, rel=0.02)
    s.record_usage(prompt_tokens=10)  # no prepare since: the prompt is unknown, nothing to learn from
    assert counter.calibration.observations == 1
    s.close()


def test_usage_and_counting_options_are_validated(tmp_path: Path) -> None:
    s = Session.open(tmp_path / "run.jsonl")
    with pytest.raises(ConfigError, match="prompt_tokens must be an int >= 0"):
        s.record_usage(prompt_tokens=-1)
    with pytest.raises(ConfigError, match="cached_tokens"):
        s.record_usage(prompt_tokens=1, cached_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a counter"):
        _ = s.tokens
    s.close()
    with pytest.raises(ConfigError, match="recall_max_chars"):
        Session(MemoryStore(), recall_max_chars=5)


# ----------------------------------------------------------------------------- versions and damage


def test_a_v1_log_restores_every_record_type(tmp_path: Path) -> None:
    path = tmp_path / "basic.jsonl"
    shutil.copy(FIXTURES / "v1" / "basic.jsonl", path)
    with pytest.warns(UnknownRecordWarning, match="'hologram'"):
        s = Session.open(path, read_only=True)
    assert s.id == "ses_fixture_v1" and s.last_seq == 16 and s.schema_version == 1
    # Replayed: mask (seq 7), D-Mail revert to checkpoint 1 (seq 12-13), undo of the mask (seq 15).
    assert _ids(s.view) == ["m-sys", "m-u1", "m-a1", "m-t1", "m-a2", "m-dmail"]
    assert [(c.id, c.label, c.messages) for c in s.checkpoints] == [(0, None, 2), (1, "after diagnosis", 5)]
    assert s.view[1].images[0].width == 640 and s.view[2].extra["reasoning_content"] == "run the build"
    assert "cannot find -lfoo" in s.recall("message:m-t1")
    assert "m-t1" in s.recall("compaction:7")
    assert s.recall("message:m-u2") == "Then edit the Makefile."  # reverted away, still there
    assert s.pending_dmail is None
    assert s.usage_totals.cached_tokens == 1024
    assert [u.type for u in s.unknown_records] == ["hologram"]
    s.close()


def test_unknown_records_stay_in_the_file_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "basic.jsonl"
    shutil.copy(FIXTURES / "v1" / "basic.jsonl", path)
    before = path.read_text(encoding="utf-8")
    with pytest.warns(UnknownRecordWarning):
        s = Session.open(path)
    s.append(Message(role="user", content="continue"))
    s.close()
    after = path.read_text(encoding="utf-8")
    assert after.startswith(before)  # append-only: nothing rewritten, the unknown line kept verbatim
    assert json.loads(after.splitlines()[-1])["seq"] == 17


def test_a_v0_kimi_log_restores_read_only_and_migrates_with_a_backup(tmp_path: Path) -> None:
    original = FIXTURES / "v0" / "kimi_context.jsonl"
    path = tmp_path / "context.jsonl"
    shutil.copy(original, path)
    with pytest.warns(UnknownRecordWarning, match="v0_record"):
        reader = Session.open(path, read_only=True, counter=WordCounter())
    assert reader.schema_version == 0 and reader.id.startswith("v0-")
    assert [m.role for m in reader.view] == ["system", "user", "assistant", "tool", "assistant"]
    assert [(c.id, c.messages) for c in reader.checkpoints] == [(0, 1), (1, 2), (2, 4)]
    assert reader.tokens == 2301  # the last _usage, nothing appended after it
    ids = _ids(reader.view)
    reader.close()
    assert path.read_bytes() == original.read_bytes()  # reading never rewrites

    path.chmod(0o644)
    with pytest.raises(NotASessionError, match="agentcontext migrate"):
        Session.open(path)  # opening never migrates by itself
    assert path.read_bytes() == original.read_bytes() and not (tmp_path / "context.jsonl.lock").exists()

    with pytest.warns(UnknownRecordWarning):
        s = Session.open(path, migrate=True)
    assert s.migrated_backup is not None
    assert Path(s.migrated_backup).read_bytes() == original.read_bytes()  # the original is kept
    assert stat.S_IMODE(Path(s.migrated_backup).stat().st_mode) == 0o644  # with its mode
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # and the migrated file keeps it too
    assert _ids(s.view) == ids
    s.revert_to(1)
    assert [m.role for m in s.view] == ["system", "user"]
    s.append(Message(role="assistant", content="Let me look again."))
    s.close()
    first_line = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert first_line["type"] == "header" and first_line["schema_version"] == 1
    with pytest.warns(UnknownRecordWarning):
        again = Session.open(path)
    assert again.migrated_backup is None and again.schema_version == 1
    assert _ids(again.view)[:2] == ids[:2] and again.view[-1].text == "Let me look again."
    again.close()


def test_a_log_from_a_newer_schema_is_read_only(tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    path.write_text(
        json.dumps({"seq": 0, "type": "header", "ts": None, "schema_version": 2, "session_id": "f"})
        + "\n"
        + json.dumps(
            {"seq": 1, "type": "message", "ts": None, "message": {"id": "a", "role": "user", "content": "hi"}}
        )
        + "\n"
    )
    with pytest.raises(StoreError, match="newer agentcontext.*read_only=True"):
        Session.open(path)
    with pytest.warns(UnknownRecordWarning, match="schema 2"):
        s = Session.open(path, read_only=True)
    assert [m.text for m in s.view] == ["hi"]
    s.close()


def test_a_damaged_line_is_skipped_and_the_rest_restores(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with Session.open(path) as s:
        for i in range(5):
            s.append(Message(role="user", content=f"m{i}"))
    lines = path.read_text().splitlines()
    lines[3] = lines[3][: len(lines[3]) // 2]
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(CorruptRecordWarning) as caught:
        s = Session.open(path)
    said = [str(w.message) for w in caught]
    assert any("line 4" in m for m in said)  # the damaged line, and what its loss means for the log
    assert any("seq 3 of the log are missing before line 5" in m for m in said), said
    assert [m.text for m in s.view] == ["m0", "m1", "m3", "m4"]
    s.append(Message(role="user", content="m5"))  # and it goes on
    assert s.last_seq == 6
    s.close()


def test_records_lost_from_the_middle_of_a_log_are_named_not_passed_over(tmp_path: Path) -> None:
    # A stray delete or an evicting cache left a gap: the view lost messages without a word.
    path = tmp_path / "run.jsonl"
    with Session.open(path) as s:
        for i in range(8):
            s.append(Message(role="user", content=f"m{i}"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:4] + lines[7:]) + "\n")  # seqs 4-6 gone, whole lines
    with pytest.warns(CorruptRecordWarning, match="seqs 4-6 of the log are missing before line 5"):
        s = Session.open(path)
    assert [m.text for m in s.view] == ["m0", "m1", "m2", "m6", "m7"]
    s.close()


def test_a_record_that_cannot_apply_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with Session.open(path) as s:
        s.append(Message(role="user", content="a"))
    with path.open("a") as f:
        f.write(json.dumps({"seq": 2, "type": "revert", "ts": None, "checkpoint": 9}) + "\n")
        f.write(json.dumps({"seq": 3, "type": "undo", "ts": None, "compaction": 1}) + "\n")
        f.write(json.dumps({"seq": 3, "type": "checkpoint", "ts": None, "id": 0, "view_len": 1}) + "\n")
    with pytest.warns(CorruptRecordWarning) as caught:
        s = Session.open(path)
    text = " | ".join(str(w.message) for w in caught)
    assert "no checkpoint 9" in text and "not the newest" in text and "repeats or goes back to seq 3" in text
    assert [m.text for m in s.view] == ["a"] and s.last_seq == 3
    s.close()


def test_session_open_errors_name_the_path(tmp_path: Path) -> None:
    from agentcontext.session import SessionNotFoundError, StorePathError

    with pytest.raises(SessionNotFoundError, match="missing.jsonl"):
        Session.open(tmp_path / "missing.jsonl", create=False)
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(StorePathError, match="dir.jsonl"):
        Session.open(tmp_path / "dir.jsonl")


def test_store_kinds_are_interchangeable(tmp_path: Path) -> None:
    stores: list[SessionStore] = [MemoryStore(), SQLiteStore(tmp_path / "x.db", fsync="never")]
    msgs = make_conversation(seed=30, rounds=6, steps=(1, 3), output_tokens=(40, 300))
    states = []
    for store in stores:
        s = Session.from_store(store, engine=_engine())
        _run_agent(s, msgs)
        states.append((_ids(s.view), [c.view for c in s.compactions]))
        s.close()
    assert states[0] == states[1]


def test_appends_and_quiet_prepares_never_walk_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcontext.session import SessionView

    s = Session.open(tmp_path / "run.jsonl", engine=_engine(window=10_000_000), fsync="never")
    history = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}") for i in range(20_000)
    ]
    s.extend(history)
    s.prepare()  # the first call is a full pass: the engine counts everything once
    touched = {"items": 0}
    real_getitem, real_iter = SessionView.__getitem__, SessionView.__iter__

    def counting_getitem(self: SessionView, index: int | slice) -> object:
        result = real_getitem(self, index)  # type: ignore[call-overload]
        touched["items"] += len(result) if isinstance(index, slice) else 1
        return result

    def counting_iter(self: SessionView) -> Iterator[Message]:
        for m in real_iter(self):
            touched["items"] += 1
            yield m

    monkeypatch.setattr(SessionView, "__getitem__", counting_getitem)
    monkeypatch.setattr(SessionView, "__iter__", counting_iter)
    steps = 50
    for i in range(steps):
        s.append(Message(role="user", content=f"step {i}"))
        s.checkpoint()
        s.prepare()
        s.record_usage(prompt_tokens=1_000 + i)
        assert s.tokens == 1_000 + i
    # O(new) per step: a handful of items each, never a pass over the 20,000 before them.
    assert touched["items"] < steps * 20
    s.close()


def test_real_conversations_restore_exactly_and_keep_every_original(tmp_path: Path) -> None:
    from agentcontext.formats import openai as oai

    counter = counter_for_tokenizer("o200k_base")
    compacted = 0
    entries = manifest()
    for entry in entries:
        msgs = oai.to_messages(load(entry["path"]))
        path = tmp_path / f"{entry['id'][:40]}.jsonl"
        s = Session.open(
            path, engine=ContextEngine(window=8_000, reserve=1_000, counter=counter), fsync="never"
        )
        _run_agent(s, msgs)  # unanswered calls, orphan results and repeated ids included
        compacted += bool(s.compactions)
        live = _state(s)
        s.close()
        again = Session.open(path, read_only=True, counter=counter)
        assert _state(again) == live, entry["id"]
        for m in msgs:
            assert again.message(m.id) == m
        again.close()
    assert compacted >= len(entries) // 3  # the long ones were compacted at 8k


@pytest.mark.parametrize("huge", [False, True])
def test_a_summary_and_a_removal_note_name_the_reference_that_reads_back_what_they_stand_for(
    tmp_path: Path, huge: bool
) -> None:
    # They said "can be recalled by id" and named no id: the model had nothing to pass to its recall tool.
    # With huge outputs, some are cut at ingest in the call that summarizes them: the summary covers the
    # cut copy, which no view ever held, and recall reads back its original.
    import re

    if huge:
        s = Session.open(tmp_path / "huge.jsonl", engine=ContextEngine("gpt-4o", window=6_000, reserve=500))
        s.extend(make_conversation(3, rounds=10))
        s.prepare()
    else:
        s, _ = _compacted_session(tmp_path)
    standing = [m for m in s.view if kind_of(m) in (MessageKind.SUMMARY, MessageKind.ELISION)]
    assert standing
    for note in standing:
        found = re.search(r"(message:msg_[0-9a-f]+)", note.text)
        assert found, note.text[:300]
        transcript = s.recall(found.group(1))
        meta = note.metadata["agentcontext"]
        assert isinstance(meta, dict) and isinstance(meta["covers"], list)
        for mid in meta["covers"]:
            assert str(mid) in transcript or huge
        assert "not in the log" not in transcript
    s.close()


def test_a_reference_the_log_recorded_nowhere_is_found_by_hashing_each_output_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Recall by content (a per-call filter's cut) hashed every output of the log at every call, every
    # page of a long output included, and iterated the archive unlocked while appends could grow it.
    from agentcontext import artifacts

    hashed = [0]
    real = artifacts.ArtifactRef.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type, data: str) -> artifacts.ArtifactRef:
        hashed[0] += 1
        return real(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(artifacts.ArtifactRef, "of", classmethod(counting))
    s = Session.from_store(MemoryStore())
    s.append(Message(role="user", content="run them"))
    for k in range(20):
        call = ToolCall(id=f"c{k}", name="bash", arguments="{}")
        s.extend(
            [
                Message(role="assistant", content="", tool_calls=(call,)),
                Message(role="tool", tool_call_id=f"c{k}", content=f"out {k}\n" * 2_000),
            ]
        )
    ref = "artifact:sha256:" + real(artifacts.ArtifactRef, "out 7\n" * 2_000).digest
    hashed[0] = 0
    assert s.recall(ref) == "out 7\n" * 2_000
    for offset in range(0, 12_000, 1_000):  # the pages of it, and a reference that names nothing
        s.handle_recall({"ref": ref, "offset": offset})
    with pytest.raises(RecallError, match="not an artifact of this session"):
        s.recall("artifact:sha256:" + "0" * 64)
    assert hashed[0] == 20  # each output once
