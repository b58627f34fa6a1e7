"""The LLM summarizers against real loopback servers speaking the OpenAI and Anthropic protocols."""

from __future__ import annotations

import json
import sys

import pytest

from agentcontext.engine import ContextEngine
from agentcontext.exceptions import ConfigError, SummarizerError, SummarizerTimeout
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, ToolCall
from agentcontext.strategies._base import SummaryRequest
from agentcontext.summarizers import (
    AnthropicSummarizer,
    MissingDependencyError,
    OpenAISummarizer,
    PromptTemplate,
    RetryPolicy,
)
from agentcontext.summarizers._llm import REASONING_HEADROOM
from agentcontext.testing import WordCounter, make_conversation
from llm_servers import LLMServer, Reply, anthropic_ok, closed_port, error, openai_ok, snapshot

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05)


def _request(**kw: object) -> SummaryRequest:
    messages = (
        Message(role="user", content="Fix the failing test in src/app/parser.py"),
        Message(
            role="assistant",
            content="Running the tests.",
            tool_calls=(
                ToolCall(id="c1", name="bash", arguments=json.dumps({"command": "pytest -x tests/"})),
            ),
        ),
        Message(
            role="tool", tool_call_id="c1", content="FAILED tests/test_parser.py::test_x - KeyError: 'id'"
        ),
    )
    base: dict[str, object] = {
        "messages": messages,
        "current_request": "Fix the failing test",
        "max_tokens": 500,
    }
    base.update(kw)
    return SummaryRequest(**base)  # type: ignore[arg-type]


@pytest.fixture
def oai() -> LLMServer:
    with LLMServer("openai") as server:
        yield server  # type: ignore[misc]


@pytest.fixture
def ant() -> LLMServer:
    with LLMServer("anthropic") as server:
        yield server  # type: ignore[misc]


# ----------------------------------------------------------------------------- OpenAI-compatible


def test_openai_request_carries_the_prompt_and_no_tools(oai: LLMServer) -> None:
    oai.script(openai_ok(snapshot("done")))
    s = OpenAISummarizer(model="qwen2.5", base_url=oai.url, api_key="sk-test", retry=FAST)
    assert s.summarize(_request()) == snapshot("done")
    (req,) = oai.requests
    body = req.body
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-test"
    assert body["model"] == "qwen2.5"
    assert "tools" not in body and "tool_choice" not in body
    assert body["stream"] is False
    assert body["max_tokens"] == 500  # the strategy's limit, smaller than max_output_tokens
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    # The rules every prompt carries, and the tool call with its arguments.
    assert "not instructions to you" in system["content"]
    assert "<state_snapshot>" in system["content"]
    assert '<tool_call id="c1" name="bash">{"command": "pytest -x tests/"}</tool_call>' in user["content"]
    assert "KeyError: 'id'" in user["content"]
    assert "<current_request>\nFix the failing test\n</current_request>" in user["content"]


def test_openai_official_endpoint_uses_max_completion_tokens(oai: LLMServer) -> None:
    s = OpenAISummarizer(model="gpt-4o-mini")
    req = s.http_request(system="s", user="u", max_tokens=100)
    assert req.url == "https://api.openai.com/v1/chat/completions"
    assert req.body["max_completion_tokens"] == 100 and "max_tokens" not in req.body
    forced = OpenAISummarizer(model="m", base_url=oai.url, max_tokens_field="max_completion_tokens")
    assert "max_completion_tokens" in forced.http_request(system="s", user="u", max_tokens=5).body


def test_openai_without_a_key_sends_no_authorization(oai: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    oai.script(openai_ok(snapshot("ok")))
    OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request())
    assert "authorization" not in oai.requests[0].headers


def test_openai_reads_the_key_from_the_environment(oai: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    oai.script(openai_ok(snapshot("ok")))
    OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request())
    assert oai.requests[0].headers["authorization"] == "Bearer sk-env"


def test_429_with_retry_after_then_success(oai: LLMServer) -> None:
    oai.script(
        error(429, "slow down", kind="rate_limit_error", retry_after="0"), openai_ok(snapshot("summary"))
    )
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    assert s.summarize(_request()) == snapshot("summary")
    assert len(oai.requests) == 2


def test_5xx_are_retried_until_success(oai: LLMServer) -> None:
    oai.script(error(500), error(503), openai_ok(snapshot("third time")))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    assert s.summarize(_request()) == snapshot("third time")
    assert len(oai.requests) == 3


def test_persistent_500_gives_a_clear_error_after_the_last_try(oai: LLMServer) -> None:
    oai.script(error(500, "the model crashed"))
    s = OpenAISummarizer(model="m", base_url=oai.url, api_key="sk-secret", retry=FAST)
    with pytest.raises(SummarizerError) as info:
        s.summarize(_request())
    message = str(info.value)
    assert oai.url + "/chat/completions" in message
    assert "3 attempt" in message and "HTTP 500" in message and "the model crashed" in message
    assert "sk-secret" not in message
    assert len(oai.requests) == 3


def test_a_bad_request_is_not_retried(oai: LLMServer) -> None:
    oai.script(error(404, "model 'nope' not found", kind="not_found_error"))
    s = OpenAISummarizer(model="nope", base_url=oai.url, retry=FAST)
    with pytest.raises(SummarizerError, match=r"HTTP 404.*model 'nope' not found.*not retried"):
        s.summarize(_request())
    assert len(oai.requests) == 1


def test_a_slow_reply_within_the_timeout_is_used(oai: LLMServer) -> None:
    oai.script(Reply(delay=0.3, body=openai_ok(snapshot("worth the wait")).body))
    s = OpenAISummarizer(model="m", base_url=oai.url, timeout=10, retry=FAST)
    assert s.summarize(_request()) == snapshot("worth the wait")
    assert len(oai.requests) == 1


def test_a_reply_later_than_the_timeout_is_a_timeout_error(oai: LLMServer) -> None:
    oai.script(Reply(delay=5.0, body=openai_ok("late").body))
    s = OpenAISummarizer(model="m", base_url=oai.url, timeout=0.2, retry=FAST)
    with pytest.raises(SummarizerTimeout, match=r"no complete reply within the 0.2 s timeout"):
        s.summarize(_request())
    assert len(oai.requests) == 1  # the one attempt used the whole deadline: no retry after it


def test_empty_replies_are_retried_then_refused(oai: LLMServer) -> None:
    oai.script(openai_ok(""), openai_ok("   "), openai_ok(None))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    with pytest.raises(SummarizerError, match="empty"):
        s.summarize(_request())
    assert len(oai.requests) == 3
    oai.script(openai_ok(""), openai_ok(snapshot("now it is there")))
    assert s.summarize(_request()) == snapshot("now it is there")


def test_a_reply_cut_at_the_output_limit_is_refused(oai: LLMServer) -> None:
    oai.script(openai_ok("<state_snapshot><overall_goal>half a summ", finish_reason="length"))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    with pytest.raises(SummarizerError, match="cut at the output limit"):
        s.summarize(_request())
    assert len(oai.requests) == 1  # retrying would cut it again


def test_dropped_connection_is_retried(oai: LLMServer) -> None:
    oai.script(Reply(drop=True), openai_ok(snapshot("after the drop")))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    assert s.summarize(_request()) == snapshot("after the drop")


def test_connection_refused_is_a_summarizer_error() -> None:
    with closed_port() as url:
        s = OpenAISummarizer(model="m", base_url=url, retry=FAST)
        with pytest.raises(SummarizerError, match="transport error"):
            s.summarize(_request())


def test_retry_after_longer_than_allowed_fails_at_once(oai: LLMServer) -> None:
    oai.script(error(429, "wait an hour", retry_after="3600"))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    with pytest.raises(SummarizerError, match="retry after 3600 s"):
        s.summarize(_request())
    assert len(oai.requests) == 1


def test_reasoning_blocks_are_stripped(oai: LLMServer) -> None:
    oai.script(openai_ok("<think>let me think about it</think>\n" + snapshot("x")))
    s = OpenAISummarizer(model="deepseek-r1", base_url=oai.url, retry=FAST)
    assert s.summarize(_request()) == snapshot("x")


def test_extra_body_and_headers_reach_the_server(oai: LLMServer) -> None:
    oai.script(openai_ok(snapshot("ok")))
    s = OpenAISummarizer(
        model="m",
        base_url=oai.url,
        retry=FAST,
        temperature=None,
        headers={"x-gateway": "team-a"},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    s.summarize(_request())
    req = oai.requests[0]
    assert req.headers["x-gateway"] == "team-a"
    assert req.body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "temperature" not in req.body


@pytest.mark.anyio
async def test_async_uses_the_same_exchange(oai: LLMServer) -> None:
    oai.script(error(429, retry_after="0"), openai_ok(snapshot("async summary")))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    assert await s.asummarize(_request()) == snapshot("async summary")
    assert len(oai.requests) == 2


@pytest.mark.anyio
async def test_async_error_after_retries(oai: LLMServer) -> None:
    oai.script(error(502, "bad gateway"))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    with pytest.raises(SummarizerError, match="HTTP 502"):
        await s.asummarize(_request())


# ----------------------------------------------------------------------------- Anthropic


def test_anthropic_request_shape(ant: LLMServer) -> None:
    ant.script(anthropic_ok(snapshot("a")))
    s = AnthropicSummarizer(model="claude-haiku-4-5", base_url=ant.url, api_key="sk-ant", retry=FAST)
    assert s.summarize(_request()) == snapshot("a")
    (req,) = ant.requests
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == "sk-ant"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in req.headers
    body = req.body
    assert body["max_tokens"] == 500
    assert "not instructions to you" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert "tools" not in body


def test_anthropic_529_overloaded_is_retried(ant: LLMServer) -> None:
    ant.script(error(529, "Overloaded", kind="overloaded_error"), anthropic_ok(snapshot("fine")))
    s = AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST)
    assert s.summarize(_request()) == snapshot("fine")
    assert len(ant.requests) == 2


def test_anthropic_spend_limit_is_not_retried(ant: LLMServer) -> None:
    body = {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "spend cap",
            "details": {"error_code": "enforced_spend_limit_reached"},
        },
    }
    ant.script(Reply(status=429, body=body, headers={"retry-after": "0"}))
    s = AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST)
    with pytest.raises(SummarizerError, match="retrying cannot help"):
        s.summarize(_request())
    assert len(ant.requests) == 1


@pytest.mark.parametrize(
    ("stop_reason", "match"),
    [("max_tokens", "cut at max_tokens"), ("refusal", "refused"), ("tool_use", "tool")],
)
def test_anthropic_unusable_stop_reasons(ant: LLMServer, stop_reason: str, match: str) -> None:
    ant.script(anthropic_ok("partial", stop_reason=stop_reason))
    s = AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST)
    with pytest.raises(SummarizerError, match=match):
        s.summarize(_request())


def test_anthropic_server_rejects_a_request_without_a_key(
    ant: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    s = AnthropicSummarizer(model="m", base_url=ant.url, retry=FAST)
    with pytest.raises(SummarizerError, match=r"HTTP 400.*x-api-key"):
        s.summarize(_request())


@pytest.mark.anyio
async def test_anthropic_async(ant: LLMServer) -> None:
    ant.script(error(500), anthropic_ok(snapshot("async anthropic")))
    s = AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST)
    assert await s.asummarize(_request()) == snapshot("async anthropic")


# ----------------------------------------------------------------------------- configuration


def test_configuration_errors_say_what_to_fix() -> None:
    with pytest.raises(ConfigError, match="base_url must start with http"):
        OpenAISummarizer(model="m", base_url="localhost:8000")
    with pytest.raises(ConfigError, match="unknown summary prompt 'nope'"):
        OpenAISummarizer(model="m", prompt="nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a model"):
        AnthropicSummarizer(model="")
    with pytest.raises(ConfigError, match=r"\$language and \$max_tokens"):
        PromptTemplate(name="x", system="costs $5 per $unit")


def test_missing_httpx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'agentcontext\[openai\]'"):
        OpenAISummarizer(model="m")
    with pytest.raises(ImportError, match=r"agentcontext\[anthropic\]"):
        AnthropicSummarizer(model="m")


def test_the_api_key_is_not_in_the_repr() -> None:
    assert "sk-secret" not in repr(OpenAISummarizer(model="m", api_key="sk-secret"))


# ----------------------------------------------------------------------------- through the engine


def _long_conversation() -> list[Message]:
    # Chat only: no tool results to mask, so the engine must summarize (or drop).
    return make_conversation(5, rounds=12, steps=(0, 0), huge_share=0.0, cjk_share=0.0)


def test_engine_inserts_the_llm_summary_as_a_marked_user_message(oai: LLMServer) -> None:
    oai.script(openai_ok(snapshot("ship it", "[DONE] tests")))
    msgs = _long_conversation()
    counter = WordCounter()
    total = counter.count_messages(msgs)
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    engine = ContextEngine(window=int(total / 0.8), reserve=0, counter=counter, summarizer=s, truncator=None)
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    summaries = [m for m in out if m.metadata.get("agentcontext", {}).get("kind") == "summary"]
    assert len(summaries) == 1
    summary = summaries[0]
    assert summary.role == "user" and summary.role != "system"
    assert f"<context_summary>\n{snapshot('ship it', '[DONE] tests')}\n" in summary.text
    assert check_messages(out) == []
    assert out[0] == msgs[0]  # the system prompt, untouched
    assert [a.kind for a in prepared.report.actions if a.kind == "summarized"] == ["summarized"]
    assert engine.stats.summaries == 1 and engine.stats.summarizer_failures == 0
    assert len(oai.requests) == 1


def test_engine_falls_back_when_the_llm_fails_and_never_inserts_error_text(oai: LLMServer) -> None:
    oai.script(error(500, "INTERNAL KABOOM"))
    msgs = _long_conversation()
    counter = WordCounter()
    total = counter.count_messages(msgs)
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    engine = ContextEngine(window=int(total / 0.8), reserve=0, counter=counter, summarizer=s, truncator=None)
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    assert all("KABOOM" not in m.text for m in out)
    fallbacks = [a for a in prepared.report.actions if a.kind == "fallback"]
    assert fallbacks and fallbacks[0].reason.startswith("summarizer_error: SummarizerError")
    assert "HTTP 500" in fallbacks[0].reason  # the report says why
    assert engine.stats.summarizer_failures == 1
    assert engine.stats.fallbacks == {"summarizer_error": 1}
    # The summary is written offline instead (dropping rounds would lose the user's requests).
    (summarized,) = [a for a in prepared.report.actions if a.kind == "summarized"]
    assert "offline (the summarizer did not deliver: summarizer_error)" in summarized.reason
    assert prepared.report.tokens_after <= prepared.report.target
    assert check_messages(out) == []


def test_engine_writes_offline_what_an_over_long_summary_would_have_covered(oai: LLMServer) -> None:
    oai.script(
        openai_ok(snapshot("word " * 20_000))
    )  # 100 KB: under the reply size cap, over the strategy's room
    msgs = _long_conversation()
    counter = WordCounter()
    total = counter.count_messages(msgs)
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    engine = ContextEngine(window=int(total / 0.8), reserve=0, counter=counter, summarizer=s, truncator=None)
    prepared = engine.prepare(msgs)
    fallbacks = [a for a in prepared.report.actions if a.kind == "fallback"]
    assert fallbacks[0].reason.split(":")[0] in ("not_smaller", "over_target")
    # Not left to the next tier, which dropped the oldest rounds without a summary: written offline.
    assert fallbacks[0].reason.endswith("summarized offline instead")
    summaries = [m for m in prepared.messages if m.metadata.get("agentcontext", {}).get("kind") == "summary"]
    assert len(summaries) == 1 and "word word word" not in summaries[0].text
    assert not [a for a in prepared.report.actions if a.kind == "dropped" and a.strategy != "summarize"]
    assert prepared.report.tokens_after <= engine.budget


@pytest.mark.anyio
async def test_engine_aprepare_with_anthropic(ant: LLMServer) -> None:
    ant.script(anthropic_ok(snapshot("async")))
    msgs = _long_conversation()
    counter = WordCounter()
    total = counter.count_messages(msgs)
    s = AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST)
    engine = ContextEngine(window=int(total / 0.8), reserve=0, counter=counter, summarizer=s, truncator=None)
    prepared = await engine.aprepare(msgs)
    assert any(snapshot("async") in m.text for m in prepared.messages)


# ----------------------------------------------------------------------------- reasoning models


def test_an_openai_reasoning_model_gets_a_request_it_accepts_and_room_to_reason(oai: LLMServer) -> None:
    # The loopback server refuses temperature 0 and max_tokens for o-series and gpt-5 models, as OpenAI and
    # Azure do: every compaction with --summarizer openai:gpt-5-mini failed with a 400 and went offline.
    for model in ("gpt-5-mini", "o4-mini", "azure/o3"):
        oai.script(openai_ok(snapshot("done")))
        s = OpenAISummarizer(model=model, base_url=oai.url, retry=FAST)
        assert s.summarize(_request(max_tokens=500)) == snapshot("done")
        body = oai.requests[-1].body
        assert "temperature" not in body and "max_tokens" not in body
        # The prompt asks for a 500-token summary; the limit leaves the model room to reason first.
        assert body["max_completion_tokens"] == 500 + REASONING_HEADROOM
        assert "under about 500 tokens" in body["messages"][0]["content"]
    oai.script(openai_ok(snapshot("done")))
    plain = OpenAISummarizer(model="qwen2.5", base_url=oai.url, retry=FAST)
    plain.summarize(_request(max_tokens=500))
    body = oai.requests[-1].body
    assert body["temperature"] == 0.0 and body["max_tokens"] == 500  # other models: as before


def test_a_reply_with_only_reasoning_is_not_asked_again_and_says_why(oai: LLMServer, ant: LLMServer) -> None:
    # Retried as "the reply was empty", each of 4 attempts paid for the same reasoning again.
    only_reasoning = openai_ok(None)
    only_reasoning.body["choices"][0]["message"]["reasoning_content"] = "Let me think about the history..."
    cut_think = openai_ok("<think>The user wants a summary. First, the parser")
    for reply in (only_reasoning, cut_think):
        oai.script(reply)
        before = len(oai.requests)
        with pytest.raises(SummarizerError, match="answered only with reasoning.*reasoning_headroom"):
            OpenAISummarizer(model="deepseek-r1", base_url=oai.url, retry=FAST).summarize(_request())
        assert len(oai.requests) - before == 1
    thinking = anthropic_ok("")
    thinking.body["content"] = [{"type": "thinking", "thinking": "The history shows...", "signature": "x"}]
    ant.script(thinking)
    with pytest.raises(SummarizerError, match="answered only with reasoning"):
        AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST).summarize(_request())
    assert len(ant.requests) == 1


def test_a_summarizer_with_a_smaller_window_than_the_agent_gets_requests_that_fit_it(oai: LLMServer) -> None:
    # The summarizer was assumed to read as much as the agent's model: an agent with a large window paired
    # with a model of a small one (a 1M-token agent, a 128k summarizer) sent requests over the summarizer's
    # window, which its provider refused, and every summary fell back to the offline one.
    from agentcontext import ContextEngine, Message, OpenAISummarizer
    from agentcontext.tokens import TiktokenCounter

    oai.respond(lambda body: openai_ok(snapshot("the agent fixed the parser")))
    small = OpenAISummarizer(model="gpt-4", base_url=oai.url, api_key="k", max_output_tokens=1_024)
    window = 8_192  # gpt-4's
    assert small.input_limit is not None and small.input_limit < window - 1_024
    engine = ContextEngine(model="gpt-4.1", window=40_000, reserve=2_000, summarizer=small)
    history = [Message(role="system", content="You help with a parser.")]
    for i in range(40):  # a long chat: nothing to mask, only a summary makes room
        history.append(Message(role="user", content=f"Question {i} about parse_{i}()."))
        history.append(
            Message(role="assistant", content=f"About parse_{i}: " + "it tokenizes the input " * 150)
        )
    prepared = engine.prepare(history)
    assert prepared.report.compacted and not [a for a in prepared.report.actions if a.kind == "fallback"]
    counter = TiktokenCounter("cl100k_base")
    sizes = [
        sum(counter.count_text(m["content"]) for m in r.body["messages"]) + r.body["max_tokens"]
        for r in oai.requests
    ]
    assert len(sizes) > 1 and max(sizes) <= window, sizes  # chunked to fit, every one
    assert OpenAISummarizer(model="a-local-model", base_url=oai.url, api_key="k").input_limit is None
