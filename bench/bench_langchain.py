"""ContextMiddleware in LangChain v1 agents: per-step overhead at 10,000 messages, and billed input tokens.

Two measurements, side by side in one run:

1. **Per-step overhead, nothing to compact.** A LangGraph-style history of 10,000
   messages (a new list object every step, as ``add_messages`` makes it) grows by an
   assistant message and a tool result per step. Timed per step (median): the
   engine alone (`ContextEngine.prepare` on canonical messages, O(new)), the whole
   `ContextMiddleware.wrap_model_call` (conversion both ways + the engine), and
   LangChain's own per-step checks on the same history: `SummarizationMiddleware.before_model`
   (approximate count of every message) and `ContextEditingMiddleware.wrap_model_call`
   (deep copy and count of every message), both below their triggers.
2. **Billed input tokens with prompt caching.** The same scripted agent (``create_agent``
   + ``ChatOpenAI``) runs a long tool loop against the loopback OpenAI server of
   ``tests/providers.py`` with each context manager. Every request is counted with
   tiktoken by the server; the prompt cache is OpenAI's automatic prefix cache
   (prefixes of at least 1,024 tokens, in 128-token steps, `agentcontext.replay.cached_tokens`);
   summary calls of `SummarizationMiddleware` are billed too (they go to the same model).

    python bench/bench_langchain.py            # about 2 minutes on 2 cores
    python bench/bench_langchain.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from langchain.agents import create_agent
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
    SummarizationMiddleware,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI

import agentcontext as ac
from agentcontext.formats import langchain as lc
from agentcontext.integrations.langchain import ContextMiddleware
from agentcontext.replay import cached_tokens
from agentcontext.tokens._tools import render_tools
from providers import ProviderServer, Reply, Request, count_text, tool_loop

SYSTEM = "You are a build engineer. Run the steps you are asked to run, then report."
_STEP = re.compile(r"\[step (\d+)\]")
_WORDS = (
    "the build of this unit finished without warnings and the cache was warm so nothing was rebuilt".split()
)


def _text(seed: int, words: int) -> str:
    return " ".join(_WORDS[(seed * 7 + i * 3) % len(_WORDS)] for i in range(words)) + f" (entry {seed})"


# ----------------------------------------------------------------------------- 1. per-step overhead


def history(n: int) -> list[BaseMessage]:
    """A LangGraph-style history: ids on every message, tool rounds of varied sizes."""
    out: list[BaseMessage] = [HumanMessage("Build every module and report.", id="u0")]
    i = 0
    while len(out) < n:
        out.append(
            AIMessage("", tool_calls=[{"name": "run", "args": {"step": i}, "id": f"c{i}"}], id=f"a{i}")
        )
        out.append(ToolMessage(_text(i, 40 + (i * 37) % 160), tool_call_id=f"c{i}", id=f"t{i}"))
        i += 1
    return out  # n or n + 1 messages: the history ends with a complete tool round


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def per_step(n: int, steps: int) -> dict[str, float]:
    base = history(n)
    grown: list[list[BaseMessage]] = []
    current = list(base)
    for s in range(steps):
        current = [
            *current,
            AIMessage(
                "", tool_calls=[{"name": "run", "args": {"step": 10**6 + s}, "id": f"n{s}"}], id=f"na{s}"
            ),
            ToolMessage(_text(s, 80), tool_call_id=f"n{s}", id=f"nt{s}"),
        ]
        grown.append(current)  # a new list per step, as add_messages makes it
    system = SystemMessage(SYSTEM)

    @tool
    def run(step: int) -> str:
        """Run one build step."""
        return f"step {step} done"

    chat = ChatOpenAI(model="gpt-4o", api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    window = 10_000_000  # nothing to compact

    # The engine alone, on canonical messages (what bench_engine.py measures).
    engine = ac.ContextEngine(model="gpt-4o", window=window)
    ours = lc.to_messages([system, *base])
    prepared = engine.prepare(ours)
    engine_times: list[float] = []
    for s in range(steps):
        ours.extend(lc.to_messages(grown[s][-2:]))  # converted outside the timing
        t = time.perf_counter()
        prepared = engine.prepare(ours, state=prepared.state)
        engine_times.append(time.perf_counter() - t)
        assert prepared.report.incremental and prepared.compaction is None

    # The whole middleware: conversion in, the engine, conversion out.
    middleware = ContextMiddleware(ac.ContextEngine(model="gpt-4o", window=window))
    reply = ModelResponse(result=[AIMessage("ok")])

    def handler(_request: ModelRequest[Any]) -> ModelResponse[Any]:
        return reply

    def request(messages: list[BaseMessage]) -> ModelRequest[Any]:
        return ModelRequest(model=chat, messages=messages, system_message=system, tools=[run])

    first = time.perf_counter()
    middleware.wrap_model_call(request(base), handler)
    first_call = time.perf_counter() - first
    middleware_times: list[float] = []
    for s in range(steps):
        req = request(grown[s])
        t = time.perf_counter()
        middleware.wrap_model_call(req, handler)
        middleware_times.append(time.perf_counter() - t)
        assert middleware.last is not None and middleware.last.report.incremental

    # A new run on a checkpointed thread: the same messages as new objects (loaded from the checkpoint).
    loaded = copy.deepcopy(grown[-1])
    t = time.perf_counter()
    middleware.wrap_model_call(request(loaded), handler)
    resumed = time.perf_counter() - t
    assert middleware.last is not None and middleware.last.report.incremental

    # LangChain's own per-step checks, below their triggers (nothing to do but count).
    summarization = SummarizationMiddleware(model=chat, trigger=("tokens", 10**9))
    summarization_times: list[float] = []
    for s in range(min(steps, 20)):
        t = time.perf_counter()
        assert summarization.before_model({"messages": grown[s]}, None) is None  # type: ignore[arg-type]
        summarization_times.append(time.perf_counter() - t)
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=10**9)])
    editing_times: list[float] = []
    for s in range(min(steps, 5)):
        t = time.perf_counter()
        editing.wrap_model_call(request(grown[s]), handler)
        editing_times.append(time.perf_counter() - t)

    engine_us = _median_us(engine_times)
    middleware_us = _median_us(middleware_times)
    return {
        "messages": n,
        "engine_us": engine_us,
        "middleware_us": middleware_us,
        "adapter_us": middleware_us - engine_us,
        "first_call_ms": first_call * 1e3,
        "resumed_ms": resumed * 1e3,
        "summarization_us": _median_us(summarization_times),
        "editing_us": _median_us(editing_times),
    }


# ----------------------------------------------------------------------------- 2. billed input tokens


def _message_tokens(m: dict[str, Any]) -> int:
    """A message's prompt tokens, counted as the loopback server counts them."""
    content = m.get("content")
    text = content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content or [])
    n = 3 + count_text(m["role"]) + count_text(text)
    if isinstance(m.get("name"), str) and m["role"] != "tool":
        n += 1 + count_text(m["name"])
    calls = m.get("tool_calls") or []
    n += 10 if len(calls) > 1 else 0
    for c in calls:
        n += 7 + count_text(c["function"]["name"]) + count_text(c["function"]["arguments"])
    return n


def run_tool(lines: int) -> BaseTool:
    @tool
    def run(step: int) -> str:
        """Run one build step and return its log."""
        return "\n".join(f"[step {step}] {_text(step * 1000 + i, 16)}" for i in range(lines))

    return run


def billed(
    name: str, middleware: Callable[[ProviderServer], list[Any]], *, steps: int, window: int, lines: int
) -> dict[str, Any]:
    spec = ac.models.get("gpt-4o")
    agent_policy = tool_loop(steps=steps)

    def policy(request: Request) -> Reply:
        if request.body.get("tools"):
            return agent_policy(request)
        # SummarizationMiddleware's summary call (no tools; it does not advance the agent). The scripted
        # summarizer is generous: it keeps every step its prompt mentions.
        seen = sorted({int(n) for n in _STEP.findall("\n".join(request.texts()))})
        return Reply(
            text="## SESSION INTENT\nBuild every module.\n## SUMMARY\nSteps done: "
            + ", ".join(f"[step {n}]" for n in seen)
        )

    with ProviderServer(window=window, policy=policy) as server:
        model = ChatOpenAI(model="gpt-4o", base_url=server.openai_url, api_key="sk-test", max_retries=0)
        agent = create_agent(
            model, tools=[run_tool(lines)], system_prompt=SYSTEM, middleware=middleware(server)
        )
        failed = ""
        t = time.perf_counter()
        try:
            agent.invoke(
                {"messages": [{"role": "user", "content": "build everything"}]},
                {"recursion_limit": 10 * steps + 50},
            )
        except Exception as exc:  # a provider 400 ends the run: that is the result
            failed = type(exc).__name__
        seconds = time.perf_counter() - t
        requests: list[Request] = list(server.requests)
    agent_calls = [r for r in requests if r.body.get("tools")]
    last = "\n".join(agent_calls[-1].texts()) if agent_calls else ""
    known = len({int(n) for n in _STEP.findall(last)})
    summary_calls = [r for r in requests if not r.body.get("tools")]
    total = cached = 0
    previous: list[dict[str, Any]] = []
    previous_tokens = 0
    for r in agent_calls:
        msgs = r.body["messages"]
        common = count_text(render_tools(r.body["tools"])) + 9 + 3
        for a, b in zip(previous, msgs, strict=False):
            if a != b:
                break
            common += _message_tokens(b)
        system = _message_tokens(msgs[0]) if msgs and msgs[0]["role"] == "system" else 0
        hit, _ = cached_tokens(
            style="automatic_prefix",
            prompt=r.tokens,
            common_prefix=common,
            previous_prompt=previous_tokens,
            system=system,
        )
        total += r.tokens
        cached += hit if r.error is None else 0
        previous, previous_tokens = msgs, r.tokens
    total += sum(r.tokens for r in summary_calls)
    price, cached_price = spec.input_price or 0.0, spec.cached_input_price or spec.input_price or 0.0
    cost = ((total - cached) * price + cached * cached_price) / 1e6
    return {
        "name": name,
        "calls": len(agent_calls),
        "summary_calls": len(summary_calls),
        "rejected": sum(1 for r in requests if r.error is not None),
        "failed": failed,
        "max_tokens": max((r.tokens for r in requests), default=0),
        "mean_tokens": sum(r.tokens for r in agent_calls) / max(len(agent_calls), 1),
        "steps_known": known,
        "input": total,
        "cached": cached,
        "cost": cost,
        "seconds": seconds,
    }


def compare_billing(steps: int, window: int, lines: int) -> list[dict[str, Any]]:
    def langchain(**options: Any) -> Callable[[ProviderServer], list[Any]]:
        # As LangChain's docs show them (trigger and keep scaled to this window).
        def make(server: ProviderServer) -> list[Any]:
            summarizer = ChatOpenAI(
                model="gpt-4o", base_url=server.openai_url, api_key="sk-test", max_retries=0
            )
            return [
                SummarizationMiddleware(
                    model=summarizer, trigger=("tokens", int(window * 0.8)), keep=("messages", 20), **options
                ),
                ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=window // 2, keep=3)]),
            ]

        return make

    def ours(mode: str) -> Callable[[ProviderServer], list[Any]]:
        return lambda _server: [ContextMiddleware(ac.ContextEngine(model="gpt-4o", window=window), mode=mode)]  # type: ignore[arg-type]

    sizes: dict[str, int] = {"steps": steps, "window": window, "lines": lines}
    return [
        billed("SummarizationMiddleware + ContextEditingMiddleware", langchain(), **sizes),
        billed(
            "the same with `trim_tokens_to_summarize=None`", langchain(trim_tokens_to_summarize=None), **sizes
        ),
        billed("ContextMiddleware (request mode)", ours("request"), **sizes),
        billed("ContextMiddleware (state mode)", ours("state"), **sizes),
    ]


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args()
    n, steps = (2_000, 30) if args.quick else (10_000, 200)
    loop_steps, window, lines = (40, 16_000, 40) if args.quick else (150, 32_000, 60)

    overhead = per_step(n, steps)
    print(f"### Per-step overhead at a {overhead['messages']:,}-message history, nothing to compact (median)")
    print("| step | per step | vs. the engine alone |")
    print("| --- | ---: | ---: |")
    e = overhead["engine_us"]
    print(f"| `ContextEngine.prepare` alone (canonical messages) | {e:,.0f} µs | 1.0x |")
    print(
        f"| `ContextMiddleware.wrap_model_call` (conversion + engine) | {overhead['middleware_us']:,.0f} µs | {overhead['middleware_us'] / e:.1f}x |"
    )
    print(
        f"| of which the adapter (conversion both ways) | {overhead['adapter_us']:,.0f} µs | {overhead['adapter_us'] / e:.1f}x |"
    )
    print(
        f"| `SummarizationMiddleware.before_model` (below its trigger) | {overhead['summarization_us']:,.0f} µs | {overhead['summarization_us'] / e:,.0f}x |"
    )
    print(
        f"| `ContextEditingMiddleware.wrap_model_call` (below its trigger) | {overhead['editing_us']:,.0f} µs | {overhead['editing_us'] / e:,.0f}x |"
    )
    print()
    print(
        f"First call (converts and counts the whole history once): {overhead['first_call_ms']:,.0f} ms; "
        f"first call of a new run on a checkpointed thread (the same messages as new objects, compared by "
        f"id and content, nothing recounted): {overhead['resumed_ms']:,.0f} ms. "
        f"SummarizationMiddleware's check is {overhead['summarization_us'] / overhead['middleware_us']:,.0f}x "
        "the whole middleware step."
    )
    print()
    rows = compare_billing(loop_steps, window, lines)
    print(
        f"### Billed input tokens over a {loop_steps}-step tool loop (window {window:,}, tool outputs about "
        f"{lines * 22:,} tokens), OpenAI prefix caching, gpt-4o prices"
    )
    print(
        "| context management | model calls | summary calls | rejected (400) | mean / largest request | "
        "input tokens | cached | input cost | $ per M input | steps the last request names | time |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        share = r["cached"] / r["input"] if r["input"] else 0.0
        calls = f"{r['calls']}" + (f" ({r['failed']})" if r["failed"] else "")
        per_m = r["cost"] / r["input"] * 1e6 if r["input"] else 0.0
        print(
            f"| {r['name']} | {calls} | {r['summary_calls']} | {r['rejected']} | "
            f"{r['mean_tokens']:,.0f} / {r['max_tokens']:,} | {r['input']:,} | {share:.1%} | ${r['cost']:.3f} | "
            f"${per_m:.2f} | {r['steps_known']} of {loop_steps} | {r['seconds']:.1f} s |"
        )
    if args.json:
        print(json.dumps({"overhead": overhead, "billing": rows}, indent=2))


if __name__ == "__main__":
    main()
