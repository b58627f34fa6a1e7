"""Pydantic AI integration benchmark: what `ContextCapability` adds to an agent step.

At a history of 10,000 Pydantic AI messages (5,000 tool rounds) and a window
large enough that nothing needs compacting, one agent step appends a model
response and the tool's return, then the capability's ``wrap_model_request``
hook runs (where the default, request-only mode prepares what is sent). Side by side in one run:

- **engine alone**: ``ContextEngine.aprepare`` on canonical messages built in
  advance (what the engine itself costs per step);
- **engine + building the two new messages**: the same, with the two new
  canonical `Message` objects built in the step (the least any caller pays);
- **ContextCapability**: the hook itself, with a real ``RunContext`` and
  ``ModelRequestContext`` (converting the new Pydantic AI messages, the engine,
  and the check that nothing changed);
- the **first call** of each, which converts and counts the whole history once.

Run:  python bench/bench_pydantic_ai.py            (1,000 and 10,000 messages; a few minutes on 2 cores)
      python bench/bench_pydantic_ai.py --quick    (1,000 messages only, for a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from typing import Any

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.usage import RunUsage

from agentcontext import ContextEngine, EngineState, Message, ToolCall
from agentcontext.formats import pydantic_ai as pai
from agentcontext.integrations.pydantic_ai import ContextCapability

WINDOW = 10_000_000
TOOLS = [
    ToolDefinition(
        name="read",
        description="Read a file of the project.",
        parameters_json_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    )
]


def round_messages(i: int) -> tuple[ModelResponse, ModelRequest]:
    """One tool round: a call and its return (a few hundred characters, as agents' outputs often are)."""
    output = "\n".join(f"src/module_{i}/file_{n}.py: def handler_{n}(request): return {n}" for n in range(6))
    return (
        ModelResponse(parts=[ToolCallPart("read", {"path": f"src/module_{i}"}, tool_call_id=f"call_{i}")]),
        ModelRequest(parts=[ToolReturnPart("read", output, tool_call_id=f"call_{i}")]),
    )


def canonical_round(i: int, previous: str) -> list[Message]:
    response, request = round_messages(i)
    call = ToolCall(id=f"call_{i}", name="read", arguments=f'{{"path":"src/module_{i}"}}')
    a = Message(role="assistant", tool_calls=(call,), id=f"{previous}-a")
    return [
        a,
        Message(role="tool", tool_call_id=f"call_{i}", content=request.parts[0].content, id=f"{previous}-t"),
    ]


def history(rounds: int) -> list[Any]:
    out: list[Any] = [
        ModelRequest(parts=[SystemPromptPart("You are a careful agent."), UserPromptPart("Read it all.")])
    ]
    for i in range(rounds):
        out.extend(round_messages(i))
    return out


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


class Alone:
    """The engine on canonical messages, one conversation."""

    def __init__(self, rounds: int, *, build: bool) -> None:
        self.engine = ContextEngine(model="gpt-4o", window=WINDOW)
        self.msgs = pai.to_messages(history(rounds))
        self.tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters_json_schema,
                },
            }
            for t in TOOLS
        ]
        self.rounds, self.build, self.k = rounds, build, 0
        self.state = EngineState.new()

    async def first(self) -> float:
        t0 = time.perf_counter()
        self.state = (await self.engine.aprepare(self.msgs, tools=self.tools, state=self.state)).state
        return time.perf_counter() - t0

    async def step(self) -> float:
        k, self.k = self.k, self.k + 1
        new = canonical_round(self.rounds + k, f"m{k}") if not self.build else []
        t0 = time.perf_counter()
        self.msgs.extend(canonical_round(self.rounds + k, f"m{k}") if self.build else new)
        prepared = await self.engine.aprepare(self.msgs, tools=self.tools, state=self.state)
        elapsed = time.perf_counter() - t0
        assert prepared.compaction is None
        self.state = prepared.state
        return elapsed


class WithCapability:
    """`ContextCapability.wrap_model_request` with a real RunContext and ModelRequestContext.

    The handler (the model call) returns a response made in advance and records what it was handed.
    """

    def __init__(self, rounds: int) -> None:
        self.cap = ContextCapability(ContextEngine(model="gpt-4o", window=WINDOW))
        self.model = TestModel()
        self.msgs = history(rounds)
        self.ctx = RunContext(
            deps=None, model=self.model, usage=RunUsage(), messages=self.msgs, conversation_id="bench"
        )
        self.params = ModelRequestParameters(function_tools=TOOLS)
        self.rounds, self.k = rounds, 0
        self.sent: list[Any] | None = None
        self.reply = ModelResponse(parts=[TextPart("ok")])

    async def handler(self, rc: ModelRequestContext) -> ModelResponse:
        self.sent = rc.messages
        return self.reply

    def request(self) -> ModelRequestContext:
        # Pydantic AI copies the history into each request context itself (not timed).
        return ModelRequestContext(
            model=self.model, messages=self.msgs[:], model_settings=None, model_request_parameters=self.params
        )

    async def first(self) -> float:
        rc = self.request()
        t0 = time.perf_counter()
        await self.cap.wrap_model_request(self.ctx, request_context=rc, handler=self.handler)
        return time.perf_counter() - t0

    async def step(self) -> float:
        k, self.k = self.k, self.k + 1
        self.msgs.extend(round_messages(self.rounds + k))
        rc = self.request()
        t0 = time.perf_counter()
        await self.cap.wrap_model_request(self.ctx, request_context=rc, handler=self.handler)
        elapsed = time.perf_counter() - t0
        assert self.sent is rc.messages and self.cap.last is not None and self.cap.last.compaction is None
        return elapsed


async def measure(rounds: int, steps: int) -> list[tuple[str, float | None, float, float]]:
    """``(what, first call ms, median µs per step, median of per-step ratios to the engine alone)``.

    The three run their steps in turn, so a busy machine slows them alike.
    """
    runners: list[tuple[str, Any]] = [
        ("engine alone (messages built in advance)", Alone(rounds, build=False)),
        ("engine + building the 2 new messages", Alone(rounds, build=True)),
        ("ContextCapability.wrap_model_request", WithCapability(rounds)),
    ]
    firsts = [await r.first() for _, r in runners]
    samples: list[list[float]] = [[] for _ in runners]
    for _ in range(steps):
        for i, (_, r) in enumerate(runners):
            samples[i].append(await r.step())
    base = samples[0]
    return [
        (
            name,
            firsts[i] * 1e3 if i != 1 else None,
            median_us(samples[i]),
            statistics.median(s / b for s, b in zip(samples[i], base, strict=True)),
        )
        for i, (name, _) in enumerate(runners)
    ]


def warm_up() -> None:
    """Load the tokenizer and build Pydantic AI's serializers once, so no first call pays for them."""
    engine = ContextEngine(model="gpt-4o", window=WINDOW)
    engine.prepare(pai.to_messages(history(2)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1,000 messages only")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    sizes = [500] if args.quick else [500, 5_000]
    print(
        f"Python {platform.python_version()}, {platform.machine()}; {args.steps} steps per size, median per step",
        file=sys.stderr,
    )
    warm_up()
    print("| messages | what | first call | per step | per step / engine alone's (median of pairs) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for rounds in sizes:
        n = 1 + 2 * rounds
        for name, first, per_step, ratio in asyncio.run(measure(rounds, args.steps)):
            first_text = f"{first:,.1f} ms" if first is not None else ""
            print(f"| {n:,} | {name} | {first_text} | {per_step:,.0f} µs | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
