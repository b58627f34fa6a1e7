"""ContextMiddleware and pre_model_hook driving real LangChain / LangGraph agents.

The agents are the frameworks' own (``create_agent``, ``create_react_agent``) with
``ChatOpenAI`` as their model, pointed at the loopback provider of
``tests/providers.py``: it rejects what OpenAI rejects (orphaned or unanswered tool
calls, prompts over the window counted with tiktoken) and answers with scripted
tool calls. Nothing of LangChain is mocked.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import math
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

import agentcontext as ac
from _sizes import runs
from agentcontext.compaction import MessageKind, kind_of
from agentcontext.formats import langchain as lc
from agentcontext.formats import openai as openai_format
from agentcontext.integrations.langchain import ContextMiddleware
from agentcontext.models import ModelSpec
from agentcontext.session import MemoryStore, MessageRecord, Session
from agentcontext.tokens import ScriptEstimator
from providers import ProviderServer, Reply, Request, tool_loop

SYSTEM = "You are a build engineer. Run the steps you are asked to run, then report."
WINDOW = 16_000


def run_tool(lines: int = 90) -> BaseTool:
    """A tool whose output is ``lines`` lines of log (about 22 tokens a line), different at every step."""

    @tool
    def run(step: int) -> str:
        """Run one build step and return its log."""
        return "\n".join(
            f"[step {step}] line {i}: the compiler finished this unit without warnings, the cache was warm "
            f"and {lines - i} units are left"
            for i in range(lines)
        )

    return run


def chat_model(server: ProviderServer, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o", base_url=server.openai_url, api_key="sk-test", max_retries=0, **kwargs)


def agent_for(
    server: ProviderServer, middleware: list[Any], *, checkpointer: Any = None, **model: Any
) -> Any:
    return create_agent(
        chat_model(server, **model),
        tools=[run_tool()],
        system_prompt=SYSTEM,
        middleware=middleware,
        checkpointer=checkpointer,
    )


def config(thread: str | None, steps: int) -> dict[str, Any]:
    cfg: dict[str, Any] = {"recursion_limit": 10 * steps + 20}
    if thread is not None:
        cfg["configurable"] = {"thread_id": thread}
    return cfg


def assert_requests_ok(server: ProviderServer, latest_user: Callable[[int], str] | str) -> None:
    """Every request was accepted, fits the window, starts with the system prompt and keeps the latest user message."""
    assert [r.error for r in server.rejected] == []
    for i, r in enumerate(server.requests):
        assert r.tokens <= server.window
        assert r.body["messages"][0] == {"role": "system", "content": SYSTEM}
        wanted = latest_user(i) if callable(latest_user) else latest_user
        users = [m["content"] for m in r.body["messages"] if m["role"] == "user"]
        assert wanted in users, (i, users)


def prefix_breaks(server: ProviderServer) -> int:
    """How many requests do not begin with the whole previous request (each one is a prompt-cache miss)."""
    breaks = 0
    for before, after in zip(server.accepted, server.accepted[1:], strict=False):
        old, new = before.body["messages"], after.body["messages"]
        if new[: len(old)] != old:
            breaks += 1
    return breaks


def compactions(engine: ac.ContextEngine) -> int:
    return sum(engine.stats.compactions.values())


# ----------------------------------------------------------------------------- request mode


def test_long_loop_every_request_fits_is_valid_and_keeps_what_matters() -> None:
    steps = runs(16, 300)
    engine = ac.ContextEngine(model="gpt-4o", window=WINDOW)
    with ProviderServer(window=WINDOW, policy=tool_loop(steps=steps)) as server:
        agent = agent_for(server, [ContextMiddleware(engine)], checkpointer=InMemorySaver())
        first = agent.invoke(
            {"messages": [{"role": "user", "content": "build everything"}]}, config("t", steps)
        )
        turn_one = len(server.requests)
        server.policy = tool_loop(steps=steps // 2)
        agent.invoke({"messages": [{"role": "user", "content": "now build it again"}]}, config("t", steps))
    assert first["messages"][-1].content == "done"
    assert len(first["messages"]) == 2 * steps + 2  # the graph state keeps the whole history
    assert_requests_ok(server, lambda i: "build everything" if i < turn_one else "now build it again")
    assert compactions(engine) >= 3  # the loop did overflow the window, many times
    # Between compactions the prompt only grows: the provider's prefix cache keeps hitting.
    assert prefix_breaks(server) <= compactions(engine)


def test_async_agent_prepares_without_blocking_and_without_not_implemented() -> None:
    steps = runs(12, 120)
    engine = ac.ContextEngine(model="gpt-4o", window=8_000)
    with ProviderServer(window=8_000, policy=tool_loop(steps=steps)) as server:
        agent = agent_for(server, [ContextMiddleware(engine)])
        out = asyncio.run(
            agent.ainvoke({"messages": [{"role": "user", "content": "build"}]}, config(None, steps))
        )
    assert out["messages"][-1].content == "done"
    assert_requests_ok(server, "build")
    assert compactions(engine) >= 1


class Recorder(AgentMiddleware):  # type: ignore[type-arg]
    """Placed after ContextMiddleware: records, at every model call, the report of the preparation just made."""

    def __init__(self, context: ContextMiddleware) -> None:
        super().__init__()
        self.context = context
        self.seen: list[tuple[str | None, bool]] = []

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        last = self.context.last
        assert last is not None
        users = [
            m.content for m in request.messages if m.type == "human" and not str(m.content).startswith("[")
        ]
        self.seen.append((users[-1] if users else None, last.report.incremental))
        return handler(request)


def test_each_thread_has_its_own_state_and_steps_are_incremental() -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=WINDOW)
    context = ContextMiddleware(engine)
    recorder = Recorder(context)
    with ProviderServer(window=WINDOW) as server:
        agent = agent_for(server, [context, recorder], checkpointer=InMemorySaver())
        for turn in range(3):
            for thread in ("a", "b"):
                server.policy = tool_loop(steps=2)
                agent.invoke(
                    {"messages": [{"role": "user", "content": f"{thread} turn {turn}"}]}, config(thread, 4)
                )
    assert_requests_ok(server, lambda i: server.requests[i].latest_user_text())
    # Only each thread's first call looked at the whole history; the others, interleaved, only at what was new.
    assert [incremental for _, incremental in recorder.seen].count(False) == 2
    assert [text for text, incremental in recorder.seen if not incremental] == ["a turn 0", "b turn 0"]
    # A thread's requests never carry another thread's messages.
    for r in server.requests:
        users = [m["content"] for m in r.body["messages"] if m["role"] == "user" and m["content"][0] != "["]
        assert len({u.split()[0] for u in users}) == 1


def per_conversation_loop(steps: int) -> Callable[[Request], Reply]:
    """Several conversations at once ("convK build"): each calls the tool ``steps`` times, then answers."""
    import threading

    counters: dict[str, Iterator[int]] = {}
    lock = threading.Lock()

    def policy(request: Request) -> Reply:
        users = [m["content"] for m in request.body["messages"] if m["role"] == "user"]
        mine = [u for u in users if isinstance(u, str) and u.startswith("conv")]
        key = mine[-1] if mine else "?"
        with lock:
            i = next(counters.setdefault(key, itertools.count()))
        return Reply(tool_calls=[("run", {"step": i})]) if i < steps else Reply(text="done " + key)

    return policy


@pytest.mark.parametrize("how", ["middleware", "hook", "async middleware"])
def test_runs_without_a_thread_id_at_once_are_sent_as_each_alone(how: str) -> None:
    # `agent.batch` (or a threaded server) with no checkpointer: every run had the thread None, so they shared
    # one state and one converter, and sent each other's messages (and tool results without their calls);
    # async, each step started over (2.4 times the compactions, each a prompt-cache miss).
    n, steps = 6, 12

    def run(concurrency: int) -> tuple[dict[str, list[Any]], int]:
        engine = ac.ContextEngine(model="gpt-4o", window=6_000)
        with ProviderServer(window=6_000, policy=per_conversation_loop(steps)) as server:
            if how == "hook":
                agent = react_agent(server, engine, [run_tool(20)])
            else:
                agent = create_agent(
                    chat_model(server),
                    tools=[run_tool(20)],
                    system_prompt=SYSTEM,
                    middleware=[ContextMiddleware(engine)],
                )
            inputs = [{"messages": [{"role": "user", "content": f"conv{k} build"}]} for k in range(n)]
            if how == "async middleware":
                outs = asyncio.run(agent.abatch(inputs, config(None, steps), max_concurrency=concurrency))
            else:
                outs = agent.batch(inputs, config(None, steps), max_concurrency=concurrency)
        assert [r.error for r in server.rejected] == []
        assert [o["messages"][-1].content for o in outs] == [f"done conv{k} build" for k in range(n)]
        sent: dict[str, list[Any]] = {}
        for r in server.requests:
            users = {
                u.split()[0]
                for m in r.body["messages"]
                if m["role"] == "user" and (u := m["content"])[:4] == "conv"
            }
            assert len(users) == 1, users  # never another conversation's messages
            # The server numbers tool calls across conversations: the numbers differ with the order of runs.
            sent.setdefault(users.pop(), []).append(
                re.sub(r"call_\d+", "call", json.dumps(r.body["messages"]))
            )
        return sent, compactions(engine)

    alone, compacted = run(1)
    together, compacted_together = run(n)
    assert compacted >= n  # each conversation outgrew the window
    assert together == alone and compacted_together == compacted


def test_a_pdf_the_user_attached_is_counted_by_its_pages_not_as_its_base64() -> None:
    # A 3-page PDF with scanned images (600 kB): agentcontext counted the block's JSON, base64 included,
    # as about 600k tokens, and refused the run with a ContextOverflowError for a request that fits.
    pages = b"".join(b"%d 0 obj << /Type /Page >> endobj\n" % (i + 1) for i in range(3))
    scan = bytes((i * 7919) % 251 for i in range(600_000))
    data = base64.b64encode(b"%PDF-1.4\n" + pages + b"4 0 obj << /Length 600000 >>\nstream\n" + scan).decode()
    question = "What does the report conclude?"
    attached = [
        {"type": "text", "text": question},
        {
            "type": "file",
            "base64": data,
            "mime_type": "application/pdf",
            "extras": {"filename": "report.pdf"},
        },
    ]
    engine = ac.ContextEngine(model="gpt-4o", window=WINDOW, reserve=1_000)
    with ProviderServer(window=WINDOW, policy=tool_loop(steps=4)) as server:
        agent = agent_for(server, [ContextMiddleware(engine)])
        agent.invoke({"messages": [{"role": "user", "content": attached}]}, config(None, 4))
    assert [r.error for r in server.rejected] == []
    assert len(server.accepted) == 5
    for r in server.accepted:  # the question and its file, every time, within the window by the server's bill
        assert r.tokens <= WINDOW - 1_000 and data in json.dumps(r.body) and question in json.dumps(r.body)
        assert 3 * 2_400 < r.tokens


def test_a_system_prompt_that_changes_at_every_call_keeps_the_steps_incremental() -> None:
    # A @dynamic_prompt (a clock, a to-do count) made every call a full pass and a new compaction
    # (37 compactions against 16 for the same run with a fixed prompt, each a prompt-cache miss).
    from langchain.agents.middleware import dynamic_prompt

    steps = runs(30, 60)

    def run(dynamic: bool) -> tuple[int, int, list[str]]:
        calls = itertools.count()

        @dynamic_prompt
        def prompt(request: Any) -> str:
            return SYSTEM + f" Current time: 12:{next(calls) if dynamic else 0:02d}."

        engine = ac.ContextEngine(model="gpt-4o", window=8_000)
        with ProviderServer(window=8_000, policy=tool_loop(steps=steps)) as server:
            agent = create_agent(
                chat_model(server), tools=[run_tool(40)], middleware=[prompt, ContextMiddleware(engine)]
            )
            agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config(None, steps))
        assert [r.error for r in server.rejected] == []
        accepted = [r.body["messages"] for r in server.accepted]
        breaks = sum(new[1 : len(old)] != old[1:] for old, new in zip(accepted, accepted[1:], strict=False))
        return compactions(engine), breaks, [m[0]["content"] for m in accepted]

    fixed_compactions, fixed_breaks, _ = run(dynamic=False)
    compacted, breaks, systems = run(dynamic=True)
    assert len(set(systems)) == len(systems)  # today's prompt at every call
    assert (compacted, breaks) == (fixed_compactions, fixed_breaks) and compacted >= 2


@pytest.mark.parametrize("mode", ["request", "state"])
def test_a_structured_output_schema_is_counted(mode: str) -> None:
    # create_agent binds the structured-output tool after the middleware ran: a 4,000-token schema went
    # uncounted, and the provider refused a request of 8,143 tokens in an 8,000 window.
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import Field, create_model

    why = "describe how it was measured, which unit it uses and which services contributed to it. " * 3
    fields: dict[str, Any] = {
        f"metric_{i}": (str, Field(description=f"Build metric {i}: {why}")) for i in range(60)
    }
    report = create_model("BuildReport", __doc__="The final build report.", **fields)
    steps = 25

    def policy(request: Request) -> Reply:
        if (
            sum(m["role"] == "tool" for m in request.body["messages"]) < steps
            and len(server.requests) <= steps
        ):
            return Reply(tool_calls=[("run", {"step": len(server.requests)})])
        return Reply(tool_calls=[("BuildReport", {f"metric_{i}": "ok" for i in range(60)})])

    engine = ac.ContextEngine(model="gpt-4o", window=8_000)
    context = ContextMiddleware(engine, mode=mode)  # type: ignore[arg-type]
    with ProviderServer(window=8_000, policy=policy) as server:
        agent = create_agent(
            chat_model(server),
            tools=[run_tool(25)],
            system_prompt=SYSTEM,
            middleware=[context],
            response_format=ToolStrategy(report),
            checkpointer=InMemorySaver(),
        )
        out = agent.invoke(
            {"messages": [{"role": "user", "content": "build and report"}]}, config("s", steps)
        )
    assert type(out["structured_response"]).__name__ == "BuildReport"
    assert [r.error for r in server.rejected] == []
    assert context.last is not None and context.last.report.tool_tokens > 3_000


@pytest.mark.parametrize("mode", ["request", "state"])
def test_window_from_the_model_profile(mode: str) -> None:
    # In state mode every thread's first call raised: before_model ran before any model was seen.
    template = ac.ContextEngine(model="gpt-4o")  # 128k: far more than the model's profile allows
    steps = runs(10, 60)
    context = ContextMiddleware(template, window="profile", mode=mode)  # type: ignore[arg-type]
    with ProviderServer(window=6_000, policy=tool_loop(steps=steps)) as server:
        agent = agent_for(
            server, [context], profile={"max_input_tokens": 6_000}, checkpointer=InMemorySaver()
        )
        agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("p", steps))
    assert_requests_ok(server, "build")
    assert context.last is not None and context.last.report.window == 6_000
    with pytest.raises(ac.ConfigError, match="max_input_tokens"):
        with ProviderServer(window=6_000) as server:
            agent = agent_for(server, [ContextMiddleware(template, window="profile")], profile={})
            agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config(None, 2))


# ----------------------------------------------------------------------------- state mode


def test_state_mode_persists_the_compaction_and_a_resumed_thread_does_not_redo_it() -> None:
    steps = runs(16, 120)
    saver = InMemorySaver()
    engine = ac.ContextEngine(model="gpt-4o", window=8_000)
    with ProviderServer(window=8_000, policy=tool_loop(steps=steps)) as server:
        agent = agent_for(server, [ContextMiddleware(engine, mode="state")], checkpointer=saver)
        agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("t", steps))
        assert_requests_ok(server, "build")
        assert compactions(engine) >= 1
        stored = agent.get_state(config("t", 1)).values["messages"]
        assert len(stored) < 2 * steps + 2  # the checkpoint holds the compacted history
        kinds = [kind_of(m) for m in lc.to_messages(stored)]
        assert MessageKind.SUMMARY in kinds  # and its summary is recognised as one
        ids = [m.id for m in stored]
        assert len(set(ids)) == len(ids)

        # A new process: new engine, new middleware, same checkpoint. The next call does not compact again.
        fresh = ac.ContextEngine(model="gpt-4o", window=8_000)
        resumed = agent_for(server, [ContextMiddleware(fresh, mode="state")], checkpointer=saver)
        server.policy = tool_loop(steps=0, final="ok")
        before = len(server.requests)
        resumed.invoke({"messages": [{"role": "user", "content": "status?"}]}, config("t", 2))
        assert compactions(fresh) == 0
        assert len(server.requests) == before + 1 and server.rejected == []
        carried = [m["content"] for m in server.requests[-1].body["messages"] if m["role"] == "user"]
        assert carried[-1] == "status?" and any("summary" in c for c in carried)


def test_state_mode_async() -> None:
    steps = runs(12, 100)
    engine = ac.ContextEngine(model="gpt-4o", window=8_000)
    with ProviderServer(window=8_000, policy=tool_loop(steps=steps)) as server:
        agent = agent_for(server, [ContextMiddleware(engine, mode="state")], checkpointer=InMemorySaver())
        out = asyncio.run(
            agent.ainvoke({"messages": [{"role": "user", "content": "build"}]}, config("t", steps))
        )
    assert out["messages"][-1].content == "done"
    assert_requests_ok(server, "build")
    assert compactions(engine) >= 1


# ----------------------------------------------------------------------------- session and recall


def test_session_keeps_every_original_and_the_model_can_recall_them() -> None:
    session = Session.from_store(MemoryStore(), engine=ac.ContextEngine(model="gpt-4o", window=8_000))
    recalled: list[str] = []
    budget = runs(10, 80)
    calls = iter(range(10**6))

    def policy(request: Request) -> Reply:
        step = next(calls)
        if (
            not recalled
            and any("[agentcontext: summary" in t for t in request.texts())
            and session.compactions
        ):
            recalled.append(f"compaction:{session.compactions[0].seq}")
            return Reply(tool_calls=[("recall", {"ref": recalled[0], "offset": None})])
        return Reply(tool_calls=[("run", {"step": step})]) if step < budget else Reply(text="done")

    with ProviderServer(window=8_000, policy=tool_loop(steps=budget)) as server:
        server.policy = policy
        agent = agent_for(server, [ContextMiddleware(session=session)])
        out = agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config(None, 3 * budget))
    assert_requests_ok(server, "build")
    assert recalled, "the history never needed compacting"
    answers = [m for m in out["messages"] if m.type == "tool" and m.name == "recall"]
    assert answers and "line 89" in answers[0].content  # the full original, not the summary's excerpt
    # Every message the agent saw is in the session's log, compacted or not.
    for m in lc.to_messages(out["messages"]):
        assert session.message(m.id) == m
    assert [t["function"]["name"] for t in server.requests[0].body["tools"]] == ["recall", "run"]


def test_a_session_follows_a_thread_that_removed_messages_or_went_back_to_a_checkpoint() -> None:
    # The session prepared its own view, which still held what the thread took back: a message removed from
    # the graph state (a secret), or a whole branch after an earlier checkpoint, summary included.
    from langchain_core.messages import RemoveMessage

    session = Session.from_store(MemoryStore(), engine=ac.ContextEngine(model="gpt-4o", window=6_000))
    with ProviderServer(window=6_000, policy=tool_loop(steps=0, final="ok")) as server:
        agent = create_agent(
            chat_model(server),
            tools=[run_tool(20)],
            system_prompt=SYSTEM,
            middleware=[ContextMiddleware(session=session, recall=False)],
            checkpointer=InMemorySaver(),
        )

        def say(text: str, steps: int = 0, cfg: dict[str, Any] | None = None) -> None:
            server.policy = tool_loop(steps=steps, final="ok")
            agent.invoke({"messages": [{"role": "user", "content": text}]}, cfg or config("t", steps + 2))

        say("my password is hunter2")
        say("second question")
        first_two = agent.get_state(config("t", 2)).values["messages"][:2]
        agent.update_state(config("t", 2), {"messages": [RemoveMessage(id=m.id) for m in first_two]})
        say("third")
        sent = server.requests[-1].body["messages"]
        assert [m["content"] for m in sent[1:]] == ["second question", "ok", "third"]

        say("turn 4: the plan")
        after = next(
            c
            for c in agent.get_state_history(config("t", 2))
            if not c.next and c.values["messages"][-1].content == "ok"
        )  # the newest finished turn: "turn 4"
        say("turn 5: ABANDONED branch", steps=12)  # long enough to be compacted: a summary stands for it
        assert any(r.compacted for r in session.compactions)
        say("turn 5': the fork", cfg=after.config)
    text = json.dumps(server.requests[-1].body["messages"])
    assert "ABANDONED" not in text and "[step 11]" not in text and "turn 5': the fork" in text
    assert [r.error for r in server.rejected] == []
    assert "hunter2" not in text
    logged = [r.message.text for r in session.records() if isinstance(r, MessageRecord)]
    assert "my password is hunter2" in logged  # the log keeps it (the session's own record, recallable)


def test_a_restarted_state_mode_thread_with_a_session_is_followed_without_undoing_anything(
    tmp_path: Path,
) -> None:
    # In state mode the graph state holds the summaries the session wrote: after a restart the session's
    # view and the thread's history agree, and following it must neither undo a compaction nor rewind.
    from agentcontext.session import RewindRecord, UndoRecord

    saver = InMemorySaver()

    def make(server: ProviderServer) -> tuple[ContextMiddleware, Any]:
        engine = ac.ContextEngine(model="gpt-4o", window=8_000)
        context = ContextMiddleware(
            mode="state", session=lambda tid: Session.open(tmp_path / f"{tid}.jsonl", engine=engine)
        )
        return context, create_agent(
            chat_model(server),
            tools=[run_tool(40)],
            system_prompt=SYSTEM,
            middleware=[context],
            checkpointer=saver,
        )

    with ProviderServer(window=8_000, policy=tool_loop(steps=16)) as server:
        context, agent = make(server)
        agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("t", 16))
        context.close()
        context, agent = make(server)  # a new process: the same checkpoint and session file
        server.policy = tool_loop(steps=3)
        agent.invoke({"messages": [{"role": "user", "content": "status after restart"}]}, config("t", 3))
        context.close()
    assert [r.error for r in server.rejected] == []
    with Session.open(tmp_path / "t.jsonl") as session:
        records = list(session.records())
        assert any(r.compacted for r in session.compactions)
    assert not [r for r in records if isinstance(r, UndoRecord | RewindRecord)]


def test_recall_reads_the_running_threads_session_and_shows_the_model_only_its_own_arguments() -> None:
    # With a session per thread (``session=`` a function), recall must read the thread's session: the
    # tool's config parameter was annotated ``RunnableConfig | None``, which LangChain neither injects
    # nor hides, so recall opened the session of thread None and the model saw the whole
    # RunnableConfig schema (about 400 tokens) as an argument of the tool, on every request.
    sessions: dict[str | None, Session] = {}

    def session_of(thread: str | None) -> Session:
        if thread not in sessions:
            sessions[thread] = Session.from_store(
                MemoryStore(), engine=ac.ContextEngine(model="gpt-4o", window=8_000)
            )
        return sessions[thread]

    recalled: list[str] = []
    budget = runs(10, 80)
    calls = iter(range(10**6))

    def policy(request: Request) -> Reply:
        step = next(calls)
        mine = sessions.get("t1")
        if not recalled and mine is not None and mine.compactions:
            recalled.append(f"compaction:{mine.compactions[0].seq}")
            return Reply(tool_calls=[("recall", {"ref": recalled[0]})])
        return Reply(tool_calls=[("run", {"step": step})]) if step < budget else Reply(text="done")

    with ProviderServer(window=8_000, policy=policy) as server:
        agent = agent_for(server, [ContextMiddleware(session=session_of)])
        out = agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("t1", 3 * budget))
    assert_requests_ok(server, "build")
    assert recalled, "the history never needed compacting"
    assert set(sessions) == {"t1"}  # no session was opened for another thread
    answers = [m for m in out["messages"] if m.type == "tool" and m.name == "recall"]
    assert answers and "line 89" in answers[0].content
    (tool,) = [t for t in server.requests[0].body["tools"] if t["function"]["name"] == "recall"]
    assert set(tool["function"]["parameters"]["properties"]) == {"ref", "offset"}


# ----------------------------------------------------------------------------- LangGraph prebuilt agent


def react_agent(server: ProviderServer, engine: ac.ContextEngine, tools: list[Any], **options: Any) -> Any:
    """LangGraph's prebuilt ``create_react_agent`` with agentcontext's ``pre_model_hook`` (``options``: the hook's)."""
    from agentcontext.integrations.langgraph import pre_model_hook

    checkpointer = options.pop("checkpointer", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of create_agent, still what many run
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(
            chat_model(server),
            tools,
            prompt=SYSTEM,
            pre_model_hook=pre_model_hook(engine, prompt=SYSTEM, tools=tools, **options),
            checkpointer=checkpointer,
        )


def test_langgraph_pre_model_hook() -> None:
    steps = runs(10, 120)
    engine = ac.ContextEngine(model="gpt-4o", window=8_000)
    tools = [run_tool()]
    with ProviderServer(window=8_000, policy=tool_loop(steps=steps)) as server:
        agent = react_agent(server, engine, tools, checkpointer=InMemorySaver())
        out = agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("t", steps))
        server.policy = tool_loop(steps=steps)
        asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "again"}]}, config("t", steps)))
    assert out["messages"][-1].content == "done"
    assert_requests_ok(server, lambda i: "build" if i <= steps else "again")
    assert compactions(engine) >= 2


# ----------------------------------------------------------------------------- one-shot fits


def long_history(steps: int = 70) -> list[Any]:
    """A whole agent run sent at once (about 34k tokens: three budgets of a 16k window), then a new request."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    history: list[Any] = [HumanMessage("build everything")]
    for k in range(steps):
        history.append(
            AIMessage(content="", tool_calls=[{"name": "run", "args": {"step": k}, "id": f"c{k}"}])
        )
        history.append(ToolMessage(content=run_tool(15).invoke({"step": k}), tool_call_id=f"c{k}"))
    history += [AIMessage(content="done"), HumanMessage("now summarize the build")]
    return history


def middleware(through: str, **options: Any) -> ContextMiddleware:
    engine = ac.ContextEngine(model="gpt-4o", window=WINDOW)
    if through == "session":
        return ContextMiddleware(
            session=Session.from_store(MemoryStore(), engine=engine), recall=False, **options
        )
    return ContextMiddleware(engine, **options)


@pytest.mark.parametrize(("fill", "through"), [(True, "engine"), (0.9, "engine"), (True, "session")])
def test_a_history_sent_once_with_fill_fills_the_budget_and_the_default_compacts_to_its_target(
    fill: bool | float, through: str
) -> None:
    filled, default = middleware(through, fill=fill), middleware(through)
    reports = []
    for context in (filled, default):
        with ProviderServer(window=WINDOW, policy=tool_loop(steps=0, final="ok")) as server:
            agent_for(server, [context]).invoke({"messages": long_history()}, config(None, 1))
        assert_requests_ok(server, "now summarize the build")
        assert context.last is not None
        reports.append(context.last.report)
    one_shot, running = reports
    assert one_shot.tokens_before > 2 * one_shot.budget
    assert any(n.startswith("one-shot fit: filled up to") for n in one_shot.notes) and one_shot.fill
    share = 0.96 if fill is True else fill  # the budget less a 4% margin, or the share asked for
    # Nearly all of it used: what is left is about one round of the history (400 tokens) or less.
    assert (share - 0.06) * one_shot.budget < one_shot.tokens_after <= share * one_shot.budget
    assert one_shot.tokens_after > 0.85 * one_shot.budget
    # A running agent's default: down to the hysteresis target, well below the budget.
    assert not running.fill and not any("one-shot" in n for n in running.notes)
    assert running.tokens_after <= running.target + 0.05 * running.budget < 0.6 * running.budget


def test_pre_model_hook_fills_the_budget_when_asked() -> None:
    tools = [run_tool()]
    sent = {}
    for fill in (True, False):
        engine = ac.ContextEngine(model="gpt-4o", window=WINDOW)
        with ProviderServer(window=WINDOW, policy=tool_loop(steps=0, final="ok")) as server:
            agent = react_agent(server, engine, tools, fill=fill)
            asyncio.run(agent.ainvoke({"messages": long_history()}, config(None, 1)))  # the async path
        assert_requests_ok(server, "now summarize the build")
        (request,) = server.requests
        sent[fill] = request.tokens / engine.budget  # counted by the server, on its own
    assert sent[True] > 0.85  # nearly the whole budget
    assert sent[False] < 0.6  # the hysteresis target


def test_a_bad_fill_is_refused_when_the_middleware_or_hook_is_built() -> None:
    from agentcontext.integrations.langgraph import pre_model_hook

    engine = ac.ContextEngine(model="gpt-4o", window=WINDOW)
    for bad in (1.5, 0, 1, "yes", None, float("nan")):
        with pytest.raises(ac.ConfigError, match=r"fill must be False .* got " + re.escape(repr(bad))):
            ContextMiddleware(engine, fill=bad)  # type: ignore[arg-type]
        with pytest.raises(ac.ConfigError, match="fill must be"):
            pre_model_hook(engine, fill=bad)  # type: ignore[arg-type]
    assert ContextMiddleware(engine, fill=0.9)._core.fill == 0.9


# ----------------------------------------------------------------------------- the README's lines


def test_docs_langchain_example_runs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    text = Path("docs/langchain.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    policy = tool_loop(steps=2, tool="read_file", args=lambda i: {"path": f"docs/page{i}.md"})
    with ProviderServer(window=128_000) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        namespace: dict[str, Any] = {"__name__": "docs_langchain"}
        for block in blocks:
            server.policy = tool_loop(steps=2, tool="read_file", args=lambda i: {"path": f"docs/page{i}.md"})
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="create_react_agent has been moved")
                exec(compile(block, "docs/langchain.md", "exec"), namespace)
    assert len(server.requests) == 9 and server.rejected == []
    assert (tmp_path / "runs" / "task-42.jsonl").exists()
    del policy


# ----------------------------------------------------------------------------- usage fed back

RATIO = 1.35
"""How many tokens the provider of `estimated_model` bills per token agentcontext's estimate counts."""
ESTIMATE = ScriptEstimator()


def billed(api: str, body: dict[str, Any]) -> int:
    """The prompt tokens a model whose tokenizer makes 1.35 times agentcontext's estimate bills for ``body``."""
    assert api == "openai"
    messages = openai_format.to_messages(body["messages"])
    return math.ceil(
        RATIO * (ESTIMATE.count_messages(messages) + ESTIMATE.count_tools(body.get("tools") or []))
    )


def estimated_model(window: int) -> ModelSpec:
    """A model agentcontext has no tokenizer for (as Claude or Gemini): its prompts are counted by estimate."""
    return ModelSpec(
        name="house-model",
        provider="other",
        context_window=window,
        max_output_tokens=500,
        tokenizer="estimate",
    )


class Fed(ac.ContextEngine):
    """A ContextEngine that keeps every ``(report, prompt_tokens)`` it is given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fed: list[tuple[ac.Report, int]] = []

    def record_usage(self, report: ac.Report, prompt_tokens: int) -> bool:
        self.fed.append((report, prompt_tokens))
        return super().record_usage(report, prompt_tokens)


def usage_agent(server: ProviderServer, context: ContextMiddleware, **kwargs: Any) -> Any:
    return create_agent(
        chat_model(server), tools=[run_tool(15)], system_prompt=SYSTEM, middleware=[context], **kwargs
    )


def per_thread_loop(steps: int) -> Callable[[Request], Reply]:
    """`tool_loop` for several threads at once: each request (its latest user message) counts its own steps."""
    counters: dict[str, Iterator[int]] = {}

    def policy(request: Request) -> Reply:
        users = [m["content"] for m in request.body["messages"] if m["role"] == "user"]
        latest = next(u for u in reversed(users) if not u.startswith("[agentcontext"))  # not a summary
        step = next(counters.setdefault(latest, itertools.count()))
        return Reply(tool_calls=[("run", {"step": step})]) if step < steps else Reply(text="done")

    return policy


def assert_fed_its_own_requests(engine: Fed, server: ProviderServer) -> None:
    """Every usage fed is the bill of the request the report describes: about 1.35 times its count."""
    assert engine.fed
    for report, prompt_tokens in engine.fed:
        # Another thread's bill against this report would be several times off (the threads' sizes differ).
        assert 1.3 < prompt_tokens / report.tokens_after < 1.4, (prompt_tokens, report.tokens_after)
    assert {p for _, p in engine.fed} <= {r.tokens for r in server.accepted}


STEPS = 30
WINDOW_BILLED = 8_000


@pytest.mark.parametrize("how", ["request", "async", "stream", "state"])
def test_usage_teaches_a_model_counted_by_estimate_its_real_size_and_every_request_fits(how: str) -> None:
    """A provider billing 1.35 times agentcontext's estimate: fed back its usage, the engine stays inside the window.

    ``fill=True`` fills the budget at every step, so the estimate's error is all that separates a request
    from the window. Without usage (an engine whose counter cannot learn) the server rejects the loop.
    """

    def run(engine: ac.ContextEngine) -> tuple[ProviderServer, Exception | None]:
        mode = "state" if how == "state" else "request"
        context = ContextMiddleware(engine, mode=mode, fill=True)
        model = {"streaming": True, "stream_usage": True} if how == "stream" else {}
        with ProviderServer(window=WINDOW_BILLED, policy=tool_loop(steps=STEPS), bill=billed) as server:
            agent = create_agent(
                chat_model(server, **model),
                tools=[run_tool(15)],
                system_prompt=SYSTEM,
                middleware=[context],
                checkpointer=InMemorySaver() if mode == "state" else None,
            )
            request = {"messages": [{"role": "user", "content": "build"}]}
            try:
                if how == "async":
                    asyncio.run(agent.ainvoke(request, config("t", STEPS)))
                else:
                    agent.invoke(request, config("t", STEPS))
            except openai.BadRequestError as exc:
                return server, exc
        return server, None

    # Without feedback: the estimate is 26% under the bill, and a full budget is over the window.
    blind = ac.ContextEngine(estimated_model(WINDOW_BILLED), counter=ScriptEstimator())
    server, error = run(blind)
    assert isinstance(error, openai.BadRequestError) and "maximum context length" in str(error)
    (rejected,) = server.rejected
    assert rejected.tokens > WINDOW_BILLED

    engine = Fed(estimated_model(WINDOW_BILLED))  # the default counter: calibrated
    server, error = run(engine)
    assert error is None and server.rejected == []
    assert len(server.requests) == STEPS + 1
    assert max(r.tokens for r in server.requests) <= engine.budget < WINDOW_BILLED
    assert max(r.tokens for r in server.requests) > 0.95 * engine.budget  # filled: the margin was not luck
    assert compactions(engine) >= 3
    report = engine.fed[-1][0]
    assert 1.33 < report.correction < 1.37  # learned from the bills
    assert len(engine.fed) == STEPS + 1  # every call's usage, the last answer's included
    assert_fed_its_own_requests(engine, server)


def test_a_session_records_each_calls_usage_and_its_engine_learns_from_it() -> None:
    session = Session.from_store(MemoryStore(), engine=ac.ContextEngine(estimated_model(WINDOW_BILLED)))
    with ProviderServer(window=WINDOW_BILLED, policy=tool_loop(steps=STEPS), bill=billed) as server:
        agent = usage_agent(server, ContextMiddleware(session=session, recall=False, fill=True))
        agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config(None, STEPS))
    assert server.rejected == [] and len(server.requests) == STEPS + 1
    assert max(r.tokens for r in server.requests) <= WINDOW_BILLED
    totals = session.usage_totals
    assert totals.calls == STEPS + 1
    assert totals.prompt_tokens == sum(r.tokens for r in server.requests)  # usage.prompt_tokens, as billed
    assert totals.completion_tokens == 5 * (STEPS + 1)
    last = session.last_usage
    assert last is not None and last.model == "gpt-4o" and last.prompt_tokens == server.requests[-1].tokens
    assert last.view_len == len(session.view) - 1  # recorded before the final answer was appended
    assert session.compactions  # the loop outgrew the budget, and the session compacted it
    assert session.engine is not None and 1.33 < session.engine.counter.correction < 1.37


@pytest.mark.parametrize("mode", ["request", "state"])
def test_concurrent_threads_each_feed_the_report_of_their_own_request(mode: str) -> None:
    engine = Fed(estimated_model(WINDOW_BILLED))
    spec = "Build the services listed in this spec. " + "service alpha: compile, link, test. " * 200

    async def both(agent: Any) -> None:
        await asyncio.gather(
            agent.ainvoke({"messages": [{"role": "user", "content": spec}]}, config("big", 40)),
            agent.ainvoke({"messages": [{"role": "user", "content": "build"}]}, config("small", 40)),
        )

    with ProviderServer(window=WINDOW_BILLED, policy=per_thread_loop(8), bill=billed) as server:
        agent = usage_agent(server, ContextMiddleware(engine, mode=mode), checkpointer=InMemorySaver())
        asyncio.run(both(agent))
    assert server.rejected == [] and len(server.requests) == 18
    sizes = sorted(r.tokens for r in server.requests)
    assert sizes[-1] > 3 * sizes[0]  # a bill fed against the other thread's report would show
    assert len(engine.fed) == 18
    assert_fed_its_own_requests(engine, server)


def test_langgraph_hook_feeds_each_threads_usage_from_the_reply_in_its_history() -> None:
    engine = Fed(estimated_model(WINDOW_BILLED))
    tools = [run_tool(15)]
    spec = "Build the services listed in this spec. " + "service alpha: compile, link, test. " * 200
    with ProviderServer(window=WINDOW_BILLED, policy=per_thread_loop(6), bill=billed) as server:
        agent = react_agent(server, engine, tools, checkpointer=InMemorySaver())
        for turn in range(2):
            for thread, text in (("big", spec), ("small", "build")):
                server.policy = per_thread_loop(6)
                agent.invoke(
                    {"messages": [{"role": "user", "content": f"{text} {turn}"}]}, config(thread, 20)
                )
    assert server.rejected == [] and len(server.requests) == 28
    # The hook reads a reply's usage at the thread's next step: all but each thread's last answer.
    assert len(engine.fed) == 28 - 2
    assert_fed_its_own_requests(engine, server)
    assert 1.33 < engine.fed[-1][0].correction < 1.37


def test_a_call_without_usage_feeds_nothing() -> None:
    engine = Fed(estimated_model(WINDOW_BILLED))
    with ProviderServer(window=WINDOW_BILLED, policy=tool_loop(steps=3), bill=lambda api, body: 0) as server:
        usage_agent(server, ContextMiddleware(engine)).invoke(
            {"messages": [{"role": "user", "content": "build"}]}, config(None, 3)
        )
    assert len(server.accepted) == 4
    assert engine.fed == [] and engine.status([]).tokens == 3  # nothing learned: reply priming, uncorrected
