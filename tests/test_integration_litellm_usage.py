"""The LiteLLM proxy hook feeds each response's usage back: a model counted by estimate learns what its provider bills.

Real ``litellm`` proxy processes (``tests/litellm_proxy.py``) in front of a
loopback provider that bills 1.6 times agentcontext's own estimate of the
request it receives (a third more than the 1.2 the model's ``estimate_ratio`` expects) (`ScriptEstimator`, messages and tools) and rejects a prompt
over its window with OpenAI's 400 ``context_length_exceeded``. The group
``claude-sonnet-4-5`` is counted by estimate, so its engine calibrates. The hook
fills the budget (``fill=True``): every compaction lands just under it, where an
estimate a third short shows.

The promises: with usage fed back, ``Report.correction`` rises to the provider's
ratio and every request the provider receives fits its window; without it (the
same engine, deaf to usage: main's hook) the growing conversation is rejected as
too long. Each usage is fed against the report of the request it answers, even
with conversations of very different sizes in flight at once; a streamed
request's usage is fed too; with sessions, the usage is logged on the
conversation's session.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from agentcontext._api import feed_usage
from agentcontext.engine import ContextEngine
from agentcontext.formats import openai as oai
from agentcontext.integrations.litellm import ContextHook
from agentcontext.messages import Message
from agentcontext.models import ESTIMATE_MARGIN
from agentcontext.session import Session
from agentcontext.tokens import ScriptEstimator
from litellm_proxy import MASTER_KEY, Proxy, start_proxies
from providers import ProviderServer, Reply, Request

WINDOW = 8_000
MAX_TOKENS = 2_000
"""What each request keeps for its reply: the provider's limit for the prompt is ``WINDOW - MAX_TOKENS``."""
RATIO = 1.6
"""What the provider bills per token of agentcontext's estimate."""
GROUP = "claude-sonnet-4-5"
SYSTEM = "You are a careful engineer. Use the run tool until the task is done."
OUTPUT_LINE = "line of output for the step: lorem ipsum dolor sit amet\n"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a step of the build and return its output.",
            "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
        },
    }
]

_ESTIMATE = ContextEngine(window=10**7, reserve=0, counter=ScriptEstimator())


def bill(api: str, body: dict[str, Any]) -> int:
    """The provider's count: 1.6 times agentcontext's estimate of the messages and tools it received."""
    assert api == "openai"
    messages = oai.to_messages(body["messages"], unknown="keep")
    return math.ceil(RATIO * _ESTIMATE.count(messages, tools=body.get("tools")))


def policy(request: Request) -> Reply:
    return Reply(tool_calls=[("run", {"step": len(request.texts())})])


def hook_source(*, learn: bool = True, sessions: str | None = None) -> str:
    """An agentcontext_hook.py whose engines write each report and each usage fed to them to reports.jsonl."""
    return f"""
import json, os, threading
from agentcontext.engine import ContextEngine
from agentcontext.integrations.litellm import ContextHook

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reports.jsonl")
LOCK = threading.Lock()


def write(entry):
    with LOCK, open(OUT, "a") as f:
        f.write(json.dumps(entry) + "\\n")


class Recorded(ContextEngine):
    def prepare(self, *args, **kwargs):
        prepared = super().prepare(*args, **kwargs)
        r = prepared.report
        write({{"prepared": r.tokens_after, "correction": r.correction, "budget": r.budget}})
        return prepared

    def record_usage(self, report, prompt_tokens):
        write({{"usage": prompt_tokens, "counted": report.tokens_after}})
        return super().record_usage(report, prompt_tokens) if {learn!r} else False


hook = ContextHook(
    fill=True,
    sessions={sessions!r},
    engine=lambda spec, window, reserve: Recorded(spec, window=window, reserve=reserve),
)
"""


def config(upstream: ProviderServer) -> dict[str, Any]:
    return {
        "model_list": [
            {
                "model_name": GROUP,
                "litellm_params": {
                    "model": f"openai/{GROUP}",
                    "api_base": upstream.openai_url,
                    "api_key": "test",
                },
                "model_info": {"max_input_tokens": WINDOW},
            }
        ],
        "litellm_settings": {"callbacks": "agentcontext_hook.hook"},
    }


def entries(proxy: Proxy, key: str) -> list[dict[str, Any]]:
    path = proxy.log.parent / "reports.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if key in e]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ProviderServer, ProviderServer, ProviderServer]]:
    with (
        ProviderServer(window=WINDOW, policy=policy, bill=bill) as learning,
        ProviderServer(window=WINDOW, policy=policy, bill=bill) as deaf,
        ProviderServer(window=WINDOW, policy=policy, bill=bill) as sessions,
    ):
        yield learning, deaf, sessions


@pytest.fixture(scope="module")
def proxies(
    upstreams: tuple[ProviderServer, ...], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proxy, ...]]:
    learning, deaf, stored = upstreams
    base = tmp_path_factory.mktemp("usage")
    with start_proxies(
        [
            (config(learning), base / "learning"),
            (config(deaf), base / "deaf"),
            (config(stored), base / "sessions"),
        ],
        hooks=[hook_source(), hook_source(learn=False), hook_source(sessions=str(base / "store"))],
    ) as running:
        yield running


def agent(proxy: Proxy, steps: int, *, name: str, size: int = 60, stream: bool = False) -> int:
    """A chat agent that keeps its whole history; returns the step the provider rejected (-1: none)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Build the project ({name}) step by step."},
    ]
    for step in range(steps):
        body = {"model": GROUP, "messages": messages, "tools": TOOLS, "max_tokens": MAX_TOKENS}
        headers = {"authorization": f"Bearer {MASTER_KEY}", "x-agentcontext-session": name}
        if stream:
            with httpx.stream(
                "POST",
                proxy.url + "/chat/completions",
                json={**body, "stream": True},
                headers=headers,
                timeout=60,
            ) as response:
                assert response.status_code == 200, response.read()
                for _ in response.iter_lines():
                    pass
            return -1
        response = httpx.post(proxy.url + "/chat/completions", json=body, headers=headers, timeout=60)
        if response.status_code != 200:
            assert "context_length_exceeded" in response.text or "maximum context length" in response.text
            return step
        reply = response.json()["choices"][0]["message"]
        messages.append({k: reply[k] for k in ("role", "content", "tool_calls") if reply.get(k) is not None})
        for call in reply.get("tool_calls") or []:
            output = f"step {step} output\n" + OUTPUT_LINE * size
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return -1


def test_usage_teaches_the_estimate_the_providers_ratio_and_every_request_fits(
    proxies: tuple[Proxy, ...], upstreams: tuple[ProviderServer, ...]
) -> None:
    learning, deaf, _ = proxies
    learning_upstream, deaf_upstream, _ = upstreams
    limit = WINDOW - MAX_TOKENS

    # Without feedback (main's hook): the budget is filled with estimated tokens the provider bills 1.6 times.
    rejected_at = agent(deaf, 30, name="deaf")
    assert rejected_at > 0, "the provider never saw a request over its window: the test proves nothing"
    assert max(r.tokens for r in deaf_upstream.requests) > limit
    assert {r["correction"] for r in entries(deaf, "prepared")} == {1.2}  # the model's estimate_ratio

    # With it: the correction rises to the provider's ratio, and every request fits.
    assert agent(learning, 30, name="learning") == -1
    received = learning_upstream.requests
    assert not learning_upstream.rejected
    assert max(r.tokens for r in received) <= limit
    corrections = [r["correction"] for r in entries(learning, "prepared")]
    assert corrections[0] == 1.2
    assert corrections[-1] == pytest.approx(RATIO, abs=0.05)
    # Each request's usage was fed, against that request's own count.
    fed = entries(learning, "usage")
    assert len(fed) == len(received)
    assert [e["usage"] for e in fed] == [r.tokens for r in received]
    print(
        f"\ncorrection learned {corrections[-1]:.3f}; largest request {max(r.tokens for r in received):,} "
        f"of the provider's {limit:,}; without feedback rejected at step {rejected_at} "
        f"({max(r.tokens for r in deaf_upstream.requests):,} tokens)"
    )


def test_each_usage_is_fed_against_its_own_request_with_conversations_in_flight_at_once(
    proxies: tuple[Proxy, ...], upstreams: tuple[ProviderServer, ...]
) -> None:
    learning = proxies[0]
    upstream = upstreams[0]
    before_fed, before_sent = len(entries(learning, "usage")), len(upstream.requests)
    # Conversations of very different sizes at once: one thread's usage fed against another's report would
    # be off by many times the provider's ratio (and clamped by the counter to 1 or 2).
    with ThreadPoolExecutor(6) as pool:
        jobs = [pool.submit(agent, learning, 8, name=f"c{k}", size=2 + 25 * k) for k in range(6)]
        assert [job.result() for job in jobs] == [-1] * 6
    fed = entries(learning, "usage")[before_fed:]
    assert len(fed) == len(upstream.requests) - before_sent == 6 * 8
    for e in fed:
        assert e["usage"] / e["counted"] == pytest.approx(RATIO, rel=0.04), e
    assert not upstream.rejected


def test_a_streamed_requests_usage_is_fed_too(
    proxies: tuple[Proxy, ...], upstreams: tuple[ProviderServer, ...]
) -> None:
    learning = proxies[0]
    upstream = upstreams[0]
    before = len(entries(learning, "usage"))
    agent(learning, 1, name="streamed", stream=True)
    # The proxy asks the provider for the stream's usage (stream_options.include_usage); the success log
    # that carries it comes after the stream ends.
    for _ in range(100):
        if len(entries(learning, "usage")) > before:
            break
        time.sleep(0.05)
    fed = entries(learning, "usage")[before:]
    assert [e["usage"] for e in fed] == [upstream.requests[-1].tokens]
    assert upstream.requests[-1].body.get("stream") is True
    assert upstream.requests[-1].body.get("stream_options") == {"include_usage": True}


def test_with_sessions_the_usage_is_logged_on_the_conversations_session(
    proxies: tuple[Proxy, ...], upstreams: tuple[ProviderServer, ...]
) -> None:
    stored = proxies[2]
    upstream = upstreams[2]
    assert agent(stored, 12, name="logged") == -1
    assert not upstream.rejected
    (path,) = (stored.log.parent.parent / "store").glob("chat-u*-logged.jsonl")  # scoped to the proxy key
    session = Session.open(str(path), read_only=True)
    totals = session.usage_totals
    assert totals.calls == len(upstream.requests) == 12
    assert totals.prompt_tokens == sum(r.tokens for r in upstream.requests)
    assert totals.completion_tokens == 5 * 12
    # The session fed its engine: the correction is the provider's.
    assert entries(stored, "prepared")[-1]["correction"] == pytest.approx(RATIO, abs=0.05)
    session.close()


def test_a_response_without_usage_or_to_a_request_not_prepared_feeds_nothing() -> None:
    fed: list[tuple[int, int]] = []

    class Recorded(ContextEngine):
        def record_usage(self, report: Any, prompt_tokens: int) -> bool:
            fed.append((report.tokens_after, prompt_tokens))
            return super().record_usage(report, prompt_tokens)

    hook = ContextHook(window=WINDOW, engine=lambda spec, w, r: Recorded(spec, window=w, reserve=r))

    def request(call_id: str) -> dict[str, Any]:
        return {
            "model": GROUP,
            "litellm_call_id": call_id,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi " * 200}],
        }

    async def run() -> None:
        for call_id, usage in (
            ("none", None),
            ("zero", {"prompt_tokens": 0}),
            ("billed", {"prompt_tokens": 500}),
        ):
            data = await hook.async_pre_call_hook(None, None, request(call_id), "acompletion")
            await hook.async_post_call_success_hook(data, None, {"usage": usage} if usage else {})
            await hook.async_log_success_event({"litellm_call_id": call_id}, {"usage": usage}, None, None)
        # Not prepared by the hook: a call id it never saw.
        await hook.async_post_call_success_hook(
            {"litellm_call_id": "other"}, None, {"usage": {"prompt_tokens": 9}}
        )
        # Fed once, though two events report it.
        await hook.async_log_success_event(
            {"litellm_call_id": "billed"}, {"usage": {"prompt_tokens": 500}}, None, None
        )

    asyncio.run(run())
    assert [p for _, p in fed] == [500]


def test_a_request_forwarded_unchanged_after_a_failure_teaches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The hook compacted the request, then failed to write it back and forwarded the original: the
    # provider billed the whole conversation, which is no lesson about the compacted one (fed against
    # its report, it read as a 50% undercount and shrank every later request of the model by a third).
    import agentcontext.integrations.litellm as hook_module

    fed: list[int] = []

    class Recorded(ContextEngine):
        def record_usage(self, report: Any, prompt_tokens: int) -> bool:
            fed.append(prompt_tokens)
            return super().record_usage(report, prompt_tokens)

    def cannot_rebuild(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("cannot rebuild a part of the request")

    monkeypatch.setattr(hook_module, "_with_breakpoints", cannot_rebuild)
    hook = ContextHook(window=10_000, engine=lambda spec, w, r: Recorded(spec, window=w, reserve=r))
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(40):
        messages += [
            {"role": "user", "content": f"step {i} " + "lorem ipsum dolor sit amet " * 40},
            {"role": "assistant", "content": "ok " * 20},
        ]
    messages.append({"role": "user", "content": "go on"})

    async def run() -> dict[str, Any]:
        data = {"model": GROUP, "litellm_call_id": "c1", "messages": list(messages)}
        data = await hook.async_pre_call_hook(None, None, data, "acompletion")
        await hook.async_post_call_success_hook(data, None, {"usage": {"prompt_tokens": 30_000}})
        return data

    assert asyncio.run(run())["messages"] == messages  # forwarded as it came
    assert fed == []


def test_a_model_agentcontext_does_not_know_is_counted_with_the_estimates_margin_and_learns_upward() -> None:
    # As a registered model without a tokenizer is: a provider billing less than the estimate must not
    # make the hook pack more than the window holds (it learned 0.8 and allowed 9,375 tokens into 8,000).
    from agentcontext.integrations.litellm import _default_engine

    engine = _default_engine(None, 8_000, 1_000)
    assert engine.budget == int(7_000 * (1 - ESTIMATE_MARGIN))
    prepared = engine.prepare([Message(role="user", content="lorem ipsum dolor sit amet " * 200)])
    feed_usage(engine, prepared.report, round(prepared.report.tokens_after * 0.8))
    assert engine.prepare([Message(role="user", content="again")]).report.budget == engine.budget
