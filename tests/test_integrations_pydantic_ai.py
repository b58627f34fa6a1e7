"""Pydantic AI: real ``Agent`` loops, whose model is Pydantic AI's own OpenAI model class, against a loopback server.

The server (``providers.py``) answers with tool calls and checks every request
as OpenAI does (an orphaned tool message or an unanswered call is a 400, so is a
prompt over the window, counted there independently with tiktoken).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import json
import math
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RequestUsage, UsageLimits

import agentcontext as ac
from _sizes import LONG, runs
from agentcontext.exceptions import InvalidMessageError
from agentcontext.formats import openai as oai
from agentcontext.formats import pydantic_ai as pai
from agentcontext.integrations import pydantic_ai as integration
from agentcontext.integrations.pydantic_ai import ContextCapability, history_processor
from agentcontext.models import ModelSpec
from agentcontext.tokens import ScriptEstimator
from providers import ProviderServer, Reply, Request, tool_loop

SYSTEM = "You are a careful agent. Read every file you are asked about."
TASK = "Read the project's files one by one, then report what they contain."
DOCS = Path(__file__).resolve().parents[1] / "docs" / "pydantic_ai.md"


def reader(steps: int) -> Any:
    """A model that reads ``steps`` files, one tool call per request, then answers."""
    return tool_loop(
        steps=steps, tool="read", final="All files read.", args=lambda i: {"path": f"src/file_{i}.py"}
    )


def make_agent(server: ProviderServer, *capabilities: Any, output_lines: int = 120) -> Agent[None, str]:
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.openai_url, api_key="test-key"))
    agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM, capabilities=list(capabilities))

    @agent.tool_plain
    def read(path: str) -> str:
        """Read a file of the project."""
        # About 20 tokens a line: thousands of tokens per call.
        return "\n".join(
            f"{path}:{n}: value_{n} = compute({n}, scale=0.{n % 10})  # step" for n in range(output_lines)
        )

    return agent


NO_LIMIT = UsageLimits(request_limit=None)
"""Pydantic AI stops a run after 50 requests by default; these loops run longer."""


def run(agent: Agent[None, str], *prompts: str) -> list[Any]:
    """Run ``prompts`` in turn, each continuing the previous run's history, in one entered agent.

    Entering the agent closes its HTTP client when done (``run_sync`` leaves it to the garbage collector).
    """

    async def go() -> list[Any]:
        results: list[Any] = []
        async with agent:
            for prompt in prompts:
                history = results[-1].all_messages() if results else None
                results.append(await agent.run(prompt, message_history=history, usage_limits=NO_LIMIT))
        return results

    return asyncio.run(go())


def check_request(request: Request, task: str = TASK) -> None:
    """The system prompt comes first and the latest user request is there, verbatim."""
    messages = request.messages
    assert messages[0] == {"role": "system", "content": SYSTEM}
    users = [m["content"] for m in messages if m["role"] == "user" and isinstance(m["content"], str)]
    assert task in users


@pytest.fixture
def count_conversions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many Pydantic AI messages the integration converts (its own function, wrapped to count)."""
    calls = [0]
    real = integration.pieces_of

    def counting(message: Any, *, index: int | None) -> Any:
        calls[0] += 1
        return real(message, index=index)

    monkeypatch.setattr(integration, "pieces_of", counting)
    yield calls


# ----------------------------------------------------------------------------- long loops


@pytest.mark.parametrize("persist", [False, True])
def test_long_loop_every_request_fits_and_is_valid(persist: bool, count_conversions: list[int]) -> None:
    steps = runs(24, 400)
    window = 12_000
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=1_500)
    capability = ContextCapability(engine, persist=persist)
    with ProviderServer(window=window, policy=reader(steps)) as server:
        result = run(make_agent(server, capability), TASK)[0]
    assert result.output == "All files read."
    assert server.rejected == []
    assert len(server.accepted) == steps + 1
    assert max(r.tokens for r in server.accepted) <= window
    for request in server.requests:
        check_request(request)
    # Without compaction the last request would hold every tool output: about 2,400 tokens each.
    assert sum(len(m.get("content") or "") for m in server.requests[-1].messages) < 4 * window
    history = result.all_messages()
    if persist:
        # The compaction was written into the history: it holds the summary, not every message.
        assert len(history) < 2 * steps
        assert any(
            m.metadata and m.metadata.get("agentcontext", {}).get("kind") == "summary"
            for m in pai.to_messages(history)
        )
    else:
        # Nothing compacted is lost from the run's history (pydantic-ai #2914).
        assert len(history) == 2 * steps + 2
        assert sum(isinstance(p, ToolReturnPart) for m in history for p in m.parts) == steps
        # Each message was converted once: a step costs O(new messages).
        assert count_conversions[0] == len(history) - 1


def test_continuing_a_conversation_converts_only_what_is_new(count_conversions: list[int]) -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    capability = ContextCapability(engine)
    converted: list[int] = []

    read = reader(10)

    def policy(request: Request) -> Reply:
        converted.append(count_conversions[0])
        return read(request)

    with ProviderServer(window=12_000, policy=policy) as server:
        first, second = run(make_agent(server, capability), TASK, "Now say you are done.")
    assert server.rejected == []
    assert (first.output, second.output) == ("All files read.", "All files read.")
    # The second run continues the first one's history (so its conversation_id): it converted the first
    # run's final answer and its own request, nothing else.
    assert converted[-1] - converted[-2] == 2
    assert len(capability._core.conversations) == 1
    check_request(server.requests[-1], task="Now say you are done.")


def test_a_history_rewritten_between_runs_is_converted_again() -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    capability = ContextCapability(engine)

    async def go(agent: Agent[None, str]) -> list[Any]:
        async with agent:
            first = await agent.run(TASK, usage_limits=NO_LIMIT)
            everything = first.all_messages()
            # The user keeps the task and the final answer only, and continues the conversation.
            shorter = [everything[0], everything[-1]]
            second = await agent.run("Now say you are done.", message_history=shorter, usage_limits=NO_LIMIT)
            return [first, second]

    with ProviderServer(window=12_000, policy=reader(6)) as server:
        first, second = asyncio.run(go(make_agent(server, capability, output_lines=10)))
    assert server.rejected == []
    sent = server.requests[-1].messages
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[-1]["content"] == "Now say you are done."
    assert len(second.all_messages()) == 4


def test_a_message_the_user_replaced_between_runs_is_never_sent_again() -> None:
    # Only the first and last messages were checked to be the ones converted before: a tool return the
    # user redacted (replaced by a new object) in the middle of the history went out as it was.
    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    capability = ContextCapability(engine)

    async def go(agent: Agent[None, str]) -> None:
        async with agent:
            first = await agent.run(TASK, usage_limits=NO_LIMIT)
            history = first.all_messages()
            returns = [
                (i, p) for i, m in enumerate(history) for p in m.parts if isinstance(p, ToolReturnPart)
            ]
            i, part = returns[-2]  # a recent one, kept verbatim by the compaction of the next request
            redacted = dataclasses.replace(part, content="[redacted]")
            history[i] = dataclasses.replace(
                history[i], parts=[redacted if p is part else p for p in history[i].parts]
            )
            await agent.run("Now say you are done.", message_history=history, usage_limits=NO_LIMIT)

    with ProviderServer(window=12_000, policy=reader(10)) as server:
        asyncio.run(go(make_agent(server, capability)))
    assert server.rejected == []
    assert engine.stats.total_compactions >= 1
    sent = json.dumps(server.requests[-1].messages)
    assert "[redacted]" in sent and "src/file_8.py:0:" not in sent


def test_replies_that_differ_only_in_their_thinking_are_counted_each_at_its_size() -> None:
    # The thinking was not in the message's id, and counts are kept by id: the second reply was counted at
    # the first one's size (43 tokens for 7,691), and the provider refused the request.
    def history(thinking: str) -> list[ModelMessage]:
        return [
            ModelRequest(parts=[UserPromptPart("What is 2+2?")]),
            ModelResponse(parts=[ThinkingPart(thinking), TextPart("4")]),
            ModelRequest(parts=[UserPromptPart("And 3+3?")]),
        ]

    short, long = (
        pai.to_messages(history("easy.")),
        pai.to_messages(history("Let me think carefully. " * 2_000)),
    )
    assert short[1].id != long[1].id
    engine = ac.ContextEngine(model="gpt-4o", window=128_000)
    small = engine.prepare(short).report.tokens_before
    assert engine.prepare(long).report.tokens_before > small + 8_000


def test_concurrent_conversations_keep_their_own_state() -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    capability = ContextCapability(engine)

    def policy(request: Request) -> Reply:
        done = sum(m["role"] == "tool" for m in request.messages)
        tag = "x" if "Task X" in request.latest_user_text() else "y"
        if done < 3:
            return Reply(tool_calls=[("read", {"path": f"{tag}{done}.py"})])
        return Reply(text=f"done {tag}")

    async def both(agent: Agent[None, str]) -> list[Any]:
        async with agent:
            return list(
                await asyncio.gather(
                    agent.run("Task X: " + TASK, usage_limits=NO_LIMIT),
                    agent.run("Task Y: " + TASK, usage_limits=NO_LIMIT),
                )
            )

    with ProviderServer(window=12_000, policy=policy) as server:
        x, y = asyncio.run(both(make_agent(server, capability, output_lines=10)))
    assert server.rejected == []
    assert (x.output, y.output) == ("done x", "done y")
    assert len(capability._core.conversations) == 2


# ----------------------------------------------------------------------------- what is counted


def test_tool_definitions_and_instructions_are_counted() -> None:
    window = 6_000
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=800)
    long_text = " ".join(f"rule{n}: never guess, check file {n} first." for n in range(150))  # ~1,700 tokens
    with ProviderServer(window=window, policy=reader(30)) as server:
        model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.openai_url, api_key="k"))
        agent: Agent[None, str] = Agent(
            model, system_prompt=SYSTEM, instructions=long_text, capabilities=[ContextCapability(engine)]
        )

        @agent.tool_plain
        def read(path: str) -> str:
            return "\n".join(f"{path} line {n}: " + "data " * 12 for n in range(40))

        @agent.tool_plain(description=long_text)
        def audit(path: str) -> str:
            return "ok"

        (result,) = run(agent, TASK)
    assert result.output == "All files read."
    assert server.rejected == []
    assert max(r.tokens for r in server.accepted) <= window
    assert all(long_text in json.dumps(r.body) for r in server.requests)


def test_a_prompted_output_schema_is_counted() -> None:
    # Pydantic AI adds a PromptedOutput's schema to the instructions after the capability has counted them:
    # a 120-field schema went uncounted and the provider refused the request (8,786 tokens in 8,000).
    from pydantic import Field, create_model
    from pydantic_ai import PromptedOutput

    fields: dict[str, Any] = {
        f"field_{i}": (
            str,
            Field(description=f"The value of metric {i}, with its unit and a short justification"),
        )
        for i in range(120)
    }
    report = create_model("AuditReport", **fields)
    engine = ac.ContextEngine(model="gpt-4o", window=8_000, reserve=1_000)
    capability = ContextCapability(engine)
    steps = itertools.count()

    def policy(request: Request) -> Reply:
        i = next(steps)
        if i < 25:
            return Reply(tool_calls=[("read", {"path": f"src/file_{i}.py"})])
        return Reply(text=json.dumps(dict.fromkeys(fields, "x")))

    with ProviderServer(window=8_000, policy=policy) as server:
        agent = make_agent(server, capability, output_lines=80)
        out = run_agent_with_output(agent, PromptedOutput(report))
    assert type(out).__name__ == "AuditReport"
    assert [r.error for r in server.requests if r.error] == []
    assert capability.last is not None and capability.last.report.instruction_tokens > 3_000


def run_agent_with_output(agent: Agent[None, str], output_type: Any) -> Any:
    async def go() -> Any:
        async with agent:
            return (await agent.run(TASK, output_type=output_type, usage_limits=NO_LIMIT)).output

    return asyncio.run(go())


def test_a_reasoning_models_thinking_sent_back_is_counted_so_every_request_fits() -> None:
    # A reasoning model behind an OpenAI-compatible API (DeepSeek, Kimi, Qwen, vLLM) returns its
    # reasoning as ``reasoning_content``; Pydantic AI keeps it as a ThinkingPart and sends it back with
    # the message, where the provider reads and bills it. Counted as 0, a prompt went over the window.
    window, steps = 12_000, runs(20, 200)
    thinking = " ".join(
        f"Step {{i}}: check file {n} before editing, then re-run its tests." for n in range(120)
    )
    reads = tool_loop(steps=steps, tool="read", final="All files read.", args=lambda i: {"path": f"f{i}.py"})
    counter = itertools.count()

    def policy(request: Request) -> Reply:
        reply = reads(request)
        return dataclasses.replace(reply, reasoning=thinking.replace("{i}", str(next(counter))))

    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=1_500)
    with ProviderServer(window=window, policy=policy) as server:
        (result,) = run(make_agent(server, ContextCapability(engine), output_lines=40), TASK)
    assert result.output == "All files read."
    assert server.rejected == []
    sent_back = [m for r in server.accepted for m in r.messages if m.get("reasoning_content")]
    assert sent_back, "Pydantic AI sends the reasoning back; the test must exercise it"
    assert max(r.tokens for r in server.accepted) <= window


def pdf(pages: int, salt: int) -> bytes:
    objects = b"".join(b"%d 0 obj << /Type /Page >> endobj\n" % (i + 1) for i in range(pages))
    return b"%PDF-1.4\n%% page set " + str(salt).encode() + b"\n" + objects


def test_pdf_pages_a_tool_returns_are_counted_so_every_request_fits() -> None:
    # A tool that returns documents (a page viewer, a report fetcher): Pydantic AI sends them as files in
    # a user message after the results. agentcontext did not count them, so the requests grew past the
    # window and the provider refused the run's ninth (34k tokens in a 30k window).
    window, steps = 30_000, 12
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=1_500)
    with ProviderServer(window=window, policy=tool_loop(steps=steps, tool="fetch", final="Read.")) as server:
        model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.openai_url, api_key="k"))
        agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM, capabilities=[ContextCapability(engine)])

        @agent.tool_plain
        def fetch(step: int) -> BinaryContent:
            """Fetch the next two pages of the report."""
            return BinaryContent(pdf(2, step), media_type="application/pdf")

        result = run(agent, "Read the report, two pages at a time.")[0]
    assert result.output == "Read."
    assert server.rejected == []
    assert len(server.accepted) == steps + 1
    # Every request fits by the server's own bill (2,400 tokens a page, read from the file it received).
    assert max(r.tokens for r in server.accepted) <= window - 1_500
    sent_pdfs = [json.dumps(r.messages).count("application/pdf") for r in server.accepted]
    assert sent_pdfs[steps // 2] >= 2 and max(sent_pdfs) < steps  # recent pages go out; old ones were masked
    # Nothing is lost from the run's history: every page the tool returned is there.
    returns = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(returns) == steps


def test_a_history_that_cannot_be_converted_fails_the_run_clearly() -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    with ProviderServer(window=12_000, policy=reader(1)) as server:
        with pytest.raises(InvalidMessageError, match=r"message 0, field 'parts\[1\].content'.*surrogate"):
            run(make_agent(server, ContextCapability(engine)), "bad \ud800 text")
    assert server.requests == []  # nothing was sent


def test_a_tool_return_pydantic_ai_cannot_serialize_is_named() -> None:
    class Thing:
        pass

    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    with ProviderServer(window=12_000, policy=reader(1)) as server:
        agent = make_agent(server, ContextCapability(engine))

        @agent.tool_plain
        def thing() -> Any:
            """Return a thing."""
            return Thing()

        server.policy = tool_loop(steps=1, tool="thing", final="ok", args=lambda i: {})
        with pytest.raises(
            InvalidMessageError, match=r"message 2, field 'parts\[0\].content': tool 'thing' returned"
        ):
            run(agent, "Get the thing.")


# ----------------------------------------------------------------------------- the peers' bugs


def keep_recent_messages(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Pydantic AI's documented history processor: keep only the last few messages."""
    return messages[-5:] if len(messages) > 5 else messages


def test_pydantic_ai_2050_keep_last_n_splits_a_call_from_its_return() -> None:
    steps = 8
    seen: list[list[ModelMessage]] = []

    def recording(messages: list[ModelMessage]) -> list[ModelMessage]:
        kept = keep_recent_messages(messages)
        seen.append(kept)
        return kept

    with ProviderServer(window=100_000, policy=reader(steps)) as server:
        run(make_agent(server, ProcessHistory(recording), output_lines=5), TASK)[0]
    # The processor's output starts with a tool return whose call it cut off: sent as is, OpenAI answers
    # 400 (#2050). Pydantic AI 2.x drops such a return before sending, so the request is accepted, but
    # the result is lost, and so are the system prompt and the user's request.
    orphaned = [
        kept
        for kept in seen
        if isinstance(kept[0], ModelRequest) and any(isinstance(p, ToolReturnPart) for p in kept[0].parts)
    ]
    assert orphaned
    assert seen[-1] is orphaned[-1]
    sent = server.requests[-1].messages
    assert sent[0]["role"] != "system" and not any(m["role"] == "user" for m in sent)
    returns = sum(isinstance(p, ToolReturnPart) for m in seen[-1] for p in m.parts)
    assert sum(m["role"] == "tool" for m in sent) == returns - 1  # the orphaned one was dropped, unreported

    # The same conversation with agentcontext at a window that forces compaction at every few steps.
    engine = ac.ContextEngine(model="gpt-4o", window=3_000, reserve=500)
    with ProviderServer(window=3_000, policy=reader(steps)) as server:
        result = run(make_agent(server, ContextCapability(engine), output_lines=40), TASK)[0]
    assert result.output == "All files read."
    assert server.rejected == []
    for request in server.requests:
        check_request(request)
        calls = {c["id"] for m in request.messages for c in m.get("tool_calls") or []}
        answers = {m["tool_call_id"] for m in request.messages if m["role"] == "tool"}
        assert calls == answers


def test_pydantic_ai_2914_history_processors_lose_messages() -> None:
    steps = 6
    with ProviderServer(window=100_000, policy=reader(steps)) as server:
        theirs = run(make_agent(server, ProcessHistory(keep_recent_messages), output_lines=5), TASK)[0]
    assert len(theirs.all_messages()) < 2 * steps + 2  # the history itself lost messages

    engine = ac.ContextEngine(model="gpt-4o", window=3_000, reserve=500)
    with ProviderServer(window=3_000, policy=reader(steps)) as server:
        ours = run(make_agent(server, ContextCapability(engine), output_lines=40), TASK)[0]
    assert server.rejected == []
    assert len(ours.all_messages()) == 2 * steps + 2
    assert [type(m) for m in ours.all_messages()] == [
        ModelRequest,
        *[ModelResponse, ModelRequest] * steps,
        ModelResponse,
    ]


# ----------------------------------------------------------------------------- ProcessHistory and persist


def test_history_processor_with_process_history() -> None:
    steps = runs(30, 200)
    engine = ac.ContextEngine(model="gpt-4o", window=8_000, reserve=1_000)
    with ProviderServer(window=8_000, policy=reader(steps)) as server:
        (result,) = run(make_agent(server, ProcessHistory(history_processor(engine)), output_lines=60), TASK)
    assert result.output == "All files read."
    assert server.rejected == []
    assert max(r.tokens for r in server.accepted) <= 8_000
    for request in server.requests:
        check_request(request)


def test_persisted_compaction_is_not_redone_and_survives_the_next_run() -> None:
    window = 6_000
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=800)
    capability = ContextCapability(engine, persist=True)
    with ProviderServer(window=window, policy=reader(20)) as server:
        first, second = run(make_agent(server, capability, output_lines=60), TASK, "Now say you are done.")
    summaries = [
        m
        for m in pai.to_messages(first.all_messages())
        if m.metadata.get("agentcontext", {}).get("kind") == "summary"
    ]
    assert len(summaries) == 1
    assert server.rejected == []
    assert second.output == "All files read."
    # The second run started from the compacted history: the same summary, with the same id, and no new one.
    again = [
        m
        for m in pai.to_messages(second.all_messages())
        if m.metadata.get("agentcontext", {}).get("kind") == "summary"
    ]
    assert [m.id for m in again] == [summaries[0].id]
    assert capability.last is not None and capability.last.compaction is None


# ----------------------------------------------------------------------------- one-shot fits


class Recording(ac.ContextEngine):
    """The engine, keeping the report of each preparation (a history processor hides its results)."""

    def __init__(self) -> None:
        super().__init__(model="gpt-4o", window=12_000, reserve=1_500)
        self.reports: list[Any] = []

    async def aprepare(self, *args: Any, **kwargs: Any) -> Any:
        prepared = await super().aprepare(*args, **kwargs)
        self.reports.append(prepared.report)
        return prepared


def long_history(steps: int = 80) -> list[ModelMessage]:
    """A whole earlier run handed to one new run (about 28k tokens: nearly three budgets)."""
    from pydantic_ai.messages import SystemPromptPart, TextPart, ToolCallPart, UserPromptPart

    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart(SYSTEM), UserPromptPart(TASK)])]
    for i in range(steps):
        path = f"src/file_{i}.py"
        output = "\n".join(
            f"{path}:{n}: value_{n} = compute({n}, scale=0.{n % 10})  # step" for n in range(15)
        )
        history.append(ModelResponse(parts=[ToolCallPart("read", {"path": path}, tool_call_id=f"c{i}")]))
        history.append(ModelRequest(parts=[ToolReturnPart("read", output, tool_call_id=f"c{i}")]))
    history.append(ModelResponse(parts=[TextPart("All files read.")]))
    return history


def sent_once(capability: Any) -> Request:
    """Run one request over `long_history` with ``capability``: what the server got."""

    async def go(agent: Agent[None, str]) -> Any:
        async with agent:
            return await agent.run("Now report.", message_history=long_history(), usage_limits=NO_LIMIT)

    with ProviderServer(window=12_000, policy=reader(0)) as server:
        asyncio.run(go(make_agent(server, capability)))
    assert server.rejected == []
    (request,) = server.requests
    check_request(request, task="Now report.")
    return request


@pytest.mark.parametrize("persist", [False, True])
def test_a_history_sent_once_with_fill_fills_the_budget_and_the_default_compacts_to_its_target(
    persist: bool,
) -> None:
    reports = {}
    for fill in (True, False):
        capability = ContextCapability(Recording(), persist=persist, fill=fill)
        assert capability.fill is fill
        request = sent_once(capability)
        assert capability.last is not None
        reports[fill] = capability.last.report
        assert request.tokens == pytest.approx(reports[fill].tokens_after, rel=0.02)  # the server's count
    one_shot, running = reports[True], reports[False]
    assert one_shot.tokens_before > 2 * one_shot.budget
    assert one_shot.fill and any(n.startswith("one-shot fit: filled up to") for n in one_shot.notes)
    assert one_shot.tokens_after > 0.85 * one_shot.budget  # nearly the whole budget
    assert not running.fill and not any("one-shot" in n for n in running.notes)
    assert running.tokens_after < 0.6 * running.budget  # the hysteresis target a running agent uses


def test_history_processor_fills_the_budget_when_asked() -> None:
    usage = {}
    for fill in (0.9, False):
        engine = Recording()
        sent_once(ProcessHistory(history_processor(engine, fill=fill)))
        (report,) = engine.reports
        assert report.fill is (fill is not False)
        usage[fill] = report.usage
    assert 0.8 < usage[0.9] <= 0.9  # the share asked for, nearly filled
    assert usage[False] < 0.6


def test_a_bad_fill_is_refused_by_name() -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=12_000)
    for bad in (1.5, 0, "yes", None):
        with pytest.raises(ac.ConfigError, match=r"fill must be False .* got " + re.escape(repr(bad))):
            ContextCapability(engine, fill=bad)  # type: ignore[arg-type]
        with pytest.raises(ac.ConfigError, match="fill must be"):
            history_processor(engine, fill=bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- usage feedback

ESTIMATOR = ScriptEstimator()
BILLED_WINDOW, BILLED_OUTPUT = 8_000, 1_000
BILLED = ModelSpec(
    name="billed-model",
    provider="other",
    context_window=BILLED_WINDOW,
    max_output_tokens=BILLED_OUTPUT,
    tokenizer="estimate",
)
"""A model counted by estimate: its engine calibrates on provider usage by default."""


def estimated(body: dict[str, Any]) -> int:
    """agentcontext's estimate of a Chat Completions body the server received: messages and tools."""
    messages = oai.to_messages(body["messages"])
    return ESTIMATOR.count_messages(messages) + ESTIMATOR.count_tools(body.get("tools") or [])


def billing(ratio: float) -> Any:
    """A provider whose tokenizer makes prompts ``ratio`` times agentcontext's estimate of them."""
    return lambda _api, body: math.ceil(ratio * estimated(body))


def billed_agent(server: ProviderServer, capability: Any) -> Agent[None, str]:
    """An agent on `BILLED` that asks for up to ``BILLED_OUTPUT`` tokens (prompt + max_tokens must fit the window)."""
    model = OpenAIChatModel("billed-model", provider=OpenAIProvider(base_url=server.openai_url, api_key="k"))
    agent: Agent[None, str] = Agent(
        model, system_prompt=SYSTEM, capabilities=[capability], model_settings={"max_tokens": BILLED_OUTPUT}
    )

    @agent.tool_plain
    def read(path: str) -> str:
        """Read a file of the project."""
        return "\n".join(f"{path}:{n}: value_{n} = compute({n}, scale=0.{n % 10})  # step" for n in range(40))

    return agent


class Fed(ac.ContextEngine):
    """An engine on `BILLED` that keeps what it prepared and every usage fed back to it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(model=BILLED, **kwargs)
        self.prepared: list[tuple[str, Any]] = []
        self.fed: list[tuple[Any, int]] = []

    async def aprepare(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        prepared = await super().aprepare(messages, *args, **kwargs)
        task = next(m.text[:6] for m in reversed(messages) if m.role == "user" and m.text.startswith("Task"))
        self.prepared.append((task, prepared.report))
        return prepared

    def record_usage(self, report: Any, prompt_tokens: int) -> bool:
        self.fed.append((report, prompt_tokens))
        return super().record_usage(report, prompt_tokens)


@pytest.mark.parametrize("setup", ["capability", "persist", "history_processor"])
def test_usage_teaches_an_estimating_engine_what_the_provider_bills_so_every_request_fits(setup: str) -> None:
    # The provider's tokenizer makes prompts 1.4x agentcontext's estimate of them: its 10% margin
    # for estimated counts does not cover that once a request fills the budget (fill=True, a one-shot
    # fit, compacts only when over it, and then fills it).
    steps, bill = 40, billing(1.4)

    def capability_on(engine: ac.ContextEngine) -> Any:
        if setup == "history_processor":
            return ProcessHistory(history_processor(engine, fill=True))
        return ContextCapability(engine, fill=True, persist=setup == "persist")

    async def go(agent: Agent[None, str]) -> Any:
        async with agent:
            return await agent.run(TASK, usage_limits=NO_LIMIT)

    # An engine that cannot learn (its counter is the bare estimator) sends a request the provider rejects.
    blind = ac.ContextEngine(model=BILLED, counter=ScriptEstimator())
    with ProviderServer(window=BILLED_WINDOW, policy=reader(steps), bill=bill) as server:
        with pytest.raises(ModelHTTPError, match="maximum context length is 8000 tokens"):
            asyncio.run(go(billed_agent(server, capability_on(blind))))
    (rejected,) = server.rejected
    assert rejected.tokens > BILLED_WINDOW - BILLED_OUTPUT

    # The default engine for this model learns from each response's usage.
    engine = ac.ContextEngine(model=BILLED)
    capability = capability_on(engine)
    with ProviderServer(window=BILLED_WINDOW, policy=reader(steps), bill=bill) as server:
        result = asyncio.run(go(billed_agent(server, capability)))
    assert result.output == "All files read."
    assert server.rejected == []
    assert len(server.accepted) == steps + 1
    largest = max(r.tokens for r in server.accepted)
    assert largest <= BILLED_WINDOW - BILLED_OUTPUT
    assert largest > 0.8 * engine.budget  # the budget was filled: the requests were large enough to overflow
    correction = engine.counter.correction  # type: ignore[attr-defined]
    # About the provider's ratio (a history processor cannot count the tools, which the bill includes).
    assert correction == pytest.approx(1.4, abs=0.02 if setup != "history_processor" else 0.05)
    if isinstance(capability, ContextCapability):
        # The budget of the latest request was scaled by it (before the latest usage moved it a little).
        assert capability.last is not None
        assert capability.last.report.correction == pytest.approx(1.4, abs=0.02)


def test_each_usage_is_fed_against_its_own_conversations_request_the_last_one_included() -> None:
    # Two conversations run at once through one capability; their provider bills them differently.
    ratios = {"Task X": 1.2, "Task Y": 1.45}
    engine = Fed()
    capability = ContextCapability(engine)

    def task_of(texts: Any) -> str:
        return next(t[:6] for t in reversed(list(texts)) if t.startswith("Task"))

    def bill(_api: str, body: dict[str, Any]) -> int:
        user = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return math.ceil(ratios[task_of(user)] * estimated(body))

    steps = {task: itertools.count() for task in ratios}

    def policy(request: Request) -> Reply:
        task = request.latest_user_text()[:6]
        done = next(steps[task])  # the server's own count: a compacted request holds fewer tool results
        if task == "Task X":
            time.sleep(0.02)  # so the two conversations' steps interleave
        if done < 4:
            return Reply(tool_calls=[("read", {"path": f"f{done}.py"})])
        return Reply(text="done")

    async def both(agent: Agent[None, str]) -> list[Any]:
        async with agent:
            runs_ = [agent.run(task + ": " + TASK, usage_limits=NO_LIMIT) for task in ratios]
            return list(await asyncio.gather(*runs_))

    with ProviderServer(window=BILLED_WINDOW, policy=policy, bill=bill) as server:
        asyncio.run(both(billed_agent(server, capability)))
    assert server.rejected == []
    # Every response's usage was fed once, the last response of each run included.
    assert len(engine.fed) == len(server.requests) == 10
    task_of_report = {id(report): task for task, report in engine.prepared}
    billed = sorted(r.tokens for r in server.requests)
    assert sorted(tokens for _, tokens in engine.fed) == billed
    for report, tokens in engine.fed:
        # Against the report of the request that was billed: its own conversation's ratio.
        assert tokens / report.tokens_after == pytest.approx(ratios[task_of_report[id(report)]], abs=0.02)


def test_a_history_processor_feeds_the_last_response_when_the_conversation_continues() -> None:
    engine = Fed()
    processor = ProcessHistory(history_processor(engine))

    async def go(agent: Agent[None, str]) -> list[Any]:
        async with agent:
            first = await agent.run("Task A: " + TASK, usage_limits=NO_LIMIT)
            history = [*first.all_messages()]
            second = await agent.run("Task A again.", message_history=history, usage_limits=NO_LIMIT)
            # A history that was not prepared here: its responses' usage is not this engine's to learn from.
            foreign = [
                ModelRequest(parts=[UserPromptPart("Task B: " + TASK)]),
                ModelResponse(parts=[TextPart("Done.")], usage=RequestUsage(input_tokens=99_999)),
            ]
            third = await agent.run("Task B again.", message_history=foreign, usage_limits=NO_LIMIT)
            return [first, second, third]

    with ProviderServer(window=BILLED_WINDOW, policy=reader(3), bill=billing(1.3)) as server:
        asyncio.run(go(billed_agent(server, processor)))
    assert server.rejected == []
    assert len(server.requests) == 4 + 1 + 1
    # Within a run, each response is fed at the next request; the first run's last response when the
    # second run continued its conversation. Only the runs' final responses (no request after) are not.
    assert len(engine.fed) == 4
    assert all(tokens != 99_999 for _, tokens in engine.fed)
    assert sorted(tokens for _, tokens in engine.fed) == sorted(r.tokens for r in server.requests[:4])


def test_a_response_without_usage_teaches_nothing() -> None:
    engine = Fed()
    with ProviderServer(window=BILLED_WINDOW, policy=reader(3), bill=lambda _api, body: 0) as server:
        run(billed_agent(server, ContextCapability(engine)), "Task: " + TASK)
    assert server.rejected == [] and len(server.requests) == 4
    assert engine.fed == []
    assert engine.counter.correction == 1.0  # type: ignore[attr-defined]


def test_an_exact_counter_has_nothing_to_learn() -> None:
    engine = ac.ContextEngine(model="gpt-4o", window=12_000, reserve=1_500)
    capability = ContextCapability(engine)
    with ProviderServer(window=12_000, policy=reader(3), bill=billing(1.4)) as server:
        run(make_agent(server, capability, output_lines=10), TASK)
    assert server.rejected == []
    assert capability.last is not None and capability.last.report.correction == 1.0


# ----------------------------------------------------------------------------- the docs and the extra


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)


# The docs call run_sync, which leaves the agent's HTTP client to the garbage collector (collected here).
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_docs_code_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks()
    assert len(blocks) == 3
    for block in blocks:
        with ProviderServer(window=128_000, policy=reader(3)) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
            monkeypatch.setenv("OPENAI_API_KEY", "test-key")
            scope: dict[str, Any] = {}
            exec(compile(block, str(DOCS), "exec"), scope)
            del scope["agent"]
            gc.collect()
        assert scope["result"].output == "All files read."
        assert server.rejected == []
        assert len(server.requests) == 4
    # run_sync (2.31) leaves the event loop it made set and open; a later test would collect it, and its
    # unclosed sockets would be reported there.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)


def test_import_needs_the_extra_and_agentcontext_does_not_import_pydantic_ai() -> None:
    code = (
        "import sys\n"
        "import agentcontext, agentcontext.integrations\n"
        "assert 'pydantic_ai' not in sys.modules\n"
        "sys.modules['pydantic_ai'] = None\n"
        "from agentcontext.exceptions import MissingDependencyError\n"
        "for name in ('agentcontext.formats.pydantic_ai', 'agentcontext.integrations.pydantic_ai'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except MissingDependencyError as e:\n"
        "        assert \"pip install 'agentcontext[pydantic-ai]'\" in str(e), e\n"
        "    else:\n"
        "        raise SystemExit(name + ' imported without pydantic_ai')\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.skipif(not LONG, reason="long profile only")
def test_very_long_loop_with_big_outputs() -> None:
    window = 32_000
    engine = ac.ContextEngine(model="gpt-4o", window=window, reserve=2_000)
    with ProviderServer(window=window, policy=reader(500)) as server:
        result = run(make_agent(server, ContextCapability(engine), output_lines=400), TASK)[0]
    assert result.output == "All files read."
    assert server.rejected == []
    assert max(r.tokens for r in server.accepted) <= window
