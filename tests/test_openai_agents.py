"""The OpenAI Agents SDK with agentcontext: the real ``Runner.run`` loop against a loopback provider.

Each run drives the SDK's own models (``OpenAIResponsesModel`` with reasoning
items, and ``OpenAIChatCompletionsModel``) at `providers.ProviderServer`,
which counts every request with tiktoken on its own and rejects what the APIs
reject. The promises: every request fits the window, is valid for its API,
keeps the instructions and the latest user input; the session's log keeps
everything; ``pop_item`` and ``clear_session`` lose nothing; ``limit`` never
cuts a call from its output or a reasoning item from its response
(openai-agents #4322 and the reasoning variant SDK 0.20 still sends).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    RunConfig,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import SessionSettings
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI, BadRequestError

import agentcontext as ac
from _sizes import runs
from agentcontext.formats import responses
from agentcontext.integrations.openai_agents import AgentContextSession, UsageHooks, call_model_input_filter
from agentcontext.session import MemoryStore, SQLiteStore
from providers import ProviderServer, Reply, Request, check_responses, tool_loop

set_tracing_disabled(True)

WINDOW = 6_000
RESERVE = 800
INSTRUCTIONS = "You are a careful engineer. Use the run tool, then answer."


@function_tool
def run(step: int) -> str:
    """Run one step of the task and return its (large) output."""
    return f"step {step} output\n" + f"line of output for step {step}: lorem ipsum dolor sit amet\n" * 120


def engine() -> ac.ContextEngine:
    return ac.ContextEngine(model="gpt-4o", window=WINDOW, reserve=RESERVE)


@pytest.fixture(params=["responses", "chat"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(api: str) -> Iterator[ProviderServer]:
    with ProviderServer(window=WINDOW, reasoning=api == "responses") as s:
        yield s


def agent(server: ProviderServer, api: str, client: AsyncOpenAI) -> Agent[Any]:
    model = (
        OpenAIResponsesModel("gpt-4o", client)
        if api == "responses"
        else OpenAIChatCompletionsModel("gpt-4o", client)
    )
    return Agent(name="engineer", instructions=INSTRUCTIONS, tools=[run], model=model)


def client_for(server: ProviderServer) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


def assert_fits_and_keeps(request: Request, latest_user: str) -> None:
    assert request.error is None, request.error
    assert request.tokens <= WINDOW
    if request.api == "responses":
        assert request.body["instructions"] == INSTRUCTIONS
    else:
        assert request.messages[0] == {"role": "system", "content": INSTRUCTIONS}
    assert request.latest_user_text() == latest_user


# ----------------------------------------------------------------------------- long runs


def test_a_long_run_with_large_tool_outputs_fits_at_every_call(api: str, server: ProviderServer) -> None:
    # openai-agents #1093: a retrieval tool's large outputs overflow the window, and users truncate them
    # by hand in each tool. Here nothing is cut by hand, and every request fits.
    steps = runs(18, 120)

    async def main() -> AgentContextSession:
        store = ac.Session.from_store(MemoryStore(), engine=engine())
        session = AgentContextSession(store)
        async with client_for(server) as client:
            a = agent(server, api, client)
            server.policy = tool_loop(steps=steps)
            first = await Runner.run(
                a,
                "Fix the failing test.",
                session=session,
                run_config=session.run_config(),
                max_turns=steps + 5,
            )
            server.policy = tool_loop(steps=3)
            second = await Runner.run(
                a, "Now add a regression test.", session=session, run_config=session.run_config()
            )
        assert first.final_output == second.final_output == "done"
        return session

    session = asyncio.run(main())
    assert len(server.requests) == steps + 1 + 4
    first_run, second_run = server.requests[: steps + 1], server.requests[steps + 1 :]
    for r in first_run:
        assert_fits_and_keeps(r, "Fix the failing test.")
    for r in second_run:
        assert_fits_and_keeps(r, "Now add a regression test.")
    # It did have to compact: the raw history is several windows long.
    appended = [m for m in session.session.records() if type(m).__name__ == "MessageRecord"]
    raw_tokens = ac.counter_for("gpt-4o").count_messages([r.message for r in appended])  # type: ignore[attr-defined]
    assert raw_tokens > 3 * WINDOW
    assert session.session.compactions
    # The log keeps every item: each tool output is recallable by id.
    outputs = [m for m in (r.message for r in appended) if m.role == "tool"]  # type: ignore[attr-defined]
    assert len(outputs) == steps + 3
    assert "step 0 output" in session.session.recall(f"message:{outputs[0].id}")


def test_a_reference_the_filter_showed_the_model_is_recallable_from_the_session(tmp_path: Path) -> None:
    # The per-call filter cuts a large tool output inside a run and shows the model its reference; its
    # cut is no compaction of the session's, so the log recorded no reference, and recall refused it
    # ("not an artifact of this session") though the log holds the output whole.
    steps = runs(12, 60)
    path = tmp_path / "run.jsonl"
    with ProviderServer(window=WINDOW) as server:

        async def main() -> None:
            session = AgentContextSession(ac.Session.open(path, engine=engine()))
            async with client_for(server) as client:
                server.policy = tool_loop(steps=steps)
                await Runner.run(
                    agent(server, "chat", client),
                    "Fix the failing test.",
                    session=session,
                    run_config=session.run_config(),
                    max_turns=steps + 5,
                )
            session.session.close()

        asyncio.run(main())
    refs = {ref for r in server.requests for t in r.texts() for ref in re.findall(r"artifact:sha256:\w+", t)}
    assert refs, "no tool output was cut: the test must exercise the filter's cut"
    with ac.Session.open(path) as reopened:
        for ref in refs:
            text = reopened.recall(ref)
            assert text.startswith("step ") and text.count("line of output") == 120
        with pytest.raises(ac.RecallError, match="not an artifact of this session"):
            reopened.recall("artifact:sha256:" + "0" * 64)


def test_a_streamed_run_fits_too() -> None:
    async def main(server: ProviderServer) -> list[Any]:
        session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
        async with client_for(server) as client:
            server.policy = tool_loop(steps=15)
            result = Runner.run_streamed(
                agent(server, "responses", client),
                "Fix the failing test.",
                session=session,
                run_config=session.run_config(),
                max_turns=20,
            )
            events = [e async for e in result.stream_events()]
            assert events and result.final_output == "done"
        return await session.get_items()

    with ProviderServer(window=WINDOW, reasoning=True) as server:
        history = asyncio.run(main(server))
    assert len(server.requests) == 16 and all(r.body.get("stream") for r in server.requests)
    for r in server.requests:
        assert_fits_and_keeps(r, "Fix the failing test.")
    assert check_responses({"model": "m", "input": history})[0] is None


def test_handoffs_and_a_structured_output_are_counted(api: str, server: ProviderServer) -> None:
    # The SDK sends each handoff as a transfer_to_... tool, and the output type's schema beside the input;
    # only the function tools were counted, and a run with ten handoffs went over the window.
    from agents import AgentOutputSchema
    from pydantic import BaseModel, Field

    class Verdict(BaseModel):
        """What the engineer concludes."""

        cause: str = Field(description="The root cause of the failure, " + "in the engineer's words. " * 20)
        fix: str = Field(description="What was changed to fix it, " + "file by file and line by line. " * 20)

    about = (
        "Specialist for " + "database migrations, schema evolution, index tuning and replication lag. " * 25
    )
    steps = 10

    async def main() -> AgentContextSession:
        session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
        async with client_for(server) as client:
            model = agent(server, api, client).model
            specialists = [
                Agent(name=f"spec{i}", instructions="Help.", handoff_description=about, model=model)
                for i in range(10)
            ]
            a = Agent(
                name="engineer",
                instructions=INSTRUCTIONS,
                tools=[run],
                handoffs=specialists,
                output_type=Verdict,
                model=model,
            )
            server.policy = tool_loop(steps=steps, final=json.dumps({"cause": "a typo", "fix": "fixed it"}))
            out = await Runner.run(
                a,
                "Fix the failing test.",
                session=session,
                run_config=session.run_config(),
                max_turns=steps + 5,
            )
        assert out.final_output == Verdict(cause="a typo", fix="fixed it")
        return session

    session = asyncio.run(main())
    assert [r.error for r in server.requests if r.error] == []
    assert len(server.requests[0].body["tools"]) == 11
    counter = ac.counter_for("gpt-4o")
    schema = counter.count_text(json.dumps(AgentOutputSchema(Verdict).json_schema()))
    report = session.call_model_input_filter.last
    assert report is not None and report.tool_tokens > 10 * counter.count_text(about) + schema


def test_mcp_tools_are_counted_so_every_call_fits(server: ProviderServer, api: str) -> None:
    # An MCP server's tools go to the model beside the input at every turn; only the agent's own function
    # tools were counted, so a run with sixteen MCP tools (3,200 tokens) went over the window.
    from agents.mcp import MCPServerStdio

    script = Path(__file__).parent / "fixtures" / "mcp_warehouse.py"
    steps = 8

    async def main() -> ac.Report | None:
        session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
        params = {"command": sys.executable, "args": [str(script)]}
        async with client_for(server) as client, MCPServerStdio(params, cache_tools_list=True) as warehouse:
            a = agent(server, api, client)
            a = a.clone(mcp_servers=[warehouse])
            server.policy = tool_loop(steps=steps)
            await Runner.run(
                a,
                "Fix the failing test.",
                session=session,
                run_config=session.run_config(),
                max_turns=steps + 5,
            )
        return session.call_model_input_filter.last

    report = asyncio.run(main())
    sent = server.requests[-1].body["tools"]
    assert sum("inventory_" in json.dumps(t) for t in sent) == 16  # the SDK sent the MCP tools
    assert [r.error for r in server.requests if r.error] == []
    assert all(r.tokens <= WINDOW for r in server.requests)
    counter = ac.counter_for("gpt-4o")
    assert report is not None and report.tool_tokens > 16 * counter.count_text(
        "Query the warehouse inventory by SKU, location, lot and expiry date; returns the stock levels. " * 10
    )


def test_two_runs_at_once_on_one_session_each_keep_their_own_state() -> None:
    # The session's filter had one slot: each call of one run reset the other's state (a full pass), and
    # emergency compactions went from 1 to 6.
    def per_task() -> Any:
        turns: dict[str | None, int] = {}

        def policy(request: Request) -> Reply:
            task = request.latest_user_text()
            turns[task] = turns.get(task, 0) + 1
            return (
                Reply(tool_calls=[("run", {"step": turns[task]})]) if turns[task] <= 6 else Reply(text="done")
            )

        return policy

    def extending(requests: list[Request]) -> int:
        items = [r.items for r in requests]
        return sum(new[: len(old)] == old for old, new in zip(items, items[1:], strict=False))

    async def main(together: bool) -> tuple[dict[str | None, int], int]:
        e = ac.ContextEngine(model="gpt-4o", window=8_000, reserve=RESERVE)
        with ProviderServer(window=8_000, reasoning=True) as server:
            session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=e))
            async with client_for(server) as client:
                a = Agent(
                    name="engineer",
                    instructions=INSTRUCTIONS,
                    tools=[run],
                    model=OpenAIResponsesModel("gpt-4o", client),
                )
                server.policy = per_task()
                runs = [
                    Runner.run(a, task, session=session, run_config=session.run_config(), max_turns=12)
                    for task in ("Task A", "Task B")
                ]
                if together:
                    await asyncio.gather(*runs)
                else:
                    for r in runs:
                        await r
            assert [r.error for r in server.requests if r.error] == []
            by_task: dict[str | None, list[Request]] = {}
            for r in server.requests:
                by_task.setdefault(r.latest_user_text(), []).append(r)
        return {t: extending(rs) for t, rs in by_task.items()}, e.stats.compactions["emergency"]

    alone, alone_emergencies = asyncio.run(main(together=False))
    together, emergencies = asyncio.run(main(together=True))
    assert together["Task A"] >= alone["Task B"] - 1 and together["Task B"] >= alone["Task B"] - 1
    assert emergencies <= alone_emergencies


def test_a_continued_server_conversation_is_sent_as_it_is_and_what_the_filter_did_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # With previous_response_id or conversation_id the SDK sends only what follows the server's response: the
    # call's output came first, was taken for an orphan and rewritten as text, and every tool step was a 400.
    # And nothing the filter repaired or compacted was said anywhere.
    from agents.run_config import CallModelData, ModelInputData

    flt = call_model_input_filter(engine())
    a = Agent(name="engineer", instructions=INSTRUCTIONS, tools=[run])
    delta = [{"type": "function_call_output", "call_id": "call_held_by_server", "output": "step 0 output"}]
    data = CallModelData(
        model_data=ModelInputData(input=delta, instructions=INSTRUCTIONS), agent=a, context=None
    )  # type: ignore[arg-type]
    out = asyncio.run(flt(data))
    assert out.input == delta and flt.last is None  # as it came: the server holds its call
    broken = [
        {"role": "user", "content": "Here is the output you asked for."},
        {"type": "function_call_output", "call_id": "call_gone", "output": "important"},
        {"role": "user", "content": "What does it say?"},
    ]
    data = CallModelData(
        model_data=ModelInputData(input=broken, instructions=INSTRUCTIONS), agent=a, context=None
    )  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="agentcontext.openai_agents"):
        out = asyncio.run(flt(data))
    assert "important" in json.dumps(out.input) and flt.last is not None
    (record,) = [r for r in caplog.records if r.name == "agentcontext.openai_agents"]
    assert record.levelno == logging.WARNING and "tool result for 'call_gone'" in record.getMessage()


def test_get_items_counts_what_the_last_call_sent_beside_the_history() -> None:
    # The SDK gives get_items no agent: it fitted the history alone, and a run whose instructions took half
    # the window went over as soon as it used the session without its run_config.
    rules = "Follow the house rules carefully. " * 520  # about 3,100 tokens

    def history() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
        for i in range(5):
            items += [
                {"type": "function_call", "call_id": f"c{i}", "name": "run", "arguments": f'{{"step": {i}}}'},
                {"type": "function_call_output", "call_id": f"c{i}", "output": "ok " * 600},
            ]
        return items

    async def main() -> None:
        with ProviderServer(window=WINDOW) as server:
            session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
            async with client_for(server) as client:
                a = Agent(
                    name="engineer",
                    instructions=rules,
                    tools=[run],
                    model=OpenAIResponsesModel("gpt-4o", client),
                )
                server.policy = tool_loop(steps=0, final="ok")
                await Runner.run(a, "Hello.", session=session, run_config=session.run_config())
                await session.add_items(history())  # type: ignore[arg-type]
                await Runner.run(a, "Now summarise.", session=session)  # the session alone, no filter
            assert [r.error for r in server.requests if r.error] == []
            assert server.requests[-1].tokens <= WINDOW

    asyncio.run(main())


def test_the_filter_bounds_the_memory_its_conversations_hold() -> None:
    # Finished conversations were kept at about 7 times their size until 1,024 others pushed them out.
    import gc
    import tracemalloc

    from agents.run_config import CallModelData, ModelInputData

    def items(k: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "user", "content": f"task {k}"}]
        for i in range(40):
            out += [
                {
                    "type": "function_call",
                    "call_id": f"c{k}_{i}",
                    "name": "run",
                    "arguments": f'{{"step": {i}}}',
                },
                {
                    "type": "function_call_output",
                    "call_id": f"c{k}_{i}",
                    "output": f"{k}/{i} " + "log line " * 120,
                },
            ]
        return out

    cap = 2 * 1024 * 1024
    flt = call_model_input_filter(
        ac.ContextEngine(model="gpt-4o", window=400_000), max_conversation_bytes=cap
    )
    a = Agent(name="engineer", instructions=INSTRUCTIONS, tools=[run])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for k in range(40):  # about 250 kB held each: 10 MB without the bound
            data = CallModelData(
                model_data=ModelInputData(input=items(k), instructions=INSTRUCTIONS), agent=a, context=None
            )  # type: ignore[arg-type]
            asyncio.run(flt(data))
            del data
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert 1 <= len(flt._conversations) < 40 and flt._conversations.weight <= cap
    assert held < 2 * cap, f"{held / 1e6:.1f} MB held for a {cap / 1e6:.1f} MB bound"


def test_without_agentcontext_the_same_run_overflows(api: str, server: ProviderServer) -> None:
    """The control: the run above, with the SDK's own session and no filter, is rejected by the server."""

    async def main() -> None:
        async with client_for(server) as client:
            server.policy = tool_loop(steps=25)
            with pytest.raises(Exception, match="context|maximum context length"):
                await Runner.run(
                    agent(server, api, client),
                    "Fix the failing test.",
                    session=SQLiteSession("x"),
                    max_turns=30,
                )

    asyncio.run(main())
    assert server.rejected and "context" in (server.rejected[0].error or "")


def test_the_input_filter_alone_fits_every_call_and_the_sdk_keeps_its_history(
    api: str, server: ProviderServer
) -> None:
    steps = runs(20, 100)
    sdk_session = SQLiteSession("kept")

    async def main() -> int:
        async with client_for(server) as client:
            server.policy = tool_loop(steps=steps)
            config = RunConfig(call_model_input_filter=call_model_input_filter(engine()))
            await Runner.run(
                agent(server, api, client),
                "Fix the failing test.",
                session=sdk_session,
                run_config=config,
                max_turns=steps + 5,
            )
        return len(await sdk_session.get_items())

    kept = asyncio.run(main())
    for r in server.requests:
        assert_fits_and_keeps(r, "Fix the failing test.")
    assert kept >= 2 * steps + 2  # the SDK's session was not shortened: only what was sent was fitted


def test_between_compactions_each_request_extends_the_previous_one() -> None:
    """Promise 7: the prefix stays the same until the next compaction, so prompt caches keep hitting."""
    window = 20_000
    e = ac.ContextEngine(model="gpt-4o", window=window, reserve=RESERVE)

    async def main(server: ProviderServer) -> None:
        session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=e))
        async with client_for(server) as client:
            server.policy = tool_loop(steps=24)
            await Runner.run(
                agent(server, "responses", client),
                "Fix it.",
                session=session,
                run_config=session.run_config(),
                max_turns=30,
            )

    with ProviderServer(window=window, reasoning=True) as server:
        asyncio.run(main(server))
    inputs = [r.items for r in server.requests]
    extended = sum(1 for a, b in zip(inputs, inputs[1:], strict=False) if b[: len(a)] == a)
    compactions = sum(e.stats.compactions.values())
    assert 0 < compactions <= len(inputs) // 4
    assert extended >= len(inputs) - 1 - compactions


# ----------------------------------------------------------------------------- limit: openai-agents #4322


HISTORY_4322 = [
    {"role": "user", "content": "first"},
    {"type": "function_call", "call_id": "call_1", "name": "run", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "result"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "done", "annotations": []}],
    },
]


def test_4322_limit_returns_an_unmatched_output_from_sqlite_and_never_from_ours() -> None:
    async def main() -> None:
        sqlite = SQLiteSession("s")
        ours = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
        for s in (sqlite, ours):
            await s.add_items(list(HISTORY_4322))  # type: ignore[arg-type]
        # #4322: the newest two items are an output whose call was cut away.
        assert [i.get("type") for i in await sqlite.get_items(limit=2)] == ["function_call_output", "message"]
        for limit in range(6):
            got = await ours.get_items(limit=limit)
            assert len(got) <= limit
            assert got == HISTORY_4322[len(HISTORY_4322) - len(got) :]
            assert (
                check_responses({"model": "m", "input": got or [{"role": "user", "content": "next"}]})[0]
                is None
            )
        assert [i.get("type") for i in await ours.get_items(limit=2)] == ["message"]

    asyncio.run(main())


def test_limit_cutting_reasoning_from_its_response_is_rejected_with_sqlite_and_not_with_ours() -> None:
    """SDK 0.20 drops the orphan output of #4322, but ``limit`` still parts a reasoning item from its items."""

    async def history(session: Any, server: ProviderServer) -> None:
        async with client_for(server) as client:
            server.policy = tool_loop(steps=2)
            await Runner.run(agent(server, "responses", client), "first", session=session)

    async def again(session: Any, server: ProviderServer, limit: int) -> str | None:
        server.policy = tool_loop(steps=0)
        async with client_for(server) as client:
            config = RunConfig(session_settings=SessionSettings(limit=limit))
            try:
                await Runner.run(
                    agent(server, "responses", client), "again", session=session, run_config=config
                )
            except Exception as e:  # the provider's 400
                return str(e)
        return None

    async def main() -> tuple[list[str | None], list[str | None]]:
        with ProviderServer(window=100_000, reasoning=True) as server:
            sqlite = SQLiteSession("s")
            await history(sqlite, server)
            size = len(await sqlite.get_items())
            theirs = []
            for limit in range(1, size + 1):
                theirs.append(await again(sqlite, server, limit))
                while len(await sqlite.get_items()) > size:
                    await sqlite.pop_item()
            ours_session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
            await history(ours_session, server)
            ours = []
            for limit in range(1, size + 1):
                ours.append(await again(ours_session, server, limit))
                while len(await ours_session.get_items()) > size:
                    await ours_session.pop_item()
        return theirs, ours

    theirs, ours = asyncio.run(main())
    assert any(e is not None and "without its required 'reasoning' item" in e for e in theirs)
    assert ours == [None] * len(ours)


# ----------------------------------------------------------------------------- pop_item, clear_session, stores


def test_pop_and_clear_are_recorded_never_destructive(tmp_path: Path) -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        with ac.Session.open(path, engine=engine()) as inner:
            session = AgentContextSession(inner)
            await session.add_items(items[:1])  # type: ignore[arg-type]
            await session.add_items(items[1:])  # type: ignore[arg-type]
            assert await session.get_items() == items
            assert await session.pop_item() == items[3]
            assert await session.get_items() == items[:3]
            # The call goes with the reasoning that led to it: alone, reasoning cannot be sent (a lone
            # reasoning item became a made-up "empty" assistant turn, sent at every later call).
            assert await session.pop_item() == items[2]
            assert await session.get_items() == items[:1]
            await session.add_items([{"role": "user", "content": "again"}])  # type: ignore[arg-type]
        with ac.Session.open(path, engine=engine()) as inner:  # restored from the log
            session = AgentContextSession(inner)
            assert await session.get_items() == [items[0], {"role": "user", "content": "again"}]
            assert await session.pop_item() == {"role": "user", "content": "again"}
            await session.clear_session()
            assert await session.get_items() == []
            assert await session.pop_item() is None
            # Nothing was deleted: every item ever added is still in the log.
            logged = [r.message for r in inner.records() if type(r).__name__ == "MessageRecord"]  # type: ignore[attr-defined]
            assert responses.from_messages(logged[:3], validate=False) == items
            await session.add_items(items[:1])  # type: ignore[arg-type]
            assert await session.get_items() == items[:1]

    asyncio.run(main())


def test_any_store_works_and_a_reopened_session_gives_the_same_history(tmp_path: Path) -> None:
    async def main() -> None:
        with ProviderServer(window=WINDOW, reasoning=True) as server:
            with ac.Session.from_store(
                SQLiteStore(tmp_path / "s.db", session_id="chat-1"), engine=engine()
            ) as inner:
                session = AgentContextSession(inner)
                async with client_for(server) as client:
                    server.policy = tool_loop(steps=12)
                    await Runner.run(
                        agent(server, "responses", client),
                        "Fix it.",
                        session=session,
                        run_config=session.run_config(),
                        max_turns=20,
                    )
                before = await session.get_items()
            assert server.rejected == []
        with ac.Session.from_store(
            SQLiteStore(tmp_path / "s.db", session_id="chat-1"), engine=engine()
        ) as inner:
            assert await AgentContextSession(inner).get_items() == before
        assert check_responses({"model": "m", "input": before})[0] is None

    asyncio.run(main())


def test_it_is_an_sdk_session_and_needs_an_engine() -> None:
    from agents.memory import Session as SDKSession

    session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()), session_id="chat-1")
    assert isinstance(session, SDKSession) and session.session_id == "chat-1"
    with pytest.raises(ac.exceptions.ConfigError, match="no engine"):
        AgentContextSession(ac.Session.from_store(MemoryStore()))


def test_the_integration_says_how_to_install_its_extra() -> None:
    code = "import sys\nsys.modules['agents'] = None\nimport agentcontext.integrations.openai_agents\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "MissingDependencyError" in proc.stderr
    assert "pip install 'agentcontext[openai-agents]'" in proc.stderr
    without = "import sys\nsys.modules['agents'] = None\nimport agentcontext\nfrom agentcontext.formats import responses\n"
    plain = subprocess.run(
        [sys.executable, "-c", without + "print('ok')"], capture_output=True, text=True, timeout=120
    )
    assert plain.stdout.strip() == "ok", plain.stderr


# ----------------------------------------------------------------------------- the filter, called directly


def call(items: list[dict[str, Any]], instructions: str | None = INSTRUCTIONS) -> Any:
    from agents.run_config import CallModelData, ModelInputData

    a = Agent(name="engineer", instructions=instructions, tools=[run])
    return CallModelData(
        model_data=ModelInputData(input=items, instructions=instructions), agent=a, context=None
    )  # type: ignore[arg-type]


def test_the_filter_counts_only_new_items_at_each_step() -> None:
    """A step costs O(new items): the engine recognises the conversation and counts only what was added."""
    e = ac.ContextEngine(model="gpt-4o", window=200_000)
    f = call_model_input_filter(e)
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix it."}]
    steps = runs(100, 400)
    before = e.counter.stats  # type: ignore[attr-defined]  # the counter is shared by every gpt-4o engine

    async def main() -> None:
        for i in range(steps):
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"c{i}",
                    "name": "run",
                    "arguments": json.dumps({"step": i}),
                }
            )
            items.append({"type": "function_call_output", "call_id": f"c{i}", "output": f"result {i} " * 60})
            out = await f(call(list(items)))
            assert out.input == items and out.instructions == INSTRUCTIONS

    asyncio.run(main())
    after = e.counter.stats  # type: ignore[attr-defined]
    assert after.cache_misses - before.cache_misses <= 2 * steps + 2  # each message counted once...
    assert (
        after.cache_hits - before.cache_hits <= 2 * steps
    )  # ...and not looked up at every step (a full pass: ~n²)
    assert sum(e.stats.compactions.values()) == 0


def test_the_filter_rejects_a_malformed_item_and_recovers_on_the_next_call() -> None:
    f = call_model_input_filter(engine())
    good = [{"role": "user", "content": "hi"}]
    bad = [*good, {"type": "function_call", "call_id": "", "name": "run", "arguments": "{}"}]

    async def main() -> None:
        with pytest.raises(ac.exceptions.InvalidMessageError, match="call_id"):
            await f(call(bad))
        fixed = [
            *good,
            {"type": "function_call", "call_id": "c1", "name": "run", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ]
        assert (await f(call(fixed))).input == fixed

    asyncio.run(main())


def test_large_instructions_are_counted_and_never_cut() -> None:
    f = call_model_input_filter(engine())
    instructions = "Follow the house rules. " * 500  # about 2,500 tokens of the 5,200-token budget
    items = [{"role": "user", "content": "go"}]
    for i in range(6):
        items += [
            {"type": "function_call", "call_id": f"c{i}", "name": "run", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": "data " * 300},
        ]

    async def main() -> Any:
        return await f(call(items, instructions))

    out = asyncio.run(main())
    assert out.instructions == instructions
    problem, tokens = check_responses({"model": "m", "instructions": instructions, "input": out.input})
    assert problem is None and tokens <= WINDOW - RESERVE
    assert {"role": "user", "content": "go"} in out.input and len(out.input) < len(items)


# ----------------------------------------------------------------------------- one-shot fits


class Recording(ac.ContextEngine):
    """The engine, keeping the report of each preparation (the SDK's run hides the filter's results)."""

    def __init__(self) -> None:
        super().__init__(model="gpt-4o", window=WINDOW, reserve=RESERVE)
        self.reports: list[Any] = []

    async def aprepare(self, *args: Any, **kwargs: Any) -> Any:
        prepared = await super().aprepare(*args, **kwargs)
        self.reports.append(prepared.report)
        return prepared


def history_items(steps: int = 60) -> list[dict[str, Any]]:
    """A whole run handed over at once (about three budgets of the 5,200-token one), then a new request."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(steps):
        items.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "run", "arguments": f'{{"step": {i}}}'}
        )
        items.append(
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"step {i}: " + "ok " * 200}
        )
    items.append({"role": "user", "content": "Now report what failed."})
    return items


def assert_one_shot(report: Any, sent: Request) -> None:
    assert report.tokens_before > 2 * report.budget
    assert report.fill and any(n.startswith("one-shot fit: filled up to") for n in report.notes)
    assert report.tokens_after > 0.85 * report.budget  # nearly the whole budget
    assert sent.tokens > 0.85 * report.budget  # so says the server's own count


def assert_hysteresis(report: Any) -> None:
    assert not report.fill and not any("one-shot" in n for n in report.notes)
    assert report.tokens_after < 0.6 * report.budget  # down to the target a running agent uses


def test_the_filter_fills_the_budget_for_a_history_sent_once_and_defaults_to_the_target(
    api: str, server: ProviderServer
) -> None:
    async def once(e: Recording, fill: bool) -> Any:
        async with client_for(server) as client:
            server.policy = tool_loop(steps=0, final="ok")
            config = RunConfig(call_model_input_filter=call_model_input_filter(e, fill=fill))
            return await Runner.run(agent(server, api, client), history_items(), run_config=config)  # type: ignore[arg-type]

    reports, sent = {}, {}
    for fill in (True, False):
        e = Recording()
        assert asyncio.run(once(e, fill)).final_output == "ok"
        sent[fill] = server.requests[-1]
        assert_fits_and_keeps(sent[fill], "Now report what failed.")
        (reports[fill],) = e.reports
    assert_one_shot(reports[True], sent[True])
    assert_hysteresis(reports[False])


def test_the_session_fills_the_budget_when_asked() -> None:
    async def once(server: ProviderServer, session: AgentContextSession) -> Any:
        await session.add_items(history_items()[:-1])  # type: ignore[arg-type]  # a history handed over
        async with client_for(server) as client:
            server.policy = tool_loop(steps=0, final="ok")
            return await Runner.run(
                agent(server, "responses", client),
                "Now report what failed.",
                session=session,
                run_config=session.run_config(),
            )

    reports = {}
    with ProviderServer(window=WINDOW, reasoning=True) as server:
        for fill in (True, False):
            e = Recording()
            session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=e), fill=fill)
            assert session.fill is fill
            assert asyncio.run(once(server, session)).final_output == "ok"
            assert_fits_and_keeps(server.requests[-1], "Now report what failed.")
            reports[fill] = e.reports
    # get_items prepared (and compacted) the stored history, then the filter the run's first call, which
    # had nothing left to do: both one-shot fits.
    assert len(reports[True]) == 2 and all(r.fill for r in reports[True])
    assert_one_shot(reports[True][0], server.requests[0])
    assert not reports[True][1].compacted
    assert reports[False][0].compacted
    assert_hysteresis(reports[False][0])


def test_a_bad_fill_is_refused_by_name() -> None:
    from agentcontext.integrations.openai_agents import ModelInputFilter

    for bad in (1.5, 0, "yes", None):
        with pytest.raises(ac.ConfigError, match=r"fill must be False .* got " + re.escape(repr(bad))):
            call_model_input_filter(engine(), fill=bad)  # type: ignore[arg-type]
        with pytest.raises(ac.ConfigError, match="fill must be"):
            ModelInputFilter(engine(), fill=bad)  # type: ignore[arg-type]
        with pytest.raises(ac.ConfigError, match="fill must be"):
            AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()), fill=bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- usage fed back

# A model agentcontext counts by estimate (as it does Claude and Gemini) whose provider bills 1.35 times
# the estimate. The server's bill is computed from the request it receives, with agentcontext's own
# estimator, so the true ratio is known whatever the request holds.
BILLED = 1.35
ESTIMATED = ac.ModelSpec(
    name="estimated-model",
    provider="other",
    context_window=8_000,
    max_output_tokens=800,
    tokenizer="estimate",
)
ESTIMATED_LIMIT = ESTIMATED.context_window - ESTIMATED.max_output_tokens  # what the server accepts
_ESTIMATE = ac.ContextEngine(ESTIMATED, counter=ac.ScriptEstimator())  # counts only: never fed


def bill(api: str, body: dict[str, Any]) -> int:
    assert api == "responses"
    messages = responses.to_messages(body["input"], unknown="keep")
    counted = _ESTIMATE.count(
        messages, tools=body.get("tools") or None, instructions=body.get("instructions")
    )
    return math.ceil(BILLED * counted)


@function_tool
def read(step: int, lines: int = 25) -> str:
    """Read a part of the log and return it."""
    return "".join(
        f"line {k} of part {step}: lorem ipsum dolor sit amet, consectetur\n" for k in range(lines)
    )


def estimated_agent(client: AsyncOpenAI) -> Agent[Any]:
    return Agent(
        name="engineer",
        instructions=INSTRUCTIONS,
        tools=[read],
        model=OpenAIResponsesModel(ESTIMATED.name, client),
        model_settings=ModelSettings(max_tokens=ESTIMATED.max_output_tokens),
    )


def test_usage_teaches_an_estimated_model_what_its_provider_bills_and_every_call_fits() -> None:
    """Without usage, the growing run is rejected as too long; with `UsageHooks`, every call fits.

    A one-shot fit (``fill=True``) fills the budget: the estimate's 10% margin cannot absorb a
    provider that bills 35% more. (The default hysteresis compacts at 70% of the budget, where
    the margin absorbs up to about 1.5.)
    """
    steps = 30

    async def main(server: ProviderServer, hooks: UsageHooks | None) -> AgentContextSession:
        store = ac.Session.from_store(MemoryStore(), engine=ac.ContextEngine(ESTIMATED))
        session = AgentContextSession(store, fill=True)
        server.policy = tool_loop(steps=steps, tool="read")
        async with client_for(server) as client:
            result = await Runner.run(
                estimated_agent(client),
                "Find why the test fails.",
                session=session,
                run_config=session.run_config(),
                hooks=hooks,
                max_turns=steps + 5,
            )
        assert result.final_output == "done"
        return session

    # Without feedback: the engine trusts its estimate, and the provider rejects the run once it grows.
    with ProviderServer(window=ESTIMATED.context_window, bill=bill) as server:
        with pytest.raises(BadRequestError, match="exceeds the context window"):
            asyncio.run(main(server, hooks=None))
        assert server.rejected and all(r.tokens > ESTIMATED_LIMIT for r in server.rejected)

    # With feedback: the correction rises to the provider's ratio and every request fits what it bills.
    with ProviderServer(window=ESTIMATED.context_window, bill=bill) as server:
        session = asyncio.run(main(server, hooks=UsageHooks()))
    assert server.rejected == [] and len(server.requests) == steps + 1
    assert max(r.tokens for r in server.requests) <= ESTIMATED_LIMIT
    assert max(r.tokens for r in server.requests) > 0.6 * ESTIMATED_LIMIT  # it did fill the window
    engine = session.session.engine
    assert isinstance(engine, ac.ContextEngine) and isinstance(engine.counter, ac.CalibratedCounter)
    correction = engine.counter.correction
    assert BILLED - 0.03 <= correction <= BILLED + 0.03
    # The session logged each call's usage: what the server billed.
    totals = session.session.usage_totals
    assert totals.calls == len(server.requests)
    assert totals.prompt_tokens == sum(r.tokens for r in server.requests)
    assert totals.completion_tokens == 5 * len(server.requests)
    last = session.session.last_usage
    assert (
        last is not None and last.model == ESTIMATED.name and last.prompt_tokens == server.requests[-1].tokens
    )


class Fed(ac.ContextEngine):
    """The estimated model's engine, keeping each usage it is fed and the report it came with."""

    def __init__(self) -> None:
        super().__init__(ESTIMATED)
        self.fed: list[tuple[ac.Report, int]] = []

    def record_usage(self, report: ac.Report, prompt_tokens: int) -> bool:
        self.fed.append((report, prompt_tokens))
        return super().record_usage(report, prompt_tokens)


def test_one_filter_serving_concurrent_runs_feeds_each_call_with_its_own_report() -> None:
    """The engine path: two conversations at once through one filter, one engine and one `UsageHooks`."""
    e = Fed()
    config = RunConfig(call_model_input_filter=call_model_input_filter(e))
    hooks = UsageHooks()
    sizes = {"Read the small log.": 4, "Read the large log.": 60}  # lines a tool call returns
    turns: dict[str, int] = {}

    def policy(request: Request) -> Reply:
        user = request.latest_user_text()
        turns[user] = turns.get(user, 0) + 1
        if turns[user] <= 8:
            return Reply(tool_calls=[("read", {"step": turns[user], "lines": sizes[user]})])
        return Reply(text="done")

    async def main(server: ProviderServer) -> None:
        async with client_for(server) as client:
            a = estimated_agent(client)
            await asyncio.gather(
                *(Runner.run(a, user, run_config=config, hooks=hooks, max_turns=12) for user in sizes)
            )
            fed = len(e.fed)
            # A call the filter did not prepare is never fed, though the hooks see it.
            await Runner.run(a, "Read the small log.", hooks=hooks, max_turns=12)
            assert len(e.fed) == fed

    with ProviderServer(window=ESTIMATED.context_window, bill=bill, policy=policy) as server:
        asyncio.run(main(server))
    assert server.rejected == []
    filtered = server.requests[: 2 * 9]
    assert sorted(tokens for _, tokens in e.fed) == sorted(r.tokens for r in filtered)
    # Each usage came with the report of the request it billed: the provider's ratio, every time,
    # although at any moment one conversation was several times the other's size.
    ratios = [tokens / report.tokens_after for report, tokens in e.fed]
    assert all(abs(ratio - BILLED) < 0.02 for ratio in ratios)


@pytest.mark.parametrize("streamed", [False, True])
def test_the_session_logs_the_usage_of_every_call(api: str, server: ProviderServer, streamed: bool) -> None:
    """Both model classes, streamed or not: each call's billed prompt is in the session's log."""

    async def main() -> AgentContextSession:
        session = AgentContextSession(ac.Session.from_store(MemoryStore(), engine=engine()))
        server.policy = tool_loop(steps=4)
        async with client_for(server) as client:
            a, config = agent(server, api, client), session.run_config()
            if streamed:
                result = Runner.run_streamed(
                    a, "Fix it.", session=session, run_config=config, hooks=UsageHooks()
                )
                async for _ in result.stream_events():
                    pass
            else:
                await Runner.run(a, "Fix it.", session=session, run_config=config, hooks=UsageHooks())
        return session

    session = asyncio.run(main())
    assert server.rejected == [] and len(server.requests) == 5
    usage = [r for r in session.session.records() if type(r).__name__ == "UsageRecord"]
    assert [r.prompt_tokens for r in usage] == [r.tokens for r in server.requests]  # type: ignore[attr-defined]
    assert session.session.usage_totals.calls == 5
