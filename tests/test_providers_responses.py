"""The loopback provider's ``/v1/responses`` rejects what the Responses API rejects, through the real openai SDK.

The Agents SDK and LiteLLM tests rely on these verdicts: if the server took an
orphaned output or a reasoning item cut from its response, every test built on
it would pass for nothing.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import agentcontext as ac
from agentcontext.formats import responses
from providers import ProviderServer, Reply, tool_loop

CALL = {"type": "function_call", "call_id": "call_1", "name": "run", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "a.py"}


def _client(server: ProviderServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


def test_a_valid_exchange_is_answered_counted_and_its_reasoning_tied_to_its_items() -> None:
    items = [{"role": "user", "content": "list the files"}, CALL, OUTPUT]
    with ProviderServer(policy=tool_loop(steps=1), reasoning=True) as server, _client(server) as client:
        reply = client.responses.create(model="gpt-4o", instructions="Be terse.", input=items)  # type: ignore[arg-type]
        kinds = [item.type for item in reply.output]
        assert kinds == ["reasoning", "function_call"]
        assert reply.output[0].encrypted_content  # type: ignore[union-attr]
        # The reply's call sent back without its reasoning item is refused, as the API does.
        call = reply.output[1].model_dump(exclude_none=True)
        back = [*items, call, {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}]
        with pytest.raises(openai.BadRequestError, match="without its required 'reasoning' item"):
            client.responses.create(model="gpt-4o", input=back)  # type: ignore[arg-type]
        whole = [*items, reply.output[0].model_dump(exclude_none=True), *back[3:]]
        client.responses.create(model="gpt-4o", input=whole)  # type: ignore[arg-type]
    assert len(server.rejected) == 1
    first = server.requests[0]
    assert first.tokens >= ac.counter_for("gpt-4o").count_messages(responses.to_messages(items))
    assert reply.usage is not None and reply.usage.input_tokens == first.tokens


@pytest.mark.parametrize(
    ("items", "words"),
    [
        (
            [{"role": "user", "content": "hi"}, OUTPUT],
            "No tool call found for function call output with call_id call_1",
        ),
        ([{"role": "user", "content": "hi"}, CALL], "No tool output found for function call call_1"),
        (
            [
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"role": "user", "content": "x"},
            ],
            "Item 'rs_1' of type 'reasoning' was provided without its required following item",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"type": "custom_tool_call_output", "call_id": "call_1", "output": "x"},
                CALL,
                OUTPUT,
            ],
            "No tool call found for custom tool call output",
        ),
        ([{"role": "wizard", "content": "hi"}], "Invalid value: 'wizard'"),
        ([{"type": "hologram", "id": "h"}], "Invalid value: 'hologram'"),
    ],
)
def test_what_the_responses_api_rejects_is_rejected(items: list[dict[str, Any]], words: str) -> None:
    with ProviderServer() as server, _client(server) as client:
        with pytest.raises(openai.BadRequestError, match=words):
            client.responses.create(model="gpt-4o", input=items)  # type: ignore[arg-type]
    assert len(server.rejected) == 1


def test_an_input_over_the_window_is_rejected_as_context_length_exceeded() -> None:
    with ProviderServer(window=2_000) as server, _client(server) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="gpt-4o", input="word " * 3_000)
    assert "exceeds the context window of this model (2000 tokens)" in str(caught.value)
    assert server.rejected[0].tokens > 2_000


def test_a_streamed_reply_carries_the_same_items() -> None:
    policy = lambda _r: Reply(text="two files", tool_calls=[("run", {"cmd": "ls"})])  # noqa: E731
    with ProviderServer(policy=policy, reasoning=True) as server, _client(server) as client:
        with client.responses.stream(model="gpt-4o", input="list the files") as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
    assert deltas == ["two files"]
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "two files"
