"""The loopback provider the integration tests rely on rejects what the real APIs reject.

If it accepted an orphaned tool result or an over-window prompt, every
integration test built on it would pass for nothing; these tests pin its
verdicts, through the real openai SDK and plain HTTP.
"""

from __future__ import annotations

import httpx
import openai
import pytest

import agentcontext as ac
from agentcontext.formats import openai as oai
from providers import ProviderServer, Reply, tool_loop

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}


def _client(server: ProviderServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


def test_a_valid_tool_exchange_is_answered_and_counted_like_agentcontext_counts_it() -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    ]
    with ProviderServer(policy=tool_loop(steps=1)) as server, _client(server) as client:
        reply = client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    assert (
        reply.choices[0].message.tool_calls and reply.choices[0].message.tool_calls[0].function.name == "run"
    )
    assert server.rejected == []
    ours = ac.counter_for("gpt-4o").count_messages(oai.to_messages(messages))
    assert reply.usage is not None and reply.usage.prompt_tokens == ours


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        (  # a tool result whose call is gone: the orphan LangChain's summarization leaves (#38352)
            [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_1", "content": "x"}],
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (  # a call never answered before the next turn
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                {"role": "user", "content": "again"},
            ],
            "did not have response messages: call_1",
        ),
        (  # a call left unanswered at the end
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            ],
            "did not have response messages",
        ),
        ([{"role": "user", "content": "   "}], "must have content"),
        ([{"role": "wizard", "content": "hi"}], "invalid value 'wizard'"),
    ],
)
def test_what_openai_rejects_is_rejected(messages: list[dict[str, object]], words: str) -> None:
    with ProviderServer() as server, _client(server) as client:
        with pytest.raises(openai.BadRequestError, match=words.replace("(", r"\(").replace(")", r"\)")):
            client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    assert len(server.rejected) == 1


def test_a_prompt_over_the_window_is_rejected_as_context_length_exceeded() -> None:
    long = "word " * 3_000
    with ProviderServer(window=2_000) as server, _client(server) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": long}])
    assert "maximum context length is 2000 tokens" in str(caught.value)
    assert server.rejected[0].tokens > 2_000


def test_the_reply_budget_counts_against_the_window() -> None:
    text = "word " * 900  # about 900 tokens: fits 2,000, not 2,000 less a 1,500-token reply
    with ProviderServer(window=2_000) as server, _client(server) as client:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": text}])
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": text}], max_tokens=1_500
            )


def test_streaming_replies_carry_the_tool_calls() -> None:
    with ProviderServer(policy=tool_loop(steps=1)) as server, _client(server) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "go"}], stream=True
            )
        )
    calls = [c for chunk in chunks for c in (chunk.choices[0].delta.tool_calls or []) if chunk.choices]
    assert calls and calls[0].function is not None and calls[0].function.name == "run"


def test_anthropic_tool_results_must_answer_the_previous_tool_use() -> None:
    good = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
    ]
    orphan = [
        {"role": "user", "content": "list"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
    ]
    with ProviderServer(policy=lambda _r: Reply(text="done")) as server:
        ok = httpx.post(
            server.anthropic_url + "/v1/messages",
            json={"model": "claude", "max_tokens": 100, "system": "be brief", "messages": good},
        )
        bad = httpx.post(
            server.anthropic_url + "/v1/messages",
            json={"model": "claude", "max_tokens": 100, "messages": orphan},
        )
    assert ok.status_code == 200 and ok.json()["content"][0]["text"] == "done"
    assert bad.status_code == 400 and "unexpected `tool_use_id`" in bad.json()["error"]["message"]
    assert server.requests[0].texts()[0] == "be brief"
