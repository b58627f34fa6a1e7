"""LangChain's own context middleware against the loopback provider, then ContextMiddleware on the same conversation.

Each test reproduces an open report with LangChain 1.x's middleware configured as its
documentation shows (the provider rejects the request as OpenAI would, or the state
shows the edit was never kept), then runs the same conversation with ContextMiddleware.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware, SummarizationMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

import agentcontext as ac
from agentcontext import check_messages
from agentcontext.compaction import kind_of
from agentcontext.formats import langchain as lc
from agentcontext.integrations.langchain import ContextMiddleware
from providers import ProviderServer, tool_loop
from test_integration_langchain import SYSTEM, compactions, config, prefix_breaks, run_tool


def model_for(server: ProviderServer, window: int | None = None) -> ChatOpenAI:
    profile = {"max_input_tokens": window} if window is not None else None
    return ChatOpenAI(
        model="gpt-4o", base_url=server.openai_url, api_key="sk-test", max_retries=0, profile=profile
    )


# ----------------------------------------------------------------------------- orphaned tool results


def history_with_a_late_result() -> list[BaseMessage]:
    """A thread where one tool result arrived a turn late (a slow tool, a human approval, an imported log).

    ``call_old`` was issued by the first assistant message; its result sits in the tool-result run of the
    last one, next to ``call_new``'s. This is the run #38352 describes: one result pairs with the surviving
    assistant message, the other with one that summarization removes.
    """
    out: list[BaseMessage] = [HumanMessage("Audit the three services.", id="u1")]
    out.append(
        AIMessage(
            "",
            tool_calls=[
                {"name": "run", "args": {"step": 0}, "id": "call_old"},
                {"name": "run", "args": {"step": 1}, "id": "call_first"},
            ],
            id="a1",
        )
    )
    out.append(ToolMessage("service one: healthy " * 40, tool_call_id="call_first", id="t1"))
    for i in range(2, 6):
        out.append(
            AIMessage("", tool_calls=[{"name": "run", "args": {"step": i}, "id": f"call_{i}"}], id=f"a{i}")
        )
        out.append(ToolMessage(f"service check {i}: healthy " * 40, tool_call_id=f"call_{i}", id=f"t{i}"))
    out.append(AIMessage("", tool_calls=[{"name": "run", "args": {"step": 9}, "id": "call_new"}], id="a9"))
    out.append(ToolMessage("service three: degraded " * 40, tool_call_id="call_new", id="t9"))
    out.append(ToolMessage("service zero: healthy (late) " * 40, tool_call_id="call_old", id="t0"))
    return out


def test_summarization_middleware_keeps_an_orphaned_tool_result_and_the_provider_rejects_it() -> None:
    history = history_with_a_late_result()
    with ProviderServer(window=16_000, policy=tool_loop(steps=0)) as server:
        summarization = SummarizationMiddleware(
            model=model_for(server), trigger=("messages", 10), keep=("messages", 2)
        )
        agent = create_agent(
            model_for(server), tools=[run_tool()], system_prompt=SYSTEM, middleware=[summarization]
        )
        with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding message"):
            agent.invoke({"messages": history}, config(None, 4))
        # It did summarize (the summary call went through), and the request it then built keeps the late result
        # with the assistant message of the other call only.
        summary_call, request = server.requests[-2], server.requests[-1]
        assert summary_call.error is None and "summary" in json.dumps(summary_call.body).lower()
        roles = [(m["role"], m.get("tool_call_id")) for m in request.body["messages"]]
        assert roles[-3:] == [("assistant", None), ("tool", "call_new"), ("tool", "call_old")]

    with ProviderServer(window=16_000, policy=tool_loop(steps=0)) as server:
        engine = ac.ContextEngine(model="gpt-4o", window=1_600)  # small enough that it must compact too
        agent = create_agent(
            model_for(server),
            tools=[run_tool()],
            system_prompt=SYSTEM,
            middleware=[ContextMiddleware(engine)],
        )
        out = agent.invoke({"messages": history}, config(None, 4))
        assert out["messages"][-1].content == "done" and server.rejected == []
        report = engine.stats
        assert report.repairs >= 1 and compactions(engine) >= 1  # the late result was taken out, and said so


def test_summarization_middleware_cutoff_on_valid_histories_keeps_pairs() -> None:
    # The other half of the story, measured: on histories OpenAI accepts, LangChain 1.x's cutoff keeps each call
    # with its results (#34282 is fixed); #38352 needs a run of results that mixes two assistant turns.
    import random

    model = ChatOpenAI(model="gpt-4o", api_key="sk-test")
    orphans = 0
    for seed in range(200):
        rng = random.Random(seed)
        msgs: list[BaseMessage] = [HumanMessage("q")]
        for k in range(rng.randint(2, 12)):
            ids = [f"c{k}_{j}" for j in range(rng.randint(1, 3))]
            msgs.append(AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": i} for i in ids]))
            msgs += [
                ToolMessage("x" * rng.randint(1, 300), tool_call_id=i) for i in rng.sample(ids, len(ids))
            ]
        keep = ("messages", rng.randint(1, len(msgs))) if seed % 2 else ("tokens", rng.randint(5, 300))
        middleware = SummarizationMiddleware(model=model, trigger=("messages", 2), keep=keep)
        cut = middleware._determine_cutoff_index(msgs)
        orphans += bool(check_messages(lc.to_messages([HumanMessage("summary"), *msgs[cut:]])))
    assert orphans == 0


# ----------------------------------------------------------------------------- chars/4 under-counts


def dense_tool() -> Any:
    @tool
    def query(step: int) -> str:
        """Query the metrics store; returns rows as JSON."""
        rows = [
            {
                "id": hashlib.sha256(f"{step}-{i}".encode()).hexdigest()[:24],
                "v": (step * 7919 + i * 104729) % 999_983,
                "t": 1_700_000_000 + i * 37,
            }
            for i in range(120)
        ]
        return json.dumps(rows)  # about 1.85 characters per token: chars/4 sees half of it

    return query


def test_approximate_counting_lets_requests_over_the_window_reach_the_provider() -> None:
    window, steps = 8_000, 12
    policy = tool_loop(steps=steps, tool="query")
    with ProviderServer(window=window, policy=policy) as server:
        summarization = SummarizationMiddleware(
            model=model_for(server, window), trigger=("fraction", 0.8), keep=("fraction", 0.3)
        )
        agent = create_agent(
            model_for(server, window), tools=[dense_tool()], system_prompt=SYSTEM, middleware=[summarization]
        )
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            agent.invoke(
                {"messages": [{"role": "user", "content": "collect the metrics"}]}, config(None, steps)
            )
        over = server.rejected[-1]
        assert over.tokens > window  # counted independently with tiktoken

    with ProviderServer(window=window, policy=tool_loop(steps=steps, tool="query")) as server:
        engine = ac.ContextEngine(model="gpt-4o", window=window)
        agent = create_agent(
            model_for(server, window),
            tools=[dense_tool()],
            system_prompt=SYSTEM,
            middleware=[ContextMiddleware(engine)],
        )
        out = agent.invoke(
            {"messages": [{"role": "user", "content": "collect the metrics"}]}, config(None, steps)
        )
        assert out["messages"][-1].content == "done" and server.rejected == []
        assert max(r.tokens for r in server.requests) <= window


# ----------------------------------------------------------------------------- edits never persisted


def test_clear_tool_uses_refires_every_call_with_a_checkpointer_and_ours_persists_once() -> None:
    steps, window = 14, 16_000
    with ProviderServer(window=window, policy=tool_loop(steps=steps)) as server:
        editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=6_000, keep=3)])
        agent = create_agent(
            model_for(server),
            tools=[run_tool()],
            system_prompt=SYSTEM,
            middleware=[editing],
            checkpointer=InMemorySaver(),
        )
        agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("t", steps))
        stored = agent.get_state(config("t", 1)).values["messages"]
        edited = [
            r for r in server.requests if any(m.get("content") == "[cleared]" for m in r.body["messages"])
        ]
        # Every call past the trigger clears again from the full history: the checkpoint never holds the edit.
        assert len(edited) >= steps // 2
        assert not any(isinstance(m, ToolMessage) and m.content == "[cleared]" for m in stored)
        assert prefix_breaks(server) >= len(edited) - 1  # and each new clearing changes the prompt prefix

    with ProviderServer(window=window, policy=tool_loop(steps=steps)) as server:
        saver = InMemorySaver()
        engine = ac.ContextEngine(model="gpt-4o", window=window)
        agent = create_agent(
            model_for(server),
            tools=[run_tool()],
            system_prompt=SYSTEM,
            middleware=[ContextMiddleware(engine, mode="state")],
            checkpointer=saver,
        )
        agent.invoke({"messages": [{"role": "user", "content": "build"}]}, config("t", steps))
        assert server.rejected == []
        # Each step adds a fifth of the budget, and a compaction keeps the newest step verbatim (the
        # output the model just asked for): one every third or fourth step, each persisted once.
        assert 1 <= compactions(engine) <= steps // 3
        assert prefix_breaks(server) <= compactions(engine)
        stored = agent.get_state(config("t", 1)).values["messages"]
        assert any(
            kind_of(m) is not None for m in lc.to_messages(stored)
        )  # the checkpoint holds the compaction
        fresh = ac.ContextEngine(model="gpt-4o", window=window)
        resumed = create_agent(
            model_for(server),
            tools=[run_tool()],
            system_prompt=SYSTEM,
            middleware=[ContextMiddleware(fresh, mode="state")],
            checkpointer=saver,
        )
        server.policy = tool_loop(steps=0, final="ok")
        resumed.invoke({"messages": [{"role": "user", "content": "status?"}]}, config("t", 2))
        assert compactions(fresh) == 0 and server.rejected == []
